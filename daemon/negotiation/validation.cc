#include "daemon/negotiation/validation.h"

#include "absl/strings/str_cat.h"
#include "proto/submit_check.h"

namespace ard::negotiation {
namespace {

using wire::Collective;

absl::Status Mismatch(const std::string& message) {
  return absl::FailedPreconditionError(message);
}

std::string Shape(const wire::Submit& s) { return wire::ShapeString(s.shape, s.ndims); }

bool SameShape(const wire::Submit& a, const wire::Submit& b) {
  if (a.ndims != b.ndims) return false;
  for (uint32_t i = 0; i < a.ndims; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

bool Reduces(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReducescatter;
}

// Adasum (daemon/collectives/adasum.h) is an allreduce of host float tensors.
absl::Status ValidateAdasum(const TensorRequest& r) {
  if (r.meta.reduce_op != static_cast<uint32_t>(wire::ReduceOp::kAdasum)) return absl::OkStatus();
  const auto dtype = static_cast<wire::DataType>(r.meta.dtype);
  std::string why;
  if (r.collective() != Collective::kAllreduce) {
    why = absl::StrCat(CollectiveName(r.collective()), " does not support it (allreduce does)");
  } else if (dtype != wire::DataType::kFloat16 && dtype != wire::DataType::kFloat32 &&
             dtype != wire::DataType::kFloat64) {
    why = absl::StrCat("it needs float16, float32 or float64, not ", DataTypeName(r.meta.dtype));
  } else if (r.gpu.has_value()) {
    why = "it reduces host (CPU) memory only, not GPU tensors";
  }
  if (why.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Adasum of ", r.name(), ": ", why, "."));
}

// Rules that need only one request.
absl::Status ValidateOne(const TensorRequest& r, int job_size) {
  const Collective c = r.collective();
  const char* name = CollectiveName(c);
  if (Reduces(c)) {
    const auto dtype = static_cast<wire::DataType>(r.meta.dtype);
    if (dtype == wire::DataType::kBool || dtype == wire::DataType::kInt16 ||
        dtype == wire::DataType::kUint16) {
      return absl::InvalidArgumentError(absl::StrCat(name, " does not support dtype ",
                                                     DataTypeName(r.meta.dtype), " (tensor ",
                                                     r.name(), ")"));
    }
    if (auto s = ValidateAdasum(r); !s.ok()) return s;
  }
  if (c == Collective::kBroadcast && (r.meta.root_rank < 0 || r.meta.root_rank >= job_size)) {
    return absl::InvalidArgumentError(absl::StrCat("Invalid root rank ", r.meta.root_rank,
                                                   " for BROADCAST of ", r.name(),
                                                   " in a job of size ", job_size, "."));
  }
  if (c == Collective::kAlltoall) {
    if (!r.splits.empty() && static_cast<int>(r.splits.size()) != job_size) {
      return absl::InvalidArgumentError(absl::StrCat("ALLTOALL of ", r.name(), " has ",
                                                     r.splits.size(), " splits for ", job_size,
                                                     " ranks."));
    }
    if (r.splits.empty() && r.meta.shape[0] % job_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ALLTOALL of ", r.name(), " without splits needs the first dimension (",
          r.meta.shape[0], ") to be divisible by the number of ranks (", job_size, ")."));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePair(const TensorRequest& a, const TensorRequest& b) {
  const Collective c = a.collective();
  const char* name = CollectiveName(c);
  if (a.meta.collective != b.meta.collective) {
    return Mismatch(absl::StrCat("Mismatched collective operations: One rank did an ", name,
                                 ", but another rank did an ", CollectiveName(b.collective()),
                                 "."));
  }
  if (c == Collective::kBarrier || c == Collective::kJoin) return absl::OkStatus();
  if (a.gpu.has_value() != b.gpu.has_value()) {
    return Mismatch(absl::StrCat("Mismatched memory for ", a.name(), ": rank ", a.rank,
                                 " submitted it from ", a.gpu ? "GPU" : "host",
                                 " memory, but rank ", b.rank, " from ", b.gpu ? "GPU" : "host",
                                 " memory."));
  }
  if (a.meta.dtype != b.meta.dtype) {
    return Mismatch(absl::StrCat("Mismatched data types: One rank had type ",
                                 DataTypeName(a.meta.dtype), ", but another rank had type ",
                                 DataTypeName(b.meta.dtype), "."));
  }
  if (c == Collective::kAllgather && a.gpu && a.meta.ndims > 0 && b.meta.ndims > 0 &&
      a.meta.shape[0] != b.meta.shape[0]) {
    // The device path reserves size x input of staging per rank (client/session_gpu.cc).
    return absl::InvalidArgumentError(
        absl::StrCat("ALLGATHER of GPU tensor ", a.name(),
                     ": every rank's first dimension must be equal for "
                     "device tensors (rank ",
                     a.rank, " has ", a.meta.shape[0], ", rank ", b.rank, " has ", b.meta.shape[0],
                     "); use host tensors for uneven allgather"));
  }
  if (c == Collective::kAllgather || c == Collective::kAlltoall) {
    if (a.meta.ndims != b.meta.ndims) {
      return Mismatch(absl::StrCat("Mismatched ", name, " tensor shapes: One rank sent a tensor of rank ",
                                   a.meta.ndims, ", but another rank sent a tensor of rank ",
                                   b.meta.ndims, "."));
    }
    for (uint32_t d = 1; d < a.meta.ndims; ++d) {
      if (a.meta.shape[d] != b.meta.shape[d]) {
        return Mismatch(absl::StrCat(
            "Mismatched ", name, " tensor shapes: One rank sent a tensor with dimension ", d,
            " equal to ", a.meta.shape[d], ", but another rank sent a tensor with dimension ", d,
            " equal to ", b.meta.shape[d], "."));
      }
    }
  } else if (!SameShape(a.meta, b.meta)) {
    return Mismatch(absl::StrCat("Mismatched ", name, " tensor shapes: One rank sent a tensor of shape ",
                                 Shape(a.meta), ", but another rank sent a tensor of shape ",
                                 Shape(b.meta), "."));
  }
  if (Reduces(c)) {
    if (a.meta.reduce_op != b.meta.reduce_op) {
      return Mismatch(absl::StrCat("Mismatched ", name, " reduction operations: One rank specified ",
                                   ReduceOpName(a.meta.reduce_op), ", but another rank specified ",
                                   ReduceOpName(b.meta.reduce_op), "."));
    }
    if (a.meta.prescale != b.meta.prescale) {
      return Mismatch(absl::StrCat("Mismatched prescale factors: One rank sent factor ",
                                   a.meta.prescale, ", but another rank sent factor ",
                                   b.meta.prescale, "."));
    }
    if (a.meta.postscale != b.meta.postscale) {
      return Mismatch(absl::StrCat("Mismatched postscale factors: One rank sent factor ",
                                   a.meta.postscale, ", but another rank sent factor ",
                                   b.meta.postscale, "."));
    }
  }
  if (c == Collective::kBroadcast && a.meta.root_rank != b.meta.root_rank) {
    return Mismatch(absl::StrCat("Mismatched BROADCAST root ranks: One rank specified root rank ",
                                 a.meta.root_rank, ", but another rank specified root rank ",
                                 b.meta.root_rank, "."));
  }
  if (a.meta.group_id != b.meta.group_id || a.meta.group_size != b.meta.group_size) {
    return Mismatch(absl::StrCat("Mismatched groups for ", a.name(),
                                 ": One rank sent it in group ", a.meta.group_id, " of size ",
                                 a.meta.group_size, ", but another rank in group ",
                                 b.meta.group_id, " of size ", b.meta.group_size, "."));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateReadyTensor(const ReadyTensor& tensor, int job_size) {
  const TensorRequest* first = nullptr;
  for (const auto& r : tensor.ranks) {
    if (!r) continue;
    if (auto s = ValidateOne(*r, job_size); !s.ok()) return s;
    if (first == nullptr) {
      first = &*r;
    } else if (auto s = ValidatePair(*first, *r); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace ard::negotiation

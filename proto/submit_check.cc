#include "proto/submit_check.h"

#include <climits>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ard::wire {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("bad frame: ", what));
}

// A fixed char field must hold a NUL within its size.
bool Terminated(const char* field, size_t size) { return memchr(field, '\0', size) != nullptr; }

}  // namespace

absl::Status ValidateSubmit(const Submit& s, const std::vector<int64_t>& splits) {
  const auto collective = static_cast<Collective>(s.collective);
  if (s.collective < 1 || s.collective > static_cast<uint32_t>(Collective::kJoin)) {
    return Bad(absl::StrCat("unknown collective ", s.collective));
  }
  if (!Terminated(s.name, sizeof(s.name))) return Bad("tensor name not NUL-terminated");
  if (s.name[0] == '\0') return Bad("empty tensor name");
  const bool tensorless = collective == Collective::kBarrier || collective == Collective::kJoin;
  if (tensorless) {
    if (s.bytes != 0 || s.ndims != 0) return Bad("barrier/join carry no tensor");
    return absl::OkStatus();
  }
  if (DataTypeSize(s.dtype) == 0) return Bad(absl::StrCat("unknown dtype ", s.dtype));
  const bool reduces =
      collective == Collective::kAllreduce || collective == Collective::kReducescatter;
  if (reduces && (s.reduce_op < 1 || s.reduce_op > static_cast<uint32_t>(ReduceOp::kAdasum))) {
    return Bad(absl::StrCat("unknown reduce op ", s.reduce_op));
  }
  if (!std::isfinite(s.prescale) || !std::isfinite(s.postscale)) {
    return Bad("prescale/postscale must be finite");
  }
  if (s.ndims > static_cast<uint32_t>(kMaxDims)) {
    return Bad(absl::StrCat("ndims ", s.ndims, " > ", kMaxDims));
  }
  const int64_t elements = NumElements(s.shape, s.ndims);
  if (elements < 0) return Bad(absl::StrCat("shape ", ShapeString(s.shape, s.ndims)));
  const uint64_t expect = static_cast<uint64_t>(elements) * DataTypeSize(s.dtype);
  if (elements > 0 && expect / elements != DataTypeSize(s.dtype)) return Bad("size overflow");
  if (expect > kMaxTensorBytes) {
    return Bad(absl::StrCat("tensor of ", expect, " bytes exceeds the limit of ", kMaxTensorBytes));
  }
  if (s.bytes != expect) {
    return Bad(absl::StrCat("bytes ", s.bytes, " != ", expect, " for shape ",
                            ShapeString(s.shape, s.ndims)));
  }
  if (s.offset % kSlotAlignment != 0) {
    return Bad(absl::StrCat("offset ", s.offset, " not ", kSlotAlignment, "-byte aligned"));
  }
  if (s.offset + s.bytes < s.offset) return Bad("offset + bytes overflows");
  if ((collective == Collective::kAllgather || collective == Collective::kAlltoall ||
       collective == Collective::kReducescatter) &&
      s.ndims == 0) {
    return Bad("allgather/alltoall/reducescatter need a tensor of rank >= 1");
  }
  if (s.group_id < -1 || (s.group_id >= 0 && s.group_size < 1)) return Bad("group id/size");
  if (!splits.empty()) {
    if (collective != Collective::kAlltoall) return Bad("splits are for alltoall only");
    int64_t total = 0;
    for (int64_t v : splits) {
      if (v < 0) return Bad("negative split");
      // Huge splits must not overflow the sum (undefined behaviour; found by tests/fuzz).
      if (__builtin_add_overflow(total, v, &total)) return Bad("splits sum overflows");
    }
    if (total != s.shape[0]) {
      return Bad(absl::StrCat("splits sum to ", total, " but the first dimension is ", s.shape[0]));
    }
  }
  return absl::OkStatus();
}

int64_t NumElements(const int64_t* shape, uint32_t ndims) {
  int64_t n = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    if (shape[i] < 0) return -1;
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

std::string ShapeString(const int64_t* shape, uint32_t ndims) {
  return absl::StrCat("[", absl::StrJoin(shape, shape + ndims, ", "), "]");
}

}  // namespace ard::wire

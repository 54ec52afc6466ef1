#include "ctl/bench_nccl.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ctl/bench_cuda.h"
#include "ctl/bench_layout.h"
#include "ctl/bench_pattern.h"
#include "ctl/bench_worker_lines.h"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

using Clock = std::chrono::steady_clock;

// nccl.h's ABI, written out (the CLI builds without the toolkit).
using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
using cudaStream_t = BenchCuda::CUstream;

struct Nccl {
  ncclResult_t (*GetVersion)(int* version);
  ncclResult_t (*CommInitAll)(ncclComm_t* comms, int ndev, const int* devlist);
  ncclResult_t (*CommDestroy)(ncclComm_t comm);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*AllReduce)(const void* send, void* recv, size_t count, int dtype, int op,
                            ncclComm_t comm, cudaStream_t stream);
  const char* (*GetErrorString)(ncclResult_t result);
  std::string path;
  int version = 0;

  absl::Status Check(const char* call, ncclResult_t r) const {
    if (r == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(call, ": ", GetErrorString(r), " (", r, ")"));
  }
};

struct LoadedNccl {
  Nccl nccl{};
  absl::Status status;
};

template <typename Fn>
void Bind(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr && missing->empty()) *missing = name;
}

LoadedNccl Load() {
  LoadedNccl l;
  std::vector<std::string> candidates = {"libnccl.so.2"};
  if (const char* cuda = std::getenv("CUDA_PATH"); cuda != nullptr && *cuda != '\0') {
    candidates.push_back(absl::StrCat(cuda, "/lib64/libnccl.so.2"));
  }
  candidates.push_back("/usr/local/cuda/lib64/libnccl.so.2");
  void* lib = nullptr;
  std::string errors;
  for (const std::string& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for the life of the process
    if (lib != nullptr) {
      l.nccl.path = c;
      break;
    }
    const char* why = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", why != nullptr ? why : c);
  }
  if (lib == nullptr) {
    l.status = absl::FailedPreconditionError(absl::StrCat("cannot load NCCL: ", errors));
    return l;
  }
  Nccl& n = l.nccl;
  std::string missing;
  Bind(lib, "ncclGetVersion", &n.GetVersion, &missing);
  Bind(lib, "ncclCommInitAll", &n.CommInitAll, &missing);
  Bind(lib, "ncclCommDestroy", &n.CommDestroy, &missing);
  Bind(lib, "ncclGroupStart", &n.GroupStart, &missing);
  Bind(lib, "ncclGroupEnd", &n.GroupEnd, &missing);
  Bind(lib, "ncclAllReduce", &n.AllReduce, &missing);
  Bind(lib, "ncclGetErrorString", &n.GetErrorString, &missing);
  if (!missing.empty()) {
    l.status = absl::FailedPreconditionError(absl::StrCat(n.path, " has no ", missing));
  } else {
    l.status = n.Check("ncclGetVersion", n.GetVersion(&n.version));
  }
  return l;
}

absl::Status LoadNccl(const Nccl** out) {
  static std::once_flag once;
  static LoadedNccl* loaded = nullptr;  // leaked on purpose: lives as long as the process
  std::call_once(once, [] { loaded = new LoadedNccl(Load()); });
  if (!loaded->status.ok()) return loaded->status;
  *out = &loaded->nccl;
  return absl::OkStatus();
}

// wire::DataType -> ncclDataType_t; -1 where NCCL has no such type.
int NcclType(int dtype) {
  switch (static_cast<wire::DataType>(dtype)) {
    case wire::DataType::kInt8:
      return 0;
    case wire::DataType::kUint8:
      return 1;
    case wire::DataType::kInt32:
      return 2;
    case wire::DataType::kInt64:
      return 4;
    case wire::DataType::kFloat16:
      return 6;
    case wire::DataType::kFloat32:
      return 7;
    case wire::DataType::kFloat64:
      return 8;
    case wire::DataType::kBfloat16:
      return 9;
    default:
      return -1;
  }
}

// wire::ReduceOp -> ncclRedOp_t.
int NcclOp(int reduce_op) {
  switch (static_cast<wire::ReduceOp>(reduce_op)) {
    case wire::ReduceOp::kSum:
      return 0;
    case wire::ReduceOp::kProduct:
      return 1;
    case wire::ReduceOp::kMax:
      return 2;
    case wire::ReduceOp::kMin:
      return 3;
    case wire::ReduceOp::kAverage:
      return 4;
    default:
      return -1;
  }
}

// Every rank of the peer: one GPU each, all driven from this thread.
class Peer {
 public:
  Peer(const BenchOptions& o, const BenchCuda* cuda, const Nccl* nccl)
      : o_(o), cuda_(cuda), nccl_(nccl), gpus_(o.peer_gpus), comms_(gpus_, nullptr) {}
  ~Peer() {
    for (ncclComm_t c : comms_) {
      if (c != nullptr) nccl_->CommDestroy(c);
    }
  }

  absl::Status Init() {
    if (gpus_ > cuda_->device_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the NCCL peer wants ", gpus_, " GPUs, the driver sees ", cuda_->device_count));
    }
    std::vector<int> devices;
    for (int g = 0; g < gpus_; ++g) {
      memory_.push_back(std::make_unique<BenchGpuMemory>());
      absl::Status st = memory_.back()->Init(cuda_, g);
      if (!st.ok()) return st;
      devices.push_back(g);
    }
    return nccl_->Check("ncclCommInitAll",
                        nccl_->CommInitAll(comms_.data(), gpus_, devices.data()));
  }

  absl::Status RunSize(const BenchLayout& layout, double* time_us, uint64_t* wrong) {
    const size_t e = wire::DataTypeSize(o_.dtype);
    spec_ = BenchPatternSpec{o_.collective, o_.dtype, o_.reduce_op, gpus_, layout};
    count_ = layout.input_elements;
    for (int g = 0; g < gpus_; ++g) {
      std::vector<uint8_t> input;
      if (o_.check) {
        FillPattern(spec_, g, &input);
      } else {
        input.assign(count_ * e, 0);
      }
      absl::Status st = memory_[g]->Activate();
      if (st.ok()) st = memory_[g]->Prepare(input.data(), input.size(), count_ * e);
      if (!st.ok()) return st;
    }
    *wrong = 0;
    for (int i = 0; i < o_.warmup; ++i) {
      absl::Status st = Iterate();
      if (st.ok() && o_.check) st = Check(wrong);
      if (!st.ok()) return st;
    }
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < o_.iters; ++i) {
      absl::Status st = Iterate();
      if (!st.ok()) return st;
    }
    const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
    *time_us = elapsed.count() / o_.iters;
    return o_.check ? Check(wrong) : absl::OkStatus();
  }

 private:
  absl::Status Iterate() {
    absl::Status st = nccl_->Check("ncclGroupStart", nccl_->GroupStart());
    for (int g = 0; g < gpus_ && st.ok(); ++g) {
      st = nccl_->Check("ncclAllReduce",
                        nccl_->AllReduce(memory_[g]->input(), memory_[g]->output(), count_,
                                         NcclType(o_.dtype), NcclOp(o_.reduce_op), comms_[g],
                                         static_cast<cudaStream_t>(memory_[g]->stream())));
    }
    absl::Status ended = nccl_->Check("ncclGroupEnd", nccl_->GroupEnd());
    if (!st.ok()) return st;
    if (!ended.ok()) return ended;
    for (int g = 0; g < gpus_; ++g) {
      st = memory_[g]->Synchronize();
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

  // NCCL's average is its own (it may scale before summing), so only the other reductions are
  // compared with the daemon's reference semantics.
  absl::Status Check(uint64_t* wrong) {
    if (o_.reduce_op == static_cast<int>(wire::ReduceOp::kAverage)) return absl::OkStatus();
    std::vector<uint8_t> output(count_ * wire::DataTypeSize(o_.dtype));
    for (int g = 0; g < gpus_; ++g) {
      absl::Status st = memory_[g]->Activate();
      if (st.ok()) st = memory_[g]->CopyOut(output.data(), output.size());
      if (!st.ok()) return st;
      *wrong += CountWrong(spec_, g, output.data());
    }
    return absl::OkStatus();
  }

  const BenchOptions& o_;
  const BenchCuda* cuda_;
  const Nccl* nccl_;
  const int gpus_;
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<BenchGpuMemory>> memory_;
  BenchPatternSpec spec_;
  size_t count_ = 0;
};

}  // namespace

absl::Status ProbeNccl(std::string* version, std::string* path) {
  const Nccl* nccl = nullptr;
  absl::Status st = LoadNccl(&nccl);
  if (!st.ok()) return st;
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  *version =
      absl::StrCat(nccl->version / 10000, ".", nccl->version / 100 % 100, ".", nccl->version % 100);
  *path = nccl->path;
  return absl::OkStatus();
}

absl::Status NcclSupports(int dtype, int reduce_op) {
  if (NcclType(dtype) < 0 || NcclOp(reduce_op) < 0) {
    return absl::InvalidArgumentError("NCCL has no such dtype or reduce op");
  }
  return absl::OkStatus();
}

int RunNcclPeer(const BenchOptions& o) {
  if (o.parent_pid > 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != o.parent_pid) return 1;
  }
  const BenchCuda* cuda = nullptr;
  const Nccl* nccl = nullptr;
  absl::Status st = LoadBenchCuda(&cuda);
  if (st.ok()) st = LoadNccl(&nccl);
  if (st.ok()) st = NcclSupports(o.dtype, o.reduce_op);
  if (st.ok() && o.peer_gpus < 1) st = absl::InvalidArgumentError("--peer_gpus is required");
  if (!st.ok()) return EmitError(st);
  const std::vector<BenchLayout> layouts =
      LayoutsFor(o.collective, o.sizes, wire::DataTypeSize(o.dtype), o.peer_gpus);
  Peer peer(o, cuda, nccl);
  if (st = peer.Init(); !st.ok()) return EmitError(st);
  return EmitRun(0, o.peer_gpus, layouts.size(), [&](size_t i, double* time_us, uint64_t* wrong) {
    return peer.RunSize(layouts[i], time_us, wrong);
  });
}

}  // namespace ard::ctl

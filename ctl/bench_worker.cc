#include "ctl/bench_worker.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/allreduced_client.h"
#include "ctl/bench_cuda.h"
#include "ctl/bench_layout.h"
#include "ctl/bench_pattern.h"
#include "ctl/bench_worker_lines.h"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CodeStatus(int code, const std::string& message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// One connected client and the buffers of the current size.
class Worker {
 public:
  Worker(const BenchOptions& o, Clock::time_point deadline) : o_(o), deadline_(deadline) {}
  ~Worker() {
    ReleaseHeld();
    if (shm_input_ != nullptr) ard_free(client_, shm_input_, nullptr, 0);
    ard_client_destroy(client_);
  }

  absl::Status Connect() {
    ard_options options;
    ard_options_init(&options);
    options.timeout_ms = std::max(1, RemainingMs());
    char err[1024] = {};
    int code = ard_client_create(&options, &client_, err, sizeof(err));
    if (code != ARD_OK) return CodeStatus(code, err);
    ard_client_topology(client_, &topo_);
    if (!o_.gpu) return absl::OkStatus();
    const BenchCuda* cuda = nullptr;
    absl::Status st = LoadBenchCuda(&cuda);
    if (!st.ok()) return st;
    return gpu_.Init(cuda, topo_.local_rank % cuda->device_count);
  }

  const ard_topology& topo() const { return topo_; }

  // Runs one size; fills *time_us (this rank's mean) and *wrong (with --check).
  absl::Status RunSize(int index, const BenchLayout& layout, double* time_us, uint64_t* wrong) {
    const size_t e = wire::DataTypeSize(o_.dtype);
    spec_ = BenchPatternSpec{o_.collective, o_.dtype, o_.reduce_op, topo_.size, layout};
    if (o_.check) {
      FillPattern(spec_, topo_.rank, &input_);
    } else {
      input_.assign(layout.input_elements * e, 0);
    }
    output_.resize(layout.output_elements * e);
    name_ = absl::StrCat("bench.", index);
    shape_ = static_cast<int64_t>(layout.input_elements);
    *wrong = 0;
    absl::Status st;
    if (o_.gpu) st = gpu_.Prepare(input_.data(), input_.size(), output_.size());
    if (o_.shm) st = PrepareShm();
    if (!st.ok()) return st;
    for (int i = 0; i < o_.warmup; ++i) {
      st = Iterate();
      if (!st.ok()) return st;
      if (o_.check) {
        st = Check(wrong);
        if (!st.ok()) return st;
      }
    }
    st = Barrier(index);
    if (!st.ok()) return st;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < o_.iters; ++i) {
      st = Iterate();
      if (!st.ok()) return st;
    }
    const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
    *time_us = elapsed.count() / o_.iters;
    return o_.check ? Check(wrong) : absl::OkStatus();
  }

 private:
  int RemainingMs() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  }

  // Submits `req`, waits until the run's deadline and hands the completed result to `use`,
  // then releases it.
  template <typename Use>
  absl::Status SubmitAndWait(const ard_request& req, Use use) {
    char err[1024] = {};
    uint64_t handle = 0;
    int code = ard_submit(client_, &req, nullptr, nullptr, &handle, err, sizeof(err));
    if (code != ARD_OK) return CodeStatus(code, absl::StrCat("submit ", req.name, ": ", err));
    return WaitHandle(req.name, handle, use);
  }

  // Waits for an accepted `handle` until the run's deadline, hands its result to `use`, then
  // releases it.
  template <typename Use>
  absl::Status WaitHandle(const char* name, uint64_t handle, Use use) {
    ard_result r;
    int code = ard_wait(client_, handle, RemainingMs(), &r);
    if (code == ARD_PENDING) {
      return absl::DeadlineExceededError(absl::StrCat(
          name, " did not complete within the run's --timeout_ms (", o_.timeout_ms, " ms)"));
    }
    if (code != ARD_OK) {
      std::string message = r.message != nullptr ? r.message : "";
      ard_release(client_, handle);
      return CodeStatus(code, absl::StrCat(name, ": ", message));
    }
    absl::Status st = use(r);
    ard_release(client_, handle);
    return st;
  }

  // Adds the wrong elements of the last result (copied out of the GPU first with --device gpu).
  absl::Status Check(uint64_t* wrong) {
    if (o_.gpu) {
      absl::Status st = gpu_.CopyOut(output_.data(), output_.size());
      if (!st.ok()) return st;
    }
    if (o_.shm && held_data_ != nullptr) {
      *wrong += CountWrong(spec_, topo_.rank, held_data_);
      return absl::OkStatus();
    }
    *wrong += CountWrong(spec_, topo_.rank, output_.data());
    return absl::OkStatus();
  }

  absl::Status Iterate() { return o_.gpu ? IterateDevice() : IterateHost(); }

  // This size's request, its input at `data` (host or device memory).
  ard_request Request(const void* data) const {
    ard_request req;
    ard_request_init(&req);
    req.collective = o_.collective;
    req.dtype = o_.dtype;
    req.reduce_op = o_.reduce_op;
    req.root_rank = 0;
    req.name = name_.c_str();
    req.ndims = 1;
    req.shape = &shape_;
    req.data = data;
    req.bytes = input_.size();
    return req;
  }

  // --device gpu: ard_submit_device from the device input to the device output on this worker's
  // stream; the iteration ends when the stream (which holds the copy-out) has drained.
  absl::Status IterateDevice() {
    const ard_request req = Request(gpu_.input());
    char err[1024] = {};
    uint64_t handle = 0;
    int code = ard_submit_device(client_, &req, gpu_.device(), gpu_.output(), gpu_.stream(),
                                 nullptr, nullptr, &handle, err, sizeof(err));
    if (code != ARD_OK) return CodeStatus(code, absl::StrCat("submit ", req.name, ": ", err));
    return WaitHandle(req.name, handle, [this](const ard_result&) { return gpu_.Synchronize(); });
  }

  // --device shm: this size's input built in an ard_alloc buffer (the one before freed).
  absl::Status PrepareShm() {
    ReleaseHeld();
    char err[1024] = {};
    if (shm_input_ != nullptr) ard_free(client_, shm_input_, nullptr, 0);
    shm_input_ = nullptr;
    if (input_.empty()) return absl::OkStatus();
    int code = ard_alloc(client_, input_.size(), &shm_input_, err, sizeof(err));
    if (code != ARD_OK) return CodeStatus(code, absl::StrCat("ard_alloc: ", err));
    std::memcpy(shm_input_, input_.data(), input_.size());
    return absl::OkStatus();
  }

  // --device shm: the input read where it was built, the result read in place (kept, unreleased,
  // until the next one arrives, for Check()): the client copies nothing.
  absl::Status IterateShm() {
    const void* data = shm_input_ != nullptr ? shm_input_ : input_.data();
    char err[1024] = {};
    uint64_t handle = 0;
    const ard_request req = Request(data);
    int code = ard_submit(client_, &req, nullptr, nullptr, &handle, err, sizeof(err));
    if (code != ARD_OK) return CodeStatus(code, absl::StrCat("submit ", req.name, ": ", err));
    ard_result r;
    code = ard_wait(client_, handle, RemainingMs(), &r);
    if (code == ARD_PENDING) {
      return absl::DeadlineExceededError(absl::StrCat(
          req.name, " did not complete within the run's --timeout_ms (", o_.timeout_ms, " ms)"));
    }
    if (code != ARD_OK) {
      std::string message = r.message != nullptr ? r.message : "";
      ard_release(client_, handle);
      return CodeStatus(code, absl::StrCat(req.name, ": ", message));
    }
    ReleaseHeld();
    held_ = handle;
    held_data_ = static_cast<const uint8_t*>(r.data);
    if (r.bytes != output_.size()) {
      return absl::InternalError(
          absl::StrCat(name_, ": result has ", r.bytes, " bytes, expected ", output_.size()));
    }
    return absl::OkStatus();
  }

  void ReleaseHeld() {
    if (held_ != 0) ard_release(client_, held_);
    held_ = 0;
    held_data_ = nullptr;
  }

  absl::Status IterateHost() {
    if (o_.shm) return IterateShm();
    return SubmitAndWait(Request(input_.data()), [this](const ard_result& r) {
      if (r.bytes != output_.size()) {
        return absl::InternalError(
            absl::StrCat(name_, ": result has ", r.bytes, " bytes, expected ", output_.size()));
      }
      if (r.bytes > 0) std::memcpy(output_.data(), r.data, r.bytes);
      return absl::OkStatus();
    });
  }

  absl::Status Barrier(int index) {
    const std::string name = absl::StrCat("bench.barrier.", index);
    ard_request req;
    ard_request_init(&req);
    req.collective = static_cast<int>(wire::Collective::kBarrier);
    req.name = name.c_str();
    return SubmitAndWait(req, [](const ard_result&) { return absl::OkStatus(); });
  }

  const BenchOptions& o_;
  const Clock::time_point deadline_;
  BenchGpuMemory gpu_;  // --device gpu; destroyed after the client (declared before it)
  ard_client* client_ = nullptr;
  ard_topology topo_{};
  BenchPatternSpec spec_;
  std::vector<uint8_t> input_, output_;
  void* shm_input_ = nullptr;  // --device shm: this size's input (ard_alloc)
  uint64_t held_ = 0;          // --device shm: the last result, not yet released
  const uint8_t* held_data_ = nullptr;
  std::string name_;
  int64_t shape_ = 0;
};

}  // namespace

int RunBenchWorker(const BenchOptions& o) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  if (o.parent_pid > 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != o.parent_pid) return 1;  // the parent died before the prctl
  }
  const std::vector<BenchLayout> layouts =
      LayoutsFor(o.collective, o.sizes, wire::DataTypeSize(o.dtype), o.ranks());
  Worker worker(o, deadline);
  if (absl::Status st = worker.Connect(); !st.ok()) return EmitError(st);
  return EmitRun(worker.topo().rank, worker.topo().size, layouts.size(),
                 [&](size_t i, double* time_us, uint64_t* wrong) {
                   return worker.RunSize(static_cast<int>(i), layouts[i], time_us, wrong);
                 });
}

}  // namespace ard::ctl

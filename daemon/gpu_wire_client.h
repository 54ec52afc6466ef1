// TEST HELPER: a simulated training process's local connection to a real Daemon, speaking the
// wire protocol (proto/local_wire.h) directly: HELLO with a staging segment, GPU_REGISTER,
// GPU_SUBMIT and host SUBMIT, and the daemon's replies. Tests only (gpu_daemon_*_test); one
// WireClient is used from one test thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/local_wire.h"
#include "daemon/gpu/gpu_job.h"

namespace ard::testing {

// One frame from the daemon, decoded.
struct Reply {
  wire::MsgType type{};
  uint64_t request_id = 0;
  int32_t code = 0;  // ERROR / NOTIFY / COMPLETE
  std::string message;
  std::vector<int64_t> shape;  // COMPLETE
  uint64_t offset = 0;         // COMPLETE of a host tensor: its result in segment 0
};

// A training process's local connection, speaking the wire protocol directly.
class WireClient {
 public:
  // local_rank/local_size -1: rank/size (every rank on this host).
  WireClient(const std::string& socket_path, const std::string& job, int rank, int size,
             int local_rank = -1, int local_size = -1);
  ~WireClient();

  void HangUp();

  // The next frame from the daemon (waits up to 10 s).
  Reply Next();

  // The next frame of `type`, skipping others (RESULT_SEGMENT, NOTIFY).
  Reply Expect(wire::MsgType type);

  void Register(const gpu::GpuRegistration& reg, uint64_t request_id);
  // GPU_UNREGISTER: the process is about to free its staging (answered GPU_UNREGISTERED).
  void Unregister(uint64_t request_id);

  // Any collective: `s` as built by Meta().
  void SubmitMeta(uint64_t request_id, const wire::Submit& s, uint64_t offset, uint32_t event);

  // A host-memory allreduce (SUBMIT) of float sums from input segment 0 at offset 0.
  void SubmitHost(uint64_t request_id, const std::string& name, const std::vector<float>& values);
  // A host tensor's result (its COMPLETE's place in result segment 0).
  std::vector<float> HostResult(const Reply& done, size_t count) const;

  // A GPU allreduce of `count` elements at `offset` of the staging arena, after pool `event`.
  void Submit(uint64_t request_id, const std::string& name, wire::DataType dtype, wire::ReduceOp op,
              int64_t count, uint64_t offset, uint32_t event);

 private:
  int fd_ = -1;
  char* input_ = nullptr;          // input segment 0
  const char* results_ = nullptr;  // result segment 0
  size_t results_bytes_ = 0;
};

// A collective's SUBMIT metadata: sum, no scaling, no group.
wire::Submit Meta(wire::Collective collective, const std::string& name, wire::DataType dtype,
                  std::vector<int64_t> shape);

}  // namespace ard::testing

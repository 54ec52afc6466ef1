// What a job's executor shares with the control loop: the job's ranks (sessions), its result
// arena, its counters and its failure state. Immutable after formation except the counters
// (atomics) and the failure (mutex). Any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/local/session.h"
#include "daemon/shm/result_arena.h"

namespace ard::dataplane {

struct JobContext {
  std::string name;
  uint32_t id = 0;
  int size = 0;
  std::vector<std::shared_ptr<local::Session>> ranks;  // index = rank; null for other hosts' ranks
  std::shared_ptr<shm::ResultArena> results;

  // Cross-host jobs (cross_size > 1): which host runs which rank, and the TCP mesh between the
  // job's hosts. `connect_mesh` runs first on the executor thread; `report_failure` tells the
  // control loop (thread-safe) when the data plane fails.
  int cross_rank = 0;
  int cross_size = 1;
  std::vector<int> host_of_rank;                // index = rank -> cross rank
  std::vector<std::vector<int>> ranks_of_host;  // cross rank -> its ranks, ascending
  std::vector<std::string> host_names;          // cross rank -> host name (for messages)
  std::function<absl::StatusOr<std::unique_ptr<tcp::TcpMesh>>()> connect_mesh;
  std::function<void(absl::Status)> report_failure;

  std::atomic<uint64_t> collectives_completed{0};
  std::atomic<uint64_t> bytes_reduced{0};  // input bytes of one rank, summed over tensors

  // The first failure wins; later calls are ignored. Returns true when this call failed the job.
  // Aborts the mesh, so an executor blocked on a peer returns at once.
  bool Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return false;
    failure_ = std::move(status);
    if (mesh_ != nullptr) mesh_->Abort(failure_);
    return true;
  }

  // Executor thread: installs the connected mesh (aborted at once if the job already failed).
  void SetMesh(std::unique_ptr<tcp::TcpMesh> mesh) {
    absl::MutexLock lock(&mu_);
    mesh_ = std::move(mesh);
    if (!failure_.ok()) mesh_->Abort(failure_);
  }
  // Executor thread only (the mesh's operations are single-threaded).
  tcp::TcpMesh* mesh() {
    absl::MutexLock lock(&mu_);
    return mesh_.get();
  }
  absl::Status failure() const {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // Waits up to `timeout` for the job to fail (Fail() from another thread); returns the failure,
  // or OK when none came.
  absl::Status AwaitFailure(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](const absl::Status* f) { return !f->ok(); }, &failure_),
                         timeout);
    return failure_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<tcp::TcpMesh> mesh_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard::dataplane

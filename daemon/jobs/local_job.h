// One job as this daemon holds it: its members (the local processes of the job), its formation
// state, its readiness table and executor. A plain struct owned by the JobRegistry on the control
// loop; JobContext is the part shared with the executor thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/dataplane/executor.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/jobs/gpu_executor.h"
#include "daemon/local/session.h"
#include "daemon/negotiation/readiness_table.h"
#include "daemon/negotiation/response_cache.h"
#include "proto/common.pb.h"
#include "proto/negotiation.pb.h"

namespace ard::jobs {

struct LocalJob {
  enum class State { kForming, kRunning, kFailed };

  std::string name;
  uint32_t id = 0;
  int size = 0;
  State state = State::kForming;
  absl::Time created;
  uid_t uid = 0;  // of its first process: processes of other users cannot join it
  bool pending_cap_logged = false;  // max_pending_tensors was hit (logged once)
  // kForming: in arrival order; then index = rank (null for ranks on other hosts). Sessions stay
  // listed after they close (so reports can name them) until the job is removed.
  std::vector<std::shared_ptr<local::Session>> members;
  std::shared_ptr<dataplane::JobContext> context;       // from formation on
  std::unique_ptr<negotiation::ReadinessTable> table;   // from formation on
  std::unique_ptr<dataplane::Executor> executor;        // from formation on
  std::string failure;                                   // kFailed: why
  absl::Status departed;  // a rank left cleanly: the job fails at the next submit
  std::set<std::string> stall_warned;                    // tensors already reported as stalled
  std::vector<JobSummary::StalledTensor> stalled;        // from the last stall inspection

  // Cross-host jobs: ranks on several daemons; negotiated through the coordinator.
  bool cross_host = false;
  int local_size = 0;             // ranks expected on this host
  JobLayout layout;               // from the coordinator, once formed
  // Host-ready tensors waiting for the coordinator's response, by name.
  std::map<std::string, negotiation::ReadyTensor> awaiting;
  std::vector<HostReadyTensor> outgoing;  // not yet sent to the coordinator
  std::vector<uint32_t> outgoing_ids;      // ... those the coordinator has cached
  // The coordinator's response cache, replayed; and each forwarded tensor's metadata signature.
  std::unique_ptr<negotiation::ResponseCache> cache;
  std::map<std::string, uint64_t> forwarded_signature;
  bool flush_posted = false;
  std::shared_ptr<cluster::JobWatch> watch;

  // GPU path: each rank's GPU_REGISTER (and its request id, answered once every local rank
  // registered), then the job's GPU executor (owning its GpuJob).
  std::map<int, gpu::GpuRegistration> gpu_regs;
  std::map<int, uint64_t> gpu_register_ids;
  std::unique_ptr<GpuExecutor> gpu;
  std::string gpu_plan;  // for status: mode, communicator ranks, why

  int connected() const {
    int n = 0;
    for (const auto& m : members) n += m != nullptr && !m->closed();
    return n;
  }
};

}  // namespace ard::jobs

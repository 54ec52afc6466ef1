// The jobs of this daemon and their local negotiation (DESIGN.md "Jobs, ranks and membership",
// "Negotiation", "Failure semantics"). Receives every decoded frame from local clients:
// registration (HELLO) forms jobs, SUBMITs go through the job's readiness table and ready
// collectives to the job's executor, RELEASE frees results, a client leaving fails its job on
// every other rank. Also the stall inspector and the job summaries `status` shows.
//
// Thread: the control loop only (no locks); executors get what they need through JobContext.
// Lifecycle: 1. constructed by the Daemon with the loop; 2. Start() schedules the stall
// inspector; 3. frames and closes arrive from the LocalSocketServer; 4. Shutdown() fails every
// job ("daemon shutting down") and joins the executors.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/common/event_loop.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/gpu/device.h"
#include "daemon/gpu/gpu_plan.h"
#include "daemon/gpu/ipc_cache.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/local_socket_server.h"
#include "daemon/local/session.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/common.pb.h"

namespace ard::jobs {

struct JobOptions {
  std::string host_name;
  absl::Duration form_timeout = absl::Seconds(60);
  absl::Duration stall_warning = absl::Seconds(60);
  absl::Duration stall_shutdown = absl::ZeroDuration();  // zero: never abort
  uint64_t result_segment_bytes = 64ull << 20;
  uint64_t max_result_bytes = 8ull << 30;
  absl::Duration rpc_timeout = absl::Seconds(2);
  absl::Duration cycle_time = absl::ZeroDuration();  // coalescing delay for host-ready tensors
  int max_jobs = 1024;              // forming or running jobs at once
  int max_pending_tensors = 65536;  // per job: submitted by some ranks, not yet by all
  // GPU path: why this daemon has no usable GPU device ("" when it has one).
  std::string gpu_unavailable;
  // GPU path: the device (not owned; null without one) and DaemonConfig's gpu_* settings.
  gpu::Device* gpu_device = nullptr;
  std::string gpu_mode = "auto";
  uint64_t gpu_fusion_buffer_bytes = 64ull << 20;
  absl::Duration gpu_init_timeout = absl::Seconds(60);
  uint32_t max_gpu_event_pool = 1024;
  // Each GPU's physical identity ("<machine id>/<PCI bus id>"; index = ordinal; may be short or
  // empty when unknown): tells the coordinator's plan which daemons share a GPU.
  std::vector<std::string> gpu_physical_ids;
  // Each GPU's PCI bus id (index = ordinal; empty when unknown): GPU_REGISTER's bus id picks the
  // daemon's ordinal, so the process's CUDA_VISIBLE_DEVICES may differ from the daemon's.
  std::vector<std::string> gpu_pci_bus_ids;
};

namespace tcp = dataplane::tcp;

class LocalJob;

class JobRegistry : public local::SessionHandler {
 public:
  JobRegistry(EventLoop& loop, JobOptions options);
  ~JobRegistry() override;

  void Start();
  void Shutdown();
  // Enables cross-host jobs: `coordinator` reaches the coordinator's Negotiation service (this
  // daemon's own address on the coordinator), `listener` accepts other hosts' data connections.
  void EnableCrossHost(cluster::PeerClient* coordinator, tcp::DataListener* listener,
                       std::string data_address);

  void OnFrame(const std::shared_ptr<local::Session>& session, local::DecodedFrame frame,
               int fd) override;
  void OnClosed(const std::shared_ptr<local::Session>& session, bool graceful,
                const std::string& why) override;

  // This host is cut off from the cluster (the coordinator dropped it): fails every running
  // cross-host job with `status`.
  void FailCrossHostJobs(const absl::Status& status);

  // For status: one summary per job on this host.
  std::vector<JobSummary> Summaries() const;

 private:
  void HandleHello(const std::shared_ptr<local::Session>& s, const wire::Hello& hello, int fd);
  void HandleSubmit(const std::shared_ptr<local::Session>& s, local::DecodedFrame frame);
  void HandleRelease(const std::shared_ptr<local::Session>& s, uint64_t request_id);
  void Form(LocalJob& job);
  void FailJob(LocalJob& job, absl::Status status, bool tell_coordinator = true);
  void RemoveIfEmpty(const std::string& name);
  void FormTimeout(const std::string& name, uint64_t job_id);
  void ScheduleStallInspection();
  void InspectStalls();
  void ReplyError(local::Session& s, uint64_t request_id, const absl::Status& status);

  // GPU path (gpu_jobs.cc).
  void HandleGpuRegister(const std::shared_ptr<local::Session>& s,
                         const local::DecodedFrame& frame);
  // Single-host job: every local rank registered; plans and starts the job's GPU side.
  void FormGpu(LocalJob& job);
  // Cross-host job: every local rank registered; sends this host's GPUs to the coordinator, whose
  // GpuLayout (JobEvent.gpu_layout, once every host sent its GPUs) reaches OnGpuLayout.
  void SendGpuHost(LocalJob& job);
  void OnGpuLayout(LocalJob& job, const GpuLayout& layout);
  // `comm_rank_of`: each job rank's communicator rank when known on every host (NCCL mode).
  void StartGpu(LocalJob& job, const gpu::GpuPlan& plan, const gpu::UniqueId& id,
                std::vector<int> comm_rank_of = {});
  // Answers every pending GPU_REGISTER of the job with `status` and fails the job.
  void FailGpuForming(LocalJob& job, const absl::Status& status);
  // A GPU_SUBMIT's placement against the job's GpuJob; OK for a host-memory SUBMIT.
  absl::Status CheckGpuSubmit(LocalJob& job, const local::Session& s,
                              const local::DecodedFrame& frame);
  // Routes a ready response to the job's GPU executor when its tensors are GPU tensors.
  bool DispatchGpu(LocalJob& job, negotiation::Response& response);
  // A GPU-registered session left: its rank leaves the GpuJob; the IPC mappings of its process
  // are closed once no other session of that process holds a GPU registration.
  void ReleaseGpu(LocalJob& job, const local::Session& s);

  // Cross-host jobs (cross_host.cc).
  void RegisterCrossHost(LocalJob& job);
  void OnRegistered(const std::string& name, uint32_t local_id,
                    absl::StatusOr<RegisterRanksResponse> response);
  void FormCrossHost(LocalJob& job, const JobLayout& layout);
  void ForwardHostReady(LocalJob& job, std::vector<negotiation::Response> ready);
  void ForwardJoin(LocalJob& job, const negotiation::TensorRequest& join);
  void ScheduleFlush(LocalJob& job);
  void Flush(const std::string& name, uint32_t local_id);
  void OnJobEvent(const std::string& name, uint32_t local_id, const JobEvent& event);
  void TellCoordinator(LocalJob& job, const absl::Status& failure, bool left);
  LocalJob* FindJob(const std::string& name, uint32_t local_id);

  EventLoop& loop_;
  const JobOptions options_;
  std::map<std::string, std::unique_ptr<LocalJob>> jobs_;  // by name
  uint32_t next_job_id_ = 1;
  cluster::PeerClient* coordinator_ = nullptr;  // Not owned; null: single-host jobs only.
  tcp::DataListener* listener_ = nullptr;       // Not owned.
  std::string data_address_;
  bool shut_down_ = false;
  std::unique_ptr<gpu::IpcCache> ipc_cache_;  // GPU path: with a device only
  std::map<uint32_t, int> gpu_sessions_of_pid_;  // live GPU-registered sessions per process
};

}  // namespace ard::jobs

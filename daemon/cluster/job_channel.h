// A follower's side of one cross-host job at the coordinator (DESIGN.md "Negotiation"): the one
// interface through which the job engine (daemon/jobs) talks to the coordinator. It turns the
// job's registration, host-ready tensors, joins, GPUs and failures into the Negotiation service's
// messages (proto/negotiation.proto) and the coordinator's ordered JobEvents back into committed
// negotiation::Responses; the response cache's compression (cached ids instead of metadata) is
// its own business. Every message carries the job id and its generation.
//
// Thread: the control loop only; callbacks (`done`, the sink) run on the loop, never after the
// channel is destroyed.
// Lifecycle: 1. constructed when the job's local ranks all registered; 2. RegisterAsync (held by
// the coordinator until every host registered); 3. Watch, then SendReady/SendJoin/SendGpuHost
// while it runs; 4. ReportFailure or ReportLeft at the end; destruction cancels the stream.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/cluster/negotiation_client.h"
#include "daemon/common/event_loop.h"
#include "daemon/negotiation/committed_list.h"
#include "daemon/negotiation/response_cache.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/negotiation.pb.h"

namespace ard::metrics {
class DaemonMetrics;
}  // namespace ard::metrics

namespace ard::cluster {

// This host's ranks of a job, as the coordinator needs them to form it.
struct HostRegistration {
  std::string job;
  int size = 0;            // the job's world size (elastic: its max_np, 0 for none)
  int elastic_min_np = 0;  // an elastic job: the coordinator forms it from the ranks present
  // Elastic: the host's forming generation and which registration of it this is (0 first, then
  // each amendment: RegisterRanksRequest.formation).
  uint64_t formation = 0;
  uint32_t amendment = 0;
  struct Rank {
    int local_rank = 0;
    int rank = -1;  // from the launcher, or -1
    uint32_t pid = 0;
  };
  std::vector<Rank> ranks;
};

// This host's GPUs for a job (GPU path), in local rank order.
struct HostGpuOffer {
  std::vector<int> rank_devices;
  std::vector<std::string> rank_gpu_ids;
  std::string nccl_version;
  std::string gpu_mode;
  std::string nccl_unique_id;  // cross rank 0 only; empty otherwise
};

// What the coordinator decides for a running job; called on the loop, in the coordinator's order.
class JobChannelSink {
 public:
  virtual ~JobChannelSink() = default;
  // One event's committed responses (every taking-part rank's request, with metadata only: the
  // job adds its own ranks' inputs) and its response-cache decisions: one list per event that
  // has either, numbered alike on every host (the steady state counts them).
  virtual void OnCommitted(negotiation::CommittedList list) = 0;
  // Every rank of the job joined: the job's join requests complete.
  virtual void OnJoinDone(const absl::Status& status, int last_rank) = 0;
  // Every host sent its GPUs (GPU path).
  virtual void OnGpuLayout(const JobLayout& layout, const GpuLayout& gpus) = 0;
  // The coordinator aborted the job (another host's failure, a host DOWN, ...).
  virtual void OnAborted(const absl::Status& status) = 0;
  // The channel itself broke (the coordinator unreachable, a refused message).
  virtual void OnLost(const absl::Status& status) = 0;
  // Elastic: ranks of a host outside this generation wait to join (JobEvent.hosts_updated).
  virtual void OnHostsUpdated() {}
};

class JobChannel {
 public:
  struct Options {
    std::string host;          // this daemon's host name
    std::string data_address;  // this daemon's data-plane listener
    absl::Duration form_timeout = absl::Seconds(60);
    absl::Duration rpc_timeout = absl::Seconds(2);
    absl::Duration cycle_time = absl::ZeroDuration();  // coalescing delay for host-ready tensors
    metrics::DaemonMetrics* metrics = nullptr;         // Not owned; null: metrics off
  };
  JobChannel(EventLoop& loop, NegotiationClient& coordinator, Options options);
  ~JobChannel();
  JobChannel(const JobChannel&) = delete;
  JobChannel& operator=(const JobChannel&) = delete;

  // Waits (up to the form timeout) until every host of the job registered; `done` gets the
  // layout (hosts in cross-rank order, each rank's global number).
  void RegisterAsync(const HostRegistration& registration,
                     std::function<void(absl::StatusOr<JobLayout>)> done);
  // Formed: subscribes to the job's events.
  void Watch(JobChannelSink* sink);

  // Tensors every local rank submitted; travel in one Negotiate call per loop iteration (or
  // cycle_time).
  void SendReady(const std::vector<negotiation::ReadyTensor>& tensors);
  void SendJoin(const negotiation::TensorRequest& join);
  void SendGpuHost(const HostGpuOffer& gpus);
  // This host failed the job (the coordinator aborts it everywhere) / all its ranks left.
  // `lost`: an elastic generation re-forms (NegotiateRequest.lost); "" for a plain failure.
  void ReportFailure(const absl::Status& failure, const std::string& lost = "");
  void ReportLeft();

  uint64_t job_id() const { return layout_.job_id(); }

 private:
  void ScheduleFlush();
  void Flush();
  void OnEvent(const JobEvent& event);
  NegotiateRequest NewRequest() const;
  // Runs `task` on the loop if this channel still exists then.
  std::function<void()> Guarded(std::function<void()> task);

  EventLoop& loop_;
  NegotiationClient& coordinator_;  // Not owned.
  const Options options_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  JobLayout layout_;                // once registered
  JobChannelSink* sink_ = nullptr;  // Not owned; once watching
  std::shared_ptr<JobWatch> watch_;
  bool ended_ = false;                     // reported failure or left: nothing more is sent
  std::vector<HostReadyTensor> outgoing_;  // not yet sent
  std::vector<uint32_t> outgoing_ids_;     // ... those the coordinator has cached
  bool flush_posted_ = false;
  // The coordinator's response cache, replayed; and each forwarded tensor's metadata signature.
  negotiation::ResponseCache cache_{SIZE_MAX};  // capacity is the coordinator's business
  std::map<std::string, uint64_t> forwarded_signature_;
};

}  // namespace ard::cluster

// One formed cross-host job as the coordinator runs it (DESIGN.md "Negotiation"): the global
// readiness table over all its ranks, validation across hosts, fusion, the response cache, the
// GPU layout round, and the ordered event stream to each of its hosts (events made before a host
// subscribed are kept for it). The JobCoordinator maps job ids to these and decides what happens
// when one must be aborted or has ended.
//
// Thread: the control loop only; event sinks are thread-safe (they write to gRPC streams).
// Lifecycle: 1. built from the formed JobLayout; 2. Watch subscribes each host; Negotiate
// applies each host's calls; InspectStalls runs on the coordinator's timer; 3. it ends when
// every host left (ended()) or with Abort (the abort event to every host); 4. Finish ends the
// streams still open.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/cluster/job_response_cache.h"
#include "daemon/negotiation/readiness_table.h"
#include "daemon/negotiation/stall_inspector.h"
#include "proto/common.pb.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

// Where a host's job events go (a WatchJob stream). Thread-safe.
class JobEventSink {
 public:
  virtual ~JobEventSink() = default;
  virtual void Send(const JobEvent& event) = 0;
  // Ends the stream (after an abort event, or when the job is gone).
  virtual void Finish(const absl::Status& status) = 0;
};

class ClusterJob {
 public:
  ClusterJob(JobLayout layout, uint64_t fusion_threshold_bytes, size_t cache_capacity,
             absl::Time formed);

  const JobLayout& layout() const { return layout_; }
  uint64_t id() const { return layout_.job_id(); }
  uint64_t generation() const { return layout_.generation(); }
  bool HasHost(const std::string& host) const;
  // Whether `host` takes part and its ranks have not all left.
  bool Active(const std::string& host) const { return HasHost(host) && !left_.count(host); }
  // Every host's ranks left cleanly: the job is over.
  bool ended() const { return static_cast<int>(left_.size()) == layout_.hosts_size(); }

  // Subscribes `host` (a member; checked by the caller); a second stream is AlreadyExists.
  absl::Status Watch(const std::string& host, std::shared_ptr<JobEventSink> sink);
  // Whether `sink` is the stream `host` watches the job with (not a refused second one).
  bool WatchedBy(const std::string& host, const JobEventSink* sink) const;

  struct Outcome {
    absl::Status reply;  // the caller's answer
    absl::Status abort;  // not OK: the job must be aborted with this
  };
  // One Negotiate call of `host` (a member; checked by the caller): its failure or departure,
  // its GPUs, and its host-ready tensors; broadcasts what became ready.
  Outcome Negotiate(const NegotiateRequest& request, absl::Time now);

  // Elastic: ranks of a host outside this generation wait to join; every host hears it
  // (JobEvent.hosts_updated) once. False if they were told already.
  bool AnnounceHostsUpdated();
  // Sends the abort event to every host and ends their streams.
  void Abort(const absl::Status& status);
  // Ends the streams still open with `status` (the job ended, or the coordinator stops).
  void Finish(const absl::Status& status);

  // The job's entry in `allreducectl status` (state "running"), stalled tensors included.
  JobSummary Summary(absl::Time now, absl::Duration stall_warning) const;
  // The periodic stall inspection: logs newly stalled tensors; the stall shutdown report, if a
  // tensor waited at least thresholds.shutdown.
  std::optional<std::string> InspectStalls(absl::Time now,
                                           const negotiation::StallThresholds& thresholds);

 private:
  // Aborted when a tensor still needs ranks of a host whose ranks all left: it can never
  // complete. Returns the abort status (OK: none).
  absl::Status NeedsLeftHost(absl::Time now) const;
  // GPU path: a host's GPUs (NegotiateRequest.gpu); once every host sent them, the GpuLayout goes
  // to all (JobEvent.gpu_layout). A second one, or one that does not match the layout, is refused.
  absl::Status CheckGpuHost(const std::string& host, const GpuHost& gpu) const;
  void AddGpuHost(const std::string& host, const GpuHost& gpu);
  // Fuses what became ready and sends it (with the cache decisions) to every host.
  // Commits `ready` (fused) in one JobEvent, or in several, each of about kMaxEventBytes at most
  // (a fused response split into runs of its tensors, a group never), so that a big cluster's
  // first step stays under a follower's gRPC receive limit (4 MiB).
  void Respond(std::vector<negotiation::Response> ready);
  void AddResponse(const negotiation::Response& r, JobEvent* event);
  void Broadcast(JobEvent event);
  negotiation::MissingRank Describe(int rank) const;

  const JobLayout layout_;
  const uint64_t fusion_threshold_bytes_;
  const absl::Time formed_;
  std::map<int, std::string> host_of_;  // rank -> host name
  negotiation::ReadinessTable table_;
  JobResponseCache cache_;
  negotiation::StallInspector stalls_;
  std::map<std::string, std::shared_ptr<JobEventSink>> sinks_;
  std::map<std::string, std::vector<JobEvent>> backlog_;  // for hosts not watching yet
  std::set<std::string> left_;
  // GPU path: each host's GPUs (NegotiateRequest.gpu) until all sent; then the layout went out.
  std::map<std::string, GpuHost> gpu_hosts_;
  bool gpu_layout_sent_ = false;
  bool hosts_updated_sent_ = false;  // elastic: AnnounceHostsUpdated broadcast it
  uint64_t committed_tensors_ = 0;  // tensors of committed, successful responses
  uint64_t committed_bytes_ = 0;    // their input bytes of one rank
};

}  // namespace ard::cluster

#include "daemon/metrics/daemon_metrics.h"

#include <map>

#include "absl/strings/ascii.h"

namespace ard::metrics {
namespace {

// Collective latency buckets, seconds: 50 us (a small host-local allreduce) to 10 s.
const std::vector<double> kLatencyBounds = {5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                            5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,  0.25,
                                            0.5,  1,    2.5,    5,    10};

const char* const kJobStates[] = {"forming", "running", "reforming", "failed", "ended"};
// OnError's kinds, shown at 0 from the start so that rate() and alerts see them.
const char* const kErrorKinds[] = {"collective", "data_plane", "job"};

}  // namespace

std::string DaemonMetrics::SizeBucket(uint64_t bytes) {
  if (bytes <= (4u << 10)) return "4KiB";
  if (bytes <= (64u << 10)) return "64KiB";
  if (bytes <= (1u << 20)) return "1MiB";
  if (bytes <= (16u << 20)) return "16MiB";
  if (bytes <= (256u << 20)) return "256MiB";
  return "+Inf";
}

DaemonMetrics::DaemonMetrics(std::string host, absl::Duration job_retention, Registry::Clock clock)
    : host_(std::move(host)),
      registry_(job_retention, std::move(clock)),
      hosts_(registry_.AddGauge(
          "allreduced_hosts", "Cluster members by state (UP, DOWN); coordinator only.", {"state"})),
      epoch_(registry_.AddGauge(
          "allreduced_membership_epoch",
          "Bumped whenever a host joins, rejoins, leaves or goes DOWN; coordinator only.", {})),
      joined_(registry_.AddGauge(
          "allreduced_cluster_joined",
          "1 when this daemon is a cluster member (the coordinator, or a joined follower).", {})),
      jobs_(registry_.AddGauge("allreduced_jobs", "This daemon's jobs by state.", {"state"})),
      collectives_(registry_.AddCounter("allreduced_job_collectives_total",
                                        "Tensors reduced (or gathered, broadcast, ...) by a job "
                                        "on this host.",
                                        {"job", "host"})),
      reduced_bytes_(registry_.AddCounter(
          "allreduced_job_reduced_bytes_total",
          "One rank's input bytes, summed over a job's completed tensors on this host.",
          {"job", "host"})),
      pending_(registry_.AddGauge("allreduced_job_tensors_pending",
                                  "Tensors submitted by some ranks of a job, not yet by all.",
                                  {"job", "host"})),
      stalled_(registry_.AddGauge("allreduced_job_tensors_stalled",
                                  "Pending tensors waiting longer than stall_warning_ms.",
                                  {"job", "host"})),
      cycles_(registry_.AddCounter(
          "allreduced_job_negotiation_cycles_total",
          "Host-ready messages this host sent to the coordinator for a cross-host job.",
          {"job", "host"})),
      cache_hits_(registry_.AddCounter(
          "allreduced_job_response_cache_hits_total",
          "Tensors negotiated by response-cache id instead of full metadata.", {"job", "host"})),
      cache_misses_(registry_.AddCounter("allreduced_job_response_cache_misses_total",
                                         "Tensors negotiated with full metadata.",
                                         {"job", "host"})),
      cache_ratio_(registry_.AddGauge("allreduced_job_response_cache_hit_ratio",
                                      "hits / (hits + misses) of a job's response cache.",
                                      {"job", "host"})),
      round_carried_(registry_.AddCounter(
          "allreduced_job_round_carried_tensors_total",
          "Cached allreduces whose data travelled in a steady-state readiness round (no "
          "allreduce of their own).",
          {"job", "host"})),
      round_partial_waits_(registry_.AddCounter(
          "allreduced_job_round_partial_waits_total",
          "Steady-state votes this host delayed for cached tensors some of its ranks had "
          "submitted and others not yet (steady_round_partial_wait_us).",
          {"job", "host"})),
      round_partial_wait_timeouts_(registry_.AddCounter(
          "allreduced_job_round_partial_wait_timeouts_total",
          "Of those delays, the ones that ended at the bound, before the tensors were offered.",
          {"job", "host"})),
      latency_(registry_.AddHistogram(
          "allreduced_collective_latency_seconds",
          "Time to execute one committed response (a fused group counts once), by collective "
          "and by its input size (size_le: upper bound of the size bucket).",
          {"op", "size_le"}, kLatencyBounds)),
      arena_bytes_(registry_.AddGauge(
          "allreduced_job_result_arena_bytes",
          "Bytes of a job's result arena in use (held by results not yet released), as of the "
          "job's last collective.",
          {"job", "host"})),
      sent_bytes_(registry_.AddCounter("allreduced_data_plane_sent_bytes_total",
                                       "Bytes this daemon sent to other hosts on the TCP data "
                                       "plane.",
                                       {})),
      received_bytes_(registry_.AddCounter(
          "allreduced_data_plane_received_bytes_total",
          "Bytes this daemon received from other hosts on the TCP data plane.", {})),
      rejected_connections_(registry_.AddCounter(
          "allreduced_data_plane_rejected_connections_total",
          "Connections to the data port that were closed without reaching a job, by reason "
          "(bad_hello, bad_proof, wrong_generation, handshake_timeout, ...).",
          {"reason"})),
      errors_(registry_.AddCounter("allreduced_errors_total", "Failures by kind.", {"kind"})),
      clients_(registry_.AddGauge("allreduced_client_connections",
                                  "Training processes connected to the local socket.", {})) {
  for (const char* kind : kErrorKinds) errors_.Add({kind}, 0);
}

void DaemonMetrics::OnCollective(const std::string& job, const char* op, size_t tensors,
                                 uint64_t bytes, absl::Duration elapsed,
                                 uint64_t arena_bytes_in_use) {
  collectives_.Add({job, host_}, static_cast<double>(tensors));
  reduced_bytes_.Add({job, host_}, static_cast<double>(bytes));
  arena_bytes_.Set({job, host_}, static_cast<double>(arena_bytes_in_use));
  latency_.Observe({absl::AsciiStrToLower(op), SizeBucket(bytes)}, absl::ToDoubleSeconds(elapsed));
}

void DaemonMetrics::OnNegotiationCycle(const std::string& job, int cached, int full) {
  cycles_.Add({job, host_}, 1);
  cache_hits_.Add({job, host_}, cached);
  cache_misses_.Add({job, host_}, full);
  const double hits = cache_hits_.Get({job, host_});
  const double total = hits + cache_misses_.Get({job, host_});
  if (total > 0) cache_ratio_.Set({job, host_}, hits / total);
}

void DaemonMetrics::OnRoundCarried(const std::string& job, size_t tensors) {
  round_carried_.Add({job, host_}, static_cast<double>(tensors));
}

void DaemonMetrics::OnRoundPartialWait(const std::string& job, bool ran_out) {
  round_partial_waits_.Add({job, host_}, 1);
  if (ran_out) round_partial_wait_timeouts_.Add({job, host_}, 1);
}

void DaemonMetrics::OnError(const char* kind) { errors_.Add({kind}, 1); }

void DaemonMetrics::SetCluster(const ClusterView& view) {
  std::map<std::string, int> by_state = {{"UP", 0}, {"DOWN", 0}};
  for (const Host& h : view.hosts()) {
    if (h.state() == UP) ++by_state["UP"];
    if (h.state() == DOWN) ++by_state["DOWN"];
  }
  for (const auto& [state, n] : by_state) hosts_.Set({state}, n);
  epoch_.Set({}, static_cast<double>(view.membership_epoch()));
}

void DaemonMetrics::SetJoined(bool joined) { joined_.Set({}, joined ? 1 : 0); }

void DaemonMetrics::SetLocalJobs(const std::vector<JobSummary>& jobs) {
  std::map<std::string, int> by_state;
  for (const char* state : kJobStates) by_state[state] = 0;
  pending_.Clear();
  stalled_.Clear();
  for (const JobSummary& j : jobs) {
    ++by_state[j.state()];
    registry_.TouchJob(j.name());
    pending_.Set({j.name(), host_}, j.pending_tensors());
    stalled_.Set({j.name(), host_}, j.stalled_size());
  }
  for (const auto& [state, n] : by_state) jobs_.Set({state}, n);
}

void DaemonMetrics::SetClientConnections(int clients) { clients_.Set({}, clients); }

void DaemonMetrics::SetDataPlaneBytes(uint64_t sent, uint64_t received) {
  sent_bytes_.Set({}, static_cast<double>(sent));
  received_bytes_.Set({}, static_cast<double>(received));
}

void DaemonMetrics::SetDataPlaneRejected(const std::string& reason, uint64_t count) {
  rejected_connections_.Set({reason}, static_cast<double>(count));
}

}  // namespace ard::metrics

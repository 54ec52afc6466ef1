// allreduced's metrics (docs/operator-guide.md "Metrics and health" lists them): the families of
// one daemon on its Registry, and the one-line hooks components call. The Daemon owns it; the job
// engine, the executor and the job channel hold a pointer (null in unit tests that do not measure).
//
// Thread: any (the Registry locks). Hooks are cheap: a map lookup under one mutex, no
// allocation on the steady path. Cluster and job state that is not pushed through a hook is
// copied in at scrape time by the Daemon's collector (SetCluster/SetLocalJobs/...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/metrics/registry.h"
#include "proto/admin.pb.h"
#include "proto/common.pb.h"

namespace ard::metrics {

class DaemonMetrics {
 public:
  // `host`: this daemon's host name (the `host` label of per-job series). Series of a job are
  // dropped `job_retention` after the job was last seen.
  DaemonMetrics(std::string host, absl::Duration job_retention, Registry::Clock clock = absl::Now);

  Registry& registry() { return registry_; }

  // --- Hooks (any thread) ---
  // The executor ran one committed response of `job`: `op` ("ALLREDUCE", ...), `tensors` in it,
  // one rank's input `bytes` over them, `elapsed` from start to results written.
  // `arena_bytes_in_use`: the job's result arena after it.
  void OnCollective(const std::string& job, const char* op, size_t tensors, uint64_t bytes,
                    absl::Duration elapsed, uint64_t arena_bytes_in_use);
  // One negotiation cycle (a host-ready message to the coordinator): `cached` tensors travelled
  // as response-cache ids (hits), `full` with their metadata (misses).
  void OnNegotiationCycle(const std::string& job, int cached, int full);
  // The executor wrote the results of `tensors` cached allreduces whose data a steady-state
  // readiness round carried (they ran no allreduce of their own).
  void OnRoundCarried(const std::string& job, size_t tensors);
  // A steady-state vote waited for cached tensors some local ranks had submitted
  // (steady_round_partial_wait_us); ran_out: the bound passed before they were all offered.
  void OnRoundPartialWait(const std::string& job, bool ran_out);
  // Something failed; `kind` is one of a small fixed set (docs/operator-guide.md "Metrics and
  // health"): "collective" (one response's tensors failed, the job goes on), "data_plane" (the
  // job's data plane broke), "job" (a job failed, whatever the cause).
  void OnError(const char* kind);

  // --- Scrape-time state (the Daemon's collector) ---
  // The coordinator's cluster view: hosts by state, the membership epoch.
  void SetCluster(const ClusterView& view);
  // 1 when this daemon is a cluster member (the coordinator, or a follower that joined).
  void SetJoined(bool joined);
  // This daemon's jobs: jobs by state, per job pending and stalled tensors; marks them present.
  void SetLocalJobs(const std::vector<JobSummary>& jobs);
  void SetClientConnections(int clients);
  // Running totals of the TCP data plane (all jobs), mirrored into counters.
  void SetDataPlaneBytes(uint64_t sent, uint64_t received);
  // Data connections the listener refused, by reason (DataListener::rejected: "bad_hello",
  // "bad_proof", ...). A total since start.
  void SetDataPlaneRejected(const std::string& reason, uint64_t count);

  // The upper bounds of the `size_le` label of the latency histogram ("4KiB" ... "+Inf").
  static std::string SizeBucket(uint64_t bytes);

 private:
  const std::string host_;
  Registry registry_;
  Family& hosts_;
  Family& epoch_;
  Family& joined_;
  Family& jobs_;
  Family& collectives_;
  Family& reduced_bytes_;
  Family& pending_;
  Family& stalled_;
  Family& cycles_;
  Family& cache_hits_;
  Family& cache_misses_;
  Family& cache_ratio_;
  Family& round_carried_;
  Family& round_partial_waits_;
  Family& round_partial_wait_timeouts_;
  Family& latency_;
  Family& arena_bytes_;
  Family& sent_bytes_;
  Family& received_bytes_;
  Family& rejected_connections_;
  Family& errors_;
  Family& clients_;
};

}  // namespace ard::metrics

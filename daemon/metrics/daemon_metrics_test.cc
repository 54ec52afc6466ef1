#include "daemon/metrics/daemon_metrics.h"

#include <catch2/catch.hpp>

#include "daemon/metrics/process_metrics.h"

namespace ard::metrics {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_CASE("collective hooks count per job and host and fill the latency histogram") {
  DaemonMetrics m("h-a", absl::Hours(1));
  m.OnCollective("j1", "ALLREDUCE", 3, 3000, absl::Microseconds(700), 4096);
  m.OnCollective("j1", "ALLREDUCE", 1, 2u << 20, absl::Milliseconds(20), 8192);
  const std::string text = m.registry().Render();
  CHECK(Has(text, "allreduced_job_collectives_total{job=\"j1\",host=\"h-a\"} 4"));
  CHECK(Has(text, "allreduced_job_reduced_bytes_total{job=\"j1\",host=\"h-a\"} 2100152"));
  CHECK(Has(text, "allreduced_job_result_arena_bytes{job=\"j1\",host=\"h-a\"} 8192"));
  CHECK(Has(text,
            "allreduced_collective_latency_seconds_bucket{op=\"allreduce\",size_le=\"4KiB\","
            "le=\"0.001\"} 1"));
  CHECK(Has(text,
            "allreduced_collective_latency_seconds_count{op=\"allreduce\",size_le=\"16MiB\"} 1"));
}

TEST_CASE("negotiation cycles and the response cache's hit ratio") {
  DaemonMetrics m("h-b", absl::Hours(1));
  m.OnNegotiationCycle("j", 0, 4);
  m.OnNegotiationCycle("j", 3, 1);
  const std::string text = m.registry().Render();
  CHECK(Has(text, "allreduced_job_negotiation_cycles_total{job=\"j\",host=\"h-b\"} 2"));
  CHECK(Has(text, "allreduced_job_response_cache_hits_total{job=\"j\",host=\"h-b\"} 3"));
  CHECK(Has(text, "allreduced_job_response_cache_misses_total{job=\"j\",host=\"h-b\"} 5"));
  CHECK(Has(text, "allreduced_job_response_cache_hit_ratio{job=\"j\",host=\"h-b\"} 0.375"));
}

TEST_CASE("tensors carried by steady-state rounds") {
  DaemonMetrics m("h-b", absl::Hours(1));
  m.OnRoundCarried("j", 3);
  m.OnRoundCarried("j", 1);
  CHECK(Has(m.registry().Render(),
            "allreduced_job_round_carried_tensors_total{job=\"j\",host=\"h-b\"} 4"));
}

TEST_CASE("cluster and local job state; an ended job keeps its counters, loses its gauges") {
  absl::Time now = absl::FromUnixSeconds(5000);
  DaemonMetrics m("h-a", absl::Minutes(5), [&now] { return now; });
  ClusterView view;
  view.set_membership_epoch(7);
  view.add_hosts()->set_state(UP);
  view.add_hosts()->set_state(UP);
  view.add_hosts()->set_state(DOWN);
  m.SetCluster(view);
  m.SetJoined(true);
  JobSummary running;
  running.set_name("train");
  running.set_state("running");
  running.set_pending_tensors(2);
  running.add_stalled();
  m.SetLocalJobs({running});
  m.OnCollective("train", "BROADCAST", 1, 10, absl::Microseconds(80), 0);
  m.OnError("job");
  m.SetClientConnections(4);
  m.SetDataPlaneBytes(1000, 2000);
  m.SetDataPlaneRejected("bad_proof", 3);
  std::string text = m.registry().Render();
  CHECK(Has(text, "allreduced_hosts{state=\"UP\"} 2"));
  CHECK(Has(text, "allreduced_hosts{state=\"DOWN\"} 1"));
  CHECK(Has(text, "allreduced_membership_epoch 7"));
  CHECK(Has(text, "allreduced_cluster_joined 1"));
  CHECK(Has(text, "allreduced_jobs{state=\"running\"} 1"));
  CHECK(Has(text, "allreduced_jobs{state=\"failed\"} 0"));
  CHECK(Has(text, "allreduced_job_tensors_pending{job=\"train\",host=\"h-a\"} 2"));
  CHECK(Has(text, "allreduced_job_tensors_stalled{job=\"train\",host=\"h-a\"} 1"));
  CHECK(Has(text, "allreduced_errors_total{kind=\"job\"} 1"));
  CHECK(Has(text, "allreduced_errors_total{kind=\"collective\"} 0"));
  CHECK(Has(text, "allreduced_client_connections 4"));
  CHECK(Has(text, "allreduced_data_plane_sent_bytes_total 1000"));
  CHECK(Has(text, "allreduced_data_plane_received_bytes_total 2000"));
  CHECK(Has(text, "allreduced_data_plane_rejected_connections_total{reason=\"bad_proof\"} 3"));

  m.SetLocalJobs({});  // the job ended
  now += absl::Minutes(4);
  text = m.registry().Render();
  CHECK_FALSE(Has(text, "allreduced_job_tensors_pending{job=\"train\",host=\"h-a\"} 2"));
  CHECK(Has(text, "allreduced_job_collectives_total{job=\"train\",host=\"h-a\"} 1"));
  now += absl::Minutes(2);
  text = m.registry().Render();
  CHECK(text.find("job=\"train\"") == std::string::npos);
}

TEST_CASE("size buckets") {
  CHECK(DaemonMetrics::SizeBucket(0) == "4KiB");
  CHECK(DaemonMetrics::SizeBucket(4096) == "4KiB");
  CHECK(DaemonMetrics::SizeBucket(4097) == "64KiB");
  CHECK(DaemonMetrics::SizeBucket(1u << 20) == "1MiB");
  CHECK(DaemonMetrics::SizeBucket(300u << 20) == "+Inf");
}

TEST_CASE("process metrics read this process") {
  absl::StatusOr<ProcessSample> s = SampleProcess();
  REQUIRE(s.ok());
  CHECK(s->resident_bytes > (1u << 20));
  CHECK(s->open_fds >= 3);
  CHECK(s->max_fds >= s->open_fds);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  CHECK(s->start_time_seconds > now - 600);
  CHECK(s->start_time_seconds <= now + 1);
  Registry r(absl::Hours(1));
  AddProcessMetrics(r);
  const std::string text = r.Render();
  CHECK(text.find("# TYPE process_cpu_seconds_total counter\n") != std::string::npos);
  CHECK(text.find("\nprocess_open_fds ") != std::string::npos);
}

}  // namespace
}  // namespace ard::metrics

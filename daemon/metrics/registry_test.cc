#include "daemon/metrics/registry.h"

#include <catch2/catch.hpp>

namespace ard::metrics {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_CASE("counters and gauges render with HELP, TYPE and escaped labels") {
  Registry r(absl::Hours(1));
  Family& c = r.AddCounter("x_events_total", "Events.\nSecond line.", {"job", "host"});
  Family& g = r.AddGauge("x_level", "Level.", {});
  c.Add({"a\"b", "h\\1"}, 2);
  c.Add({"a\"b", "h\\1"}, 3);
  g.Set({}, 0.25);
  const std::string text = r.Render();
  CHECK(Has(text, "# HELP x_events_total Events.\\nSecond line."));
  CHECK(Has(text, "# TYPE x_events_total counter"));
  CHECK(Has(text, "x_events_total{job=\"a\\\"b\",host=\"h\\\\1\"} 5"));
  CHECK(Has(text, "# TYPE x_level gauge"));
  CHECK(Has(text, "x_level 0.25"));
  CHECK(c.Get({"a\"b", "h\\1"}) == 5);
  CHECK(c.Get({"other", "h"}) == 0);
}

TEST_CASE("large integral values print in full, specials by name") {
  CHECK(FormatValue(12345678901234.0) == "12345678901234");
  CHECK(FormatValue(-3) == "-3");
  CHECK(FormatValue(1.0 / 0.0) == "+Inf");
  CHECK(FormatValue(0.0 / 0.0) == "NaN");
  CHECK(FormatValue(0.1) == "0.10000000000000001");
}

TEST_CASE("histograms count values into cumulative buckets with sum and count") {
  Registry r(absl::Hours(1));
  Family& h = r.AddHistogram("x_seconds", "Latency.", {"op"}, {0.5, 0.1, 1});
  h.Observe({"allreduce"}, 0.05);
  h.Observe({"allreduce"}, 0.1);  // on a bound: counted in that bucket (le)
  h.Observe({"allreduce"}, 0.7);
  h.Observe({"allreduce"}, 3);
  const std::string text = r.Render();
  CHECK(Has(text, "# TYPE x_seconds histogram"));
  CHECK(Has(text, "x_seconds_bucket{op=\"allreduce\",le=\"0.10000000000000001\"} 2"));
  CHECK(Has(text, "x_seconds_bucket{op=\"allreduce\",le=\"0.5\"} 2"));
  CHECK(Has(text, "x_seconds_bucket{op=\"allreduce\",le=\"1\"} 3"));
  CHECK(Has(text, "x_seconds_bucket{op=\"allreduce\",le=\"+Inf\"} 4"));
  CHECK(Has(text, "x_seconds_sum{op=\"allreduce\"} 3.8500000000000001"));
  CHECK(Has(text, "x_seconds_count{op=\"allreduce\"} 4"));
}

TEST_CASE("a job's series outlive it for the retention, then are dropped") {
  absl::Time now = absl::FromUnixSeconds(1000);
  Registry r(absl::Minutes(10), [&now] { return now; });
  Family& c = r.AddCounter("x_total", "X.", {"job"});
  Family& g = r.AddGauge("x_up", "Unlabelled by job.", {"state"});
  c.Add({"old"}, 1);
  c.Add({"live"}, 1);
  g.Set({"UP"}, 1);
  now += absl::Minutes(9);
  r.TouchJob("live");
  CHECK(Has(r.Render(), "x_total{job=\"old\"} 1"));  // ended 9 minutes ago: history kept
  now += absl::Minutes(2);
  std::string text = r.Render();
  CHECK_FALSE(Has(text, "x_total{job=\"old\"} 1"));
  CHECK(Has(text, "x_total{job=\"live\"} 1"));
  CHECK(Has(text, "x_up{state=\"UP\"} 1"));  // families without a job label are never dropped
  now += absl::Minutes(11);
  CHECK_FALSE(Has(r.Render(), "x_total{job=\"live\"} 1"));
}

TEST_CASE("collectors run before each render; Clear drops a family's series") {
  Registry r(absl::Hours(1));
  Family& g = r.AddGauge("x_jobs", "Jobs.", {"state"});
  int runs = 0;
  r.AddCollector([&] {
    g.Clear();
    g.Set({runs++ == 0 ? "running" : "ended"}, 1);
  });
  CHECK(Has(r.Render(), "x_jobs{state=\"running\"} 1"));
  const std::string second = r.Render();
  CHECK(Has(second, "x_jobs{state=\"ended\"} 1"));
  CHECK_FALSE(Has(second, "x_jobs{state=\"running\"} 1"));
}

}  // namespace
}  // namespace ard::metrics

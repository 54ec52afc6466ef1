// A small Prometheus metrics registry: counter, gauge and histogram families with labels,
// rendered in the text exposition format (version 0.0.4) when scraped. The Daemon owns one;
// components update it through DaemonMetrics (daemon_metrics.h).
//
// Thread: any. One mutex guards every series; an update is a map lookup under it. Collectors run
// before rendering, outside that mutex (they may wait for the control loop, whose own updates
// take the mutex).
//
// Cardinality: a family whose labels include "job" keeps each job's series while the job is seen
// (any update of its series, or TouchJob) and drops them `job_retention` after it was last seen,
// so counters outlive a job's end for a while (history) and ended jobs do not pile up.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ard::metrics {

// Label values, in the order of the family's label names.
using LabelValues = std::vector<std::string>;

class Registry;

// One metric family: a name, help text, label names and one series per distinct label values.
class Family {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Counter: adds `delta` (>= 0). Gauge: adds `delta` (any sign).
  void Add(const LabelValues& labels, double delta);
  // Gauge (or a counter mirrored from a source that already counts): sets the value.
  void Set(const LabelValues& labels, double value);
  // Histogram: counts `value` into its bucket.
  void Observe(const LabelValues& labels, double value);
  // Drops every series (a gauge recomputed from scratch at each scrape).
  void Clear();
  // A counter's or gauge's value (0 for a series that does not exist).
  double Get(const LabelValues& labels) const;

 private:
  friend class Registry;
  struct Series {
    double value = 0;               // counter, gauge
    std::vector<uint64_t> buckets;  // histogram: per bucket (not cumulative), then +Inf
    double sum = 0;
    uint64_t count = 0;
  };

  Family(Registry& registry, Type type, std::string name, std::string help,
         std::vector<std::string> label_names, std::vector<double> bounds);
  Series& SeriesOf(const LabelValues& labels);  // requires registry_.mu_
  void Render(std::string* out) const;          // requires registry_.mu_

  Registry& registry_;
  const Type type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histogram upper bounds, ascending
  int job_label_ = -1;                // index of the "job" label, or -1
  std::map<LabelValues, Series> series_;
};

class Registry {
 public:
  using Clock = std::function<absl::Time()>;
  explicit Registry(absl::Duration job_retention, Clock clock = absl::Now);
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Declares a family; the reference stays valid for the registry's life. Names follow
  // Prometheus's conventions (counters end in _total, units in the name).
  Family& AddCounter(std::string name, std::string help, std::vector<std::string> label_names);
  Family& AddGauge(std::string name, std::string help, std::vector<std::string> label_names);
  Family& AddHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                       std::vector<double> bounds);

  // Runs at every Render, in the order added, before the series are read: refreshes gauges from
  // state that is not pushed (the cluster view, /proc).
  void AddCollector(std::function<void()> collect);

  // Marks `job` as still present: its series are kept.
  void TouchJob(const std::string& job);

  // Runs the collectors, drops jobs unseen for the retention, and renders every family.
  std::string Render();

 private:
  friend class Family;
  Family& Add(Family::Type type, std::string name, std::string help,
              std::vector<std::string> label_names, std::vector<double> bounds);
  void SeenLocked(const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration job_retention_;
  const Clock clock_;
  absl::Mutex collect_mu_;  // one scrape's collectors at a time
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(collect_mu_);
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> job_seen_ ABSL_GUARDED_BY(mu_);
};

// Text-format helpers (exposed for tests): a sample value ("12", "0.25", "+Inf", "NaN") and a
// label value with \\, \" and \n escaped.
std::string FormatValue(double value);
std::string EscapeLabelValue(const std::string& value);

}  // namespace ard::metrics

#include "daemon/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ard::metrics {
namespace {

const char* TypeName(Family::Type type) {
  switch (type) {
    case Family::Type::kCounter:
      return "counter";
    case Family::Type::kGauge:
      return "gauge";
    case Family::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} plus an optional extra label (a histogram's le); "" when there are none.
std::string LabelText(const std::vector<std::string>& names, const LabelValues& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", names[i], "=\"", EscapeLabelValue(values[i]),
                    "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? out : out + "}";
}

}  // namespace

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Counters of bytes pass 2^32 quickly: integers print in full, not in %g's 6 digits.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.17g", value);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Family::Family(Registry& registry, Type type, std::string name, std::string help,
               std::vector<std::string> label_names, std::vector<double> bounds)
    : registry_(registry),
      type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (label_names_[i] == "job") job_label_ = static_cast<int>(i);
  }
}

Family::Series& Family::SeriesOf(const LabelValues& labels) {
  LabelValues padded = labels;
  padded.resize(label_names_.size());  // a caller's missing values read as ""
  if (job_label_ >= 0) registry_.SeenLocked(padded[job_label_]);
  Series& s = series_[std::move(padded)];
  if (type_ == Type::kHistogram && s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  return s;
}

void Family::Add(const LabelValues& labels, double delta) {
  absl::MutexLock lock(&registry_.mu_);
  SeriesOf(labels).value += delta;
}

void Family::Set(const LabelValues& labels, double value) {
  absl::MutexLock lock(&registry_.mu_);
  SeriesOf(labels).value = value;
}

void Family::Observe(const LabelValues& labels, double value) {
  absl::MutexLock lock(&registry_.mu_);
  Series& s = SeriesOf(labels);
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++s.buckets[bucket];
  s.sum += value;
  ++s.count;
}

double Family::Get(const LabelValues& labels) const {
  LabelValues padded = labels;
  padded.resize(label_names_.size());
  absl::MutexLock lock(&registry_.mu_);
  auto it = series_.find(padded);
  return it == series_.end() ? 0 : it->second.value;
}

void Family::Clear() {
  absl::MutexLock lock(&registry_.mu_);
  series_.clear();
}

void Family::Render(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ",
                  TypeName(type_), "\n");
  for (const auto& [labels, s] : series_) {
    if (type_ != Type::kHistogram) {
      absl::StrAppend(out, name_, LabelText(label_names_, labels), " ", FormatValue(s.value), "\n");
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= bounds_.size(); ++b) {
      cumulative += s.buckets[b];
      const std::string le = b < bounds_.size() ? FormatValue(bounds_[b]) : "+Inf";
      absl::StrAppend(out, name_, "_bucket", LabelText(label_names_, labels, "le", le), " ",
                      cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_sum", LabelText(label_names_, labels), " ", FormatValue(s.sum),
                    "\n", name_, "_count", LabelText(label_names_, labels), " ", s.count, "\n");
  }
}

Registry::Registry(absl::Duration job_retention, Clock clock)
    : job_retention_(job_retention), clock_(std::move(clock)) {}

Family& Registry::Add(Family::Type type, std::string name, std::string help,
                      std::vector<std::string> label_names, std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  families_.push_back(std::unique_ptr<Family>(new Family(
      *this, type, std::move(name), std::move(help), std::move(label_names), std::move(bounds))));
  return *families_.back();
}

Family& Registry::AddCounter(std::string name, std::string help,
                             std::vector<std::string> label_names) {
  return Add(Family::Type::kCounter, std::move(name), std::move(help), std::move(label_names), {});
}

Family& Registry::AddGauge(std::string name, std::string help,
                           std::vector<std::string> label_names) {
  return Add(Family::Type::kGauge, std::move(name), std::move(help), std::move(label_names), {});
}

Family& Registry::AddHistogram(std::string name, std::string help,
                               std::vector<std::string> label_names, std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  return Add(Family::Type::kHistogram, std::move(name), std::move(help), std::move(label_names),
             std::move(bounds));
}

void Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collect_mu_);
  collectors_.push_back(std::move(collect));
}

void Registry::TouchJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  SeenLocked(job);
}

void Registry::SeenLocked(const std::string& job) { job_seen_[job] = clock_(); }

void Registry::DropExpiredLocked() {
  const absl::Time cutoff = clock_() - job_retention_;
  for (auto it = job_seen_.begin(); it != job_seen_.end();) {
    if (it->second >= cutoff) {
      ++it;
      continue;
    }
    for (auto& family : families_) {
      if (family->job_label_ < 0) continue;
      for (auto s = family->series_.begin(); s != family->series_.end();) {
        s = s->first[family->job_label_] == it->first ? family->series_.erase(s) : std::next(s);
      }
    }
    it = job_seen_.erase(it);
  }
}

std::string Registry::Render() {
  {
    absl::MutexLock lock(&collect_mu_);
    for (const auto& collect : collectors_) collect();
  }
  absl::MutexLock lock(&mu_);
  DropExpiredLocked();
  std::string out;
  for (const auto& family : families_) family->Render(&out);
  return out;
}

}  // namespace ard::metrics

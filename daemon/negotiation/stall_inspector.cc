#include "daemon/negotiation/stall_inspector.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"

namespace ard::negotiation {
namespace {

// "1 on h-b", "3 (pid 42, last active 2.5s ago)": a missing rank as logs and reports name it.
std::string RankText(int rank, const MissingRank& m, absl::Time now) {
  std::string out = absl::StrCat(rank);
  if (!m.host.empty()) absl::StrAppend(&out, " on ", m.host);
  std::vector<std::string> detail;
  if (m.pid != 0) detail.push_back(absl::StrCat("pid ", m.pid));
  if (m.last_activity) {
    detail.push_back(
        absl::StrFormat("last active %.1fs ago", absl::ToDoubleSeconds(now - *m.last_activity)));
  }
  if (!detail.empty()) absl::StrAppend(&out, " (", absl::StrJoin(detail, ", "), ")");
  return out;
}

std::string MissingText(const JobSummary::StalledTensor& t, const std::vector<MissingRank>& missing,
                        absl::Time now) {
  std::vector<std::string> parts;
  for (int i = 0; i < t.missing_ranks_size(); ++i) {
    parts.push_back(RankText(t.missing_ranks(i), missing[i], now));
  }
  return absl::StrJoin(parts, ", ");
}

// One entry, and what `describe` said of each of its missing ranks (same order).
JobSummary::StalledTensor Entry(const ReadinessTable::Waiting& w, absl::Time now,
                                const DescribeRank& describe, std::vector<MissingRank>* missing) {
  JobSummary::StalledTensor t;
  t.set_name(w.name);
  t.set_waiting_s(absl::ToDoubleSeconds(w.waited));
  for (int r : w.submitted) t.add_submitted_ranks(r);
  bool hosts = false, activity = false;
  for (int r : w.missing) {
    t.add_missing_ranks(r);
    missing->push_back(describe(r));
    hosts = hosts || !missing->back().host.empty();
    activity = activity || missing->back().last_activity.has_value();
  }
  // Parallel to missing_ranks when set at all (a job knows all its ranks' hosts, or none).
  for (const MissingRank& m : *missing) {
    if (hosts) t.add_missing_hosts(m.host);
    if (activity) {
      t.add_missing_last_activity_s(m.last_activity ? absl::ToDoubleSeconds(now - *m.last_activity)
                                                    : 0);
    }
  }
  return t;
}

}  // namespace

std::vector<JobSummary::StalledTensor> StallInspector::Describe(
    const std::vector<ReadinessTable::Waiting>& waiting, absl::Time now, absl::Duration warning,
    const DescribeRank& describe) {
  std::vector<JobSummary::StalledTensor> out;
  for (const auto& w : waiting) {
    if (w.waited < warning) continue;
    std::vector<MissingRank> missing;
    out.push_back(Entry(w, now, describe, &missing));
  }
  return out;
}

StallInspector::Report StallInspector::Inspect(const std::string& job,
                                               const std::vector<ReadinessTable::Waiting>& waiting,
                                               absl::Time now, const StallThresholds& thresholds,
                                               const DescribeRank& describe) {
  Report report;
  std::set<std::string> still;
  for (const auto& w : waiting) {
    if (w.waited < thresholds.warning) continue;
    std::vector<MissingRank> missing;
    report.stalled.push_back(Entry(w, now, describe, &missing));
    const JobSummary::StalledTensor& t = report.stalled.back();
    still.insert(w.name);
    if (warned_.insert(w.name).second) {
      Logger("negotiation")
          ->warn(
              "stalled tensor job={} tensor={} waiting_s={:.1f} missing_ranks=[{}] "
              "submitted_ranks=[{}]",
              job, w.name, t.waiting_s(), MissingText(t, missing, now),
              absl::StrJoin(w.submitted, ", "));
    }
    if (!report.shutdown && thresholds.shutdown > absl::ZeroDuration() &&
        w.waited >= thresholds.shutdown) {
      report.shutdown = absl::StrCat("stall shutdown: tensor ", w.name, " waited ",
                                     absl::StrFormat("%.1fs", t.waiting_s()), " for ranks ",
                                     MissingText(t, missing, now));
    }
  }
  // Forget tensors that completed, so a later stall of the same name is logged again.
  for (auto it = warned_.begin(); it != warned_.end();) {
    it = still.count(*it) ? std::next(it) : warned_.erase(it);
  }
  last_ = report.stalled;
  return report;
}

}  // namespace ard::negotiation

#include "ctl/jobs_format.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ctl/status_format.h"
#include "google/protobuf/util/json_util.h"

namespace ard::ctl {
namespace {

bool Finished(const JobSummary& j) { return j.state() == "ended" || j.state() == "failed"; }

// Forming and running jobs first (by name), then ended and failed ones, most recent end first.
std::vector<const JobSummary*> Ordered(const ClusterView& view) {
  std::vector<const JobSummary*> jobs;
  for (const JobSummary& j : view.jobs()) jobs.push_back(&j);
  std::stable_sort(jobs.begin(), jobs.end(), [](const JobSummary* a, const JobSummary* b) {
    if (Finished(*a) != Finished(*b)) return !Finished(*a);
    if (!Finished(*a)) return a->name() < b->name();
    return a->age_s() - a->duration_s() < b->age_s() - b->duration_s();
  });
  return jobs;
}

}  // namespace

double JobDurationSeconds(const JobSummary& job) {
  return Finished(job) && job.duration_s() > 0 ? job.duration_s() : job.age_s();
}

std::string FormatJobsTable(const ClusterView& view) {
  const std::vector<const JobSummary*> jobs = Ordered(view);
  if (jobs.empty()) return "No running or recent jobs.\n";
  std::vector<std::vector<std::string>> rows = {{"JOB", "ID", "STATE", "RANKS", "HOSTS", "DURATION",
                                                 "ENDED", "COLLECTIVES", "REDUCED", "THROUGHPUT",
                                                 "REASON"}};
  for (const JobSummary* j : jobs) {
    const double duration = JobDurationSeconds(*j);
    const std::string throughput =
        duration > 0 && j->bytes_reduced() > 0
            ? FormatBytes(static_cast<uint64_t>(j->bytes_reduced() / duration)) + "/s"
            : "-";
    const std::string ended =
        Finished(*j) ? FormatDuration(std::max(0.0, j->age_s() - duration)) + " ago" : "-";
    rows.push_back({j->name(), j->job_id() == 0 ? "-" : absl::StrCat(j->job_id()), j->state(),
                    absl::StrCat(j->size()), absl::StrJoin(j->hosts(), ","),
                    FormatDuration(duration), ended, absl::StrCat(j->collectives_completed()),
                    FormatBytes(j->bytes_reduced()), throughput,
                    j->failure().empty() ? "-" : j->failure()});
  }
  return RenderTable(rows);
}

absl::StatusOr<std::string> FormatJobsJson(const ClusterView& view) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::vector<std::string> items;
  for (const JobSummary* j : Ordered(view)) {
    std::string json;
    if (auto s = google::protobuf::util::MessageToJsonString(*j, &json, print); !s.ok()) {
      return absl::InternalError(std::string(s.message()));
    }
    items.push_back(std::move(json));
  }
  return absl::StrCat("{\"jobs\":[", absl::StrJoin(items, ","), "]}");
}

}  // namespace ard::ctl

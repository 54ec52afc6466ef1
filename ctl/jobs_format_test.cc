#include "ctl/jobs_format.h"

#include <sstream>
#include <vector>

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

JobSummary Job(const std::string& name, const std::string& state, double age_s, double duration_s,
               uint64_t bytes) {
  JobSummary j;
  j.set_name(name);
  j.set_state(state);
  j.set_size(4);
  j.add_hosts("a");
  j.add_hosts("b");
  j.set_age_s(age_s);
  j.set_duration_s(duration_s);
  j.set_bytes_reduced(bytes);
  return j;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST_CASE("jobs: running first, then finished ones most recent first, with reason and speed") {
  ClusterView view;
  *view.add_jobs() = Job("old", "ended", 600, 60, 60ull << 30);  // ended 9 min ago, 1 GiB/s
  JobSummary failed = Job("broke", "failed", 30, 20, 0);         // ended 10 s ago
  failed.set_failure("rank 2 on host b exited");
  failed.set_job_id(7);
  *view.add_jobs() = failed;
  *view.add_jobs() = Job("train", "running", 4, 0, 8ull << 20);  // 2 MiB/s so far
  const std::vector<std::string> lines = Lines(FormatJobsTable(view));
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].rfind("JOB", 0) == 0);
  CHECK(lines[0].find("THROUGHPUT") != std::string::npos);
  CHECK(lines[1].rfind("train ", 0) == 0);
  CHECK(lines[1].find("running") != std::string::npos);
  CHECK(lines[1].find("4.0s") != std::string::npos);
  CHECK(lines[1].find("2.0 MiB/s") != std::string::npos);
  CHECK(lines[2].rfind("broke ", 0) == 0);
  CHECK(lines[2].find(" 7 ") != std::string::npos);
  CHECK(lines[2].find("20.0s") != std::string::npos);  // its duration, not its age
  CHECK(lines[2].find("10.0s ago") != std::string::npos);
  CHECK(lines[2].find("rank 2 on host b exited") != std::string::npos);
  CHECK(lines[3].rfind("old ", 0) == 0);
  CHECK(lines[3].find("1m00s") != std::string::npos);
  CHECK(lines[3].find("1.0 GiB/s") != std::string::npos);
  CHECK(lines[3].find("9m00s ago") != std::string::npos);
}

TEST_CASE("jobs: none") { CHECK(FormatJobsTable(ClusterView()) == "No running or recent jobs.\n"); }

TEST_CASE("jobs --json lists the jobs in the table's order with their durations") {
  ClusterView view;
  *view.add_jobs() = Job("done", "ended", 100, 40, 0);
  *view.add_jobs() = Job("live", "running", 5, 0, 0);
  absl::StatusOr<std::string> json = FormatJobsJson(view);
  REQUIRE(json.ok());
  CHECK(json->rfind("{\"jobs\":[{", 0) == 0);
  CHECK(json->find("\"live\"") < json->find("\"done\""));
  CHECK(json->find("\"duration_s\":40") != std::string::npos);
  CHECK(JobDurationSeconds(view.jobs(0)) == 40);
  CHECK(JobDurationSeconds(view.jobs(1)) == 5);
}

}  // namespace
}  // namespace ard::ctl

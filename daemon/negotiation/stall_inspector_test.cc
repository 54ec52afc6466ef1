// The stall inspector with fake times: entries for status, one log line per newly stalled
// tensor, forgetting completed tensors, stall shutdown; missing ranks described the local way
// (pid, last activity) and the coordinator's way (host).
#include "daemon/negotiation/stall_inspector.h"

#include <sstream>

#include "catch2/catch.hpp"
#include "daemon/common/logging.h"
#include "spdlog/sinks/ostream_sink.h"

namespace ard::negotiation {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1000);

ReadinessTable::Waiting Waiting(std::string name, absl::Duration waited, std::vector<int> submitted,
                                std::vector<int> missing) {
  return {std::move(name), waited, std::move(submitted), std::move(missing)};
}

MissingRank OnHost(int rank) { return {rank < 2 ? "h-a" : "h-b", 0, std::nullopt}; }

// Counts the inspector's warnings (Logger "negotiation") while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    Logger("negotiation")->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = Logger("negotiation")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_CASE("Describe: only tensors past the warning, missing ranks with their hosts") {
  const auto stalled = StallInspector::Describe({Waiting("old", absl::Seconds(9), {0, 1}, {2, 3}),
                                                 Waiting("new", absl::Seconds(1), {0}, {3})},
                                                kNow, absl::Seconds(5), OnHost);
  REQUIRE(stalled.size() == 1);
  CHECK(stalled[0].name() == "old");
  CHECK(stalled[0].waiting_s() == 9);
  CHECK(std::vector<int>(stalled[0].submitted_ranks().begin(),
                         stalled[0].submitted_ranks().end()) == std::vector<int>{0, 1});
  CHECK(stalled[0].missing_ranks_size() == 2);
  CHECK(stalled[0].missing_hosts(0) == "h-b");
  CHECK(stalled[0].missing_last_activity_s_size() == 0);  // the coordinator does not know it
}

TEST_CASE("Inspect logs a stalled tensor once, forgets it when it completes, logs it again") {
  LogCapture log;
  StallInspector inspector;
  const StallThresholds thresholds{absl::Seconds(5)};
  const auto local = [](int rank) {
    return MissingRank{"", static_cast<uint32_t>(100 + rank), kNow - absl::Seconds(3)};
  };
  const std::vector<ReadinessTable::Waiting> waiting = {
      Waiting("grad", absl::Seconds(6), {0}, {1})};
  auto report = inspector.Inspect("train", waiting, kNow, thresholds, local);
  REQUIRE(report.stalled.size() == 1);
  CHECK(report.stalled[0].missing_last_activity_s(0) == 3);
  CHECK(report.stalled[0].missing_hosts_size() == 0);
  CHECK_FALSE(report.shutdown);
  inspector.Inspect("train", waiting, kNow + absl::Seconds(1), thresholds, local);
  REQUIRE(log.Lines().size() == 1);
  CHECK(log.Lines()[0].find("stalled tensor job=train tensor=grad waiting_s=6.0 missing_ranks=[1 "
                            "(pid 101, last active 3.0s ago)] submitted_ranks=[0]") !=
        std::string::npos);
  // Completed (no longer waiting): forgotten; a later stall of the same name is logged again.
  CHECK(inspector.Inspect("train", {}, kNow + absl::Seconds(2), thresholds, local).stalled.empty());
  inspector.Inspect("train", waiting, kNow + absl::Seconds(3), thresholds, local);
  CHECK(log.Lines().size() == 2);
  // Below the warning threshold: neither reported nor logged.
  inspector.Inspect("train", {Waiting("young", absl::Seconds(1), {0}, {1})}, kNow, thresholds,
                    local);
  CHECK(log.Lines().size() == 2);
}

TEST_CASE("stall shutdown names the oldest tensor past the threshold and its missing ranks") {
  StallInspector inspector;
  const std::vector<ReadinessTable::Waiting> waiting = {
      Waiting("first", absl::Milliseconds(2500), {0, 1}, {2}),
      Waiting("second", absl::Seconds(2), {2}, {0, 1}),
      Waiting("third", absl::Seconds(1), {0}, {3})};
  auto report =
      inspector.Inspect("train", waiting, kNow, {absl::Seconds(1), absl::Seconds(2)}, OnHost);
  CHECK(report.stalled.size() == 3);
  REQUIRE(report.shutdown);
  CHECK(*report.shutdown == "stall shutdown: tensor first waited 2.5s for ranks 2 on h-b");
  // Zero shutdown: never.
  CHECK_FALSE(inspector.Inspect("train", waiting, kNow, {absl::Seconds(1)}, OnHost).shutdown);
  // Below the threshold: not yet.
  CHECK_FALSE(
      inspector.Inspect("train", waiting, kNow, {absl::Seconds(1), absl::Seconds(3)}, OnHost)
          .shutdown);
}

}  // namespace
}  // namespace ard::negotiation

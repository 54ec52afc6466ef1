#include "daemon/config/config_reload.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "daemon/config/config_loader.h"

namespace ard::config {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("log_level applies live; other changed fields are reported as needing a restart") {
  DaemonConfig running = Defaults();
  DaemonConfig reloaded = running;
  reloaded.set_log_level("debug");
  reloaded.set_stall_warning_ms(30000);
  ReloadPlan plan = PlanReload(running, reloaded);
  CHECK(plan.next.log_level() == "debug");
  CHECK(plan.next.stall_warning_ms() == 60000);  // not applied
  REQUIRE(plan.applied == std::vector<std::string>{"log_level \"info\" -> \"debug\""});
  REQUIRE(plan.need_restart == std::vector<std::string>{"stall_warning_ms 60000 -> 30000"});
  CHECK(DescribeReload({"--config=/etc/a.conf"}, plan) ==
        "file=/etc/a.conf applied=[log_level \"info\" -> \"debug\"] "
        "needs_restart=[stall_warning_ms 60000 -> 30000] (restart the daemon to apply these)");
  CHECK(DescribeReload({}, PlanReload(running, running)) == "file=none nothing changed");
}

TEST_CASE("reload re-reads the file and the command-line flags still win") {
  const std::string path = WriteTemp("reload.conf", "log_level: \"info\"\nhost_name: \"h\"\n");
  const std::vector<std::string> args = {"--config", path, "--max_clients=7"};
  bool help = false;
  absl::StatusOr<DaemonConfig> running = LoadConfig(args, &help);
  REQUIRE(running.ok());
  WriteTemp("reload.conf", "log_level: \"trace\"\nhost_name: \"h\"\nmax_clients: 9\n");
  absl::StatusOr<ReloadPlan> plan = Reload(args, *running);
  REQUIRE(plan.ok());
  CHECK(plan->next.log_level() == "trace");
  CHECK(plan->next.max_clients() == 7);
  CHECK(plan->need_restart.empty());  // max_clients: the flag still says 7
  CHECK(DescribeReload(args, *plan).rfind("file=" + path + " applied=[log_level", 0) == 0);

  WriteTemp("reload.conf", "log_level: \"trace\"\nlog_level: \"debug\"\n");
  absl::StatusOr<ReloadPlan> bad = Reload(args, *running);
  REQUIRE(!bad.ok());
  CHECK(std::string(bad.status().message()).find("reload.conf:2:") != std::string::npos);
}

}  // namespace
}  // namespace ard::config

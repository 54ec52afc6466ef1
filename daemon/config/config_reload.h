// SIGHUP: re-reads the configuration the daemon started with (the --config file, then the same
// command-line flags, which still win) and works out what changed. Only log_level applies to a
// running daemon; any other changed field needs a restart and is reported as such. Pure functions;
// the caller (daemon_main.cc, on the main thread) applies the result.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace ard::config {

struct ReloadPlan {
  DaemonConfig next;                      // the running config with the live fields updated
  std::vector<std::string> applied;       // "log_level info -> debug"
  std::vector<std::string> need_restart;  // "stall_warning_ms 60000 -> 30000"
};

// Compares a freshly loaded config with the running one.
ReloadPlan PlanReload(const DaemonConfig& running, const DaemonConfig& reloaded);

// Loads the config again from the daemon's own arguments (argv without argv[0]) and plans the
// reload. Errors are LoadConfig's (one line naming the file and line at fault).
absl::StatusOr<ReloadPlan> Reload(const std::vector<std::string>& args,
                                  const DaemonConfig& running);

// The log line's content: "file=F applied=[...] needs_restart=[...]" or "file=F nothing changed"
// (file=none when the daemon was started without --config).
std::string DescribeReload(const std::vector<std::string>& args, const ReloadPlan& plan);

}  // namespace ard::config

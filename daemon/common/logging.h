// Named spdlog loggers per subsystem (STYLE.md "Logging"): rpc, cluster, negotiation, dataplane,
// shm, local, daemon. All write to stderr (the journal under systemd). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Debian's Abseil has its own string_view (not std::string_view): let fmt print it, so that
// status.message() can be logged directly.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace ard {

// Parses "trace|debug|info|warn|error|critical|off".
absl::Status ParseLogLevel(const std::string& name, spdlog::level::level_enum* level);

// Sets the level of every named logger (existing and future ones).
void SetLogLevel(spdlog::level::level_enum level);

// Returns the logger for a subsystem, creating it on first use.
std::shared_ptr<spdlog::logger> Logger(const std::string& subsystem);

}  // namespace ard

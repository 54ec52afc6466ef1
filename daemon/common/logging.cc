#include "daemon/common/logging.h"

#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace ard {
namespace {

struct LogState {
  absl::Mutex mu;
  spdlog::level::level_enum level ABSL_GUARDED_BY(mu) = spdlog::level::info;
};

LogState& State() {
  static LogState* state = new LogState();
  return *state;
}

}  // namespace

absl::Status ParseLogLevel(const std::string& name, spdlog::level::level_enum* level) {
  static const char* kNames[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (int i = 0; i < 7; ++i) {
    if (name == kNames[i]) {
      *level = static_cast<spdlog::level::level_enum>(i);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown log level '" + name +
                                    "' (expected trace, debug, info, warn, error, critical, off)");
}

void SetLogLevel(spdlog::level::level_enum level) {
  LogState& state = State();
  absl::MutexLock lock(&state.mu);
  state.level = level;
  spdlog::apply_all([level](std::shared_ptr<spdlog::logger> l) { l->set_level(level); });
}

std::shared_ptr<spdlog::logger> Logger(const std::string& subsystem) {
  LogState& state = State();
  absl::MutexLock lock(&state.mu);
  if (auto existing = spdlog::get(subsystem)) return existing;
  auto logger = spdlog::stderr_logger_mt(subsystem);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(state.level);
  return logger;
}

}  // namespace ard

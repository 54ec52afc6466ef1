#include "daemon/systemd/notifier.h"

#include <systemd/sd-daemon.h>

#include <cstring>

#include "daemon/common/logging.h"

namespace ard::systemd {
namespace {

void Send(const std::string& state) {
  int rc = sd_notify(/*unset_environment=*/0, state.c_str());
  if (rc < 0) {
    Logger("daemon")->warn("sd_notify failed state=\"{}\" error=\"{}\"", state, std::strerror(-rc));
  }
}

}  // namespace

void Notifier::Ready(const std::string& status) { Send("READY=1\nSTATUS=" + status); }

void Notifier::Stopping() { Send("STOPPING=1\nSTATUS=shutting down"); }

void Notifier::Watchdog() { Send("WATCHDOG=1"); }

absl::Duration Notifier::WatchdogInterval() const {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) {
    return absl::ZeroDuration();
  }
  return absl::Microseconds(usec) / 2;
}

}  // namespace ard::systemd

// systemd integration through libsystemd's sd_notify: READY=1 once serving, WATCHDOG=1 pings,
// STOPPING=1 at shutdown, STATUS= lines. A no-op when NOTIFY_SOCKET is unset (not under
// systemd). Thread-safe (sd_notify is).
#pragma once

#include <string>

#include "absl/time/time.h"

namespace ard::systemd {

class Notifier {
 public:
  void Ready(const std::string& status);
  void Stopping();
  void Watchdog();
  // Half of WATCHDOG_USEC when systemd asks for watchdog pings for this process, else zero.
  absl::Duration WatchdogInterval() const;
};

}  // namespace ard::systemd

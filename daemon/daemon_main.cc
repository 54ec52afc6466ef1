#include "daemon/daemon_main.h"

#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "daemon/common/logging.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"

namespace ard {

int DaemonMain(int argc, char** argv) {
  bool help = false;
  absl::StatusOr<DaemonConfig> config =
      config::LoadConfig(std::vector<std::string>(argv + 1, argv + argc), &help);
  if (help) {
    std::fputs(config::Usage().c_str(), stdout);
    return 0;
  }
  if (!config.ok()) {
    std::fprintf(stderr, "allreduced: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  spdlog::level::level_enum level;
  ParseLogLevel(config->log_level(), &level).IgnoreError();  // validated by LoadConfig
  SetLogLevel(level);

  // Block the shutdown signals in every thread (threads inherit the mask); main waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Daemon daemon(*std::move(config));
  if (absl::Status status = daemon.Start(); !status.ok()) {
    std::fprintf(stderr, "allreduced: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  int signo = 0;
  sigwait(&signals, &signo);
  Logger("daemon")->info("received {}", signo == SIGTERM ? "SIGTERM" : "SIGINT");
  daemon.Shutdown();
  return 0;
}

}  // namespace ard

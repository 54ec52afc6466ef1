#include "daemon/daemon_main.h"

#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <vector>

#include "daemon/common/logging.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"

namespace ard {
namespace {

// Every local client and peer connection is a file descriptor: raise the soft limit to the hard
// one (often 1024 vs 1M) and warn when it cannot hold max_clients plus room for the rest.
void RaiseFileLimit(uint32_t max_clients) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  const rlim_t want = static_cast<rlim_t>(max_clients) * 2 + 256;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want) {
    Logger("daemon")->warn(
        "open file limit {} is low for max_clients {} (want about {}; a client holds a socket "
        "and, briefly, its arena memfds); raise LimitNOFILE / ulimit -n",
        lim.rlim_cur, max_clients, want);
  }
}

}  // namespace

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
  RaiseFileLimit(config->max_clients());

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

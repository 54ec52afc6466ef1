#include "daemon/daemon_main.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"
#include "daemon/config/config_loader.h"
#include "daemon/config/config_reload.h"
#include "daemon/daemon.h"
#include "daemon/gpu/device.h"

namespace ard {
namespace {

// The daemon stopped itself: the coordinator refused it (its host name is held by another live
// daemon, or another protocol version; see DaemonMain).
constexpr int kExitRefused = 3;
// The daemon stopped itself: a GPU context became unusable (a sticky CUDA error); only a new
// process gets a working one (systemd's Restart=on-failure starts it).
constexpr int kExitGpuLost = 4;

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

// A step of a large job allocates and frees many blocks of a few hundred KiB (a host-ready
// tensor holds one ~500-byte entry per rank of the job): with glibc's default, adaptive
// thresholds, each step's freed heap is handed back to the kernel and faulted in again by the
// next (bench/steady_host_bench at 1,000 ranks x 200 tensors: offers 56 ms of CPU per step
// against 2.4 ms with these settings). The daemon keeps up to kKeepFreedHeap of freed heap and
// serves blocks below kHeapBlockMax from it; larger buffers still come from mmap.
constexpr int kKeepFreedHeap = 256 << 20;
constexpr int kHeapBlockMax = 32 << 20;

void KeepFreedHeap() {
  mallopt(M_MMAP_THRESHOLD, kHeapBlockMax);
  mallopt(M_TRIM_THRESHOLD, kKeepFreedHeap);
}

// Debian's Abseil keeps deadlock detection on (Abseil's debug default): every Mutex::Lock also
// maintains a lock-order graph (3% of the daemons' CPU in a 4-byte allreduce, perf). The daemon
// turns it off, as release builds of Abseil do; unit tests, which do not run this, keep it.
void SkipDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

// SIGHUP: re-reads the config (file, then the same flags) and applies what can be applied live. A
// config that no longer loads leaves the running settings as they are.
void ReloadConfig(const std::vector<std::string>& args, DaemonConfig* running) {
  auto log = Logger("daemon");
  absl::StatusOr<config::ReloadPlan> plan = config::Reload(args, *running);
  if (!plan.ok()) {
    log->error("SIGHUP: config reload failed, keeping the running settings: {}",
               plan.status().message());
    return;
  }
  spdlog::level::level_enum before, after;
  ParseLogLevel(running->log_level(), &before).IgnoreError();  // both validated by LoadConfig
  ParseLogLevel(plan->next.log_level(), &after).IgnoreError();
  // The line shows under the old level and the new one, whichever is more verbose.
  SetLogLevel(std::min(before, after));
  log->info("SIGHUP: config reloaded {}", config::DescribeReload(args, *plan));
  SetLogLevel(after);
  *running = std::move(plan->next);
}

}  // namespace

int DaemonMain(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    std::printf("allreduced %s\n", kVersion);
    return 0;
  }
  bool help = false;
  absl::StatusOr<DaemonConfig> config = config::LoadConfig(args, &help);
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
  KeepFreedHeap();
  SkipDeadlockDetection();

  // Block the shutdown and reload signals in every thread (threads inherit the mask); main waits
  // for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  DaemonConfig running = *config;
  Daemon daemon(*std::move(config));
  // A fatal condition found on the control loop wakes the wait below with a SIGTERM sent to this
  // thread, after recording why.
  absl::Mutex fatal_mu;
  absl::Status fatal;
  daemon.SetFatalHandler([&fatal_mu, &fatal, main_thread = pthread_self()](const absl::Status& s) {
    {
      absl::MutexLock lock(&fatal_mu);
      fatal = s;
    }
    pthread_kill(main_thread, SIGTERM);
  });
  if (absl::Status status = daemon.Start(); !status.ok()) {
    std::fprintf(stderr, "allreduced: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  int signo = 0;
  while (sigwait(&signals, &signo) == 0 && signo == SIGHUP) ReloadConfig(args, &running);
  absl::Status why;
  {
    absl::MutexLock lock(&fatal_mu);
    why = fatal;
  }
  if (!why.ok()) {
    daemon.Shutdown();
    std::fprintf(stderr, "allreduced: %s\n", std::string(why.message()).c_str());
    return gpu::IsStickyError(why) ? kExitGpuLost : kExitRefused;
  }
  Logger("daemon")->info("received {}", signo == SIGTERM ? "SIGTERM" : "SIGINT");
  daemon.Shutdown();
  return 0;
}

}  // namespace ard

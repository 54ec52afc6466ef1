#include "bench/rank_launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <set>
#include <vector>

namespace ard::bench {
namespace {

constexpr const char* kRankVar = "ARD_BENCH_RANK";
constexpr const char* kSizeVar = "ARD_BENCH_SIZE";
constexpr const char* kStoreVar = "ARD_BENCH_STORE";
constexpr const char* kDoneFdVar = "ARD_BENCH_DONE_FD";

double NowS() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Deletes the store directory's files (the store writes flat files only) and the directory.
void RemoveStore(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
        unlink((dir + "/" + e->d_name).c_str());
      }
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// In the child after fork: sets the rank environment and execs the program again.
[[noreturn]] void ExecRank(int rank, int np, const std::string& store, int done_fd, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setenv(kRankVar, std::to_string(rank).c_str(), 1);
  setenv(kSizeVar, std::to_string(np).c_str(), 1);
  setenv(kStoreVar, store.c_str(), 1);
  setenv(kDoneFdVar, std::to_string(done_fd).c_str(), 1);
  execv("/proc/self/exe", argv);
  fprintf(stderr, "rank %d: execv /proc/self/exe: %s\n", rank, strerror(errno));
  _exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

bool ReadRankEnv(RankEnv* env) {
  const char* rank = getenv(kRankVar);
  const char* size = getenv(kSizeVar);
  const char* store = getenv(kStoreVar);
  const char* fd = getenv(kDoneFdVar);
  if (rank == nullptr || size == nullptr || store == nullptr || fd == nullptr) return false;
  env->rank = atoi(rank);
  env->size = atoi(size);
  env->store_dir = store;
  env->done_fd = atoi(fd);
  return true;
}

void ReportDone(const RankEnv& env) {
  std::string line = "DONE " + std::to_string(env.rank) + "\n";
  // One short write to a pipe is atomic; the launcher reads whole lines.
  if (write(env.done_fd, line.data(), line.size()) < 0) {
    fprintf(stderr, "rank %d: cannot report done: %s\n", env.rank, strerror(errno));
  }
  close(env.done_fd);
}

int LaunchRanks(int np, char** argv, int timeout_s) {
  char dir_template[] = "/tmp/ard-gloo.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  const std::string store = dir_template;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    fprintf(stderr, "pipe: %s\n", strerror(errno));
    return 1;
  }
  fcntl(pipe_fds[0], F_SETFD, FD_CLOEXEC);  // the ranks inherit the write end only
  fflush(stdout);
  std::vector<pid_t> pids(np, -1);
  for (int r = 0; r < np; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) ExecRank(r, np, store, pipe_fds[1], argv);
    if (pids[r] < 0) fprintf(stderr, "fork: %s\n", strerror(errno));
  }
  close(pipe_fds[1]);

  // Collect DONE lines and reap ranks until all are reaped or the deadline passes. A rank that
  // dies before reporting done fails the job: the others would only wait for it, so kill them.
  const double deadline = NowS() + timeout_s;
  std::set<int> done;
  std::vector<int> status(np, 0);
  std::vector<bool> reaped(np, false);
  std::string pending;
  bool pipe_open = true, aborting = false;
  int failed = 0, live = np;
  for (int r = 0; r < np; ++r) {
    if (pids[r] < 0) reaped[r] = true, --live, ++failed, aborting = true;
  }
  // Reads what the pipe holds (waiting up to wait_ms for the first bytes) and parses DONE lines.
  auto drain = [&](int wait_ms) {
    pollfd p = {pipe_fds[0], POLLIN, 0};
    while (pipe_open && poll(&p, 1, wait_ms) > 0) {
      char buf[256];
      ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
      if (n <= 0) pipe_open = false;  // EOF: no rank holds the write end any more
      if (n > 0) pending.append(buf, n);
      wait_ms = 0;
    }
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      int rank = -1;
      if (sscanf(pending.c_str(), "DONE %d", &rank) == 1) done.insert(rank);
    }
  };
  while (live > 0) {
    if (pipe_open) {
      drain(50);
    } else {
      usleep(10000);
    }
    for (int r = 0; r < np; ++r) {
      if (reaped[r] || waitpid(pids[r], &status[r], WNOHANG) != pids[r]) continue;
      reaped[r] = true;
      --live;
      drain(0);  // a DONE line written before the exit is in the pipe by now
      aborting |= done.count(r) == 0;
    }
    if (NowS() > deadline) {
      fprintf(stderr, "gloo bench: deadline of %d s passed\n", timeout_s);
      aborting = true;
    }
    if (aborting) {
      for (int r = 0; r < np; ++r) {
        if (!reaped[r]) kill(pids[r], SIGKILL);
      }
      for (int r = 0; r < np; ++r) {
        if (!reaped[r]) waitpid(pids[r], &status[r], 0), reaped[r] = true, --live;
      }
    }
  }
  close(pipe_fds[0]);
  for (int r = 0; r < np; ++r) {
    if (pids[r] < 0) continue;
    const bool clean = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    if (done.count(r) != 0) {
      if (!clean) {
        printf("# teardown: rank %d %s after its results were complete\n", r,
               Describe(status[r]).c_str());
      }
    } else {
      ++failed;
      fprintf(stderr, "gloo bench: rank %d %s before finishing\n", r, Describe(status[r]).c_str());
    }
  }
  fflush(stdout);
  RemoveStore(store);
  return failed == 0 ? 0 : 1;
}

}  // namespace ard::bench

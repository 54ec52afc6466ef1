#include "bench/rank_launcher.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "ctl/launch/rank_group.h"

namespace ard::bench {
namespace {

constexpr const char* kRankVar = "ARD_BENCH_RANK";
constexpr const char* kSizeVar = "ARD_BENCH_SIZE";
constexpr const char* kStoreVar = "ARD_BENCH_STORE";
constexpr const char* kDoneFdVar = "ARD_BENCH_DONE_FD";

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

// Judges the ranks for the RankGroup that runs them: a rank that exits before reporting done fails
// the run (the others would only wait for it).
class RankJudge : public launch::RankGroup::Listener {
 public:
  RankJudge(int np, int timeout_s) : done_(np, false), timeout_s_(timeout_s) {}

  std::string OnLine(int index, const std::string& line) override {
    int rank = -1;
    if (sscanf(line.c_str(), "DONE %d", &rank) == 1) done_[index] = true;
    return "";
  }
  std::string OnExit(int index, int wait_status) override {
    if (done_[index]) return "";
    rank_failed_ = true;
    return "rank " + std::to_string(index) + " ended before reporting done";
  }
  std::string OnDeadline() override {
    return "deadline of " + std::to_string(timeout_s_) + " s passed";
  }

  bool done(int rank) const { return done_[rank]; }
  // A rank's own failure, which the launcher reports with every rank's end.
  bool rank_failed() const { return rank_failed_; }

 private:
  std::vector<bool> done_;
  const int timeout_s_;
  bool rank_failed_ = false;
};

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
  launch::RankGroup::Options options;
  options.report_fd_variable = kDoneFdVar;
  options.die_with_parent = true;
  launch::RankGroup group(options);
  std::vector<std::string> args;
  for (char** a = argv; *a != nullptr; ++a) args.push_back(*a);
  fflush(stdout);  // the ranks write to the same stdout
  int failed = 0;
  for (int r = 0; r < np && failed == 0; ++r) {
    const int rc =
        group.Spawn("/proc/self/exe", args,
                    launch::EnvironWith({std::string(kRankVar) + "=" + std::to_string(r),
                                         std::string(kSizeVar) + "=" + std::to_string(np),
                                         std::string(kStoreVar) + "=" + store}));
    if (rc != 0) {
      fprintf(stderr, "gloo bench: cannot start rank %d: %s\n", r, strerror(rc));
      ++failed;
    }
  }
  // The first rank to fail, or the deadline, kills the others; their statuses are reported below.
  RankJudge judge(np, timeout_s);
  if (failed == 0) {
    const std::string failure =
        group.Wait(launch::RankGroup::Clock::now() + std::chrono::seconds(timeout_s), judge);
    if (!failure.empty() && !judge.rank_failed()) {
      fprintf(stderr, "gloo bench: %s\n", failure.c_str());
    }
  }
  group.KillAll();
  for (int r = 0; r < group.size(); ++r) {
    const int status = group.wait_status(r);
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (judge.done(r)) {
      if (!clean) {
        printf("# teardown: rank %d %s after its results were complete\n", r,
               launch::DescribeWaitStatus(status).c_str());
      }
    } else {
      ++failed;
      fprintf(stderr, "gloo bench: rank %d %s before finishing\n", r,
              launch::DescribeWaitStatus(status).c_str());
    }
  }
  fflush(stdout);
  RemoveStore(store);
  return failed == 0 ? 0 : 1;
}

}  // namespace ard::bench

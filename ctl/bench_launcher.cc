#include "ctl/bench_launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ctl/bench_cuda.h"
#include "ctl/bench_layout.h"
#include "ctl/bench_nccl.h"
#include "ctl/bench_report.h"
#include "ctl/bench_worker_lines.h"
#include "ctl/launch/rank_group.h"
#include "ctl/launch/socket_ranks.h"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

using launch::RankGroup;

// Time the workers get past --timeout_ms to report their own, more precise, timeout.
constexpr std::chrono::milliseconds kGrace{2000};

struct Child {
  int rank = 0, socket_index = 0;
  std::string last_other;  // the last unrecognised line (a crash message, say)
  bool ready = false, done = false;
};

// Runs one set of children to the end: the daemon's workers (`bench-worker`, one per rank) or,
// with `peer`, the NCCL peer (`bench-nccl`, one process for info.ranks GPUs). Judges their report
// lines and exits for the RankGroup that starts, watches and reaps them.
class Launcher : public RankGroup::Listener {
 public:
  Launcher(const BenchOptions& o, std::vector<BenchLayout> layouts, BenchRunInfo info, bool peer)
      : o_(o),
        peer_(peer),
        layouts_(std::move(layouts)),
        info_(std::move(info)),
        rows_(layouts_.size()),
        reports_(layouts_.size(), 0),
        group_(RankGroup::Options{}) {
    for (size_t i = 0; i < layouts_.size(); ++i) rows_[i].layout = layouts_[i];
  }

  // Prints the table header and each row as it completes (not with --json); returns the first
  // failure, or "" when every child finished.
  std::string Run() {
    if (!o_.json) std::fputs(FormatTableHeader(info_).c_str(), stdout);
    std::fflush(stdout);
    children_.resize(peer_ ? 1 : o_.ranks());
    for (int r = 0; r < static_cast<int>(children_.size()); ++r) {
      const launch::SocketRank place = launch::SocketRankOf(r, o_.np);
      children_[r].rank = r;
      children_[r].socket_index = place.socket_index;
      std::string failure = Spawn(r);
      if (!failure.empty()) {
        group_.KillAll();
        return failure;
      }
    }
    std::string failure = group_.Wait(
        RankGroup::Clock::now() + std::chrono::milliseconds(o_.timeout_ms) + kGrace, *this);
    std::fflush(stdout);
    return failure;
  }

  const std::vector<BenchRow>& rows() const { return rows_; }

  std::string OnLine(int index, const std::string& line) override {
    Child& c = children_[index];
    const WorkerLine w = ParseWorkerLine(line);
    switch (w.kind) {
      case WorkerLine::Kind::kReady:
        c.ready = true;
        if (w.size != info_.ranks) {
          return absl::StrCat(Who(c), ": the daemon formed a job of ", w.size, " ranks, expected ",
                              info_.ranks);
        }
        return "";
      case WorkerLine::Kind::kRow:
        if (w.index < 0 || w.index >= static_cast<int>(rows_.size())) {
          return absl::StrCat(Who(c), ": reported an unknown size index ", w.index);
        }
        rows_[w.index].time_us = std::max(rows_[w.index].time_us, w.time_us);
        rows_[w.index].wrong += w.wrong;
        ++reports_[w.index];
        PrintFinishedRows();
        return "";
      case WorkerLine::Kind::kDone:
        c.done = true;
        return "";
      case WorkerLine::Kind::kError:
        return absl::StrCat(Who(c), ": ", w.message);
      case WorkerLine::Kind::kOther:
        if (!line.empty()) c.last_other = line;
        return "";
    }
    return "";
  }

  std::string OnExit(int index, int status) override {
    const Child& c = children_[index];
    if (c.done && WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return absl::StrCat(Who(c), WIFSIGNALED(status) ? " was " : " ",
                        launch::DescribeWaitStatus(status),
                        c.done ? " after finishing" : " before finishing",
                        c.last_other.empty() ? "" : ": " + c.last_other);
  }

  std::string OnDeadline() override {
    int ready = 0;
    for (const Child& c : children_) ready += c.ready ? 1 : 0;
    return absl::StrCat(peer_ ? "nccl peer: " : "", "timed out after ", o_.timeout_ms,
                        " ms (--timeout_ms): ", ready, " of ", children_.size(),
                        peer_ ? " peer processes started, " : " ranks joined the job, ",
                        next_print_, " of ", rows_.size(), " sizes done");
  }

 private:
  std::string Who(const Child& c) const {
    if (peer_) return absl::StrCat("nccl peer (", info_.ranks, " GPUs)");
    return absl::StrCat("rank ", c.rank, " (socket ", o_.sockets[c.socket_index], ")");
  }

  // Starts child `r` through /proc/self/exe (this binary); returns "" or why it could not start.
  std::string Spawn(int r) {
    std::vector<std::string> args = {"allreducectl", peer_ ? "bench-nccl" : "bench-worker"};
    for (std::string& a : WorkerArgs(o_)) args.push_back(std::move(a));
    std::vector<std::string> vars;
    if (!peer_) {
      vars = launch::SocketRankEnv(o_.sockets, o_.np, o_.job, r);
      if (o_.gpu && std::getenv("ALLREDUCED_GPU_ARENA_BYTES") == nullptr) {
        // One device submit in flight per worker: the staging arena needs the largest size.
        const uint64_t largest = *std::max_element(o_.sizes.begin(), o_.sizes.end());
        vars.push_back(absl::StrCat("ALLREDUCED_GPU_ARENA_BYTES=",
                                    std::max<uint64_t>(64ull << 20, largest + 4096)));
      }
    }
    const int rc = group_.Spawn("/proc/self/exe", args,
                                launch::EnvironWith(vars, launch::SocketRankVariables()));
    if (rc == 0) return "";
    return absl::StrCat("cannot start the worker for ", Who(children_[r]), ": ", std::strerror(rc));
  }

  void PrintFinishedRows() {
    while (next_print_ < rows_.size() &&
           reports_[next_print_] == static_cast<int>(children_.size())) {
      if (!o_.json) std::fputs(FormatTableRow(rows_[next_print_], info_).c_str(), stdout);
      std::fflush(stdout);
      ++next_print_;
    }
  }

  const BenchOptions& o_;
  const bool peer_;
  const std::vector<BenchLayout> layouts_;
  const BenchRunInfo info_;
  std::vector<Child> children_;
  std::vector<BenchRow> rows_;
  std::vector<int> reports_;  // ROW lines received per size
  size_t next_print_ = 0;     // sizes complete and printed so far
  RankGroup group_;           // last: destroyed (children killed and reaped) first
};

// Measures the NCCL peer on `gpus` GPUs; fills *info and *rows, returns "" or why it failed.
std::string RunPeer(const BenchOptions& o, const std::vector<BenchLayout>& layouts, int gpus,
                    BenchRunInfo* info, std::vector<BenchRow>* rows) {
  std::string version, path;
  absl::Status st = ProbeNccl(&version, &path);
  if (st.ok()) st = NcclSupports(o.dtype, o.reduce_op);
  if (!st.ok()) return std::string(st.message());
  info->ranks = info->np = gpus;
  info->sockets.clear();
  info->job.clear();
  info->peer = absl::StrFormat("NCCL %s (%s) ncclAllReduce, %d rank%s in one process (GPU%s 0%s)",
                               version, path, gpus, gpus == 1 ? "" : "s", gpus == 1 ? "" : "s",
                               gpus == 1 ? "" : absl::StrCat("-", gpus - 1));
  if (o.reduce_op == 2 && o.check) info->peer += ", average not checked";
  BenchOptions po = o;
  po.peer_gpus = gpus;
  Launcher peer(po, layouts, *info, /*peer=*/true);
  std::string failure = peer.Run();
  *rows = peer.rows();
  return failure;
}

}  // namespace

int RunBenchLauncher(const BenchOptions& options) {
  BenchOptions o = options;
  if (o.job.empty()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    o.job = absl::StrCat("bench-", getpid(), "-", ms);
  }
  o.parent_pid = getpid();
  int gpus = 0;  // GPUs the workers use (local ranks share them round robin): the peer's ranks
  if (o.gpu) {
    // Fail before any worker starts: without a driver and GPU nothing can run.
    const BenchCuda* cuda = nullptr;
    absl::Status st = LoadBenchCuda(&cuda);
    if (!st.ok()) {
      std::fprintf(stderr, "allreducectl: bench: %s: %s\n",
                   absl::StatusCodeToString(st.code()).c_str(), std::string(st.message()).c_str());
      return 1;
    }
    gpus = std::min(o.np, cuda->device_count);
  }
  std::vector<BenchLayout> layouts =
      LayoutsFor(o.collective, o.sizes, wire::DataTypeSize(o.dtype), o.ranks());
  if (layouts.empty()) {
    std::fprintf(stderr,
                 "allreducectl: bench: every size rounds to 0 elements for %s over %d ranks\n",
                 CollectiveName(o.collective), o.ranks());
    return 2;
  }
  o.sizes.clear();
  for (const BenchLayout& l : layouts) o.sizes.push_back(l.size_bytes);
  BenchRunInfo info{o.collective, o.dtype,  o.reduce_op, o.ranks(), o.np,
                    o.sockets,    o.warmup, o.iters,     o.check,   o.job};
  info.gpu = o.gpu;
  Launcher daemon(o, layouts, info, /*peer=*/false);
  const std::string failure = daemon.Run();
  if (!failure.empty()) {
    std::fprintf(stderr, "allreducectl: bench: %s\n", failure.c_str());
    return 1;
  }
  const std::vector<BenchRow>& rows = daemon.rows();
  if (!o.json) std::fputs(FormatTableFooter(rows, info).c_str(), stdout);
  std::fflush(stdout);
  uint64_t wrong = 0;
  for (const BenchRow& r : rows) wrong += r.wrong;

  std::vector<BenchRow> peer_rows;
  BenchRunInfo peer_info = info;
  bool have_peer = false;
  if (o.gpu && o.peer != BenchOptions::Peer::kNone) {
    std::string peer_failure = RunPeer(o, layouts, gpus, &peer_info, &peer_rows);
    if (peer_failure.empty()) {
      have_peer = true;
      for (const BenchRow& r : peer_rows) wrong += r.wrong;
      if (!o.json) {
        std::fputs((FormatTableFooter(peer_rows, peer_info) +
                    FormatRatioTable(rows, info, peer_rows, peer_info))
                       .c_str(),
                   stdout);
      }
    } else if (o.peer == BenchOptions::Peer::kNccl) {
      std::fflush(stdout);
      std::fprintf(stderr, "allreducectl: bench: nccl peer: %s\n", peer_failure.c_str());
      return 1;
    } else {
      if (!o.json) std::printf("# peer: not measured: %s\n", peer_failure.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "allreducectl: bench: warning: NCCL peer not measured: %s\n",
                   peer_failure.c_str());
    }
  }
  if (o.json) {
    std::fputs(
        FormatJson(rows, info, have_peer ? &peer_rows : nullptr, have_peer ? &peer_info : nullptr)
            .c_str(),
        stdout);
  }
  std::fflush(stdout);
  if (wrong > 0) {
    std::fprintf(stderr, "allreducectl: bench: %llu wrong result elements\n",
                 static_cast<unsigned long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace ard::ctl

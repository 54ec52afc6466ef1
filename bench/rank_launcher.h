// Starts N copies of the running program as the ranks of one job on this machine (what mpirun
// does for MPI), for bench/gloo_allreduce_bench. Owned by the launcher process's main thread.
//
// Lifecycle:
//   1. The launcher creates a private directory (the ranks' rendezvous store), then starts
//      /proc/self/exe with the same arguments and ARD_BENCH_RANK, ARD_BENCH_SIZE, ARD_BENCH_STORE
//      and ARD_BENCH_DONE_FD (the write end of a pipe of the rank's own) in the environment,
//      through ctl/launch/rank_group.h. Ranks die with the launcher (PR_SET_PDEATHSIG). Ranks
//      share the launcher's stdout and stderr.
//   2. A rank calls ReportDone once its output is complete (flushed), before tearing down.
//   3. The launcher reaps every rank, reporting on stdout (as "#" lines) ranks that died after
//      ReportDone: Gloo may abort at teardown on loopback (shared/MEASUREMENTS.md), and such a
//      death does not invalidate results already printed. A rank that fails before ReportDone,
//      or the deadline passing, fails the run (the remaining ranks are killed).
#pragma once

#include <string>

namespace ard::bench {

struct RankEnv {
  int rank = 0;
  int size = 1;
  std::string store_dir;  // empty directory shared by all ranks of the job
  int done_fd = -1;       // write end of the launcher's pipe
};

// True in a process started by LaunchRanks, with its environment in *env.
bool ReadRankEnv(RankEnv* env);

// Tells the launcher that this rank's work and output are complete.
void ReportDone(const RankEnv& env);

// Runs `np` ranks of this program with `argv` and waits for them for at most `timeout_s`.
// Returns the launcher's exit status: 0 when every rank reported done, else 1.
int LaunchRanks(int np, char** argv, int timeout_s);

}  // namespace ard::bench

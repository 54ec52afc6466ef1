// Starts the processes of one local launch (a job's ranks, a benchmark's workers), reads the lines
// they report, and ends them: the first failure or the deadline kills every child still running,
// and every child is reaped. Used by `allreducectl bench` (ctl/bench_launcher.cc) and the
// Gloo benchmark's launcher (bench/rank_launcher.cc); allreduced.launch is its Python twin. Links
// libc and libstdc++ only (the Gloo benchmark links no Abseil), so failures are strings. Owned and
// used by one thread.
//
// Lifecycle:
//   1. Spawn() once per child, in rank order: fork, then exec of the program with the given argv
//      and environment; stdin is /dev/null. Each child gets a report pipe: its stdout and stderr,
//      or (Options::report_fd_variable) a descriptor of its own, named in its environment, while
//      its stdout and stderr stay the parent's.
//   2. Wait() hands each child's report lines and then its exit (the child is reaped by then) to a
//      Listener, which judges them. A failure it names, or the deadline passing, ends the wait:
//      the children still running are killed (SIGKILL, by pid: they stay in the caller's process
//      group, so a Ctrl-C at the terminal reaches them too) and reaped.
//   3. Every child's wait status stays readable. The destructor kills and reaps what is left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ard::launch {

class RankGroup {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    // Empty: a child's report lines are its stdout and stderr. Otherwise the name of an
    // environment variable holding the number of the descriptor the child writes them to.
    std::string report_fd_variable;
    // The children get SIGKILL when the parent dies (PR_SET_PDEATHSIG).
    bool die_with_parent = false;
  };

  // The caller's judgement of what the children report; a non-empty return is the failure that
  // ends Wait().
  class Listener {
   public:
    virtual ~Listener() = default;
    // One line (without its '\n'; a last line may lack one) from child `index`.
    virtual std::string OnLine(int index, const std::string& line) = 0;
    // Child `index` ended (and was reaped) with `wait_status`, after its last line.
    virtual std::string OnExit(int index, int wait_status) = 0;
    // The deadline passed with children still running.
    virtual std::string OnDeadline() = 0;
  };

  explicit RankGroup(Options options);
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;
  ~RankGroup();

  // Starts child number size() running `path` with `argv` and `env` ("NAME=value" each). Returns
  // 0, or the errno of what failed (making its pipes, fork, or the exec, which the child reports
  // back); a child that could not start is not added.
  int Spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env);

  // Waits until every child has exited or the listener names a failure or `deadline` passes; on
  // a failure, kills and reaps the children still running. Returns the failure, or "".
  std::string Wait(Clock::time_point deadline, Listener& listener);

  // Kills (SIGKILL) every child not reaped yet, then reaps them all.
  void KillAll();

  int size() const { return static_cast<int>(children_.size()); }
  pid_t pid(int index) const { return children_[index].pid; }
  bool reaped(int index) const { return children_[index].reaped; }
  // Meaningful once reaped(index).
  int wait_status(int index) const { return children_[index].wait_status; }

 private:
  struct Child {
    pid_t pid = -1;
    int pidfd = -1;       // -1 where pidfd_open is unavailable: waitpid(WNOHANG) on a short tick
    int report = -1;      // read end of the report pipe; -1 after EOF
    std::string partial;  // bytes after the last '\n'
    bool reaped = false;
    int wait_status = 0;
  };

  // Reads what child `index`'s pipe holds (up to EOF when `to_eof`) and hands the listener the
  // whole lines; a partial last line too once the pipe is closed.
  std::string ReadReports(int index, Listener& listener, bool to_eof);
  // Reaps child `index` if it has exited; then its remaining lines and its exit go to the listener.
  std::string ReapIfExited(int index, Listener& listener, bool* exited);
  void CloseChild(Child& c);

  const Options options_;
  std::vector<Child> children_;
};

// "exited with status 3", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// This process's environment with each of `set` ("NAME=value") in place of a variable of the same
// name, and without the variables named in `unset`.
std::vector<std::string> EnvironWith(const std::vector<std::string>& set,
                                     const std::vector<std::string>& unset = {});

}  // namespace ard::launch

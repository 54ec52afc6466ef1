#include "ctl/launch/rank_group.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

extern char** environ;

namespace ard::launch {
namespace {

// How often children are checked for exit when pidfd_open is unavailable (kernels before 5.3).
constexpr int kExitTickMs = 20;

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

std::string NameOf(const std::string& variable) { return variable.substr(0, variable.find('=')); }

}  // namespace

RankGroup::RankGroup(Options options) : options_(std::move(options)) {}

RankGroup::~RankGroup() { KillAll(); }

int RankGroup::Spawn(const std::string& path, const std::vector<std::string>& argv,
                     const std::vector<std::string>& env) {
  int report[2], exec_error[2];
  if (pipe2(report, O_CLOEXEC) != 0) return errno;
  if (pipe2(exec_error, O_CLOEXEC) != 0) {
    const int e = errno;
    close(report[0]);
    close(report[1]);
    return e;
  }
  // Everything the child needs is made before fork: between fork and exec it may only make
  // async-signal-safe calls (the parent may have other threads).
  std::vector<std::string> args = argv, vars;
  const std::string& fd_variable = options_.report_fd_variable;
  for (const std::string& v : env) {
    if (fd_variable.empty() || NameOf(v) != fd_variable) vars.push_back(v);
  }
  if (!fd_variable.empty()) vars.push_back(fd_variable + "=" + std::to_string(report[1]));
  std::vector<char*> argvp = Pointers(args), envp = Pointers(vars);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (options_.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
    }
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (fd_variable.empty()) {
      dup2(report[1], STDOUT_FILENO);
      dup2(report[1], STDERR_FILENO);
    } else {
      fcntl(report[1], F_SETFD, 0);  // this one descriptor survives the exec
    }
    execve(path.c_str(), argvp.data(), envp.data());
    const int e = errno;
    (void)!write(exec_error[1], &e, sizeof(e));
    _exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) close(devnull);
  close(report[1]);
  close(exec_error[1]);
  if (pid < 0) {
    close(report[0]);
    close(exec_error[0]);
    return fork_errno;
  }
  // The exec closes the error pipe (end of file, nothing read) or the child writes its errno.
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(exec_error[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  close(exec_error[0]);
  if (n > 0) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close(report[0]);
    return exec_errno;
  }
  fcntl(report[0], F_SETFL, O_NONBLOCK);
  Child c;
  c.pid = pid;
  // Not glibc's pidfd_open: its 2.36 header lacks extern "C", and older glibc has none.
  c.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  c.report = report[0];
  children_.push_back(std::move(c));
  return 0;
}

std::string RankGroup::Wait(Clock::time_point deadline, Listener& listener) {
  std::string failure;
  while (failure.empty()) {
    std::vector<pollfd> fds;
    std::vector<int> reports;  // child index of each report pipe in fds, -1 for a pidfd
    bool running = false, tick = false;
    for (int i = 0; i < size() && failure.empty(); ++i) {
      Child& c = children_[i];
      bool exited = true;
      if (!c.reaped) failure = ReapIfExited(i, listener, &exited);
      if (!exited) {
        running = true;
        tick |= c.pidfd < 0;
        if (c.pidfd >= 0) {
          fds.push_back({c.pidfd, POLLIN, 0});
          reports.push_back(-1);
        }
      }
      if (c.report >= 0) {
        fds.push_back({c.report, POLLIN, 0});
        reports.push_back(i);
      }
    }
    if (!failure.empty() || !running) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      failure = listener.OnDeadline();
      if (failure.empty()) failure = "the deadline passed";
      break;
    }
    const int timeout_ms = static_cast<int>(std::min<int64_t>(left, tick ? kExitTickMs : left));
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      failure = std::string("poll: ") + strerror(errno);
      break;
    }
    for (size_t k = 0; ready > 0 && k < fds.size() && failure.empty(); ++k) {
      if (fds[k].revents != 0 && reports[k] >= 0) {
        failure = ReadReports(reports[k], listener, /*to_end=*/false);
      }
    }
  }
  if (!failure.empty()) KillAll();
  return failure;
}

std::string RankGroup::ReapIfExited(int index, Listener& listener, bool* exited) {
  Child& c = children_[index];
  int status = 0;
  pid_t r;
  while ((r = waitpid(c.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  *exited = r != 0;
  if (!*exited) return "";
  c.reaped = true;
  c.wait_status = r == c.pid ? status : 255 << 8;  // r < 0: not our child any more (cannot be)
  std::string failure = ReadReports(index, listener, /*to_end=*/true);
  CloseChild(c);
  return failure.empty() ? listener.OnExit(index, c.wait_status) : failure;
}

std::string RankGroup::ReadReports(int index, Listener& listener, bool to_end) {
  Child& c = children_[index];
  char buf[65536];
  while (c.report >= 0) {
    const ssize_t n = read(c.report, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    // At the end (the child is gone): what the pipe holds now is all it wrote, even where a child
    // of its own keeps the write end open.
    if (n < 0 && errno == EAGAIN && !to_end) return "";
    if (n <= 0) {
      close(c.report);
      c.report = -1;
      break;
    }
    c.partial.append(buf, n);
    for (size_t newline; (newline = c.partial.find('\n')) != std::string::npos;) {
      const std::string line = c.partial.substr(0, newline);
      c.partial.erase(0, newline + 1);
      std::string failure = listener.OnLine(index, line);
      if (!failure.empty()) return failure;
    }
    if (!to_end) return "";
  }
  if (c.partial.empty()) return "";
  const std::string last = std::move(c.partial);
  c.partial.clear();
  return listener.OnLine(index, last);
}

void RankGroup::KillAll() {
  for (Child& c : children_) {
    if (!c.reaped) kill(c.pid, SIGKILL);
  }
  for (Child& c : children_) {
    if (!c.reaped) {
      while (waitpid(c.pid, &c.wait_status, 0) < 0 && errno == EINTR) {
      }
      c.reaped = true;
    }
    CloseChild(c);
  }
}

void RankGroup::CloseChild(Child& c) {
  if (c.report >= 0) close(c.report);
  if (c.pidfd >= 0) close(c.pidfd);
  c.report = c.pidfd = -1;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int signo = WTERMSIG(wait_status);
    return "killed by signal " + std::to_string(signo) + " (" + strsignal(signo) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

std::vector<std::string> EnvironWith(const std::vector<std::string>& set,
                                     const std::vector<std::string>& unset) {
  std::set<std::string> replaced(unset.begin(), unset.end());
  for (const std::string& v : set) replaced.insert(NameOf(v));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (replaced.count(NameOf(*e)) == 0) env.push_back(*e);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

}  // namespace ard::launch

// scale_sim: a real coordinator daemon (allreduced, the first host of a cluster) against N
// simulated hosts in this process (bench/sim_fleet.h). Measures cluster join, job formation (one
// rank per host), a first step of new tensors (all cache misses) and steady-state steps of cached
// tensors; prints one JSON report on stdout. See bench/README.md "Scale simulation".
//
// Usage: scale_sim --allreduced=PATH [--hosts=1000] [--tensors=200] [--steps=20]
//                  [--hosts_per_channel=50] [--max_receive_mb=-1] [--phase_timeout_s=300]
//                  [--workdir=DIR] [--heartbeat_ms=1000]
// Exit status: 0 when every phase finished, 1 when one failed ("error" in the report), 2 on usage.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/sim_fleet.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// utime + stime of `pid`, in seconds (fields 14 and 15 of /proc/PID/stat, after the ")").
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // state .. cmajflt
  long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// VmHWM of `pid` (its peak resident memory), in MiB; -1 when unreadable.
double PeakRssMb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

// The coordinator daemon: started with a port file, stopped (SIGTERM) on destruction.
class Daemon {
 public:
  bool Start(const std::string& binary, const std::string& dir, int heartbeat_ms) {
    const std::string port_file = dir + "/coordinator.port";
    std::remove(port_file.c_str());
    std::vector<std::string> args = {
        binary,
        "--cluster_address=127.0.0.1:0",
        "--host_name=coordinator",
        "--local_socket=" + dir + "/coordinator.sock",
        "--port_file=" + port_file,
        "--heartbeat_ms=" + std::to_string(heartbeat_ms),
        "--host_timeout_ms=" + std::to_string(heartbeat_ms * 30),
        "--job_form_timeout_ms=600000",
        "--log_level=warn",
    };
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    log_ = dir + "/coordinator.log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      std::fprintf(stderr, "scale_sim: cannot start %s: %s\n", binary.c_str(), strerror(rc));
      pid_ = 0;
      return false;
    }
    for (int i = 0; i < 300; ++i) {  // 30 s
      std::ifstream in(port_file);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!text.empty() && text.back() == '\n') {
        address_ = "127.0.0.1:" + text.substr(0, text.size() - 1);
        return true;
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::fprintf(stderr, "scale_sim: the coordinator did not write its port file; log: %s\n",
                 log_.c_str());
    return false;
  }
  ~Daemon() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = 0;
  std::string address_;
  std::string log_;
};

struct Args {
  std::map<std::string, std::string> values;
  std::string Get(const std::string& key, const std::string& fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
  int Int(const std::string& key, int fallback) const {
    return std::atoi(Get(key, std::to_string(fallback)).c_str());
  }
};

// The report, as JSON: numbers and one optional string.
class Report {
 public:
  void Add(const std::string& key, double value) {
    std::ostringstream v;
    v << value;
    fields_.push_back("\"" + key + "\": " + v.str());
  }
  void AddString(const std::string& key, const std::string& value) {
    std::string escaped;
    for (char c : value) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += (c == '\n' ? ' ' : c);
    }
    fields_.push_back("\"" + key + "\": \"" + escaped + "\"");
  }
  std::string Json() const {
    std::string out = "{";
    for (size_t i = 0; i < fields_.size(); ++i) out += (i ? ",\n " : "") + fields_[i];
    return out + "}\n";
  }

 private:
  std::vector<std::string> fields_;
};

int Run(const Args& args) {
  const std::string binary = args.Get("allreduced", "");
  if (binary.empty()) {
    std::fprintf(stderr, "usage: scale_sim --allreduced=PATH [--hosts=N] ... (see the source)\n");
    return 2;
  }
  char tmpl[] = "/tmp/scale_sim.XXXXXX";
  const std::string dir = args.Get("workdir", "");
  const std::string workdir = dir.empty() ? mkdtemp(tmpl) : dir;
  Daemon daemon;
  if (!daemon.Start(binary, workdir, args.Int("heartbeat_ms", 1000))) return 1;

  ard::bench::FleetOptions options;
  options.coordinator = daemon.address();
  options.hosts = args.Int("hosts", 1000);
  options.tensors = args.Int("tensors", 200);
  options.hosts_per_channel = args.Int("hosts_per_channel", 50);
  const int max_receive_mb = args.Int("max_receive_mb", -1);
  options.max_receive_bytes = max_receive_mb < 0 ? -1 : max_receive_mb << 20;
  options.phase_timeout = std::chrono::seconds(args.Int("phase_timeout_s", 300));
  const int steps = args.Int("steps", 20);

  Report report;
  report.Add("hosts", options.hosts);
  report.Add("tensors", options.tensors);
  report.Add("steps", steps);
  ard::bench::SimFleet fleet(options);
  const pid_t pid = daemon.pid();
  auto phase = [&](const char* name, auto body) {
    const double cpu = CpuSeconds(pid);
    const double own_cpu = CpuSeconds(getpid());
    const long messages = fleet.messages().sent + fleet.messages().received;
    const auto start = Clock::now();
    const bool ok = body();
    if (ok) {
      report.Add(std::string(name) + "_s", Seconds(start));
      report.Add(std::string(name) + "_coordinator_cpu_s", CpuSeconds(pid) - cpu);
      // The simulator's own CPU: when it nears the phase's time, it is what limits the phase.
      report.Add(std::string(name) + "_simulator_cpu_s", CpuSeconds(getpid()) - own_cpu);
      report.Add(std::string(name) + "_messages",
                 fleet.messages().sent + fleet.messages().received - messages);
    }
    return ok;
  };
  bool ok = phase("join", [&] { return fleet.Join(); }) &&
            phase("formation", [&] { return fleet.Form(); });
  report.Add("job_size", fleet.job_size());
  report.Add("layout_hosts", fleet.layout_hosts());
  ok = ok && fleet.Watch() && phase("first_step", [&] { return fleet.FirstStep(); });
  const auto sent = fleet.messages();
  const double cpu = CpuSeconds(pid);
  ok = ok && phase("steady", [&] { return fleet.Steady(steps); });
  if (ok && steps > 0) {
    const double seconds = fleet.step_end_s().back();
    const auto now = fleet.messages();
    report.Add("steady_steps_per_s", steps / seconds);
    report.Add("coordinator_cpu_ms_per_step", 1000 * (CpuSeconds(pid) - cpu) / steps);
    report.Add("messages_per_host_per_step",
               double(now.sent - sent.sent + now.received - sent.received) / options.hosts / steps);
    report.Add("sent_per_host_per_step", double(now.sent - sent.sent) / options.hosts / steps);
    double slowest = fleet.step_end_s().front();
    for (size_t k = 1; k < fleet.step_end_s().size(); ++k) {
      slowest = std::max(slowest, fleet.step_end_s()[k] - fleet.step_end_s()[k - 1]);
    }
    report.Add("steady_slowest_step_s", slowest);
  }
  report.Add("heartbeat_failures", fleet.heartbeat_failures());
  report.Add("largest_event_bytes", fleet.largest_event_bytes());
  report.Add("coordinator_peak_rss_mb", PeakRssMb(pid));
  report.Add("min_committed_per_host", fleet.min_committed());
  report.Add("expected_committed_per_host", double(options.tensors) * (1 + steps));
  if (!ok) {
    report.AddString("error", fleet.error());
    report.AddString("coordinator_log", daemon.log());
  }
  std::fputs(report.Json().c_str(), stdout);
  std::fflush(stdout);
  fleet.Leave();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "scale_sim: expected --key=value, got %s\n", a.c_str());
      return 2;
    }
    args.values[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  return Run(args);
}

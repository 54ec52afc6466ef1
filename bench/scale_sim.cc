// scale_sim: a real coordinator daemon (allreduced, the first host of a cluster) against N
// simulated hosts in this process (bench/sim_fleet.h: their gRPC side; bench/sim_data_plane.h:
// their data plane). Measures cluster join, job formation (one rank per host), the job's mesh, a
// first step of new tensors (all cache misses, through the coordinator) and steady-state steps of
// cached tensors: with --steady=rounds (the daemon's default) agreed in readiness rounds over the
// data plane, with --steady=coordinator sent to the coordinator as cached ids (the daemon with
// steady_state off). Prints one JSON report on stdout. See bench/README.md "Scale simulation".
//
// Usage: scale_sim --allreduced=PATH [--hosts=1000] [--tensors=200] [--steps=20]
//                  [--steady=rounds|coordinator] [--idle_ms=2000] [--hosts_per_channel=50]
//                  [--max_receive_mb=-1] [--phase_timeout_s=300] [--workdir=DIR]
//                  [--heartbeat_ms=1000]
// Exit status: 0 when every phase finished, 1 when one failed ("error" in the report), 2 on usage.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/sim_data_plane.h"
#include "bench/sim_fleet.h"
#include "daemon/common/logging.h"
#include "daemon/negotiation/tensor_request.h"

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

// Sequential message hops of one recursive doubling over n hosts (fold in, log2 p exchanges, fold
// out): the shape of both a readiness round (CombineInPlace) and a small allreduce.
int HopsPerCollective(int n) {
  int p = 1, log2p = 0;
  while (p * 2 <= n) p *= 2, ++log2p;
  return log2p + (n > p ? 2 : 0);
}

// The longest time between two consecutive steps' ends (the first from the phase start).
double SlowestStep(const std::vector<double>& step_end_s) {
  double slowest = step_end_s.front();
  for (size_t k = 1; k < step_end_s.size(); ++k) {
    slowest = std::max(slowest, step_end_s[k] - step_end_s[k - 1]);
  }
  return slowest;
}

// The coordinator-free steady state's figures (bench/README.md "Scale simulation").
void ReportRounds(Report& report, const ard::bench::DataPlaneCounts& c,
                  const std::vector<double>& step_end_s, int hosts, double coordinator_cpu_s,
                  double simulator_cpu_s, long grpc_sent, long grpc_received) {
  const int steps = static_cast<int>(step_end_s.size());
  const double host_steps = double(hosts) * steps;
  report.Add("steady_steps_per_s", steps / step_end_s.back());
  // Without the first step, which also faults in the memory of every host's tensors.
  if (steps > 1) {
    report.Add("steady_steps_per_s_after_first",
               (steps - 1) / (step_end_s.back() - step_end_s.front()));
  }
  report.Add("steady_slowest_step_s", SlowestStep(step_end_s));
  report.Add("coordinator_cpu_ms_per_step", 1000 * coordinator_cpu_s / steps);
  report.Add("coordinator_cpu_ms_per_s_steady", 1000 * coordinator_cpu_s / step_end_s.back());
  // Negotiation (gRPC) messages: none are expected once every tensor is cached.
  report.Add("messages_per_host_per_step", (grpc_sent + grpc_received) / host_steps);
  report.Add("sent_per_host_per_step", grpc_sent / host_steps);
  const long data_sent = c.round_messages_sent + c.allreduce_messages_sent;
  report.Add("data_messages_per_host_per_step", (data_sent + c.messages_received) / host_steps);
  report.Add("data_sent_per_host_per_step", data_sent / host_steps);
  report.Add("data_sent_max_per_host_per_step", double(c.max_messages_sent) / steps);
  report.Add("round_messages_sent_per_step", double(c.round_messages_sent) / steps);
  report.Add("allreduce_messages_sent_per_step", double(c.allreduce_messages_sent) / steps);
  report.Add("data_bytes_sent_per_host_per_step", c.bytes_sent / host_steps);
  report.Add("rounds_per_host_per_step", c.rounds / host_steps);
  report.Add("agreed_per_host_per_step", c.agreed / host_steps);
  report.Add("allreduces_per_host_per_step", c.allreduces / host_steps);
  report.Add("to_coordinator_tensors", c.to_coordinator);
  // Sequential message hops per step, one round and one allreduce: the per-step latency on real
  // hosts is about this many one-way loopback/network latencies (the hosts here share 2 cores).
  report.Add("critical_path_hops_per_step", 2 * HopsPerCollective(hosts));
  report.Add("simulator_cpu_ms_per_step", 1000 * simulator_cpu_s / steps);
  report.Add("host_offer_cpu_us_per_step", 1e6 * c.offer_cpu_s / host_steps);
  report.Add("host_round_cpu_us_per_step", 1e6 * c.round_cpu_s / host_steps);
  report.Add("host_allreduce_cpu_us_per_step", 1e6 * c.allreduce_cpu_s / host_steps);
  // Slot templates' per-rank metadata per host (each entry one TensorRequest, ~500 bytes).
  report.Add("host_template_entries", double(c.template_entries) / hosts);
  report.Add("host_template_mb",
             double(c.template_entries) * sizeof(ard::negotiation::TensorRequest) / hosts / 1e6);
}

// Raises the soft limit on open files to at least `wanted` (up to the hard limit).
bool RaiseFileLimit(rlim_t wanted, std::string* error) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= wanted) return true;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < wanted) {
    *error = "needs about " + std::to_string(wanted) + " open files; the hard limit is " +
             std::to_string(limit.rlim_max) + " (ulimit -Hn)";
    return false;
  }
  limit.rlim_cur = wanted;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) return true;
  *error = std::string("setrlimit(RLIMIT_NOFILE): ") + strerror(errno);
  return false;
}

int Run(const Args& args) {
  const std::string binary = args.Get("allreduced", "");
  const std::string steady = args.Get("steady", "rounds");
  if (binary.empty() || (steady != "rounds" && steady != "coordinator")) {
    std::fprintf(stderr, "usage: scale_sim --allreduced=PATH [--hosts=N] ... (see the source)\n");
    return 2;
  }
  const bool rounds = steady == "rounds";
  char tmpl[] = "/tmp/scale_sim.XXXXXX";
  const std::string dir = args.Get("workdir", "");
  const std::string workdir = dir.empty() ? mkdtemp(tmpl) : dir;

  ard::bench::FleetOptions options;
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
  report.AddString("steady_mode", steady);
  std::string error;  // a failure of the data plane or of the setup (the fleet keeps its own)
  auto check = [&](const absl::Status& status) {
    if (!status.ok() && error.empty()) error = status.ToString();
    return status.ok();
  };
  auto finish = [&](bool ok, const std::string& log) {
    if (!ok) report.AddString("error", error.empty() ? "see the coordinator log" : error);
    if (!ok && !log.empty()) report.AddString("coordinator_log", log);
    std::fputs(report.Json().c_str(), stdout);
    std::fflush(stdout);
    return ok ? 0 : 1;
  };
  // Per simulated host: its mesh sockets (log2 n + 3 at most: 12 at 1,000 hosts), its listener
  // and its rounds' eventfd; then the gRPC connections and the binary's own.
  if (rounds && !RaiseFileLimit(options.hosts * 16 + 1024, &error)) return finish(false, "");
  Daemon daemon;
  if (!daemon.Start(binary, workdir, args.Int("heartbeat_ms", 1000))) return 1;
  options.coordinator = daemon.address();

  ard::bench::DataPlaneOptions plane_options;
  plane_options.hosts = options.hosts;
  plane_options.tensors = options.tensors;
  plane_options.connect_timeout = absl::FromChrono(options.phase_timeout);
  ard::bench::SimDataPlane plane(plane_options);
  if (rounds) {
    if (!check(plane.Start())) return finish(false, daemon.log());
    options.data_addresses = plane.addresses();
    options.on_event = [&plane](int host, const ard::JobEvent& e) { plane.OnEvent(host, e); };
  }
  ard::bench::SimFleet fleet(options);
  const pid_t pid = daemon.pid();
  struct Cpu {
    double coordinator, simulator;
  };
  Cpu used{};  // by the last phase
  auto phase = [&](const char* name, auto body) {
    const Cpu before{CpuSeconds(pid), CpuSeconds(getpid())};
    const long messages = fleet.messages().sent + fleet.messages().received;
    const auto start = Clock::now();
    const bool ok = body();
    if (ok) {
      used = {CpuSeconds(pid) - before.coordinator, CpuSeconds(getpid()) - before.simulator};
      report.Add(std::string(name) + "_s", Seconds(start));
      report.Add(std::string(name) + "_coordinator_cpu_s", used.coordinator);
      // The simulator's own CPU: when it nears the phase's time, it is what limits the phase.
      report.Add(std::string(name) + "_simulator_cpu_s", used.simulator);
      report.Add(std::string(name) + "_messages",
                 fleet.messages().sent + fleet.messages().received - messages);
    }
    return ok;
  };
  bool ok = phase("join", [&] { return fleet.Join(); }) &&
            phase("formation", [&] { return fleet.Form(); });
  report.Add("job_size", fleet.job_size());
  report.Add("layout_hosts", fleet.layout_hosts());
  if (rounds) {
    ok = ok && phase("mesh", [&] {
           std::vector<std::string> names;
           for (int i = 0; i < options.hosts; ++i) names.push_back(fleet.host_name(i));
           return check(plane.Connect(fleet.layout(), names));
         });
    report.Add("mesh_connections_max", plane.max_connections());
    report.Add("mesh_connections_per_host", double(plane.connections()) / options.hosts);
  }
  ok = ok && fleet.Watch() && phase("first_step", [&] { return fleet.FirstStep(); });
  const auto sent = fleet.messages();
  if (rounds) {
    ok = ok && phase("first_step_release", [&] {
           absl::StatusOr<ard::bench::DataPlaneCounts> c = plane.Release();
           if (!check(c.status())) return false;
           report.Add("first_step_allreduces_per_host", double(c->allreduces) / options.hosts);
           return true;
         });
    // Nothing but heartbeats: the coordinator's floor for the steady state's figures.
    const int idle_ms = args.Int("idle_ms", 2000);
    ok = ok && phase("idle", [&] {
           std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
           return true;
         });
    if (ok) report.Add("coordinator_idle_cpu_ms_per_s", 1e6 * used.coordinator / idle_ms);
    absl::StatusOr<ard::bench::DataPlaneCounts> c;
    if (steps > 0) {
      ok = ok && phase("steady", [&] {
             c = plane.Steady(steps);
             return check(c.status());
           });
    }
    if (ok && steps > 0)
      ReportRounds(report, *c, plane.step_end_s(), options.hosts, used.coordinator, used.simulator,
                   fleet.messages().sent - sent.sent, fleet.messages().received - sent.received);
  } else {
    ok = ok && phase("steady", [&] { return fleet.Steady(steps); });
    if (ok && steps > 0) {
      const double seconds = fleet.step_end_s().back();
      const auto now = fleet.messages();
      report.Add("steady_steps_per_s", steps / seconds);
      report.Add("coordinator_cpu_ms_per_step", 1000 * used.coordinator / steps);
      report.Add(
          "messages_per_host_per_step",
          double(now.sent - sent.sent + now.received - sent.received) / options.hosts / steps);
      report.Add("sent_per_host_per_step", double(now.sent - sent.sent) / options.hosts / steps);
      report.Add("steady_slowest_step_s", SlowestStep(fleet.step_end_s()));
    }
  }
  report.Add("heartbeat_failures", fleet.heartbeat_failures());
  report.Add("largest_event_bytes", fleet.largest_event_bytes());
  report.Add("coordinator_peak_rss_mb", PeakRssMb(pid));
  report.Add("simulator_peak_rss_mb", PeakRssMb(getpid()));
  report.Add("min_committed_per_host", fleet.min_committed());
  report.Add("expected_committed_per_host", double(options.tensors) * (1 + (rounds ? 0 : steps)));
  if (error.empty()) error = fleet.error();
  const int rc = finish(ok, daemon.log());
  fleet.Leave();
  return rc;
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
  // One info line per simulated host's listener and mesh would drown the report's errors.
  ard::SetLogLevel(spdlog::level::warn);
  // A host's tensors hold one entry per rank of the job (about 500 KB each at 1,000 ranks), above
  // malloc's mmap threshold: each would be an mmap and munmap, and a thousand hosts' threads in
  // this one process would queue on its one address-space lock (a daemon has its own process).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return Run(args);
}

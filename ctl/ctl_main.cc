#include "ctl/ctl_main.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ctl/admin_main.h"
#include "ctl/bench_main.h"
#include "ctl/jobs_format.h"
#include "ctl/run_main.h"
#include "ctl/status_format.h"
#include "ctl/timeline_main.h"
#include "daemon/common/version.h"
#include "grpcpp/create_channel.h"
#include "proto/admin.grpc.pb.h"
#include "tls/credentials.h"

namespace ard::ctl {
namespace {

constexpr char kUsage[] =
    "usage: allreducectl [--daemon HOST:PORT] [--timeout_ms N] [TLS options] <command> [options]\n"
    "       allreducectl --version | --help\n"
    "\n"
    "commands:\n"
    "  status [--json]   hosts of the cluster (state, incarnation, GPUs, versions) and jobs\n"
    "  status --watch [--interval S] [--count N]\n"
    "                    the status table again every S seconds (default 2; --count: N times)\n"
    "  jobs [--json]     running jobs and recently ended or failed ones: duration, throughput,\n"
    "                    and why a failed job failed\n"
    "  bench --sockets PATH[,PATH...] [options]\n"
    "                    nccl-tests-style collective benchmark through the client library and\n"
    "                    the daemons' local sockets; takes its own options (bench --help)\n"
    "  forget HOST       removes a DOWN (decommissioned) host from the cluster view; root, on\n"
    "                    the coordinator's host\n"
    "  abort JOB         fails a running job on every host: each rank gets \"job JOB aborted by\n"
    "                    USER\"; root or the job's owner, on a host that runs its ranks\n"
    "  timeline --job NAME -o FILE [--duration S]\n"
    "                    records a job on every host as a Chrome trace (timeline --help)\n"
    "  run -np N [-H HOST:SLOTS,...] [options] COMMAND...\n"
    "                    horovodrun-style launch: runs the Python launcher allreduced.launch\n"
    "                    ($ALLREDUCED_PYTHON, default python3); run --help lists its options\n"
    "\n"
    "--daemon defaults to $ALLREDUCED_DAEMON, else 127.0.0.1:7070. Any daemon of the cluster\n"
    "answers; a non-coordinator forwards to the coordinator.\n"
    "Exit status: 0 ok, 1 daemon unreachable, 2 usage; status only: 3 the cluster answered and\n"
    "some host is DOWN, 4 the daemon (a follower) answered but cannot reach the coordinator: its\n"
    "local view is shown instead of the cluster's.\n"
    "forget and abort go to the local daemon's admin socket (--admin_socket PATH, default\n"
    "$ALLREDUCED_ADMIN_SOCKET, else /run/allreduced/allreduced.sock.admin), which tells the "
    "daemon\n"
    "who you are; with --daemon they go to that daemon over TCP, where they need mutual TLS\n"
    "(the TLS options). Exit 1 when refused (the reason is printed).\n"
    "--tls_cert FILE --tls_key FILE --tls_ca FILE: mutual TLS, for daemons configured with\n"
    "tls_cert_file/tls_key_file/tls_ca_file (PEM; all three or none).\n";

// `status`: the cluster answered and at least one host is DOWN.
constexpr int kExitHostDown = 3;
// `status`: the daemon answered without a cluster view (a follower cut off from its coordinator).
constexpr int kExitNoClusterView = 4;

struct Options {
  std::string daemon;
  int timeout_ms = 5000;
  std::string command;
  bool json = false;
  bool watch = false;
  double interval_s = 2;
  int count = 0;  // --watch: refreshes before exiting; 0: until interrupted
  tls::CredentialFiles tls;
  std::vector<std::string> rest;  // bench, bench-worker, run: the arguments after the command
  std::string target;             // forget: the host; abort: the job
  std::string admin_socket;       // forget, abort
  bool daemon_given = false;      // --daemon was on the command line
};

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "allreducectl: %s\n", error.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

// Returns -1 when parsing succeeded, else the exit code.
int Parse(const std::vector<std::string>& args, Options* o) {
  const char* env = std::getenv("ALLREDUCED_DAEMON");
  o->daemon = env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& flag, std::string* out) {
      if (a.rfind(flag + "=", 0) == 0) {
        *out = a.substr(flag.size() + 1);
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        *out = args[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "-h" || a == "--help" || a == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("allreducectl %s\n", kVersion);
      return 0;
    } else if (value("--daemon", &o->daemon)) {
      o->daemon_given = true;
    } else if (value("--tls_cert", &o->tls.cert_file)) {
    } else if (value("--tls_key", &o->tls.key_file)) {
    } else if (value("--tls_ca", &o->tls.ca_file)) {
    } else if (value("--admin_socket", &o->admin_socket)) {
    } else if (value("--timeout_ms", &v)) {
      if (!absl::SimpleAtoi(v, &o->timeout_ms) || o->timeout_ms <= 0) {
        return Usage("--timeout_ms needs a positive integer");
      }
    } else if (a == "--json" && (o->command == "status" || o->command == "jobs")) {
      o->json = true;
    } else if (a == "--watch" && o->command == "status") {
      o->watch = true;
    } else if (o->command == "status" && value("--interval", &v)) {
      if (!absl::SimpleAtod(v, &o->interval_s) || !(o->interval_s >= 0.1)) {
        return Usage("--interval needs a number of seconds >= 0.1");
      }
    } else if (o->command == "status" && value("--count", &v)) {
      if (!absl::SimpleAtoi(v, &o->count) || o->count <= 0) {
        return Usage("--count needs a positive integer");
      }
    } else if (a.rfind("-", 0) == 0) {
      return Usage("unknown option " + a);
    } else if (o->command.empty()) {
      o->command = a;
      if (a == "bench" || a == "bench-worker" || a == "bench-nccl" || a == "run" ||
          a == "timeline") {
        o->rest.assign(args.begin() + i + 1, args.end());
        return -1;
      }
    } else if ((o->command == "forget" || o->command == "abort") && o->target.empty()) {
      o->target = a;
    } else {
      return Usage("unexpected argument " + a);
    }
  }
  if (o->command.empty()) return Usage("no command given");
  if ((o->command == "forget" || o->command == "abort") && o->target.empty()) {
    return Usage(o->command + (o->command == "forget" ? " needs a HOST" : " needs a JOB"));
  }
  if (o->command != "status" && o->command != "jobs" && o->command != "forget" &&
      o->command != "abort") {
    return Usage("unknown command '" + o->command + "'");
  }
  if (o->watch && o->json) return Usage("--watch shows the table; it takes no --json");
  return -1;
}

// Asks the daemon for the cluster status; prints why and returns false when it cannot.
bool FetchStatus(const Options& o, GetClusterStatusResponse* response) {
  auto credentials = tls::MakeChannelCredentials(o.tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "allreducectl: %s\n", std::string(credentials.status().message()).c_str());
    return false;
  }
  auto stub = ard::Admin::NewStub(grpc::CreateChannel(o.daemon, *credentials));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.timeout_ms));
  grpc::Status status = stub->GetClusterStatus(&context, GetClusterStatusRequest(), response);
  if (!status.ok()) {
    std::string why = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                              status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                          ? "cannot reach daemon at " + o.daemon
                          : "daemon at " + o.daemon + " failed the request";
    std::fprintf(stderr, "allreducectl: %s: %s\n", why.c_str(), status.error_message().c_str());
    return false;
  }
  return true;
}

// One status report; returns the exit status (see kUsage).
int StatusOnce(const Options& o) {
  GetClusterStatusResponse response;
  if (!FetchStatus(o, &response)) return 1;
  if (o.json) {
    absl::StatusOr<std::string> json = FormatStatusJson(response);
    if (!json.ok()) {
      std::fprintf(stderr, "allreducectl: %s\n", std::string(json.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", json->c_str());
  } else {
    std::fputs(FormatStatusTable(response).c_str(), stdout);
  }
  std::fflush(stdout);
  if (!response.cluster_view_error().empty()) {
    // The daemon answered, but only with its own view: say so, distinctly from "unreachable".
    std::fprintf(stderr, "allreducectl: cluster view unavailable (%s's local view shown): %s\n",
                 response.answered_by().c_str(), response.cluster_view_error().c_str());
    return kExitNoClusterView;
  }
  std::vector<std::string> down;
  for (const Host& h : response.view().hosts()) {
    if (h.state() == DOWN) down.push_back(h.name());
  }
  if (!down.empty()) {
    std::fprintf(stderr, "allreducectl: %zu host(s) DOWN: %s\n", down.size(),
                 absl::StrJoin(down, ", ").c_str());
    return kExitHostDown;
  }
  return 0;
}

// `status --watch`: the table every interval (the screen cleared first on a terminal) until
// interrupted or --count reports; exits with the last report's status.
int StatusWatch(const Options& o) {
  const bool tty = isatty(STDOUT_FILENO) == 1;
  int rc = 0;
  for (int n = 1;; ++n) {
    if (tty) std::fputs("\033[H\033[2J", stdout);
    const std::string now = absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone());
    std::printf("Every %.1fs: allreducectl status (%s)    %s\n\n", o.interval_s, o.daemon.c_str(),
                now.c_str());
    std::fflush(stdout);
    rc = StatusOnce(o);
    if (o.count > 0 && n >= o.count) return rc;
    absl::SleepFor(absl::Seconds(o.interval_s));
  }
}

int RunJobs(const Options& o) {
  GetClusterStatusResponse response;
  if (!FetchStatus(o, &response)) return 1;
  if (!response.cluster_view_error().empty()) {
    std::fprintf(stderr, "allreducectl: cluster view unavailable (asked %s): %s\n",
                 response.answered_by().c_str(), response.cluster_view_error().c_str());
    return kExitNoClusterView;
  }
  if (!o.json) {
    std::fputs(FormatJobsTable(response.view()).c_str(), stdout);
    return 0;
  }
  absl::StatusOr<std::string> json = FormatJobsJson(response.view());
  if (!json.ok()) {
    std::fprintf(stderr, "allreducectl: %s\n", std::string(json.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", json->c_str());
  return 0;
}

}  // namespace

int CtlMain(int argc, char** argv) {
  Options options;
  int rc = Parse(std::vector<std::string>(argv + 1, argv + argc), &options);
  if (rc >= 0) return rc;
  if (options.command == "bench") return BenchMain(options.rest);
  if (options.command == "bench-worker") return BenchWorkerMain(options.rest);
  if (options.command == "bench-nccl") return BenchNcclMain(options.rest);
  if (options.command == "run") return RunMain(options.daemon, options.tls, options.rest);
  if (options.command == "timeline") {
    return TimelineMain(options.daemon, options.tls, options.timeout_ms, options.rest);
  }
  if (options.command == "jobs") return RunJobs(options);
  if (options.command == "forget" || options.command == "abort") {
    // An explicit --daemon (and no --admin_socket) sends it over TCP: refused without TLS.
    const bool tcp = options.daemon_given && options.admin_socket.empty();
    return AdminMain(options.command, options.target, options.admin_socket, options.daemon,
                     options.tls, options.timeout_ms, tcp);
  }
  return options.watch ? StatusWatch(options) : StatusOnce(options);
}

}  // namespace ard::ctl

#include "client/cli/ctl_main.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/cli/bench_main.h"
#include "client/cli/run_main.h"
#include "client/cli/status_format.h"
#include "daemon/rpc/tls.h"
#include "grpcpp/create_channel.h"
#include "proto/admin.grpc.pb.h"

namespace ard::cli {
namespace {

constexpr char kUsage[] =
    "usage: allreducectl [--daemon HOST:PORT] [--timeout_ms N] <command> [options]\n"
    "\n"
    "commands:\n"
    "  status [--json]   hosts of the cluster (state, incarnation, GPUs, versions) and jobs\n"
    "  bench --sockets PATH[,PATH...] [options]\n"
    "                    nccl-tests-style collective benchmark through the client library and\n"
    "                    the daemons' local sockets; takes its own options (bench --help)\n"
    "  run -np N [-H HOST:SLOTS,...] [options] COMMAND...\n"
    "                    horovodrun-style launch: runs the Python launcher allreduced.launch\n"
    "                    ($ALLREDUCED_PYTHON, default python3); run --help lists its options\n"
    "\n"
    "--daemon defaults to $ALLREDUCED_DAEMON, else 127.0.0.1:7070. Any daemon of the cluster\n"
    "answers; a non-coordinator forwards to the coordinator.\n"
    "status exits 0 ok, 1 daemon unreachable, 2 usage, 3 the daemon (a follower) answered but\n"
    "cannot reach the coordinator: its local view is shown instead of the cluster's.\n"
    "--tls_cert FILE --tls_key FILE --tls_ca FILE: mutual TLS, for daemons configured with\n"
    "tls_cert_file/tls_key_file/tls_ca_file (PEM; all three or none).\n";

// The daemon answered without a cluster view (a follower cut off from its coordinator).
constexpr int kExitNoClusterView = 3;

struct Options {
  std::string daemon;
  int timeout_ms = 5000;
  std::string command;
  bool json = false;
  rpc::TlsFiles tls;
  std::vector<std::string> rest;  // bench, bench-worker, run: the arguments after the command
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
    } else if (value("--daemon", &o->daemon)) {
    } else if (value("--tls_cert", &o->tls.cert_file)) {
    } else if (value("--tls_key", &o->tls.key_file)) {
    } else if (value("--tls_ca", &o->tls.ca_file)) {
    } else if (value("--timeout_ms", &v)) {
      if (!absl::SimpleAtoi(v, &o->timeout_ms) || o->timeout_ms <= 0) {
        return Usage("--timeout_ms needs a positive integer");
      }
    } else if (a == "--json" && o->command == "status") {
      o->json = true;
    } else if (a.rfind("-", 0) == 0) {
      return Usage("unknown option " + a);
    } else if (o->command.empty()) {
      o->command = a;
      if (a == "bench" || a == "bench-worker" || a == "bench-nccl" || a == "run") {
        o->rest.assign(args.begin() + i + 1, args.end());
        return -1;
      }
    } else {
      return Usage("unexpected argument " + a);
    }
  }
  if (o->command.empty()) return Usage("no command given");
  if (o->command != "status") return Usage("unknown command '" + o->command + "'");
  return -1;
}

int RunStatus(const Options& o) {
  auto credentials = rpc::MakeChannelCredentials(o.tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "allreducectl: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  auto channel = grpc::CreateChannel(o.daemon, *credentials);
  auto stub = ard::Admin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.timeout_ms));
  GetClusterStatusResponse response;
  grpc::Status status = stub->GetClusterStatus(&context, GetClusterStatusRequest(), &response);
  if (!status.ok()) {
    std::string why = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                              status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                          ? "cannot reach daemon at " + o.daemon
                          : "daemon at " + o.daemon + " failed the request";
    std::fprintf(stderr, "allreducectl: %s: %s\n", why.c_str(), status.error_message().c_str());
    return 1;
  }
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
  if (!response.cluster_view_error().empty()) {
    // The daemon answered, but only with its own view: say so, distinctly from "unreachable".
    std::fprintf(stderr, "allreducectl: cluster view unavailable (%s's local view shown): %s\n",
                 response.answered_by().c_str(), response.cluster_view_error().c_str());
    return kExitNoClusterView;
  }
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
  return RunStatus(options);
}

}  // namespace ard::cli

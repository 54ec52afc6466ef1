#include "ctl/timeline_main.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ctl/timeline_trace.h"
#include "grpcpp/create_channel.h"
#include "proto/admin.grpc.pb.h"

namespace ard::ctl {
namespace {

constexpr char kUsage[] =
    "usage: allreducectl timeline --job NAME -o FILE [--duration S]\n"
    "  Records job NAME on every UP host of the cluster for S seconds (default: until SIGINT or\n"
    "  SIGTERM; at most an hour) and writes a Chrome trace (chrome://tracing, Perfetto) to FILE.\n"
    "  --job defaults to $ALLREDUCED_JOB. Prints \"recording ...\" on stderr once every host\n"
    "  records.\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "allreducectl timeline: %s\n%s", error.c_str(), kUsage);
  return 2;
}

struct Args {
  std::string job;
  std::string output;
  double duration_s = 0;  // 0: until a signal
};

int Parse(const std::vector<std::string>& args, Args* a) {
  const char* env = std::getenv("ALLREDUCED_JOB");
  if (env != nullptr) a->job = env;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    const bool has_value = i + 1 < args.size();
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (s == "--job" && has_value) {
      a->job = args[++i];
    } else if ((s == "-o" || s == "--output") && has_value) {
      a->output = args[++i];
    } else if (s == "--duration" && has_value) {
      if (!absl::SimpleAtod(args[++i], &a->duration_s) || !(a->duration_s > 0)) {
        return Usage("--duration needs a positive number of seconds");
      }
    } else {
      return Usage("unexpected argument " + s);
    }
  }
  if (a->job.empty()) return Usage("no --job given (and ALLREDUCED_JOB is not set)");
  if (a->output.empty()) return Usage("no -o FILE given");
  return -1;
}

// Waits `seconds` (0: forever) or until SIGINT/SIGTERM (blocked by the caller).
void Wait(double seconds) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (seconds <= 0) {
    int sig;
    sigwait(&set, &sig);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    if (sigtimedwait(&set, nullptr, &ts) >= 0) return;  // a signal: stop now
    if (errno != EINTR && errno != EAGAIN) return;      // EAGAIN: the time is up
  }
}

}  // namespace

int TimelineMain(const std::string& daemon, const tls::CredentialFiles& tls, int timeout_ms,
                 const std::vector<std::string>& args) {
  Args a;
  if (int rc = Parse(args, &a); rc >= 0) return rc;
  // Blocked before any thread starts (gRPC's inherit the mask): Wait() takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto credentials = tls::MakeChannelCredentials(tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "allreducectl: %s\n", std::string(credentials.status().message()).c_str());
    return 1;
  }
  auto deadline = [timeout_ms](grpc::ClientContext* c) {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  };
  GetClusterStatusResponse status;
  {
    grpc::ClientContext context;
    deadline(&context);
    grpc::Status st = Admin::NewStub(grpc::CreateChannel(daemon, *credentials))
                          ->GetClusterStatus(&context, GetClusterStatusRequest(), &status);
    if (!st.ok()) {
      std::fprintf(stderr, "allreducectl: cannot reach daemon at %s: %s\n", daemon.c_str(),
                   st.error_message().c_str());
      return 1;
    }
    if (!status.cluster_view_error().empty()) {
      std::fprintf(stderr, "allreducectl: no cluster view from %s: %s\n", daemon.c_str(),
                   status.cluster_view_error().c_str());
      return 1;
    }
  }
  std::vector<std::pair<std::string, std::unique_ptr<Admin::Stub>>> hosts;
  for (const Host& h : status.view().hosts()) {
    if (h.state() != UP) continue;
    hosts.emplace_back(h.name(), Admin::NewStub(grpc::CreateChannel(h.address(), *credentials)));
  }
  std::vector<std::string> names;
  for (auto& [name, stub] : hosts) {
    StartTimelineRequest request;
    request.set_job(a.job);
    request.set_duration_ms(a.duration_s > 0 ? static_cast<uint32_t>(a.duration_s * 1000) + 5000
                                             : 0);
    StartTimelineResponse response;
    grpc::ClientContext context;
    deadline(&context);
    grpc::Status st = stub->StartTimeline(&context, request, &response);
    if (!st.ok()) {
      std::fprintf(stderr, "allreducectl: host %s did not start recording: %s\n", name.c_str(),
                   st.error_message().c_str());
      return 1;
    }
    names.push_back(name);
  }
  std::fprintf(stderr, "recording job %s on %s (%s)\n", a.job.c_str(),
               absl::StrJoin(names, ", ").c_str(),
               a.duration_s > 0 ? absl::StrCat(a.duration_s, "s").c_str() : "until SIGINT/SIGTERM");
  std::fflush(stderr);
  Wait(a.duration_s);

  std::vector<StopTimelineResponse> answers;
  int rc = 0;
  for (auto& [name, stub] : hosts) {
    StopTimelineRequest request;
    request.set_job(a.job);
    StopTimelineResponse response;
    grpc::ClientContext context;
    deadline(&context);
    grpc::Status st = stub->StopTimeline(&context, request, &response);
    if (!st.ok()) {
      // Its part is missing (the daemon restarted, or is unreachable): the rest is still written.
      std::fprintf(stderr, "allreducectl: host %s: no timeline: %s\n", name.c_str(),
                   st.error_message().c_str());
      rc = 1;
      continue;
    }
    if (response.dropped() > 0) {
      std::fprintf(stderr, "allreducectl: host %s: %llu oldest marks dropped (recorder full)\n",
                   name.c_str(), static_cast<unsigned long long>(response.dropped()));
    }
    answers.push_back(std::move(response));
  }
  TraceStats stats;
  const std::string json = WriteChromeTrace(a.job, answers, &stats);
  std::ofstream out(a.output, std::ios::trunc);
  out << json;
  out.close();
  if (!out) {
    std::fprintf(stderr, "allreducectl: cannot write %s\n", a.output.c_str());
    return 1;
  }
  std::fprintf(stderr,
               "wrote %s: %d tensor submissions (rank x tensor), %d fused groups, %d hosts\n",
               a.output.c_str(), stats.instances, stats.groups, static_cast<int>(answers.size()));
  return rc;
}

}  // namespace ard::ctl

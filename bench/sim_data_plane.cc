#include "bench/sim_data_plane.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/sim_tensors.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/tcp/host_collectives.h"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/response_codec.h"
#include "daemon/negotiation/steady_rounds.h"

namespace ard::bench {
namespace {

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Messages of `payload_bytes` each that `bytes` make (every message, one transfer on one
// connection, also carries the mesh's checksum); Internal when they are not whole ones.
absl::StatusOr<long> Messages(uint64_t bytes, size_t payload_bytes, const char* what) {
  const size_t message_bytes = payload_bytes + dataplane::tcp::TcpMesh::kChecksumBytes;
  if (bytes % message_bytes != 0) {
    return absl::InternalError(absl::StrCat(
        what, " moved ", bytes, " bytes, not a whole number of ", message_bytes, "-byte messages"));
  }
  return static_cast<long>(bytes / message_bytes);
}

// A failure that is a consequence of another host's (its mesh shut down, or a peer closed).
bool Secondary(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsCancelled(s) || absl::IsFailedPrecondition(s);
}

}  // namespace

using negotiation::RankEntry;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

struct SimDataPlane::Host {
  int index = 0;
  int cross_rank = -1;
  int rank = -1;
  std::unique_ptr<dataplane::tcp::DataListener> listener;
  std::shared_ptr<dataplane::tcp::DataTraffic> traffic;  // the listener's, counted by the mesh
  std::unique_ptr<dataplane::tcp::TcpMesh> mesh;
  std::unique_ptr<jobs::SteadyState> steady;
  std::atomic<long> to_coordinator{0};
  std::vector<TensorRequest> requests;  // its rank's request for each tensor, every step
  std::vector<float> buffer;
};

SimDataPlane::SimDataPlane(DataPlaneOptions options) : options_(std::move(options)) {}

SimDataPlane::~SimDataPlane() {
  for (auto& h : hosts_) {
    h->steady.reset();  // uses the mesh
    h->mesh.reset();
  }
}

absl::Status SimDataPlane::Start() {
  dataplane::tcp::DataListenerOptions listener;
  listener.address = "127.0.0.1:0";
  listener.algorithms.steady_state = true;  // DaemonConfig's default; checked with every peer
  listener.unclaimed_timeout = options_.connect_timeout;
  for (int i = 0; i < options_.hosts; ++i) {
    auto host = std::make_unique<Host>();
    host->index = i;
    host->listener = std::make_unique<dataplane::tcp::DataListener>(listener);
    ARD_RETURN_IF_ERROR(host->listener->Start());
    host->traffic = host->listener->traffic();
    addresses_.push_back(absl::StrCat("127.0.0.1:", host->listener->port()));
    hosts_.push_back(std::move(host));
  }
  return absl::OkStatus();
}

absl::Status SimDataPlane::Connect(const JobLayout& layout, const std::vector<std::string>& names) {
  job_size_ = layout.size();
  std::vector<std::string> data_addresses;
  std::map<std::string, int> cross_rank;
  for (int h = 0; h < layout.hosts_size(); ++h) {
    data_addresses.push_back(layout.hosts(h).data_address());
    cross_rank[layout.hosts(h).name()] = h;
  }
  for (auto& h : hosts_) {
    Host* host = h.get();
    auto found = cross_rank.find(names[host->index]);
    if (found == cross_rank.end() || layout.hosts(found->second).ranks_size() != 1) {
      return absl::InternalError(
          absl::StrCat("the layout has no one rank for ", names[host->index]));
    }
    host->cross_rank = found->second;
    host->rank = layout.hosts(found->second).ranks(0);
    std::vector<bool> here(job_size_, false);
    here[host->rank] = true;
    host->steady = std::make_unique<jobs::SteadyState>(
        std::move(here), options_.fusion_threshold_bytes, [host] { return host->mesh.get(); },
        [host](std::vector<ReadyTensor> central) { host->to_coordinator += central.size(); },
        /*round_data_max_bytes=*/0, jobs::PartialWait{});
    for (int t = 0; t < options_.tensors; ++t) {
      ARD_ASSIGN_OR_RETURN(
          TensorRequest request,
          negotiation::FromMeta(SimTensorMeta(host->rank), SimTensorName(t), job_size_));
      host->requests.push_back(std::move(request));
    }
  }
  const dataplane::tcp::MeshJob job{layout.job_id(), layout.generation(), layout.data_secret()};
  absl::StatusOr<DataPlaneCounts> connected =
      OnEveryHost([&](Host& host, DataPlaneCounts&) -> absl::Status {
        ARD_ASSIGN_OR_RETURN(host.mesh, dataplane::tcp::TcpMesh::Connect(
                                            job, host.cross_rank, data_addresses, *host.listener,
                                            options_.connect_timeout, options_.mesh));
        return absl::OkStatus();
      });
  // Every connection is taken: the accept threads (one per host here) have nothing left to do.
  for (auto& h : hosts_) h->listener->Stop();
  return connected.status();
}

void SimDataPlane::OnEvent(int index, const JobEvent& event) {
  // As the daemon's JobChannel turns an event into a committed list (joins are not simulated).
  negotiation::CommittedList list;
  for (uint32_t id : event.cache_evict()) list.cache_evict.push_back(id);
  for (const CacheEntry& put : event.cache_put()) list.cache_put.push_back({put.id(), put.name()});
  for (const CollectiveResponse& cr : event.responses()) {
    absl::StatusOr<Response> response = negotiation::DecodeResponse(cr, job_size_);
    if (!response.ok()) {
      absl::MutexLock lock(&mu_);
      event_error_.Update(response.status());
      return;
    }
    list.responses.push_back(*std::move(response));
  }
  if (list.responses.empty() && list.cache_put.empty() && list.cache_evict.empty()) return;
  if (!hosts_[index]->steady->Received(list)) {
    absl::MutexLock lock(&mu_);
    event_error_.Update(absl::FailedPreconditionError(
        absl::StrCat("host ", index, ": a list arrived after its rounds ended")));
  }
}

absl::StatusOr<DataPlaneCounts> SimDataPlane::OnEveryHost(
    const std::function<absl::Status(Host&, DataPlaneCounts&)>& body) {
  {
    absl::MutexLock lock(&mu_);
    ARD_RETURN_IF_ERROR(event_error_);
  }
  std::vector<DataPlaneCounts> counts(hosts_.size());
  std::vector<absl::Status> statuses(hosts_.size());
  absl::Notification go;  // thread creation is not part of any phase's time
  std::vector<std::thread> threads;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    threads.emplace_back([&, i] {
      go.WaitForNotification();
      statuses[i] = body(*hosts_[i], counts[i]);
      // A host that failed leaves its mesh's peers waiting: poison it, so that they fail too.
      if (!statuses[i].ok() && hosts_[i]->mesh) hosts_[i]->mesh->Abort(statuses[i]);
    });
  }
  phase_start_ = std::chrono::steady_clock::now();
  go.Notify();
  for (std::thread& t : threads) t.join();
  // The first failure that is not a consequence of another host's.
  for (bool secondary : {false, true}) {
    for (size_t i = 0; i < hosts_.size(); ++i) {
      if (statuses[i].ok() || Secondary(statuses[i]) != secondary) continue;
      return absl::Status(statuses[i].code(),
                          absl::StrCat("simulated host ", i, ": ", statuses[i].message()));
    }
  }
  DataPlaneCounts total;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const DataPlaneCounts& c = counts[i];
    total.rounds += c.rounds;
    total.agreed += c.agreed;
    total.tensors_run += c.tensors_run;
    total.allreduces += c.allreduces;
    total.round_messages_sent += c.round_messages_sent;
    total.allreduce_messages_sent += c.allreduce_messages_sent;
    total.messages_received += c.messages_received;
    total.bytes_sent += c.bytes_sent;
    total.offer_cpu_s += c.offer_cpu_s;
    total.round_cpu_s += c.round_cpu_s;
    total.allreduce_cpu_s += c.allreduce_cpu_s;
    total.template_entries += c.template_entries;
    total.max_messages_sent =
        std::max(total.max_messages_sent, c.round_messages_sent + c.allreduce_messages_sent);
    total.to_coordinator += hosts_[i]->to_coordinator.exchange(0);
  }
  return total;
}

absl::Status SimDataPlane::RoundOn(Host& host, size_t vote_bytes, DataPlaneCounts& counts,
                                   std::vector<Response>* run) {
  const uint64_t sent = host.traffic->sent_bytes, received = host.traffic->received_bytes;
  const uint64_t agreed = host.steady->agreed_tensors();
  const double cpu = ThreadCpuSeconds();
  ARD_ASSIGN_OR_RETURN(*run, host.steady->RunRound());
  counts.round_cpu_s += ThreadCpuSeconds() - cpu;
  if (!host.steady->active()) return absl::UnavailableError("the readiness rounds ended");
  const uint64_t sent_bytes = host.traffic->sent_bytes - sent;
  ARD_ASSIGN_OR_RETURN(const long out, Messages(sent_bytes, vote_bytes, "a round"));
  ARD_ASSIGN_OR_RETURN(const long in,
                       Messages(host.traffic->received_bytes - received, vote_bytes, "a round"));
  ++counts.rounds;
  counts.round_messages_sent += out;
  counts.messages_received += in;
  counts.bytes_sent += sent_bytes;
  counts.agreed += static_cast<long>(host.steady->agreed_tensors() - agreed);
  return absl::OkStatus();
}

absl::Status SimDataPlane::Run(Host& host, const std::vector<Response>& run,
                               DataPlaneCounts& counts) {
  const float hosts = static_cast<float>(host.mesh->size());
  const double cpu = ThreadCpuSeconds();
  for (const Response& r : run) {
    ARD_RETURN_IF_ERROR(r.error);
    size_t count = 0;
    for (const ReadyTensor& t : r.tensors) {
      const wire::Submit& meta = t.first().meta;
      if (r.collective != wire::Collective::kAllreduce ||
          meta.dtype != static_cast<uint32_t>(wire::DataType::kFloat32)) {
        return absl::InternalError(absl::StrCat("tensor ", t.name, ": not a float32 allreduce"));
      }
      count += meta.bytes / sizeof(float);
    }
    host.buffer.assign(count, 1.0f);
    const uint64_t sent = host.traffic->sent_bytes, received = host.traffic->received_bytes;
    ARD_RETURN_IF_ERROR(dataplane::tcp::AllreduceInPlace(
        *host.mesh, host.buffer.data(), count, wire::DataType::kFloat32, wire::ReduceOp::kSum));
    for (float v : host.buffer) {
      if (v != hosts) return absl::InternalError(absl::StrCat("allreduce result ", v));
    }
    const uint64_t sent_bytes = host.traffic->sent_bytes - sent;
    const size_t bytes = count * sizeof(float);
    ARD_ASSIGN_OR_RETURN(const long out, Messages(sent_bytes, bytes, "an allreduce"));
    ARD_ASSIGN_OR_RETURN(const long in,
                         Messages(host.traffic->received_bytes - received, bytes, "an allreduce"));
    ++counts.allreduces;
    counts.allreduce_messages_sent += out;
    counts.messages_received += in;
    counts.bytes_sent += sent_bytes;
    counts.tensors_run += static_cast<long>(r.tensors.size());
  }
  counts.allreduce_cpu_s += ThreadCpuSeconds() - cpu;
  return absl::OkStatus();
}

absl::StatusOr<DataPlaneCounts> SimDataPlane::Release() {
  return OnEveryHost([&](Host& host, DataPlaneCounts& counts) -> absl::Status {
    std::vector<Response> run;
    ARD_RETURN_IF_ERROR(RoundOn(host, negotiation::VoteBytes(0), counts, &run));
    ARD_RETURN_IF_ERROR(Run(host, run, counts));
    if (counts.agreed != 0 || counts.tensors_run != options_.tensors) {
      return absl::InternalError(absl::StrCat("the first round agreed ", counts.agreed,
                                              " tensors and released ", counts.tensors_run, " of ",
                                              options_.tensors));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<DataPlaneCounts> SimDataPlane::Steady(int steps) {
  step_end_s_.assign(steps, 0.0);
  std::unique_ptr<std::atomic<int>[]> finished(new std::atomic<int>[steps]);
  for (int k = 0; k < steps; ++k) finished[k] = 0;
  const size_t vote_bytes = negotiation::VoteBytes(options_.tensors);
  return OnEveryHost([&](Host& host, DataPlaneCounts& counts) -> absl::Status {
    for (int k = 0; k < steps; ++k) {
      // As the daemon's readiness table hands over a tensor every local rank submitted: one
      // entry per rank of the job.
      const double cpu = ThreadCpuSeconds();
      for (const TensorRequest& request : host.requests) {
        ReadyTensor tensor{request.name(), std::vector<RankEntry>(job_size_)};
        tensor.ranks[host.rank] = request;
        if (!host.steady->Offer(tensor)) {
          return absl::InternalError(absl::StrCat("tensor ", request.name(), " was not held"));
        }
      }
      counts.offer_cpu_s += ThreadCpuSeconds() - cpu;
      const long agreed = counts.agreed;
      std::vector<Response> run;
      ARD_RETURN_IF_ERROR(RoundOn(host, vote_bytes, counts, &run));
      if (counts.agreed - agreed != options_.tensors) {
        return absl::InternalError(absl::StrCat("step ", k, ": the round agreed ",
                                                counts.agreed - agreed, " tensors of ",
                                                options_.tensors));
      }
      ARD_RETURN_IF_ERROR(Run(host, run, counts));
      if (++finished[k] == options_.hosts) {
        step_end_s_[k] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start_).count();
      }
    }
    counts.template_entries = static_cast<long>(host.steady->template_rank_entries());
    return absl::OkStatus();
  });
}

int SimDataPlane::max_connections() const {
  size_t most = 0;
  for (const auto& h : hosts_) most = std::max(most, h->mesh ? h->mesh->peers().size() : 0);
  return static_cast<int>(most);
}

long SimDataPlane::connections() const {
  long total = 0;
  for (const auto& h : hosts_) total += h->mesh ? static_cast<long>(h->mesh->peers().size()) : 0;
  return total;
}

}  // namespace ard::bench

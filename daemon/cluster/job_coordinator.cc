#include "daemon/cluster/job_coordinator.h"

#include <algorithm>
#include <deque>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/negotiation/fusion_planner.h"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/response_cache.h"

namespace ard::cluster {

using negotiation::ReadinessTable;
using negotiation::Response;

struct JobCoordinator::Forming {
  int size = 0;
  uint64_t generation = 0;
  absl::Duration timeout;
  // By host name (sorted: host order defines cross ranks).
  std::map<std::string, std::pair<RegisterRanksRequest, Done<RegisterRanksResponse>>> hosts;
};

struct JobCoordinator::Job {
  JobLayout layout;
  std::unique_ptr<ReadinessTable> table;
  std::map<std::string, std::shared_ptr<JobEventSink>> sinks;
  std::map<std::string, std::vector<JobEvent>> backlog;  // for hosts not watching yet
  std::set<std::string> left;
  std::set<std::string> stall_warned;
  absl::Time formed;
  // Response cache: the coordinator decides; hosts replay its decisions (JobEvent).
  std::unique_ptr<negotiation::ResponseCache> cache;
  std::map<std::string, std::map<std::string, HostReadyTensor>> last_full;  // name -> host -> metas
  std::map<uint32_t, std::map<std::string, HostReadyTensor>> cached;       // id -> host -> metas
  // Recently evicted entries, so an id a host sent before it saw the eviction still resolves.
  std::map<uint32_t, std::map<std::string, HostReadyTensor>> evicted;
  std::deque<uint32_t> evicted_order;
  // GPU path: each host's GPUs (NegotiateRequest.gpu) until all sent; then the layout went out.
  std::map<std::string, GpuHost> gpu_hosts;
  bool gpu_layout_sent = false;
};

JobCoordinator::JobCoordinator(EventLoop& loop, JobCoordinatorOptions options)
    : loop_(loop), options_(options) {}

JobCoordinator::~JobCoordinator() {
  for (auto& [id, job] : jobs_) {
    for (auto& [host, sink] : job->sinks) {
      sink->Finish(absl::UnavailableError("coordinator shutting down"));
    }
  }
}

namespace {
// Bounds on what a peer may ask for: a job of more ranks, or a formation wait longer than this,
// is a bug or an attack, not a training job.
constexpr int kMaxJobSize = 1 << 20;
constexpr uint32_t kMaxFormTimeoutMs = 3600 * 1000;
constexpr size_t kMaxNameBytes = 256;
}  // namespace

absl::Status JobCoordinator::CheckMember(const std::string& host, const char* call) const {
  if (!options_.is_up || options_.is_up(host)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      call, " from host '", absl::CHexEscape(host.substr(0, 64)),
      "', which is not an UP member of the cluster"));
}

void JobCoordinator::HandleRegisterRanks(const RegisterRanksRequest& request,
                                         Done<RegisterRanksResponse> done) {
  if (auto s = CheckMember(request.host(), "RegisterRanks"); !s.ok()) return done(s);
  if (request.job().empty() || request.job().size() > kMaxNameBytes ||
      request.size() > kMaxJobSize || request.timeout_ms() > kMaxFormTimeoutMs) {
    done(absl::InvalidArgumentError(absl::StrCat(
        "RegisterRanks from host ", request.host(), ": job name of ", request.job().size(),
        " bytes (1 to ", kMaxNameBytes, "), size ", request.size(), " (at most ", kMaxJobSize,
        ") or timeout_ms ", request.timeout_ms(), " (at most ", kMaxFormTimeoutMs,
        ") out of range")));
    return;
  }
  if (request.size() < 1 || request.ranks_size() < 1 || request.ranks_size() > request.size()) {
    done(absl::InvalidArgumentError(absl::StrCat("job ", request.job(), ": host ", request.host(),
                                                 " registered ", request.ranks_size(),
                                                 " ranks for size ", request.size())));
    return;
  }
  auto& forming = forming_[request.job()];
  if (forming == nullptr) {
    forming = std::make_unique<Forming>();
    forming->size = request.size();
    forming->generation = next_id_++;
    forming->timeout = absl::Milliseconds(std::max<uint32_t>(request.timeout_ms(), 1000));
    const uint64_t generation = forming->generation;
    const std::string name = request.job();
    loop_.PostAfter(forming->timeout, [this, name, generation] { FormTimeout(name, generation); });
  }
  if (forming->size != request.size()) {
    done(absl::InvalidArgumentError(absl::StrCat("job ", request.job(), " has size ",
                                                 forming->size, " on other hosts but ",
                                                 request.size(), " on ", request.host())));
    return;
  }
  forming->hosts[request.host()] = {request, std::move(done)};
  TryForm(request.job());
}

void JobCoordinator::TryForm(const std::string& name) {
  Forming& f = *forming_.at(name);
  int total = 0;
  for (const auto& [host, reg] : f.hosts) total += reg.first.ranks_size();
  if (total < f.size) return;
  auto fail_all = [&](const absl::Status& status) {
    for (auto& [host, reg] : f.hosts) reg.second(status);
    forming_.erase(name);
  };
  if (total > f.size) {
    return fail_all(absl::InvalidArgumentError(absl::StrCat(
        "job ", name, ": hosts registered ", total, " ranks for a job of size ", f.size)));
  }
  // Ranks the launcher gave are kept; the rest follow host order, then local rank.
  std::vector<bool> taken(f.size, false);
  for (const auto& [host, reg] : f.hosts) {
    for (const auto& lr : reg.first.ranks()) {
      if (lr.rank() < 0) continue;
      if (lr.rank() >= f.size || taken[lr.rank()]) {
        return fail_all(absl::InvalidArgumentError(
            absl::StrCat("job ", name, ": rank ", lr.rank(), " given twice or out of range")));
      }
      taken[lr.rank()] = true;
    }
  }
  auto job = std::make_unique<Job>();
  JobLayout& layout = job->layout;
  layout.set_job_id((options_.id_prefix << 24) | next_id_++);
  layout.set_job(name);
  layout.set_size(f.size);
  int next_free = 0;
  for (const auto& [host, reg] : f.hosts) {
    auto ranks = reg.first.ranks();
    std::sort(ranks.begin(), ranks.end(),
              [](const auto& a, const auto& b) { return a.local_rank() < b.local_rank(); });
    JobLayout::JobHost* h = layout.add_hosts();
    h->set_name(host);
    h->set_data_address(reg.first.data_address());
    for (const auto& lr : ranks) {
      int rank = lr.rank();
      if (rank < 0) {
        while (taken[next_free]) ++next_free;
        rank = next_free;
        taken[rank] = true;
      }
      h->add_ranks(rank);
      h->add_pids(lr.pid());
    }
  }
  job->table = std::make_unique<ReadinessTable>(f.size);
  job->formed = absl::Now();
  job->cache = std::make_unique<negotiation::ResponseCache>(options_.cache_capacity);
  RegisterRanksResponse response;
  *response.mutable_layout() = layout;
  for (auto& [host, reg] : f.hosts) reg.second(response);
  Logger("negotiation")->info("cross-host job formed job={} id={} size={} hosts={}", name,
                              layout.job_id(), f.size, layout.hosts_size());
  jobs_[layout.job_id()] = std::move(job);
  forming_.erase(name);
}

void JobCoordinator::FormTimeout(const std::string& name, uint64_t generation) {
  auto it = forming_.find(name);
  if (it == forming_.end() || it->second->generation != generation) return;
  Forming& f = *it->second;
  std::vector<std::string> who;
  int total = 0;
  for (const auto& [host, reg] : f.hosts) {
    who.push_back(absl::StrCat(host, " (", reg.first.ranks_size(), ")"));
    total += reg.first.ranks_size();
  }
  const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
      "job ", name, " did not form within ", absl::FormatDuration(f.timeout), ": ", total, " of ",
      f.size, " ranks registered, on hosts ", absl::StrJoin(who, ", ")));
  for (auto& [host, reg] : f.hosts) reg.second(status);
  forming_.erase(it);
}

void JobCoordinator::HandleNegotiate(const NegotiateRequest& request,
                                     Done<NegotiateResponse> done) {
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    done(absl::NotFoundError(absl::StrCat("unknown or ended job id ", request.job_id())));
    return;
  }
  Job& job = *it->second;
  const std::string& host = request.host();
  if (auto s = CheckMember(host, "Negotiate"); !s.ok()) return done(s);
  const bool member = std::any_of(job.layout.hosts().begin(), job.layout.hosts().end(),
                                  [&](const auto& h) { return h.name() == host; });
  if (!member) {
    done(absl::PermissionDeniedError(absl::StrCat("host ", host, " is not part of job ",
                                                  job.layout.job())));
    return;
  }
  // Malformed metadata is refused to the caller; the job cannot go on without that host's
  // tensors, so it is aborted too, naming the host.
  for (const HostReadyTensor& t : request.ready()) {
    for (const TensorMeta& meta : t.ranks()) {
      if (auto r = negotiation::FromMeta(meta, t.name(), job.layout.size()); !r.ok()) {
        const absl::Status bad = absl::InvalidArgumentError(
            absl::StrCat("host ", host, " sent an invalid request: ", r.status().message()));
        done(bad);
        Abort(request.job_id(), absl::InternalError(bad.message()));
        return;
      }
    }
  }
  if (request.has_gpu()) {
    if (absl::Status bad = CheckGpuHost(job, host, request.gpu()); !bad.ok()) return done(bad);
  }
  done(NegotiateResponse());
  if (!request.failure().empty()) {
    Abort(request.job_id(),
          absl::Status(static_cast<absl::StatusCode>(request.failure_code() ? request.failure_code()
                                                                            : 10),
                       request.failure()));
    return;
  }
  Logger("negotiation")->debug("negotiate job={} host={} full={} cached={}", job.layout.job(),
                               host, request.ready_size(), request.cached_ids_size());
  if (request.has_gpu()) AddGpuHost(job, host, request.gpu());
  std::vector<HostReadyTensor> tensors(request.ready().begin(), request.ready().end());
  for (const HostReadyTensor& t : tensors) job.last_full[t.name()][host] = t;
  if (!Expand(request.job_id(), job, request, &tensors)) return;
  std::vector<Response> ready;
  for (const HostReadyTensor& t : tensors) {
    for (const TensorMeta& meta : t.ranks()) {
      auto r = negotiation::FromMeta(meta, t.name(), job.layout.size());
      absl::Status s = r.ok() ? job.table->Submit(*std::move(r), absl::Now(), &ready) : r.status();
      if (!s.ok()) {
        Abort(request.job_id(), absl::InternalError(absl::StrCat(
                                    "host ", host, " sent an invalid request: ", s.message())));
        return;
      }
    }
  }
  if (request.left()) job.left.insert(host);
  if (AbortIfNeedsLeftHost(request.job_id(), job)) return;
  if (!ready.empty()) {
    JobEvent event;
    const std::vector<Response> plan =
        negotiation::PlanFusion(std::move(ready), options_.fusion_threshold_bytes);
    UpdateCache(job, plan, &event);
    for (const Response& r : plan) {
      CollectiveResponse* out = event.add_responses();
      out->set_collective(static_cast<uint32_t>(r.collective));
      out->set_error_code(static_cast<int32_t>(r.error.code()));
      out->set_error(std::string(r.error.message()));
      out->set_join_last_rank(r.join_last_rank);
      for (const auto& t : r.tensors) {
        auto* tensor = out->add_tensors();
        tensor->set_name(t.name);
        for (const auto& rank : t.ranks) {
          if (rank) *tensor->add_ranks() = negotiation::ToMeta(*rank);
        }
      }
    }
    Broadcast(job, event);
  }
  if (static_cast<int>(job.left.size()) == job.layout.hosts_size()) {
    for (auto& [h, sink] : job.sinks) sink->Finish(absl::OkStatus());
    jobs_.erase(it);
  }
}

absl::Status JobCoordinator::CheckGpuHost(const Job& job, const std::string& host,
                                          const GpuHost& gpu) const {
  constexpr int kMaxDevice = 1 << 16;
  if (job.gpu_layout_sent || job.gpu_hosts.count(host) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("host ", host, " already sent its GPUs for job ", job.layout.job()));
  }
  for (const auto& h : job.layout.hosts()) {
    if (h.name() != host) continue;
    if (gpu.rank_devices_size() != h.ranks_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", host, " sent ", gpu.rank_devices_size(), " GPUs for its ",
                       h.ranks_size(), " ranks of job ", job.layout.job()));
    }
  }
  for (int d : gpu.rank_devices()) {
    if (d < 0 || d >= kMaxDevice) {
      return absl::InvalidArgumentError(absl::StrCat("host ", host, " sent GPU ordinal ", d));
    }
  }
  if (!gpu.nccl_unique_id().empty() && gpu.nccl_unique_id().size() != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", host, " sent a ", gpu.nccl_unique_id().size(), "-byte NCCL id, not 128"));
  }
  if (gpu.nccl_version().size() > kMaxNameBytes || gpu.gpu_mode().size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, " sent oversized GPU fields"));
  }
  return absl::OkStatus();
}

void JobCoordinator::AddGpuHost(Job& job, const std::string& host, const GpuHost& gpu) {
  job.gpu_hosts[host] = gpu;
  if (static_cast<int>(job.gpu_hosts.size()) != job.layout.hosts_size()) return;
  JobEvent event;
  for (const auto& h : job.layout.hosts()) {
    *event.mutable_gpu_layout()->add_hosts() = job.gpu_hosts.at(h.name());
  }
  job.gpu_layout_sent = true;
  job.gpu_hosts.clear();
  Logger("negotiation")
      ->info("GPU layout of job={} sent to its {} hosts", job.layout.job(),
             job.layout.hosts_size());
  Broadcast(job, event);
}

bool JobCoordinator::AbortIfNeedsLeftHost(uint64_t job_id, Job& job) {
  if (job.left.empty()) return false;
  std::map<int, std::string> host_of;
  for (const auto& h : job.layout.hosts()) {
    for (int r : h.ranks()) host_of[r] = h.name();
  }
  for (const auto& w : job.table->WaitingLongerThan(absl::Now(), absl::ZeroDuration())) {
    std::vector<std::string> gone;
    for (int r : w.missing) {
      if (job.left.count(host_of[r])) gone.push_back(absl::StrCat(r, " on ", host_of[r]));
    }
    if (gone.empty()) continue;
    Abort(job_id, absl::AbortedError(absl::StrCat(
                      "tensor ", w.name, " of job ", job.layout.job(), " needs ranks ",
                      absl::StrJoin(gone, ", "),
                      ", which ended (their processes exited); it can never complete")));
    return true;
  }
  return false;
}

bool JobCoordinator::Expand(uint64_t job_id, Job& job, const NegotiateRequest& request,
                            std::vector<HostReadyTensor>* tensors) {
  for (uint32_t id : request.cached_ids()) {
    const HostReadyTensor* found = nullptr;
    for (auto* table : {&job.cached, &job.evicted}) {
      auto entry = table->find(id);
      if (found == nullptr && entry != table->end() && entry->second.count(request.host())) {
        found = &entry->second.at(request.host());
      }
    }
    if (found == nullptr) {
      Abort(job_id, absl::InternalError(absl::StrCat("host ", request.host(),
                                                     " named unknown response-cache id ", id)));
      return false;
    }
    tensors->push_back(*found);
  }
  return true;
}

void JobCoordinator::UpdateCache(Job& job, const std::vector<Response>& responses,
                                 JobEvent* event) {
  for (const Response& r : responses) {
    if (!r.error.ok() || r.collective == wire::Collective::kJoin) continue;
    for (const auto& t : r.tensors) {
      const auto& by_host = job.last_full[t.name];
      uint64_t signature = 0;
      for (const auto& [host, payload] : by_host) {
        signature = signature * 1000003 ^ negotiation::Signature(payload);
      }
      if (job.cache->Lookup(t.name, signature)) continue;
      std::vector<uint32_t> evicted;
      const uint32_t id = job.cache->Put(t.name, signature, &evicted);
      for (uint32_t gone : evicted) {
        event->add_cache_evict(gone);
        job.evicted[gone] = std::move(job.cached[gone]);
        job.cached.erase(gone);
        job.evicted_order.push_back(gone);
        if (job.evicted_order.size() > options_.cache_capacity) {
          job.evicted.erase(job.evicted_order.front());
          job.evicted_order.pop_front();
        }
      }
      if (options_.cache_capacity == 0) continue;
      job.cached[id] = by_host;
      CacheEntry* put = event->add_cache_put();
      put->set_id(id);
      put->set_name(t.name);
    }
  }
}

absl::Status JobCoordinator::Watch(uint64_t job_id, const std::string& host,
                                   std::shared_ptr<JobEventSink> sink) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job id ", job_id));
  Job& job = *it->second;
  const bool member = std::any_of(job.layout.hosts().begin(), job.layout.hosts().end(),
                                  [&](const auto& h) { return h.name() == host; });
  if (!member) return absl::PermissionDeniedError(absl::StrCat("host ", host, " not in job"));
  ARD_RETURN_IF_ERROR(CheckMember(host, "WatchJob"));
  // One stream per host: a second one would silently take the events from the first.
  if (job.sinks.count(host)) {
    return absl::AlreadyExistsError(
        absl::StrCat("host ", host, " is already watching job ", job.layout.job()));
  }
  for (const JobEvent& e : job.backlog[host]) sink->Send(e);
  job.backlog.erase(host);
  job.sinks[host] = std::move(sink);
  return absl::OkStatus();
}

void JobCoordinator::Broadcast(Job& job, const JobEvent& event) {
  for (const auto& h : job.layout.hosts()) {
    auto sink = job.sinks.find(h.name());
    if (sink != job.sinks.end()) {
      sink->second->Send(event);
    } else {
      job.backlog[h.name()].push_back(event);
    }
  }
}

void JobCoordinator::Abort(uint64_t job_id, const absl::Status& status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  Logger("negotiation")->warn("cross-host job aborted job={} id={} error=\"{}\"",
                              job.layout.job(), job_id, status.message());
  JobEvent event;
  event.set_abort_code(static_cast<int32_t>(status.code()));
  event.set_abort(std::string(status.message()));
  Broadcast(job, event);
  for (auto& [host, sink] : job.sinks) sink->Finish(absl::OkStatus());
  jobs_.erase(it);
}

std::vector<JobSummary> JobCoordinator::Summaries() {
  std::vector<JobSummary> out;
  std::map<uint64_t, std::string> doomed;  // stall shutdown reports, aborted after the loop
  const absl::Time now = absl::Now();
  for (auto& [id, job] : jobs_) {
    JobSummary s;
    s.set_name(job->layout.job());
    s.set_job_id(id);
    s.set_size(job->layout.size());
    s.set_state("running");
    s.set_age_s(absl::ToDoubleSeconds(now - job->formed));
    std::map<int, std::string> host_of;
    for (const auto& h : job->layout.hosts()) {
      s.add_hosts(h.name());
      auto* hr = s.add_ranks();
      hr->set_host(h.name());
      for (int i = 0; i < h.ranks_size(); ++i) {
        hr->add_ranks(h.ranks(i));
        hr->add_pids(h.pids(i));
        host_of[h.ranks(i)] = h.name();
      }
    }
    s.set_pending_tensors(job->table->pending_tensors());
    std::set<std::string> still;
    for (const auto& w : job->table->WaitingLongerThan(now, options_.stall_warning)) {
      auto* t = s.add_stalled();
      t->set_name(w.name);
      t->set_waiting_s(absl::ToDoubleSeconds(w.waited));
      for (int r : w.submitted) t->add_submitted_ranks(r);
      std::vector<std::string> missing;
      for (int r : w.missing) {
        t->add_missing_ranks(r);
        t->add_missing_hosts(host_of[r]);
        missing.push_back(absl::StrCat(r, " on ", host_of[r]));
      }
      still.insert(w.name);
      if (job->stall_warned.insert(w.name).second) {
        Logger("negotiation")
            ->warn("stalled tensor job={} tensor={} waiting_s={:.1f} missing_ranks=[{}]",
                   job->layout.job(), w.name, absl::ToDoubleSeconds(w.waited),
                   absl::StrJoin(missing, ", "));
      }
    }
    for (auto it = job->stall_warned.begin(); it != job->stall_warned.end();) {
      it = still.count(*it) ? std::next(it) : job->stall_warned.erase(it);
    }
    for (const auto& t : s.stalled()) {
      if (options_.stall_shutdown <= absl::ZeroDuration() ||
          t.waiting_s() < absl::ToDoubleSeconds(options_.stall_shutdown) || doomed.count(id)) {
        continue;
      }
      std::vector<std::string> missing;
      for (int i = 0; i < t.missing_ranks_size(); ++i) {
        missing.push_back(absl::StrCat(t.missing_ranks(i), " on ", t.missing_hosts(i)));
      }
      doomed[id] = absl::StrCat("stall shutdown: tensor ", t.name(), " waited ",
                                absl::StrFormat("%.1fs", t.waiting_s()), " for ranks ",
                                absl::StrJoin(missing, ", "));
    }
    out.push_back(std::move(s));
  }
  for (const auto& [id, report] : doomed) Abort(id, absl::AbortedError(report));
  return out;
}

void JobCoordinator::OnHostDown(const std::string& host, const std::string& reason) {
  std::vector<uint64_t> doomed;
  for (const auto& [id, job] : jobs_) {
    for (const auto& h : job->layout.hosts()) {
      if (h.name() == host && !job->left.count(host)) doomed.push_back(id);
    }
  }
  for (uint64_t id : doomed) {
    Abort(id, absl::UnavailableError(absl::StrCat("host ", host, " is DOWN (", reason, ")")));
  }
  for (auto& [name, f] : forming_) f->hosts.erase(host);
}

}  // namespace ard::cluster

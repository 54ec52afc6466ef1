// JobRegistry's cross-host half: jobs whose ranks live on several daemons. Local ranks register
// here; once all of this host's ranks did, the job is registered with the coordinator, which
// forms it (ranks, hosts); tensors every local rank submitted are forwarded as host-ready, and
// the coordinator's ordered responses are executed by the job's executor over the TCP mesh.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/job_registry.h"
#include "daemon/jobs/local_job.h"
#include "daemon/negotiation/meta_convert.h"

namespace ard::jobs {

using local::Session;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

void JobRegistry::EnableCrossHost(cluster::PeerClient* coordinator, tcp::DataListener* listener,
                                  std::string data_address) {
  coordinator_ = coordinator;
  listener_ = listener;
  data_address_ = std::move(data_address);
}

void JobRegistry::FailCrossHostJobs(const absl::Status& status) {
  for (auto& [name, job] : jobs_) {
    if (job->cross_host && job->state == LocalJob::State::kRunning) {
      FailJob(*job, status, /*tell_coordinator=*/false);
    }
  }
}

LocalJob* JobRegistry::FindJob(const std::string& name, uint32_t local_id) {
  auto it = jobs_.find(name);
  return it != jobs_.end() && it->second->id == local_id ? it->second.get() : nullptr;
}

void JobRegistry::RegisterCrossHost(LocalJob& job) {
  // Local ranks: the launcher's, else arrival order among the rest.
  std::vector<bool> used(job.local_size, false);
  for (const auto& m : job.members) {
    if (m->local_rank >= 0 && m->local_rank < job.local_size) used[m->local_rank] = true;
  }
  int next = 0;
  RegisterRanksRequest request;
  request.set_job(job.name);
  request.set_host(options_.host_name);
  request.set_size(job.size);
  request.set_data_address(data_address_);
  request.set_timeout_ms(absl::ToInt64Milliseconds(options_.form_timeout));
  for (const auto& m : job.members) {
    if (m->local_rank < 0 || m->local_rank >= job.local_size) {
      while (used[next]) ++next;
      m->local_rank = next;
      used[next] = true;
    }
    auto* lr = request.add_ranks();
    lr->set_local_rank(m->local_rank);
    lr->set_rank(m->rank);
    lr->set_pid(m->creds().pid);
  }
  const std::string name = job.name;
  const uint32_t id = job.id;
  coordinator_->RegisterRanksAsync(
      request, options_.form_timeout + options_.rpc_timeout,
      [this, name, id](absl::StatusOr<RegisterRanksResponse> response) {
        loop_.Post([this, name, id, response = std::move(response)]() mutable {
          OnRegistered(name, id, std::move(response));
        });
      });
}

void JobRegistry::OnRegistered(const std::string& name, uint32_t local_id,
                               absl::StatusOr<RegisterRanksResponse> response) {
  LocalJob* job = FindJob(name, local_id);
  if (job == nullptr || job->state != LocalJob::State::kForming ||
      job->connected() != job->local_size) {
    // A local rank left while the coordinator formed the job: the others must not wait for us.
    if (response.ok() && job != nullptr) {
      job->layout = response->layout();
      job->cross_host = true;
      TellCoordinator(*job, absl::AbortedError(absl::StrCat(
                                "a rank of job ", name, " on host ", options_.host_name,
                                " exited while the job formed")),
                      false);
    }
    return;
  }
  if (!response.ok()) {
    for (auto& m : job->members) ReplyError(*m, 0, response.status());
    for (auto& m : job->members) m->job.clear();
    jobs_.erase(name);
    return;
  }
  FormCrossHost(*job, response->layout());
}

void JobRegistry::FormCrossHost(LocalJob& job, const JobLayout& layout) {
  job.layout = layout;
  int me = -1;
  for (int h = 0; h < layout.hosts_size(); ++h) {
    if (layout.hosts(h).name() == options_.host_name) me = h;
  }
  if (me < 0) {
    FailJob(job, absl::InternalError(absl::StrCat("coordinator's layout of job ", job.name,
                                                  " does not include host ", options_.host_name)));
    return;
  }
  auto context = std::make_shared<dataplane::JobContext>();
  context->name = job.name;
  context->id = job.id;
  context->size = job.size;
  context->cross_rank = me;
  context->cross_size = layout.hosts_size();
  context->host_of_rank.assign(job.size, -1);
  context->ranks_of_host.resize(layout.hosts_size());
  std::vector<std::string> addresses;
  for (int h = 0; h < layout.hosts_size(); ++h) {
    addresses.push_back(layout.hosts(h).data_address());
    context->host_names.push_back(layout.hosts(h).name());
    for (int r : layout.hosts(h).ranks()) {
      context->host_of_rank[r] = h;
      context->ranks_of_host[h].push_back(r);
    }
    std::sort(context->ranks_of_host[h].begin(), context->ranks_of_host[h].end());
  }
  std::vector<std::shared_ptr<Session>> by_rank(job.size);
  std::vector<int> mine;
  for (auto& m : job.members) {
    m->rank = layout.hosts(me).ranks(m->local_rank);
    by_rank[m->rank] = m;
    mine.push_back(m->rank);
  }
  job.members = by_rank;
  auto arena = shm::ResultArena::Create(job.name, options_.result_segment_bytes,
                                        options_.max_result_bytes);
  if (!arena.ok()) {
    FailJob(job, arena.status());
    return;
  }
  context->ranks = job.members;
  context->results = *arena;
  const uint64_t job_id = layout.job_id();
  tcp::DataListener* listener = listener_;
  const absl::Duration timeout = options_.form_timeout;
  context->connect_mesh = [job_id, me, addresses, listener, timeout] {
    return tcp::TcpMesh::Connect(job_id, me, addresses, *listener, timeout);
  };
  const std::string name = job.name;
  const uint32_t id = job.id;
  context->report_failure = [this, name, id](absl::Status status) {
    loop_.Post([this, name, id, status] {
      if (LocalJob* j = FindJob(name, id); j != nullptr && j->state != LocalJob::State::kFailed) {
        FailJob(*j, status);
      }
    });
  };
  job.context = context;
  job.table = std::make_unique<negotiation::ReadinessTable>(job.size, mine);
  // Capacity is the coordinator's business: a host only replays its decisions.
  job.cache = std::make_unique<negotiation::ResponseCache>(SIZE_MAX);
  job.executor = std::make_unique<dataplane::Executor>(context);
  job.state = LocalJob::State::kRunning;
  job.cross_host = true;
  WatchJobRequest watch;
  watch.set_job_id(job_id);
  watch.set_host(options_.host_name);
  job.watch = coordinator_->WatchJob(
      watch,
      [this, name, id](const JobEvent& event) {
        loop_.Post([this, name, id, event] { OnJobEvent(name, id, event); });
      },
      [this, name, id](absl::Status status) {
        loop_.Post([this, name, id, status] {
          LocalJob* j = FindJob(name, id);
          if (j == nullptr || j->state == LocalJob::State::kFailed) return;
          if (j->connected() == 0) return;  // we ended it ourselves
          FailJob(*j,
                  absl::UnavailableError(absl::StrCat(
                      "lost the coordinator's stream for job ", name, ": ",
                      status.ok() ? "the coordinator ended the job" : status.message())),
                  false);
        });
      });
  auto segment = (*arena)->segment(0);
  for (auto& m : job.members) {
    if (m == nullptr) continue;
    m->welcomed = true;
    wire::Welcome w{};
    w.rank = m->rank;
    w.size = job.size;
    w.local_rank = m->local_rank;
    w.local_size = job.local_size;
    w.cross_rank = me;
    w.cross_size = layout.hosts_size();
    w.result_segment_bytes = segment->size();
    w.max_tensor_bytes = wire::kMaxTensorBytes;
    w.job_id = job.id;
    m->Send(local::EncodeWelcome(w), segment->readonly_fd());
  }
  Logger("local")->info("cross-host job formed job={} id={} size={} hosts={} cross_rank={}",
                        job.name, job_id, job.size, layout.hosts_size(), me);
}

void JobRegistry::ForwardHostReady(LocalJob& job, std::vector<Response> ready) {
  for (Response& response : ready) {
    for (ReadyTensor& t : response.tensors) {
      HostReadyTensor out;
      out.set_name(t.name);
      for (const auto& r : t.ranks) {
        if (r) *out.add_ranks() = negotiation::ToMeta(*r);
      }
      // Unchanged metadata the coordinator has cached travels as its id.
      const uint64_t signature = negotiation::Signature(out);
      job.forwarded_signature[t.name] = signature;
      if (auto id = job.cache->Lookup(t.name, signature)) {
        job.outgoing_ids.push_back(*id);
      } else {
        job.outgoing.push_back(std::move(out));
      }
      job.awaiting[t.name] = std::move(t);
    }
  }
  ScheduleFlush(job);
}

void JobRegistry::ScheduleFlush(LocalJob& job) {
  if ((job.outgoing.empty() && job.outgoing_ids.empty()) || job.flush_posted) return;
  // Everything that becomes ready in this loop iteration travels in one Negotiate call.
  job.flush_posted = true;
  const std::string name = job.name;
  const uint32_t id = job.id;
  loop_.PostAfter(options_.cycle_time, [this, name, id] { Flush(name, id); });
}

void JobRegistry::ForwardJoin(LocalJob& job, const TensorRequest& join) {
  HostReadyTensor out;
  out.set_name(join.name());
  *out.add_ranks() = negotiation::ToMeta(join);
  job.outgoing.push_back(std::move(out));
  ScheduleFlush(job);
}

void JobRegistry::Flush(const std::string& name, uint32_t local_id) {
  LocalJob* job = FindJob(name, local_id);
  if (job == nullptr) return;
  job->flush_posted = false;
  if ((job->outgoing.empty() && job->outgoing_ids.empty()) ||
      job->state != LocalJob::State::kRunning) {
    return;
  }
  NegotiateRequest request;
  request.set_job_id(job->layout.job_id());
  request.set_host(options_.host_name);
  for (auto& t : job->outgoing) *request.add_ready() = std::move(t);
  for (uint32_t id : job->outgoing_ids) request.add_cached_ids(id);
  job->outgoing.clear();
  job->outgoing_ids.clear();
  coordinator_->NegotiateAsync(request, [this, name, local_id](
                                            absl::StatusOr<NegotiateResponse> r) {
    if (r.ok()) return;
    loop_.Post([this, name, local_id, status = r.status()] {
      LocalJob* j = FindJob(name, local_id);
      if (j != nullptr && j->state == LocalJob::State::kRunning) {
        FailJob(*j, absl::UnavailableError(absl::StrCat("negotiation with the coordinator failed: ",
                                                         status.message())),
                false);
      }
    });
  });
}

void JobRegistry::OnJobEvent(const std::string& name, uint32_t local_id, const JobEvent& event) {
  LocalJob* job = FindJob(name, local_id);
  if (job == nullptr || job->state != LocalJob::State::kRunning) return;
  if (event.abort_code() != 0) {
    FailJob(*job, absl::Status(static_cast<absl::StatusCode>(event.abort_code()), event.abort()),
            false);
    return;
  }
  for (uint32_t id : event.cache_evict()) job->cache->Evict(id);
  for (const CacheEntry& put : event.cache_put()) {
    auto sig = job->forwarded_signature.find(put.name());
    if (sig != job->forwarded_signature.end()) job->cache->Apply(put.id(), put.name(), sig->second);
  }
  if (event.has_gpu_layout()) {
    OnGpuLayout(*job, event.gpu_layout());
    if (job->state != LocalJob::State::kRunning) return;
  }
  for (const CollectiveResponse& cr : event.responses()) {
    Response response;
    response.collective = static_cast<wire::Collective>(cr.collective());
    response.error = absl::Status(static_cast<absl::StatusCode>(cr.error_code()), cr.error());
    response.join_last_rank = cr.join_last_rank();
    if (response.collective == wire::Collective::kJoin) {
      for (const TensorRequest& r : job->table->ResetJoins()) {
        dataplane::Executor::SendComplete(*job->members[r.rank], r, response.error, nullptr,
                                          response.join_last_rank);
      }
      continue;
    }
    for (const auto& t : cr.tensors()) {
      auto local = job->awaiting.find(t.name());
      // A tensor none of this host's ranks submitted (they all joined): this host still takes
      // part in the data plane, contributing the identity.
      const bool ours = std::any_of(t.ranks().begin(), t.ranks().end(), [&](const TensorMeta& m) {
        return m.rank() >= 0 && m.rank() < job->size && job->members[m.rank()] != nullptr;
      });
      if (local == job->awaiting.end() && ours) {
        FailJob(*job, absl::InternalError(absl::StrCat("coordinator answered tensor ", t.name(),
                                                       " that this host never forwarded")));
        return;
      }
      ReadyTensor tensor{t.name(), std::vector<std::optional<TensorRequest>>(job->size)};
      for (const TensorMeta& meta : t.ranks()) {
        auto remote = negotiation::FromMeta(meta, t.name(), job->size);
        if (!remote.ok()) {
          FailJob(*job, remote.status());
          return;
        }
        tensor.ranks[meta.rank()] = *std::move(remote);
      }
      if (local != job->awaiting.end()) {
        for (auto& r : local->second.ranks) {
          if (r) tensor.ranks[r->rank] = std::move(r);  // local entries carry the inputs
        }
        job->awaiting.erase(local);
      }
      response.tensors.push_back(std::move(tensor));
    }
    if (DispatchGpu(*job, response)) continue;
    job->executor->Enqueue(std::move(response));
  }
}

void JobRegistry::TellCoordinator(LocalJob& job, const absl::Status& failure, bool left) {
  if (coordinator_ == nullptr || job.layout.job_id() == 0) return;
  NegotiateRequest request;
  request.set_job_id(job.layout.job_id());
  request.set_host(options_.host_name);
  if (!failure.ok()) {
    request.set_failure(std::string(failure.message()));
    request.set_failure_code(static_cast<int32_t>(failure.code()));
  }
  request.set_left(left);
  coordinator_->NegotiateAsync(request, [](absl::StatusOr<NegotiateResponse>) {});
}

}  // namespace ard::jobs

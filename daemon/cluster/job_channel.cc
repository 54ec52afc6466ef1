#include "daemon/cluster/job_channel.h"

#include "absl/strings/str_cat.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/response_codec.h"

namespace ard::cluster {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

JobChannel::JobChannel(EventLoop& loop, NegotiationClient& coordinator, Options options)
    : loop_(loop), coordinator_(coordinator), options_(std::move(options)) {}

JobChannel::~JobChannel() {
  alive_.reset();
  if (watch_) watch_->Cancel();
}

std::function<void()> JobChannel::Guarded(std::function<void()> task) {
  return [alive = std::weak_ptr<bool>(alive_), task = std::move(task)] {
    if (!alive.expired()) task();
  };
}

void JobChannel::RegisterAsync(const HostRegistration& registration,
                               std::function<void(absl::StatusOr<JobLayout>)> done) {
  RegisterRanksRequest request;
  request.set_job(registration.job);
  request.set_host(options_.host);
  request.set_size(registration.size);
  request.set_elastic_min_np(registration.elastic_min_np);
  request.set_formation(registration.formation);
  request.set_amendment(registration.amendment);
  request.set_data_address(options_.data_address);
  request.set_timeout_ms(absl::ToInt64Milliseconds(options_.form_timeout));
  for (const auto& r : registration.ranks) {
    auto* lr = request.add_ranks();
    lr->set_local_rank(r.local_rank);
    lr->set_rank(r.rank);
    lr->set_pid(r.pid);
  }
  coordinator_.RegisterRanksAsync(
      request, options_.form_timeout + options_.rpc_timeout,
      [this, alive = std::weak_ptr<bool>(alive_),
       done = std::move(done)](absl::StatusOr<RegisterRanksResponse> response) mutable {
        loop_.Post([this, alive, done = std::move(done), response = std::move(response)] {
          if (alive.expired()) return;
          if (!response.ok()) return done(response.status());
          layout_ = response->layout();
          done(layout_);
        });
      });
}

void JobChannel::Watch(JobChannelSink* sink) {
  sink_ = sink;
  WatchJobRequest watch;
  watch.set_job_id(layout_.job_id());
  watch.set_generation(layout_.generation());
  watch.set_host(options_.host);
  watch_ = coordinator_.WatchJob(
      watch,
      [this, alive = std::weak_ptr<bool>(alive_)](const JobEvent& event) {
        loop_.Post([this, alive, event] {
          if (!alive.expired()) OnEvent(event);
        });
      },
      [this, alive = std::weak_ptr<bool>(alive_)](absl::Status status) {
        loop_.Post([this, alive, status] {
          if (alive.expired() || ended_) return;  // we ended it ourselves
          sink_->OnLost(absl::UnavailableError(absl::StrCat(
              "lost the coordinator's stream for job ", layout_.job(), ": ",
              status.ok() ? "the coordinator ended the job" : status.message())));
        });
      });
}

NegotiateRequest JobChannel::NewRequest() const {
  NegotiateRequest request;
  request.set_job_id(layout_.job_id());
  request.set_generation(layout_.generation());
  request.set_host(options_.host);
  return request;
}

void JobChannel::SendReady(const std::vector<ReadyTensor>& tensors) {
  for (const ReadyTensor& t : tensors) {
    HostReadyTensor out;
    out.set_name(t.name);
    for (const auto& r : t.ranks) {
      if (r) *out.add_ranks() = negotiation::ToMeta(*r);
    }
    // Unchanged metadata the coordinator has cached travels as its id.
    const uint64_t signature = negotiation::Signature(out);
    forwarded_signature_[t.name] = signature;
    if (auto id = cache_.Lookup(t.name, signature)) {
      outgoing_ids_.push_back(*id);
    } else {
      outgoing_.push_back(std::move(out));
    }
  }
  ScheduleFlush();
}

void JobChannel::SendJoin(const TensorRequest& join) {
  HostReadyTensor out;
  out.set_name(join.name());
  *out.add_ranks() = negotiation::ToMeta(join);
  outgoing_.push_back(std::move(out));
  ScheduleFlush();
}

void JobChannel::ScheduleFlush() {
  if ((outgoing_.empty() && outgoing_ids_.empty()) || flush_posted_) return;
  // Everything that becomes ready in this loop iteration travels in one Negotiate call.
  flush_posted_ = true;
  loop_.PostAfter(options_.cycle_time, Guarded([this] { Flush(); }));
}

void JobChannel::Flush() {
  flush_posted_ = false;
  if ((outgoing_.empty() && outgoing_ids_.empty()) || ended_) return;
  NegotiateRequest request = NewRequest();
  for (auto& t : outgoing_) *request.add_ready() = std::move(t);
  for (uint32_t id : outgoing_ids_) request.add_cached_ids(id);
  if (options_.metrics != nullptr) {
    options_.metrics->OnNegotiationCycle(layout_.job(), outgoing_ids_.size(), outgoing_.size());
  }
  outgoing_.clear();
  outgoing_ids_.clear();
  coordinator_.NegotiateAsync(request, [this, alive = std::weak_ptr<bool>(alive_)](
                                           absl::StatusOr<NegotiateResponse> r) {
    if (r.ok()) return;
    loop_.Post([this, alive, status = r.status()] {
      if (alive.expired() || ended_) return;
      sink_->OnLost(absl::UnavailableError(
          absl::StrCat("negotiation with the coordinator failed: ", status.message())));
    });
  });
}

void JobChannel::SendGpuHost(const HostGpuOffer& gpus) {
  NegotiateRequest request = NewRequest();
  GpuHost* gpu = request.mutable_gpu();
  for (int d : gpus.rank_devices) gpu->add_rank_devices(d);
  for (const auto& id : gpus.rank_gpu_ids) gpu->add_rank_gpu_ids(id);
  gpu->set_nccl_version(gpus.nccl_version);
  gpu->set_gpu_mode(gpus.gpu_mode);
  gpu->set_nccl_unique_id(gpus.nccl_unique_id);
  coordinator_.NegotiateAsync(request, [this, alive = std::weak_ptr<bool>(alive_)](
                                           absl::StatusOr<NegotiateResponse> r) {
    if (r.ok()) return;
    loop_.Post([this, alive, status = r.status()] {
      if (alive.expired() || ended_) return;
      sink_->OnLost(absl::Status(status.code(),
                                 absl::StrCat("the coordinator refused this host's GPUs: ",
                                              status.message())));
    });
  });
}

void JobChannel::ReportFailure(const absl::Status& failure, const std::string& lost) {
  if (ended_ || layout_.job_id() == 0) return;
  ended_ = true;
  NegotiateRequest request = NewRequest();
  request.set_failure(std::string(failure.message()));
  request.set_lost(lost);
  request.set_failure_code(static_cast<int32_t>(failure.code()));
  coordinator_.NegotiateAsync(request, [](absl::StatusOr<NegotiateResponse>) {});
}

void JobChannel::ReportLeft() {
  if (ended_ || layout_.job_id() == 0) return;
  ended_ = true;
  NegotiateRequest request = NewRequest();
  request.set_left(true);
  coordinator_.NegotiateAsync(request, [](absl::StatusOr<NegotiateResponse>) {});
}

void JobChannel::OnEvent(const JobEvent& event) {
  if (ended_ || sink_ == nullptr) return;
  if (event.generation() != layout_.generation()) return;  // another formation's event
  if (event.abort_code() != 0) {
    ended_ = true;  // the coordinator ended the job: nothing more to tell it
    return sink_->OnAborted(
        absl::Status(static_cast<absl::StatusCode>(event.abort_code()), event.abort()));
  }
  if (event.hosts_updated()) sink_->OnHostsUpdated();
  for (uint32_t id : event.cache_evict()) cache_.Evict(id);
  for (const CacheEntry& put : event.cache_put()) {
    auto sig = forwarded_signature_.find(put.name());
    if (sig != forwarded_signature_.end()) cache_.Apply(put.id(), put.name(), sig->second);
  }
  if (event.has_gpu_layout()) sink_->OnGpuLayout(layout_, event.gpu_layout());
  const int size = layout_.size();
  negotiation::CommittedList list;
  for (uint32_t id : event.cache_evict()) list.cache_evict.push_back(id);
  for (const CacheEntry& put : event.cache_put()) list.cache_put.push_back({put.id(), put.name()});
  for (const CollectiveResponse& cr : event.responses()) {
    if (ended_) return;  // the sink failed the job meanwhile (a join's completion)
    absl::StatusOr<Response> response = negotiation::DecodeResponse(cr, size);
    if (!response.ok()) {
      ReportFailure(response.status());
      return sink_->OnLost(response.status());
    }
    if (response->collective == wire::Collective::kJoin) {
      sink_->OnJoinDone(response->error, response->join_last_rank);
      continue;
    }
    list.responses.push_back(*std::move(response));
  }
  if (ended_) return;  // the sink failed the job meanwhile
  if (event.responses_size() > 0 || event.cache_put_size() > 0 || event.cache_evict_size() > 0) {
    sink_->OnCommitted(std::move(list));
  }
}

}  // namespace ard::cluster

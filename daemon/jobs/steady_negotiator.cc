#include "daemon/jobs/steady_negotiator.h"

#include "daemon/metrics/daemon_metrics.h"

namespace ard::jobs {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

SteadyNegotiator::SteadyNegotiator(EventLoop& loop, const JobOptions& options, std::string job,
                                   std::unique_ptr<Negotiator> central)
    : loop_(loop), options_(options), job_(std::move(job)), central_(std::move(central)) {}

void SteadyNegotiator::FormAsync(const std::vector<MemberInfo>& members,
                                 std::function<void(absl::StatusOr<Formation>)> done) {
  central_->FormAsync(members, [this, done = std::move(done)](absl::StatusOr<Formation> f) {
    if (f.ok()) {
      const dataplane::HostLayout& hosts = f->hosts;
      here_.assign(hosts.size, false);
      for (int r = 0; r < hosts.size && r < static_cast<int>(hosts.host_of_rank.size()); ++r) {
        here_[r] = hosts.host_of_rank[r] == hosts.cross_rank;
      }
    }
    done(std::move(f));
  });
}

void SteadyNegotiator::Start(NegotiationSink* sink) {
  sink_ = sink;
  central_->Start(this);
}

void SteadyNegotiator::HostReady(std::vector<Response> ready) {
  if (steady_ != nullptr) {
    for (Response& response : ready) {
      std::vector<ReadyTensor> central;
      for (ReadyTensor& t : response.tensors) {
        if (!steady_->Offer(t)) central.push_back(std::move(t));  // else held for a round
      }
      response.tensors = std::move(central);
    }
  }
  central_->HostReady(std::move(ready));
}

void SteadyNegotiator::SubmittedPartly(const std::string& name) {
  if (steady_ != nullptr) steady_->SubmittedPartly(name);
}

void SteadyNegotiator::Join(const TensorRequest& join) {
  if (steady_ != nullptr && joins_pending_++ == 0) steady_->SetJoinPending(true);
  central_->Join(join);
}

dataplane::IdleRounds* SteadyNegotiator::StartRounds(dataplane::TcpCollective* tcp) {
  if (tcp == nullptr || tcp->layout().cross_size < 2) return nullptr;
  steady_ = std::make_unique<SteadyState>(
      here_, options_.fusion_threshold_bytes, [tcp] { return tcp->mesh_for_ops(); },
      [this, alive = std::weak_ptr<bool>(alive_)](std::vector<ReadyTensor> central) {
        // Executor thread: a round asked for these centrally.
        auto shared = std::make_shared<std::vector<ReadyTensor>>(std::move(central));
        loop_.Post([this, alive, shared] {
          if (alive.expired()) return;
          std::vector<Response> ready(1);
          ready[0].tensors = std::move(*shared);
          central_->HostReady(std::move(ready));
        });
      },
      options_.steady_round_data_max_bytes,
      PartialWait{options_.steady_round_partial_wait,
                  [metrics = options_.metrics, job = job_](bool ran_out) {
                    if (metrics != nullptr) metrics->OnRoundPartialWait(job, ran_out);
                  }});
  return steady_.get();
}

std::vector<TensorRequest> SteadyNegotiator::TakeUncommitted() {
  std::vector<TensorRequest> out = central_->TakeUncommitted();
  if (steady_ == nullptr) return out;
  const int size = static_cast<int>(here_.size());
  for (ReadyTensor& tensor : steady_->TakeUnrun()) {
    for (auto& r : tensor.ranks) {
      if (r && r->rank >= 0 && r->rank < size && here_[r->rank]) out.push_back(std::move(*r));
    }
  }
  return out;
}

void SteadyNegotiator::OnCommitted(Response response) { sink_->OnCommitted(std::move(response)); }

void SteadyNegotiator::OnCommittedList(negotiation::CommittedList list) {
  // With the rounds, lists run where a round releases them, at the same place on every host.
  if (steady_ != nullptr && steady_->Received(list)) return;
  sink_->OnCommittedList(std::move(list));
}

void SteadyNegotiator::OnJoinDone(const absl::Status& status, int last_rank) {
  if (steady_ != nullptr && joins_pending_ > 0) {
    joins_pending_ = 0;  // the coordinator completes every local join at once
    steady_->SetJoinPending(false);
  }
  sink_->OnJoinDone(status, last_rank);
}

void SteadyNegotiator::OnFailedElsewhere(const absl::Status& status) {
  sink_->OnFailedElsewhere(status);
}

void SteadyNegotiator::OnGpuLayoutArrived() {
  if (steady_ == nullptr) return;
  // The executor holds the GPU data plane until this marker runs: a round releases it at the
  // same place on every host (the layout is one event of the stream every host receives), so no
  // host starts NCCL's cross-host init while another waits in a round.
  negotiation::CommittedList start;
  start.responses.emplace_back().attach_gpu = true;
  OnCommittedList(std::move(start));
}

}  // namespace ard::jobs

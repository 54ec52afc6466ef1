#include "daemon/jobs/coordinated_negotiator.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "daemon/gpu/device.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/negotiation/rank_assignment.h"

namespace ard::jobs {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

CoordinatedNegotiator::CoordinatedNegotiator(EventLoop& loop,
                                             cluster::NegotiationClient& coordinator,
                                             const JobOptions& options, std::string data_address,
                                             std::string job, int size, int local_size,
                                             ElasticSpec elastic)
    : options_(options),
      job_(std::move(job)),
      size_(size),
      local_size_(local_size),
      elastic_(elastic),
      channel_(loop, coordinator,
               cluster::JobChannel::Options{options.host_name, std::move(data_address),
                                            options.form_timeout, options.rpc_timeout,
                                            options.cycle_time, options.metrics}) {}

void CoordinatedNegotiator::FormAsync(const std::vector<MemberInfo>& members,
                                      std::function<void(absl::StatusOr<Formation>)> done) {
  // Local ranks: the launcher's, else arrival order among the rest; an elastic job's follow the
  // members' order (their `rank`), then arrival.
  const bool elastic = elastic_.min_np > 0;
  if (elastic) local_size_ = static_cast<int>(members.size());
  std::vector<negotiation::RankRequest> entries;
  for (size_t i = 0; i < members.size(); ++i) {
    const int l = members[i].local_rank;
    const int requested = elastic ? members[i].rank : l >= 0 && l < local_size_ ? l : -1;
    entries.push_back({requested, static_cast<int64_t>(i)});
  }
  // Elastic: no bound here (the coordinator caps the generation at max_np).
  auto assigned = negotiation::FormationRanks(entries, elastic ? 0 : local_size_, elastic);
  if (!assigned.ok()) return done(assigned.status());
  std::vector<int> local_ranks = *std::move(assigned);
  cluster::HostRegistration registration{job_, elastic_.min_np > 0 ? elastic_.max_np : size_, {}};
  registration.elastic_min_np = elastic_.min_np;
  for (size_t i = 0; i < members.size(); ++i) {
    registration.ranks.push_back({local_ranks[i], members[i].rank, members[i].pid});
  }
  if (elastic) {
    if (formation_ == 0) formation_ = absl::Uniform<uint64_t>(absl::BitGen(), 1, UINT64_MAX);
    registration.formation = formation_;
    registration.amendment = amendments_++;
  }
  form_done_ = std::move(done);  // a registration still held is amended: one answer decides
  channel_.RegisterAsync(registration, [this, amendment = registration.amendment,
                                        local_ranks = std::move(local_ranks)](auto layout) {
    OnRegistered(amendment, local_ranks, std::move(layout));
  });
}

void CoordinatedNegotiator::OnRegistered(uint32_t amendment, const std::vector<int>& local_ranks,
                                         absl::StatusOr<JobLayout> layout) {
  if (!form_done_) return;  // an earlier registration's answer decided
  // Replaced by a later amendment of ours; or an amendment too late: the coordinator formed from
  // an earlier registration, whose answer decides (the members after it join the next generation).
  if (absl::IsAborted(layout.status()) && amendment + 1 < amendments_) return;
  if (absl::IsAlreadyExists(layout.status()) && amendment > 0) return;
  auto done = std::exchange(form_done_, nullptr);
  if (!layout.ok()) return done(layout.status());
  done(FormationOf(*layout, local_ranks));
}

absl::StatusOr<Formation> CoordinatedNegotiator::FormationOf(const JobLayout& layout,
                                                             const std::vector<int>& local_ranks) {
  if (elastic_.min_np > 0) size_ = layout.size();
  int me = -1;
  for (int h = 0; h < layout.hosts_size(); ++h) {
    if (layout.hosts(h).name() == options_.host_name) me = h;
  }
  if (me < 0) {
    return absl::InternalError(absl::StrCat("coordinator's layout of job ", job_,
                                            " does not include host ", options_.host_name));
  }
  cross_rank_ = me;
  const JobLayout::JobHost& mine = layout.hosts(me);
  here_.assign(size_, false);
  for (int r : mine.ranks()) {
    if (r >= 0 && r < size_) here_[r] = true;
  }
  Formation f;
  f.job_id = layout.job_id();
  f.generation = layout.generation();
  f.data_secret = layout.data_secret();
  // Each member's place in the layout's list for this host, found by the local rank it
  // registered with; one not listed was left out (elastic: more than max_np registered).
  for (int l : local_ranks) {
    int index = l;
    if (mine.registered_local_ranks_size() > 0) {
      const auto& listed = mine.registered_local_ranks();
      auto at = std::find(listed.begin(), listed.end(), l);
      index = at == listed.end() ? -1 : static_cast<int>(at - listed.begin());
    }
    if (index >= mine.ranks_size()) {
      return absl::InternalError(absl::StrCat("coordinator's layout of job ", job_, " lists ",
                                              mine.ranks_size(), " ranks for host ",
                                              options_.host_name));
    }
    f.local_ranks.push_back(index);
    f.ranks.push_back(index < 0 ? -1 : mine.ranks(index));
  }
  local_size_ = mine.ranks_size();
  f.local_size = local_size_;
  dataplane::HostLayout& hosts = f.hosts;
  hosts.job = job_;
  hosts.size = size_;
  hosts.cross_rank = me;
  hosts.cross_size = layout.hosts_size();
  hosts.host_of_rank.assign(size_, -1);
  hosts.ranks_of_host.resize(layout.hosts_size());
  for (int h = 0; h < layout.hosts_size(); ++h) {
    f.data_addresses.push_back(layout.hosts(h).data_address());
    hosts.host_names.push_back(layout.hosts(h).name());
    for (int r : layout.hosts(h).ranks()) {
      hosts.host_of_rank[r] = h;
      hosts.ranks_of_host[h].push_back(r);
    }
    std::sort(hosts.ranks_of_host[h].begin(), hosts.ranks_of_host[h].end());
  }
  return f;
}

void CoordinatedNegotiator::Start(NegotiationSink* sink) {
  sink_ = sink;
  channel_.Watch(this);
}

void CoordinatedNegotiator::HostReady(std::vector<Response> ready) {
  std::vector<ReadyTensor> central;
  for (Response& response : ready) {
    for (ReadyTensor& t : response.tensors) central.push_back(std::move(t));
  }
  SendReady(std::move(central));
}

void CoordinatedNegotiator::SendReady(std::vector<ReadyTensor> tensors) {
  if (tensors.empty()) return;
  channel_.SendReady(tensors);  // their metadata; the inputs stay here until committed
  for (ReadyTensor& t : tensors) {
    std::string name = t.name;
    awaiting_[std::move(name)] = std::move(t);
  }
}

void CoordinatedNegotiator::Join(const TensorRequest& join) { channel_.SendJoin(join); }

bool CoordinatedNegotiator::AddInputs(Response& response) {
  for (ReadyTensor& tensor : response.tensors) {
    auto local = awaiting_.find(tensor.name);
    if (local == awaiting_.end()) {
      // A tensor none of this host's ranks submitted (they all joined): this host still takes
      // part in the data plane, contributing the identity. One it should have is a broken
      // invariant of the coordinator's.
      const bool ours = std::any_of(tensor.ranks.begin(), tensor.ranks.end(), [&](const auto& r) {
        return r && r->rank >= 0 && r->rank < size_ && here_[r->rank];
      });
      if (ours) {
        const absl::Status bad = absl::InternalError(absl::StrCat(
            "coordinator answered tensor ", tensor.name, " that this host never forwarded"));
        channel_.ReportFailure(bad);
        sink_->OnFailedElsewhere(bad);
        return false;
      }
      continue;
    }
    for (auto& r : local->second.ranks) {
      if (r) tensor.ranks[r->rank] = std::move(r);  // local entries carry the inputs
    }
    awaiting_.erase(local);
  }
  return true;
}

void CoordinatedNegotiator::OnCommitted(negotiation::CommittedList list) {
  for (Response& response : list.responses) {
    if (!AddInputs(response)) return;
  }
  sink_->OnCommittedList(std::move(list));
}

void CoordinatedNegotiator::OnJoinDone(const absl::Status& status, int last_rank) {
  sink_->OnJoinDone(status, last_rank);
}

void CoordinatedNegotiator::PlanGpusAsync(
    const gpu::HostGpus& host, std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) {
  cluster::HostGpuOffer offer;
  offer.rank_devices = host.rank_devices;
  for (int device : host.rank_devices) {
    offer.rank_gpu_ids.push_back(device < static_cast<int>(options_.gpu_physical_ids.size())
                                     ? options_.gpu_physical_ids[device]
                                     : "");
  }
  offer.nccl_version = options_.gpu_device->NcclVersion();
  offer.gpu_mode = options_.gpu_mode;
  if (cross_rank_ == 0) {  // the only offer (see gpu::PlanFromLayout)
    auto unique_id = options_.gpu_device->NewUniqueId();
    if (!unique_id.ok()) return done(unique_id.status());
    offer.nccl_unique_id.assign(reinterpret_cast<const char*>(unique_id->data()),
                                unique_id->size());
  }
  gpu_done_ = std::move(done);
  channel_.SendGpuHost(offer);
}

void CoordinatedNegotiator::OnGpuLayout(const JobLayout& layout, const GpuLayout& gpus) {
  auto done = std::move(gpu_done_);
  gpu_done_ = nullptr;
  if (!done) {
    const absl::Status bad = absl::InternalError(absl::StrCat(
        "GPU layout of job ", job_, " arrived before this host's ranks registered their GPUs"));
    channel_.ReportFailure(bad);
    return sink_->OnFailedElsewhere(bad);
  }
  auto plan = gpu::PlanFromLayout(layout, gpus, cross_rank_);
  if (plan.ok() && !plan->id) {  // hierarchical, not cross rank 0: this host's GPUs only
    auto own = options_.gpu_device->NewUniqueId();
    if (own.ok()) plan->id = *own;
    if (!own.ok()) plan = own.status();
  }
  const std::weak_ptr<bool> alive = alive_;
  done(std::move(plan));
  if (!alive.expired()) sink_->OnGpuLayoutArrived();
}

void CoordinatedNegotiator::OnAborted(const absl::Status& status) {
  sink_->OnFailedElsewhere(status);
}

void CoordinatedNegotiator::OnLost(const absl::Status& status) {
  if (gpu_done_) {  // the coordinator refused this host's GPUs: the GPU registrations hear it
    auto done = std::move(gpu_done_);
    gpu_done_ = nullptr;
    return done(status);
  }
  sink_->OnFailedElsewhere(status);
}

std::vector<TensorRequest> CoordinatedNegotiator::TakeUncommitted() {
  std::vector<TensorRequest> out;
  for (auto& [name, tensor] : awaiting_) {
    for (auto& r : tensor.ranks) {
      if (r) out.push_back(std::move(*r));
    }
  }
  awaiting_.clear();
  return out;
}

}  // namespace ard::jobs

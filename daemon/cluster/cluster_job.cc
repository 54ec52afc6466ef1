#include "daemon/cluster/cluster_job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/negotiation/fusion_planner.h"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/response_codec.h"

namespace ard::cluster {

using negotiation::ReadyTensor;
using negotiation::Response;

ClusterJob::ClusterJob(JobLayout layout, uint64_t fusion_threshold_bytes, size_t cache_capacity,
                       absl::Time formed)
    : layout_(std::move(layout)),
      fusion_threshold_bytes_(fusion_threshold_bytes),
      formed_(formed),
      table_(layout_.size()),
      cache_(cache_capacity) {
  for (const auto& h : layout_.hosts()) {
    for (int r : h.ranks()) host_of_[r] = h.name();
  }
}

bool ClusterJob::HasHost(const std::string& host) const {
  return std::any_of(layout_.hosts().begin(), layout_.hosts().end(),
                     [&](const auto& h) { return h.name() == host; });
}

absl::Status ClusterJob::Watch(const std::string& host, std::shared_ptr<JobEventSink> sink) {
  // One stream per host: a second one would silently take the events from the first.
  if (sinks_.count(host)) {
    return absl::AlreadyExistsError(
        absl::StrCat("host ", host, " is already watching job ", layout_.job()));
  }
  for (const JobEvent& e : backlog_[host]) sink->Send(e);
  backlog_.erase(host);
  sinks_[host] = std::move(sink);
  return absl::OkStatus();
}

bool ClusterJob::WatchedBy(const std::string& host, const JobEventSink* sink) const {
  auto it = sinks_.find(host);
  return it != sinks_.end() && it->second.get() == sink;
}

ClusterJob::Outcome ClusterJob::Negotiate(const NegotiateRequest& request, absl::Time now) {
  const std::string& host = request.host();
  // Malformed metadata is refused to the caller; the job cannot go on without that host's
  // tensors, so it is aborted too, naming the host.
  for (const HostReadyTensor& t : request.ready()) {
    for (const TensorMeta& meta : t.ranks()) {
      if (auto r = negotiation::FromMeta(meta, t.name(), layout_.size()); !r.ok()) {
        const std::string bad =
            absl::StrCat("host ", host, " sent an invalid request: ", r.status().message());
        return {absl::InvalidArgumentError(bad), absl::InternalError(bad)};
      }
    }
  }
  if (request.has_gpu()) {
    if (absl::Status bad = CheckGpuHost(host, request.gpu()); !bad.ok()) return {bad, {}};
  }
  if (!request.failure().empty()) {
    const int code = request.failure_code() != 0 ? request.failure_code()
                                                 : static_cast<int>(absl::StatusCode::kAborted);
    return {absl::OkStatus(), absl::Status(static_cast<absl::StatusCode>(code), request.failure())};
  }
  Logger("negotiation")
      ->debug("negotiate job={} host={} full={} cached={}", layout_.job(), host,
              request.ready_size(), request.cached_ids_size());
  if (request.has_gpu()) AddGpuHost(host, request.gpu());
  std::vector<HostReadyTensor> tensors(request.ready().begin(), request.ready().end());
  for (const HostReadyTensor& t : tensors) cache_.RecordFull(host, t);
  if (absl::Status s = cache_.Expand(host, request.cached_ids(), &tensors); !s.ok()) {
    return {absl::OkStatus(), s};
  }
  std::vector<Response> ready;
  for (const HostReadyTensor& t : tensors) {
    for (const TensorMeta& meta : t.ranks()) {
      auto r = negotiation::FromMeta(meta, t.name(), layout_.size());
      absl::Status s = r.ok() ? table_.Submit(*std::move(r), now, &ready) : r.status();
      if (!s.ok()) {
        return {absl::OkStatus(), absl::InternalError(absl::StrCat(
                                      "host ", host, " sent an invalid request: ", s.message()))};
      }
    }
  }
  if (request.left()) left_.insert(host);
  if (absl::Status gone = NeedsLeftHost(now); !gone.ok()) return {absl::OkStatus(), gone};
  if (!ready.empty()) Respond(std::move(ready));
  return {absl::OkStatus(), absl::OkStatus()};
}

namespace {

constexpr size_t kMaxEventBytes = 1 << 20;

// About the bytes `t` adds to a JobEvent: its encoding, and a cache put (the name again) and
// evict.
size_t EventBytes(const ReadyTensor& t) {
  CollectiveResponse::Tensor encoded;
  negotiation::EncodeTensor(t, &encoded);
  return encoded.ByteSizeLong() + t.name.size() + 16;
}

// Splits a large fused response into runs of its tensors of about kMaxEventBytes each; errors,
// joins and groups (atomic) stay whole.
void SplitLarge(Response r, std::vector<std::pair<Response, size_t>>* out) {
  size_t total = 0;
  bool group = false;
  for (const ReadyTensor& t : r.tensors) {
    total += EventBytes(t);
    group = group || t.first().meta.group_id >= 0;
  }
  if (total <= kMaxEventBytes || r.tensors.size() < 2 || group || !r.error.ok() ||
      r.collective == wire::Collective::kJoin) {
    out->emplace_back(std::move(r), total);
    return;
  }
  Response piece;
  size_t bytes = 0;
  for (ReadyTensor& t : r.tensors) {
    const size_t b = EventBytes(t);
    if (!piece.tensors.empty() && bytes + b > kMaxEventBytes) {
      out->emplace_back(std::move(piece), bytes);
      piece = Response();
      bytes = 0;
    }
    piece.collective = r.collective;
    piece.join_last_rank = r.join_last_rank;
    piece.tensors.push_back(std::move(t));
    bytes += b;
  }
  out->emplace_back(std::move(piece), bytes);
}

}  // namespace

void ClusterJob::Respond(std::vector<Response> ready) {
  std::vector<std::pair<Response, size_t>> pieces;
  for (Response& r : negotiation::PlanFusion(std::move(ready), fusion_threshold_bytes_)) {
    SplitLarge(std::move(r), &pieces);
  }
  // Consecutive events in order: every host receives (and numbers) them the same way.
  std::vector<Response> batch;
  size_t bytes = 0;
  auto flush = [&] {
    JobEvent event;
    cache_.Update(batch, &event);
    for (const Response& r : batch) AddResponse(r, &event);
    Broadcast(std::move(event));
    batch.clear();
    bytes = 0;
  };
  for (auto& [r, b] : pieces) {
    if (!batch.empty() && bytes + b > kMaxEventBytes) flush();
    batch.push_back(std::move(r));
    bytes += b;
  }
  if (!batch.empty()) flush();
}

void ClusterJob::AddResponse(const Response& r, JobEvent* event) {
  CollectiveResponse* out = event->add_responses();
  out->set_collective(static_cast<uint32_t>(r.collective));
  out->set_error_code(static_cast<int32_t>(r.error.code()));
  out->set_error(std::string(r.error.message()));
  out->set_join_last_rank(r.join_last_rank);
  for (const auto& t : r.tensors) {
    if (r.error.ok() && r.collective != wire::Collective::kJoin) {
      ++committed_tensors_;
      committed_bytes_ += t.first().meta.bytes;
    }
    negotiation::EncodeTensor(t, out->add_tensors());
  }
}

absl::Status ClusterJob::CheckGpuHost(const std::string& host, const GpuHost& gpu) const {
  constexpr int kMaxDevice = 1 << 16;
  constexpr size_t kMaxNameBytes = 256;
  if (gpu_layout_sent_ || gpu_hosts_.count(host) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("host ", host, " already sent its GPUs for job ", layout_.job()));
  }
  for (const auto& h : layout_.hosts()) {
    if (h.name() != host) continue;
    if (gpu.rank_devices_size() != h.ranks_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", host, " sent ", gpu.rank_devices_size(), " GPUs for its ",
                       h.ranks_size(), " ranks of job ", layout_.job()));
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

void ClusterJob::AddGpuHost(const std::string& host, const GpuHost& gpu) {
  gpu_hosts_[host] = gpu;
  if (static_cast<int>(gpu_hosts_.size()) != layout_.hosts_size()) return;
  JobEvent event;
  for (const auto& h : layout_.hosts()) {
    *event.mutable_gpu_layout()->add_hosts() = gpu_hosts_.at(h.name());
  }
  gpu_layout_sent_ = true;
  gpu_hosts_.clear();
  Logger("negotiation")
      ->info("GPU layout of job={} sent to its {} hosts", layout_.job(), layout_.hosts_size());
  Broadcast(std::move(event));
}

absl::Status ClusterJob::NeedsLeftHost(absl::Time now) const {
  if (left_.empty()) return absl::OkStatus();
  for (const auto& w : table_.WaitingLongerThan(now, absl::ZeroDuration())) {
    std::vector<std::string> gone;
    for (int r : w.missing) {
      const std::string& host = host_of_.at(r);
      if (left_.count(host)) gone.push_back(absl::StrCat(r, " on ", host));
    }
    if (gone.empty()) continue;
    return absl::AbortedError(absl::StrCat(
        "tensor ", w.name, " of job ", layout_.job(), " needs ranks ", absl::StrJoin(gone, ", "),
        ", which ended (their processes exited); it can never complete"));
  }
  return absl::OkStatus();
}

void ClusterJob::Broadcast(JobEvent event) {
  event.set_job_id(id());
  event.set_generation(generation());
  for (const auto& h : layout_.hosts()) {
    auto sink = sinks_.find(h.name());
    if (sink != sinks_.end()) {
      sink->second->Send(event);
    } else {
      backlog_[h.name()].push_back(event);
    }
  }
}

bool ClusterJob::AnnounceHostsUpdated() {
  if (hosts_updated_sent_) return false;
  hosts_updated_sent_ = true;
  JobEvent event;
  event.set_hosts_updated(true);
  Broadcast(std::move(event));
  return true;
}

void ClusterJob::Abort(const absl::Status& status) {
  JobEvent event;
  event.set_abort_code(static_cast<int32_t>(status.code()));
  event.set_abort(std::string(status.message()));
  Broadcast(std::move(event));
  Finish(absl::OkStatus());
}

void ClusterJob::Finish(const absl::Status& status) {
  for (auto& [host, sink] : sinks_) sink->Finish(status);
  sinks_.clear();
}

negotiation::MissingRank ClusterJob::Describe(int rank) const {
  return {host_of_.at(rank), 0, std::nullopt};
}

JobSummary ClusterJob::Summary(absl::Time now, absl::Duration stall_warning) const {
  JobSummary s;
  s.set_name(layout_.job());
  s.set_job_id(id());
  s.set_size(layout_.size());
  s.set_state("running");
  s.set_generation(generation());
  s.set_age_s(absl::ToDoubleSeconds(now - formed_));
  // What the job committed (each host executes every one; they report their own counts too).
  s.set_collectives_completed(committed_tensors_);
  s.set_bytes_reduced(committed_bytes_);
  for (const auto& h : layout_.hosts()) {
    s.add_hosts(h.name());
    auto* hr = s.add_ranks();
    hr->set_host(h.name());
    for (int i = 0; i < h.ranks_size(); ++i) {
      hr->add_ranks(h.ranks(i));
      hr->add_pids(h.pids(i));
    }
  }
  s.set_pending_tensors(table_.pending_tensors());
  for (auto& t : negotiation::StallInspector::Describe(table_.WaitingLongerThan(now, stall_warning),
                                                       now, stall_warning,
                                                       [this](int r) { return Describe(r); })) {
    *s.add_stalled() = std::move(t);
  }
  return s;
}

std::optional<std::string> ClusterJob::InspectStalls(
    absl::Time now, const negotiation::StallThresholds& thresholds) {
  return stalls_
      .Inspect(layout_.job(), table_.WaitingLongerThan(now, thresholds.warning), now, thresholds,
               [this](int r) { return Describe(r); })
      .shutdown;
}

}  // namespace ard::cluster

#include "daemon/cluster/membership_table.h"

#include <algorithm>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/host_name.h"

namespace ard::cluster {
namespace {

// Folds host `from`'s report of a cross-host job into `into`.
void MergeJob(JobSummary* into, const JobSummary& from) {
  std::set<std::string> hosts(into->hosts().begin(), into->hosts().end());
  for (const auto& h : from.hosts()) {
    if (hosts.insert(h).second) into->add_hosts(h);
  }
  std::map<std::string, JobSummary::HostRanks*> placed;
  for (auto& hr : *into->mutable_ranks()) placed[hr.host()] = &hr;
  for (const auto& hr : from.ranks()) {
    auto it = placed.find(hr.host());
    if (it == placed.end()) {
      *into->add_ranks() = hr;
    } else if (it->second->gpu_devices().empty()) {
      // Only the host itself knows its ranks' GPUs (the coordinator's report has none).
      *it->second->mutable_gpu_devices() = hr.gpu_devices();
    }
  }
  std::sort(into->mutable_hosts()->begin(), into->mutable_hosts()->end());
  std::sort(into->mutable_ranks()->begin(), into->mutable_ranks()->end(),
            [](const auto& a, const auto& b) { return a.host() < b.host(); });
  into->set_collectives_completed(std::max(into->collectives_completed(),
                                           from.collectives_completed()));
  into->set_bytes_reduced(std::max(into->bytes_reduced(), from.bytes_reduced()));
  into->set_generation(std::max(into->generation(), from.generation()));
  into->set_pending_tensors(std::max(into->pending_tensors(), from.pending_tensors()));
  into->set_age_s(std::max(into->age_s(), from.age_s()));
  if (into->gpu_plan().empty()) into->set_gpu_plan(from.gpu_plan());
  if (into->elastic_changes().empty() && !from.elastic_changes().empty()) {
    // Only the coordinator's report has an elastic job's bounds and changes.
    into->set_elastic_min_np(from.elastic_min_np());
    into->set_elastic_max_np(from.elastic_max_np());
    *into->mutable_elastic_changes() = from.elastic_changes();
  }
  if (from.state() == "failed" || into->state().empty()) {
    into->set_state(from.state());
    into->set_failure(from.failure());
  }
  // The same stalled tensor seen by several hosts: a rank is missing only if no report has it
  // submitted (a host forwards a tensor to the coordinator only once all its ranks submitted).
  for (const auto& t : from.stalled()) {
    JobSummary::StalledTensor* same = nullptr;
    for (auto& mine : *into->mutable_stalled()) {
      if (mine.name() == t.name()) same = &mine;
    }
    if (same == nullptr) {
      *into->add_stalled() = t;
      continue;
    }
    std::set<int> submitted(same->submitted_ranks().begin(), same->submitted_ranks().end());
    submitted.insert(t.submitted_ranks().begin(), t.submitted_ranks().end());
    JobSummary::StalledTensor both = *same;
    both.set_waiting_s(std::max(same->waiting_s(), t.waiting_s()));
    both.clear_submitted_ranks();
    both.clear_missing_ranks();
    both.clear_missing_hosts();
    both.clear_missing_last_activity_s();
    for (int r : submitted) both.add_submitted_ranks(r);
    for (const JobSummary::StalledTensor* report :
         std::initializer_list<const JobSummary::StalledTensor*>{same, &t}) {
      for (int i = 0; i < report->missing_ranks_size(); ++i) {
        const int r = report->missing_ranks(i);
        if (submitted.count(r) || std::count(both.missing_ranks().begin(),
                                             both.missing_ranks().end(), r)) {
          continue;
        }
        both.add_missing_ranks(r);
        if (i < report->missing_hosts_size()) both.add_missing_hosts(report->missing_hosts(i));
        if (i < report->missing_last_activity_s_size()) {
          both.add_missing_last_activity_s(report->missing_last_activity_s(i));
        }
      }
    }
    *same = std::move(both);
  }
}

}  // namespace

absl::Status NameHeldError(const HostInfo& holder, const char* holder_role,
                           const HostInfo& claimant) {
  return absl::AlreadyExistsError(absl::StrCat(
      "host name '", holder.name(), "' is held by the live ", holder_role, " at ", holder.address(),
      " (instance ", holder.instance_id(), ", pid ", holder.pid(), "); refused the daemon at ",
      claimant.address(), " (instance ", claimant.instance_id(), ", pid ", claimant.pid(),
      "): give each daemon its own host_name"));
}

MembershipTable::MembershipTable(const HostInfo& self, absl::Duration host_timeout,
                                 absl::Time now)
    : self_name_(self.name()), host_timeout_(host_timeout) {
  Entry& e = hosts_[self.name()];
  e.info = self;
  e.incarnation = 1;
  e.joined = now;
  e.last_heartbeat = now;
}

bool MembershipTable::IsUp(const std::string& name) const {
  auto it = hosts_.find(name);
  return it != hosts_.end() && it->second.state == UP;
}

std::optional<HostInfo> MembershipTable::OtherLiveHolder(const HostInfo& host) const {
  auto it = hosts_.find(host.name());
  if (it == hosts_.end() || it->first == self_name_ || it->second.state != UP ||
      it->second.info.instance_id() == host.instance_id()) {
    return std::nullopt;
  }
  return it->second.info;
}

absl::StatusOr<uint32_t> MembershipTable::Join(const HostInfo& host, absl::Time now) {
  if (!ValidHostName(host.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join with invalid host name '", absl::CHexEscape(host.name().substr(0, 64)),
        "' (1-64 of letters, digits, '-', '_', '.')"));
  }
  if (host.address().empty() || host.address().size() > 300 || host.instance_id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Join from host '", host.name(), "' without an address or instance id"));
  }
  auto it = hosts_.find(host.name());
  if (host.name() == self_name_ && host.instance_id() != it->second.info.instance_id()) {
    return NameHeldError(it->second.info, "coordinator", host);
  }
  if (it != hosts_.end() && it->second.state == UP &&
      it->second.info.instance_id() == host.instance_id()) {
    // A retried Join of the same process: same incarnation, no epoch change.
    it->second.info = host;
    it->second.last_heartbeat = now;
    return it->second.incarnation;
  }
  Entry& e = hosts_[host.name()];  // new, DOWN, or a new process taking over the name
  e.info = host;
  e.state = UP;
  e.incarnation += 1;
  e.joined = now;
  e.last_heartbeat = now;
  e.down_reason.clear();
  ++epoch_;
  return e.incarnation;
}

HeartbeatResponse::Verdict MembershipTable::Heartbeat(const HeartbeatRequest& request,
                                                      absl::Time now, std::string* detail) {
  auto it = hosts_.find(request.host_name());
  if (it == hosts_.end()) {
    *detail = "not a member (the coordinator may have restarted)";
    return HeartbeatResponse::REJOIN;
  }
  Entry& e = it->second;
  if (e.info.instance_id() != request.instance_id()) {
    *detail = absl::StrCat("host name '", request.host_name(), "' was taken by the daemon at ",
                           e.info.address(), " (pid ", e.info.pid(), ")");
    return HeartbeatResponse::SUPERSEDED;
  }
  if (e.state != UP || e.incarnation != request.incarnation()) {
    *detail = e.state != UP ? absl::StrCat("marked DOWN: ", e.down_reason)
                            : absl::StrCat("stale incarnation ", request.incarnation());
    return HeartbeatResponse::REJOIN;
  }
  e.last_heartbeat = now;
  e.jobs.assign(request.jobs().begin(), request.jobs().end());
  return HeartbeatResponse::OK;
}

void MembershipTable::Leave(const LeaveRequest& request, absl::Time now) {
  auto it = hosts_.find(request.host_name());
  if (it == hosts_.end() || request.host_name() == self_name_) return;
  Entry& e = it->second;
  if (e.state != UP || e.incarnation != request.incarnation() ||
      e.info.instance_id() != request.instance_id()) {
    return;
  }
  e.state = DOWN;
  e.down_reason = "left the cluster";
  e.jobs.clear();
  ++epoch_;
}

absl::Status MembershipTable::Forget(const std::string& name, absl::Time now) {
  auto it = hosts_.find(name);
  if (it == hosts_.end()) {
    return absl::NotFoundError(absl::StrCat("no host named ", name, " in the cluster view"));
  }
  if (name == self_name_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is the coordinator; it cannot be forgotten"));
  }
  if (it->second.state == UP) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host ", name, " is UP (last heartbeat ",
        absl::StrFormat("%.1f", absl::ToDoubleSeconds(now - it->second.last_heartbeat)),
        "s ago); only a DOWN host can be forgotten: stop its daemon first"));
  }
  hosts_.erase(it);
  ++epoch_;
  return absl::OkStatus();
}

std::vector<std::string> MembershipTable::Sweep(absl::Time now) {
  std::vector<std::string> down;
  for (auto& [name, e] : hosts_) {
    if (name == self_name_ || e.state != UP) continue;
    if (now - e.last_heartbeat > host_timeout_) {
      e.state = DOWN;
      e.jobs.clear();
      e.down_reason = absl::StrCat("missed heartbeats for ",
                                   absl::ToInt64Milliseconds(now - e.last_heartbeat), " ms");
      down.push_back(name);
    }
  }
  if (!down.empty()) ++epoch_;
  return down;
}

ClusterView MembershipTable::View(absl::Time now, const std::vector<JobSummary>& own_jobs) const {
  ClusterView view;
  std::vector<JobSummary> jobs = own_jobs;
  for (const auto& [name, e] : hosts_) {
    if (name != self_name_ && e.state == UP) jobs.insert(jobs.end(), e.jobs.begin(), e.jobs.end());
  }
  // A cross-host job is reported by each of its hosts (and by the coordinator's negotiation):
  // merge the reports into one entry per job id.
  std::vector<JobSummary> merged;
  std::map<uint64_t, size_t> by_id;
  for (auto& j : jobs) {
    auto it = j.job_id() == 0 ? by_id.end() : by_id.find(j.job_id());
    if (it == by_id.end()) {
      if (j.job_id() != 0) by_id[j.job_id()] = merged.size();
      merged.push_back(std::move(j));
      continue;
    }
    MergeJob(&merged[it->second], j);
  }
  std::sort(merged.begin(), merged.end(), [](const JobSummary& a, const JobSummary& b) {
    return std::make_pair(a.name(), a.hosts_size() ? a.hosts(0) : "") <
           std::make_pair(b.name(), b.hosts_size() ? b.hosts(0) : "");
  });
  for (auto& j : merged) *view.add_jobs() = std::move(j);
  view.set_membership_epoch(epoch_);
  for (const auto& [name, e] : hosts_) {
    Host* h = view.add_hosts();
    h->set_name(e.info.name());
    h->set_address(e.info.address());
    h->set_version(e.info.version());
    *h->mutable_gpus() = e.info.gpus();
    h->set_nccl_version(e.info.nccl_version());
    h->set_cuda_runtime_version(e.info.cuda_runtime_version());
    h->set_pid(e.info.pid());
    h->set_local_socket(e.info.local_socket());
    h->set_data_plane_security(e.info.data_plane_security());
    h->set_state(e.state);
    h->set_incarnation(e.incarnation);
    h->set_coordinator(name == self_name_);
    h->set_joined_unix_ms(absl::ToUnixMillis(e.joined));
    h->set_down_reason(e.down_reason);
    const absl::Time seen = name == self_name_ ? now : e.last_heartbeat;
    h->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - seen));
    if (e.state == UP) {
      h->set_uptime_s(absl::ToDoubleSeconds(now - absl::FromUnixMillis(e.info.start_time_unix_ms())));
    }
    if (name == self_name_) {
      view.set_coordinator(name);
      view.set_coordinator_address(e.info.address());
    }
  }
  return view;
}

}  // namespace ard::cluster

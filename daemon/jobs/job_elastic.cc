// Job: its elastic succession (DESIGN.md "Elastic training"), applying ElasticGeneration's
// answers to the job's sessions.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/job.h"

namespace ard::jobs {

using local::Session;

std::vector<uint32_t> Job::MemberPids(bool attached_only) const {
  std::vector<uint32_t> out;
  for (const auto& m : members_) {
    if (m != nullptr && (!attached_only || !m->closed())) {
      out.push_back(static_cast<uint32_t>(m->creds().pid));
    }
  }
  return out;
}

void Job::MakeElastic(ElasticSpec spec, uint64_t previous_generation, Rejoin rejoin) {
  succession_ = ElasticGeneration(spec);
  lifecycle_ = JobLifecycle(previous_generation);
  rejoin_ = std::move(rejoin);
}

void Job::MaybeFormElastic(const Predecessors& before) {
  if (state() != JobState::kForming) return;
  if (formation_in_flight_) {
    // Processes joined while the coordinator holds this generation's registration: amending it
    // lets them in (forming a generation of their own would strand both halves below min_np).
    if (amends_formation() && members_.size() > registered_) Form();
    return;
  }
  if (!succession_.FormsNow(MemberPids(false), lifecycle_.generation(), before, absl::Now())) {
    return;
  }
  local_size_ = static_cast<int>(members_.size());
  if (!succession_.spec().coordinated) size_ = local_size_;
  Form();
}

std::set<uint32_t> Job::ReturningPids() const { return succession_.Returning(MemberPids(true)); }

void Job::HostsUpdated() {
  if (!succession_.HostsUpdated(state())) return;
  Logger("local")->info("elastic job has ranks waiting to join job={} id={} generation={}", name_,
                        id_, lifecycle_.generation());
  const std::string notify = local::EncodeError(wire::MsgType::kNotify, 0, 0, wire::kHostsUpdated);
  for (const auto& m : members_) {
    if (m != nullptr) m->Send(notify);
  }
}

absl::Status Job::CheckRoom(pid_t pid) const {
  if (succession_.HasRoom(state(), size_, static_cast<uint32_t>(pid), MemberPids(false))) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "elastic job ", name_, " runs ", size_, " ranks, its max_np: process ", pid, " on host ",
      env_.options.host_name, " cannot join it; start it again once a rank has left"));
}

void Job::AdoptFormation(Formation& formation) {
  if (!elastic()) return;
  // This generation's size, as the negotiator numbered it.
  size_ = formation.hosts.size;
  local_size_ = formation.local_size;
  // The coordinator's generation: this host may not have run the earlier ones (a new host).
  if (formation.generation > 0) lifecycle_ = JobLifecycle(formation.generation - 1);
  std::vector<std::shared_ptr<Session>> kept;
  std::vector<int> ranks;
  std::vector<int> local_ranks;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (formation.ranks[i] >= 0) {
      kept.push_back(members_[i]);
      ranks.push_back(formation.ranks[i]);
      local_ranks.push_back(formation.local_ranks[i]);
      continue;
    }
    const absl::Status refused = absl::ResourceExhaustedError(absl::StrCat(
        "elastic job ", name_, " generation ", lifecycle_.generation() + 1, " formed with ",
        formation.hosts.size, " ranks, its max_np ", succession_.spec().max_np, ": process ",
        members_[i]->creds().pid, " on host ", env_.options.host_name,
        " comes after them in rank order and is not in it; start it again once a rank has left"));
    Logger("local")->warn("{}", refused.message());
    members_[i]->Reject(0, refused);
    members_[i]->job.clear();
    members_[i]->rank = -1;
  }
  members_ = std::move(kept);
  formation.ranks = std::move(ranks);
  formation.local_ranks = std::move(local_ranks);
}

absl::Status Job::FormTimeoutStatus() const {
  if (elastic()) {
    return absl::DeadlineExceededError(
        absl::StrCat("elastic job ", name_, " generation ", lifecycle_.generation() + 1,
                     " did not form within ", absl::FormatDuration(env_.options.form_timeout), ": ",
                     members_.size(), " rank(s) registered on host ", env_.options.host_name,
                     ", fewer than min_np ", succession_.spec().min_np,
                     succession_.spec().coordinated ? " in the cluster" : "", "; the job stops"));
  }
  std::vector<int> have;
  for (const auto& m : members_) {
    if (m->rank >= 0) have.push_back(m->rank);
  }
  std::sort(have.begin(), have.end());
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", name_, " did not form within ", FormatDurationShort(env_.options.form_timeout), ": ",
      members_.size(), " of ", local_size_ < size_ ? local_size_ : size_, " ranks registered",
      have.empty() ? "" : absl::StrCat(" (ranks ", absl::StrJoin(have, ", "), ")"),
      "; check ALLREDUCED_JOB / the launcher's rank and size variables"));
}

}  // namespace ard::jobs

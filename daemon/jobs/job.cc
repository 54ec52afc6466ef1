// Job: membership, formation, failure and end (the lifecycle's transitions).
#include "daemon/jobs/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/local_collective.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/local/rank_sessions.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/shm/result_arena.h"
#include "daemon/timeline/hub.h"

namespace ard::jobs {

using dataplane::Executor;
using local::Session;
using negotiation::TensorRequest;

Job::Job(JobEnvironment env, uint32_t id, std::string name, int size, int local_size, uid_t uid,
         std::unique_ptr<Negotiator> negotiator, std::function<void()> on_finished)
    : env_(env),
      id_(id),
      name_(std::move(name)),
      size_(size),
      local_size_(local_size),
      uid_(uid),
      created_(absl::Now()),
      negotiator_(std::move(negotiator)),
      on_finished_(std::move(on_finished)),
      road_(env_.options.timeline != nullptr ? env_.options.timeline->ForJob(name_) : nullptr) {}

Job::~Job() {
  alive_.reset();
  if (executor_ != nullptr) executor_->Stop();
}

std::function<void()> Job::Guarded(std::function<void()> task) {
  return [alive = std::weak_ptr<bool>(alive_), task = std::move(task)] {
    if (!alive.expired()) task();
  };
}

int Job::connected() const {
  int n = 0;
  for (const auto& m : members_) n += m != nullptr && !m->closed();
  return n;
}

absl::Status Job::CheckHello(const wire::Hello& hello, int size) const {
  if (state() == JobState::kRunning) {
    return absl::AlreadyExistsError(absl::StrCat("job ", name_, " is already running with ", size_,
                                                 " ranks; use another ALLREDUCED_JOB name"));
  }
  if (state() != JobState::kForming) {
    return absl::AlreadyExistsError(absl::StrCat("job ", name_, " ", JobStateName(state()), " (",
                                                 lifecycle_.failure(), ") and ", connected(),
                                                 " of its processes are still attached"));
  }
  const bool cross = hello.local_size >= 1 && size > hello.local_size;
  if (size_ != size || cross != cross_host() || (cross && local_size_ != hello.local_size)) {
    return absl::InvalidArgumentError(absl::StrCat("job ", name_, " has size ", size_, " (",
                                                   local_size_,
                                                   " on this host) but this process "
                                                   "says ",
                                                   size, " (", hello.local_size, ")"));
  }
  for (const auto& m : members_) {
    const bool same_rank = hello.rank >= 0 && m->rank == hello.rank;
    const bool same_local = hello.local_rank >= 0 && m->local_rank == hello.local_rank;
    if (same_rank || same_local) {
      return absl::InvalidArgumentError(absl::StrCat("job ", name_, ": rank ",
                                                     same_rank ? hello.rank : hello.local_rank,
                                                     " registered twice"));
    }
  }
  return absl::OkStatus();
}

void Job::AddMember(const std::shared_ptr<Session>& s) {
  members_.push_back(s);
  succession_.Arrived(absl::Now());
  if (succession_.Complete(static_cast<int>(members_.size()), local_size_)) Form();
}

void Job::Form() {
  std::vector<MemberInfo> infos;
  for (const auto& m : members_) {
    infos.push_back({m->rank, m->local_rank, static_cast<uint32_t>(m->creds().pid)});
  }
  formation_in_flight_ = true;
  registered_ = members_.size();
  negotiator_->FormAsync(
      infos, [this, alive = std::weak_ptr<bool>(alive_)](absl::StatusOr<Formation> formation) {
        if (alive.expired()) return;
        formation_in_flight_ = false;
        OnFormed(std::move(formation));
      });
}

void Job::OnFormed(absl::StatusOr<Formation> formation) {
  if (state() != JobState::kForming) {
    // A local rank left (or the formation timed out) while the job formed: the other hosts of the
    // formed job must not wait for us.
    if (formation.ok()) negotiator_->ReportFailure(absl::AbortedError(lifecycle_.failure()));
    return;
  }
  auto arena = formation.ok() ? shm::ResultArena::Create(name_, env_.options.result_segment_bytes,
                                                         env_.options.max_result_bytes)
                              : formation.status();
  if (!arena.ok()) {
    if (formation.ok()) negotiator_->ReportFailure(arena.status());
    return AbandonForming(arena.status());
  }
  cluster_job_id_ = formation->job_id;
  std::vector<std::shared_ptr<Session>> late;  // after the registration it formed from
  if (formation->ranks.size() < members_.size()) {
    late.assign(members_.begin() + static_cast<std::ptrdiff_t>(formation->ranks.size()),
                members_.end());
    members_.resize(formation->ranks.size());
  }
  AdoptFormation(*formation);
  std::vector<std::shared_ptr<Session>> by_rank(size_);
  local_order_.assign(local_size_, -1);
  for (size_t i = 0; i < members_.size(); ++i) {
    members_[i]->rank = formation->ranks[i];
    members_[i]->local_rank = formation->local_ranks[i];
    by_rank[formation->ranks[i]] = members_[i];
    local_order_[formation->local_ranks[i]] = formation->ranks[i];
  }
  members_ = std::move(by_rank);
  context_ = std::make_shared<dataplane::JobContext>();
  context_->name = name_;
  context_->id = id_;
  context_->size = size_;
  context_->sink = std::make_shared<local::RankSessions>(members_);
  context_->results = *arena;
  context_->metrics = env_.options.metrics;
  context_->timeline = road_.recorder();
  context_->report_failure = [this, alive = std::weak_ptr<bool>(alive_)](absl::Status status) {
    env_.loop.Post([this, alive, status] {
      if (!alive.expired()) Fail(status);
    });
  };
  std::unique_ptr<dataplane::Collective> host;
  if (cross_host()) {
    const dataplane::HostLayout& hosts = formation->hosts;
    auto tcp = std::make_unique<dataplane::TcpCollective>(
        hosts, [job = dataplane::tcp::MeshJob{formation->job_id, formation->generation,
                                              formation->data_secret},
                me = hosts.cross_rank, addresses = formation->data_addresses,
                listener = env_.listener, timeout = env_.options.form_timeout] {
          return dataplane::tcp::TcpMesh::Connect(job, me, addresses, *listener, timeout);
        });
    tcp_ = tcp.get();
    host = std::move(tcp);
    table_ = std::make_unique<negotiation::ReadinessTable>(size_, local_order_);
  } else {
    host = std::make_unique<dataplane::LocalCollective>(size_);
    table_ = std::make_unique<negotiation::ReadinessTable>(size_);
  }
  road_.Open(context_);
  executor_ =
      std::make_unique<Executor>(context_, std::move(host), road_, negotiator_->StartRounds(tcp_));
  lifecycle_.Formed().IgnoreError();  // forming -> running (checked above)
  negotiator_->Start(this);
  auto segment = (*arena)->segment(0);
  const dataplane::HostLayout& hosts = formation->hosts;
  for (auto& m : members_) {
    if (m == nullptr) continue;
    m->welcomed = true;
    wire::Welcome w{};
    w.rank = m->rank;
    w.size = size_;
    w.local_rank = m->local_rank;
    w.local_size = local_size_;
    w.cross_rank = hosts.cross_rank;
    w.cross_size = hosts.cross_size;
    w.result_segment_bytes = segment->size();
    w.max_tensor_bytes = wire::kMaxTensorBytes;
    w.job_id = id_;
    m->Send(local::EncodeWelcome(w), segment->readonly_fd());
  }
  if (succession_.HostsUpdatePending()) HostsUpdated();  // ranks arrived while it formed
  Logger("local")->info("job formed job={} id={} size={} hosts={} cross_rank={} generation={}",
                        name_, cross_host() ? cluster_job_id_ : id_, size_, hosts.cross_size,
                        hosts.cross_rank, lifecycle_.generation());
  if (late.empty()) return;
  if (rejoin_) return rejoin_(std::move(late));  // last: it may retire this generation
  for (auto& m : late) {
    m->Reject(0, absl::AbortedError(absl::StrCat("job ", name_, " formed without this process")));
  }
}

void Job::FormTimeout() {
  if (state() != JobState::kForming) return;
  const absl::Status status = FormTimeoutStatus();
  Logger("local")->warn("{}", status.message());
  AbandonForming(status);
}

void Job::AbandonForming(const absl::Status& status) {
  lifecycle_.Fail(status).IgnoreError();
  for (auto& m : members_) {
    m->Reject(0, status);
    m->job.clear();
    m->rank = -1;
  }
  members_.clear();
  EndIfDetached();
}

void Job::OnMemberClosed(const std::shared_ptr<Session>& s, bool graceful, const std::string& why) {
  succession_.Left(static_cast<uint32_t>(s->creds().pid), graceful);
  if (state() == JobState::kForming) {
    members_.erase(std::remove(members_.begin(), members_.end(), s), members_.end());
    if (formation_in_flight_) {
      // The other hosts are being formed into a job with this rank in it: it cannot run. The
      // formation's answer tells them (OnFormed); the ranks here hear it now.
      return AbandonForming(absl::AbortedError(
          absl::StrCat("rank ", s->rank, " (pid ", s->creds().pid, ") on host ",
                       env_.options.host_name, " ", why, " while job ", name_, " formed")));
    }
  } else if (state() == JobState::kRunning) {
    absl::Status gone = absl::AbortedError(absl::StrCat("rank ", s->rank, " (pid ", s->creds().pid,
                                                        ") on host ", env_.options.host_name, " ",
                                                        why, "; job ", name_, " cannot continue"));
    // A rank that shut down cleanly with nothing outstanding is the normal end of a job: the
    // others fail only if they still need it (now, or at their next submit).
    if (graceful && table_->pending_tensors() == 0) {
      departed_ = gone;
    } else {
      Fail(gone);
    }
  }
  ReleaseGpu(s->rank);
  EndIfDetached();
}

void Job::Fail(const absl::Status& failure, bool tell_others) {
  FailOrReform(failure, tell_others, /*daemon_stops=*/false);
}

void Job::FailOrReform(const absl::Status& failure, bool tell_others, bool daemon_stops) {
  // A job that may re-form (elastic) does so when it loses a member, unless the daemon itself
  // stops; its ranks get a recoverable error naming what was lost.
  if (state() == JobState::kReforming) return;  // this generation already ended
  bool reform = false;
  const absl::Status status =
      state() == JobState::kRunning
          ? succession_.OnLost(failure, name_, lifecycle_.generation(), daemon_stops, &reform)
          : failure;
  if (!(reform ? lifecycle_.Reform() : lifecycle_.Fail(status)).ok()) return;  // first one wins
  if (reform) succession_.Reformed(std::string(status.message()));
  if (env_.options.metrics != nullptr) env_.options.metrics->OnError("job");
  if (context_ == nullptr) return;  // forming: the members hear it from the caller
  context_->Fail(status);
  executor_->Abort(status);
  if (tell_others && reform) negotiator_->ReportReform(status, std::string(failure.message()));
  if (tell_others && !reform) negotiator_->ReportFailure(status);
  if (gpu_ != nullptr) gpu_->FailRegistrations(status, members_);
  Logger("local")->warn("job failed job={} id={} generation={} error=\"{}\"", name_, id_,
                        lifecycle_.generation(), status.message());
  const std::string notify =
      local::EncodeError(wire::MsgType::kNotify, 0, static_cast<int32_t>(status.code()),
                         std::string(status.message()));
  for (const auto& m : members_) {
    if (m != nullptr) m->Send(notify);
  }
  std::vector<TensorRequest> waiting = table_->TakeAll();
  for (TensorRequest& r : negotiator_->TakeUncommitted()) waiting.push_back(std::move(r));
  for (const TensorRequest& r : waiting) {
    if (members_[r.rank] != nullptr) local::SendComplete(*members_[r.rank], r, status, nullptr);
  }
}

void Job::EndIfDetached() {
  if (state() == JobState::kEnded || connected() > 0) return;
  const bool failed = lifecycle_.failed();
  if (state() == JobState::kRunning) negotiator_->ReportLeft();
  lifecycle_.End().IgnoreError();
  if (context_ != nullptr) context_->Fail(absl::CancelledError("job ended"));
  if (executor_ != nullptr) executor_->Stop();  // ends the data plane (and its mesh) quietly
  Logger("local")->info("job removed job={} id={} state={} collectives={}", name_, id_,
                        failed ? "failed" : "done",
                        context_ ? context_->collectives_completed.load() : 0);
  env_.loop.Post(Guarded(on_finished_));
}

void Job::Shutdown() {
  FailOrReform(absl::UnavailableError("allreduced is shutting down"), /*tell_others=*/true,
               /*daemon_stops=*/true);
  if (executor_ != nullptr) executor_->Stop();
}

}  // namespace ard::jobs

#include "daemon/jobs/steady_state.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/host_round_reducer.h"
#include "daemon/dataplane/tcp/host_collectives.h"

namespace ard::jobs {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::RoundVote;

namespace {

std::vector<int> RanksOf(const std::vector<bool>& here) {
  std::vector<int> local;
  for (size_t r = 0; r < here.size(); ++r) {
    if (here[r]) local.push_back(static_cast<int>(r));
  }
  return local;
}

}  // namespace

SteadyState::SteadyState(std::vector<bool> here, uint64_t fusion_threshold_bytes,
                         std::function<dataplane::tcp::TcpMesh*()> mesh,
                         std::function<void(std::vector<ReadyTensor>)> to_coordinator,
                         uint64_t round_data_max_bytes, PartialWait partial_wait)
    : fusion_threshold_bytes_(fusion_threshold_bytes),
      mesh_(std::move(mesh)),
      to_coordinator_(std::move(to_coordinator)),
      partial_wait_(std::move(partial_wait)),
      changed_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      reducer_(std::make_shared<dataplane::HostRoundReducer>(RanksOf(here))),
      rounds_(here, negotiation::RoundData{round_data_max_bytes, reducer_}) {}

SteadyState::~SteadyState() {
  if (changed_fd_ >= 0) ::close(changed_fd_);
}

void SteadyState::WakeIfChanged() {
  if (!rounds_.changed() && !rounds_.outcome_ready()) return;
  const uint64_t one = 1;
  (void)!::write(changed_fd_, &one, sizeof(one));
}

bool SteadyState::Offer(ReadyTensor& tensor) {
  absl::MutexLock lock(&mu_);
  if (!active_) return false;
  const bool held = rounds_.Offer(tensor);
  WakeIfChanged();
  return held;
}

bool SteadyState::Received(negotiation::CommittedList& list) {
  absl::MutexLock lock(&mu_);
  if (!active_) return false;
  rounds_.Received(std::move(list));
  WakeIfChanged();
  return true;
}

void SteadyState::SetJoinPending(bool pending) {
  absl::MutexLock lock(&mu_);
  rounds_.SetJoinPending(pending);
  WakeIfChanged();
}

void SteadyState::SubmittedPartly(const std::string& name) {
  if (partial_wait_.bound <= absl::ZeroDuration()) return;  // nothing would wait for it
  absl::MutexLock lock(&mu_);
  if (active_) rounds_.SubmittedPartly(name);
}

std::vector<ReadyTensor> SteadyState::TakeUnrun() {
  absl::MutexLock lock(&mu_);
  std::vector<ReadyTensor> out = rounds_.TakeHeld();
  for (Response& r : rounds_.TakePending()) {
    for (ReadyTensor& t : r.tensors) out.push_back(std::move(t));
  }
  return out;
}

std::vector<Response> SteadyState::End(const absl::Status& why) {
  std::vector<ReadyTensor> held;
  std::vector<Response> pending;
  {
    absl::MutexLock lock(&mu_);
    active_ = false;
    held = rounds_.TakeHeld();
    pending = rounds_.TakePending();
  }
  Logger("dataplane")->info("readiness rounds over ({}); {} held tensors go to the coordinator",
                            why.message(), held.size());
  if (!held.empty()) to_coordinator_(std::move(held));
  return pending;
}

bool SteadyState::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

absl::StatusOr<bool> SteadyState::AwaitRound(int wakeup_fd, absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    if (rounds_.changed()) return true;
  }
  dataplane::tcp::TcpMesh* mesh = mesh_();
  if (mesh == nullptr) return absl::FailedPreconditionError("data plane not connected");
  const int own[] = {changed_fd_, wakeup_fd};
  absl::StatusOr<bool> peer = mesh->WaitReadable(own, timeout);
  uint64_t drained;
  while (::read(changed_fd_, &drained, sizeof(drained)) > 0) {
  }
  if (!peer.ok() || *peer) return peer;
  absl::MutexLock lock(&mu_);
  return rounds_.changed();
}

absl::StatusOr<std::vector<Response>> SteadyState::RunRound() {
  dataplane::tcp::TcpMesh* mesh = mesh_();
  if (mesh == nullptr) return absl::FailedPreconditionError("data plane not connected");
  RoundVote vote;
  std::vector<negotiation::CarriedSlot> carried;
  bool waited;
  bool ran_out = false;
  {
    absl::MutexLock lock(&mu_);
    waited = AwaitPartlySubmitted(&ran_out);
    vote = rounds_.Vote(fusion_threshold_bytes_);  // held carried tensors' partials computed here
    carried = rounds_.carried();
  }
  if (waited && partial_wait_.waited) partial_wait_.waited(ran_out);
  const uint64_t slots = vote.slots;
  const size_t data_bytes = vote.data.size();
  std::vector<uint8_t> bytes(negotiation::VoteBytes(slots, data_bytes));
  negotiation::EncodeVote(vote, bytes.data());
  const absl::Status exchanged = dataplane::tcp::CombineInPlace(
      *mesh, bytes.data(), bytes.size(),
      [&](uint8_t* mine, const uint8_t* theirs, bool mine_is_lower) {
        RoundVote combined = negotiation::DecodeVote(mine, slots, data_bytes);
        negotiation::CombineVotes(combined, negotiation::DecodeVote(theirs, slots, data_bytes),
                                  carried, reducer_.get(), mine_is_lower);
        negotiation::EncodeVote(combined, mine);
      });
  // A peer that closed its connection ended the job there, normally or not: the coordinator
  // knows which and tells every host; until then nothing here claims a failure of its own.
  if (absl::IsUnavailable(exchanged)) return End(exchanged);
  ARD_RETURN_IF_ERROR(exchanged);
  std::optional<negotiation::RoundOutcome> outcome;
  {
    absl::MutexLock lock(&mu_);
    ARD_RETURN_IF_ERROR(rounds_.Agreed(negotiation::DecodeVote(bytes.data(), slots, data_bytes)));
    // The lists this round releases may still be on their way from the coordinator.
    mu_.Await(absl::Condition(
        +[](SteadyState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return !s->aborted_.ok() || s->rounds_.outcome_ready();
        },
        this));
    if (!aborted_.ok()) return aborted_;
    outcome = rounds_.TakeOutcome();
    ++rounds_run_;
    agreed_ += outcome->agreed_tensors;
    carried_ += outcome->carried_tensors;
  }
  if (!outcome->to_coordinator.empty()) to_coordinator_(std::move(outcome->to_coordinator));
  return std::move(outcome->run);
}

bool SteadyState::AwaitPartlySubmitted(bool* ran_out) {
  if (partial_wait_.bound <= absl::ZeroDuration() || rounds_.awaited() == 0) return false;
  // The peers wait in the combine meanwhile (under the mesh's progress timeout, far longer than
  // the bound); the control loop offers under mu_, which the wait releases.
  bool (*offered_or_aborted)(SteadyState*) =
      +[](SteadyState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return !s->aborted_.ok() || s->rounds_.awaited() == 0;
      };
  const bool offered =
      mu_.AwaitWithTimeout(absl::Condition(offered_or_aborted, this), partial_wait_.bound);
  *ran_out = !offered;
  if (*ran_out) rounds_.WaitedInVain();
  return true;
}

void SteadyState::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? absl::CancelledError("job ended") : why;
}

uint64_t SteadyState::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_run_;
}

uint64_t SteadyState::agreed_tensors() const {
  absl::MutexLock lock(&mu_);
  return agreed_;
}

size_t SteadyState::template_rank_entries() const {
  absl::MutexLock lock(&mu_);
  return rounds_.template_rank_entries();
}

uint64_t SteadyState::carried_tensors() const {
  absl::MutexLock lock(&mu_);
  return carried_;
}

}  // namespace ard::jobs

#include "daemon/coordination/election.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ard::coordination {

std::string EncodeCoordinator(const CoordinatorId& id) {
  return absl::StrCat(id.host, "\n", id.address, "\n", id.instance);
}

absl::StatusOr<CoordinatorId> DecodeCoordinator(const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, '\n');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the election key does not name a coordinator: '", value, "'"));
  }
  return CoordinatorId{parts[0], parts[1], parts[2]};
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kNone:
      return "none";
    case Role::kFollower:
      return "follower";
    case Role::kCoordinator:
      return "coordinator";
  }
  return "?";
}

Election::Election(CoordinatorId self, absl::Duration ttl, absl::Duration margin)
    : self_(std::move(self)), ttl_(ttl), margin_(margin) {}

Election::Action Election::Next() const {
  if (to_revoke_ != 0) return Action::kRevoke;
  if (view_.role == Role::kCoordinator && lease_ != 0) return Action::kKeepAlive;
  return key_absent_ ? Action::kCampaign : Action::kRead;
}

void Election::OnRead(const absl::StatusOr<std::optional<EtcdKey>>& key) {
  NoteEtcd(key.status());
  if (!key.ok()) return;  // keep the view: the coordinator may well be alive
  key_absent_ = !key->has_value();
  if (key_absent_) {
    // A coordinator stays one (fenced) and campaigns: it may win a new term with its jobs intact.
    if (view_.role == Role::kCoordinator) return;
    if (view_.term != 0) Change(CoordinatorView{}, "coordinator gone (its lease expired)");
    return;
  }
  absl::StatusOr<CoordinatorId> holder = DecodeCoordinator((*key)->value);
  if (!holder.ok()) {
    etcd_error_ = std::string(holder.status().message());
    return;
  }
  if (view_.role == Role::kCoordinator) {
    if (static_cast<uint64_t>((*key)->create_revision) == view_.term) return;
    StepDown(
        absl::StrCat("term ", (*key)->create_revision, " of ", holder->host, " replaced ours"));
  }
  if (*holder == self_) {
    // Our own key from a term we stepped down from: free it so that an election can run.
    to_revoke_ = (*key)->lease;
    return;
  }
  Follow(**key, *holder, "elected");
}

void Election::OnCampaign(const absl::StatusOr<EtcdKey>& key, int64_t lease, absl::Time sent) {
  NoteEtcd(key.status());
  key_absent_ = false;
  if (!key.ok()) {
    to_revoke_ = lease;
    return;
  }
  absl::StatusOr<CoordinatorId> holder = DecodeCoordinator(key->value);
  if (key->lease == lease && holder.ok() && *holder == self_) {
    lease_ = lease;
    last_renewed_ = sent;
    const bool again = view_.role == Role::kCoordinator;
    return Change(
        CoordinatorView{static_cast<uint64_t>(key->create_revision), self_, Role::kCoordinator},
        again ? "re-elected (etcd answered again)" : "elected");
  }
  if (view_.role == Role::kCoordinator) StepDown("another daemon was elected");
  to_revoke_ = lease;  // lost: someone else created the key first
  if (holder.ok()) Follow(*key, *holder, "elected");
}

void Election::OnKeepAlive(const absl::Status& status, absl::Time sent) {
  if (absl::IsNotFound(status)) {
    etcd_error_.clear();
    lease_ = 0;  // expired, and with it our key: read who leads now (fenced meanwhile)
    if (!view_.fenced) Fence(std::string(status.message()));
    return;
  }
  NoteEtcd(status);
  if (!status.ok()) return;
  last_renewed_ = sent;
  if (view_.fenced) {
    CoordinatorView view = view_;
    view.fenced = false;
    Change(std::move(view), "lease renewed (etcd answered again)");
  }
}

void Election::OnRevoked(const absl::Status& status) {
  NoteEtcd(status);
  if (status.ok() || absl::IsNotFound(status)) to_revoke_ = 0;
}

void Election::Tick(absl::Time now) {
  if (view_.role != Role::kCoordinator || view_.fenced) return;
  if (now < last_renewed_ + ttl_ - margin_) return;
  Fence(absl::StrCat("lease not renewed for ", absl::FormatDuration(now - last_renewed_),
                     etcd_error_.empty() ? "" : absl::StrCat(": ", etcd_error_)));
}

void Election::Fence(const std::string& why) {
  CoordinatorView view = view_;
  view.fenced = true;
  Change(std::move(view), absl::StrCat("fenced: ", why));
}

void Election::OnNewerTerm(uint64_t term) {
  if (view_.role == Role::kCoordinator && term > view_.term) {
    StepDown(absl::StrCat("a follower named newer term ", term));
  }
}

void Election::Resign() {
  if (view_.role == Role::kCoordinator) StepDown("shutting down");
}

void Election::Follow(const EtcdKey& key, const CoordinatorId& holder, const std::string& why) {
  CoordinatorView view{static_cast<uint64_t>(key.create_revision), holder, Role::kFollower};
  if (view != view_) Change(std::move(view), why);
}

void Election::StepDown(const std::string& why) {
  if (lease_ != 0) to_revoke_ = lease_;
  lease_ = 0;
  last_renewed_ = absl::InfinitePast();
  Change(CoordinatorView{}, absl::StrCat("stepped down: ", why));
}

void Election::Change(CoordinatorView view, std::string why) {
  view_ = std::move(view);
  reason_ = std::move(why);
}

void Election::NoteEtcd(const absl::Status& status) {
  if (status.ok()) {
    etcd_error_.clear();
  } else {
    etcd_error_ = std::string(status.message());
  }
}

}  // namespace ard::coordination

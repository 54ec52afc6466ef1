// Coordinator election as pure logic (DESIGN.md "Coordinator failover"): what one daemon knows
// of the election and what it must ask etcd next. The Elector (elector.h) makes the etcd calls
// and feeds their outcomes here; tests feed them by hand with a made-up clock.
//
//   seeking --read: key absent--> absent --campaign won--> leading <--renewed / re-elected--+
//      \--read: key held--> following <--campaign lost--'     |                             |
//                 ^                                           '--lease may be gone--> fenced -+
//                 +----------------- read: another daemon holds the key ----------------'
//
// 1. Seeking and following read the key; absent, the daemon campaigns (grant a lease, create the
// key in one transaction). An etcd error keeps the view (the coordinator may well be alive).
// 2. Leading renews the lease every TTL/4. Once TTL minus `margin` has passed since it sent its
// last renewal that succeeded (etcd cannot have expired the lease before then) it is fenced: it
// keeps the jobs it formed but admits no member and forms no job, since another daemon may be
// elected from then on. Fenced, it renews (the lease came through: leading again), reads
// (the key gone: campaigns, and a win is a new term of the same coordinator) or steps down (the
// key another daemon's, or a Join of a newer term). So two daemons never both admit or form.
// 3. A lease it gave up on (a campaign lost, a step-down) is revoked when etcd answers again.
// Value type; the elector's thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/coordination/etcd_client.h"

namespace ard::coordination {

// Who holds the election key (its value: host, address and instance id, one per line).
struct CoordinatorId {
  std::string host;
  std::string address;
  std::string instance;  // HostInfo.instance_id: tells a restarted daemon from its predecessor
  bool operator==(const CoordinatorId& o) const {
    return host == o.host && address == o.address && instance == o.instance;
  }
};
std::string EncodeCoordinator(const CoordinatorId& id);
absl::StatusOr<CoordinatorId> DecodeCoordinator(const std::string& value);

enum class Role { kNone, kFollower, kCoordinator };
const char* RoleName(Role role);

// What the daemon acts on: the coordinator of term `term` (0: none known) and its own role.
struct CoordinatorView {
  uint64_t term = 0;
  CoordinatorId coordinator;
  Role role = Role::kNone;
  bool fenced = false;  // coordinator: its lease may have expired; it admits and forms nothing
  bool operator==(const CoordinatorView& o) const {
    return term == o.term && role == o.role && coordinator == o.coordinator && fenced == o.fenced;
  }
  bool operator!=(const CoordinatorView& o) const { return !(*this == o); }
};

class Election {
 public:
  enum class Action { kRead, kCampaign, kKeepAlive, kRevoke };

  Election(CoordinatorId self, absl::Duration ttl, absl::Duration margin);

  Action Next() const;
  const CoordinatorView& view() const { return view_; }
  // Why the view last changed ("elected", "coordinator gone (its key expired)", ...).
  const std::string& reason() const { return reason_; }
  // The latest etcd error; empty once etcd answers again.
  const std::string& etcd_error() const { return etcd_error_; }
  int64_t lease() const { return lease_; }          // while leading
  int64_t to_revoke() const { return to_revoke_; }  // kRevoke's lease

  void OnRead(const absl::StatusOr<std::optional<EtcdKey>>& key);
  // `lease` was granted by a request sent at `sent` (0 and an error when the grant failed).
  void OnCampaign(const absl::StatusOr<EtcdKey>& key, int64_t lease, absl::Time sent);
  void OnKeepAlive(const absl::Status& status, absl::Time sent);
  void OnRevoked(const absl::Status& status);
  // Leading: fenced once the lease may have expired (`now` past its safe end).
  void Tick(absl::Time now);
  // Another daemon named term `term` (a Join or Heartbeat of a newer term): leading an older
  // term, step down at once; the next read shows who leads.
  void OnNewerTerm(uint64_t term);
  // The daemon is stopping: gives up leadership (the caller revokes to_revoke()).
  void Resign();

  // Leading: when the next renewal is due.
  absl::Time NextKeepAlive() const { return last_renewed_ + ttl_ / 4; }
  // Leading: when it is fenced unless a renewal succeeds first.
  absl::Time SafeUntil() const { return last_renewed_ + ttl_ - margin_; }

 private:
  void Follow(const EtcdKey& key, const CoordinatorId& holder, const std::string& why);
  void StepDown(const std::string& why);
  void Fence(const std::string& why);
  void Change(CoordinatorView view, std::string why);
  void NoteEtcd(const absl::Status& status);

  const CoordinatorId self_;
  const absl::Duration ttl_;
  const absl::Duration margin_;
  CoordinatorView view_;
  std::string reason_;
  std::string etcd_error_;
  bool key_absent_ = false;                         // the last read found no key: campaign next
  int64_t lease_ = 0;                               // leading: our lease
  int64_t to_revoke_ = 0;                           // a lease we no longer use
  absl::Time last_renewed_ = absl::InfinitePast();  // leading: when the last good renewal was sent
};

}  // namespace ard::coordination

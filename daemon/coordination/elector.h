// Runs the coordinator election (election.h) against etcd on its own thread, `ard-elector`,
// whose blocking etcd calls (each with a deadline) never hold up the control loop. Every change
// of the election's view, and of etcd's reachability, is handed to `on_change` (called on the
// elector's thread; it posts to the loop and must not block).
//
// Lifecycle: 1. construct with the etcd client (not owned; outlives the Elector); 2. Start() runs
// the thread; 3. SetCoordinatorAnswering / OnNewerTerm from any thread; 4. Stop() resigns (revokes
// a held lease, so that followers elect a new coordinator at once) and joins; the destructor stops.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordination/election.h"
#include "daemon/coordination/etcd_client.h"

namespace ard::coordination {

struct ElectorOptions {
  std::string key;  // the election key: <prefix>/coordinator
  CoordinatorId self;
  absl::Duration ttl = absl::Seconds(3);
  // How often to read the key without an answering coordinator (ten times as long with one).
  absl::Duration poll = absl::Milliseconds(500);
  // How long before its lease could expire a coordinator is fenced: at least the etcd client's
  // deadline plus a poll, since a renewal in flight may take that long to fail.
  absl::Duration margin = absl::Seconds(1);
};

// What the elector reports: the view, why it changed, and etcd's latest error ("" when it
// answers).
struct ElectionUpdate {
  CoordinatorView view;
  std::string reason;
  std::string etcd_error;
};

class Elector {
 public:
  Elector(EtcdClient& etcd, ElectorOptions options,
          std::function<void(const ElectionUpdate&)> on_change);
  ~Elector();
  Elector(const Elector&) = delete;
  Elector& operator=(const Elector&) = delete;

  void Start();
  void Stop();
  // The daemon's follower has (or has lost) contact with the coordinator: reads slow down (or
  // speed up, so that a dead coordinator's successor is found within a poll of its election).
  void SetCoordinatorAnswering(bool answering);
  // A Join or Heartbeat named term `term`: newer than a coordinator's own, it steps down.
  void OnNewerTerm(uint64_t term);

 private:
  void Run();
  void Step();  // one etcd call, as the election asks
  absl::Time NextStepAt(absl::Time now) const;
  void Publish();

  EtcdClient& etcd_;  // Not owned.
  const ElectorOptions options_;
  const std::function<void(const ElectionUpdate&)> on_change_;
  Election election_;  // the elector's thread only (after Start)
  ElectionUpdate published_;
  std::thread thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool answering_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t newer_term_ ABSL_GUARDED_BY(mu_) = 0;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ard::coordination

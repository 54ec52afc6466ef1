// Formation of cross-host jobs (DESIGN.md "Jobs, ranks and membership"): holds each job's
// RegisterRanks calls (by job name) until every rank of the job registered, assigns ranks
// (negotiation/rank_assignment: the launcher's kept, the rest by host order, then local rank),
// and answers every host with the same JobLayout (generation 1). A job that does not complete
// within the registration's timeout fails on every host that registered, naming who did.
//
// Thread: the control loop only.
// Lifecycle: 1. constructed by the JobCoordinator; 2. Register holds each call until its job
// formed (`on_formed` runs first, then every host is answered) or failed; 3. OnHostDown drops a
// host's registrations; 4. destroyed with the loop stopped (timers capture `this`).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

class JobFormation {
 public:
  // `id_prefix` makes job ids unique across coordinator restarts.
  JobFormation(EventLoop& loop, uint64_t id_prefix,
               std::function<void(const JobLayout&)> on_formed);
  ~JobFormation();

  // One host's registered local ranks of a job; `done` gets the layout once the job formed.
  void Register(const RegisterRanksRequest& request, Done<RegisterRanksResponse> done);
  // A host went DOWN or left: its registrations are dropped (their calls are not answered).
  void OnHostDown(const std::string& host);

  int forming_count() const { return static_cast<int>(forming_.size()); }

 private:
  struct Forming;

  void TryForm(const std::string& name);
  void FormTimeout(const std::string& name, uint64_t token);
  // Builds the layout (ranks assigned) from every host's registration; the error fails them all.
  absl::StatusOr<JobLayout> Layout(const std::string& name, const Forming& f);

  EventLoop& loop_;
  const uint64_t id_prefix_;
  const std::function<void(const JobLayout&)> on_formed_;
  uint64_t next_id_ = 1;     // job ids (with id_prefix_)
  uint64_t next_token_ = 1;  // tells a formation's timeout from a later one of the same name
  std::map<std::string, std::unique_ptr<Forming>> forming_;  // by job name
};

}  // namespace ard::cluster

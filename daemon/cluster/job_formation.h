// Formation of cross-host jobs (DESIGN.md "Jobs, ranks and membership"): holds each job's
// RegisterRanks calls (by job name) until every rank of the job registered, assigns ranks
// (negotiation/rank_assignment: the launcher's kept, the rest by host order, then local rank),
// and answers every host with the same JobLayout (generation 1). A job that does not complete
// within the registration's timeout fails on every host that registered, naming who did.
// An elastic job (elastic_min_np > 0) has no fixed size: it forms from the hosts that registered
// once they hold min_np ranks and either max_np registered, every host of its previous generation
// that is still up registered again, or kElasticSettle passed without another registration; its
// ranks are numbered densely in the order the ranks gave, and each formation is a generation.
//
// Thread: the control loop only.
// Lifecycle: 1. constructed by the JobCoordinator; 2. Register holds each call until its job
// formed (`on_formed` runs first, then every host is answered) or failed; 3. OnHostDown drops a
// host's registrations; 4. destroyed with the loop stopped (timers capture `this`).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

// How long an elastic job's formation waits for more hosts after the last registration.
inline constexpr absl::Duration kElasticSettle = absl::Milliseconds(500);

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
  // Elastic: whether `f` forms now (else TryForm runs again after kElasticSettle).
  bool ElasticReady(const std::string& name, const Forming& f, int total) const;
  // Builds the layout (ranks assigned) from every host's registration; the error fails them all.
  absl::StatusOr<JobLayout> Layout(const std::string& name, const Forming& f);

  EventLoop& loop_;
  const uint64_t id_prefix_;
  const std::function<void(const JobLayout&)> on_formed_;
  uint64_t next_id_ = 1;     // job ids (with id_prefix_)
  uint64_t next_token_ = 1;  // tells a formation's timeout from a later one of the same name
  std::map<std::string, std::unique_ptr<Forming>> forming_;  // by job name
  // Elastic jobs by name: the hosts of the latest generation (minus those gone DOWN since) and
  // the latest generation's number.
  std::map<std::string, std::set<std::string>> elastic_hosts_;
  std::map<std::string, uint64_t> elastic_generation_;
};

}  // namespace ard::cluster

// Formation of cross-host jobs (DESIGN.md "Jobs, ranks and membership"): holds each job's
// RegisterRanks calls (by job name) until every rank of the job registered, assigns ranks
// (negotiation/rank_assignment: the launcher's kept, the rest by host order, then local rank),
// and answers every host with the same JobLayout (generation 1). A job that does not complete
// within the registration's timeout fails on every host that registered, naming who did.
// An elastic job (elastic_min_np > 0) has no fixed size: it forms from the hosts that registered
// once they hold min_np ranks, every host of a generation still running (the coordinator's
// `running_hosts`: those that have not left it) is among them, and either max_np registered,
// every host of its previous generation that is still up registered again, or the settle window
// passed without another registration or change of the running generation (four times that for
// a new job or while none of the previous hosts is back): negotiation::ElasticSettled, the rule
// a host's Job applies to its processes. Its ranks are numbered densely in the order the ranks
// gave (then host order, then local rank), at most max_np of them: the ranks after those are
// left out (a host with none in is answered ResourceExhausted; one with some gets the layout,
// whose `registered_local_ranks` say which), and each formation is a generation. Holding a new
// host's registration while a generation runs is what lets the running ranks re-form with it
// rather than it forming a second job of the same name. A host that registers again replaces its
// held registration (answered ABORTED): an elastic host does so when a process arrives while its
// generation's registration is held, amending it (CheckAmendment decides, by what was formed, not
// by timing, whether the amendment still can).
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

// An elastic job's bounds, as the ranks of its latest generation gave them (max_np 0: none).
struct ElasticBounds {
  int min_np = 0;
  int max_np = 0;
};

// The hosts of job `name`'s running generation that have not left it (empty: none runs).
using RunningHosts = std::function<std::set<std::string>(const std::string& name)>;

class JobFormation {
 public:
  // `id_prefix` makes job ids unique across coordinator restarts; `running_hosts` null: no
  // generation is ever running (tests of formation alone).
  JobFormation(EventLoop& loop, uint64_t id_prefix, std::function<void(const JobLayout&)> on_formed,
               RunningHosts running_hosts = nullptr);
  ~JobFormation();

  // One host's registered local ranks of a job; `done` gets the layout once the job formed.
  void Register(const RegisterRanksRequest& request, Done<RegisterRanksResponse> done);
  // A host went DOWN or left: its registrations are dropped (their calls are not answered).
  void OnHostDown(const std::string& host);
  // Elastic: job `name`'s running generation changed (a host left it, it ended or was aborted):
  // its successor's formation is checked again, its settle time counted from now.
  void OnRunningChanged(const std::string& name);
  // The bounds of job `name` if its latest generation formed here was elastic, else null.
  const ElasticBounds* elastic(const std::string& name) const {
    auto it = elastic_.find(name);
    return it == elastic_.end() ? nullptr : &it->second.bounds;
  }

  int forming_count() const { return static_cast<int>(forming_.size()); }

 private:
  struct Forming;

  // Elastic: a registration of a formation this host amended since (ABORTED), or of one that
  // already formed (ALREADY_EXISTS: its answer is on the way), is refused; OK otherwise.
  absl::Status CheckAmendment(const RegisterRanksRequest& request) const;
  void TryForm(const std::string& name);
  // Elastic: TryForm once each of the two settle windows (kElasticSettle, kElasticSettleNoneBack)
  // has passed.
  void ScheduleSettled(const std::string& name);
  void FormTimeout(const std::string& name, uint64_t token);
  // Elastic: whether `f` forms now (else TryForm runs again after the settle window).
  bool ElasticReady(const std::string& name, const Forming& f, int total) const;
  // Builds the layout (ranks assigned) from every host's registration; the error fails them all.
  absl::StatusOr<JobLayout> Layout(const std::string& name, const Forming& f);

  EventLoop& loop_;
  const uint64_t id_prefix_;
  const std::function<void(const JobLayout&)> on_formed_;
  const RunningHosts running_hosts_;
  uint64_t next_id_ = 1;     // job ids (with id_prefix_)
  uint64_t next_token_ = 1;  // tells a formation's timeout from a later one of the same name
  std::map<std::string, std::unique_ptr<Forming>> forming_;  // by job name
  // Elastic jobs by name: the hosts of the latest generation (minus those gone DOWN since), the
  // latest generation's number and bounds, and by host the formation (RegisterRanksRequest.
  // formation) its latest answered registration had.
  struct Elastic {
    std::set<std::string> hosts;
    uint64_t generation = 0;
    ElasticBounds bounds;
    std::map<std::string, uint64_t> formed_from;
  };
  std::map<std::string, Elastic> elastic_;
};

}  // namespace ard::cluster

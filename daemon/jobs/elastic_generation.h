// What one generation of a job knows of its succession (DESIGN.md "Elastic training"), as pure
// logic: its bounds, when it forms, whether a lost member re-forms it (and why), which processes
// will register again for the next generation, and whether its ranks were told others wait to
// join. A fixed-size job holds one with no bounds: it forms once every local rank registered
// and a lost member fails it. The Job applies the answers to its sessions (job_elastic.cc).
// Value type; the owning Job's thread (the control loop).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/jobs/job_state.h"
#include "daemon/jobs/negotiator.h"

namespace ard::jobs {

// What a forming successor waits for, from the generations before it on this host.
struct Predecessors {
  bool attached = false;  // a process of an earlier generation has not re-registered or gone
  absl::Time left = absl::InfinitePast();  // the last process of the earlier generation detached
  std::set<uint32_t> returning;            // pids that left it to register again, still running
  absl::Duration settle;                   // the settle window (JobOptions::elastic_settle)
};

class ElasticGeneration {
 public:
  ElasticGeneration() = default;  // a fixed-size job
  explicit ElasticGeneration(ElasticSpec spec) : spec_(spec) {}

  bool elastic() const { return spec_.min_np > 0; }
  const ElasticSpec& spec() const { return spec_; }

  // A process registered at `at`.
  void Arrived(absl::Time at) { last_arrival_ = at; }
  // Fixed: `members` registered of `local_size` forms the job at once (elastic: FormsNow).
  bool Complete(int members, int local_size) const { return !elastic() && members == local_size; }
  // Elastic, forming, no formation in flight: whether the generation after `generation` forms
  // now with the processes `pids` registered (negotiation::ElasticSettled; a single-host job also
  // needs min_np). A successor waits for the returning processes, a first generation for the
  // launcher's local size.
  bool FormsNow(const std::vector<uint32_t>& pids, uint64_t generation, const Predecessors& before,
                absl::Time now) const;

  // A running member was lost with `failure`: the status the job's ranks get. Elastic and not
  // `stopping` (the daemon shuts down): the generation re-forms (`*reform` true) and the status
  // names it; otherwise `failure` itself.
  absl::Status OnLost(const absl::Status& failure, const std::string& job, uint64_t generation,
                      bool stopping, bool* reform) const;
  // The generation ended to re-form for `reason` (kept for status).
  void Reformed(std::string reason) { reform_reason_ = std::move(reason); }
  const std::string& reform_reason() const { return reform_reason_; }
  // It ended to re-form (lost member), or ranks wait to join it.
  bool reform_pending() const { return !reform_reason_.empty() || hosts_updated_; }

  // A member left: cleanly, after a re-formation started, it will register again.
  void Left(uint32_t pid, bool graceful);
  // The processes that will register for the next generation: those that left to do so and
  // `attached` (still attached).
  std::set<uint32_t> Returning(const std::vector<uint32_t>& attached) const;

  // Ranks wait to join this generation (in `state`): true when its members are to be told now
  // (once, while it runs; a forming one tells them once formed, see HostsUpdatePending).
  bool HostsUpdated(JobState state);
  bool HostsUpdatePending() const { return hosts_updated_ && !told_hosts_updated_; }

  // Whether process `pid` may register for the next generation of a job that runs with `size`
  // ranks whose members are `pids`: not at max_np unless it is a member (it would be left out).
  bool HasRoom(JobState state, int size, uint32_t pid, const std::vector<uint32_t>& pids) const;

 private:
  ElasticSpec spec_;                 // min_np 0: a fixed-size job
  absl::Time last_arrival_;          // forming: the latest registration
  bool hosts_updated_ = false;       // ranks wait to join this generation
  bool told_hosts_updated_ = false;  // the members were told so
  std::string reform_reason_;        // why this generation ended (kept once ended)
  std::set<uint32_t> returning_;     // pids that left cleanly to re-register
};

}  // namespace ard::jobs

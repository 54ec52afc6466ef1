// The succession of elastic jobs' generations on this host (DESIGN.md "Elastic training"): a
// generation that a new one replaces stays here (retired) until its last process detached, and
// a generation that ended to re-form leaves a handoff (its generation number, the processes
// expected back, when it ended) that the next one forms from (ElasticGeneration::FormsNow).
// JobRegistry routes frames to the jobs here as to its current ones.
//
// Thread: the control loop only (owned by the JobRegistry).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/common/process_alive.h"
#include "daemon/jobs/elastic_generation.h"
#include "daemon/jobs/job.h"

namespace ard::jobs {

class Succession {
 public:
  // `form_timeout`: a handoff older than this is forgotten; `settle`: the settle window;
  // `alive`: whether a process still runs (a returning one that does not is not waited for).
  Succession(absl::Duration form_timeout, absl::Duration settle,
             std::function<bool(uint32_t pid)> alive = ProcessAlive)
      : form_timeout_(form_timeout), settle_(settle), alive_(std::move(alive)) {}

  // The generation of elastic job `name` that a registering process joins: the forming one in
  // `jobs` (the registry's current jobs), even while the coordinator forms it (Job::
  // amends_formation), else a new one from `start` (given the generation it succeeds); a
  // generation that runs or re-forms retires first.
  Job* Join(std::map<std::string, std::unique_ptr<Job>>& jobs, const std::string& name,
            const std::function<Job*(uint64_t previous)>& start);
  // Forms `job` (a forming elastic generation; null or fixed: nothing) if it may now.
  void TryForm(Job* job);
  // `job` (running, re-forming, or already forming) gives way to a new generation of its job:
  // its ranks are told others wait to join; it stays until its processes detach. Returns its
  // generation (the one the new generation succeeds).
  uint64_t Retire(std::unique_ptr<Job> job);
  // The generation that a new generation of `name` succeeds (its last one here ended before this
  // one came back), or 0 (none, or longer than the formation timeout ago: forgotten).
  uint64_t Handoff(const std::string& name, absl::Time now);
  // What a forming generation of `name` waits for (returning processes that still run).
  Predecessors Before(const std::string& name) const;
  // `name`'s successor formed (or is forming) with those present: forget its handoff.
  void Formed(const std::string& name) { handoffs_.erase(name); }
  // Generation `job` ended (its last process detached): remembers who will register for its
  // successor if it ended to re-form.
  void Ended(const Job& job);
  // Drops retired generation `id` (after Ended); false when none is here.
  bool Drop(uint32_t id);
  // `name` waits for processes of an earlier generation to come back.
  bool awaited(const std::string& name) const { return handoffs_.count(name) != 0; }

  Job* Find(uint32_t id);
  void ForEach(const std::function<void(Job&)>& f);
  void ForEach(const std::function<void(const Job&)>& f) const;
  void Clear() { retired_.clear(); }

 private:
  struct Expected {
    uint64_t generation = 0;
    std::set<uint32_t> returning;
    absl::Time at;
  };
  const absl::Duration form_timeout_;
  const absl::Duration settle_;
  const std::function<bool(uint32_t pid)> alive_;
  std::vector<std::unique_ptr<Job>> retired_;  // until their last process detached
  std::map<std::string, Expected> handoffs_;   // by job name
};

}  // namespace ard::jobs

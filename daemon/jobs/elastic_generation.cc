#include "daemon/jobs/elastic_generation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/negotiation/elastic_settle.h"

namespace ard::jobs {

bool ElasticGeneration::FormsNow(const std::vector<uint32_t>& pids, uint64_t generation,
                                 const Predecessors& before, absl::Time now) const {
  if (!elastic() || pids.empty() || before.attached) return false;
  const int n = static_cast<int>(pids.size());
  negotiation::ElasticArrivals arrivals{n, spec_.max_np, false, last_arrival_, before.settle};
  if (generation > 0) {  // a successor: wait for the survivors, not for a timer
    arrivals.expected_here = std::all_of(
        before.returning.begin(), before.returning.end(),
        [&](uint32_t pid) { return std::find(pids.begin(), pids.end(), pid) != pids.end(); });
    // A survivor re-registers once it detached from the last generation, however long after the
    // first survivor it got there: count the wait from both. `returning` holds only survivors
    // that still run, so a missing one is coming back unless it dies meanwhile.
    arrivals.last_change = std::max(last_arrival_, before.left);
    if (!arrivals.expected_here) {
      arrivals.settle = std::max(before.settle, negotiation::kSurvivorWait);
    }
  } else if (spec_.first_local > 0) {  // the launcher said how many start here
    arrivals.expected_here = n >= spec_.first_local;
    arrivals.settle = absl::InfiniteDuration();
  }
  if (!negotiation::ElasticSettled(arrivals, now)) return false;
  // Several hosts: the coordinator counts every host's ranks against min_np.
  return spec_.coordinated || n >= spec_.min_np;
}

absl::Status ElasticGeneration::OnLost(const absl::Status& failure, const std::string& job,
                                       uint64_t generation, bool stopping, bool* reform) const {
  *reform = elastic() && !stopping;
  if (!*reform) return failure;
  return absl::AbortedError(absl::StrCat("elastic job ", job, " generation ", generation,
                                         " re-forms: ", failure.message()));
}

void ElasticGeneration::Left(uint32_t pid, bool graceful) {
  if (elastic() && graceful && reform_pending()) returning_.insert(pid);
}

std::set<uint32_t> ElasticGeneration::Returning(const std::vector<uint32_t>& attached) const {
  std::set<uint32_t> out = returning_;
  out.insert(attached.begin(), attached.end());
  return out;
}

bool ElasticGeneration::HostsUpdated(JobState state) {
  if (state == JobState::kForming) {
    hosts_updated_ = true;  // told once formed
    return false;
  }
  if (state != JobState::kRunning || (hosts_updated_ && told_hosts_updated_)) return false;
  hosts_updated_ = told_hosts_updated_ = true;
  return true;
}

bool ElasticGeneration::HasRoom(JobState state, int size, uint32_t pid,
                                const std::vector<uint32_t>& pids) const {
  if (state != JobState::kRunning || spec_.max_np <= 0 || size < spec_.max_np) return true;
  // A member registering again: the job re-forms for it.
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

}  // namespace ard::jobs

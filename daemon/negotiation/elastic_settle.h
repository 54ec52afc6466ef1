// When a forming elastic generation forms (DESIGN.md "Elastic training"): the one rule that a
// host's Job applies to its local processes and the coordinator's JobFormation to the hosts'
// registrations, and the settle window both wait. Each caller says what it expects back (the
// processes or hosts of the previous generation, or the launcher's local size) and how long to
// wait after the last change; the rule is the same.
// Pure; any thread.
#pragma once

#include "absl/time/time.h"

namespace ard::negotiation {

// How long a forming elastic generation waits after the last arrival for one it expects that
// has not come (a survivor that died meanwhile; a new job's slow starters).
inline constexpr absl::Duration kElasticSettle = absl::Milliseconds(500);
// The coordinator's window for a generation none of whose previous hosts is back yet (a new
// job's hosts start their ranks at different times; new hosts wait for those that left moments
// ago).
inline const absl::Duration kElasticSettleNoneBack = 4 * kElasticSettle;
// How long a forming successor waits for a survivor of the last generation that still runs before
// it forms without it. A survivor first waits for the launcher to catch up with the loss (up to
// LAUNCHER_TIMEOUT_S, 10 s, python/allreduced/common/launch_notice.py), then re-initialises its
// framework (seconds on a loaded host): two survivors can come back that far apart, so the wait
// covers both with room. A survivor that died is not waited for at all.
inline constexpr absl::Duration kSurvivorWait = absl::Seconds(30);

// What has arrived for a forming generation.
struct ElasticArrivals {
  int present = 0;  // ranks registered
  int max_np = 0;   // 0: no bound
  // Every member it waits for is here: the previous generation's survivors, or the launcher's
  // local size for a new job.
  bool expected_here = false;
  absl::Time last_change;                  // the last arrival, or change of what it waits for
  absl::Duration settle = kElasticSettle;  // InfiniteDuration: wait for the expected ones only
};

// Whether the generation forms now: max_np present, every expected member here, or `settle`
// passed since the last change.
bool ElasticSettled(const ElasticArrivals& arrivals, absl::Time now);

}  // namespace ard::negotiation

// Durations for people: "6.29s", "250ms", "1m05s", rather than absl::FormatDuration's exact
// "6.285587391s". Used in log lines and error messages; pure function, any thread.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace ard {

// Below 1 s: whole milliseconds ("250ms", "0ms"); below 1 min: seconds to two decimals without
// trailing zeros ("6.29s", "10s"); longer: whole seconds in absl form ("1m5s", "2h3s").
// Negative durations get a leading '-'; infinite ones print "inf".
std::string FormatDurationShort(absl::Duration d);

}  // namespace ard

// Bounds how many warn lines one noisy source writes (DESIGN.md "Security"): a stranger may open
// connections to the data port as fast as it likes, and each refused one is worth a line, but
// not an unbounded number. At most `burst` lines per `window`; the first line after a quiet
// window says how many were left out.
// Any thread (internally locked).
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ard::dataplane::tcp {

class WarnLimiter {
 public:
  explicit WarnLimiter(int burst = 10, absl::Duration window = absl::Seconds(10))
      : burst_(burst), window_(window) {}

  // True when the caller may write its line now; `*suppressed` is then the number of lines left
  // out since the last one written (0 usually).
  bool Allow(absl::Time now, uint64_t* suppressed) {
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= window_) {
      window_start_ = now;
      written_ = 0;
    }
    if (written_ >= burst_) {
      ++suppressed_;
      return false;
    }
    ++written_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  const int burst_;
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::dataplane::tcp

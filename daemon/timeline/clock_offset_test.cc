#include "daemon/timeline/clock_offset.h"

#include <catch2/catch.hpp>

namespace ard::timeline {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(5000);

TEST_CASE("the offset comes from the fastest recent round trip") {
  ClockOffset c(3);
  CHECK_FALSE(c.known());
  CHECK(c.error_us() == -1);
  // The coordinator is 250 ms ahead. A slow call (10 ms, answered late) misleads by up to 5 ms...
  c.AddSample(kT0, kT0 + absl::Milliseconds(250 + 9), kT0 + absl::Milliseconds(10));
  CHECK(c.offset_us() == 254000);
  CHECK(c.error_us() == 5000);
  // ... a fast one (1 ms) wins.
  c.AddSample(kT0 + absl::Seconds(1), kT0 + absl::Seconds(1) + absl::Microseconds(250500),
              kT0 + absl::Seconds(1) + absl::Milliseconds(1));
  CHECK(c.offset_us() == 250000);
  CHECK(c.error_us() == 500);
  // An unstamped answer (older coordinator) is ignored.
  c.AddSample(kT0, absl::UnixEpoch(), kT0 + absl::Microseconds(10));
  CHECK(c.offset_us() == 250000);
}

TEST_CASE("old samples age out of the window") {
  ClockOffset c(2);
  c.AddSample(kT0, kT0 + absl::Microseconds(100), kT0 + absl::Microseconds(200));  // rt 200
  c.AddSample(kT0, kT0 - absl::Microseconds(700), kT0 + absl::Microseconds(400));
  c.AddSample(kT0, kT0 - absl::Microseconds(600), kT0 + absl::Microseconds(400));
  CHECK(c.offset_us() == -700 - 200);  // the 200 us sample is gone: the older 400 us one wins
}

}  // namespace
}  // namespace ard::timeline

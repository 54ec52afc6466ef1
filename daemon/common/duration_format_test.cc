#include "daemon/common/duration_format.h"

#include "catch2/catch.hpp"

namespace ard {
namespace {

TEST_CASE("FormatDurationShort rounds to what a reader needs") {
  CHECK(FormatDurationShort(absl::Nanoseconds(6285587391)) == "6.29s");
  CHECK(FormatDurationShort(absl::Seconds(10)) == "10s");
  CHECK(FormatDurationShort(absl::Milliseconds(1500)) == "1.5s");
  CHECK(FormatDurationShort(absl::Milliseconds(250)) == "250ms");
  CHECK(FormatDurationShort(absl::Microseconds(300)) == "0ms");
  CHECK(FormatDurationShort(absl::Seconds(65.7)) == "1m5s");
  CHECK(FormatDurationShort(absl::Hours(2) + absl::Seconds(3.4)) == "2h3s");
  CHECK(FormatDurationShort(-absl::Milliseconds(1500)) == "-1.5s");
  CHECK(FormatDurationShort(absl::InfiniteDuration()) == "inf");
}

}  // namespace
}  // namespace ard

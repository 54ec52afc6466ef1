#include "daemon/common/duration_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ard {

std::string FormatDurationShort(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  if (d == -absl::InfiniteDuration()) return "-inf";
  if (d < absl::ZeroDuration()) return absl::StrCat("-", FormatDurationShort(-d));
  if (d < absl::Seconds(1)) return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
  if (d < absl::Seconds(60)) {
    std::string s = absl::StrFormat("%.2f", absl::ToDoubleSeconds(d));
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return absl::StrCat(s, "s");
  }
  return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

}  // namespace ard

// The allreduced version reported to peers and the CLI.
#pragma once

namespace ard {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace ard

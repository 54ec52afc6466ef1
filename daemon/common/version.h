// The allreduced version: reported to peers, printed by `allreduced --version` and
// `allreducectl --version` (the one source of both).
#pragma once

namespace ard {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace ard

// `mkdir -p` for the daemon's runtime files (the local socket's and the port file's directories),
// so both are created the same way. Any thread.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ard {

// The directory part of `path` ("." when it has none, "/" for a file in the root).
std::string Dirname(const std::string& path);

// Creates `dir` and its missing parents with mode 0755 (less the umask). FailedPrecondition naming
// the directory and the reason when one cannot be created or exists as something else.
absl::Status MakeDirs(const std::string& dir);

}  // namespace ard

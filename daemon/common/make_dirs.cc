#include "daemon/common/make_dirs.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ard {

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  if (dir != "/" && dir != ".") {
    absl::Status parent = MakeDirs(Dirname(dir));
    if (!parent.ok()) return parent;
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ard

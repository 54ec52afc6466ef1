#include "client/cli/bench_worker_lines.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ard::cli {

std::string FormatReadyLine(int rank, int size) {
  return absl::StrCat("READY ", rank, " ", size, "\n");
}

std::string FormatRowLine(int index, double time_us, uint64_t wrong) {
  return absl::StrFormat("ROW %d %.3f %u\n", index, time_us, wrong);
}

std::string FormatDoneLine() { return "DONE\n"; }

std::string FormatErrorLine(const std::string& message) {
  std::string one_line = message;
  for (char& c : one_line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return "ERROR " + one_line + "\n";
}

WorkerLine ParseWorkerLine(const std::string& line) {
  WorkerLine w;
  w.message = line;
  std::vector<std::string> f = absl::StrSplit(line, ' ');
  if (f[0] == "READY" && f.size() == 3 && absl::SimpleAtoi(f[1], &w.rank) &&
      absl::SimpleAtoi(f[2], &w.size)) {
    w.kind = WorkerLine::Kind::kReady;
  } else if (f[0] == "ROW" && f.size() == 4 && absl::SimpleAtoi(f[1], &w.index) &&
             absl::SimpleAtod(f[2], &w.time_us) && absl::SimpleAtoi(f[3], &w.wrong)) {
    w.kind = WorkerLine::Kind::kRow;
  } else if (line == "DONE") {
    w.kind = WorkerLine::Kind::kDone;
  } else if (f[0] == "ERROR" && line.size() > 6) {
    w.kind = WorkerLine::Kind::kError;
    w.message = line.substr(6);
  }
  return w;
}

}  // namespace ard::cli

#include "ctl/bench_worker_lines.h"

#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ard::ctl {

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

namespace {

void Emit(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; PR_SET_PDEATHSIG ends us
    done += n;
  }
}

}  // namespace

int EmitError(const absl::Status& status) {
  Emit(FormatErrorLine(
      absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message())));
  return 1;
}

int EmitRun(int rank, int size, size_t sizes, const SizeRunner& run) {
  Emit(FormatReadyLine(rank, size));
  for (size_t i = 0; i < sizes; ++i) {
    double time_us = 0;
    uint64_t wrong = 0;
    if (absl::Status st = run(i, &time_us, &wrong); !st.ok()) return EmitError(st);
    Emit(FormatRowLine(static_cast<int>(i), time_us, wrong));
  }
  Emit(FormatDoneLine());
  return 0;
}

}  // namespace ard::ctl

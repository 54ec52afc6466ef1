// The line protocol from a `bench-worker` process to its parent `allreducectl bench`, over the
// worker's stdout (a pipe; the worker's stderr goes to the same pipe, so a crash message arrives
// as an unrecognised line). One line per event, in this order:
//   READY <rank> <size>              the job formed; the daemon's rank and world size
//   ROW <index> <time_us> <wrong>    size number <index> (of the parent's layout list) is done:
//                                    this rank's mean iteration time, wrong elements (--check)
//   DONE                             every size is done; the worker exits 0 next
//   ERROR <message>                  the worker failed (message: one line, "CODE: text"); exit 1
// Formatting and parsing are pure (any thread); EmitError/EmitRun write the worker's side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace ard::ctl {

struct WorkerLine {
  enum class Kind { kReady, kRow, kDone, kError, kOther };
  Kind kind = Kind::kOther;
  int rank = 0, size = 0;  // kReady
  int index = 0;           // kRow
  double time_us = 0;      // kRow
  uint64_t wrong = 0;      // kRow
  std::string message;     // kError; kOther: the whole line
};

std::string FormatReadyLine(int rank, int size);
std::string FormatRowLine(int index, double time_us, uint64_t wrong);
std::string FormatDoneLine();
std::string FormatErrorLine(const std::string& message);  // newlines become spaces

// Parses one line (without its '\n'); malformed protocol lines come back as kOther.
WorkerLine ParseWorkerLine(const std::string& line);

// The worker's side, written unbuffered to stdout (the parent's pipe) so lines arrive as they
// happen. EmitError: an ERROR line for `status`; returns the worker's exit code, 1.
int EmitError(const absl::Status& status);
// READY <rank> <size>, then one ROW per size from run(index, &time_us, &wrong), then DONE; an
// ERROR line instead at the first failure. Returns the worker's exit code (0 or 1).
using SizeRunner = std::function<absl::Status(size_t index, double* time_us, uint64_t* wrong)>;
int EmitRun(int rank, int size, size_t sizes, const SizeRunner& run);

}  // namespace ard::ctl

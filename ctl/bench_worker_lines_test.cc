#include "ctl/bench_worker_lines.h"

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

WorkerLine Parse(const std::string& with_newline) {
  REQUIRE(with_newline.back() == '\n');
  return ParseWorkerLine(with_newline.substr(0, with_newline.size() - 1));
}

TEST_CASE("every line the worker writes parses back") {
  WorkerLine ready = Parse(FormatReadyLine(3, 8));
  CHECK(ready.kind == WorkerLine::Kind::kReady);
  CHECK(ready.rank == 3);
  CHECK(ready.size == 8);

  WorkerLine row = Parse(FormatRowLine(12, 1371.625, 7));
  CHECK(row.kind == WorkerLine::Kind::kRow);
  CHECK(row.index == 12);
  CHECK(row.time_us == Approx(1371.625));
  CHECK(row.wrong == 7);

  CHECK(Parse(FormatDoneLine()).kind == WorkerLine::Kind::kDone);

  WorkerLine error = Parse(FormatErrorLine("UNAVAILABLE: no daemon\nat /x.sock"));
  CHECK(error.kind == WorkerLine::Kind::kError);
  CHECK(error.message == "UNAVAILABLE: no daemon at /x.sock");
}

TEST_CASE("anything else is kept as an unrecognised line") {
  for (const char* line :
       {"", "terminate called after throwing", "ROW 1 x 0", "READY 1", "ERROR", "DONE now"}) {
    WorkerLine w = ParseWorkerLine(line);
    CHECK(w.kind == WorkerLine::Kind::kOther);
    CHECK(w.message == line);
  }
}

}  // namespace
}  // namespace ard::ctl

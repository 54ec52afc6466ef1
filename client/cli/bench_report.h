// The output of `allreducectl bench`: nccl-tests-style table rows (size count type redop time_us
// algbw busbw [#wrong]) and the --json object. Pure formatting over value types; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/cli/bench_layout.h"

namespace ard::cli {

// What the run was (for the header and the JSON object).
struct BenchRunInfo {
  int collective = 1;  // wire::Collective
  int dtype = 9;       // wire::DataType
  int reduce_op = 1;   // wire::ReduceOp (reported as "none" for non-reductions)
  int ranks = 0;
  int np = 0;
  std::vector<std::string> sockets;
  int warmup = 0;
  int iters = 0;
  bool check = false;
  std::string job;
};

// One size, aggregated over ranks.
struct BenchRow {
  BenchLayout layout;
  double time_us = 0;  // max over ranks of each rank's mean iteration time
  uint64_t wrong = 0;  // wrong elements, summed over ranks (only with --check)
};

// algbw = size / time in GB/s (1e9 bytes); busbw = algbw * BusBandwidthFactor.
double AlgBandwidth(const BenchRow& row);
double BusBandwidth(const BenchRow& row, const BenchRunInfo& info);

// Comment lines describing the run, then the column header; each line ends in '\n'.
std::string FormatTableHeader(const BenchRunInfo& info);
// One line, '\n'-terminated.
std::string FormatTableRow(const BenchRow& row, const BenchRunInfo& info);
// "# Avg bus bandwidth    : X" (and "# Out of bounds values : N" with --check), as nccl-tests.
std::string FormatTableFooter(const std::vector<BenchRow>& rows, const BenchRunInfo& info);

// {"op":..,"dtype":..,"redop":..,"ranks":n,"np":..,"sockets":[..],"job":..,"warmup":..,
//  "iters":..,"rows":[{"size":..,"count":..,"type":..,"redop":..,"time_us":..,"algbw":..,
//  "busbw":..[,"wrong":..]}],"avg_busbw":..}, one line with '\n'.
std::string FormatJson(const std::vector<BenchRow>& rows, const BenchRunInfo& info);

}  // namespace ard::cli

// The output of `allreducectl bench`: nccl-tests-style table rows (size count type redop time_us
// algbw busbw [#wrong]) and the --json object. Pure formatting over value types; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctl/bench_layout.h"

namespace ard::ctl {

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
  bool gpu = false;  // --device gpu
  // Set for a peer's rows (the NCCL peer of --device gpu): what it is, e.g. "NCCL 2.28.3
  // ncclAllReduce, 2 ranks in one process (GPUs 0-1)"; `sockets` and `job` are then unused.
  std::string peer;
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
//  "busbw":..[,"wrong":..]}],"avg_busbw":..}, one line with '\n'. With --device gpu it also has
//  "device":"gpu" and, when a peer was measured (`peer` not null),
//  "peer":{"name":..,"ranks":..,"rows":[..as above..],"avg_busbw":..} and
//  "ratios":[{"size":..,"time":..,"busbw":..}] (see FormatRatioTable).
std::string FormatJson(const std::vector<BenchRow>& rows, const BenchRunInfo& info,
                       const std::vector<BenchRow>* peer_rows = nullptr,
                       const BenchRunInfo* peer_info = nullptr);

// The daemon path next to a peer, size by size (rows of equal index): time ratio = daemon time /
// peer time (above 1: the daemon is slower), busbw ratio = daemon busbw / peer busbw (each with
// its own rank count). Comment lines and rows, each ending in '\n'.
std::string FormatRatioTable(const std::vector<BenchRow>& rows, const BenchRunInfo& info,
                             const std::vector<BenchRow>& peer_rows, const BenchRunInfo& peer_info);

}  // namespace ard::ctl

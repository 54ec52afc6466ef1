// What the peer benchmarks (gloo_allreduce_bench, mpi_allreduce_bench) share with
// `allreducectl bench` (ctl/README.md), so that their tables line up column for column:
// options, nccl-tests size lists, the data pattern behind --check and the row format.
// Plain C (the MPI benchmark is C); pure functions, no globals, any thread.
#pragma once

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { kArdBenchMaxSizes = 64 };

// Options common to both programs. Sizes are bytes per rank (nccl-tests "size").
typedef struct ArdBenchOptions {
  uint64_t sizes[kArdBenchMaxSizes];
  int num_sizes;
  int warmup;  // untimed iterations per size (and per algorithm)
  int iters;   // timed iterations per size
  int check;   // 1: fill inputs with ArdBenchPattern and count wrong result elements
} ArdBenchOptions;

// Fills defaults: sizes 4:256M, warmup 5, iters 20, no check.
void ArdBenchDefaults(ArdBenchOptions* options);

// Consumes argv[*i] (and its value, advancing *i) when it is one of --sizes, --warmup, --iters,
// --check, in `--flag value` or `--flag=value` form. Returns 1 when consumed, 0 when the flag is
// not a common one, -1 (message on stderr) when its value is bad.
int ArdBenchParseFlag(int argc, char** argv, int* i, ArdBenchOptions* options);

// nccl-tests' size syntax: "A:B" doubles from A to B inclusive, "A,B,C" is a list; suffixes K, M,
// G are KiB, MiB, GiB. Returns the number of sizes written to `out` (at most `max`), -1 on error.
int ArdBenchParseSizes(const char* text, uint64_t* out, int max);

// Input element `i` of `rank`: a small integer, so sums over a few ranks are exact in float32
// and do not depend on the reduction order. Its period (7) is odd, so shifted results fail.
float ArdBenchPattern(int rank, uint64_t i);

// How many of `count` result elements differ from the sum over `ranks` ranks of the pattern.
uint64_t ArdBenchCountWrong(const float* result, uint64_t count, int ranks);

// The nccl-tests header (two comment lines) with extra column titles appended (may be "").
void ArdBenchPrintColumns(FILE* out, int check, const char* extra_titles);

// One row: size, count, float32, sum, time (us), algbw and busbw (GB/s, 1e9 bytes;
// busbw = algbw * 2(n-1)/n), #wrong when `check`, then `extra` (may be ""). Flushes `out`.
void ArdBenchPrintRow(FILE* out, uint64_t size_bytes, double time_us, int ranks, int check,
                      uint64_t wrong, const char* extra);

// Monotonic clock in microseconds.
double ArdBenchNowUs(void);

#ifdef __cplusplus
}  // extern "C"
#endif

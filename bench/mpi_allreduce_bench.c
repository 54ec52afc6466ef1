// mpi_allreduce_bench: MPI_Allreduce (float32, sum, out of place) timed like nccl-tests and
// `allreducectl bench`, as a peer to compare the daemon with. Launched by mpirun; the transport is
// whatever mpirun's --mca flags select (bench/run_peers.sh: TCP over loopback, and vader).
//
//   mpirun -np 4 bench/mpi_allreduce_bench [--sizes 4:256M] [--warmup 5] [--iters 20] [--check]
//
// Per size: warmup iterations, MPI_Barrier, iters timed iterations; time = the slowest rank's
// mean iteration (MPI_Reduce MAX to rank 0, which alone prints). With --check, inputs are
// ArdBenchPattern and the first warm-up result and the last timed result are compared element by
// element; any wrong element makes the exit status 1.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

static void Usage(void) {
  fprintf(stderr,
          "usage: mpirun -np N mpi_allreduce_bench [--sizes 4:256M] [--warmup 5] [--iters 20]"
          " [--check]\n");
}

// One size: returns the slowest rank's mean iteration time (valid on rank 0) and adds this
// rank's wrong elements to *wrong.
static double RunSize(const ArdBenchOptions* o, uint64_t size, float* in, float* out, int rank,
                      int ranks, uint64_t* wrong) {
  int count = (int)(size / sizeof(float));
  if (o->check) {
    for (int i = 0; i < count; ++i) in[i] = ArdBenchPattern(rank, (uint64_t)i);
  }
  for (int w = 0; w < o->warmup; ++w) {
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (o->check && w == 0) *wrong += ArdBenchCountWrong(out, (uint64_t)count, ranks);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = ArdBenchNowUs();
  for (int it = 0; it < o->iters; ++it) {
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double mean = (ArdBenchNowUs() - start) / o->iters;
  if (o->check) *wrong += ArdBenchCountWrong(out, (uint64_t)count, ranks);
  double slowest = 0;
  MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  ArdBenchOptions o;
  ArdBenchDefaults(&o);
  for (int i = 1; i < argc; ++i) {
    int r = ArdBenchParseFlag(argc, argv, &i, &o);
    if (r <= 0) {
      if (r == 0 && rank == 0) fprintf(stderr, "unknown flag: %s\n", argv[i]);
      if (rank == 0) Usage();
      MPI_Finalize();
      return 2;
    }
  }

  uint64_t max_size = 0;
  for (int s = 0; s < o.num_sizes; ++s) {
    if (o.sizes[s] > max_size) max_size = o.sizes[s];
  }
  // MPI counts are int: 8 GiB of float32 is the limit, far above what is useful here.
  if (max_size / sizeof(float) > 0x7fffffff) {
    if (rank == 0) fprintf(stderr, "size too large for an int count\n");
    MPI_Finalize();
    return 2;
  }
  // calloc: without --check the inputs are zeros, as in allreducectl bench.
  float* in = calloc(max_size / sizeof(float) + 1, sizeof(float));
  float* out = calloc(max_size / sizeof(float) + 1, sizeof(float));
  if (in == NULL || out == NULL) {
    fprintf(stderr, "rank %d: out of memory for %llu bytes\n", rank, (unsigned long long)max_size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    char* newline = strchr(version, '\n');
    if (newline != NULL) *newline = '\0';
    printf(
        "# mpi_allreduce_bench: MPI_Allreduce float32 sum (out of place), %d ranks, warmup %d,"
        " iters %d\n# library: %s\n",
        ranks, o.warmup, o.iters, version);
    ArdBenchPrintColumns(stdout, o.check, "");
  }
  uint64_t total_wrong = 0;
  for (int s = 0; s < o.num_sizes; ++s) {
    if (o.sizes[s] < sizeof(float)) continue;
    uint64_t size = o.sizes[s] / sizeof(float) * sizeof(float);
    uint64_t wrong = 0, all_wrong = 0;
    double time_us = RunSize(&o, size, in, out, rank, ranks, &wrong);
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) ArdBenchPrintRow(stdout, size, time_us, ranks, o.check, all_wrong, "");
    total_wrong += all_wrong;
  }
  if (rank == 0 && o.check) {
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)total_wrong,
           total_wrong == 0 ? "OK" : "FAILED");
  }
  fflush(stdout);
  free(in);
  free(out);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}

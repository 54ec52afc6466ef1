// Options of `allreducectl bench` and its hidden `bench-worker` subcommand: parsing (sizes with
// K/M/G suffixes, ranges that double), the names of collectives, dtypes and reduce ops (values of
// proto/local_wire.h), and the argument list the parent hands to each worker it re-executes.
// Pure functions over value types; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ard::ctl {

struct BenchOptions {
  std::vector<std::string> sockets;  // daemon local sockets, one per "host"
  int np = 2;                        // client processes per socket
  std::vector<uint64_t> sizes;       // requested sizes in bytes (nccl-tests "size")
  int collective = 1;                // wire::Collective (allreduce .. reducescatter)
  int dtype = 9;                     // wire::DataType
  int reduce_op = 1;                 // wire::ReduceOp
  int warmup = 5;                    // untimed iterations per size
  int iters = 20;                    // timed iterations per size
  bool check = false;                // verify results (see bench_pattern.h)
  bool json = false;
  std::string job;          // empty: bench-<pid>-<ms since epoch>
  int timeout_ms = 600000;  // the whole run, all sizes
  bool gpu = false;         // --device gpu: tensors in CUDA device memory (ard_submit_device)
  bool shm = false;         // --device shm: host tensors in an ard_alloc buffer, results in place
  enum class Peer { kAuto, kNccl, kNone };
  Peer peer = Peer::kAuto;  // --peer (GPU only): NCCL measured next to the daemon path

  // bench-worker only (set by the parent).
  int parent_pid = 0;  // the worker dies with this process (PR_SET_PDEATHSIG)
  // bench-nccl only: the peer runs one rank per GPU 0..peer_gpus-1 in one process.
  int peer_gpus = 0;

  int ranks() const { return np * static_cast<int>(sockets.size()); }
};

// "4096", "4K", "16M", "1G" (K/M/G = KiB/MiB/GiB, either case). At least 1, at most
// wire::kMaxTensorBytes.
absl::StatusOr<uint64_t> ParseSize(const std::string& text);

// "A:B": A, 2A, 4A, ... while <= B (B itself is listed when the doubling reaches it exactly);
// "A,B,C": that list, in that order.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& text);

// Parses the arguments after `bench` (or `bench-worker` and `bench-nccl`, which also take
// --parent_pid and --peer_gpus).
// -h/--help sets *help. InvalidArgument names the bad option.
absl::Status ParseBenchArgs(const std::vector<std::string>& args, bool worker,
                            BenchOptions* options, bool* help);

// The arguments for `bench-worker` that reproduce `options` (sizes as an explicit list).
std::vector<std::string> WorkerArgs(const BenchOptions& options);

// Names as on the command line and in reports; "?" for unknown values.
const char* CollectiveName(int collective);
const char* DataTypeName(int dtype);
const char* ReduceOpName(int reduce_op);
bool IsReduction(int collective);  // allreduce, reducescatter

// The --help text of `allreducectl bench`.
extern const char kBenchUsage[];

}  // namespace ard::ctl

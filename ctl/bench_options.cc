#include "ctl/bench_options.h"

#include <cctype>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/local_wire.h"

namespace ard::ctl {

const char kBenchUsage[] =
    "usage: allreducectl bench --sockets PATH[,PATH...] [options]\n"
    "\n"
    "Benchmarks collectives through the real client library, nccl-tests style: starts --np\n"
    "client processes per daemon socket (each socket = one host), runs each size --warmup times,\n"
    "then a barrier, then --iters timed iterations. One iteration = submit (copy into the input\n"
    "arena) + wait + copy the result out + release. time = the slowest rank's mean.\n"
    "\n"
    "options:\n"
    "  --sockets A[,B...]   daemon local sockets (default $ALLREDUCED_SOCKET)\n"
    "  --np N               processes per socket (default 2); ranks n = N * sockets\n"
    "  --sizes A:B | A,B,.. bytes; A:B doubles from A up to B; suffixes K M G (KiB MiB GiB)\n"
    "                       (default 4:256M)\n"
    "  --op OP              allreduce|allgather|broadcast|alltoall|reducescatter (allreduce)\n"
    "  --dtype T            float32|float16|bfloat16|float64|int32|int64|int8|uint8 (float32)\n"
    "  --reduce R           sum|average|min|max|product (sum; allreduce, reducescatter)\n"
    "  --warmup N           untimed iterations per size (5)\n"
    "  --iters N            timed iterations per size (20)\n"
    "  --check              verify every element of the warm-up results and the last timed\n"
    "                       result; adds #wrong (wrong elements, all ranks); exit 1 if any\n"
    "  --json               one JSON object instead of the table\n"
    "  --job NAME           job name (default bench-<pid>-<ms>)\n"
    "  --timeout_ms N       limit for the whole run (600000)\n"
    "  --device cpu|shm|gpu where the tensors live (cpu). shm: host tensors built in shared\n"
    "                       memory (ard_alloc) and results read in place: no copy in the\n"
    "                       client. gpu: each worker allocates its\n"
    "                       tensors on CUDA device local_rank mod GPUs, submits with\n"
    "                       ard_submit_device on its own stream and times up to the stream's\n"
    "                       synchronization; allreduce only. Fails at once without a CUDA\n"
    "                       driver and GPU\n"
    "  --peer auto|nccl|none  with --device gpu: also measure ncclAllReduce (libnccl.so.2,\n"
    "                       one process, one rank per GPU the workers used) on the same sizes\n"
    "                       and print the ratios; auto: skip with a warning if NCCL cannot\n"
    "                       run, nccl: that is a failure (auto)\n"
    "\n"
    "Sizes follow nccl-tests: size is the largest buffer of one rank, rounded down to whole\n"
    "elements (and to a multiple of n elements for allgather, alltoall, reducescatter; sizes\n"
    "that round to 0 are skipped). allreduce, broadcast: input = output = size. allgather: input\n"
    "size/n, output size. reducescatter: input size, output size/n. alltoall: input = output =\n"
    "size, size/n to each peer. count (elements) is nccl-tests' count: the whole buffer for\n"
    "allreduce and broadcast, one rank's input for allgather, one rank's output for\n"
    "reducescatter, one peer's block for alltoall. algbw = size / time (GB/s, 1e9 B);\n"
    "busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (allgather, reducescatter, alltoall),\n"
    "1 (broadcast, root rank 0).\n"
    "\n"
    "Exit: 0 ok, 1 a rank failed (its message on stderr) or a result was wrong, 2 usage.\n";

namespace {

struct Named {
  const char* name;
  int value;
};

constexpr Named kCollectives[] = {
    {"allreduce", 1}, {"allgather", 2}, {"broadcast", 3}, {"alltoall", 4}, {"reducescatter", 5}};
constexpr Named kDataTypes[] = {{"uint8", 1},   {"int8", 2},     {"int32", 5},   {"int64", 6},
                                {"float16", 7}, {"bfloat16", 8}, {"float32", 9}, {"float64", 10}};
constexpr Named kReduceOps[] = {{"sum", 1}, {"average", 2}, {"min", 3}, {"max", 4}, {"product", 5}};

template <size_t N>
const char* NameOf(const Named (&table)[N], int value) {
  for (const Named& n : table) {
    if (n.value == value) return n.name;
  }
  return "?";
}

template <size_t N>
absl::Status ValueOf(const Named (&table)[N], const std::string& flag, const std::string& name,
                     int* out) {
  std::vector<std::string> names;
  for (const Named& n : table) {
    if (name == n.name) {
      *out = n.value;
      return absl::OkStatus();
    }
    names.push_back(n.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " must be one of ", absl::StrJoin(names, "|"), ", not '", name, "'"));
}

absl::Status ParseInt(const std::string& flag, const std::string& text, int min, int* out) {
  if (!absl::SimpleAtoi(text, out) || *out < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " needs an integer >= ", min, ", not '", text, "'"));
  }
  return absl::OkStatus();
}

bool ValidJobName(const std::string& job) {
  if (job.empty() || job.size() >= wire::kJobNameBytes) return false;
  for (char c : job) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

const char* CollectiveName(int collective) { return NameOf(kCollectives, collective); }
const char* DataTypeName(int dtype) { return NameOf(kDataTypes, dtype); }
const char* ReduceOpName(int reduce_op) { return NameOf(kReduceOps, reduce_op); }
bool IsReduction(int collective) { return collective == 1 || collective == 5; }

absl::StatusOr<uint64_t> ParseSize(const std::string& text) {
  std::string digits = text;
  uint64_t unit = 1;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        unit = 1ull << 10;
        break;
      case 'M':
        unit = 1ull << 20;
        break;
      case 'G':
        unit = 1ull << 30;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  uint64_t value = 0;
  if (digits.empty() || !std::isdigit(static_cast<unsigned char>(digits[0])) ||
      !absl::SimpleAtoi(digits, &value) || value == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "': want a positive number with an optional K, M or G"));
  }
  if (value > wire::kMaxTensorBytes / unit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size ", text, " is larger than the largest tensor (", wire::kMaxTensorBytes, " bytes)"));
  }
  return value * unit;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& text) {
  std::vector<uint64_t> sizes;
  std::vector<std::string> range = absl::StrSplit(text, ':');
  if (range.size() == 2) {
    absl::StatusOr<uint64_t> from = ParseSize(range[0]);
    if (!from.ok()) return from.status();
    absl::StatusOr<uint64_t> to = ParseSize(range[1]);
    if (!to.ok()) return to.status();
    if (*from > *to) {
      return absl::InvalidArgumentError(absl::StrCat("size range ", text, " is empty"));
    }
    for (uint64_t s = *from; s <= *to; s *= 2) sizes.push_back(s);
    return sizes;
  }
  if (range.size() > 2) return absl::InvalidArgumentError(absl::StrCat("bad sizes '", text, "'"));
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    absl::StatusOr<uint64_t> s = ParseSize(std::string(item));
    if (!s.ok()) return s.status();
    sizes.push_back(*s);
  }
  return sizes;
}

absl::Status ParseBenchArgs(const std::vector<std::string>& args, bool worker, BenchOptions* o,
                            bool* help) {
  *help = false;
  std::string sizes;
  std::string sockets;
  if (const char* env = std::getenv("ALLREDUCED_SOCKET"); env != nullptr) sockets = env;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string v;
    auto value = [&](const std::string& flag) {
      if (a.rfind(flag + "=", 0) == 0) {
        v = a.substr(flag.size() + 1);
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        v = args[++i];
        return true;
      }
      return false;
    };
    absl::Status st;
    if (a == "-h" || a == "--help") {
      *help = true;
      return absl::OkStatus();
    } else if (a == "--check") {
      o->check = true;
    } else if (a == "--json") {
      o->json = true;
    } else if (value("--sockets")) {
      sockets = v;
    } else if (value("--sizes")) {
      sizes = v;
    } else if (value("--np")) {
      st = ParseInt("--np", v, 1, &o->np);
    } else if (value("--op")) {
      st = ValueOf(kCollectives, "--op", v, &o->collective);
    } else if (value("--dtype")) {
      st = ValueOf(kDataTypes, "--dtype", v, &o->dtype);
    } else if (value("--reduce")) {
      st = ValueOf(kReduceOps, "--reduce", v, &o->reduce_op);
    } else if (value("--warmup")) {
      st = ParseInt("--warmup", v, 0, &o->warmup);
    } else if (value("--iters")) {
      st = ParseInt("--iters", v, 1, &o->iters);
    } else if (value("--timeout_ms")) {
      st = ParseInt("--timeout_ms", v, 1, &o->timeout_ms);
    } else if (value("--job")) {
      o->job = v;
      if (!ValidJobName(v)) {
        st = absl::InvalidArgumentError(absl::StrCat("--job must be 1 to ", wire::kJobNameBytes - 1,
                                                     " of [A-Za-z0-9._-], not '", v, "'"));
      }
    } else if (value("--device")) {
      if (v != "cpu" && v != "shm" && v != "gpu") {
        st = absl::InvalidArgumentError(
            absl::StrCat("--device must be cpu, shm or gpu, not '", v, "'"));
      }
      o->gpu = v == "gpu";
      o->shm = v == "shm";
    } else if (value("--peer")) {
      if (v == "auto") {
        o->peer = BenchOptions::Peer::kAuto;
      } else if (v == "nccl") {
        o->peer = BenchOptions::Peer::kNccl;
      } else if (v == "none") {
        o->peer = BenchOptions::Peer::kNone;
      } else {
        st = absl::InvalidArgumentError(
            absl::StrCat("--peer must be auto, nccl or none, not '", v, "'"));
      }
    } else if (worker && value("--parent_pid")) {
      st = ParseInt("--parent_pid", v, 1, &o->parent_pid);
    } else if (worker && value("--peer_gpus")) {
      st = ParseInt("--peer_gpus", v, 1, &o->peer_gpus);
    } else {
      st = absl::InvalidArgumentError(absl::StrCat(
          a.rfind("-", 0) == 0 ? "unknown option or missing value: " : "unexpected argument ", a));
    }
    if (!st.ok()) return st;
  }
  o->sockets.clear();
  for (absl::string_view s : absl::StrSplit(sockets, ',', absl::SkipEmpty())) {
    o->sockets.emplace_back(s);
  }
  if (o->sockets.empty()) {
    return absl::InvalidArgumentError("--sockets is required (or set ALLREDUCED_SOCKET)");
  }
  if (o->ranks() > static_cast<int>(wire::kMaxSplits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", wire::kMaxSplits, " ranks (--np x sockets)"));
  }
  if (o->gpu && o->collective != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device gpu serves allreduce only (the daemon's GPU path), not --op ",
                     CollectiveName(o->collective)));
  }
  // Device tensors: the launcher sizes each worker's staging arena for the largest one
  // (ALLREDUCED_GPU_ARENA_BYTES).
  if (sizes.empty()) sizes = "4:256M";
  absl::StatusOr<std::vector<uint64_t>> parsed = ParseSizes(sizes);
  if (!parsed.ok()) return parsed.status();
  o->sizes = *std::move(parsed);
  return absl::OkStatus();
}

std::vector<std::string> WorkerArgs(const BenchOptions& o) {
  std::vector<std::string> args = {
      "--sockets=" + absl::StrJoin(o.sockets, ","),
      absl::StrCat("--np=", o.np),
      "--sizes=" + absl::StrJoin(o.sizes, ","),
      absl::StrCat("--op=", CollectiveName(o.collective)),
      absl::StrCat("--dtype=", DataTypeName(o.dtype)),
      absl::StrCat("--reduce=", ReduceOpName(o.reduce_op)),
      absl::StrCat("--warmup=", o.warmup),
      absl::StrCat("--iters=", o.iters),
      absl::StrCat("--timeout_ms=", o.timeout_ms),
      absl::StrCat("--parent_pid=", o.parent_pid),
  };
  if (!o.job.empty()) args.push_back("--job=" + o.job);
  if (o.check) args.push_back("--check");
  if (o.gpu) args.push_back("--device=gpu");
  if (o.shm) args.push_back("--device=shm");
  if (o.peer_gpus > 0) args.push_back(absl::StrCat("--peer_gpus=", o.peer_gpus));
  return args;
}

}  // namespace ard::ctl

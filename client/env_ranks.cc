#include "client/env_ranks.h"

#include <errno.h>
#include <stdlib.h>

#include <climits>

namespace ard::client {
namespace {

// One launcher's variable names; nullptr where the launcher has none.
struct Family {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  bool lenient_local_size;  // a non-integer local size means "unknown", not an error
};

constexpr Family kFamilies[] = {
    {"ALLREDUCED", "ALLREDUCED_RANK", "ALLREDUCED_SIZE", "ALLREDUCED_LOCAL_RANK",
     "ALLREDUCED_LOCAL_SIZE", false},
    {"OMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", false},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", false},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", true},
    {"HOROVOD", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", false},
};

bool IsSet(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0';
}

// Reads `name` into *out (left at -1 when unset). `min` is 0 for ranks, 1 for sizes.
Status ReadVar(const EnvLookup& env, const char* name, int64_t min, bool lenient, int* out) {
  const char* value = env(name);
  if (value == nullptr || value[0] == '\0') return OkStatus();
  int64_t parsed;
  if (ParseInt64(value, min, INT_MAX, &parsed)) {
    *out = static_cast<int>(parsed);
    return OkStatus();
  }
  if (lenient) return OkStatus();
  return InvalidArgument(std::string("environment variable ") + name + "='" + value +
                         "' is not an integer >= " + std::to_string(min));
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return ::getenv(name); };
}

bool ParseInt64(const char* text, int64_t min, int64_t max, int64_t* out) {
  if (text == nullptr || text[0] == '\0') return false;
  if (!(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return false;
  errno = 0;
  char* end = nullptr;
  long long value = ::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  if (value < min || value > max) return false;
  *out = value;
  return true;
}

Status RanksFromEnv(const EnvLookup& env, RankInfo* out) {
  *out = RankInfo();
  for (const Family& family : kFamilies) {
    if (!IsSet(env, family.rank) && !IsSet(env, family.size)) continue;
    RankInfo info;
    info.family = family.name;
    ARD_CLIENT_RETURN_IF_ERROR(ReadVar(env, family.rank, 0, false, &info.rank));
    ARD_CLIENT_RETURN_IF_ERROR(ReadVar(env, family.size, 1, false, &info.size));
    ARD_CLIENT_RETURN_IF_ERROR(ReadVar(env, family.local_rank, 0, false, &info.local_rank));
    ARD_CLIENT_RETURN_IF_ERROR(
        ReadVar(env, family.local_size, 1, family.lenient_local_size, &info.local_size));
    *out = info;
    return OkStatus();
  }
  return OkStatus();
}

Status ValidateRanks(const RankInfo& r) {
  // -1 is "unset" (ard_options' default: taken from the launcher's environment); say so.
  struct Value {
    const char* name;
    int value;
    int min;
  };
  for (const Value& v : {Value{"rank", r.rank, 0}, Value{"local_rank", r.local_rank, 0},
                         Value{"size", r.size, 1}, Value{"local_size", r.local_size, 1}}) {
    if (v.value < v.min && v.value != -1) {
      return InvalidArgument(std::string(v.name) + " " + std::to_string(v.value) + " must be >= " +
                             std::to_string(v.min) + " (or -1: unset, taken from the launcher)");
    }
  }
  if (r.rank >= 0 && r.size > 0 && r.rank >= r.size) {
    return InvalidArgument("rank " + std::to_string(r.rank) + " is not below size " +
                           std::to_string(r.size));
  }
  if (r.local_rank >= 0 && r.local_size > 0 && r.local_rank >= r.local_size) {
    return InvalidArgument("local_rank " + std::to_string(r.local_rank) +
                           " is not below local_size " + std::to_string(r.local_size));
  }
  if (r.size > 0 && r.local_size > r.size) {
    return InvalidArgument("local_size " + std::to_string(r.local_size) + " exceeds size " +
                           std::to_string(r.size));
  }
  return OkStatus();
}

}  // namespace ard::client

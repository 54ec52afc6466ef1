// The job's name (DESIGN.md "Jobs, ranks and membership"): ard_options.job, else $ALLREDUCED_JOB,
// else the identity of the launch that started this process, taken from the launcher family whose
// rank variables env_ranks.h chose (so two launches running at once never share a name), else
// "default" for a process that is alone in its job. A process of a multi-rank job whose launcher
// exports no identity is refused rather than registered under a name another launch may also use.
// Pure functions over an injectable environment; any thread.
#pragma once

#include <string>

#include "client/env_ranks.h"
#include "client/status.h"

namespace ard::client {

inline constexpr char kDefaultJob[] = "default";

// Longest name derived from a launcher: leaves room below wire::kJobNameBytes for the TensorFlow
// plugin's process-set sub-jobs "<job>.ps<id>".
inline constexpr size_t kMaxDerivedJobBytes = 48;

struct JobName {
  std::string name;
  // Where the name came from, for messages: "ALLREDUCED_JOB", "PMIX_NAMESPACE", ...; empty for
  // the default.
  std::string source;
};

// `option` is ard_options.job (nullptr: not set); `ranks` the resolved ranks, whose `family` names
// the launcher (empty when none was read). InvalidArgument, naming the launcher family and saying
// to set ALLREDUCED_JOB, when the job has more than one rank (a size, local size, rank or local
// rank says so) and neither the option, the variable nor the launcher names it. The name itself is
// not validated here (config.cc does that for every source).
Status ResolveJobName(const char* option, const EnvLookup& env, const RankInfo& ranks,
                      JobName* out);

// The identity the launcher of `family` ("OMPI", "PMI", "SLURM", "HOROVOD") gives this launch, as
// a valid job name of at most kMaxDerivedJobBytes ("slurm-4242.0", "ompi-1938292737"); false when
// it exports none. Every rank of one launch derives the same name, on every host.
bool LauncherJobName(const std::string& family, const EnvLookup& env, JobName* out);

// [A-Za-z0-9._-]+ and shorter than wire::kJobNameBytes (the daemon's rule too).
bool IsValidJobName(const std::string& job);

// prefix + "-" + id when that is a valid job name of at most kMaxDerivedJobBytes; otherwise the
// id's valid characters (others become '_'), shortened to fit, then "-" and 16 hex digits of its
// FNV-1a hash, so distinct ids stay distinct names.
std::string DerivedJobName(const std::string& prefix, const std::string& id);

}  // namespace ard::client

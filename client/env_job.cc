#include "client/env_job.h"

#include <cstdio>
#include <initializer_list>

#include "proto/local_wire.h"

namespace ard::client {
namespace {

// What the refusal says about each launcher family, and how to name the job with it.
struct Launcher {
  const char* family;  // RankInfo::family
  const char* what;
  const char* hint;
};

constexpr Launcher kLaunchers[] = {
    {"ALLREDUCED", "its ranks come from ALLREDUCED_RANK/ALLREDUCED_SIZE, which name no job",
     "export ALLREDUCED_JOB=run42 next to them"},
    {"OMPI",
     "its launcher is Open MPI (OMPI_COMM_WORLD_*) but neither PMIX_NAMESPACE nor "
     "OMPI_MCA_ess_base_jobid is set",
     "mpirun -x ALLREDUCED_JOB=run42 ..."},
    {"PMI",
     "its launcher is PMI (MPICH/Hydra or Intel MPI: PMI_RANK/PMI_SIZE), which exports no job id "
     "(no PMI_JOBID, PMI_KVSNAME or Slurm step)",
     "mpiexec -genv ALLREDUCED_JOB run42 ..."},
    {"SLURM", "its launcher is Slurm (SLURM_PROCID/SLURM_NTASKS) but SLURM_JOB_ID is not set",
     "srun --export=ALL,ALLREDUCED_JOB=run42 ..."},
    {"HOROVOD",
     "its launcher is Horovod (HOROVOD_RANK/HOROVOD_SIZE) but HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT "
     "are not set",
     "export ALLREDUCED_JOB=run42 before horovodrun"},
};

bool ValidJobChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// The first of `names` that is set (non-empty): its value in *value, its name in *which.
bool First(const EnvLookup& env, std::initializer_list<const char*> names, std::string* value,
           std::string* which) {
  for (const char* name : names) {
    const char* v = env(name);
    if (v != nullptr && v[0] != '\0') {
      *value = v;
      *which = name;
      return true;
    }
  }
  return false;
}

// Slurm's job and step. Every task of one srun step shares both; two steps of one job (two sruns,
// even at once) differ in the step. `real_step_only`: only a step srun started (not the batch,
// extern or interactive step, whose ids are 0xfffffffa and above), for processes whose ranks come
// from another launcher that Slurm may not have started once per launch.
bool SlurmStep(const EnvLookup& env, bool real_step_only, JobName* out) {
  std::string job, job_var, step, step_var;
  if (!First(env, {"SLURM_JOB_ID", "SLURM_JOBID"}, &job, &job_var)) return false;
  const bool has_step = First(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, &step, &step_var);
  int64_t step_id;
  if (real_step_only && !(has_step && ParseInt64(step.c_str(), 0, 0xfffffff9, &step_id))) {
    return false;
  }
  out->name = DerivedJobName("slurm", has_step ? job + "." + step : job);
  out->source = has_step ? job_var + "/" + step_var : job_var;
  return true;
}

uint64_t Fnv1a64(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string RankText(const RankInfo& r) {
  auto known = [](int v) { return v >= 0 ? std::to_string(v) : std::string("?"); };
  return "rank " + known(r.rank) + " of " + known(r.size);
}

// Whether anything known says the job has more than this one process.
bool MultiRank(const RankInfo& r) {
  return r.size > 1 || r.local_size > 1 || r.rank > 0 || r.local_rank > 0;
}

}  // namespace

bool IsValidJobName(const std::string& job) {
  if (job.empty() || job.size() >= wire::kJobNameBytes) return false;
  for (char c : job) {
    if (!ValidJobChar(c)) return false;
  }
  return true;
}

std::string DerivedJobName(const std::string& prefix, const std::string& id) {
  std::string plain = prefix + "-" + id;
  if (plain.size() <= kMaxDerivedJobBytes && IsValidJobName(plain)) return plain;
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a64(id)));
  std::string name = prefix + "-";
  const size_t head_end = kMaxDerivedJobBytes - 1 - 16;  // room for "-" and the hash
  for (size_t i = 0; i < id.size() && name.size() < head_end; ++i) {
    name += ValidJobChar(id[i]) ? id[i] : '_';
  }
  return name + "-" + hash;
}

bool LauncherJobName(const std::string& family, const EnvLookup& env, JobName* out) {
  std::string id, which;
  if (family == "OMPI") {
    // Open MPI 4 and 5 give every process of one mpirun the same PMIx namespace (4.x also as its
    // ORTE job id; older releases only as OMPI_MCA_orte_ess_jobid).
    if (!First(env, {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}, &id,
               &which)) {
      return false;
    }
    *out = {DerivedJobName("ompi", id), which};
    return true;
  }
  if (family == "PMI") {
    // Hydra (MPICH, Intel MPI) exports only PMI_RANK/PMI_SIZE/PMI_FD or PMI_PORT/PMI_ID and
    // MPI_LOCALRANKID/MPI_LOCALNRANKS; other PMI servers (Slurm's, PALS, ParaStation) name the
    // job. Hydra started by srun: the Slurm step.
    if (First(env, {"PMI_JOBID", "PMI_KVSNAME"}, &id, &which)) {
      *out = {DerivedJobName("pmi", id), which};
      return true;
    }
    return SlurmStep(env, /*real_step_only=*/true, out);
  }
  if (family == "SLURM") return SlurmStep(env, /*real_step_only=*/false, out);
  if (family == "HOROVOD") {
    // horovodrun (Gloo) runs one rendezvous server per launch and gives every worker its address.
    std::string addr, port;
    if (!First(env, {"HOROVOD_GLOO_RENDEZVOUS_ADDR"}, &addr, &which) ||
        !First(env, {"HOROVOD_GLOO_RENDEZVOUS_PORT"}, &port, &which)) {
      return false;
    }
    *out = {DerivedJobName("horovod", addr + "-" + port),
            "HOROVOD_GLOO_RENDEZVOUS_ADDR/HOROVOD_GLOO_RENDEZVOUS_PORT"};
    return true;
  }
  return false;  // ALLREDUCED: our launchers set ALLREDUCED_JOB themselves
}

Status ResolveJobName(const char* option, const EnvLookup& env, const RankInfo& ranks,
                      JobName* out) {
  if (option != nullptr) {
    *out = {option, "ard_options.job"};
    return OkStatus();
  }
  const char* value = env("ALLREDUCED_JOB");
  if (value != nullptr && value[0] != '\0') {
    *out = {value, "ALLREDUCED_JOB"};
    return OkStatus();
  }
  if (LauncherJobName(ranks.family, env, out)) return OkStatus();
  if (!MultiRank(ranks)) {
    *out = {kDefaultJob, ""};
    return OkStatus();
  }
  std::string what = "its ranks come from ard_options, with no launcher variables";
  std::string hint = "or set ard_options.job";
  for (const Launcher& l : kLaunchers) {
    if (ranks.family == l.family) {
      what = l.what;
      hint = std::string("e.g. ") + l.hint;
    }
  }
  return InvalidArgument("cannot tell which job this process (" + RankText(ranks) +
                         ") belongs to: " + what +
                         "; set ALLREDUCED_JOB to a name shared by every rank of this job and by "
                         "no other job running at the same time (" +
                         hint + ")");
}

}  // namespace ard::client

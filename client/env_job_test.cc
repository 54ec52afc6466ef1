// The job name from options, ALLREDUCED_JOB or the launcher (fake environments), and the refusal of
// a multi-rank process whose launcher names no job.
#include "client/env_job.h"

#include <map>
#include <string>

#include "catch2/catch.hpp"
#include "client/config.h"

namespace ard::client {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup Lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

ard_options Defaults() {
  ard_options options;
  ard_options_init(&options);
  return options;
}

// The config ResolveConfig makes from `env` with default options; fails the test on an error.
ClientConfig Resolve(const Env& env) {
  ClientConfig config;
  Status status = ResolveConfig(Defaults(), Lookup(env), &config);
  INFO(status.message());
  REQUIRE(status.ok());
  return config;
}

// The error ResolveConfig gives for `env`; fails the test when it succeeds.
Status Refusal(const Env& env) {
  ClientConfig config;
  Status status = ResolveConfig(Defaults(), Lookup(env), &config);
  INFO("job '" << config.job << "'");
  REQUIRE_FALSE(status.ok());
  return status;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Two processes of one Slurm step: ranks 0 and 1 of 2.
Env Slurm(int rank, const std::string& job, const std::string& step) {
  Env env = {{"SLURM_PROCID", std::to_string(rank)},
             {"SLURM_NTASKS", "2"},
             {"SLURM_LOCALID", std::to_string(rank)}};
  if (!job.empty()) env["SLURM_JOB_ID"] = job;
  if (!step.empty()) env["SLURM_STEP_ID"] = step;
  return env;
}

TEST_CASE("Slurm: the job and step name the job; two steps of one job differ") {
  ClientConfig rank0 = Resolve(Slurm(0, "4242", "0"));
  CHECK(rank0.job == "slurm-4242.0");
  CHECK(rank0.job_source == "SLURM_JOB_ID/SLURM_STEP_ID");
  CHECK(Resolve(Slurm(1, "4242", "0")).job == rank0.job);
  CHECK(Resolve(Slurm(0, "4242", "1")).job == "slurm-4242.1");
  CHECK(Resolve(Slurm(0, "4243", "0")).job == "slurm-4243.0");
  CHECK(Resolve(Slurm(0, "4242", "")).job == "slurm-4242");  // no step (a batch script)
  // Older Slurm spellings.
  CHECK(Resolve({{"SLURM_PROCID", "1"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_JOBID", "7"},
                 {"SLURM_STEPID", "3"}})
            .job == "slurm-7.3");
}

TEST_CASE("Open MPI: the PMIx namespace (4.1 and 5), else the ORTE job id") {
  // What Debian 12's Open MPI 4.1 mpirun sets (`mpirun -np 2 env`).
  Env env = {{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "2"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"PMIX_NAMESPACE", "1938292737"},    {"OMPI_MCA_ess_base_jobid", "1938292737"}};
  ClientConfig config = Resolve(env);
  CHECK(config.job == "ompi-1938292737");
  CHECK(config.job_source == "PMIX_NAMESPACE");
  env.erase("PMIX_NAMESPACE");
  CHECK(Resolve(env).job == "ompi-1938292737");
  env.erase("OMPI_MCA_ess_base_jobid");
  env["OMPI_MCA_orte_ess_jobid"] = "123";
  CHECK(Resolve(env).job == "ompi-123");
  // Open MPI 5 (PRRTE) namespaces hold characters a job name may not: kept readable, made valid,
  // and told apart by a hash.
  env["PMIX_NAMESPACE"] = "prterun-node7-31337@1";
  const std::string ompi5 = Resolve(env).job;
  CHECK(ompi5.rfind("ompi-prterun-node7-31337_1-", 0) == 0);
  CHECK(ompi5.size() == std::string("ompi-prterun-node7-31337_1-").size() + 16);
  env["PMIX_NAMESPACE"] = "prterun-node7-31337_1";  // same after sanitizing, different id
  CHECK(Resolve(env).job == "ompi-prterun-node7-31337_1");
  env["PMIX_NAMESPACE"] = "prterun-node7-31337@2";
  CHECK(Resolve(env).job != ompi5);
}

TEST_CASE("PMI: PMI_JOBID or PMI_KVSNAME, else a Slurm step; Hydra alone names no job") {
  Env hydra = {{"PMI_RANK", "1"},
               {"PMI_SIZE", "2"},
               {"PMI_FD", "5"},
               {"MPI_LOCALRANKID", "1"},
               {"MPI_LOCALNRANKS", "2"}};
  Status refused = Refusal(hydra);
  CHECK(refused.code() == wire::Code::kInvalidArgument);
  CHECK(Contains(refused.message(), "ALLREDUCED_JOB"));
  CHECK(Contains(refused.message(), "PMI (MPICH/Hydra or Intel MPI"));
  CHECK(Contains(refused.message(), "rank 1 of 2"));
  CHECK(Contains(refused.message(), "mpiexec -genv ALLREDUCED_JOB"));

  Env env = hydra;
  env["PMI_KVSNAME"] = "kvs_8054_0";
  CHECK(Resolve(env).job == "pmi-kvs_8054_0");
  env["PMI_JOBID"] = "77.2";
  CHECK(Resolve(env).job == "pmi-77.2");
  // srun --mpi=pmi2 or Hydra's proxies started by srun: the step.
  env = hydra;
  env["SLURM_JOB_ID"] = "900";
  env["SLURM_STEP_ID"] = "4";
  CHECK(Resolve(env).job == "slurm-900.4");
  // The batch step (0xfffffffe) may hold several mpiexecs at once: not an identity for PMI ranks.
  env["SLURM_STEP_ID"] = "4294967294";
  CHECK(Contains(Refusal(env).message(), "PMI"));
  env.erase("SLURM_STEP_ID");
  CHECK(Contains(Refusal(env).message(), "PMI"));
}

TEST_CASE("Horovod: the rendezvous server of horovodrun") {
  Env env = {{"HOROVOD_RANK", "0"},
             {"HOROVOD_SIZE", "4"},
             {"HOROVOD_LOCAL_RANK", "0"},
             {"HOROVOD_LOCAL_SIZE", "2"},
             {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.1.2.3"},
             {"HOROVOD_GLOO_RENDEZVOUS_PORT", "29500"}};
  ClientConfig config = Resolve(env);
  CHECK(config.job == "horovod-10.1.2.3-29500");
  env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = "29501";
  CHECK(Resolve(env).job == "horovod-10.1.2.3-29501");
  env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = "fd00::2";
  const std::string v6 = Resolve(env).job;
  CHECK(v6.rfind("horovod-fd00__2-29501-", 0) == 0);
  CHECK(IsValidJobName(v6));
  env.erase("HOROVOD_GLOO_RENDEZVOUS_PORT");
  Status refused = Refusal(env);
  CHECK(Contains(refused.message(), "Horovod"));
  CHECK(Contains(refused.message(), "ALLREDUCED_JOB"));
}

TEST_CASE("ALLREDUCED_JOB and ard_options.job win over the launcher") {
  Env env = Slurm(1, "4242", "0");
  env["ALLREDUCED_JOB"] = "bert";
  ClientConfig config = Resolve(env);
  CHECK(config.job == "bert");
  CHECK(config.job_source == "ALLREDUCED_JOB");
  ard_options options = Defaults();
  options.job = "mine";
  REQUIRE(ResolveConfig(options, Lookup(env), &config).ok());
  CHECK(config.job == "mine");
  CHECK(config.job_source == "ard_options.job");
  env["ALLREDUCED_JOB"] = "";  // empty counts as unset
  CHECK(Resolve(env).job == "slurm-4242.0");
}

TEST_CASE("identity comes from the launcher whose ranks were read, never another one") {
  // mpirun inside a Slurm allocation: ranks and identity from Open MPI, not the Slurm step (two
  // mpiruns of one batch script share it).
  Env env = Slurm(0, "4242", "");
  env["OMPI_COMM_WORLD_RANK"] = "1";
  env["OMPI_COMM_WORLD_SIZE"] = "2";
  env["PMIX_NAMESPACE"] = "555";
  CHECK(Resolve(env).job == "ompi-555");
  env.erase("PMIX_NAMESPACE");
  CHECK(Contains(Refusal(env).message(), "Open MPI"));
  // Our own variables without ALLREDUCED_JOB (our launchers always set both).
  Status refused = Refusal({{"ALLREDUCED_RANK", "0"},
                            {"ALLREDUCED_SIZE", "2"},
                            {"SLURM_JOB_ID", "1"},
                            {"SLURM_STEP_ID", "0"}});
  CHECK(Contains(refused.message(), "ALLREDUCED_RANK/ALLREDUCED_SIZE"));
}

TEST_CASE("a process alone in its job may keep the default name") {
  CHECK(Resolve({}).job == "default");
  CHECK(Resolve({}).job_source.empty());
  CHECK(Resolve({{"ALLREDUCED_RANK", "0"}, {"ALLREDUCED_SIZE", "1"}}).job == "default");
  CHECK(Resolve({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}).job == "default");
  CHECK(Resolve({{"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "1"},
                 {"SLURM_JOB_ID", "8"},
                 {"SLURM_STEP_ID", "0"}})
            .job == "slurm-8.0");  // a launcher's name is used when there is one
  // Unknown size, but a rank or local size above one process: a multi-rank job.
  CHECK(Contains(Refusal({{"PMI_RANK", "3"}}).message(), "rank 3 of ?"));
  CHECK(Refusal({{"ALLREDUCED_SIZE", "2"}}).code() == wire::Code::kInvalidArgument);
  CHECK(
      Contains(Refusal({{"HOROVOD_RANK", "0"}, {"HOROVOD_LOCAL_SIZE", "2"}}).message(), "Horovod"));
}

TEST_CASE("ranks given in ard_options: a multi-rank job needs a name there or in the variable") {
  ard_options options = Defaults();
  options.rank = 1;
  options.size = 2;
  options.local_rank = 1;
  options.local_size = 2;
  ClientConfig config;
  Status status = ResolveConfig(options, Lookup({}), &config);
  CHECK(status.code() == wire::Code::kInvalidArgument);
  CHECK(Contains(status.message(), "ard_options"));
  CHECK(Contains(status.message(), "ALLREDUCED_JOB"));
  options.job = "explicit";
  CHECK(ResolveConfig(options, Lookup({}), &config).ok());
  options.size = options.local_size = 1;
  options.rank = options.local_rank = 0;
  options.job = nullptr;
  REQUIRE(ResolveConfig(options, Lookup({}), &config).ok());
  CHECK(config.job == "default");
}

TEST_CASE("DerivedJobName: plain when valid and short, else readable, valid and hashed") {
  CHECK(DerivedJobName("slurm", "12.0") == "slurm-12.0");
  const std::string long_id(100, 'x');
  const std::string long_name = DerivedJobName("pmi", long_id);
  CHECK(long_name.size() == kMaxDerivedJobBytes);
  CHECK(IsValidJobName(long_name));
  CHECK(long_name.rfind("pmi-xxxx", 0) == 0);
  CHECK(DerivedJobName("pmi", long_id + "y") != long_name);  // same head, different hash
  // Room for the TensorFlow plugin's process-set sub-jobs under the wire limit.
  CHECK(IsValidJobName(long_name + ".ps99999"));
  CHECK(IsValidJobName(DerivedJobName("ompi", "a b/c:d@e")));
}

}  // namespace
}  // namespace ard::client

// Rank discovery from launcher environments and resolution of ard_options (fake environments).
#include "client/env_ranks.h"

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

RankInfo Ranks(const Env& env) {
  RankInfo info;
  Status status = RanksFromEnv(Lookup(env), &info);
  INFO(status.message());
  REQUIRE(status.ok());
  return info;
}

void CheckRanks(const RankInfo& r, int rank, int size, int local_rank, int local_size,
                const std::string& family) {
  CHECK(r.rank == rank);
  CHECK(r.size == size);
  CHECK(r.local_rank == local_rank);
  CHECK(r.local_size == local_size);
  CHECK(r.family == family);
}

TEST_CASE("each launcher family is read as a whole") {
  CheckRanks(Ranks({{"ALLREDUCED_RANK", "5"},
                    {"ALLREDUCED_SIZE", "8"},
                    {"ALLREDUCED_LOCAL_RANK", "1"},
                    {"ALLREDUCED_LOCAL_SIZE", "4"}}),
             5, 8, 1, 4, "ALLREDUCED");
  CheckRanks(Ranks({{"OMPI_COMM_WORLD_RANK", "3"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
             3, 4, 1, 2, "OMPI");
  CheckRanks(Ranks({{"PMI_RANK", "2"},
                    {"PMI_SIZE", "6"},
                    {"MPI_LOCALRANKID", "0"},
                    {"MPI_LOCALNRANKS", "3"}}),
             2, 6, 0, 3, "PMI");
  CheckRanks(Ranks({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}}), 2, 6, -1, -1, "PMI");
  CheckRanks(Ranks({{"SLURM_PROCID", "7"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "3"},
                    {"SLURM_NTASKS_PER_NODE", "4"}}),
             7, 8, 3, 4, "SLURM");
  CheckRanks(Ranks({{"HOROVOD_RANK", "1"},
                    {"HOROVOD_SIZE", "2"},
                    {"HOROVOD_LOCAL_RANK", "1"},
                    {"HOROVOD_LOCAL_SIZE", "2"}}),
             1, 2, 1, 2, "HOROVOD");
  CheckRanks(Ranks({}), -1, -1, -1, -1, "");
}

TEST_CASE("SLURM_NTASKS_PER_NODE counts only when it is a plain integer") {
  CheckRanks(Ranks({{"SLURM_PROCID", "4"},
                    {"SLURM_NTASKS", "6"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NTASKS_PER_NODE", "2(x3)"}}),
             4, 6, 0, -1, "SLURM");
}

TEST_CASE("the first family with a rank or size wins; families never mix") {
  Env env = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
             {"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "1"},
             {"HOROVOD_LOCAL_RANK", "1"},   {"ALLREDUCED_LOCAL_RANK", "1"},
             {"SLURM_LOCALID", "0"}};
  // ALLREDUCED has only a local rank (neither rank nor size): skipped; OMPI wins as a whole,
  // so its missing local fields stay unknown rather than coming from another family.
  CheckRanks(Ranks(env), 3, 4, -1, -1, "OMPI");
  env["ALLREDUCED_SIZE"] = "2";
  CheckRanks(Ranks(env), -1, 2, 1, -1, "ALLREDUCED");
  Env only_size = {{"HOROVOD_SIZE", "16"}, {"PMI_RANK", ""}};  // empty counts as unset
  CheckRanks(Ranks(only_size), -1, 16, -1, -1, "HOROVOD");
}

TEST_CASE("a malformed variable of the chosen family is an error naming it") {
  for (const Env& env : {Env{{"ALLREDUCED_RANK", "one"}}, Env{{"PMI_RANK", "1"}, {"PMI_SIZE", "0"}},
                         Env{{"OMPI_COMM_WORLD_RANK", "-1"}},
                         Env{{"HOROVOD_RANK", "1"}, {"HOROVOD_LOCAL_SIZE", "2x"}},
                         Env{{"SLURM_PROCID", "99999999999"}}}) {
    RankInfo info;
    Status status = RanksFromEnv(Lookup(env), &info);
    CHECK(status.code() == wire::Code::kInvalidArgument);
    CHECK(status.message().find("environment variable") != std::string::npos);
  }
  // A malformed variable of a family that does not win is never read.
  CheckRanks(Ranks({{"ALLREDUCED_RANK", "0"}, {"PMI_RANK", "junk"}}), 0, -1, -1, -1, "ALLREDUCED");
}

TEST_CASE("ValidateRanks names the bad value and says what -1 means") {
  RankInfo r;
  CHECK(ValidateRanks(r).ok());  // all -1: unset
  r.rank = -3;
  CHECK(ValidateRanks(r).message() ==
        "rank -3 must be >= 0 (or -1: unset, taken from the launcher)");
  r.rank = 0;
  r.local_size = 0;
  CHECK(ValidateRanks(r).message() ==
        "local_size 0 must be >= 1 (or -1: unset, taken from the launcher)");
}

TEST_CASE("ParseInt64 accepts only whole decimal integers in range") {
  int64_t v = 0;
  CHECK(ParseInt64("42", 0, 100, &v));
  CHECK(v == 42);
  CHECK(ParseInt64("-3", -5, 5, &v));
  CHECK(v == -3);
  for (const char* bad : {"", " 1", "1 ", "1x", "0x10", "+1", "101", "99999999999999999999"}) {
    CHECK_FALSE(ParseInt64(bad, 0, 100, &v));
  }
}

ard_options Defaults() {
  ard_options options;
  ard_options_init(&options);
  return options;
}

TEST_CASE("ResolveConfig: defaults, environment, then explicit options") {
  ClientConfig config;
  Env empty;
  REQUIRE(ResolveConfig(Defaults(), Lookup(empty), &config).ok());
  CHECK(config.socket_path == "/run/allreduced/allreduced.sock");
  CHECK(config.job == "default");
  CHECK(config.timeout_ms == 60000);
  CHECK(config.arena_segment_bytes == (64ull << 20));
  CHECK(config.arena_max_bytes == (16ull << 30));
  CHECK(config.ranks.rank == -1);

  Env env = {{"ALLREDUCED_SOCKET", "/tmp/x.sock"},
             {"ALLREDUCED_JOB", "bert-large.1"},
             {"ALLREDUCED_INIT_TIMEOUT_MS", "250"},
             {"ALLREDUCED_ARENA_SEGMENT_BYTES", "5000"},
             {"ALLREDUCED_ARENA_MAX_BYTES", "1048576"},
             {"SLURM_PROCID", "1"},
             {"SLURM_NTASKS", "2"}};
  REQUIRE(ResolveConfig(Defaults(), Lookup(env), &config).ok());
  CHECK(config.socket_path == "/tmp/x.sock");
  CHECK(config.job == "bert-large.1");
  CHECK(config.timeout_ms == 250);
  CHECK(config.arena_segment_bytes == 8192);  // rounded up to pages
  CHECK(config.arena_max_bytes == 1048576);
  CHECK(config.ranks.rank == 1);
  CHECK(config.ranks.size == 2);

  ard_options options = Defaults();
  options.socket_path = "/tmp/y.sock";
  options.job = "mine";
  options.rank = 0;
  options.timeout_ms = -1;
  options.arena_segment_bytes = 1 << 20;
  REQUIRE(ResolveConfig(options, Lookup(env), &config).ok());
  CHECK(config.socket_path == "/tmp/y.sock");
  CHECK(config.job == "mine");
  CHECK(config.ranks.rank == 0);  // explicit field wins, the others still from SLURM
  CHECK(config.ranks.size == 2);
  CHECK(config.timeout_ms == -1);
  CHECK(config.arena_segment_bytes == 1048576);
}

TEST_CASE("ResolveConfig rejects bad values with a clear message") {
  ClientConfig config;
  auto code = [&](const ard_options& options, const Env& env) {
    return ResolveConfig(options, Lookup(env), &config).code();
  };
  ard_options options = Defaults();
  options.job = "has space";
  CHECK(code(options, {}) == wire::Code::kInvalidArgument);
  options.job = "";
  CHECK(code(options, {}) == wire::Code::kInvalidArgument);
  CHECK(code(Defaults(), {{"ALLREDUCED_JOB", std::string(64, 'j')}}) ==
        wire::Code::kInvalidArgument);
  CHECK(code(Defaults(), {{"ALLREDUCED_JOB", std::string(63, 'j')}}) == wire::Code::kOk);
  CHECK(code(Defaults(), {{"ALLREDUCED_SOCKET", "/" + std::string(120, 's')}}) ==
        wire::Code::kInvalidArgument);
  CHECK(code(Defaults(), {{"ALLREDUCED_RANK", "4"}, {"ALLREDUCED_SIZE", "4"}}) ==
        wire::Code::kInvalidArgument);
  CHECK(code(Defaults(), {{"ALLREDUCED_INIT_TIMEOUT_MS", "soon"}}) == wire::Code::kInvalidArgument);
  CHECK(code(Defaults(), {{"ALLREDUCED_ARENA_MAX_BYTES", "-1"}}) == wire::Code::kInvalidArgument);
  // All four ranks explicit: the environment's rank variables are not even parsed.
  options = Defaults();
  options.rank = 0;
  options.size = 1;
  options.local_rank = 0;
  options.local_size = 1;
  CHECK(code(options, {{"ALLREDUCED_RANK", "junk"}}) == wire::Code::kOk);
}

TEST_CASE("ResolveConfig: GPU staging sizes from the environment, validated") {
  ClientConfig config;
  REQUIRE(ResolveConfig(Defaults(), Lookup({}), &config).ok());
  CHECK(config.gpu_arena_bytes == (64ull << 20));
  CHECK(config.gpu_events == 64);
  REQUIRE(ResolveConfig(Defaults(),
                        Lookup({{"ALLREDUCED_GPU_ARENA_BYTES", "1048576"},
                                {"ALLREDUCED_GPU_EVENTS", "1024"}}),
                        &config)
              .ok());
  CHECK(config.gpu_arena_bytes == 1048576);
  CHECK(config.gpu_events == 1024);
  auto message = [&](const Env& env) {
    Status s = ResolveConfig(Defaults(), Lookup(env), &config);
    CHECK(s.code() == wire::Code::kInvalidArgument);
    return s.message();
  };
  CHECK(message({{"ALLREDUCED_GPU_ARENA_BYTES", "64MiB"}}).find("ALLREDUCED_GPU_ARENA_BYTES") !=
        std::string::npos);
  CHECK(message({{"ALLREDUCED_GPU_ARENA_BYTES", "100"}}).find("minimum") != std::string::npos);
  CHECK(message({{"ALLREDUCED_GPU_EVENTS", "0"}}).find("ALLREDUCED_GPU_EVENTS") !=
        std::string::npos);
  CHECK(message({{"ALLREDUCED_GPU_EVENTS", "1025"}}).find("1..1024") != std::string::npos);
}

TEST_CASE("ResolveConfig: ard_wait's spin from the environment, off by default") {
  ClientConfig config;
  REQUIRE(ResolveConfig(Defaults(), Lookup({}), &config).ok());
  CHECK(config.wait_spin_us == 0);
  REQUIRE(ResolveConfig(Defaults(), Lookup({{"ALLREDUCED_WAIT_SPIN_US", "50"}}), &config).ok());
  CHECK(config.wait_spin_us == 50);
  REQUIRE(ResolveConfig(Defaults(), Lookup({{"ALLREDUCED_WAIT_SPIN_US", "0"}}), &config).ok());
  CHECK(config.wait_spin_us == 0);
  Status s = ResolveConfig(Defaults(), Lookup({{"ALLREDUCED_WAIT_SPIN_US", "10001"}}), &config);
  CHECK(s.code() == wire::Code::kInvalidArgument);
  CHECK(s.message().find("ALLREDUCED_WAIT_SPIN_US") != std::string::npos);
}

}  // namespace
}  // namespace ard::client

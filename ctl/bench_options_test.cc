#include "ctl/bench_options.h"

#include <algorithm>

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

TEST_CASE("sizes take K, M and G suffixes") {
  CHECK(*ParseSize("4") == 4);
  CHECK(*ParseSize("4K") == 4096);
  CHECK(*ParseSize("16m") == 16u << 20);
  CHECK(*ParseSize("3G") == 3ull << 30);
  CHECK_FALSE(ParseSize("").ok());
  CHECK_FALSE(ParseSize("0").ok());
  CHECK_FALSE(ParseSize("K").ok());
  CHECK_FALSE(ParseSize("-4").ok());
  CHECK_FALSE(ParseSize("4X").ok());
  CHECK_FALSE(ParseSize("4G").ok());  // a tensor must stay below 4 GiB
}

TEST_CASE("a range doubles from A up to B inclusive") {
  CHECK(*ParseSizes("4:64") == std::vector<uint64_t>{4, 8, 16, 32, 64});
  CHECK(*ParseSizes("1K:1K") == std::vector<uint64_t>{1024});
  CHECK(*ParseSizes("3:10") == std::vector<uint64_t>{3, 6});
  CHECK(ParseSizes("4:256M")->size() == 27);
  CHECK(ParseSizes("4:256M")->back() == 256u << 20);
  CHECK_FALSE(ParseSizes("64:4").ok());
  CHECK_FALSE(ParseSizes("4:8:16").ok());
}

TEST_CASE("a comma list is taken as it is") {
  CHECK(*ParseSizes("16M,64M,4") == std::vector<uint64_t>{16u << 20, 64u << 20, 4});
  CHECK_FALSE(ParseSizes("16M,,4").ok());
}

TEST_CASE("bench arguments") {
  BenchOptions o;
  bool help = false;
  REQUIRE(ParseBenchArgs({"--sockets",     "/a.sock,/b.sock",
                          "--np=3",        "--sizes",
                          "1K,2K",         "--op",
                          "reducescatter", "--dtype=bfloat16",
                          "--reduce",      "max",
                          "--warmup",      "0",
                          "--iters",       "7",
                          "--check",       "--json",
                          "--job",         "j.1",
                          "--timeout_ms",  "900"},
                         false, &o, &help)
              .ok());
  CHECK_FALSE(help);
  CHECK(o.sockets == std::vector<std::string>{"/a.sock", "/b.sock"});
  CHECK(o.np == 3);
  CHECK(o.ranks() == 6);
  CHECK(o.sizes == std::vector<uint64_t>{1024, 2048});
  CHECK(o.collective == 5);
  CHECK(o.dtype == 8);
  CHECK(o.reduce_op == 4);
  CHECK(o.warmup == 0);
  CHECK(o.iters == 7);
  CHECK(o.check);
  CHECK(o.json);
  CHECK(o.job == "j.1");
  CHECK(o.timeout_ms == 900);

  SECTION("the worker's arguments reproduce the options") {
    o.parent_pid = 42;
    BenchOptions w;
    REQUIRE(ParseBenchArgs(WorkerArgs(o), true, &w, &help).ok());
    CHECK(w.sockets == o.sockets);
    CHECK(w.np == 3);
    CHECK(w.sizes == o.sizes);
    CHECK(w.collective == 5);
    CHECK(w.dtype == 8);
    CHECK(w.reduce_op == 4);
    CHECK(w.iters == 7);
    CHECK(w.warmup == 0);
    CHECK(w.check);
    CHECK(w.job == "j.1");
    CHECK(w.timeout_ms == 900);
    CHECK(w.parent_pid == 42);
  }
}

TEST_CASE("defaults: allreduce float32 sum, 4:256M, 2 per socket") {
  BenchOptions o;
  bool help = false;
  REQUIRE(ParseBenchArgs({"--sockets=/s"}, false, &o, &help).ok());
  CHECK(o.collective == 1);
  CHECK(o.dtype == 9);
  CHECK(o.reduce_op == 1);
  CHECK(o.np == 2);
  CHECK(o.sizes.front() == 4);
  CHECK(o.sizes.back() == 256u << 20);
}

TEST_CASE("bad bench arguments name the problem") {
  BenchOptions o;
  bool help = false;
  auto error = [&](std::vector<std::string> args) {
    absl::Status st = ParseBenchArgs(args, false, &o, &help);
    return std::string(st.message());
  };
  CHECK(error({"--sockets=/s", "--op=gather"}).find("--op must be one of") != std::string::npos);
  CHECK(error({"--sockets=/s", "--dtype=bool"}).find("--dtype") != std::string::npos);
  CHECK(error({"--sockets=/s", "--np=0"}).find("--np") != std::string::npos);
  CHECK(error({"--sockets=/s", "--iters=0"}).find("--iters") != std::string::npos);
  CHECK(error({"--sockets=/s", "--job=a b"}).find("--job") != std::string::npos);
  CHECK(error({"--sockets=/s", "--parent_pid=3"}).find("unknown option") != std::string::npos);
  CHECK(error({"--sockets=/s", "extra"}).find("unexpected argument") != std::string::npos);
  CHECK(error({"--sockets=/s", "--np"}).find("missing value") != std::string::npos);
  CHECK(ParseBenchArgs({"--help"}, false, &o, &help).ok());
  CHECK(help);
}

TEST_CASE("--device gpu and --peer") {
  BenchOptions o;
  bool help = false;
  REQUIRE(ParseBenchArgs({"--sockets=/s"}, false, &o, &help).ok());
  CHECK_FALSE(o.gpu);  // cpu by default
  CHECK(o.peer == BenchOptions::Peer::kAuto);
  const std::vector<std::string> cpu_args = WorkerArgs(o);
  CHECK(std::find(cpu_args.begin(), cpu_args.end(), "--device=gpu") == cpu_args.end());

  BenchOptions g;
  REQUIRE(ParseBenchArgs({"--sockets=/s", "--device", "gpu", "--peer=none", "--dtype=float16"},
                         false, &g, &help)
              .ok());
  CHECK(g.gpu);
  CHECK(g.peer == BenchOptions::Peer::kNone);
  CHECK(g.sizes.back() == 256u << 20);  // as on CPU: the launcher sizes the staging arena
  g.parent_pid = 7;
  g.peer_gpus = 2;
  BenchOptions w;  // what bench-nccl and bench-worker get back
  REQUIRE(ParseBenchArgs(WorkerArgs(g), true, &w, &help).ok());
  CHECK(w.gpu);
  CHECK_FALSE(w.shm);
  CHECK(w.peer_gpus == 2);
  CHECK(w.dtype == 7);

  BenchOptions c;
  REQUIRE(ParseBenchArgs({"--sockets=/s", "--device=cpu", "--peer=nccl"}, false, &c, &help).ok());
  CHECK_FALSE(c.gpu);
  CHECK(c.peer == BenchOptions::Peer::kNccl);

  auto error = [&](std::vector<std::string> args) {
    BenchOptions x;
    return std::string(ParseBenchArgs(args, false, &x, &help).message());
  };
  CHECK(error({"--sockets=/s", "--device=tpu"}).find("--device must be cpu, shm or gpu") !=
        std::string::npos);
  CHECK(error({"--sockets=/s", "--peer=gloo"}).find("--peer must be") != std::string::npos);
  CHECK(error({"--sockets=/s", "--device=gpu", "--op=allgather"})
            .find("--device gpu serves allreduce only") != std::string::npos);
  CHECK(error({"--sockets=/s", "--peer_gpus=2"}).find("unknown option") != std::string::npos);
}

TEST_CASE("names") {
  CHECK(std::string(CollectiveName(4)) == "alltoall");
  CHECK(std::string(DataTypeName(7)) == "float16");
  CHECK(std::string(ReduceOpName(2)) == "average");
  CHECK(std::string(ReduceOpName(99)) == "?");
  CHECK(IsReduction(1));
  CHECK(IsReduction(5));
  CHECK_FALSE(IsReduction(2));
}

TEST_CASE("--device shm travels to the workers") {
  BenchOptions o;
  bool help = false;
  REQUIRE(ParseBenchArgs({"--sockets=/s", "--device=shm"}, false, &o, &help).ok());
  CHECK(o.shm);
  CHECK_FALSE(o.gpu);
  o.parent_pid = 7;
  BenchOptions w;
  REQUIRE(ParseBenchArgs(WorkerArgs(o), true, &w, &help).ok());
  CHECK(w.shm);
  BenchOptions bad;
  CHECK_FALSE(ParseBenchArgs({"--sockets=/s", "--device=tpu"}, false, &bad, &help).ok());
}

}  // namespace
}  // namespace ard::ctl

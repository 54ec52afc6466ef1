#include "ctl/launch/socket_ranks.h"

#include <algorithm>

#include "catch2/catch.hpp"

namespace ard::launch {
namespace {

TEST_CASE("ranks are host-major: socket index, then local rank") {
  const int np = 3;
  for (int rank = 0; rank < 2 * np; ++rank) {
    const SocketRank r = SocketRankOf(rank, np);
    CHECK(r.rank == rank);
    CHECK(r.socket_index * np + r.local_rank == rank);
    CHECK(r.local_rank < np);
  }
  CHECK(SocketRankOf(4, 3).socket_index == 1);
  CHECK(SocketRankOf(4, 3).local_rank == 1);
}

TEST_CASE("each rank gets its socket, job and place") {
  const std::vector<std::string> env = SocketRankEnv({"/a.sock", "/b.sock"}, 2, "j1", 3);
  CHECK(env == std::vector<std::string>{"ALLREDUCED_SOCKET=/b.sock", "ALLREDUCED_JOB=j1",
                                        "ALLREDUCED_RANK=3", "ALLREDUCED_SIZE=4",
                                        "ALLREDUCED_LOCAL_RANK=1", "ALLREDUCED_LOCAL_SIZE=2"});
  const std::vector<std::string> no_job = SocketRankEnv({"/a.sock"}, 1, "", 0);
  CHECK(no_job.size() == 5);
  for (const std::string& v : no_job) CHECK(v.rfind("ALLREDUCED_JOB=", 0) != 0);
}

TEST_CASE("the variable names are those the environment sets") {
  const std::vector<std::string> env = SocketRankEnv({"/a.sock"}, 1, "j", 0);
  REQUIRE(env.size() == SocketRankVariables().size());
  for (const std::string& v : env) {
    const std::string name = v.substr(0, v.find('='));
    CHECK(std::count(SocketRankVariables().begin(), SocketRankVariables().end(), name) == 1);
  }
}

}  // namespace
}  // namespace ard::launch

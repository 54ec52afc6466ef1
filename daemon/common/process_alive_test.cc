#include "daemon/common/process_alive.h"

#include <sys/wait.h>
#include <unistd.h>

#include "catch2/catch.hpp"

namespace ard {
namespace {

TEST_CASE("A running process is alive; an exited, unreaped or reaped one is not") {
  CHECK(ProcessAlive(static_cast<uint32_t>(getpid())));
  CHECK_FALSE(ProcessAlive(0));
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  // Unreaped: a zombie until waitid with WNOWAIT says it exited.
  siginfo_t info{};
  REQUIRE(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  CHECK_FALSE(ProcessAlive(static_cast<uint32_t>(child)));
  REQUIRE(waitpid(child, nullptr, 0) == child);
  CHECK_FALSE(ProcessAlive(static_cast<uint32_t>(child)));
}

}  // namespace
}  // namespace ard

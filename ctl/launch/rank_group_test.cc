#include "ctl/launch/rank_group.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>

#include "catch2/catch.hpp"

namespace ard::launch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Records what the group reports; fails on a non-zero exit and on a line starting with "FAIL".
class Recorder : public RankGroup::Listener {
 public:
  std::string OnLine(int index, const std::string& line) override {
    events.push_back("line " + std::to_string(index) + " " + line);
    return line.rfind("FAIL", 0) == 0 ? "child " + std::to_string(index) + ": " + line : "";
  }
  std::string OnExit(int index, int wait_status) override {
    events.push_back("exit " + std::to_string(index));
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return "";
    return "child " + std::to_string(index) + " " + DescribeWaitStatus(wait_status);
  }
  std::string OnDeadline() override {
    events.push_back("deadline");
    return "late";
  }
  std::vector<std::string> events;
};

RankGroup::Clock::time_point Later() { return RankGroup::Clock::now() + seconds(60); }

void SpawnOk(RankGroup& g, const std::vector<std::string>& argv) {
  REQUIRE(g.Spawn(argv[0], argv, EnvironWith({})) == 0);
}

bool KilledBySigkill(const RankGroup& g, int index) {
  return g.reaped(index) && WIFSIGNALED(g.wait_status(index)) &&
         WTERMSIG(g.wait_status(index)) == SIGKILL;
}

TEST_CASE("children that succeed are each reaped once, after their lines") {
  RankGroup g({});
  SpawnOk(g, {"/bin/true"});
  SpawnOk(g, {"/bin/sh", "-c", "echo one; echo two >&2; printf three"});
  SpawnOk(g, {"/bin/true"});
  Recorder r;
  CHECK(g.Wait(Later(), r) == "");
  for (int i = 0; i < g.size(); ++i) {
    CHECK(g.reaped(i));
    CHECK(WIFEXITED(g.wait_status(i)));
    CHECK(WEXITSTATUS(g.wait_status(i)) == 0);
    CHECK(std::count(r.events.begin(), r.events.end(), "exit " + std::to_string(i)) == 1);
  }
  std::vector<std::string> child1;
  for (const std::string& e : r.events) {
    if (e.find(" 1") == 4) child1.push_back(e);
  }
  CHECK(child1 == std::vector<std::string>{"line 1 one", "line 1 two", "line 1 three", "exit 1"});
}

TEST_CASE("the first failing child ends the wait; the others are killed and reaped") {
  RankGroup g({});
  SpawnOk(g, {"/bin/sleep", "60"});
  SpawnOk(g, {"/bin/false"});
  SpawnOk(g, {"/bin/sleep", "60"});
  Recorder r;
  CHECK(g.Wait(Later(), r) == "child 1 exited with status 1");
  CHECK(g.reaped(1));
  CHECK(WEXITSTATUS(g.wait_status(1)) == 1);
  CHECK(KilledBySigkill(g, 0));
  CHECK(KilledBySigkill(g, 2));
}

TEST_CASE("a failure named on a line ends the wait while its child still runs") {
  RankGroup g({});
  SpawnOk(g, {"/bin/sh", "-c", "echo ok; echo FAIL now; exec sleep 60"});
  Recorder r;
  CHECK(g.Wait(Later(), r) == "child 0: FAIL now");
  CHECK(r.events == std::vector<std::string>{"line 0 ok", "line 0 FAIL now"});
  CHECK(KilledBySigkill(g, 0));
}

TEST_CASE("the deadline kills a child that does not end") {
  RankGroup g({});
  SpawnOk(g, {"/bin/sleep", "60"});
  SpawnOk(g, {"/bin/true"});
  Recorder r;
  CHECK(g.Wait(RankGroup::Clock::now() + milliseconds(200), r) == "late");
  CHECK(r.events.back() == "deadline");
  CHECK(KilledBySigkill(g, 0));
  CHECK(g.reaped(1));
}

TEST_CASE("with a report descriptor, lines come from it and stdout stays the parent's") {
  RankGroup::Options options;
  options.report_fd_variable = "ARD_TEST_REPORT_FD";
  RankGroup g(options);
  SpawnOk(g, {"/bin/bash", "-c", "echo to-stdout; echo DONE 0 >&$ARD_TEST_REPORT_FD"});
  Recorder r;
  CHECK(g.Wait(Later(), r) == "");
  CHECK(r.events == std::vector<std::string>{"line 0 DONE 0", "exit 0"});
}

TEST_CASE("a program that cannot be executed is not started") {
  RankGroup g({});
  CHECK(g.Spawn("/nonexistent/program", {"program"}, EnvironWith({})) == ENOENT);
  CHECK(g.size() == 0);
  Recorder r;
  CHECK(g.Wait(Later(), r) == "");
}

TEST_CASE("children get exactly the environment given") {
  setenv("ARD_TEST_KEPT", "kept", 1);
  setenv("ARD_TEST_REPLACED", "old", 1);
  setenv("ARD_TEST_DROPPED", "dropped", 1);
  const std::vector<std::string> env = EnvironWith({"ARD_TEST_REPLACED=new"}, {"ARD_TEST_DROPPED"});
  CHECK(std::count(env.begin(), env.end(), "ARD_TEST_KEPT=kept") == 1);
  CHECK(std::count(env.begin(), env.end(), "ARD_TEST_REPLACED=new") == 1);
  CHECK(std::count(env.begin(), env.end(), "ARD_TEST_REPLACED=old") == 0);
  CHECK(std::count(env.begin(), env.end(), "ARD_TEST_DROPPED=dropped") == 0);

  RankGroup g({});
  REQUIRE(g.Spawn("/bin/sh",
                  {"sh", "-c", "echo $ARD_TEST_KEPT $ARD_TEST_REPLACED.$ARD_TEST_DROPPED."},
                  env) == 0);
  Recorder r;
  CHECK(g.Wait(Later(), r) == "");
  CHECK(r.events.front() == "line 0 kept new..");
}

TEST_CASE("destroying the group kills and reaps its children") {
  pid_t pid;
  {
    RankGroup g({});
    SpawnOk(g, {"/bin/sleep", "60"});
    pid = g.pid(0);
    CHECK(kill(pid, 0) == 0);
  }
  CHECK(kill(pid, 0) == -1);
  CHECK(errno == ESRCH);
}

TEST_CASE("wait statuses read as the launchers print them") {
  CHECK(DescribeWaitStatus(3 << 8) == "exited with status 3");
  CHECK(DescribeWaitStatus(SIGKILL) == "killed by signal 9 (Killed)");
}

}  // namespace
}  // namespace ard::launch

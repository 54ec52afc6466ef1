// Fault scenarios of collective_worker. Output lines (besides collective_worker's):
//   STEPPING                       the first step completed (steps)
//   PAUSED                         this rank stopped between collectives (between)
//   SUBMITTED <tensor>             this rank's submit went out
//   RESULT_OK <tensor>             the tensor completed with the right values
//   ERROR <tensor> <code> <message>  the tensor failed (what fault tests expect)
//
// Modes and their environment:
//   steps   ARD_STEPS (default: until an error), ARD_ELEMS (float32 elements, default 256Ki):
//           one allreduce "step" after another, each checked, until an error or ARD_STEPS;
//           then the rank lingers ARD_LINGER_MS (default 0) before exiting cleanly.
//   slow    rank ARD_SLOW_RANK sleeps ARD_SLOW_MS before submitting "slow"; the others submit
//           at once. Everyone waits for the result.
//   uneven  every rank allreduces "common"; then the last rank submits "extra", which no other
//           rank ever submits, while the others linger ARD_LINGER_MS and exit cleanly.
//   after   the last rank submits "held" and then sleeps (until the test kills it); rank 0
//           submits only once the file ARD_GO_FILE exists; the others submit at once.
//   between every rank allreduces "first"; then the ranks of the last host (cross rank) print
//           PAUSED and sleep until killed, while the others allreduce "second" (it waits for
//           them): a job between two collectives, its data plane idle.
//   gated   every rank allreduces "gated" (one float32); then a rank for which the FIFO
//           ARD_GATE_DIR/<rank> exists prints GATED and opens it, which returns once the test
//           opens it for writing; then every rank allreduces "gated" again (a cache hit).
#include "tests/integration/worker_faults.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace ard::testing {
namespace {

constexpr int kAllreduce = 1;
constexpr int kFloat32 = 9;
constexpr int kSum = 1;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

void SleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Submits `data` as a float32 sum allreduce named `name`; fills *handle. Prints an ERROR line
// and returns false when the submit itself fails.
bool Submit(ard_client* client, const char* name, const std::vector<float>& data,
            const int64_t* shape, uint64_t* handle) {
  ard_request req;
  ard_request_init(&req);
  req.collective = kAllreduce;
  req.dtype = kFloat32;
  req.reduce_op = kSum;
  req.name = name;
  req.ndims = 1;
  req.shape = shape;
  req.data = data.data();
  req.bytes = data.size() * sizeof(float);
  char err[512] = {};
  const int code = ard_submit(client, &req, nullptr, nullptr, handle, err, sizeof(err));
  if (code != 0) {
    std::printf("ERROR %s %d %s\n", name, code, err);
    std::fflush(stdout);
    return false;
  }
  return true;
}

// Waits for `handle`; checks every element equals `expect`. Prints RESULT_OK or ERROR/MISMATCH.
// Returns 0 (completed and right), 1 (wrong values) or 2 (failed with an error).
int WaitAndCheck(ard_client* client, const char* name, uint64_t handle, float expect,
                 bool quiet = false) {
  ard_result r;
  const int code = ard_wait(client, handle, -1, &r);
  if (code != 0) {
    std::printf("ERROR %s %d %s\n", name, code, r.message ? r.message : "");
    std::fflush(stdout);
    return 2;
  }
  const float* out = static_cast<const float*>(r.data);
  const size_t n = r.bytes / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != expect) {
      std::printf("MISMATCH %s element %zu is %g, expected %g\n", name, i, out[i], expect);
      std::fflush(stdout);
      ard_release(client, handle);
      return 1;
    }
  }
  ard_release(client, handle);
  if (!quiet) std::printf("RESULT_OK %s\n", name);
  std::fflush(stdout);
  return 0;
}

// One allreduce of `elems` float32 holding rank + 1 (times `factor`); the sum is known.
int OneAllreduce(ard_client* client, const ard_topology& t, const char* name, int64_t elems,
                 float factor, bool quiet = false) {
  const int64_t shape[] = {elems};
  std::vector<float> data(elems, factor * (t.rank + 1));
  uint64_t handle;
  if (!Submit(client, name, data, shape, &handle)) return 2;
  if (!quiet) {
    std::printf("SUBMITTED %s\n", name);
    std::fflush(stdout);
  }
  return WaitAndCheck(client, name, handle, factor * t.size * (t.size + 1) / 2.0f, quiet);
}

int Steps(ard_client* client, const ard_topology& t) {
  const int64_t steps = EnvInt("ARD_STEPS", INT64_MAX);
  const int64_t elems = EnvInt("ARD_ELEMS", 256 * 1024);
  int64_t done = 0;
  for (; done < steps; ++done) {
    const int rc = OneAllreduce(client, t, "step", elems, static_cast<float>(done % 7 + 1), true);
    if (rc == 1) return 1;
    if (rc == 2) break;  // the ERROR line is out; the test checks it
    if (done == 0) {
      std::printf("STEPPING\n");
      std::fflush(stdout);
    }
  }
  std::printf("DONE %lld\n", static_cast<long long>(done));
  std::fflush(stdout);
  SleepMs(EnvInt("ARD_LINGER_MS", 0));
  return 0;
}

int Slow(ard_client* client, const ard_topology& t) {
  if (t.rank == EnvInt("ARD_SLOW_RANK", t.size - 1)) SleepMs(EnvInt("ARD_SLOW_MS", 2000));
  if (OneAllreduce(client, t, "slow", 16, 1.0f) == 1) return 1;
  std::printf("DONE 1\n");
  return 0;
}

int Uneven(ard_client* client, const ard_topology& t) {
  if (OneAllreduce(client, t, "common", 16, 1.0f) != 0) return 1;
  if (t.rank != t.size - 1) {
    SleepMs(EnvInt("ARD_LINGER_MS", 0));
    std::printf("DONE 1\n");
    return 0;  // main() destroys the client: a clean exit
  }
  if (OneAllreduce(client, t, "extra", 16, 1.0f) == 1) return 1;
  std::printf("DONE 1\n");
  return 0;
}

int After(ard_client* client, const ard_topology& t) {
  const int64_t shape[] = {16};
  std::vector<float> data(16, t.rank + 1.0f);
  if (t.rank == 0) {
    const char* go = std::getenv("ARD_GO_FILE");
    while (go != nullptr && access(go, F_OK) != 0) SleepMs(20);
  }
  uint64_t handle;
  if (!Submit(client, "held", data, shape, &handle)) {
    std::printf("DONE 0\n");
    return 0;
  }
  std::printf("SUBMITTED held\n");
  std::fflush(stdout);
  if (t.rank == t.size - 1) {
    for (;;) pause();  // submitted; waits to be killed
  }
  if (WaitAndCheck(client, "held", handle, t.size * (t.size + 1) / 2.0f) == 1) return 1;
  std::printf("DONE 0\n");
  return 0;
}

int Between(ard_client* client, const ard_topology& t) {
  if (OneAllreduce(client, t, "first", 16, 1.0f) != 0) return 1;
  if (t.cross_rank == t.cross_size - 1) {
    std::printf("PAUSED\n");
    std::fflush(stdout);
    for (;;) pause();  // between collectives; waits to be killed
  }
  if (OneAllreduce(client, t, "second", 16, 2.0f) == 1) return 1;
  std::printf("DONE 1\n");
  return 0;
}

int Gated(ard_client* client, const ard_topology& t) {
  if (OneAllreduce(client, t, "gated", 1, 1.0f) != 0) return 1;
  const char* dir = std::getenv("ARD_GATE_DIR");
  const std::string gate = std::string(dir != nullptr ? dir : "") + "/" + std::to_string(t.rank);
  if (dir != nullptr && access(gate.c_str(), F_OK) == 0) {
    std::printf("GATED\n");
    std::fflush(stdout);
    const int fd = open(gate.c_str(), O_RDONLY);  // blocks until the test opens the writing end
    if (fd >= 0) close(fd);
  }
  if (OneAllreduce(client, t, "gated", 1, 2.0f) != 0) return 1;
  std::printf("DONE 2\n");
  return 0;
}

}  // namespace

int RunFaultMode(const std::string& mode, ard_client* client, const ard_topology& topo) {
  if (mode == "steps") return Steps(client, topo);
  if (mode == "slow") return Slow(client, topo);
  if (mode == "uneven") return Uneven(client, topo);
  if (mode == "after") return After(client, topo);
  if (mode == "between") return Between(client, topo);
  if (mode == "gated") return Gated(client, topo);
  return -1;
}

}  // namespace ard::testing

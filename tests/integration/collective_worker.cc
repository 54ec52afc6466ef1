// A training process stand-in for integration tests: connects to the daemon through the real
// client library (rank/size/job from the environment, like a launcher sets them), runs a scenario
// and checks every result against a reference it computes itself. Each rank regenerates every
// other rank's input from the shared seed, so no data has to travel outside the system under test.
//
// Output (stdout), one line each, for the Python test to parse:
//   TOPOLOGY rank size local_rank local_size cross_rank cross_size
//   JOB <name>                                        (ALLREDUCED_JOB or the launcher's name)
//   RESULT <case> <fnv1a-64 of the result bytes>     (compared across ranks: bit-identical)
//   ERROR <case> <code> <message>                     (scenarios that expect errors)
//   DONE <cases checked>
// Exit status: 0 when every check passed, 1 on a wrong result (with a MISMATCH line), 2 on usage.
//
// Scenarios: matrix, many, mismatch, adasum, join, stuck (submit one tensor and report how it
// ends), latency, soak (ARD_SOAK_STEPS steps, default 500), carried (ARD_CARRIED_STEPS steps of
// CarriedCases, default 4; ARD_CARRIED_OVER_ELEMENTS, default 257), and the fault scenarios of
// worker_faults.h (steps, slow, uneven, after, between, gated).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "tests/integration/worker_faults.h"
#include "tests/integration/worker_reference.h"

namespace ard::testing {
namespace {

int Fail(const std::string& what) {
  std::printf("MISMATCH %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

class Worker {
 public:
  explicit Worker(ard_client* client, uint64_t seed) : client_(client), seed_(seed) {
    ard_client_topology(client, &topo_);
  }

  const ard_topology& topo() const { return topo_; }

  // Submits this rank's part of `c`, waits, checks against the reference. Returns false on a
  // mismatch (after printing it).
  bool Run(const Case& c) {
    Inputs in = MakeInputs(c, topo_.size, seed_);
    ard_result r;
    const int code = SubmitAndWait(c, in.per_rank[topo_.rank], &r, c.name);
    if (code != 0) {
      std::printf("MISMATCH %s failed: %s %s\n", c.name.c_str(), ard_code_name(code),
                  r.message ? r.message : "");
      return false;
    }
    Expected e = ComputeExpected(c, in, topo_.rank, topo_.size, {}, topo_.local_size);
    std::string why;
    const bool ok = CheckResult(e, r, &why);
    std::printf("RESULT %s %016llx\n", c.name.c_str(),
                static_cast<unsigned long long>(Fnv1a(r.data, r.bytes)));
    if (!ok) std::printf("MISMATCH %s %s\n", c.name.c_str(), why.c_str());
    ard_release(client_, last_handle_);
    return ok;
  }

  int SubmitAndWait(const Case& c, const std::vector<uint8_t>& data, ard_result* r,
                    const std::string& name) {
    ard_request req;
    ard_request_init(&req);
    FillRequest(c, data, name, topo_.rank, &req);
    char err[512] = {};
    int code = ard_submit(client_, &req, nullptr, nullptr, &last_handle_, err, sizeof(err));
    if (code != 0) {
      r->code = code;
      static thread_local std::string message;
      message = err;
      r->message = message.c_str();
      return code;
    }
    return ard_wait(client_, last_handle_, -1, r);
  }

  uint64_t last_handle() const { return last_handle_; }
  ard_client* client() const { return client_; }

  // A grouped allreduce: every member is submitted before any is waited for (the daemon releases
  // the group only once all of it is ready).
  bool RunGroup(const std::vector<Case>& group) {
    std::vector<uint64_t> handles;
    std::vector<Inputs> inputs;
    for (const Case& c : group) {
      inputs.push_back(MakeInputs(c, topo_.size, seed_));
      ard_request req;
      ard_request_init(&req);
      FillRequest(c, inputs.back().per_rank[topo_.rank], c.name, topo_.rank, &req);
      char err[512];
      uint64_t handle;
      if (ard_submit(client_, &req, nullptr, nullptr, &handle, err, sizeof(err)) != 0) {
        std::printf("MISMATCH %s submit: %s\n", c.name.c_str(), err);
        return false;
      }
      handles.push_back(handle);
    }
    for (size_t i = 0; i < group.size(); ++i) {
      ard_result r;
      if (ard_wait(client_, handles[i], -1, &r) != 0) {
        std::printf("MISMATCH %s failed: %s\n", group[i].name.c_str(), r.message);
        return false;
      }
      std::string why;
      if (!CheckResult(ComputeExpected(group[i], inputs[i], topo_.rank, topo_.size, {}, topo_.local_size), r, &why)) {
        std::printf("MISMATCH %s %s\n", group[i].name.c_str(), why.c_str());
        return false;
      }
      std::printf("RESULT %s %016llx\n", group[i].name.c_str(),
                  static_cast<unsigned long long>(Fnv1a(r.data, r.bytes)));
      ard_release(client_, handles[i]);
    }
    return true;
  }

 private:
  ard_client* client_;
  const uint64_t seed_;
  ard_topology topo_{};
  uint64_t last_handle_ = 0;
};

int Matrix(Worker& w) {
  int checked = 0;
  for (const Case& c : MatrixCases(w.topo().size)) {
    if (!w.Run(c)) return 1;
    ++checked;
  }
  const std::vector<Case> group = GroupCases();
  if (!w.RunGroup(group)) return 1;
  checked += group.size();
  std::printf("DONE %d\n", checked);
  return 0;
}

// `count` small allreduces per step, all submitted before any is waited for, in an order that
// differs per rank; every result checked.
int Many(ard_client* client, const ard_topology& topo, int count, int steps, uint64_t seed) {
  struct Pending {
    Case c;
    uint64_t handle;
  };
  for (int step = 0; step < steps; ++step) {
    std::vector<Case> cases;
    for (int i = 0; i < count; ++i) {
      Case c = SmallAllreduce(step * count + i);
      cases.push_back(c);
    }
    std::mt19937 shuffle(seed + topo.rank * 7919 + step);
    std::vector<int> order(count);
    for (int i = 0; i < count; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), shuffle);
    std::vector<Pending> pending;
    for (int i : order) {
      Inputs in = MakeInputs(cases[i], topo.size, seed);
      ard_request req;
      ard_request_init(&req);
      FillRequest(cases[i], in.per_rank[topo.rank], cases[i].name, topo.rank, &req);
      char err[512];
      uint64_t handle;
      int code = ard_submit(client, &req, nullptr, nullptr, &handle, err, sizeof(err));
      if (code != 0) return Fail(cases[i].name + " submit: " + err);
      pending.push_back({cases[i], handle});
    }
    for (const Pending& p : pending) {
      ard_result r;
      int code = ard_wait(client, p.handle, -1, &r);
      if (code != 0) return Fail(p.c.name + " " + ard_code_name(code) + " " + r.message);
      Inputs in = MakeInputs(p.c, topo.size, seed);
      std::string why;
      if (!CheckResult(ComputeExpected(p.c, in, topo.rank, topo.size, {}, topo.local_size), r, &why)) {
        return Fail(p.c.name + " " + why);
      }
      ard_release(client, p.handle);
    }
  }
  std::printf("DONE %d\n", count * steps);
  return 0;
}

// Adasum: every float case checked against the plain reference within rounding (the RESULT
// hashes let the test compare ranks bit for bit), a group, then two refusals (an int32 tensor, a
// reducescatter) that fail on every rank with INVALID_ARGUMENT while the job goes on.
int Adasum(Worker& w) {
  int checked = 0;
  for (const Case& c : AdasumCases()) {
    if (!w.Run(c)) return 1;
    ++checked;
  }
  const std::vector<Case> group = AdasumGroupCases();
  if (!w.RunGroup(group)) return 1;
  checked += group.size();
  for (const Case& c : AdasumRefusedCases()) {
    ard_result r;
    Inputs in = MakeInputs(c, w.topo().size, 1);
    const int code = w.SubmitAndWait(c, in.per_rank[w.topo().rank], &r, c.name);
    std::printf("ERROR %s %d %s\n", c.name.c_str(), code, r.message ? r.message : "");
    if (code == 0) return Fail(c.name + " was accepted");
    ard_release(w.client(), w.last_handle());
  }
  if (!w.Run(AdasumCases()[0])) return 1;  // the job goes on
  std::printf("DONE %d\n", checked + 1);
  return 0;
}

// Rank-dependent shapes: every rank must get the same Horovod-shaped error, then the job goes on.
int Mismatch(Worker& w) {
  Case bad = SmallAllreduce(1);
  bad.name = "mismatched";
  bad.shape = {w.topo().rank == 0 ? 2 : 3, 3};
  ard_result r;
  Inputs in = MakeInputs(bad, w.topo().size, 1);
  int code = w.SubmitAndWait(bad, in.per_rank[w.topo().rank], &r, bad.name);
  std::printf("ERROR mismatched %d %s\n", code, r.message ? r.message : "");
  if (code == 0) return Fail("mismatched shapes were accepted");
  ard_release(w.client(), w.last_handle());
  Case good = SmallAllreduce(2);
  if (!w.Run(good)) return 1;
  std::printf("DONE 2\n");
  return 0;
}

// Ranks join at different points; the others' allreduces complete with joined ranks
// contributing nothing; join returns the last rank to join.
int Join(ard_client* client, const ard_topology& topo, uint64_t seed) {
  const int mine = topo.rank;  // rank r does r + 1 allreduces before joining
  for (int i = 0; i <= mine; ++i) {
    Case c = SmallAllreduce(100 + i);
    std::vector<bool> present(topo.size);
    for (int r = 0; r < topo.size; ++r) present[r] = i <= r;  // rank r takes part in i <= r
    Inputs in = MakeInputs(c, topo.size, seed);
    ard_request req;
    ard_request_init(&req);
    FillRequest(c, in.per_rank[mine], c.name, mine, &req);
    char err[512];
    uint64_t handle;
    if (ard_submit(client, &req, nullptr, nullptr, &handle, err, sizeof(err)) != 0) {
      return Fail(std::string("join submit ") + err);
    }
    ard_result r;
    if (ard_wait(client, handle, -1, &r) != 0) return Fail(std::string("join allreduce ") + r.message);
    std::string why;
    if (!CheckResult(ComputeExpected(c, in, mine, topo.size, present, topo.local_size), r, &why)) {
      return Fail(c.name + " with joined ranks: " + why);
    }
    ard_release(client, handle);
  }
  ard_request req;
  ard_request_init(&req);
  req.collective = ARD_JOIN;
  req.name = "join";
  char err[512];
  uint64_t handle;
  if (ard_submit(client, &req, nullptr, nullptr, &handle, err, sizeof(err)) != 0) {
    return Fail(std::string("join ") + err);
  }
  ard_result r;
  if (ard_wait(client, handle, -1, &r) != 0) return Fail(std::string("join ") + r.message);
  std::printf("JOINED last_rank=%d\n", r.join_last_rank);
  if (r.join_last_rank != topo.size - 1) return Fail("join_last_rank");
  ard_release(client, handle);
  std::printf("DONE 1\n");
  return 0;
}

// The steady state's carried rounds: `steps` steps of CarriedCases under the same names (the
// first a cache miss, the others agreed between the hosts), every result checked.
int Carried(Worker& w, int steps, int over_elements) {
  const std::vector<Case> cases = CarriedCases(over_elements);
  for (int step = 0; step < steps; ++step) {
    for (const Case& c : cases) {
      if (!w.Run(c)) return 1;
    }
  }
  std::printf("DONE %d\n", steps * static_cast<int>(cases.size()));
  return 0;
}

// Round trips of a 4-byte allreduce through the whole stack; prints percentiles (informational:
// no assertion on time).
// A training loop for the daemon soak test: `steps` steps of `per_step` small allreduces under the
// same names every step (as a model's gradients), each checked; "STEP k" every 100 steps so the
// test can sample the daemon's memory while it runs.
int Soak(ard_client* client, const ard_topology& topo, int steps, int per_step, uint64_t seed) {
  std::vector<Case> cases;
  std::vector<Inputs> inputs;
  std::vector<Expected> expected;
  for (int i = 0; i < per_step; ++i) {
    Case c = SmallAllreduce(i);
    c.name = "grad." + std::to_string(i);
    inputs.push_back(MakeInputs(c, topo.size, seed));
    expected.push_back(ComputeExpected(c, inputs.back(), topo.rank, topo.size, {}, topo.local_size));
    cases.push_back(std::move(c));
  }
  std::vector<uint64_t> handles(per_step);
  for (int step = 1; step <= steps; ++step) {
    for (int i = 0; i < per_step; ++i) {
      ard_request req;
      ard_request_init(&req);
      FillRequest(cases[i], inputs[i].per_rank[topo.rank], cases[i].name, topo.rank, &req);
      char err[512];
      if (ard_submit(client, &req, nullptr, nullptr, &handles[i], err, sizeof(err)) != 0) {
        return Fail(cases[i].name + " submit: " + err);
      }
    }
    for (int i = 0; i < per_step; ++i) {
      ard_result r;
      if (ard_wait(client, handles[i], -1, &r) != 0) {
        return Fail(cases[i].name + " " + (r.message ? r.message : ""));
      }
      std::string why;
      if (!CheckResult(expected[i], r, &why)) return Fail(cases[i].name + " " + why);
      ard_release(client, handles[i]);
    }
    if (step % 100 == 0) {
      std::printf("STEP %d\n", step);
      std::fflush(stdout);
    }
  }
  std::printf("DONE %d\n", steps * per_step);
  return 0;
}

int Latency(ard_client* client, const ard_topology& topo, int iterations) {
  std::vector<double> us;
  float value = 1.0f;
  const int64_t shape[] = {1};
  for (int i = 0; i < iterations; ++i) {
    ard_request req;
    ard_request_init(&req);
    req.collective = ARD_ALLREDUCE;
    req.dtype = ARD_FLOAT32;
    req.reduce_op = ARD_SUM;
    req.name = "latency";
    req.ndims = 1;
    req.shape = shape;
    req.data = &value;
    req.bytes = 4;
    char err[256];
    uint64_t handle;
    const auto start = std::chrono::steady_clock::now();
    if (ard_submit(client, &req, nullptr, nullptr, &handle, err, sizeof(err)) != 0) {
      return Fail(err);
    }
    ard_result r;
    if (ard_wait(client, handle, -1, &r) != 0) return Fail(r.message);
    ard_release(client, handle);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  std::printf("LATENCY_US p50=%.1f p90=%.1f p99=%.1f\n", us[us.size() / 2], us[us.size() * 9 / 10],
              us[us.size() * 99 / 100]);
  std::printf("DONE %d\n", iterations);
  return 0;
}

// Every rank but the last submits one tensor and reports how it ends; the last rank never submits
// (it sleeps until the test kills it), so the others' tensor stalls until the job fails.
int Stuck(Worker& w) {
  if (w.topo().rank == w.topo().size - 1) {
    std::printf("HANGING\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  Case c = SmallAllreduce(7);
  c.name = "stuck";
  Inputs in = MakeInputs(c, w.topo().size, 1);
  std::printf("SUBMITTED stuck\n");
  std::fflush(stdout);
  ard_result r;
  int code = w.SubmitAndWait(c, in.per_rank[w.topo().rank], &r, c.name);
  std::printf("ERROR stuck %d %s\n", code, r.message ? r.message : "");
  std::printf("DONE 0\n");
  return 0;
}

}  // namespace
}  // namespace ard::testing

int main(int argc, char** argv) {
  using namespace ard::testing;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: collective_worker matrix|many|mismatch|adasum|join|stuck [seed]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 12345;
  ard_options options;
  ard_options_init(&options);
  ard_client* client = nullptr;
  char err[512] = {};
  int code = ard_client_create(&options, &client, err, sizeof(err));
  if (code != 0) {
    std::printf("INIT_ERROR %s %s\n", ard_code_name(code), err);
    return 3;
  }
  Worker worker(client, seed);
  const ard_topology& t = worker.topo();
  std::printf("TOPOLOGY %d %d %d %d %d %d\n", t.rank, t.size, t.local_rank, t.local_size,
              t.cross_rank, t.cross_size);
  std::printf("JOB %s\n", ard_client_job(client));
  std::fflush(stdout);
  int rc = 2;
  if (mode == "matrix") rc = Matrix(worker);
  if (mode == "many") rc = Many(client, t, 1000, 2, seed);
  if (mode == "mismatch") rc = Mismatch(worker);
  if (mode == "adasum") rc = Adasum(worker);
  if (mode == "join") rc = Join(client, t, seed);
  if (mode == "stuck") rc = Stuck(worker);
  if (mode == "latency") rc = Latency(client, t, 2000);
  if (mode == "carried") {
    const char* steps = std::getenv("ARD_CARRIED_STEPS");
    const char* over = std::getenv("ARD_CARRIED_OVER_ELEMENTS");
    rc = Carried(worker, steps != nullptr ? std::atoi(steps) : 4,
                 over != nullptr ? std::atoi(over) : 257);
  }
  if (mode == "soak") {
    const char* steps = std::getenv("ARD_SOAK_STEPS");
    rc = Soak(client, t, steps != nullptr ? std::atoi(steps) : 500, 8, seed);
  }
  if (const int fault = RunFaultMode(mode, client, t); fault >= 0) rc = fault;
  std::fflush(stdout);
  ard_client_destroy(client);
  return rc;
}

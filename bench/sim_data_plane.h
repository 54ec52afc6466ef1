// The data-plane side of bench/scale_sim's simulated hosts: the coordinator-free steady state
// (DESIGN.md "Steady state without the coordinator") between N hosts in this process. Each host
// has what a daemon has for a cross-host job, built from the daemon's own libraries: a
// DataListener, the job's TcpMesh (handshake, O(log n) connections), the job's SteadyState (the
// readiness rounds, fed with the coordinator's JobEvents as committed lists) and the cross-host
// allreduce (AllreduceInPlace) of what a round releases. There are no ranks or shared memory
// behind a host: its one rank's input is a buffer of 1.0f, so every allreduce result must be n.
//
// Messages: every message of the rounds (CombineInPlace) and of a small allreduce (recursive
// doubling) carries the whole buffer, so a host's messages are its data-plane bytes (its
// listener's DataTraffic, counted by the mesh) over the buffer's size.
//
// Threads: the phases run on the caller's thread, each one on one thread per host that it joins
// before returning (the rounds are blocking collectives: every host needs a thread). OnEvent on
// the thread that pumps the coordinator's streams, concurrently with nothing but SteadyState's
// own locking (Received is posted there as the daemon's control loop posts it).
// Lifecycle: 1. construct; Start (listeners; addresses() for RegisterRanks); 2. Connect (the
// job's meshes, from the coordinator's layout); 3. OnEvent for every JobEvent; 4. Release (the
// round that releases the first step's lists, and their allreduces); 5. Steady; 6. destroy
// (closes meshes and listeners).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/jobs/steady_state.h"
#include "proto/negotiation.pb.h"

namespace ard::bench {

struct DataPlaneOptions {
  int hosts = 1000;
  int tensors = 200;
  uint64_t fusion_threshold_bytes = 128ull << 20;  // DaemonConfig's default
  absl::Duration connect_timeout = absl::Seconds(300);
  dataplane::tcp::TcpMeshOptions mesh;  // the daemon's defaults
};

// What one phase did, summed over hosts unless named otherwise.
struct DataPlaneCounts {
  long rounds = 0;          // readiness rounds run
  long agreed = 0;          // tensors the rounds agreed (held on every host)
  long tensors_run = 0;     // tensors the allreduces carried (agreed + released lists')
  long allreduces = 0;      // allreduces run (one per response a round released)
  long to_coordinator = 0;  // held tensors a round sent to the coordinator (none expected)
  long round_messages_sent = 0;
  long allreduce_messages_sent = 0;
  long messages_received = 0;  // rounds and allreduces
  long max_messages_sent = 0;  // the most one host sent
  uint64_t bytes_sent = 0;
  // CPU time of the hosts' threads (CLOCK_THREAD_CPUTIME_ID): building and offering the step's
  // tensors, the rounds (vote, exchange, outcome), the allreduces (with the result check).
  double offer_cpu_s = 0;
  double round_cpu_s = 0;
  double allreduce_cpu_s = 0;
  // Per-rank metadata entries the hosts' slot templates hold at the end of the phase
  // (SteadyRounds::template_rank_entries).
  long template_entries = 0;
};

class SimDataPlane {
 public:
  explicit SimDataPlane(DataPlaneOptions options);
  ~SimDataPlane();
  SimDataPlane(const SimDataPlane&) = delete;
  SimDataPlane& operator=(const SimDataPlane&) = delete;

  absl::Status Start();  // one DataListener per host, on 127.0.0.1, port 0
  // Host i's listener, "127.0.0.1:PORT" (after Start).
  const std::vector<std::string>& addresses() const { return addresses_; }

  // Every host connects its mesh of the job `layout` describes (sim host i is the layout's host
  // named names[i], one rank each) and builds its SteadyState. The listeners stop afterwards:
  // only the meshes are used from here on.
  absl::Status Connect(const JobLayout& layout, const std::vector<std::string>& names);
  // Host i received `event` from the coordinator (its stream order).
  void OnEvent(int host, const JobEvent& event);
  // One round on every host: it agrees nothing and releases the coordinator lists received so
  // far (the first step's tensors, all cache misses), whose allreduces then run.
  absl::StatusOr<DataPlaneCounts> Release();
  // `steps` steps: each host offers every tensor (held: cached, same metadata), runs one round
  // (which must agree every tensor) and the allreduces it releases, then starts the next step.
  // step_end_s() holds when the last host finished each step (from the phase start).
  absl::StatusOr<DataPlaneCounts> Steady(int steps);

  const std::vector<double>& step_end_s() const { return step_end_s_; }
  int max_connections() const;  // the most mesh peers one host has
  long connections() const;     // mesh peers summed over hosts (each connection counted twice)

 private:
  struct Host;
  // Runs body(host, counts) on one thread per host; sums the counts; the first error wins.
  absl::StatusOr<DataPlaneCounts> OnEveryHost(
      const std::function<absl::Status(Host&, DataPlaneCounts&)>& body);
  // Runs what a round released on `host`: every response is an allreduce of 1.0f.
  absl::Status Run(Host& host, const std::vector<negotiation::Response>& run,
                   DataPlaneCounts& counts);
  // One round on `host` (votes of `vote_bytes`); `run` gets what it released.
  absl::Status RoundOn(Host& host, size_t vote_bytes, DataPlaneCounts& counts,
                       std::vector<negotiation::Response>* run);

  const DataPlaneOptions options_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::string> addresses_;
  int job_size_ = 0;
  std::vector<double> step_end_s_;
  std::chrono::steady_clock::time_point phase_start_;
  absl::Mutex mu_;
  absl::Status event_error_ ABSL_GUARDED_BY(mu_);  // a JobEvent that could not be converted
};

}  // namespace ard::bench

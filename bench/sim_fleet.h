// Simulated hosts for bench/scale_sim: N fake followers in one process that speak the real cluster
// (Join, Heartbeat, Leave) and negotiation (RegisterRanks, Negotiate, WatchJob) protocols to a
// real coordinator daemon, with no ranks, tensors or data plane behind them (their data-plane
// addresses are made up unless FleetOptions.data_addresses names real listeners, as SimDataPlane's
// for the coordinator-free steady state; see bench/sim_data_plane.h).
//
// Threads: the phases run on the caller's thread. Each phase method starts asynchronous calls on
// one gRPC CompletionQueue and pumps it (Pump) until the phase is done, an RPC fails, or the
// phase's deadline passes. Heartbeats run on a thread of their own (own queue, own connections)
// from Join on, so a pump busy with large JobEvents does not get hosts marked DOWN.
//
// Lifecycle: 1. construct (opens the channels); 2. Join; 3. Form; 4. Watch; 5. FirstStep (full
// metadata, every name a cache miss); 6. Steady (cached ids only); 7. Leave; 8. destroy (cancels
// streams, stops heartbeats, drains the queue). A failed phase leaves error() set and every later
// phase fails at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "proto/cluster.grpc.pb.h"
#include "proto/negotiation.grpc.pb.h"

namespace ard::bench {

struct FleetOptions {
  std::string coordinator;     // HOST:PORT of the coordinator daemon's cluster service
  int hosts = 1000;            // simulated hosts, one rank each
  int tensors = 200;           // tensor names negotiated per step
  int hosts_per_channel = 50;  // hosts sharing one HTTP/2 connection
  int max_receive_bytes = -1;  // a channel's receive limit (-1: none; gRPC's default is 4 MiB)
  std::chrono::seconds phase_timeout{300};
  // Host i's data-plane address, sent in Join and RegisterRanks (empty: a made-up one for all).
  std::vector<std::string> data_addresses;
  // Called on the pumping thread with every JobEvent host i receives, in stream order.
  std::function<void(int host, const JobEvent& event)> on_event;
};

// Negotiation messages of one phase, summed over hosts (heartbeats are not counted).
struct MessageCount {
  long sent = 0;      // Negotiate / RegisterRanks requests
  long received = 0;  // JobEvents (and RegisterRanks replies)
};

class SimFleet {
 public:
  explicit SimFleet(FleetOptions options);
  ~SimFleet();

  bool Join();   // every host joins; heartbeats start
  bool Form();   // every host registers its rank for one job of `hosts` ranks
  bool Watch();  // every host opens its WatchJob stream (the coordinator backlogs until then)
  // One step in which every tensor is new: full metadata from every host, until every host has
  // seen every tensor committed (and learnt its cache id).
  bool FirstStep();
  // `steps` steps of cached ids; each host starts its next step as soon as it saw its last one
  // committed. step_end_s() holds when the last host finished each step (from the phase start).
  bool Steady(int steps);
  void Leave();  // every host leaves the job and the cluster (best effort)

  const std::string& error() const { return error_; }
  int job_size() const { return job_size_; }
  int layout_hosts() const { return layout_hosts_; }
  const JobLayout& layout() const { return layout_; }  // as RegisterRanks answered it
  const std::string& host_name(int i) const;           // simulated host i's name
  long min_committed() const;  // fewest committed tensors any host has seen (all phases)
  MessageCount messages() const { return messages_; }
  long largest_event_bytes() const { return largest_event_bytes_; }  // serialized JobEvent
  long heartbeat_failures() const { return heartbeat_failures_; }    // failed or late beats
  const std::vector<double>& step_end_s() const { return step_end_s_; }

 private:
  struct Host;
  struct Tag;
  template <class Response>
  struct UnaryCall;
  struct WatchStream;
  struct ChannelStubs {
    std::unique_ptr<Cluster::Stub> cluster;
    std::unique_ptr<Negotiation::Stub> negotiation;
  };

  template <class Response, class Start>
  void Call(Start start, std::function<void(const grpc::Status&, Response&)> done);
  bool Pump(const std::function<bool()>& finished);
  void Fail(const std::string& what);
  void BeatLoop();  // the heartbeat thread
  void StopBeats();
  void SendStep(Host& host, bool full);
  void OnEvent(Host& host, const JobEvent& event);
  ChannelStubs& StubsOf(const Host& host);

  FleetOptions options_;
  std::vector<ChannelStubs> channels_;
  std::vector<std::unique_ptr<Cluster::Stub>> beat_stubs_;  // same index as channels_
  std::vector<std::unique_ptr<Host>> hosts_;
  grpc::CompletionQueue cq_;
  std::string error_;
  int done_ = 0;   // hosts done with the current phase
  int steps_ = 0;  // steady steps wanted; a host's step k ends at tensors * (k + 2) commits
  int job_size_ = 0;
  int layout_hosts_ = 0;
  JobLayout layout_;
  uint64_t job_id_ = 0;
  uint64_t generation_ = 0;
  MessageCount messages_;
  // Heartbeat thread: hosts_ and their incarnations are read-only once it started.
  std::thread beat_thread_;
  std::chrono::milliseconds beat_every_{1000};
  std::mutex beat_mu_;
  std::condition_variable beat_wake_;
  bool beat_stop_ = false;  // guarded by beat_mu_
  std::string beat_error_;  // guarded by beat_mu_; set once, before beat_failed_
  std::atomic<bool> beat_failed_{false};
  std::atomic<long> heartbeat_failures_{0};
  long largest_event_bytes_ = 0;
  std::vector<int> step_hosts_done_;
  std::vector<double> step_end_s_;
  std::chrono::steady_clock::time_point phase_start_;
  long pending_ = 0;        // calls and streams started and not yet completed
  bool stopping_ = false;   // shutting down: no new calls
  bool shut_down_ = false;  // cq_ is shut down: tags are only deleted
  bool leaving_ = false;    // Leave() began: streams may end
};

}  // namespace ard::bench

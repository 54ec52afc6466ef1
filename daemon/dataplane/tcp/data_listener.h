// The daemon's data-plane listening socket (DESIGN.md "Data plane"): one per daemon, shared by
// every job. Peers dial it and send a DataHandshake; the listener validates it and parks the
// connection under (job_id, from_host) until that job's TcpMesh::Connect takes it.
//
// Threads: one accept thread ("ard-data-acc") accepts, reads handshakes (non-blocking, so a slow
// or silent dialer never holds up others) and expires connections. TakeConnection may be called
// from any thread, concurrently (one caller per key at a time is expected).
// Lifecycle: 1. construct (no socket yet); 2. Start() binds, listens and spawns the thread;
// port() is valid from here; 3. connections arrive and are taken; a handshake not completed
// within handshake_timeout, or a parked connection not taken within unclaimed_timeout, is closed;
// 4. Stop() (or the destructor) shuts the listening socket down, joins the thread, closes every
// parked or half-handshaken fd, and wakes TakeConnection callers with Cancelled.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/dataplane/tcp/handshake.h"
#include "daemon/dataplane/tcp/socket_util.h"

namespace ard::dataplane::tcp {

struct DataListenerOptions {
  std::string address = "0.0.0.0:0";  // HOST:PORT to listen on; port 0 picks a free one
  // Set on the listening socket so accepted connections inherit it (it must be set before the
  // handshake's SYN for TCP window scaling); 0 = kernel auto-tuning.
  int socket_buffer_bytes = kDefaultSocketBufferBytes;
  absl::Duration handshake_timeout = absl::Seconds(10);  // accept -> complete handshake
  // Parked but never taken (a peer dialed a job this host never joins, or dialed twice): closed.
  // Must exceed the longest gap between two hosts' TcpMesh::Connect calls for one job.
  absl::Duration unclaimed_timeout = absl::Seconds(60);
  // The daemon's cross-host algorithm settings: every mesh connected through this listener runs
  // its collectives with them (the listener is the daemon's one data-plane endpoint).
  AlgorithmOptions algorithms;
};

// Bytes moved by every mesh built on one listener (the daemon's data-plane totals, for metrics).
// Any thread.
struct DataTraffic {
  std::atomic<uint64_t> sent_bytes{0};
  std::atomic<uint64_t> received_bytes{0};
};

class DataListener {
 public:
  explicit DataListener(DataListenerOptions options);
  ~DataListener();
  DataListener(const DataListener&) = delete;
  DataListener& operator=(const DataListener&) = delete;

  // Binds and starts the accept thread. InvalidArgument/Unavailable for a bad address,
  // Internal if the socket cannot be bound. Call once.
  absl::Status Start();
  // Idempotent; see Lifecycle 4.
  void Stop();

  // The bound port (after Start), e.g. to publish "HOST:port" in the cluster KV.
  int port() const { return port_; }
  const DataListenerOptions& options() const { return options_; }
  // Counted by the meshes that TcpMesh::Connect builds with this listener; they share it.
  const std::shared_ptr<DataTraffic>& traffic() const { return traffic_; }

  // Waits up to `timeout` for the connection host `from_host` dialed for `job_id` and hands its fd
  // (non-blocking, owned by the caller) over. DeadlineExceeded naming job and host on timeout,
  // Cancelled once the listener stops.
  absl::StatusOr<int> TakeConnection(uint64_t job_id, uint32_t from_host, absl::Duration timeout);

 private:
  using Key = std::pair<uint64_t, uint32_t>;  // (job_id, from_host)
  // An accepted connection whose handshake is still arriving. Accept thread only.
  struct Pending {
    UniqueFd fd;
    DataHandshake handshake{};
    size_t received = 0;
    absl::Time deadline;
  };
  struct Parked {
    UniqueFd fd;
    absl::Time expires;
  };

  void AcceptLoop();
  void AcceptNew(std::vector<Pending>& pending);
  // Reads what has arrived; returns true when `p` is finished (parked or closed).
  bool ReadHandshake(Pending& p);
  void Park(Pending& p);
  void ExpireParked(absl::Time now);

  const DataListenerOptions options_;
  UniqueFd listen_fd_;
  int port_ = -1;
  const std::shared_ptr<DataTraffic> traffic_ = std::make_shared<DataTraffic>();
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  absl::Mutex mu_;
  absl::CondVar arrived_;  // signalled when a connection is parked or the listener stops
  std::map<Key, Parked> parked_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ard::dataplane::tcp

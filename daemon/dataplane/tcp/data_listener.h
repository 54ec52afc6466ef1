// The daemon's data-plane listening socket (DESIGN.md "Data plane", "Security"): one per daemon,
// shared by every job. Peers dial it and run the handshake of handshake.h; the listener answers
// steps 1-3 and parks the connection under (job_id, from_host) with the dialer's proof until that
// job's TcpMesh::Connect takes it: TakeConnection checks the proof with the job's secret (step 4)
// and hands over only a connection that passed. Several connections may wait under one key (one
// that parks first cannot take a real peer's place). Every connection refused is closed, counted
// by reason (rejected()) and logged at warn with the remote address, rate-limited.
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

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/dataplane/tcp/data_tls.h"
#include "daemon/dataplane/tcp/handshake.h"
#include "daemon/dataplane/tcp/socket_util.h"
#include "daemon/dataplane/tcp/warn_limiter.h"

namespace ard::dataplane::tcp {

struct DataListenerOptions {
  std::string address = "0.0.0.0:0";  // HOST:PORT to listen on; port 0 picks a free one
  // Set on the listening socket so accepted connections inherit it (it must be set before the
  // handshake's SYN for TCP window scaling); 0 = kernel auto-tuning.
  int socket_buffer_bytes = kDefaultSocketBufferBytes;
  // accept -> the dialer's proof arrived (steps 1-3); bounds a slow or silent dialer.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Parked but never taken (a peer dialed a job this host never joins, or dialed twice): closed.
  // Must exceed the longest gap between two hosts' TcpMesh::Connect calls for one job.
  absl::Duration unclaimed_timeout = absl::Seconds(60);
  // The daemon's cross-host algorithm settings: every mesh connected through this listener runs
  // its collectives with them (the listener is the daemon's one data-plane endpoint).
  AlgorithmOptions algorithms;
  // --data_plane_tls: every mesh connected through this listener encrypts its connections with
  // it (secure_mesh.h). Null: plaintext, authenticated by the job secret only.
  std::shared_ptr<const DataTlsContext> tls;
};

// Bytes moved by every mesh built on one listener (the daemon's data-plane totals, for metrics).
// Any thread.
struct DataTraffic {
  std::atomic<uint64_t> sent_bytes{0};
  std::atomic<uint64_t> received_bytes{0};
};

// Why the listener closed a connection (the label of the rejected-connections metric).
enum class RejectReason {
  kBadHello,          // not a valid DataHello: wrong magic or release, bad hosts, random bytes
  kClosedEarly,       // the dialer closed or reset before its proof arrived
  kHandshakeTimeout,  // steps 1-3 not done within handshake_timeout (slow loris)
  kWrongGeneration,   // a proof for another generation of the job (e.g. a replay)
  kWrongHost,         // names this job but another host as the acceptor
  kBadProof,          // the proof does not match the job's secret
  kUnclaimed,         // parked, never taken within unclaimed_timeout
  kOverflow,          // too many connections in the handshake or parked
};
inline constexpr int kRejectReasons = 8;
// The metric label: "bad_hello", "closed_early", ...
const char* RejectReasonName(RejectReason reason);

// What a job expects of the connection one peer dials to this host (TakeConnection).
struct ExpectedDial {
  uint64_t job_id = 0;
  uint64_t generation = 0;
  uint32_t from_host = 0;   // the dialing peer's host index
  uint32_t to_host = 0;     // this host's index in the job
  std::string_view secret;  // the job's secret for this generation (kJobSecretBytes)
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

  // Connections closed for `reason` since Start (for metrics). Any thread.
  uint64_t rejected(RejectReason reason) const {
    return rejected_[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }

  // Waits up to `timeout` until at least `count` connections are parked (tests that must know a
  // connection parked before another arrives); false on timeout.
  bool WaitForParked(size_t count, absl::Duration timeout);

  // Waits up to `timeout` for a connection that `expected.from_host` dialed for the job and that
  // proves the job's secret for its generation; sends this host's proof on it and hands its fd
  // (non-blocking, owned by the caller) over. Connections under the same key that fail the check
  // are closed and counted. DeadlineExceeded naming job and host on timeout, Cancelled once the
  // listener stops.
  absl::StatusOr<int> TakeConnection(const ExpectedDial& expected, absl::Duration timeout);

 private:
  using Key = std::pair<uint64_t, uint32_t>;  // (job_id, from_host)
  // An accepted connection whose handshake (steps 1-3) is still arriving. Accept thread only.
  struct Pending {
    UniqueFd fd;
    std::string peer;  // the remote address, for logs
    HelloReader hello;
    Nonce nonce{};  // ours (step 2), sent once the hello is whole
    bool nonce_sent = false;
    Proof proof{};  // the dialer's (step 3)
    size_t proof_received = 0;
    absl::Time deadline;
  };
  // Steps 1-3 done; the proof is checked when the job takes it.
  struct Parked {
    UniqueFd fd;
    std::string peer;
    DataHello hello{};
    Nonce nonce{};
    Proof proof{};
    absl::Time expires;
  };

  void AcceptLoop();
  void AcceptNew(std::vector<Pending>& pending);
  // Reads what has arrived; returns true when `p` is finished (parked or closed).
  bool ReadHandshake(Pending& p);
  bool ReadProof(Pending& p);
  void Park(Pending& p);
  void ExpireParked(absl::Time now);
  // Checks one parked connection against `expected`; on success sends this host's proof.
  absl::Status Verify(const Parked& parked, const ExpectedDial& expected, RejectReason* reason);
  // Counts and logs (rate-limited) a refused connection; the caller closes it.
  void Reject(RejectReason reason, const std::string& peer, absl::string_view why);

  const DataListenerOptions options_;
  UniqueFd listen_fd_;
  int port_ = -1;
  const std::shared_ptr<DataTraffic> traffic_ = std::make_shared<DataTraffic>();
  std::array<std::atomic<uint64_t>, kRejectReasons> rejected_{};
  WarnLimiter reject_warnings_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  absl::Mutex mu_;
  absl::CondVar arrived_;  // signalled when a connection is parked or the listener stops
  std::map<Key, std::deque<Parked>> parked_ ABSL_GUARDED_BY(mu_);  // arrival order per key
  size_t parked_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ard::dataplane::tcp

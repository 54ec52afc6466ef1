// The TCP connections of one job's data plane (DESIGN.md "Data plane"): one stream socket between
// this host and each of its O(log n) mesh peers (MeshPeers in algorithms.h: ring neighbours,
// hypercube and fold partners), and a poll()-driven engine that moves bytes on many of them at
// once. HostCollectives (host_collectives.h) builds the collectives on top, over those edges only.
//
// Streams carry the transfers' bytes, each transfer's bytes to one peer followed by their
// checksum (XXH3 64-bit, stream_checksum.h, seeded with the count of earlier transfers in that
// direction; taken while the bytes move, transfer_queue.h): every host runs the same collectives
// in the same order, so both ends of a connection agree on the sizes, and what one host sends to
// a peer in one transfer that peer receives in one transfer. A corrupt, shifted or truncated
// stream, or bytes past a transfer's end, fails the transfer that reads them with DataLoss naming
// the host. A transfer that fails leaves the byte streams out of step, so after any error the mesh
// is poisoned (every later call fails) and its sockets are shut down, which makes the peers'
// pending transfers fail promptly too. With the listener's TLS context (--data_plane_tls) every
// connection is TLS 1.3 (data_tls.h): a record that fails its MAC fails the transfer with
// DataLoss naming the host, like a checksum mismatch.
//
// Threads: Exchange/Transfer from one thread at a time (the job's executor). Abort() from any
// thread, concurrently with a transfer, but not concurrently with the destructor.
// Lifecycle: 1. Connect(): host i dials every peer j > i and runs the handshake's first half
// (handshake.h), then takes the connections of peers j < i from the DataListener, which checks
// their proofs, then checks the proofs of peers j > i (this order cannot deadlock: listeners
// answer the first half on their own thread), then checks with every peer that both use the same
// AlgorithmOptions (the listener's), after agreeing on encryption and, with data_plane_tls,
// running TLS on every connection (secure_mesh.h); 2. transfers; 3. optionally Abort(why) (or an
// error) poisons the mesh; 4. the destructor closes every socket (peers blocked on this host see
// Unavailable).
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/dataplane/tcp/data_tls.h"
#include "daemon/dataplane/tcp/socket_util.h"
#include "daemon/dataplane/tcp/transfer_queue.h"

namespace ard::dataplane::tcp {

struct TcpMeshOptions {
  // A transfer during which no byte moved on any of its connections for this long fails with
  // DeadlineExceeded naming the hosts it waited on.
  absl::Duration progress_timeout = absl::Seconds(30);
  int socket_buffer_bytes = kDefaultSocketBufferBytes;  // SO_SNDBUF/SO_RCVBUF of dialed sockets
  // Keep retrying non-blocking sends/receives for this long after the last progress before
  // sleeping in poll(): trades CPU for the ~100 us cross-core wake-up on small transfers
  // (mesh_bench only: in the daemon on 2 vCPUs it measured slower, bench/RESULTS_WHY.md).
  absl::Duration busy_poll = absl::ZeroDuration();
  // false: transfers carry no checksum. Only for mesh_bench's measurement of what the checksum
  // costs; every host of a mesh must agree (the daemon always checksums).
  bool checksum = true;
};

// The job a mesh serves, as the coordinator formed it: its id and the data-plane credentials of
// one generation (JobLayout.generation, JobLayout.data_secret).
struct MeshJob {
  uint64_t job_id = 0;
  uint64_t generation = 1;
  std::string secret;  // kJobSecretBytes (data_auth.h); never logged
};

class TcpMesh {
 public:
  // What each transfer adds to its bytes on each connection it moves bytes on: the checksum.
  static constexpr size_t kChecksumBytes = sizeof(uint64_t);

  // One contiguous byte range to send to / receive from `peer` (a host index other than self).
  struct Send {
    int peer;
    const void* data;
    size_t bytes;
  };
  struct Recv {
    int peer;
    void* data;
    size_t bytes;
  };

  // Builds the mesh of host `self` in a job of data_addresses.size() hosts; data_addresses[j] is
  // host j's DataListener "HOST:PORT" (own entry unused; only MeshPeers' are dialed). Dials retry
  // while refused until `timeout`, which bounds the whole call. Every connection proves the
  // job's secret both ways (handshake.h). The collectives on the mesh use
  // listener.options().algorithms. InvalidArgument for bad arguments (a secret of the wrong
  // size), DeadlineExceeded / Unavailable naming the job and the host that could not be reached,
  // Unauthenticated naming a host that did not prove the secret, FailedPrecondition when a
  // peer's AlgorithmOptions or data_plane_tls setting differ; TlsStream::Handshake's errors.
  static absl::StatusOr<std::unique_ptr<TcpMesh>> Connect(
      const MeshJob& job, int self, const std::vector<std::string>& data_addresses,
      DataListener& listener, absl::Duration timeout, TcpMeshOptions options = {});

  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  uint64_t job_id() const { return job_id_; }
  int self() const { return self_; }
  int size() const { return static_cast<int>(fds_.size()); }
  // The hosts this mesh has a connection to (MeshPeers(self, size)).
  const std::vector<int>& peers() const { return peers_; }
  const AlgorithmOptions& algorithms() const { return algorithms_; }
  // "off", or how TLS runs: "tls1.3 (kernel)" or "tls1.3 (userspace)".
  const std::string& encryption() const { return encryption_; }

  // Sends `send_bytes` to host `send_to` while receiving `recv_bytes` from host `recv_from`, both
  // progressing together (no deadlock for any sizes). Either peer may be -1 (none); they may be
  // the same host. Errors: Unavailable naming the peer that closed or reset its connection,
  // DeadlineExceeded naming the peers waited on (see progress_timeout), Abort()'s status once
  // aborted, FailedPrecondition after an earlier error, InvalidArgument for a host that is not
  // one of peers().
  absl::Status Exchange(int send_to, const void* send, size_t send_bytes, int recv_from, void* recv,
                        size_t recv_bytes);

  // The general form: all `sends` and `recvs` progress together; ranges naming the same peer
  // and direction are carried out in the order given. Returns when all bytes moved. Same errors.
  absl::Status Transfer(absl::Span<const Send> sends, absl::Span<const Recv> recvs);

  // Waits up to `timeout` until a peer's connection has bytes to read (or closed: the transfer
  // that reads it reports the error) -> true, or one of `also` (the caller's own descriptors,
  // e.g. an eventfd) is readable, or the time passed -> false. Nothing is read. Used by a host
  // idle between collectives to notice a peer starting a readiness round. The mesh's errors once
  // aborted or broken. Op thread only.
  absl::StatusOr<bool> WaitReadable(absl::Span<const int> also, absl::Duration timeout);

  // A staging area for the collectives run on this mesh (host_collectives.h), at least `bytes`
  // long, 64-byte aligned, contents undefined; valid until the next Scratch() call. Kept between
  // calls so that large collectives do not page-fault fresh memory every time. Op thread only.
  uint8_t* Scratch(size_t bytes);

  // Poisons the mesh and shuts every socket down, so that a transfer blocked in any thread returns
  // `why` promptly (a non-OK status; OK is replaced by Cancelled). Later aborts are ignored.
  void Abort(absl::Status why);

 private:
  struct PeerIo {
    TransferQueue out;
    TransferQueue in;
  };

  TcpMesh(uint64_t job_id, int self, std::vector<UniqueFd> fds, std::vector<int> peers,
          std::vector<std::unique_ptr<TlsStream>> tls, TcpMeshOptions options,
          AlgorithmOptions algorithms, std::shared_ptr<DataTraffic> traffic);

  // Formation step 3: every peer's AlgorithmOptions fingerprint must equal ours.
  absl::Status CheckPeersAgree();

  absl::Status CheckUsable() const;
  absl::Status Enqueue(int peer, bool send, const void* data, size_t bytes);
  // A receiving queue just completed: its checksum must match.
  absl::Status CheckReceived(int peer, TransferQueue& q);
  absl::Status Pump();
  absl::Status PumpPeer(int peer, bool* progressed);
  // One sendmsg/recvmsg (or TLS write/read) on q's next ranges; the errors of Transfer.
  absl::StatusOr<size_t> MoveBytes(int peer, bool send, TransferQueue& q);
  absl::Status StalledError() const;
  // Turns a transfer error into the mesh's final state (and the abort status, if aborted).
  absl::Status Fail(absl::Status error);
  void ShutdownAll();

  const uint64_t job_id_;
  const int self_;
  const TcpMeshOptions options_;
  const std::shared_ptr<DataTraffic> traffic_;  // the listener's totals
  const std::vector<UniqueFd> fds_;             // index = host; valid for peers_ only
  const std::vector<int> peers_;
  // Index = host: the connection's TLS, or null (plaintext). Op thread only.
  const std::vector<std::unique_ptr<TlsStream>> tls_;
  const std::string encryption_;
  const AlgorithmOptions algorithms_;

  std::vector<PeerIo> io_;  // op thread only
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, FreeDeleter> scratch_;  // op thread only
  size_t scratch_bytes_ = 0;
  std::vector<pollfd> poll_fds_;  // op thread only
  // The last transfer error was a peer's clean close (EOF): how a job's normal end reaches a host
  // waiting on that peer, so Fail logs it without calling it a failure. Op thread only.
  bool closed_by_peer_ = false;

  mutable absl::Mutex mu_;
  std::atomic<bool> aborted_{false};
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // first transfer error
};

}  // namespace ard::dataplane::tcp

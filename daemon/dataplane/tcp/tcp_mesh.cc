#include "daemon/dataplane/tcp/tcp_mesh.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/tcp/dial_handshake.h"
#include "daemon/dataplane/tcp/handshake.h"
#include "daemon/dataplane/tcp/secure_mesh.h"

namespace ard::dataplane::tcp {
namespace {

static_assert(sizeof(TransferQueue::trailer) == TcpMesh::kChecksumBytes);

bool RetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == ECONNRESET || err == EAGAIN;
}

// Waits for a non-blocking connect() to finish; returns its errno (0 = connected).
int WaitConnected(int fd, absl::Time deadline) {
  pollfd pfd{fd, POLLOUT, 0};
  const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
  if (::poll(&pfd, 1, absl::ToInt64Milliseconds(left) + 1) <= 0) return ETIMEDOUT;
  int err = 0;
  socklen_t length = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) < 0) return errno;
  return err;
}

std::string DialError(const DialIdentity& id, const std::string& address) {
  return absl::StrCat("job ", id.job_id, ": host ", id.from_host, " cannot connect to host ",
                      id.to_host, " at ", address, ": ");
}

// Connects to `address` (retrying while refused or unreachable) and runs the first half of the
// handshake (steps 1-3) on it.
absl::StatusOr<UniqueFd> Dial(const std::string& address, const DialIdentity& id,
                              absl::Time deadline, const TcpMeshOptions& options,
                              DialerHandshake* handshake) {
  const std::string who = DialError(id, address);
  absl::StatusOr<SocketAddress> resolved = ResolveHostPort(address);
  if (!resolved.ok())
    return absl::Status(resolved.status().code(), who + std::string(resolved.status().message()));
  absl::Duration backoff = absl::Milliseconds(5);
  for (;;) {
    UniqueFd fd(::socket(resolved->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return absl::InternalError(who + "socket: " + ErrnoText(errno));
    ARD_RETURN_IF_ERROR(SetBufferBytes(fd.get(), options.socket_buffer_bytes));
    int err = 0;
    if (::connect(fd.get(), resolved->get(), resolved->length) < 0) {
      err = errno == EINPROGRESS ? WaitConnected(fd.get(), deadline) : errno;
    }
    if (err == 0) {
      ARD_RETURN_IF_ERROR(SetNoDelay(fd.get()));
      absl::StatusOr<DialerHandshake> started = StartDialerHandshake(fd.get(), id, deadline);
      if (!started.ok()) {
        return absl::Status(started.status().code(), who + std::string(started.status().message()));
      }
      *handshake = *started;
      return fd;
    }
    if (!RetryableConnectError(err)) return absl::UnavailableError(who + ErrnoText(err));
    if (absl::Now() + backoff >= deadline) {
      return absl::DeadlineExceededError(who + ErrnoText(err) + " until the timeout");
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
}

// sendmsg of iov[0..count) capped at `limit` bytes (the last range is shortened for the call).
ssize_t SendCapped(int fd, iovec* iov, size_t count, size_t limit) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = std::min<size_t>(count, IOV_MAX);
  size_t cut = msg.msg_iovlen, cut_len = 0;
  for (size_t i = 0, left = limit; i < msg.msg_iovlen; left -= iov[i].iov_len, ++i) {
    if (iov[i].iov_len < left) continue;
    cut = i;
    cut_len = iov[i].iov_len;
    iov[i].iov_len = left;
    msg.msg_iovlen = i + 1;
    break;
  }
  const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (cut < count) iov[cut].iov_len = cut_len;  // no call in between: errno is sendmsg's
  return n;
}

std::string DescribeEncryption(const std::vector<std::unique_ptr<TlsStream>>& tls) {
  bool any = false, all_kernel = true;
  for (const auto& stream : tls) {
    if (stream == nullptr) continue;
    any = true;
    all_kernel = all_kernel && stream->kernel_tls();
  }
  if (!any) return "off";
  return all_kernel ? "tls1.3 (kernel)" : "tls1.3 (userspace)";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpMesh>> TcpMesh::Connect(
    const MeshJob& job, int self, const std::vector<std::string>& data_addresses,
    DataListener& listener, absl::Duration timeout, TcpMeshOptions options) {
  const uint64_t job_id = job.job_id;
  const int n = static_cast<int>(data_addresses.size());
  if (n < 1 || n > static_cast<int>(kMaxHosts) || self < 0 || self >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job_id, ": host index ", self, " in a job of ", n, " hosts"));
  }
  if (job.secret.size() != kJobSecretBytes || job.generation == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job_id, ": the coordinator sent no data-plane secret for generation ",
                     job.generation, " (", job.secret.size(), " bytes)"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<UniqueFd> fds(n);
  std::vector<DialerHandshake> dialed(n);
  std::vector<int> peers = MeshPeers(self, n);
  auto identity = [&](int j) {
    return DialIdentity{job_id, job.generation, static_cast<uint32_t>(self),
                        static_cast<uint32_t>(j), job.secret};
  };
  for (int j : peers) {  // steps 1-3 with every higher peer: their listeners answer at once
    if (j < self) continue;
    ARD_ASSIGN_OR_RETURN(fds[j],
                         Dial(data_addresses[j], identity(j), deadline, options, &dialed[j]));
  }
  for (int j : peers) {  // the lower peers' connections, checked against the secret
    if (j > self) break;
    const ExpectedDial expected{job_id, job.generation, static_cast<uint32_t>(j),
                                static_cast<uint32_t>(self), job.secret};
    ARD_ASSIGN_OR_RETURN(
        const int fd,
        listener.TakeConnection(expected, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    fds[j].Reset(fd);
    ARD_RETURN_IF_ERROR(SetNoDelay(fd));
    ARD_RETURN_IF_ERROR(SetNonBlocking(fd));
  }
  for (int j : peers) {  // step 4: every higher peer took our connection and proved the secret
    if (j < self) continue;
    const absl::Status proved =
        FinishDialerHandshake(fds[j].get(), dialed[j], job.secret, deadline);
    if (!proved.ok()) {
      return absl::Status(
          proved.code(), DialError(identity(j), data_addresses[j]) + std::string(proved.message()));
    }
  }
  const SecureMeshInput secure{
      job_id, self, &peers, &fds, &data_addresses, listener.options().tls.get()};
  ARD_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<TlsStream>> tls, SecureMesh(secure, deadline));
  const size_t connections = peers.size();
  std::unique_ptr<TcpMesh> mesh(new TcpMesh(job_id, self, std::move(fds), std::move(peers),
                                            std::move(tls), options, listener.options().algorithms,
                                            listener.traffic()));
  ARD_RETURN_IF_ERROR(mesh->CheckPeersAgree());
  Logger("dataplane")
      ->info(
          "tcp mesh connected job={} generation={} host={} hosts={} connections={} encryption={}",
          job_id, job.generation, self, n, connections, mesh->encryption());
  return mesh;
}

TcpMesh::TcpMesh(uint64_t job_id, int self, std::vector<UniqueFd> fds, std::vector<int> peers,
                 std::vector<std::unique_ptr<TlsStream>> tls, TcpMeshOptions options,
                 AlgorithmOptions algorithms, std::shared_ptr<DataTraffic> traffic)
    : job_id_(job_id),
      self_(self),
      options_(options),
      traffic_(std::move(traffic)),
      fds_(std::move(fds)),
      peers_(std::move(peers)),
      tls_(std::move(tls)),
      encryption_(DescribeEncryption(tls_)),
      algorithms_(algorithms),
      io_(fds_.size()) {
  for (PeerIo& io : io_) io.out.checksum = io.in.checksum = options_.checksum;
}

absl::Status TcpMesh::CheckPeersAgree() {
  const uint64_t mine = Fingerprint(algorithms_);
  std::vector<uint64_t> theirs(size(), 0);
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  for (int p : peers_) {
    sends.push_back({p, &mine, sizeof mine});
    recvs.push_back({p, &theirs[p], sizeof theirs[p]});
  }
  ARD_RETURN_IF_ERROR(Transfer(sends, recvs));
  for (int p : peers_) {
    if (theirs[p] == mine) continue;
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, ": host ", self_, " and host ", p,
                     " run the data plane with different algorithm settings (cross_host_algorithm, "
                     "cross_host_ring_threshold_bytes, cross_host_chunk_bytes, steady_state, "
                     "steady_round_data_max_bytes must be equal on every host)")));
  }
  return absl::OkStatus();
}

TcpMesh::~TcpMesh() { Logger("dataplane")->info("tcp mesh closed job={} host={}", job_id_, self_); }

absl::Status TcpMesh::Exchange(int send_to, const void* send, size_t send_bytes, int recv_from,
                               void* recv, size_t recv_bytes) {
  const Send s{send_to, send, send_bytes};
  const Recv r{recv_from, recv, recv_bytes};
  return Transfer(absl::MakeConstSpan(&s, send_to < 0 ? 0 : 1),
                  absl::MakeConstSpan(&r, recv_from < 0 ? 0 : 1));
}

absl::Status TcpMesh::Transfer(absl::Span<const Send> sends, absl::Span<const Recv> recvs) {
  ARD_RETURN_IF_ERROR(CheckUsable());
  for (int peer : peers_) {  // keeps the vectors' capacity: no allocation per transfer
    io_[peer].out.Reset();
    io_[peer].in.Reset();
  }
  for (const Send& s : sends) ARD_RETURN_IF_ERROR(Enqueue(s.peer, true, s.data, s.bytes));
  for (const Recv& r : recvs) ARD_RETURN_IF_ERROR(Enqueue(r.peer, false, r.data, r.bytes));
  for (int peer : peers_) {
    io_[peer].out.Seal(true);
    io_[peer].in.Seal(false);
  }
  absl::Status status = Pump();
  if (!status.ok()) return Fail(std::move(status));
  return absl::OkStatus();
}

absl::StatusOr<bool> TcpMesh::WaitReadable(absl::Span<const int> also, absl::Duration timeout) {
  ARD_RETURN_IF_ERROR(CheckUsable());
  for (int peer : peers_) {  // bytes TLS already read and decrypted: poll() cannot see them
    if (tls_[peer] != nullptr && tls_[peer]->pending()) return true;
  }
  poll_fds_.clear();
  for (int peer : peers_) poll_fds_.push_back(pollfd{fds_[peer].get(), POLLIN, 0});
  for (int fd : also) poll_fds_.push_back(pollfd{fd, POLLIN, 0});
  const int n = ::poll(poll_fds_.data(), poll_fds_.size(), absl::ToInt64Milliseconds(timeout));
  if (n < 0 && errno != EINTR) {
    return absl::InternalError(absl::StrCat("job ", job_id_, ": poll: ", ErrnoText(errno)));
  }
  ARD_RETURN_IF_ERROR(CheckUsable());
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (poll_fds_[i].revents != 0) return true;
  }
  return false;
}

void TcpMesh::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

uint8_t* TcpMesh::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    scratch_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    ARD_CHECK(scratch_ != nullptr);
    scratch_bytes_ = rounded;
  }
  return scratch_.get();
}

void TcpMesh::Abort(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return;
  abort_status_ = why.ok() ? absl::CancelledError("tcp mesh aborted") : std::move(why);
  aborted_ = true;
  ShutdownAll();
  if (absl::IsCancelled(abort_status_)) {  // the job ended normally (or was cancelled)
    Logger("dataplane")
        ->debug("tcp mesh closed job={} host={}: {}", job_id_, self_, abort_status_.message());
  } else {
    Logger("dataplane")
        ->info("tcp mesh aborted job={} host={}: {}", job_id_, self_, abort_status_.message());
  }
}

absl::Status TcpMesh::CheckUsable() const {
  absl::MutexLock lock(&mu_);
  if (aborted_) return abort_status_;
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id_, ": tcp mesh unusable after an earlier error: ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Enqueue(int peer, bool send, const void* data, size_t bytes) {
  if (peer < 0 || peer >= size() || !fds_[peer].valid()) {
    return absl::InvalidArgumentError(absl::StrCat("job ", job_id_, ": host ", self_,
                                                   " cannot transfer with host ", peer,
                                                   " (not one of its mesh peers)"));
  }
  if (bytes == 0) return absl::OkStatus();
  (send ? io_[peer].out : io_[peer].in).Add(const_cast<void*>(data), bytes);
  return absl::OkStatus();
}

absl::Status TcpMesh::CheckReceived(int peer, TransferQueue& q) {
  const uint64_t transfer = q.transfers;
  if (q.Received()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "job ", job_id_, ": host ", self_, " received a corrupt stream from host ", peer,
      " (checksum mismatch in transfer ", transfer,
      "): its bytes were changed, cut short or shifted on the way; nothing of it was used"));
}

absl::Status TcpMesh::Pump() {
  absl::Time last_progress = absl::Now();
  for (;;) {
    bool progressed = false;
    poll_fds_.clear();
    for (int peer : peers_) {
      ARD_RETURN_IF_ERROR(PumpPeer(peer, &progressed));
      const short events =
          (io_[peer].out.done() ? 0 : POLLOUT) | (io_[peer].in.done() ? 0 : POLLIN);
      if (events != 0) poll_fds_.push_back(pollfd{fds_[peer].get(), events, 0});
    }
    if (poll_fds_.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (progressed) {
      last_progress = now;
      continue;  // try again before sleeping: the socket buffers may have room
    }
    if (now - last_progress < options_.busy_poll) continue;
    const absl::Duration left = last_progress + options_.progress_timeout - now;
    if (left <= absl::ZeroDuration()) return StalledError();
    if (::poll(poll_fds_.data(), poll_fds_.size(), absl::ToInt64Milliseconds(left) + 1) < 0 &&
        errno != EINTR) {
      return absl::InternalError(absl::StrCat("job ", job_id_, ": poll: ", ErrnoText(errno)));
    }
    if (aborted_) return absl::CancelledError("aborted");  // replaced by Fail()
  }
}

absl::StatusOr<size_t> TcpMesh::MoveBytes(int peer, bool send, TransferQueue& q) {
  const int fd = fds_[peer].get();
  TlsStream* tls = tls_[peer].get();
  iovec* ranges = q.iov.data() + q.next;
  const size_t count = q.iov.size() - q.next;
  ssize_t n;
  if (send) q.ChecksumAhead();  // the bytes about to go out, summed while they are in cache
  if (tls != nullptr) {         // one range per call: a TLS record never spans two ranges
    n = send ? tls->Write(ranges->iov_base, std::min(ranges->iov_len, q.SendLimit()))
             : tls->Read(ranges->iov_base, ranges->iov_len);
  } else if (send) {
    n = SendCapped(fd, ranges, count, q.SendLimit());
  } else {
    msghdr msg{};
    msg.msg_iov = ranges;
    msg.msg_iovlen = std::min<size_t>(count, IOV_MAX);
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n < 0 && tls != nullptr && errno == EBADMSG) {
    return absl::DataLossError(
        absl::StrCat("job ", job_id_, ": host ", self_, " lost the TLS stream with host ", peer,
                     " while ", send ? "sending" : "receiving",
                     " (a record failed its check: the bytes were changed on "
                     "the way, or the stream broke): ",
                     tls->error()));
  }
  if (n <= 0) {
    closed_by_peer_ = n == 0;
    const std::string why = n == 0 ? "connection closed by the peer" : ErrnoText(errno);
    return absl::UnavailableError(absl::StrCat("job ", job_id_, ": host ", self_, " lost host ",
                                               peer, " while ", send ? "sending" : "receiving",
                                               ": ", why));
  }
  return static_cast<size_t>(n);
}

absl::Status TcpMesh::PumpPeer(int peer, bool* progressed) {
  PeerIo& io = io_[peer];
  for (int dir = 0; dir < 2; ++dir) {
    const bool send = dir == 0;
    TransferQueue& q = send ? io.out : io.in;
    if (q.done()) continue;
    ARD_ASSIGN_OR_RETURN(const size_t n, MoveBytes(peer, send, q));
    if (n == 0) continue;
    *progressed = true;
    (send ? traffic_->sent_bytes : traffic_->received_bytes)
        .fetch_add(n, std::memory_order_relaxed);
    q.Advance(n, send);  // receiving: the checksum of the chunk just written, while in cache
    if (!send && q.done() && options_.checksum) ARD_RETURN_IF_ERROR(CheckReceived(peer, q));
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::StalledError() const {
  std::vector<int> to, from;
  for (int peer : peers_) {
    if (!io_[peer].out.done()) to.push_back(peer);
    if (!io_[peer].in.done()) from.push_back(peer);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", job_id_, ": host ", self_, ": no data moved for ",
      FormatDurationShort(options_.progress_timeout), " (waiting to receive from hosts [",
      absl::StrJoin(from, ","), "], to send to hosts [", absl::StrJoin(to, ","), "])"));
}

absl::Status TcpMesh::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return abort_status_;
  if (broken_.ok()) {
    broken_ = error;
    ShutdownAll();  // peers blocked on this host fail now instead of at their progress timeout
    // A peer's clean close is the job's normal end there (or a failure its daemon or the
    // coordinator reports); the mesh does not call it a failure of its own.
    if (closed_by_peer_ && absl::IsUnavailable(error)) {
      Logger("dataplane")
          ->info("tcp mesh peer closed job={} host={}: {}", job_id_, self_, error.message());
    } else {
      Logger("dataplane")
          ->warn("tcp mesh failed job={} host={}: {}", job_id_, self_, error.message());
    }
  }
  return error;
}

void TcpMesh::ShutdownAll() {
  for (const UniqueFd& fd : fds_) {
    if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  }
}

}  // namespace ard::dataplane::tcp

#include "daemon/dataplane/tcp/data_listener.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"

namespace ard::dataplane::tcp {
namespace {

// Upper bound on one poll() of the accept thread, so parked connections expire on time.
constexpr absl::Duration kMaxPollWait = absl::Seconds(1);
// Bounds on what a stranger can make the listener hold (each is an fd): connections in the
// handshake, and connections parked for a job that has not taken them yet.
constexpr size_t kMaxPending = 128;
constexpr size_t kMaxParked = 512;

}  // namespace

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBadHello:
      return "bad_hello";
    case RejectReason::kClosedEarly:
      return "closed_early";
    case RejectReason::kHandshakeTimeout:
      return "handshake_timeout";
    case RejectReason::kWrongGeneration:
      return "wrong_generation";
    case RejectReason::kWrongHost:
      return "wrong_host";
    case RejectReason::kBadProof:
      return "bad_proof";
    case RejectReason::kUnclaimed:
      return "unclaimed";
    case RejectReason::kOverflow:
      return "overflow";
  }
  return "?";
}

DataListener::DataListener(DataListenerOptions options) : options_(std::move(options)) {}

DataListener::~DataListener() { Stop(); }

absl::Status DataListener::Start() {
  absl::StatusOr<SocketAddress> address = ResolveHostPort(options_.address);
  if (!address.ok()) return address.status();
  UniqueFd fd(::socket(address->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  absl::Status s = SetBufferBytes(fd.get(), options_.socket_buffer_bytes);
  if (!s.ok()) return s;
  if (::bind(fd.get(), address->get(), address->length) < 0 || ::listen(fd.get(), SOMAXCONN) < 0) {
    return absl::InternalError(
        absl::StrCat("cannot listen on ", options_.address, ": ", ErrnoText(errno)));
  }
  port_ = LocalPort(fd.get());
  listen_fd_ = std::move(fd);
  thread_ = std::thread([this] { AcceptLoop(); });
  Logger("dataplane")->info("data listener started address={} port={}", options_.address, port_);
  return absl::OkStatus();
}

void DataListener::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    arrived_.SignalAll();
  }
  stopping_ = true;
  // Wakes the accept thread's poll() (the listening socket reports POLLHUP).
  if (listen_fd_.valid()) ::shutdown(listen_fd_.get(), SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  const bool was_started = listen_fd_.valid();
  listen_fd_.Reset();
  absl::MutexLock lock(&mu_);
  parked_.clear();  // closes the fds
  parked_count_ = 0;
  if (was_started) Logger("dataplane")->info("data listener stopped port={}", port_);
}

absl::StatusOr<int> DataListener::TakeConnection(const ExpectedDial& expected,
                                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const Key key(expected.job_id, expected.from_host);
  absl::MutexLock lock(&mu_);
  for (bool timed_out = false;; timed_out = arrived_.WaitWithDeadline(&mu_, deadline)) {
    if (stopped_) return absl::CancelledError("data listener stopped");
    auto it = parked_.find(key);
    while (it != parked_.end() && !it->second.empty()) {
      Parked parked = std::move(it->second.front());
      it->second.pop_front();
      --parked_count_;
      RejectReason reason;
      const absl::Status verified = Verify(parked, expected, &reason);
      if (verified.ok()) {
        if (it->second.empty()) parked_.erase(it);
        return parked.fd.Release();
      }
      Reject(reason, parked.peer, verified.message());  // `parked.fd` closes here
    }
    if (it != parked_.end()) parked_.erase(it);
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(
          "job ", expected.job_id, ": host ", expected.from_host,
          " did not connect to the data port ", port_, " within ", FormatDurationShort(timeout)));
    }
  }
}

bool DataListener::WaitForParked(size_t count, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (parked_count_ < count) {
    if (arrived_.WaitWithDeadline(&mu_, deadline)) return parked_count_ >= count;
  }
  return true;
}

absl::Status DataListener::Verify(const Parked& parked, const ExpectedDial& expected,
                                  RejectReason* reason) {
  const DataHello& h = parked.hello;
  if (h.generation != expected.generation) {
    *reason = RejectReason::kWrongGeneration;
    return absl::UnauthenticatedError(absl::StrCat("job ", h.job_id, " generation ", h.generation,
                                                   ", the job runs generation ",
                                                   expected.generation));
  }
  if (h.to_host != expected.to_host) {
    *reason = RejectReason::kWrongHost;
    return absl::UnauthenticatedError(absl::StrCat("job ", h.job_id, " names host ", h.to_host,
                                                   ", this host is ", expected.to_host));
  }
  if (expected.secret.size() != kJobSecretBytes ||
      !ProofsEqual(parked.proof,
                   ComputeProof(expected.secret, ProofRole::kDialer, h, parked.nonce))) {
    *reason = RejectReason::kBadProof;
    return absl::UnauthenticatedError(
        absl::StrCat("job ", h.job_id, " host ", h.from_host, ": wrong proof of the job secret"));
  }
  const Proof mine = ComputeProof(expected.secret, ProofRole::kAcceptor, h, parked.nonce);
  // 32 bytes into a socket that has sent 16: the send buffer has room, so this never waits.
  const ssize_t n = ::send(parked.fd.get(), mine.data(), mine.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(mine.size())) {
    *reason = RejectReason::kClosedEarly;
    return absl::UnavailableError(absl::StrCat(
        "job ", h.job_id, " host ", h.from_host,
        ": cannot send the acceptor proof: ", n < 0 ? ErrnoText(errno) : "short send"));
  }
  return absl::OkStatus();
}

void DataListener::Reject(RejectReason reason, const std::string& peer, absl::string_view why) {
  rejected_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  uint64_t suppressed = 0;
  if (!reject_warnings_.Allow(absl::Now(), &suppressed)) return;
  Logger("dataplane")
      ->warn(
          "data connection from {} rejected reason={}: {}{}", peer, RejectReasonName(reason), why,
          suppressed == 0 ? "" : absl::StrCat(" (", suppressed, " earlier rejections not logged)"));
}

void DataListener::AcceptLoop() {
  pthread_setname_np(pthread_self(), "ard-data-acc");
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Duration wait = kMaxPollWait;
    fds.assign(1, pollfd{listen_fd_.get(), POLLIN, 0});
    for (const Pending& p : pending) {
      fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      wait = std::min(wait, p.deadline - now);
    }
    wait = std::max(wait, absl::ZeroDuration());
    const int n = ::poll(fds.data(), fds.size(), absl::ToInt64Milliseconds(wait) + 1);
    if (stopping_) break;
    if (n < 0 && errno != EINTR) {
      Logger("dataplane")->error("data listener poll failed: {}", ErrnoText(errno));
      break;
    }
    // Handshakes first (indexes of `fds` match `pending` until AcceptNew appends to it).
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (fds[i + 1].revents != 0 && ReadHandshake(p)) continue;
      if (absl::Now() >= p.deadline) {
        Reject(RejectReason::kHandshakeTimeout, p.peer,
               absl::StrCat("handshake not done within ",
                            FormatDurationShort(options_.handshake_timeout)));
        continue;  // `p.fd` closes with `pending`
      }
      still.push_back(std::move(p));
    }
    pending.swap(still);
    if (fds[0].revents != 0) AcceptNew(pending);
    ExpireParked(absl::Now());
  }
}

void DataListener::AcceptNew(std::vector<Pending>& pending) {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Pending p;
      p.fd.Reset(fd);
      p.peer = PeerName(fd);
      if (pending.size() >= kMaxPending) {
        Reject(RejectReason::kOverflow, p.peer,
               absl::StrCat(kMaxPending, " connections already in the handshake"));
        continue;
      }
      p.deadline = absl::Now() + options_.handshake_timeout;
      if (!ReadHandshake(p)) pending.push_back(std::move(p));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    Logger("dataplane")->warn("data listener accept failed: {}", ErrnoText(errno));
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      ::usleep(100 * 1000);  // out of descriptors: do not spin on the readable socket
    }
    return;
  }
}

bool DataListener::ReadHandshake(Pending& p) {
  while (!p.hello.done()) {
    absl::Span<uint8_t> into = p.hello.Remaining();
    const ssize_t n = ::recv(p.fd.get(), into.data(), into.size(), 0);
    if (n > 0) {
      const absl::Status valid = p.hello.Advance(static_cast<size_t>(n));
      if (valid.ok()) continue;
      Reject(RejectReason::kBadHello, p.peer, valid.message());
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    Reject(RejectReason::kClosedEarly, p.peer,
           absl::StrCat("closed before its hello (", n == 0 ? "end of stream" : ErrnoText(errno),
                        ")"));
    return true;
  }
  if (!p.nonce_sent) {  // step 2, once
    absl::StatusOr<Nonce> nonce = NewNonce();
    if (!nonce.ok()) {
      Logger("dataplane")->error("data connection from {}: {}", p.peer, nonce.status().message());
      return true;
    }
    p.nonce = *nonce;
    // 16 bytes on a fresh connection: the send buffer has room, so this never waits.
    if (::send(p.fd.get(), p.nonce.data(), p.nonce.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(p.nonce.size())) {
      Reject(RejectReason::kClosedEarly, p.peer, "cannot send the acceptor nonce");
      return true;
    }
    p.nonce_sent = true;
  }
  return ReadProof(p);
}

bool DataListener::ReadProof(Pending& p) {
  while (p.proof_received < p.proof.size()) {
    const size_t have = p.proof_received;
    const ssize_t n = ::recv(p.fd.get(), p.proof.data() + have, p.proof.size() - have, 0);
    if (n > 0) {
      p.proof_received += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    Reject(RejectReason::kClosedEarly, p.peer,
           absl::StrCat("closed before its proof (", n == 0 ? "end of stream" : ErrnoText(errno),
                        ")"));
    return true;
  }
  Park(p);
  return true;
}

void DataListener::Park(Pending& p) {
  const DataHello& h = p.hello.hello();
  const Key key(h.job_id, h.from_host);
  absl::MutexLock lock(&mu_);
  if (parked_count_ >= kMaxParked) {
    Reject(RejectReason::kOverflow, p.peer,
           absl::StrCat(kMaxParked, " connections already wait for their jobs"));
    return;
  }
  Logger("dataplane")
      ->debug("data connection parked job={} generation={} from_host={} to_host={} peer={}",
              h.job_id, h.generation, h.from_host, h.to_host, p.peer);
  Parked parked;
  parked.fd = std::move(p.fd);
  parked.peer = std::move(p.peer);
  parked.hello = h;
  parked.nonce = p.nonce;
  parked.proof = p.proof;
  parked.expires = absl::Now() + options_.unclaimed_timeout;
  parked_[key].push_back(std::move(parked));
  ++parked_count_;
  arrived_.SignalAll();
}

void DataListener::ExpireParked(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    std::deque<Parked>& queue = it->second;
    while (!queue.empty() && now >= queue.front().expires) {  // expiries rise along the queue
      Reject(RejectReason::kUnclaimed, queue.front().peer,
             absl::StrCat("job ", it->first.first, " from_host ", it->first.second,
                          ": not taken within ", FormatDurationShort(options_.unclaimed_timeout)));
      queue.pop_front();
      --parked_count_;
    }
    it = queue.empty() ? parked_.erase(it) : std::next(it);
  }
}

}  // namespace ard::dataplane::tcp

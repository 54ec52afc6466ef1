#include "daemon/dataplane/tcp/data_listener.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"

namespace ard::dataplane::tcp {
namespace {

// Upper bound on one poll() of the accept thread, so parked connections expire on time.
constexpr absl::Duration kMaxPollWait = absl::Seconds(1);

}  // namespace

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
  if (was_started) Logger("dataplane")->info("data listener stopped port={}", port_);
}

absl::StatusOr<int> DataListener::TakeConnection(uint64_t job_id, uint32_t from_host,
                                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  for (bool timed_out = false;; timed_out = arrived_.WaitWithDeadline(&mu_, deadline)) {
    if (stopped_) return absl::CancelledError("data listener stopped");
    auto it = parked_.find(Key(job_id, from_host));
    if (it != parked_.end()) {
      const int fd = it->second.fd.Release();
      parked_.erase(it);
      return fd;
    }
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat("job ", job_id, ": host ", from_host,
                                                      " did not connect to the data port ", port_,
                                                      " within ", FormatDurationShort(timeout)));
    }
  }
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
        Logger("dataplane")
            ->warn("data connection from {} closed: no handshake within {}", PeerName(p.fd.get()),
                   FormatDurationShort(options_.handshake_timeout));
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
  char* dst = reinterpret_cast<char*>(&p.handshake);
  while (p.received < sizeof(DataHandshake)) {
    const ssize_t n = ::recv(p.fd.get(), dst + p.received, sizeof(DataHandshake) - p.received, 0);
    if (n > 0) {
      p.received += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    Logger("dataplane")
        ->warn("data connection from {} closed before its handshake ({})", PeerName(p.fd.get()),
               n == 0 ? "end of stream" : ErrnoText(errno));
    p.fd.Reset();
    return true;
  }
  const absl::Status valid = ValidateHandshake(p.handshake);
  if (!valid.ok()) {
    Logger("dataplane")
        ->warn("data connection from {} rejected: {}", PeerName(p.fd.get()), valid.message());
    p.fd.Reset();
    return true;
  }
  Park(p);
  return true;
}

void DataListener::Park(Pending& p) {
  const Key key(p.handshake.job_id, p.handshake.from_host);
  Logger("dataplane")
      ->debug("data connection parked job={} from_host={} to_host={} peer={}", key.first,
              key.second, p.handshake.to_host, PeerName(p.fd.get()));
  absl::MutexLock lock(&mu_);
  Parked& slot = parked_[key];
  if (slot.fd.valid()) {
    Logger("dataplane")
        ->warn("job={} from_host={}: a second data connection replaced an untaken one", key.first,
               key.second);
  }
  slot.fd = std::move(p.fd);
  slot.expires = absl::Now() + options_.unclaimed_timeout;
  arrived_.SignalAll();
}

void DataListener::ExpireParked(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (now < it->second.expires) {
      ++it;
      continue;
    }
    Logger("dataplane")
        ->warn("job={} from_host={}: data connection not taken within {}, closed", it->first.first,
               it->first.second, FormatDurationShort(options_.unclaimed_timeout));
    it = parked_.erase(it);
  }
}

}  // namespace ard::dataplane::tcp

// Small POSIX socket helpers shared by the TCP data plane (DataListener, TcpMesh): an owning fd,
// HOST:PORT resolution, socket options, and deadline-bounded reads and writes for the handshake.
// Stateless functions over caller-owned fds: any thread.
#pragma once

#include <sys/socket.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ard::dataplane::tcp {

// SO_SNDBUF/SO_RCVBUF for data connections (see SetBufferBytes); mesh_bench measures the choice.
inline constexpr int kDefaultSocketBufferBytes = 4 << 20;

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();            // gives up ownership, returns the fd
  void Reset(int fd = -1);  // closes the current fd (if any), then owns `fd`

 private:
  int fd_ = -1;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Resolves "HOST:PORT" ("[v6]:PORT" for IPv6 literals). An empty HOST means the wildcard address
// (for listening). Returns InvalidArgument for a malformed string, Unavailable if HOST does not
// resolve. Uses getaddrinfo (may block on DNS for names that are not literals).
absl::StatusOr<SocketAddress> ResolveHostPort(const std::string& host_port);

// strerror(err) with the number, e.g. "Connection refused (errno 111)".
std::string ErrnoText(int err);

absl::Status SetNonBlocking(int fd);
absl::Status SetNoDelay(int fd);
// Sets SO_SNDBUF and SO_RCVBUF to `bytes` (the kernel doubles and caps them at
// net.core.[rw]mem_max). 0 leaves the kernel's auto-tuning on, which a set size disables.
absl::Status SetBufferBytes(int fd, int bytes);

// "ADDRESS:PORT" of the connected peer, or "?" (for logs).
std::string PeerName(int fd);

// The local port a bound socket has (after bind to port 0), or -1.
int LocalPort(int fd);

// Writes all `bytes` to a non-blocking socket, waiting with poll() until `deadline`.
// DeadlineExceeded on timeout, Unavailable on a closed/reset connection.
absl::Status WriteAll(int fd, const void* data, size_t bytes, absl::Time deadline);
// Reads exactly `bytes` from a non-blocking socket, waiting with poll() until `deadline`.
// DeadlineExceeded on timeout, Unavailable on end of stream or a reset connection.
absl::Status ReadAll(int fd, void* data, size_t bytes, absl::Time deadline);

}  // namespace ard::dataplane::tcp

#include "daemon/dataplane/tcp/data_listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/dataplane/tcp/dial_handshake.h"
#include "daemon/dataplane/tcp/handshake.h"
#include "daemon/dataplane/tcp/socket_util.h"

namespace ard::dataplane::tcp {
namespace {

DataListenerOptions LoopbackOptions() {
  DataListenerOptions options;
  options.address = "127.0.0.1:0";
  return options;
}

// A non-blocking client socket connected to 127.0.0.1:port.
UniqueFd Dial(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(SetNonBlocking(fd.get()).ok());
  return fd;
}

const std::string& Secret() {
  static const std::string secret = *NewJobSecret();
  return secret;
}

DialIdentity Identity(uint64_t job_id, uint32_t from, uint32_t to, uint64_t generation = 1,
                      const std::string& secret = Secret()) {
  return DialIdentity{job_id, generation, from, to, secret};
}

ExpectedDial Expect(uint64_t job_id, uint32_t from, uint32_t to, uint64_t generation = 1) {
  return ExpectedDial{job_id, generation, from, to, Secret()};
}

// A dialer that runs the handshake's first half (steps 1-3).
struct Dialer {
  Dialer(int port, const DialIdentity& who) : fd(Dial(port)) {
    absl::StatusOr<DialerHandshake> started =
        StartDialerHandshake(fd.get(), who, absl::Now() + absl::Seconds(10));
    REQUIRE(started.ok());
    handshake = *started;
  }
  UniqueFd fd;
  DialerHandshake handshake;
};

void SendBytes(int fd, const void* data, size_t bytes) {
  REQUIRE(::send(fd, data, bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes));
}

// True once the peer closed `fd` (EOF or reset) within `timeout`.
bool ClosedByPeer(int fd, absl::Duration timeout) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, absl::ToInt64Milliseconds(timeout)) <= 0) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

TEST_CASE("DataListener hands over a connection that proves the job secret, both ways") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  REQUIRE(listener.port() > 0);
  Dialer dialer(listener.port(), Identity(42, 1, 3));
  SendBytes(dialer.fd.get(), "hello", 5);

  absl::StatusOr<int> fd = listener.TakeConnection(Expect(42, 1, 3), absl::Seconds(10));
  REQUIRE(fd.ok());
  UniqueFd taken(*fd);
  REQUIRE(FinishDialerHandshake(dialer.fd.get(), dialer.handshake, Secret(),
                                absl::Now() + absl::Seconds(10))
              .ok());
  char text[5];
  REQUIRE(ReadAll(taken.get(), text, 5, absl::Now() + absl::Seconds(10)).ok());
  REQUIRE(std::string(text, 5) == "hello");
}

TEST_CASE("DataListener reads a hello that arrives in pieces") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  UniqueFd client = Dial(listener.port());
  DataHello h{kDataMagic, kDataVersion, 7, 1, 0, 1, {}};
  const char* bytes = reinterpret_cast<const char*>(&h);
  SendBytes(client.get(), bytes, 5);
  SendBytes(client.get(), bytes + 5, 10);
  SendBytes(client.get(), bytes + 15, sizeof h - 15);
  Nonce nonce;
  REQUIRE(ReadAll(client.get(), nonce.data(), nonce.size(), absl::Now() + absl::Seconds(10)).ok());
  const Proof proof = ComputeProof(Secret(), ProofRole::kDialer, h, nonce);
  SendBytes(client.get(), proof.data(), 7);
  REQUIRE(listener.TakeConnection(Expect(7, 0, 1), absl::Milliseconds(100)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
  SendBytes(client.get(), proof.data() + 7, proof.size() - 7);
  absl::StatusOr<int> fd = listener.TakeConnection(Expect(7, 0, 1), absl::Seconds(10));
  REQUIRE(fd.ok());
  ::close(*fd);
}

TEST_CASE("DataListener TakeConnection times out naming the job and host") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  absl::StatusOr<int> fd = listener.TakeConnection(Expect(99, 2, 3), absl::Milliseconds(50));
  REQUIRE(fd.status().code() == absl::StatusCode::kDeadlineExceeded);
  const std::string message(fd.status().message());
  REQUIRE(message.find("job 99") != std::string::npos);
  REQUIRE(message.find("host 2") != std::string::npos);
}

TEST_CASE("DataListener rejects a wrong hello at once and closes the connection") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  DataHello bad{kDataMagic, kDataVersion, 5, 1, 0, 1, {}};
  size_t send = sizeof bad;
  SECTION("magic") { bad.magic = 0x12345678; }
  SECTION("version, known from the first 8 bytes") {
    bad.version = 1;  // a dialer of the previous release sends 24 bytes and waits
    send = 8;
  }
  SECTION("hosts out of order") { std::swap(bad.from_host, bad.to_host); }
  SECTION("same host") { bad.to_host = bad.from_host; }
  SECTION("generation 0") { bad.generation = 0; }
  UniqueFd client = Dial(listener.port());
  SendBytes(client.get(), &bad, send);
  REQUIRE(ClosedByPeer(client.get(), absl::Seconds(10)));
  REQUIRE(listener.rejected(RejectReason::kBadHello) == 1);
}

TEST_CASE(
    "DataListener refuses a connection without the secret and keeps waiting for the real one") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  const std::string other = *NewJobSecret();
  RejectReason reason = RejectReason::kBadProof;
  std::unique_ptr<Dialer> intruder;
  SECTION("a wrong secret") {
    intruder = std::make_unique<Dialer>(listener.port(), Identity(11, 0, 1, 3, other));
  }
  SECTION("an earlier generation (a replay)") {
    intruder = std::make_unique<Dialer>(listener.port(), Identity(11, 0, 1, 2));
    reason = RejectReason::kWrongGeneration;
  }
  SECTION("another acceptor") {
    intruder = std::make_unique<Dialer>(listener.port(), Identity(11, 0, 2, 3));
    reason = RejectReason::kWrongHost;
  }
  // The intruder parks first under the real peer's key; the real peer comes after.
  REQUIRE(listener.WaitForParked(1, absl::Seconds(10)));
  Dialer real(listener.port(), Identity(11, 0, 1, 3));
  REQUIRE(listener.WaitForParked(2, absl::Seconds(10)));
  absl::StatusOr<int> fd = listener.TakeConnection(Expect(11, 0, 1, 3), absl::Seconds(10));
  REQUIRE(fd.ok());
  UniqueFd taken(*fd);
  REQUIRE(FinishDialerHandshake(real.fd.get(), real.handshake, Secret(),
                                absl::Now() + absl::Seconds(10))
              .ok());
  REQUIRE(listener.rejected(reason) == 1);
  const absl::Status refused = FinishDialerHandshake(intruder->fd.get(), intruder->handshake, other,
                                                     absl::Now() + absl::Seconds(10));
  REQUIRE(refused.code() == absl::StatusCode::kUnauthenticated);
}

TEST_CASE("A dialer refuses an acceptor that does not prove the secret") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  const std::string other = *NewJobSecret();
  Dialer dialer(listener.port(), Identity(12, 0, 1, 1, other));
  // The listener's job holds Secret(); the dialer holds `other` and expects the acceptor's proof
  // under it: the listener refuses the dialer first, which the dialer reports as Unauthenticated.
  REQUIRE(listener.TakeConnection(Expect(12, 0, 1), absl::Milliseconds(200)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
  REQUIRE(FinishDialerHandshake(dialer.fd.get(), dialer.handshake, other,
                                absl::Now() + absl::Seconds(10))
              .code() == absl::StatusCode::kUnauthenticated);
}

TEST_CASE("DataListener is not held up by a silent dialer and closes it after the timeout") {
  DataListenerOptions options = LoopbackOptions();
  options.handshake_timeout = absl::Milliseconds(200);
  DataListener listener(options);
  REQUIRE(listener.Start().ok());
  UniqueFd silent = Dial(listener.port());
  Dialer good(listener.port(), Identity(1, 0, 1));
  absl::StatusOr<int> fd = listener.TakeConnection(Expect(1, 0, 1), absl::Seconds(10));
  REQUIRE(fd.ok());
  ::close(*fd);
  REQUIRE(ClosedByPeer(silent.get(), absl::Seconds(10)));
  REQUIRE(listener.rejected(RejectReason::kHandshakeTimeout) == 1);
}

TEST_CASE("DataListener closes a parked connection nobody takes") {
  DataListenerOptions options = LoopbackOptions();
  options.unclaimed_timeout = absl::Milliseconds(100);
  DataListener listener(options);
  REQUIRE(listener.Start().ok());
  Dialer client(listener.port(), Identity(3, 0, 2));
  REQUIRE(ClosedByPeer(client.fd.get(), absl::Seconds(10)));
  REQUIRE(listener.TakeConnection(Expect(3, 0, 2), absl::Milliseconds(10)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
  REQUIRE(listener.rejected(RejectReason::kUnclaimed) == 1);
}

TEST_CASE("DataListener Stop wakes waiters, closes parked connections and is idempotent") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  Dialer parked(listener.port(), Identity(8, 0, 1));
  absl::Status waiter_status;
  std::thread waiter([&] {
    waiter_status = listener.TakeConnection(Expect(8, 5, 6), absl::Seconds(60)).status();
  });
  absl::SleepFor(absl::Milliseconds(50));  // let the waiter block (the result is the same if not)
  const absl::Time start = absl::Now();
  listener.Stop();
  waiter.join();
  REQUIRE(absl::Now() - start < absl::Seconds(5));
  REQUIRE(waiter_status.code() == absl::StatusCode::kCancelled);
  REQUIRE(ClosedByPeer(parked.fd.get(), absl::Seconds(10)));
  listener.Stop();
  REQUIRE(listener.TakeConnection(Expect(8, 0, 1), absl::Seconds(1)).status().code() ==
          absl::StatusCode::kCancelled);
}

TEST_CASE("DataListener reports a bad listen address") {
  DataListenerOptions options;
  options.address = "no-port";
  DataListener listener(options);
  REQUIRE(listener.Start().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ard::dataplane::tcp

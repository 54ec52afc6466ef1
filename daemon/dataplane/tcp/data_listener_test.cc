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
#include "daemon/dataplane/tcp/handshake.h"
#include "daemon/dataplane/tcp/socket_util.h"

namespace ard::dataplane::tcp {
namespace {

DataListenerOptions LoopbackOptions() {
  DataListenerOptions options;
  options.address = "127.0.0.1:0";
  return options;
}

// A blocking client socket connected to 127.0.0.1:port.
UniqueFd Dial(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

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

TEST_CASE("DataListener parks a connection under its handshake and hands it over") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  REQUIRE(listener.port() > 0);
  UniqueFd client = Dial(listener.port());
  const DataHandshake h = MakeHandshake(42, 1, 3);
  SendBytes(client.get(), &h, sizeof h);
  SendBytes(client.get(), "hello", 5);

  absl::StatusOr<int> fd = listener.TakeConnection(42, 1, absl::Seconds(10));
  REQUIRE(fd.ok());
  UniqueFd taken(*fd);
  pollfd pfd{taken.get(), POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 10000) == 1);
  char text[5];
  REQUIRE(::recv(taken.get(), text, 5, MSG_WAITALL) == 5);
  REQUIRE(std::string(text, 5) == "hello");
}

TEST_CASE("DataListener reads a handshake that arrives in pieces") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  UniqueFd client = Dial(listener.port());
  const DataHandshake h = MakeHandshake(7, 0, 1);
  const char* bytes = reinterpret_cast<const char*>(&h);
  SendBytes(client.get(), bytes, 5);
  REQUIRE(listener.TakeConnection(7, 0, absl::Milliseconds(100)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
  SendBytes(client.get(), bytes + 5, sizeof h - 5);
  absl::StatusOr<int> fd = listener.TakeConnection(7, 0, absl::Seconds(10));
  REQUIRE(fd.ok());
  ::close(*fd);
}

TEST_CASE("DataListener TakeConnection times out naming the job and host") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  absl::StatusOr<int> fd = listener.TakeConnection(99, 2, absl::Milliseconds(50));
  REQUIRE(fd.status().code() == absl::StatusCode::kDeadlineExceeded);
  const std::string message(fd.status().message());
  REQUIRE(message.find("job 99") != std::string::npos);
  REQUIRE(message.find("host 2") != std::string::npos);
}

TEST_CASE("DataListener rejects a wrong handshake and closes the connection") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  DataHandshake bad = MakeHandshake(5, 0, 1);
  SECTION("magic") { bad.magic = 0x12345678; }
  SECTION("version") { bad.version = kDataVersion + 1; }
  SECTION("hosts out of order") { bad = MakeHandshake(5, 1, 0); }
  SECTION("same host") { bad = MakeHandshake(5, 1, 1); }
  UniqueFd client = Dial(listener.port());
  SendBytes(client.get(), &bad, sizeof bad);
  REQUIRE(ClosedByPeer(client.get(), absl::Seconds(10)));
  REQUIRE(listener.TakeConnection(5, bad.from_host, absl::Milliseconds(50)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("DataListener is not held up by a silent dialer and closes it after the timeout") {
  DataListenerOptions options = LoopbackOptions();
  options.handshake_timeout = absl::Milliseconds(200);
  DataListener listener(options);
  REQUIRE(listener.Start().ok());
  UniqueFd silent = Dial(listener.port());
  UniqueFd good = Dial(listener.port());
  const DataHandshake h = MakeHandshake(1, 0, 1);
  SendBytes(good.get(), &h, sizeof h);
  absl::StatusOr<int> fd = listener.TakeConnection(1, 0, absl::Seconds(10));
  REQUIRE(fd.ok());
  ::close(*fd);
  REQUIRE(ClosedByPeer(silent.get(), absl::Seconds(10)));
}

TEST_CASE("DataListener closes a parked connection nobody takes") {
  DataListenerOptions options = LoopbackOptions();
  options.unclaimed_timeout = absl::Milliseconds(100);
  DataListener listener(options);
  REQUIRE(listener.Start().ok());
  UniqueFd client = Dial(listener.port());
  const DataHandshake h = MakeHandshake(3, 0, 2);
  SendBytes(client.get(), &h, sizeof h);
  REQUIRE(ClosedByPeer(client.get(), absl::Seconds(10)));
  REQUIRE(listener.TakeConnection(3, 0, absl::Milliseconds(10)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("DataListener Stop wakes waiters, closes parked connections and is idempotent") {
  DataListener listener(LoopbackOptions());
  REQUIRE(listener.Start().ok());
  UniqueFd parked = Dial(listener.port());
  const DataHandshake h = MakeHandshake(8, 0, 1);
  SendBytes(parked.get(), &h, sizeof h);
  absl::Status waiter_status;
  std::thread waiter(
      [&] { waiter_status = listener.TakeConnection(8, 5, absl::Seconds(60)).status(); });
  absl::SleepFor(absl::Milliseconds(50));  // let the waiter block (the result is the same if not)
  const absl::Time start = absl::Now();
  listener.Stop();
  waiter.join();
  REQUIRE(absl::Now() - start < absl::Seconds(5));
  REQUIRE(waiter_status.code() == absl::StatusCode::kCancelled);
  REQUIRE(ClosedByPeer(parked.get(), absl::Seconds(10)));
  listener.Stop();
  REQUIRE(listener.TakeConnection(8, 0, absl::Seconds(1)).status().code() ==
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

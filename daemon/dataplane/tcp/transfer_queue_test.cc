#include "daemon/dataplane/tcp/transfer_queue.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/dataplane/tcp/stream_checksum.h"

namespace ard::dataplane::tcp {
namespace {

std::vector<uint8_t> Pattern(size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 131 + 7);
  return out;
}

// What the sender queue hands the kernel, in calls of at most `step` bytes (as a socket with
// little room would take them): the bytes in order, each covered by the checksum before it goes.
std::vector<uint8_t> Drain(TransferQueue& q, size_t step) {
  std::vector<uint8_t> wire;
  while (!q.done()) {
    q.ChecksumAhead();
    size_t n = std::min({step, q.SendLimit(), q.iov[q.next].iov_len});
    REQUIRE(n > 0);
    const auto* p = static_cast<const uint8_t*>(q.iov[q.next].iov_base);
    wire.insert(wire.end(), p, p + n);
    if (q.checksum && q.next < q.data_iovs) REQUIRE(q.moved + n <= q.checked);  // all checked
    q.Advance(n, true);
  }
  return wire;
}

TEST_CASE("TransferQueue sums the sent bytes just ahead of the send, never in a pass of its own") {
  const size_t bytes = 3 * kChecksumAheadBytes + 1001;
  std::vector<uint8_t> a = Pattern(bytes), b = Pattern(777);
  TransferQueue q;
  q.transfers = 5;
  q.Add(a.data(), a.size());
  q.Add(b.data(), b.size());
  q.Seal(true);
  CHECK(q.checked == 0);  // nothing summed before the first send
  q.ChecksumAhead();
  CHECK(q.checked == kChecksumAheadBytes);
  CHECK(q.SendLimit() == kChecksumAheadBytes);
  const size_t step = GENERATE(size_t{1000}, size_t{64 << 10}, size_t{4} << 20);
  std::vector<uint8_t> wire = Drain(q, step);
  REQUIRE(wire.size() == a.size() + b.size() + sizeof(uint64_t));
  StreamChecksum sum;
  sum.Reset(5);  // the transfer count
  sum.Extend(a.data(), a.size());
  sum.Extend(b.data(), b.size());
  uint64_t trailer;
  std::memcpy(&trailer, wire.data() + a.size() + b.size(), sizeof trailer);
  CHECK(trailer == sum.Value());
  CHECK(std::equal(a.begin(), a.end(), wire.begin()));
  CHECK(q.transfers == 6);
}

TEST_CASE("TransferQueue receiving checks the trailer over chunks as they arrive") {
  std::vector<uint8_t> data = Pattern(100000);
  TransferQueue sender;
  sender.Add(data.data(), data.size());
  sender.Seal(true);
  std::vector<uint8_t> wire = Drain(sender, 4096);
  const bool corrupt = GENERATE(false, true);
  if (corrupt) wire[31337] ^= 1;
  std::vector<uint8_t> in(data.size());
  TransferQueue receiver;
  receiver.Add(in.data(), in.size());
  receiver.Seal(false);
  for (size_t at = 0; at < wire.size();) {  // recvmsg fills the ranges in 3000-byte chunks
    const size_t n = std::min<size_t>(3000, wire.size() - at);
    for (size_t i = 0, done = 0; done < n; ++i) {
      iovec& v = receiver.iov[receiver.next + i];
      const size_t k = std::min(v.iov_len, n - done);
      std::memcpy(v.iov_base, wire.data() + at + done, k);
      done += k;
    }
    receiver.Advance(n, false);
    at += n;
  }
  REQUIRE(receiver.done());
  CHECK(receiver.Received() == !corrupt);
  CHECK(receiver.transfers == 1);
}

TEST_CASE("TransferQueue without checksum moves the bytes alone, uncapped") {
  std::vector<uint8_t> data = Pattern(2 * kChecksumAheadBytes);
  TransferQueue q;
  q.checksum = false;
  q.Add(data.data(), data.size());
  q.Seal(true);
  q.ChecksumAhead();
  CHECK(q.iov.size() == 1);
  CHECK(q.checked == 0);
  CHECK(q.SendLimit() == std::numeric_limits<size_t>::max());
  CHECK(Drain(q, data.size()) == data);
}

}  // namespace
}  // namespace ard::dataplane::tcp

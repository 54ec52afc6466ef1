// The byte ranges one TcpMesh transfer moves in one direction with one peer, followed by their
// checksum (the "trailer", tcp_mesh.h; stream_checksum.h), and the checksum's running state. The
// checksum is taken while the bytes move, never in a pass of its own: the receiver extends it
// over each chunk a recvmsg just wrote; the sender extends it over a window of
// kChecksumAheadBytes just ahead of what it has sent, and sends no byte the checksum has not
// covered yet, so each byte is summed right before the kernel copies it, while it is in cache.
// The trailer goes out, in the same sendmsg as the last bytes where it fits, once the checksum
// covers the whole transfer.
// Owned by TcpMesh, op thread only.
// Lifecycle (per transfer): 1. Reset(); 2. Add() each range; 3. Seal(); 4. until done():
// ChecksumAhead() and SendLimit() before a send, Advance(n) after any move; a receiving queue
// that is done() is then checked with Received().
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "daemon/dataplane/tcp/stream_checksum.h"

namespace ard::dataplane::tcp {

// How far ahead of the sent bytes the sender's checksum runs: small enough to stay in a core's
// L2 cache until the kernel copies it, large enough that capping a send at it costs few calls.
inline constexpr size_t kChecksumAheadBytes = 256 << 10;

struct TransferQueue {
  std::vector<iovec> iov;  // the ranges still to move (iov[next] may be partly done)
  size_t next = 0;         // first range not yet done
  // iov[data_iovs] is the trailer when the transfer moves any bytes this way (and checksums).
  size_t data_iovs = 0;
  size_t data_bytes = 0;   // bytes in the data ranges
  size_t moved = 0;        // bytes moved so far (data, then trailer)
  size_t checked = 0;      // sending: data bytes the checksum covers so far
  StreamChecksum sum;      // over the data bytes checked (sending) / arrived (receiving)
  uint64_t trailer = 0;    // the checksum to send, or the one received
  uint64_t transfers = 0;  // transfers with bytes in this direction so far (the checksum's seed)
  bool checksum = true;    // false: no trailer, no checksum (mesh_bench's measurement only)

  bool done() const { return next == iov.size(); }

  // Empties the queue for the next transfer, keeping the vector's capacity and the seed.
  void Reset();
  // Appends a range (bytes > 0).
  void Add(void* data, size_t bytes);
  // Ends step 2: seeds the checksum with the transfer count and appends the trailer's range when
  // the queue moves any bytes. `send`: this queue sends (the trailer is filled as the data goes).
  void Seal(bool send);
  // Sending: extends the checksum to kChecksumAheadBytes past the sent bytes (or the data's
  // end) once less than half of that lies ahead; fills the trailer when it covers all the data.
  void ChecksumAhead();
  // Sending: how many bytes from iov[next] may go out now (the checksum covers them; the
  // trailer only once filled). The largest size_t when there is no cap.
  size_t SendLimit() const;
  // Records n bytes moved: advances next/iov; receiving, extends the checksum over the data bytes.
  void Advance(size_t n, bool send);
  // Receiving, once done(): whether the trailer matches the data; counts the transfer.
  bool Received();
};

}  // namespace ard::dataplane::tcp

#include "daemon/dataplane/tcp/transfer_queue.h"

#include <algorithm>

namespace ard::dataplane::tcp {

void TransferQueue::Reset() {
  iov.clear();
  next = data_iovs = data_bytes = moved = checked = 0;
}

void TransferQueue::Add(void* data, size_t bytes) {
  iov.push_back(iovec{data, bytes});
  data_bytes += bytes;
}

void TransferQueue::Seal(bool send) {
  data_iovs = iov.size();
  if (iov.empty() || !checksum) return;
  sum.Reset(transfers);
  if (send) ++transfers;  // the receiver counts in Received()
  iov.push_back(iovec{&trailer, sizeof trailer});
}

void TransferQueue::ChecksumAhead() {
  if (!checksum || checked == data_bytes || checked - moved >= kChecksumAheadBytes / 2) return;
  size_t skip = checked - moved;  // checked bytes still to send, from iov[next]
  size_t want = std::min(kChecksumAheadBytes - skip, data_bytes - checked);
  for (size_t i = next; i < data_iovs && want > 0; ++i) {
    const iovec& v = iov[i];
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    const size_t step = std::min(v.iov_len - skip, want);
    sum.Extend(static_cast<const char*>(v.iov_base) + skip, step);
    checked += step;
    want -= step;
    skip = 0;
  }
  if (checked == data_bytes) trailer = sum.Value();
}

size_t TransferQueue::SendLimit() const {
  if (!checksum || checked == data_bytes) return std::numeric_limits<size_t>::max();
  return checked - moved;
}

void TransferQueue::Advance(size_t n, bool send) {
  moved += n;
  while (n > 0) {
    iovec& v = iov[next];
    const size_t step = std::min(n, v.iov_len);
    if (!send && checksum && next < data_iovs) sum.Extend(v.iov_base, step);
    v.iov_base = static_cast<char*>(v.iov_base) + step;
    v.iov_len -= step;
    n -= step;
    if (v.iov_len == 0) ++next;
  }
  while (!done() && iov[next].iov_len == 0) ++next;
}

bool TransferQueue::Received() {
  ++transfers;
  return sum.Value() == trailer;
}

}  // namespace ard::dataplane::tcp

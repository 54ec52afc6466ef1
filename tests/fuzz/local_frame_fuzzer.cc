// libFuzzer target for what a hostile local client controls: the bytes of its frames (decoded and
// validated by daemon/local/frame_codec) and, through SUBMITs that pass, the metadata the job's
// readiness table matches and validates across ranks (daemon/negotiation).
//
// Input: byte 0 picks the job size (1 + (b & 3)); the rest is a sequence of records
//   [rank byte][length: u16 little-endian][frame bytes]
// where the rank byte's low bits name the submitting rank and its top bit says whether the frame
// arrived with a file descriptor. A record cut short by the end of the input uses what is left.
// Every frame goes through DecodeFrame; decoded SUBMITs go into one ReadinessTable, as the
// daemon does. Besides the sanitizers, the target traps when a frame the decoder accepted breaks
// a promise of DecodedFrame (frame_codec.h), so a validation gap counts as a crash too.
//
// Build and run: tests/fuzz/run_local_frame_fuzzer.sh (docs/operator-guide.md "Fuzzing").
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/common/host_name.h"
#include "daemon/local/frame_codec.h"
#include "daemon/negotiation/readiness_table.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/local_wire.h"
#include "proto/submit_check.h"

namespace {

using ard::local::DecodedFrame;
namespace wire = ard::wire;

void Require(bool condition) {
  if (!condition) __builtin_trap();
}

// What DecodeFrame promises about a frame it accepted.
void CheckAccepted(const DecodedFrame& f, bool has_fd) {
  switch (f.type) {
    case wire::MsgType::kHello:
      Require(has_fd);
      Require(memchr(f.hello.job, '\0', sizeof(f.hello.job)) != nullptr);
      Require(ard::ValidHostName(f.hello.job));
      Require(f.hello.segment_bytes > 0);
      Require(f.hello.size == -1 || f.hello.size >= 1);
      Require(f.hello.rank == -1 ||
              (f.hello.rank >= 0 && (f.hello.size < 1 || f.hello.rank < f.hello.size)));
      break;
    case wire::MsgType::kAddSegment:
      Require(has_fd && f.segment.bytes > 0);
      break;
    case wire::MsgType::kSubmit: {
      const wire::Submit& s = f.submit;
      Require(!has_fd);
      Require(memchr(s.name, '\0', sizeof(s.name)) != nullptr && s.name[0] != '\0');
      Require(s.collective >= 1 && s.collective <= static_cast<uint32_t>(wire::Collective::kJoin));
      Require(s.ndims <= static_cast<uint32_t>(wire::kMaxDims));
      Require(s.bytes <= wire::kMaxTensorBytes);
      if (s.bytes > 0) {  // barrier/join name no input; their offset is never read
        Require(s.offset % wire::kSlotAlignment == 0);
        Require(s.offset + s.bytes >= s.offset);
      }
      Require(f.splits.size() == s.num_splits);
      Require(ard::wire::ValidateSubmit(s, f.splits).ok());
      if (s.bytes > 0) {
        const int64_t n = ard::wire::NumElements(s.shape, s.ndims);
        Require(n > 0 && static_cast<uint64_t>(n) * wire::DataTypeSize(s.dtype) == s.bytes);
        (void)ard::wire::ShapeString(s.shape, s.ndims);
      }
      break;
    }
    case wire::MsgType::kRelease:
    case wire::MsgType::kBye:
      Require(!has_fd);
      break;
    default:
      Require(false);  // a daemon-to-client type accepted from a client
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int job_size = 1 + (data[0] & 3);
  ard::negotiation::ReadinessTable table(job_size);
  absl::Time now = absl::UnixEpoch();
  size_t pos = 1;
  uint64_t request_id = 0;
  while (pos < size) {
    const uint8_t rank_byte = data[pos++];
    size_t length = 0;
    if (pos + 2 <= size) {
      length = data[pos] | (static_cast<size_t>(data[pos + 1]) << 8);
      pos += 2;
    }
    length = std::min(length, size - pos);
    // A private copy, as the daemon decodes from its own receive buffer (and so ASan sees reads
    // past the frame).
    std::vector<uint8_t> frame(data + pos, data + pos + length);
    pos += length;
    const bool has_fd = (rank_byte & 0x80) != 0;
    auto decoded = ard::local::DecodeFrame(frame.data(), frame.size(), has_fd);
    if (!decoded.ok()) {
      // The daemon sends the message back in an ERROR frame.
      const std::string reply = ard::local::EncodeError(
          wire::MsgType::kError, 0, static_cast<int32_t>(decoded.status().code()),
          std::string(decoded.status().message()));
      Require(reply.size() >= sizeof(wire::FrameHeader) + sizeof(wire::Error));
      continue;
    }
    CheckAccepted(*decoded, has_fd);
    if (decoded->type != wire::MsgType::kSubmit) continue;
    ard::negotiation::TensorRequest request;
    request.rank = (rank_byte & 0x7f) % job_size;
    request.request_id = ++request_id;
    request.meta = decoded->submit;
    request.splits = decoded->splits;
    std::vector<ard::negotiation::Response> ready;
    now += absl::Milliseconds(1);
    (void)table.Submit(std::move(request), now, &ready);
    for (const auto& response : ready) {
      for (const auto& tensor : response.tensors) {
        Require(static_cast<int>(tensor.ranks.size()) == job_size);
        if (!response.error.ok()) continue;
        // The reply path: a COMPLETE echoing the first rank's shape.
        const auto& first = tensor.first();
        wire::Complete c{};
        c.ndims = first.meta.ndims;
        memcpy(c.shape, first.meta.shape, sizeof(c.shape));
        (void)ard::local::EncodeComplete(first.request_id, c, first.splits, tensor.name);
      }
    }
  }
  (void)table.WaitingLongerThan(now, absl::ZeroDuration());
  (void)table.TakeAll();
  return 0;
}

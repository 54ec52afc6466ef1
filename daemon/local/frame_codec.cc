#include "daemon/local/frame_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/host_name.h"
#include "proto/submit_check.h"

namespace ard::local {
namespace {

using wire::Collective;
using wire::MsgType;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("bad frame: ", what));
}

// A fixed char field must hold a NUL within its size.
bool Terminated(const char* field, size_t size) { return memchr(field, '\0', size) != nullptr; }

absl::Status CheckRankPair(int32_t rank, int32_t size, const char* rank_name,
                           const char* size_name) {
  if (size != -1 && size < 1) return Bad(absl::StrCat(size_name, " ", size, " (must be >= 1)"));
  if (rank != -1 && rank < 0) return Bad(absl::StrCat(rank_name, " ", rank, " (must be >= 0)"));
  if (rank >= 0 && size >= 1 && rank >= size) {
    return Bad(absl::StrCat(rank_name, " ", rank, " is not below ", size_name, " ", size));
  }
  return absl::OkStatus();
}

absl::Status CheckHello(const wire::Hello& h) {
  if (!Terminated(h.job, sizeof(h.job))) return Bad("job name not NUL-terminated");
  if (!ValidHostName(h.job)) {
    return Bad("job name must be 1-63 of letters, digits, '-', '_', '.'");
  }
  if (auto s = CheckRankPair(h.rank, h.size, "rank", "size"); !s.ok()) return s;
  if (auto s = CheckRankPair(h.local_rank, h.local_size, "local_rank", "local_size"); !s.ok()) {
    return s;
  }
  if (h.segment_bytes == 0) return Bad("first arena segment of 0 bytes");
  return absl::OkStatus();
}

std::string Frame(MsgType type, uint64_t request_id, const void* payload, size_t payload_bytes,
                  const void* tail = nullptr, size_t tail_bytes = 0) {
  wire::FrameHeader h{};
  h.magic = wire::kMagic;
  h.version = wire::kVersion;
  h.type = static_cast<uint16_t>(type);
  h.payload_bytes = static_cast<uint32_t>(payload_bytes + tail_bytes);
  h.request_id = request_id;
  std::string out(sizeof(h) + payload_bytes + tail_bytes, '\0');
  memcpy(out.data(), &h, sizeof(h));
  if (payload_bytes > 0) memcpy(out.data() + sizeof(h), payload, payload_bytes);
  if (tail_bytes > 0) memcpy(out.data() + sizeof(h) + payload_bytes, tail, tail_bytes);
  return out;
}

}  // namespace

absl::StatusOr<DecodedFrame> DecodeFrame(const uint8_t* data, size_t size, bool has_fd) {
  wire::FrameHeader h;
  if (size < sizeof(h)) return Bad(absl::StrCat("truncated header (", size, " bytes)"));
  memcpy(&h, data, sizeof(h));
  if (h.magic != wire::kMagic) return Bad("wrong magic (not an allreduced client?)");
  if (h.version != wire::kVersion) {
    return Bad(absl::StrCat("protocol version ", h.version, ", daemon speaks ", wire::kVersion));
  }
  if (h.reserved != 0) return Bad("reserved header field not 0");
  if (h.payload_bytes != size - sizeof(h)) {
    return Bad(absl::StrCat("payload_bytes ", h.payload_bytes, " but ", size - sizeof(h),
                            " bytes follow the header"));
  }
  DecodedFrame f;
  f.type = static_cast<MsgType>(h.type);
  f.request_id = h.request_id;
  const uint8_t* payload = data + sizeof(h);
  const size_t n = h.payload_bytes;
  const bool wants_fd = f.type == MsgType::kHello || f.type == MsgType::kAddSegment;
  auto expect_size = [&](size_t want) -> absl::Status {
    if (n != want) return Bad(absl::StrCat("payload of ", n, " bytes, expected ", want));
    return absl::OkStatus();
  };
  switch (f.type) {
    case MsgType::kHello:
      if (auto s = expect_size(sizeof(wire::Hello)); !s.ok()) return s;
      memcpy(&f.hello, payload, sizeof(f.hello));
      if (auto s = CheckHello(f.hello); !s.ok()) return s;
      break;
    case MsgType::kAddSegment:
      if (auto s = expect_size(sizeof(wire::Segment)); !s.ok()) return s;
      memcpy(&f.segment, payload, sizeof(f.segment));
      if (f.segment.bytes == 0 || f.segment.reserved != 0) return Bad("segment fields");
      break;
    case MsgType::kSubmit: {
      if (n < sizeof(wire::Submit)) return Bad("truncated SUBMIT");
      memcpy(&f.submit, payload, sizeof(f.submit));
      if (f.submit.num_splits > wire::kMaxSplits) return Bad("too many splits");
      if (n != sizeof(wire::Submit) + f.submit.num_splits * sizeof(int64_t)) {
        return Bad("SUBMIT length does not match num_splits");
      }
      f.splits.resize(f.submit.num_splits);
      if (!f.splits.empty()) {
        memcpy(f.splits.data(), payload + sizeof(wire::Submit), f.splits.size() * sizeof(int64_t));
      }
      if (auto s = wire::ValidateSubmit(f.submit, f.splits); !s.ok()) return s;
      break;
    }
    case MsgType::kGpuRegister: {
      if (n < sizeof(wire::GpuRegister)) return Bad("truncated GPU_REGISTER");
      wire::GpuRegister& g = f.gpu_register;
      memcpy(&g, payload, sizeof(g));
      if (g.device < 0) return Bad("GPU_REGISTER device < 0");
      if (g.num_events == 0 || g.num_events > wire::kMaxGpuEvents) {
        return Bad(absl::StrCat("GPU_REGISTER num_events ", g.num_events, " not in 1..",
                                wire::kMaxGpuEvents));
      }
      if (g.arena_bytes == 0) return Bad("GPU_REGISTER arena_bytes 0");
      if (n != sizeof(g) + size_t{g.num_events} * wire::kIpcHandleBytes) {
        return Bad("GPU_REGISTER length does not match num_events");
      }
      f.gpu_events.resize(g.num_events);
      memcpy(f.gpu_events.data(), payload + sizeof(g), n - sizeof(g));
      break;
    }
    case MsgType::kGpuSubmit: {
      if (n < sizeof(wire::Submit) + sizeof(wire::GpuPlacement)) return Bad("truncated GPU_SUBMIT");
      memcpy(&f.submit, payload, sizeof(f.submit));
      if (f.submit.num_splits > wire::kMaxSplits) return Bad("too many splits");
      const size_t split_bytes = f.submit.num_splits * sizeof(int64_t);
      if (n != sizeof(wire::Submit) + split_bytes + sizeof(wire::GpuPlacement)) {
        return Bad("GPU_SUBMIT length does not match num_splits");
      }
      f.splits.resize(f.submit.num_splits);
      if (!f.splits.empty()) memcpy(f.splits.data(), payload + sizeof(wire::Submit), split_bytes);
      memcpy(&f.gpu_placement, payload + sizeof(wire::Submit) + split_bytes,
             sizeof(f.gpu_placement));
      if (auto s = wire::ValidateSubmit(f.submit, f.splits); !s.ok()) return s;
      if (f.gpu_placement.offset % wire::kSlotAlignment != 0 || f.gpu_placement.reserved != 0 ||
          f.gpu_placement.event >= wire::kMaxGpuEvents) {
        return Bad("GPU_SUBMIT placement (offset alignment, event index, reserved)");
      }
      break;
    }
    case MsgType::kRelease:
    case MsgType::kBye:
    case MsgType::kGpuUnregister:
      if (auto s = expect_size(0); !s.ok()) return s;
      break;
    default:
      return Bad(absl::StrCat("unexpected message type ", h.type, " from a client"));
  }
  if (wants_fd && !has_fd) return Bad("HELLO/ADD_SEGMENT without a file descriptor");
  if (!wants_fd && has_fd) return Bad("unexpected file descriptor");
  return f;
}

std::string EncodeWelcome(const wire::Welcome& welcome) {
  return Frame(MsgType::kWelcome, 0, &welcome, sizeof(welcome));
}

std::string EncodeSegment(MsgType type, const wire::Segment& segment) {
  return Frame(type, 0, &segment, sizeof(segment));
}

std::string EncodeComplete(uint64_t request_id, const wire::Complete& complete,
                           const std::vector<int64_t>& splits, const std::string& message) {
  wire::Complete c = complete;
  const std::string text = message.substr(0, wire::kMaxMessageBytes);
  c.message_bytes = static_cast<uint32_t>(text.size());
  c.num_splits = static_cast<uint32_t>(splits.size());
  std::string tail(splits.size() * sizeof(int64_t) + text.size(), '\0');
  if (!splits.empty()) memcpy(tail.data(), splits.data(), splits.size() * sizeof(int64_t));
  memcpy(tail.data() + splits.size() * sizeof(int64_t), text.data(), text.size());
  return Frame(MsgType::kComplete, request_id, &c, sizeof(c), tail.data(), tail.size());
}

std::string EncodeError(MsgType type, uint64_t request_id, int32_t code,
                        const std::string& message) {
  const std::string text = message.substr(0, wire::kMaxMessageBytes);
  wire::Error e{code, static_cast<uint32_t>(text.size())};
  return Frame(type, request_id, &e, sizeof(e), text.data(), text.size());
}

std::string EncodeEmpty(MsgType type, uint64_t request_id) {
  return Frame(type, request_id, nullptr, 0, nullptr, 0);
}

}  // namespace ard::local

// Decoding and validation of frames from local clients, and encoding of the daemon's replies
// (protocol: proto/local_wire.h). Every field a client sets is checked here, so code behind this
// seam can trust a DecodedFrame's layout (not yet its meaning: arena bounds and job rules are
// checked where the arena and job are known). Pure functions; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/local_wire.h"

namespace ard::local {

struct DecodedFrame {
  wire::MsgType type;
  uint64_t request_id = 0;
  wire::Hello hello{};          // kHello
  wire::Segment segment{};      // kAddSegment
  wire::Submit submit{};        // kSubmit
  std::vector<int64_t> splits;  // kSubmit / kGpuSubmit tail
  // GPU path: kGpuRegister and its event handles; kGpuSubmit's placement (its Submit is `submit`).
  wire::GpuRegister gpu_register{};
  std::vector<std::array<uint8_t, wire::kIpcHandleBytes>> gpu_events;
  wire::GpuPlacement gpu_placement{};
};

// `has_fd`: whether the message carried exactly one file descriptor. A frame that needs an fd
// (HELLO, ADD_SEGMENT) without one, or one that must not carry one, is InvalidArgument.
absl::StatusOr<DecodedFrame> DecodeFrame(const uint8_t* data, size_t size, bool has_fd);

// Daemon -> client frames.
std::string EncodeWelcome(const wire::Welcome& welcome);
std::string EncodeSegment(wire::MsgType type, const wire::Segment& segment);
std::string EncodeComplete(uint64_t request_id, const wire::Complete& complete,
                           const std::vector<int64_t>& splits, const std::string& message);
std::string EncodeError(wire::MsgType type, uint64_t request_id, int32_t code,
                        const std::string& message);
// A frame without payload (GPU_REGISTERED).
std::string EncodeEmpty(wire::MsgType type, uint64_t request_id);

}  // namespace ard::local

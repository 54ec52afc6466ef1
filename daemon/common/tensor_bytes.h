// Where a tensor's bytes lie in memory the daemon mapped (a client's input arena: shm/), kept
// mapped by `owner` until the last reference is dropped, even if the client exits meanwhile. The
// negotiation value types carry it without knowing what maps it. Plain data; any thread.
#pragma once

#include <cstdint>
#include <memory>

namespace ard {

struct TensorBytes {
  std::shared_ptr<const void> owner;  // keeps `data` mapped
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

}  // namespace ard

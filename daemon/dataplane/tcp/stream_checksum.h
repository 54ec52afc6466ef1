// The checksum of every data-plane transfer (tcp_mesh.h): XXH3's 64-bit hash, seeded, extended
// over a transfer's bytes as they move (transfer_queue.h). It catches a corrupt, truncated or
// shifted stream, not a forger (the job secret authenticates the peer; only encryption would stop
// a man in the middle). Debian's xxhash (libxxhash-dev) is used header-only: nothing more is
// linked. Its AVX2 kernel runs where the CPU has AVX2 (checked once at run time), its default one
// otherwise; both give the same values. Why XXH3 and not CRC32C: DESIGN.md "Data plane".
// Movable value; one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ard::dataplane::tcp {

class StreamChecksum {
 public:
  StreamChecksum();  // as after Reset(0)

  // Starts over, seeded with `seed`.
  void Reset(uint64_t seed);
  // Extends the checksum over `bytes` at `data`: any split of a byte string into pieces, extended
  // in order, gives the value of the whole.
  void Extend(const void* data, size_t bytes);
  // The checksum of the bytes since Reset.
  uint64_t Value() const;

 private:
  struct State;  // XXH3's streaming state (aligned to 64 bytes; about 600 bytes)
  struct Free {
    void operator()(State* state) const;
  };
  std::unique_ptr<State, Free> state_;
};

}  // namespace ard::dataplane::tcp

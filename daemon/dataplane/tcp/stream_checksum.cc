#include "daemon/dataplane/tcp/stream_checksum.h"

#define XXH_INLINE_ALL  // header-only: static functions in this file, nothing to link
#include <xxhash.h>

#include "daemon/dataplane/tcp/stream_checksum_avx2.h"

namespace ard::dataplane::tcp {
namespace {

// Read during static initialisation, which may run before libgcc's own: initialise it first.
const bool kHasAvx2 = [] {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
#else
  return false;
#endif
}();

}  // namespace

struct StreamChecksum::State {
  XXH3_state_t xxh;
};

void StreamChecksum::Free::operator()(State* state) const { delete state; }

StreamChecksum::StreamChecksum() : state_(new State) { Reset(0); }

void StreamChecksum::Reset(uint64_t seed) { XXH3_64bits_reset_withSeed(&state_->xxh, seed); }

void StreamChecksum::Extend(const void* data, size_t bytes) {
#if defined(__x86_64__)
  if (kHasAvx2) return internal::Xxh3ExtendAvx2(&state_->xxh, data, bytes);
#endif
  XXH3_64bits_update(&state_->xxh, data, bytes);
}

uint64_t StreamChecksum::Value() const { return XXH3_64bits_digest(&state_->xxh); }

}  // namespace ard::dataplane::tcp

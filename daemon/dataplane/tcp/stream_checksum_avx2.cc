#include "daemon/dataplane/tcp/stream_checksum_avx2.h"

#if defined(__x86_64__)
// Everything below, XXH3's inlined functions included, is compiled for AVX2 (only called where
// the CPU has it); XXH3 is told to take its AVX2 kernel, as its own x86 dispatcher does.
#pragma GCC target("avx2")
#include <immintrin.h>
#define XXH_VECTOR XXH_AVX2
#define XXH_INLINE_ALL  // header-only: static functions in this file, nothing to link
#include <xxhash.h>

namespace ard::dataplane::tcp::internal {

void Xxh3ExtendAvx2(void* xxh3_state, const void* data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(xxh3_state), data, bytes);
}

}  // namespace ard::dataplane::tcp::internal
#endif

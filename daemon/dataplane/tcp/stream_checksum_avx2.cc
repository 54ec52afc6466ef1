#include "daemon/dataplane/tcp/stream_checksum_avx2.h"

#define XXH_INLINE_ALL  // header-only: static functions in this file, nothing to link
#include <xxhash.h>

#ifndef __AVX2__
#error "stream_checksum_avx2.cc must be compiled with -mavx2"
#endif

namespace ard::dataplane::tcp::internal {

void Xxh3ExtendAvx2(void* xxh3_state, const void* data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(xxh3_state), data, bytes);
}

}  // namespace ard::dataplane::tcp::internal

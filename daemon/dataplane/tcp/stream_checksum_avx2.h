// StreamChecksum's AVX2 kernel (stream_checksum.h), in a file of its own: XXH3 picks its vector
// code when its header is compiled, so this file compiles it once more, for AVX2. x86-64 only.
// Private to StreamChecksum.
#pragma once

#include <cstddef>

#if defined(__x86_64__)
namespace ard::dataplane::tcp::internal {

// XXH3_64bits_update on `xxh3_state` (an XXH3_state_t) with the AVX2 kernel. Only where the CPU
// has AVX2.
void Xxh3ExtendAvx2(void* xxh3_state, const void* data, size_t bytes);

}  // namespace ard::dataplane::tcp::internal
#endif

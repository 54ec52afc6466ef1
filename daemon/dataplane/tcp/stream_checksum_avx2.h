// StreamChecksum's AVX2 kernel (stream_checksum.h), in a file of its own because only it is
// compiled with -mavx2: XXH3 picks its vector code when compiled. Private to StreamChecksum.
#pragma once

#include <cstddef>

namespace ard::dataplane::tcp::internal {

// XXH3_64bits_update on `xxh3_state` (an XXH3_state_t) with the AVX2 kernel. Only where the CPU
// has AVX2.
void Xxh3ExtendAvx2(void* xxh3_state, const void* data, size_t bytes);

}  // namespace ard::dataplane::tcp::internal

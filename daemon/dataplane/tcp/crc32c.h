// CRC32C (Castagnoli), the checksum of every data-plane transfer (tcp_mesh.h): it catches a
// corrupt, truncated or shifted stream, not a forger (the job secret authenticates the peer;
// only encryption would stop a man in the middle). Uses carry-less multiplication (pclmulqdq) over
// long buffers and the SSE4.2 crc32 instruction where the CPU has both (checked once at run
// time), a table otherwise; both give the same values.
// Pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ard::dataplane::tcp {

// Extends `crc` (the value returned for the bytes before; 0 to start) over `bytes` at `data`.
// Crc32cExtend(Crc32cExtend(0, a), b) == Crc32cExtend(0, a followed by b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t bytes);

}  // namespace ard::dataplane::tcp

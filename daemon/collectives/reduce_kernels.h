// Element-wise reduction kernels: the CPU arithmetic of allreduce/reducescatter. The data planes
// reduce the training processes' tensors (in shared memory) into a result buffer with
// FillIdentity / ReduceInto (or ReduceOutOfPlace, which writes a op b to a third buffer), then
// Scale for Average. Pure functions over caller-owned memory:
// safe from any thread, no state beyond a CPU-feature check done once.
//
// Determinism: the same inputs in the same order give bit-identical outputs on every machine and
// with every KernelIsa. Each element is computed on its own (no reassociation, no fast-math, no
// FMA contraction), and every NaN a kernel produces is the canonical quiet NaN of its type
// (float32 0x7fc00000, float64 0x7ff8000000000000, float16 0x7e00, bfloat16 0x7fc0), so NaN
// payloads and signs never depend on which instruction computed them. This assumes the default
// floating-point environment (round to nearest, no FTZ/DAZ), which the daemon never changes.
//
// Per-type semantics:
// - Integers (uint8, int8, int32, int64): two's-complement wraparound on Sum/Product overflow.
// - float32/float64: IEEE arithmetic in the type itself.
// - float16/bfloat16: each element is converted to float, the op applied in float, and the result
//   rounded back to nearest even at every step (half_float.h). So a sum of N tensors rounds N - 1
//   times, exactly like the same reduction done one tensor at a time in the 16-bit type.
// - Min/Max propagate NaN: if either operand is NaN, the result is (canonical) NaN. Otherwise, for
//   -0 and +0, which compare equal, the result is the dst operand.
//
// Preconditions (violations are bugs in the caller): pointers are aligned to the element size;
// dst and src do not overlap; dtype satisfies ReductionSupported (else ARD_CHECK aborts).
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/local_wire.h"
#include "daemon/collectives/half_float.h"  // HalfToFloat, FloatToHalf, Bfloat16ToFloat, ...

namespace ard::collectives {

// True for the types Horovod's allreduce supports: uint8, int8, int32, int64, float16, bfloat16,
// float32, float64. False for bool, int16, uint16 (and unknown values).
bool ReductionSupported(wire::DataType dtype);

// Instruction-set variants of every kernel; all give bit-identical results. Production code uses
// the overloads without a KernelIsa, which pick BestKernelIsa(); tests and benchmarks name one.
enum class KernelIsa {
  kPortable,  // baseline x86-64 (SSE2) or any other architecture
  kAvx2,      // x86-64 with AVX2 and F16C
};

// Whether this CPU (and OS) can run `isa`.
bool KernelIsaSupported(KernelIsa isa);

// The fastest supported variant on this CPU (detected once).
KernelIsa BestKernelIsa();

// dst[i] = op(dst[i], src[i]) for i < count. Sum and Average both add: Average's division is a
// separate Scale(1 / n) once all n inputs are in.
void ReduceInto(void* dst, const void* src, size_t count, wire::DataType dtype, wire::ReduceOp op);
void ReduceInto(void* dst, const void* src, size_t count, wire::DataType dtype, wire::ReduceOp op,
                KernelIsa isa);

// dst[i] = op(a[i], b[i]) for i < count: the bits ReduceInto gives with dst holding a and src b,
// in one pass (no copy of a into dst first). dst may be a (then it is ReduceInto(a, b)); otherwise
// dst overlaps neither a nor b.
void ReduceOutOfPlace(void* dst, const void* a, const void* b, size_t count, wire::DataType dtype,
                      wire::ReduceOp op);
void ReduceOutOfPlace(void* dst, const void* a, const void* b, size_t count, wire::DataType dtype,
                      wire::ReduceOp op, KernelIsa isa);

// buf[i] *= factor. A factor of exactly 1.0 returns at once (buf untouched, NaNs not
// canonicalized).
// - float64: in double. float32/float16/bfloat16: in float, with factor rounded to float, each
//   element rounded back to its type.
// - Integers: in double, truncated toward zero, saturated to the type's range; a NaN product
//   gives 0. int64 values above 2^53 in magnitude lose precision in the double.
void Scale(void* buf, size_t count, wire::DataType dtype, double factor);
void Scale(void* buf, size_t count, wire::DataType dtype, double factor, KernelIsa isa);

// Fills dst[0, count) with op's identity e, so that ReduceInto(dst, x) leaves x (bit for bit, for
// non-NaN x): Sum/Average 0 (-0.0 for floats, since +0.0 + -0.0 is +0.0), Product 1, Min the
// largest value (+inf for floats), Max the lowest (-inf for floats).
void FillIdentity(void* dst, size_t count, wire::DataType dtype, wire::ReduceOp op);

}  // namespace ard::collectives

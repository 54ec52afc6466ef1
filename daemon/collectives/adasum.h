// Adasum (Horovod's adaptive summation, docs/adasum_user_guide.rst there): the arithmetic of
// allreduce with ReduceOp::kAdasum. The data planes (local_collective, tcp_collective) call
// AdasumTree over the ranks' (or hosts') vectors; AdasumPair is the one step it repeats. Pure
// functions over caller-owned memory; AdasumTree keeps per-thread scratch buffers, so it is safe
// from any thread.
//
// Pair: for two vectors a and b of one tensor,
//   adasum(a, b) = ca * a + cb * b,  ca = 1 - (a.b) / (2 |a|^2),  cb = 1 - (a.b) / (2 |b|^2)
// computed as ca = 1 - 0.5 * (dot / |a|^2). A coefficient whose squared norm is below
// sqrt(DBL_MIN) (about 1.5e-154; in practice a zero vector) is 1, as in Horovod, so
// adasum(a, 0) = a and adasum(0, 0) = 0. Parallel equal vectors give their average, orthogonal
// ones their sum.
//
// Tree (our order; it is Horovod's for a power-of-two count): the leaves in the order given are
// paired (0,1), (2,3), ...; an odd last leaf moves up a level unchanged; the pairs' results are
// paired again the same way until one remains. Equivalently: the tree over n leaves combines the
// tree over the first p leaves with the tree over the rest, p the largest power of two below n.
//
// Determinism (results bit-identical on every machine, like reduce_kernels.h): the dot product
// and both squared norms are accumulated in double, each over 4 interleaved partial sums (lane k
// takes elements i with i % 4 == k, in increasing i) added as (s0 + s1) + (s2 + s3); every
// element is then ca * a[i] + cb * b[i] computed in double (no FMA: -ffp-contract=off) and rounded
// to the tensor's type once (float16: to float, then to float16). A NaN result is the canonical
// quiet NaN of its type. Assumes the default floating-point environment, as the kernels do.
//
// Types: float16, float32, float64 (AdasumSupported); anything else is a caller's bug (ARD_CHECK).
#pragma once

#include <cstddef>
#include <vector>

#include "proto/local_wire.h"

namespace ard::collectives {

// True for float16, float32 and float64.
bool AdasumSupported(wire::DataType dtype);

// dst[i] = adasum(a, b)[i] for i < count. dst may be a or b (exactly; no partial overlap).
void AdasumPair(const void* a, const void* b, void* dst, size_t count, wire::DataType dtype);

// dst = the tree above over `leaves` (each count elements; a null leaf is a zero vector, e.g. a
// rank that joined). An empty list gives zeros. dst must not overlap a leaf.
void AdasumTree(const std::vector<const void*>& leaves, size_t count, wire::DataType dtype,
                void* dst);

}  // namespace ard::collectives

// k3/dtype.h - element conversions (bf16/f16/f32) and the deterministic
// random weight initialisation documented in docs/runtime.md.
#ifndef K3_DTYPE_H
#define K3_DTYPE_H

#include <cstddef>
#include <cstdint>

#include "k3/artifact.h"

namespace k3 {

uint16_t floatToBf16(float f); // round to nearest even, NaN stays NaN
float bf16ToFloat(uint16_t h);
uint16_t
floatToF16(float f); // round to nearest even, handles subnormals/inf/NaN
float f16ToFloat(uint16_t h);

// Element i of a float tensor (f32, bf16 or f16) at `p`, as f32; p needs no
// alignment. 0 for another dtype.
float loadFloat(artifact::DType t, const void *p, size_t i);
// `v` stored as element i of a float tensor (rounded to nearest even);
// false, and nothing stored, for a dtype that is not f32, bf16 or f16.
bool storeFloat(artifact::DType t, void *p, size_t i, float v);

uint64_t splitmix64(uint64_t x); // the finaliser ("mix") of SplitMix64

// Fills `out` (numel elements of w.dtype) with w's init recipe for `seed`:
//   base = splitmix64(seed ^ fnv1a64(w.name)); u_k = (splitmix64(base + k) >>
//   11) * 2^-53 Normal(std):  element j = std * sqrt(-2 ln(1 - u_{2j})) * cos(2
//   pi u_{2j+1}) Uniform(a):   element j = a * (2 u_j - 1) Constant(v):  v;
//   Unspecified: Normal(0.02) for float dtypes, 0 for i32.
// Values are computed in double, rounded to float, then to the dtype.
// MXFP4 (`numel` elements, tensorBytes(MXFP4, numel) bytes at `out`): its
// code bytes are the top 8 bits of splitmix64(base + byte), its scales all
// the power of two that gives the recipe's rms (dtype.cpp).
// Every element depends only on (seed, name, index), so the work is split
// over `threads` host threads (0: the hardware's count, at most 64) with the
// same bytes for any count: a 6.4 B-parameter model takes seconds, not
// minutes.
void randomInit(const artifact::Weight &w, uint64_t seed, void *out,
                size_t numel, unsigned threads = 0);

// What randomInit computes for w and `seed`, Unspecified resolved: the
// hash base, the kind and its parameter. The artifact's weight-init kernels
// (k3_weight_init_<dtype>) take these three and compute the same elements.
struct RandomInitRecipe {
  uint64_t base = 0;
  artifact::InitKind kind = artifact::InitKind::Constant;
  double param = 0.0;
};
RandomInitRecipe randomInitRecipe(const artifact::Weight &w, uint64_t seed);

} // namespace k3

#endif

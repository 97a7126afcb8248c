//===- CachedRowsCopy.h - a cache's old rows into another buffer -*- C++
//-*-===//
//
// A kernel that returns an updated per-sequence cache ([N, L, W], lens[n]
// rows used) writes its new rows itself; where the output is not the input
// buffer (outside a decode entry's in-place state, lowering/StateInPlace.cpp)
// the old rows must be copied too. Shared by the latent attention kernels.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_CACHEDROWSCOPY_H
#define K3_LOWERING_CUDA_CACHEDROWSCOPY_H

#include "lowering/KernelBuilder.h"

namespace mlir::k3 {

/// Copies rows s < lens[n] of every sequence n from `in` to `out` unless
/// they are one buffer; element i of the flattened cache is copied by the
/// thread whose `first + k stride` is i (a grid-stride loop).
void emitCopyCachedRows(KernelBuilder &kb, const KernelOperand &in,
                        const KernelOperand &out, Value lens, Value first,
                        Value stride);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_CACHEDROWSCOPY_H

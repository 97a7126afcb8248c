//===- LaneDots.h - a warp's dot products over K, at bandwidth --*- C++ -*-===//
//
// The inner loop of every kernel whose time is its weight bytes over the
// memory bandwidth (k3.linear for a few tokens, the MoE experts of a decode
// step): a warp multiplies R weight rows with TT activation rows over K,
// lane l reading 16-byte vectors l, l + 32, ... of each row (512 coalesced
// bytes per row and step), up to 4 steps' loads in flight per iteration (a
// constant trip count), and keeping R x TT f32 partial sums. The caller
// sums them over the warp (MMAEmitter::warpSum) and stores them.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_LANEDOTS_H
#define K3_LOWERING_CUDA_LANEDOTS_H

#include "lowering/cuda/MMA.h"

namespace mlir::k3 {

/// One row of a contiguous view (MMAEmitter::contiguousView): the memref
/// and the indices of every dimension but the innermost.
struct ViewRow {
  Value mem;
  SmallVector<Value> at;
};

/// A warp's share of K: `steps` whole steps (32 vectors each) from step
/// `first` (dynamic: a warp's slice index times `steps`), and whether the
/// warp also takes the partial last step of K (an i1; null: it does).
struct LaneDotSlice {
  Value first;
  int64_t steps;
  Value takesTail;
};

/// The lane's partial sums sum_k w[r][k] x[t][k] over its columns of K,
/// `vec` elements per 16-byte vector, as acc[r * xs.size() + t]. K is a
/// multiple of `vec`; the last step may be partial.
SmallVector<Value> laneDotProducts(MMAEmitter &em, ArrayRef<ViewRow> weights,
                                   ArrayRef<ViewRow> xs, int64_t k, int64_t vec,
                                   Value lane);
/// The same over one slice of K's whole steps (split-K GEMVs).
SmallVector<Value> laneDotProducts(MMAEmitter &em, ArrayRef<ViewRow> weights,
                                   ArrayRef<ViewRow> xs, int64_t k, int64_t vec,
                                   Value lane, const LaneDotSlice &slice);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_LANEDOTS_H

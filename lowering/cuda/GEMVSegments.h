//===- GEMVSegments.h - a GEMV grid over several weights' rows -*- C++ -*-===//
//
// k3.linear_group (k3-group-linears) runs the linears of one input as one
// GEMV grid over their weights' rows one after another; k3.linear is the
// case of one weight. Both GEMV forms (LinearGEMV.cpp on the CUDA cores,
// LinearGEMVMMA.cpp on the tensor cores) give a warp rows of one weight
// (the tile's rows divide every N) and pick it with a warp-uniform branch.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_GEMVSEGMENTS_H
#define K3_LOWERING_CUDA_GEMVSEGMENTS_H

#include "lowering/KernelPatterns.h"
#include "lowering/cuda/MMA.h"

namespace mlir::k3 {

/// One weight's rows of the grid: rows [first, first + n) of the
/// concatenation are rows [0, n) of `w`, written to the columns of `y`.
struct GEMVSegment {
  Value w, y;
  int64_t first, n;
};

/// The segments of the op's weights (inputs 1.., one per output), for x's
/// `rows` rows.
inline SmallVector<GEMVSegment>
gemvSegments(MMAEmitter &em, const KernelEmission &e, Value rows) {
  SmallVector<GEMVSegment> segments;
  int64_t first = 0;
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    int64_t n = e.inputs[1 + i].shape[0];
    segments.push_back(
        {em.contiguousView(e.inputs[1 + i]),
         em.contiguousView(e.outputs[i].base, {rows, em.kb.idx(n)}), first, n});
    first += n;
  }
  return segments;
}

/// Runs `body(segment, first row in it)` for the segment that holds row
/// `n0` of the concatenation (a warp-uniform branch per segment).
inline void
forGEMVSegment(KernelBuilder &kb, ArrayRef<GEMVSegment> segments, Value n0,
               function_ref<void(const GEMVSegment &, Value)> body) {
  for (const GEMVSegment &s : segments) {
    Value in =
        kb.andi(kb.gei(n0, kb.idx(s.first)), kb.lti(n0, kb.idx(s.first + s.n)));
    kb.ifThen(in, [&] { body(s, kb.subi(n0, kb.idx(s.first))); });
  }
}

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_GEMVSEGMENTS_H

//===- MXFP4WarpMMA.h - MXFP4 rows times a few tokens, mma.sync -*- C++ -*-===//
//
// The decode step's MoE GEMVs with MXFP4 weights (docs/mxfp4.md) on the
// tensor cores: a warp multiplies 16 rows of each weight by up to 8 token
// rows with mma.sync m16n8k16 (bf16, f32 accumulators). Decoding the
// codes is the work of this GEMV (the bytes are 4x fewer than bf16's); on
// the tensor cores each decoded element is used by every token of the
// tile at once, and no warp reduction is left: the lanes' partial sums
// over K meet inside the mma.
//
// Lane (g, c) (g = lane / 4, c = lane % 4) reads, per iteration of 128
// elements of K, block 4 i + c (16 code bytes, one scale byte) of rows
// g and g + 8, and x's 32 elements of that block for token g. A block
// decodes to 16 bf16x2 pairs per row, pair (w, p) holding elements 8 w + p
// and 8 w + p + 4 (decodeE2M1Pairs); mma m of the iteration takes pairs
// (m / 2, 2 (m % 2)) and (m / 2, 2 (m % 2) + 1) as the A fragment's k
// columns 2 c, 2 c + 1 and 2 c + 8, 2 c + 9 of both rows, and x's pairs of
// the same elements as B's: the products pair the same elements, in a k
// order the mma does not care about. The next step's bytes are loaded
// before this one's are decoded (loop-carried registers), so a warp always
// has a step of loads in flight. Blocks past K (K / 32 not a multiple of
// 4) read zero codes; tokens past the tile read zeros.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MXFP4WARPMMA_H
#define K3_LOWERING_CUDA_MXFP4WARPMMA_H

#include "lowering/cuda/MMA.h"

namespace mlir::k3 {

/// Rows g and g + 8 of one MXFP4 weight for this lane: the weight's bytes
/// (codes then scales, a contiguous i8 view) and the byte indices where
/// each row's codes and scales start.
struct MXFP4LaneRows {
  Value bytes;
  Value codes[2], scales[2];
};

/// The lane's token row: x's view and row (clamped to a real row), and
/// whether token g exists (else its products are zeros).
struct LaneToken {
  Value x, row, valid;
};

/// D (16 rows x 8 tokens) of each weight over K (a multiple of 32): the
/// lane's four elements, rows g and g + 8 of tokens 2 c and 2 c + 1.
SmallVector<Acc> mxfp4WarpProducts(MMAEmitter &em,
                                   ArrayRef<MXFP4LaneRows> weights,
                                   const LaneToken &token, int64_t k,
                                   Value lane);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_MXFP4WARPMMA_H

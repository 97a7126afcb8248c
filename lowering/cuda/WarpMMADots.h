//===- WarpMMADots.h - 16 bf16 weight rows times a few tokens, mma.sync ---===//
//
// The inner loop of a GEMV whose weights and activations are bf16 (a
// decode step's projections and MoE experts) on the tensor cores: a warp
// multiplies 16 rows of each weight by tiles of up to 8 tokens with
// mma.sync m16n8k16 (f32 accumulators). On the CUDA cores (LaneDots.h)
// each weight element costs a conversion and TT fused multiply-adds,
// whether or not the tile's tokens exist, and the lanes' sums need a
// butterfly at the end; here a 16-byte weight load costs half an mma, and
// the lanes' partial sums over K meet inside the mma.
//
// Lane (g, c) (g = lane / 4, c = lane % 4) loads, per step of 32 columns
// of K, the 16 bytes at column 32 s + 8 c of rows g and g + 8 (four lanes
// read 64 contiguous bytes of a row) and of its token g. Its 8 elements
// feed two mmas, h = 0 and 1: elements 4 h, +1 as the A fragment's k
// columns 2 c, 2 c + 1 and elements 4 h + 2, +3 as 2 c + 8, 2 c + 9, for
// both rows, and x's same elements as B's. Each logical k of the mma is
// one physical column for A and B alike (it depends on c and h only): the
// products pair the same elements, in a k order the sum does not care
// about. Up to 8 steps' loads are issued before their products (a constant
// trip count; the remainder runs straight-line). Columns past K (K a
// multiple of 8, not of 32) read zeros.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_WARPMMADOTS_H
#define K3_LOWERING_CUDA_WARPMMADOTS_H

#include "lowering/cuda/LaneDots.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::k3 {

/// Rows g and g + 8 of one bf16 weight for this lane.
struct MMALaneRows {
  ViewRow rows[2];
};

/// The lane's token of one 8-token tile (row g of the tile): x's row,
/// clamped to a real one, and whether the token exists (else zeros).
struct MMALaneToken {
  ViewRow x;
  Value valid;
};

/// A warp's share of K (LaneDots.h's slice), here in steps of 32 columns.
using MMASlice = LaneDotSlice;

/// Steps of 32 columns in K's whole part.
inline int64_t mmaWholeSteps(int64_t k) { return k / 32; }

/// The 16 x 8 products D of each weight and token tile over the slice of
/// K: D[w * tokens.size() + j], the lane's rows g and g + 8 of tokens
/// 2 c and 2 c + 1 of tile j (the accumulator's c0..c3).
SmallVector<Acc> warpMMAProducts(MMAEmitter &em, ArrayRef<MMALaneRows> weights,
                                 ArrayRef<MMALaneToken> tokens, int64_t k,
                                 Value lane, const MMASlice &slice);
/// The same over the whole of K.
SmallVector<Acc> warpMMAProducts(MMAEmitter &em, ArrayRef<MMALaneRows> weights,
                                 ArrayRef<MMALaneToken> tokens, int64_t k,
                                 Value lane);

/// Split K over S warps that share one group of 16 rows: each warp keeps
/// its fragments in shared memory, and after a barrier (which every
/// thread of the block must reach) the group's slice 0 adds the S
/// partials in slice order (the same result on every run).
class FragmentPartials {
public:
  /// `warps` warps of a block, `accs` fragments each.
  FragmentPartials(MMAEmitter &em, FunctionOpInterface fn, int64_t warps,
                   int64_t accs);
  /// Warp `warp` (all lanes) keeps its fragments.
  void keep(Value warp, Value lane, ArrayRef<Acc> d);
  /// Group g's S slices added (warps g S .. g S + S - 1), for its slice 0:
  /// its first `count` fragments (all where 0).
  SmallVector<Acc> gather(Value group, int64_t slices, Value lane,
                          int64_t count = 0);

private:
  Value at(Value warp, int64_t i, int64_t e, Value lane);

  MMAEmitter &em;
  int64_t accs;
  Value mem;
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_WARPMMADOTS_H

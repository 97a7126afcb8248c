//===- LatentSplitPlan.h - the split-KV absorbed MLA decode's plan -*- C++
//-*-===//
//
// Kernel `latent_attention_split` (k3.latent_attention over a cache, a
// decode step) runs as three launches (k3.phases), documented in
// docs/mla.md "The split-KV decode":
//
//   0. absorb (LatentAttentionSplit.cpp): qa[t, h] = [q_nope W_k | q_pe]
//      scaled by scale log2(e), bf16, into workspace QA [T, H, R + Dr];
//   1. attend (LatentSplitAttend.cpp): a block per (token t, key split j,
//      group of Hb heads) scores its keys against all Hb heads on the
//      tensor cores and writes per head the partial (ctx[R], m, l) of its
//      keys: the unnormalised probability-weighted latent sum, the running
//      maximum (log2 units) and the sum of the weights;
//   2. combine (LatentAttentionSplit.cpp): per (token, head) the splits
//      rescaled to a common maximum, divided by the total weight, then
//      o = W_v ctx; and the new rows appended to the cache.
//
// The split count per token, S = max(1, floor(P / T)), aims at P blocks
// (the config's tile[1], one wave of the GPU's SMs at one block each) at
// any batch: T S <= max(P, T) work items, so the partial rows fit a static
// [P, H, R + 4] plus a [T, H, R + 4] workspace (item i < P in the first,
// else row i - P of the second), whatever T is. Each split takes ceil(count /
// S) keys rounded up to whole key tiles, at least kLatentSplitMinKeys; splits
// past the keys are empty and skipped by both phases.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_LATENTSPLITPLAN_H
#define K3_LOWERING_CUDA_LATENTSPLITPLAN_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"

namespace mlir::k3 {

/// Keys per tile of the attend phase (staged in shared memory as bf16)
/// unless the config's tile[2] says otherwise (32 or 64).
inline constexpr int64_t kLatentSplitKeys = 32;
/// Keys a split takes at least: a split's fixed cost (its queries staged,
/// its partial row written and combined) is worth 4 tiles.
inline constexpr int64_t kLatentSplitMinKeys = 4 * kLatentSplitKeys;
/// Tokens per block of the absorb and combine phases: W_k and W_v rows are
/// read once for that many tokens.
inline constexpr int64_t kLatentSplitTokens = 8;
/// Words a partial row holds past its R context channels: m, l, padding
/// (rows stay 16-byte aligned).
inline constexpr int64_t kLatentSplitTail = 4;

/// The op's dimensions and the config's choices.
struct LatentSplitDims {
  int64_t heads = 0, dn = 0, dr = 0, dv = 0, rank = 0;
  int64_t headsPerBlock = 0; // Hb, a multiple of 16
  int64_t target = 0;        // P, work items aimed at
  int64_t stages = 0;        // bf16 tiles in the ring (a bf16 cache)
  int64_t keys = 0;          // keys a tile: 32 or 64
  int64_t width() const { return rank + dr; }
  int64_t rowWords() const { return rank + kLatentSplitTail; }
  int64_t headGroups() const { return heads / headsPerBlock; }
  static LatentSplitDims of(LatentAttentionOp op, KernelConfigAttr config);
};

/// One token's split layout, the same in phases 1 and 2.
struct LatentSplit {
  Value count;    // keys the token attends to
  Value perSplit; // keys per split, whole tiles
  Value used;     // non-empty splits, ceil(count / perSplit)
};

/// The element type of `op`'s latent cache: bf16 is copied straight into
/// the attend phase's tiles, any other type is staged and converted.
inline Type latentCacheType(LatentAttentionOp op) {
  return cast<RankedTensorType>(op.getLatentCache().getType()).getElementType();
}

/// Splits per token at `tokens` tokens: max(1, floor(P / T)).
Value latentSplitsPerToken(KernelBuilder &kb, const LatentSplitDims &d,
                           Value tokens);
/// The layout of a token with `count` keys over `splits` splits.
LatentSplit latentSplitOf(KernelBuilder &kb, const LatentSplitDims &d,
                          Value count, Value splits);
/// Keys of token `t` (the `t - start`-th new token of its sequence, whose
/// cache holds `oldLen` rows of capacity `capacity`): its own and the
/// earlier new tokens' plus the cached ones, at most `capacity`.
Value latentKeyCount(KernelBuilder &kb, Value t, Value start, Value oldLen,
                     Value capacity);

/// What phase 1 reads and writes (views with a unit innermost stride).
struct LatentSplitAttendArgs {
  KernelBuilder &kb;
  LatentSplitDims dims;
  Value tokens;        // T, the query rows (not always num_tokens)
  Value qa;            // [T, H, R + Dr] bf16, phase 0's output
  KernelOperand cache; // [N, L, R + Dr], the cached latents
  Value cacheView;     // `cache` viewed contiguously
  Value latent;        // [T, R + Dr], the new tokens' latents
  Value lens, cu;      // cache_lens [N]; cu_seqlens [N + 1] or null
  Value partFirst;     // [P, H, R + 4] f32, work items < P
  Value partRest;      // [T, H, R + 4] f32, the others
};

/// Dynamic shared memory (bytes) of phase 1 at `d` with a cache of
/// `cacheType` elements.
int64_t latentSplitAttendSharedBytes(const LatentSplitDims &d, Type cacheType);
/// Whether phase 1's tile copies divide evenly over its threads (each
/// thread copies the same number of 16-byte vectors of a tile).
bool latentSplitTilesDivide(const LatentSplitDims &d, Type cacheType);
/// Emits phase 1 (LatentSplitAttend.cpp) at the builder's insertion point.
void emitLatentSplitAttend(const LatentSplitAttendArgs &a);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_LATENTSPLITPLAN_H

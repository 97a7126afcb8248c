//===- KernelConfigRules.h - default kernel configs per op -----*- C++ -*-===//
//
// The rules k3-select-kernel-config applies (the compiler's counterpart of
// IREE's KernelConfig.cpp): for each op and target, the kernel that lowers
// it and that kernel's tile, warps and stages, and the checks a config
// given by hand or by an override must pass. Kernels read their config and
// trust it, so every limit a kernel has is checked here, with the reason.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELCONFIGRULES_H
#define K3_LOWERING_KERNELCONFIGRULES_H

#include "dialects/K3/K3Dialect.h"

namespace mlir::k3 {

/// Warps per block of loop-nest kernels on a GPU (256 threads).
constexpr int64_t kLoopNestWarps = 8;

/// Whether `op` becomes a kernel (computes), rather than naming or aliasing
/// memory (weights, state reads, reshapes, launches).
bool needsKernel(Operation *op);

/// The default configuration of `op` on `target` (#k3.cpu_target or
/// #k3.gpu_target); `decode` when `op` is in a decode entry (one token per
/// sequence); `maxRows`: the most rows (tokens) of one call of its entry,
/// 0 where unknown; `maxSeqs`: the most sequences of a call, 0 where
/// unknown (with `maxRows`, how long one sequence can be).
KernelConfigAttr defaultKernelConfig(Operation *op, Attribute target,
                                     bool decode, int64_t maxRows = 0,
                                     int64_t maxSeqs = 0);

/// Whether kernel `kind` covers `op` (its shapes and types) on `target`.
bool kernelApplies(Operation *op, KernelKind kind, Attribute target);

/// The default parameters of kernel `kind` for `op`, which it covers.
KernelConfigAttr kernelConfigOfKind(Operation *op, KernelKind kind,
                                    Attribute target, bool decode,
                                    int64_t maxRows = 0, int64_t maxSeqs = 0);

/// A diagnostic at `op` when `config` cannot lower it on `target`.
LogicalResult verifyKernelConfig(Operation *op, KernelConfigAttr config,
                                 Attribute target);

/// The tile of the recurrent KDA kernel: BV value columns per block, P lanes
/// per column group (K / P state rows each), S tokens per staged chunk, C
/// value columns per lane group.
struct KDARecurrentTile {
  int64_t bv = 32, p = 8, s = 16, c = 4;
  /// Shared memory (f32 words) of the chunk staging with `warps` warps.
  int64_t stagingWords(int64_t kDim, int64_t warps) const {
    return s * kDim * 4 + s * bv + s * 4 + s * warps * 4;
  }
  int64_t threads() const { return bv / c * p; }
};
KDARecurrentTile kdaRecurrentTile(KernelConfigAttr config);

/// moe_router_rows: tokens per block (the config's tile [G]; 1 without a
/// tile) and the channels per vector load of W (16 bytes of the wider of
/// x and W where the hidden size allows, else 1).
int64_t routerTokensPerBlock(KernelConfigAttr config);
int64_t routerVectorWidth(MoERouterOp op);

/// The tile of the GEMV linear (lowering/cuda/LinearGEMV.cpp): R output
/// rows per warp, TT tokens per block, warps per block, and S warps that
/// split K for one group of R rows (tile [R, TT] or [R, TT, S]; S = 1 for
/// the grouped MoE GEMV).
struct LinearGEMVTile {
  int64_t rows = 2, tokens = 4, warps = 4, slices = 1;
};
/// R of the GEMVs' tensor-core form (bf16 operands, mma.sync m16n8k16:
/// lowering/cuda/WarpMMADots.h): a warp's 16 rows of each weight.
constexpr int64_t kGEMVMMARows = 16;
LinearGEMVTile linearGEMVTile(KernelConfigAttr config);
/// Elements of one 16-byte vector of the weight's element type.
int64_t linearGEMVVectorElements(Type weightElement);
/// Row tiles of the GEMV grid: ceil(N / ((warps / S) R)).
int64_t linearGEMVRowTiles(int64_t nOut, const LinearGEMVTile &tile);

/// Dynamic shared memory of the TMA + wgmma linear with `stages` stages
/// of tileM x 64 x tiles and tileN x 64 W tiles; with `sharedEpilogue`
/// also each consumer's 64 x tileN bf16 result tile
/// (linearStoresThroughShared); with `splitK` (the one-warpgroup tile in a
/// cluster that splits K) the f32 partial tile after the stages instead of
/// over them.
int64_t linearWGMMASharedBytes(int64_t stages, int64_t tileN = 128,
                               int64_t tileM = 128, bool sharedEpilogue = false,
                               bool splitK = false);
/// sm_90's most shared memory for one block (227 KiB), for the rules that
/// have no target at hand.
constexpr int64_t kSm90SmemPerBlock = 227 * 1024;
/// The most stages of the persistent [128, 256, 64] schedule beside which
/// two 64-row bf16 result tiles of `columns` columns still fit in sm_90's
/// shared memory: the one rule (sharedEpilogueSchedule's bytes) that both
/// the default configs' stage counts and the kernels' choice of epilogue
/// follow (3 beside the linear's 256 columns, 4 beside the gate/up
/// GEMM's 128).
int64_t sharedEpilogueMaxStages(int64_t columns);
/// Whether linear_tma_wgmma with config `c` writes its results through
/// shared memory and TMA stores (LinearWGMMA.cpp): the persistent
/// schedule whose two consumers share [128, 256 or 192, 64] tiles,
/// unpaired, with bf16 results only and at most
/// linearSharedEpilogueMaxStages(columns) stages (the tiles take 64 or 48
/// KiB); otherwise the consumers store from registers.
bool linearStoresThroughShared(Operation *op, KernelConfigAttr c);
/// Whether `c`'s tile is the persistent warp-specialised linear's: [128,
/// 256, 64] or [128, 192, 64].
bool linearWideTile(KernelConfigAttr c);
/// The most stages of the persistent linear with `columns`-column tiles
/// beside its two bf16 result tiles (3 at 256 columns, 4 at 192).
int64_t linearSharedEpilogueMaxStages(int64_t columns);

/// Row stride, in f32 elements, of the epilogue's accumulator tile of
/// `cols` columns. nvgpu.warpgroup.mma.store writes one f32 per lane and
/// store, lanes 4 r .. 4 r + 3 in row r of 8: with rows 128 or 256 floats
/// apart all 8 rows hit the same banks (Nsight Compute measured a 9.1-way
/// conflict on the grouped MoE GEMMs' epilogue); 8 more floats a row put
/// rows r and r + 4 alone on a bank (2-way), and keep rows 16-byte aligned
/// for the epilogue's vector reads.
constexpr int64_t kEpilogueRowPad = 8;
/// The dense wgmma GEMMs' tile order (config `raster`, TileRaster.h): row
/// tiles per band by default, and at most.
constexpr int64_t kDefaultRasterRowTiles = 16, kMaxRasterRowTiles = 64;
/// The grouped GEMMs' L2 prefetch distance (config `prefetch`) at most, in
/// k-steps of 64: past that a block's prefetched tiles would outlive L2.
constexpr int64_t kMaxPrefetchSteps = 8;
inline int64_t wgmmaEpilogueRowStride(int64_t cols) {
  return cols + kEpilogueRowPad;
}
/// Dynamic shared memory of the grouped MoE wgmma kernel: the linear's,
/// and with MXFP4 weights each stage's staged codes and scales
/// (MXFP4Tile.h) after the stages; the persistent warp-specialised schedule
/// (256-column tiles) has no epilogue tile; its rows' tiles have `tileM`
/// rows.
/// `epilogueColumns` (groupedStoresThroughShared): each consumer's 64 x
/// that many bf16 result columns after the stages.
int64_t groupedWGMMASharedBytes(int64_t stages, int64_t tileN, bool mxfp4,
                                int64_t tileM = 128,
                                int64_t epilogueColumns = 0);
/// Whether the grouped (or dense GLU) wgmma kernel with config `c` writes
/// its results through shared memory (MoEGroupedPersistent.cpp): the
/// persistent schedule whose consumers share [128, 256, 64] tiles,
/// unpaired (or the gate/up GEMM's pairs, which share only weight tiles),
/// with bf16 results and as many stages as leave room for the result
/// tiles (3 beside down's 256 columns, 4 beside gate/up's 128);
/// its result columns per tile (gate/up: the 128 channels, down: 256),
/// else 0.
int64_t groupedSharedEpilogueColumns(Operation *op, KernelConfigAttr c);
/// Staged bytes of one MXFP4 weight row and k-step of 64: 32 of codes and
/// the aligned 4-byte word that holds its two scales.
constexpr int64_t kMXFP4StagedRowBytes = 36;
/// Dynamic shared memory of mla_flash_wgmma for `stages` key/value buffers
/// of `keys` keys each and blocks of `queryRows` queries
/// (MLAFlashWGMMA.cpp lays it out).
int64_t mlaFlashSharedBytes(MLAPrefillAttentionOp op, int64_t stages,
                            int64_t queryRows, int64_t keys);

/// Dynamic shared memory of the tensor-core KDA chain per stage, for key
/// and value dimensions and warps.
int64_t kdaMMAChainStageBytes(int64_t kDim, int64_t warps);

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELCONFIGRULES_H

//===- KernelConfigRules.cpp - default kernel configs per op ---*- C++ -*-===//
#include "lowering/KernelConfigRules.h"
#include "lowering/cuda/LatentSplitPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace mlir;
using namespace mlir::k3;

bool mlir::k3::needsKernel(Operation *op) {
  if (isa<WeightOp, StateReadOp, StateWriteOp, LaunchOp, LayerOp>(op) ||
      isCollective(op))
    return false;
  if (isa<K3Dialect>(op->getDialect()))
    return true;
  return isa<tensor::ExtractSliceOp, tensor::ConcatOp>(op);
}

namespace {

/// Rows of the grouped MoE GEMMs' tall tile ([384, 128, 64]; docs/moe.md,
/// "Tall tiles"): an expert's segment of up to 384 rows reads each weight
/// tile once.
constexpr int64_t kTallGroupedTileRows = 384;

int64_t dimOf(Value v, unsigned i) {
  return cast<RankedTensorType>(v.getType()).getDimSize(i);
}
Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

KernelConfigAttr config(MLIRContext *ctx, KernelKind kind,
                        ArrayRef<int64_t> tile, int64_t warps,
                        int64_t stages = 0, int64_t blocksPerSM = 0,
                        int64_t raster = 0, int64_t cluster = 0,
                        TileScheduler scheduler = TileScheduler::strided) {
  return KernelConfigAttr::get(ctx, kind, tile, warps, stages, blocksPerSM,
                               raster, cluster, scheduler, /*prefetch=*/0);
}

//===----------------------------------------------------------------------===//
// The recurrent KDA kernel (lowering/cuda/KDARecurrent.cpp)
//===----------------------------------------------------------------------===//

/// Why `t` is not a tile of the recurrent kernel for K and V ("" when it
/// is): one list of rules for the verifier and for the default choice.
std::string kdaRecurrentTileProblem(const KDARecurrentTile &t, int64_t kDim,
                                    int64_t vDim) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  if (t.c != 1 && t.c != 4)
    os << "kda_recurrent tile C must be 1 or 4";
  else if (!llvm::isPowerOf2_64(t.p) || t.p > 32 || kDim % t.p != 0)
    os << "kda_recurrent tile P must be a power of two up to 32 dividing K = "
       << kDim;
  else if (!llvm::isPowerOf2_64(t.bv) || t.bv % t.c != 0 || vDim % t.c != 0)
    os << "kda_recurrent tile BV must be a power of two, and C must divide "
          "BV and V";
  else if (kDim / t.p * t.c > 128)
    os << "kda_recurrent tile keeps K / P * C = " << kDim / t.p * t.c
       << " state values per lane (at most 128)";
  else if (t.s < 1 || t.s > 256)
    os << "kda_recurrent tile S must be in [1, 256]";
  else if (t.threads() % 32 != 0 || t.threads() > 1024)
    os << "kda_recurrent tile gives " << t.threads()
       << " threads (whole warps, at most 1024)";
  // Static shared memory: the 48 KiB that needs no opt-in.
  else if (t.stagingWords(kDim, t.threads() / 32) * 4 > 48 * 1024)
    os << "kda_recurrent staging of S = " << t.s
       << " tokens passes 48 KiB of shared memory";
  return msg;
}

/// The largest power of two up to `cap` dividing `n`, at most `want`
/// rounded up to a power of two.
int64_t powerOf2Divisor(int64_t n, int64_t want, int64_t cap) {
  int64_t p =
      std::min<int64_t>(llvm::PowerOf2Ceil(std::max<int64_t>(1, want)), cap);
  while (p > 1 && n % p != 0)
    p /= 2;
  return p;
}

/// Measured choices (docs/kda-cuda.md): 64 state values per lane (64 rows of
/// one column take 254 registers without spills; 128 spill); 16 staged
/// tokens, the prefill optimum at K = 128, fewer where the staging would
/// pass 40 KiB or 32 rows in flight per thread (more spill); a decode entry
/// takes S = 1 (the form without staging, KDARecurrentTokens.cpp) and 64
/// value columns a block (4 warps at K = 128: 3.96-4.16 TB/s of state
/// against 3.89-4.06 with 32, bench/results/kda_forward-decode-nvidia-h200-
/// 20261204T125758Z.json). P is a power of two dividing K (K = 192: P = 16,
/// 48 values per lane); where four columns per lane would pass 64 values,
/// one column.
KDARecurrentTile chooseKDARecurrentTile(int64_t kDim, int64_t vDim,
                                        bool decode) {
  KDARecurrentTile t;
  if (decode)
    t.bv = 64;
  t.c = vDim % 4 == 0 ? 4 : 1;
  t.p = powerOf2Divisor(kDim, (kDim * t.c + 63) / 64, 32);
  if (t.c == 4 && kDim / t.p * t.c > 64) {
    t.c = 1;
    t.p = powerOf2Divisor(kDim, (kDim + 63) / 64, 32);
  }
  t.bv = std::min<int64_t>(t.bv, llvm::PowerOf2Ceil(vDim));
  t.bv = std::max<int64_t>(t.bv, t.c);
  // Whole warps: shuffles use the full-warp mask.
  int64_t groups = t.bv / t.c;
  if (groups * t.p < 32)
    t.p = powerOf2Divisor(kDim, 32 / groups, 32);
  if (decode) {
    t.s = 1;
    return t;
  }
  int64_t warps = std::max<int64_t>(1, groups * t.p / 32);
  int64_t rowsPerThread = (kDim + warps * 32 - 1) / (warps * 32);
  t.s = 16;
  while (t.s > 1 && (t.stagingWords(kDim, warps) * 4 > 40 * 1024 ||
                     t.s * rowsPerThread > 32))
    t.s /= 2;
  return t;
}

/// The kernel keeps K / P state rows per lane in registers and unrolls over
/// K: static K, V, H up to 256, f32 state, the gate's parameters when the
/// gate is in the op, and a tile that the rules above accept (K = 20 with
/// V = 4 has no whole-warp tile: the loop nest runs it).
bool kdaRecurrentApplies(KDAOp op) {
  int64_t kDim = dimOf(op.getQ(), 3), vDim = dimOf(op.getV(), 3),
          heads = dimOf(op.getQ(), 2);
  if (kDim <= 0 || vDim <= 0 || heads <= 0 || kDim > 256 || vDim > 256)
    return false;
  if (op.getGateKind() && (!op.getALog() || !op.getDtBias()))
    return false;
  for (bool decode : {false, true})
    if (!kdaRecurrentTileProblem(chooseKDARecurrentTile(kDim, vDim, decode),
                                 kDim, vDim)
             .empty())
      return false;
  return true;
}

LogicalResult verifyKDARecurrent(KDAOp op, KernelConfigAttr c) {
  if (!kdaRecurrentApplies(op))
    return op.emitOpError() << "kernel kda_recurrent needs static K, V and H "
                               "up to 256, the gate's parameters and a "
                               "whole-warp tile";
  if (c.getTile().size() != 4)
    return op.emitOpError()
           << "kernel kda_recurrent needs tile = [BV, P, S, C], got "
           << c.getTile().size() << " sizes";
  KDARecurrentTile t = kdaRecurrentTile(c);
  if (std::string problem =
          kdaRecurrentTileProblem(t, dimOf(op.getQ(), 3), dimOf(op.getV(), 3));
      !problem.empty())
    return op.emitOpError() << problem;
  if (c.getWarps() != t.threads() / 32)
    return op.emitOpError() << "kda_recurrent tile gives " << t.threads() / 32
                            << " warps, the config says " << c.getWarps();
  return success();
}

//===----------------------------------------------------------------------===//
// The tensor-core KDA (lowering/cuda/KDAMMAOperands.cpp, KDAMMARecurrence.cpp)
//===----------------------------------------------------------------------===//

/// Warps per chain block (16 value columns each): 8 where they divide
/// V / 16. How many of them are active is chosen at run time from the
/// number of sequences (KDAMMARecurrence.cpp): the fewest whose blocks fit
/// the SMs in one wave, down to one warp (the config's tile[1] = 16). A
/// block per SM: two chain blocks on one SM share its tensor cores and
/// that SM sets the time (B1 T8192 H96: W = 4, 192 blocks, 1.45 ms; W = 8,
/// 96 blocks, 1.30 ms; H64: W = 4, 128 blocks, 0.84 ms against 1.14 with
/// W = 8); packed batches fill the SMs with all 8 (B8 T4096 H32: 1.20 ms
/// against 1.53 with 2; docs/kda-cuda.md).
int64_t chooseKDAMMAChainWarps(int64_t vDim) {
  int64_t w = 8;
  while (w > 1 && (vDim / 16) % w != 0)
    w /= 2;
  return w;
}

/// The chain's shared memory: the chunk's packed rows, e^{G_C} and v's tile.
int64_t chainBytes(int64_t kDim, int64_t warps, int64_t stages) {
  return stages * kdaMMAChainStageBytes(kDim, warps);
}

LogicalResult verifyKDAMMAChain(KDAMMARecurrenceOp op, KernelConfigAttr c,
                                GPUTargetAttr target) {
  int64_t vDim = dimOf(op.getV(), 3),
          kDim = 2 * (dimOf(op.getPacked(), 3) - 16) / 5;
  int64_t w = c.getWarps();
  if (w != 1 && w != 2 && w != 4 && w != 8)
    return op.emitOpError()
           << "kda_mma_chain warps must be 1, 2, 4 or 8, got " << w;
  if ((vDim / 16) % w != 0)
    return op.emitOpError() << "kda_mma_chain warps (" << w
                            << ") must divide V / 16 = " << vDim / 16;
  if (c.getStages() < 2 || c.getStages() > 4)
    return op.emitOpError()
           << "kda_mma_chain stages must be in [2, 4], got " << c.getStages();
  if (c.getBlocksPerSm() < 0 || c.getBlocksPerSm() > 16)
    return op.emitOpError()
           << "kda_mma_chain blocks_per_sm must be in [0, 16], got "
           << c.getBlocksPerSm();
  // tile = [16 tokens a chunk, the fewest value columns a block takes]:
  // 16 per active warp, a power of two times 16 up to the block's 16 W.
  ArrayRef<int64_t> tile = c.getTile();
  if (tile.size() != 2 || tile[0] != 16)
    return op.emitOpError() << "kda_mma_chain tile must be [16, columns], "
                               "got "
                            << tile.size() << " sizes";
  if (tile[1] % 16 != 0 || !llvm::isPowerOf2_64(tile[1] / 16) ||
      tile[1] > 16 * w)
    return op.emitOpError()
           << "kda_mma_chain tile[1] (the fewest value columns a block "
              "takes) must be 16 times a power of two up to 16 warps = "
           << 16 * w << ", got " << tile[1];
  if (int64_t bytes = chainBytes(kDim, w, c.getStages());
      bytes > target.getSmemPerBlock())
    return op.emitOpError() << "kda_mma_chain needs " << bytes
                            << " bytes of shared memory, the target has "
                            << target.getSmemPerBlock();
  return success();
}

LogicalResult verifyKDAMMAOperands(KDAMMAOperandsOp op, KernelConfigAttr c) {
  if (c.getWarps() != 4)
    return op.emitOpError() << "kda_mma_operands has 4 warps (a token each "
                               "per 16-token window), got "
                            << c.getWarps();
  if (c.getBlocksPerSm() < 1 || c.getBlocksPerSm() > 16)
    return op.emitOpError()
           << "kda_mma_operands blocks_per_sm must be in [1, 16], got "
           << c.getBlocksPerSm();
  return success();
}

//===----------------------------------------------------------------------===//
// k3.linear on the tensor cores, 3xTF32 (lowering/cuda/LinearMMA.cpp)
//===----------------------------------------------------------------------===//

LogicalResult verifyLinearMMA(LinearOp op, KernelConfigAttr c) {
  int64_t nOut = dimOf(op.getWeight(), 0), nIn = dimOf(op.getWeight(), 1);
  if (nOut <= 0 || nIn <= 0 || nOut % 32 != 0 || nIn % 32 != 0)
    return op.emitOpError() << "linear_mma_3xtf32 needs static weight sizes "
                               "that are multiples of 32, got "
                            << nOut << " x " << nIn;
  if (!elementOf(op.getInput()).isF32())
    return op.emitOpError() << "linear_mma_3xtf32 needs an f32 input";
  if (c.getTile() != ArrayRef<int64_t>{64, 32, 32})
    return op.emitOpError() << "linear_mma_3xtf32 has the tile [64, 32, 32]";
  if (c.getWarps() != 4)
    return op.emitOpError()
           << "linear_mma_3xtf32 has 4 warps, got " << c.getWarps();
  return success();
}

//===----------------------------------------------------------------------===//
// k3.linear with TMA and wgmma (lowering/cuda/LinearWGMMA.cpp)
//===----------------------------------------------------------------------===//

/// bf16 activations and weights (wgmma's bf16 operands come straight from
/// TMA tiles), a 2-D input, whole 128 x 64 weight tiles; for a
/// k3.linear_group (k3-group-linears in prefill) every weight so, their
/// column tiles laid end to end in one grid.
bool linearWGMMAApplies(Operation *op) {
  if (!isa<LinearOp, LinearGroupOp>(op))
    return false;
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  if (in.getRank() != 2 || !in.getElementType().isBF16())
    return false;
  int64_t nIn = dimOf(op->getOperand(1), 1);
  for (auto [w, r] :
       llvm::zip(op->getOperands().drop_front(), op->getResults())) {
    int64_t nOut = dimOf(w, 0);
    Type out = cast<RankedTensorType>(r.getType()).getElementType();
    if (!elementOf(w).isBF16() || !(out.isF32() || out.isBF16()) || nOut <= 0 ||
        nOut % 8 != 0 || dimOf(w, 1) != nIn || nIn <= 0 || nIn % 64 != 0)
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// k3.linear for a few tokens (lowering/cuda/LinearGEMV.cpp)
//===----------------------------------------------------------------------===//

bool isGEMVElement(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }

bool gemvOperands(Value input, Value weight) {
  int64_t nIn = dimOf(weight, 1), nOut = dimOf(weight, 0);
  Type w = elementOf(weight);
  return nIn > 0 && nOut > 0 && isGEMVElement(w) &&
         isGEMVElement(elementOf(input)) &&
         nIn % linearGEMVVectorElements(w) == 0;
}

/// The weights of a k3.linear or a k3.linear_group (the GEMV's rows are
/// theirs, one after another).
SmallVector<Value> gemvWeights(Operation *op) {
  if (auto o = dyn_cast<LinearGroupOp>(op))
    return SmallVector<Value>(o.getWeights());
  return {cast<LinearOp>(op).getWeight()};
}

/// Whole steps of K of a warp (32 lanes x one 16-byte vector each).
int64_t gemvSteps(Operation *op) {
  Value w = gemvWeights(op).front();
  return dimOf(w, 1) / (32 * linearGEMVVectorElements(elementOf(w)));
}

/// Whether the GEMV can multiply on the tensor cores (tile R = 16): bf16
/// inputs and weights, every weight's N a multiple of 16.
bool gemvMMAOperands(Operation *op) {
  if (!elementOf(op->getOperand(0)).isBF16())
    return false;
  return llvm::all_of(gemvWeights(op), [](Value w) {
    return elementOf(w).isBF16() && dimOf(w, 0) % kGEMVMMARows == 0;
  });
}

/// Steps of 32 columns of K, the unit of the tensor-core form's split.
int64_t gemvMMASteps(Operation *op) {
  return dimOf(gemvWeights(op).front(), 1) / 32;
}

/// The split of K over S warps (up to 8) that gives a grid of `warps16`
/// warps of 16 rows at least 1024 warps (about 8 per SM, each with 16
/// loads of 16 bytes a lane in flight), where S divides K's `steps` (a K
/// under one step, 32 columns, is not split: 0 steps divide by anything).
int64_t mmaSlicesFor(int64_t warps16, int64_t steps) {
  int64_t s = 1;
  while (warps16 * s < 1024 && s < 8 && 2 * s <= steps && steps % (2 * s) == 0)
    s *= 2;
  return s;
}

/// Resident blocks of the tensor-core GEMVs: 16 warps per SM. Without the
/// bound ptxas guessed 32 registers for a block of unknown size and
/// issued each step's loads right before their mma (one load in flight:
/// the LM head ran 0.30 ms instead of 0.18 on the CUDA cores,
/// bench/results/profile-gpu/kl48b-decode-B1-20261203T1540Z-574f31e.txt);
/// with it, 107 registers hold the 24 loads of a trip.
int64_t mmaGEMVBlocksPerSM(int64_t warps) {
  return std::max<int64_t>(1, 16 / warps);
}

/// A GEMV tile's config: [R, TT] or, with K split, [R, TT, S].
KernelConfigAttr gemvTileConfig(MLIRContext *ctx, KernelKind kind,
                                const LinearGEMVTile &t, int64_t blocks) {
  if (t.slices == 1)
    return config(ctx, kind, {t.rows, t.tokens}, t.warps, 0, blocks);
  return config(ctx, kind, {t.rows, t.tokens, t.slices}, t.warps, 0, blocks);
}

/// The tensor-core GEMV's default tile: 16 rows a warp, K split until the
/// grid has about 8 warps per SM; 4 warps a block, or S. 16 tokens (two
/// mma tiles) where a call may have more than 8 rows (`maxRows`, 0:
/// unknown), else 8: with 8 a step of 9-16 tokens read each weight twice
/// (the LM head at T = 16: 0.545 ms against 0.281 with 16; a block of at
/// most 8 tokens multiplies one mma tile either way, LinearGEMVMMA.cpp).
LinearGEMVTile defaultGEMVMMATile(Operation *op, int64_t maxRows) {
  int64_t n = 0;
  for (Value w : gemvWeights(op))
    n += dimOf(w, 0);
  LinearGEMVTile t{kGEMVMMARows, maxRows > 8 ? 16 : 8, 4, 1};
  t.slices = mmaSlicesFor(n / kGEMVMMARows, gemvMMASteps(op));
  t.warps = std::max<int64_t>(4, t.slices);
  return t;
}

/// The GEMV's default tile. bf16 operands multiply on the tensor cores
/// (defaultGEMVMMATile). Otherwise two rows per warp (they share x's
/// loads) where every weight has an even row count, four tokens, four
/// warps, K whole (S = 1). Splitting K for more warps at one token was
/// measured slower on the whole decode step of the CUDA-core form (R = 1
/// and S = 2 or 4 where a one-token grid had fewer than 4096 warps: 3.71 /
/// 9.54 / 41.7 ms at B = 1 / 8 / 64 against 3.68 / 9.42 / 40.0,
/// bench/results/e2e-checks/decode-gemv-split-ab-nvidia-h200-20261203T0050Z.txt);
/// it stays a tuning option (tile [R, TT, S]).
LinearGEMVTile defaultGEMVTile(Operation *op, int64_t maxRows) {
  if (gemvMMAOperands(op))
    return defaultGEMVMMATile(op, maxRows);
  LinearGEMVTile t;
  for (Value w : gemvWeights(op))
    if (dimOf(w, 0) % t.rows != 0)
      t.rows = 1;
  return t;
}

bool linearGEMVApplies(Operation *op) {
  Value x = op->getOperand(0);
  return llvm::all_of(gemvWeights(op),
                      [&](Value w) { return gemvOperands(x, w); });
}

/// The warps and the split of a tensor-core GEMV tile (the linear's and
/// the grouped MoE's): S divides the warps and K's `steps` of 32 columns.
LogicalResult verifyMMASplit(Operation *op, StringRef kind,
                             const LinearGEMVTile &t, int64_t steps) {
  if (t.warps < 1 || t.warps > 32)
    return op->emitOpError()
           << kind << " warps must be in [1, 32], got " << t.warps;
  if (t.slices < 1 || t.warps % t.slices != 0 ||
      (t.slices > 1 && (steps < t.slices || steps % t.slices != 0)))
    return op->emitOpError()
           << kind << " tile S = " << t.slices
           << " must divide warps = " << t.warps << " and the " << steps
           << " whole steps of K (32 columns)";
  return success();
}

/// Tile [16, TT, S]: bf16 on the tensor cores (LinearGEMVMMA.cpp).
LogicalResult verifyLinearGEMVMMA(Operation *op, const LinearGEMVTile &t) {
  if (!gemvMMAOperands(op))
    return op->emitOpError()
           << "linear_gemv tile R = 16 multiplies on the tensor cores: it "
              "needs bf16 inputs and weights, each N a multiple of 16";
  if (t.tokens < 1 || t.tokens > 16)
    return op->emitOpError()
           << "linear_gemv tile TT must be in [1, 16], got " << t.tokens;
  return verifyMMASplit(op, "linear_gemv", t, gemvMMASteps(op));
}

LogicalResult verifyLinearGEMV(Operation *op, KernelConfigAttr c) {
  if (!linearGEMVApplies(op))
    return op->emitOpError() << "linear_gemv needs f32, bf16 or f16 operands "
                                "and K a multiple of a 16-byte vector";
  LinearGEMVTile t = linearGEMVTile(c);
  if (c.getTile().size() != 2 && c.getTile().size() != 3)
    return op->emitOpError() << "linear_gemv needs tile = [R, TT] or [R, TT, "
                                "S], got "
                             << c.getTile().size() << " sizes";
  if (t.rows == kGEMVMMARows)
    return verifyLinearGEMVMMA(op, t);
  if (t.rows < 1 || t.rows > 8 || t.tokens < 1 || t.tokens > 16)
    return op->emitOpError() << "linear_gemv tile R must be in [1, 8] and TT "
                                "in [1, 16], got ["
                             << t.rows << ", " << t.tokens << "]";
  // A warp's R rows lie in one weight.
  for (Value w : gemvWeights(op))
    if (dimOf(w, 0) % t.rows != 0)
      return op->emitOpError() << "linear_gemv tile R = " << t.rows
                               << " must divide N = " << dimOf(w, 0);
  if (t.warps < 1 || t.warps > 32)
    return op->emitOpError()
           << "linear_gemv warps must be in [1, 32], got " << t.warps;
  // S warps split K in whole steps of 32 lanes x 16 bytes.
  int64_t steps = gemvSteps(op);
  if (t.slices < 1 || t.warps % t.slices != 0 ||
      (t.slices > 1 && (steps < t.slices || steps % t.slices != 0)))
    return op->emitOpError()
           << "linear_gemv tile S = " << t.slices
           << " must divide warps = " << t.warps << " and the " << steps
           << " whole steps of K (32 lanes x 16 bytes)";
  return success();
}

//===----------------------------------------------------------------------===//
// The MoE GEMMs of a few tokens (lowering/cuda/MoEGroupedGEMV.cpp)
//===----------------------------------------------------------------------===//

bool hasMXFP4Weights(Operation *op);

/// The dispatch tile rows of a routed op's tables (0 without a dispatch).
int64_t dispatchTileRows(Value tileOffsets) {
  auto d = tileOffsets.getDefiningOp<MoEDispatchOp>();
  return d ? d.getTileRows() : 0;
}

/// The dispatch tile rows of a grouped MoE op (GEMM or GEMV; 0 for the
/// dense form and other ops).
int64_t groupedTileRows(Operation *op) {
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return dispatchTileRows(o.getTileOffsets());
  if (auto o = dyn_cast<MoEGroupedDownOp>(op))
    return dispatchTileRows(o.getTileOffsets());
  return 0;
}

/// A grouped GEMM's tile rows are its tables' (k3.moe_dispatch's
/// tile_rows): 128, or 384 for the tall tile alone.
LogicalResult verifyGroupedTileRows(Operation *op, StringRef kind,
                                    int64_t tileRows, bool tall) {
  int64_t rows = groupedTileRows(op);
  if (rows == kTallGroupedTileRows && hasMXFP4Weights(op))
    return op->emitOpError() << kind
                             << " with MXFP4 weights takes tiles of 128 rows: "
                                "k3.moe_dispatch cuts the segments in tiles "
                                "of 384 (k3-moe-grouped tile-rows)";
  if (tall && isa<GLUGateUpOp>(op))
    return op->emitOpError() << kind
                             << " runs the tall tile on the grouped MoE "
                                "GEMMs only";
  if (rows && rows != tileRows)
    return op->emitOpError()
           << kind << " has tiles of " << tileRows
           << " rows but k3.moe_dispatch cuts the segments in tiles of " << rows
           << " (k3-moe-grouped tile-rows)";
  return success();
}

/// A bf16 grouped MoE GEMM left to a GPU loop nest only because its
/// tables' tile rows fit no tensor-core kernel (the wgmma tiles take 128 or
/// 384 rows, the GEMV at most 8) is an error, not a slow fallback: the rows
/// come from k3-moe-grouped's tile-rows (k3-compile moe-tile-rows).
LogicalResult verifyGroupedTablesHaveKernel(Operation *op) {
  int64_t rows = groupedTileRows(op);
  if (rows == 0 || rows <= 8 || rows == 128 || rows == kTallGroupedTileRows ||
      !elementOf(op->getOperand(0)).isBF16())
    return success();
  return op->emitOpError()
         << "k3.moe_dispatch cuts the segments in tiles of " << rows
         << " rows, which no GPU kernel takes: k3-moe-grouped tile-rows "
            "(k3-compile moe-tile-rows) must be 128 or 384 on a GPU target";
}

/// Whether the grouped MoE op runs the shared expert in its launch
/// (k3-fuse-shared-expert).
bool hasSharedExpert(Operation *op) {
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return o.hasSharedExpert();
  if (auto o = dyn_cast<MoEGroupedDownOp>(op))
    return o.hasSharedExpert();
  return false;
}

/// Whether MoEGroupedGEMV.cpp's kernel covers `op`: GEMV elements, the
/// reduction in whole 16-byte vectors of the weights, gate and up of one
/// type, and for the MoE ops k3.moe_dispatch's tiles of at most 16 rows. A
/// shared expert in the launch runs beside float routed experts only
/// (the MXFP4 form multiplies on the tensor cores, 16 rows a warp).
bool groupedGEMVApplies(Operation *op) {
  if (hasSharedExpert(op) && hasMXFP4Weights(op))
    return false;
  auto gemv = [](Value x, Value w, int64_t k) {
    Type we = elementOf(w);
    bool mxfp4 = isa<Float4E2M1FNType>(we); // only routed expert stacks
    return isGEMVElement(elementOf(x)) && (isGEMVElement(we) || mxfp4) &&
           k > 0 && k % linearGEMVVectorElements(we) == 0;
  };
  auto smallTiles = [](Value tileOffsets) {
    int64_t rows = dispatchTileRows(tileOffsets);
    return rows >= 1 && rows <= 16;
  };
  if (auto o = dyn_cast<GLUGateUpOp>(op))
    return gemv(o.getInput(), o.getWGate(), dimOf(o.getWGate(), 1)) &&
           elementOf(o.getWUp()) == elementOf(o.getWGate());
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return gemv(o.getInput(), o.getW1(), dimOf(o.getW1(), 2)) &&
           elementOf(o.getW3()) == elementOf(o.getW1()) &&
           smallTiles(o.getTileOffsets());
  if (auto o = dyn_cast<MoEGroupedDownOp>(op))
    return gemv(o.getInput(), o.getW2(), dimOf(o.getW2(), 2)) &&
           smallTiles(o.getTileOffsets());
  return false;
}

/// The output rows N of the GEMV form of `op`.
int64_t groupedGEMVOutputs(Operation *op) {
  if (auto o = dyn_cast<GLUGateUpOp>(op))
    return dimOf(o.getWGate(), 0);
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return dimOf(o.getW1(), 1);
  return dimOf(cast<MoEGroupedDownOp>(op).getW2(), 1);
}

/// Whether the grouped MoE op's weights are MXFP4 (docs/mxfp4.md).
bool hasMXFP4Weights(Operation *op) {
  Value w = isa<MoEGroupedGLUOp>(op)    ? cast<MoEGroupedGLUOp>(op).getW1()
            : isa<MoEGroupedDownOp>(op) ? cast<MoEGroupedDownOp>(op).getW2()
                                        : Value();
  return w && isa<Float4E2M1FNType>(elementOf(w));
}

/// The reduction width K of the GEMV form of `op`.
int64_t groupedGEMVReduction(Operation *op) {
  if (auto o = dyn_cast<GLUGateUpOp>(op))
    return dimOf(o.getWGate(), 1);
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return dimOf(o.getW1(), 2);
  return dimOf(cast<MoEGroupedDownOp>(op).getW2(), 2);
}

/// Whether the grouped GEMV's rows and weights (the shared expert's too)
/// are bf16: the tensor-core form (tile R = 16).
bool groupedMMAOperands(Operation *op) {
  auto bf16 = [](Value v) { return !v || elementOf(v).isBF16(); };
  if (auto o = dyn_cast<GLUGateUpOp>(op))
    return bf16(o.getInput()) && bf16(o.getWGate()) && bf16(o.getWUp());
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op))
    return bf16(o.getInput()) && bf16(o.getW1()) && bf16(o.getW3()) &&
           bf16(o.getSharedW1()) && bf16(o.getSharedW3());
  auto o = cast<MoEGroupedDownOp>(op);
  return bf16(o.getInput()) && bf16(o.getW2()) && bf16(o.getSharedW2());
}

/// Tile [16, TT(, S)] with float weights: bf16 on the tensor cores, one
/// mma tile of at most 8 rows (MoEGroupedGEMV.cpp).
LogicalResult verifyGroupedGEMVMMA(Operation *op, StringRef kind,
                                   const LinearGEMVTile &t) {
  if (!groupedMMAOperands(op))
    return op->emitOpError()
           << kind << " tile R = 16 multiplies on the tensor cores: it needs "
           << "bf16 rows and weights";
  if (t.tokens < 1 || t.tokens > 8)
    return op->emitOpError()
           << kind << " on the tensor cores needs TT in [1, 8], got "
           << t.tokens;
  return verifyMMASplit(op, kind, t, groupedGEMVReduction(op) / 32);
}

/// The tensor-core grouped GEMV's tile: 16 rows a warp, the dispatch's TT
/// (the dense form: 8), 4 warps, and K split until a one-token step's
/// grid (its K routed experts and the shared one) has about 8 warps per SM
/// (mmaSlicesFor).
KernelConfigAttr defaultGroupedMMAConfig(Operation *op, KernelKind kind,
                                         int64_t tt) {
  // The routed ops' indices are [T, K]; the dense form is one expert.
  int64_t experts = isa<GLUGateUpOp>(op) ? 1 : dimOf(op->getOperand(1), 1);
  if (hasSharedExpert(op))
    ++experts;
  LinearGEMVTile t{kGEMVMMARows, tt, 4, 1};
  t.slices = mmaSlicesFor(experts * groupedGEMVOutputs(op) / kGEMVMMARows,
                          groupedGEMVReduction(op) / 32);
  t.warps = std::max<int64_t>(4, t.slices);
  return gemvTileConfig(op->getContext(), kind, t, mmaGEMVBlocksPerSM(t.warps));
}

LogicalResult verifyGroupedGEMV(Operation *op, KernelConfigAttr c) {
  StringRef kind = stringifyKernelKind(c.getKernel());
  if (!groupedGEMVApplies(op))
    return op->emitOpError()
           << kind
           << " needs f32, bf16 or f16 operands (MoE weights also MXFP4), the "
              "reduction a multiple of "
              "a 16-byte vector, and for the MoE ops k3.moe_dispatch's tiles "
              "of 1 to 16 rows";
  LinearGEMVTile t = linearGEMVTile(c);
  const bool mxfp4 = hasMXFP4Weights(op);
  // [16, TT, S]: bf16 on the tensor cores, K split over S warps.
  bool split = c.getTile().size() == 3 && t.rows == kGEMVMMARows && !mxfp4;
  if (c.getTile().size() != 2 && !split)
    return op->emitOpError()
           << kind << " needs tile = [R, TT] (or [16, TT, S] with bf16 "
           << "operands), got " << c.getTile().size() << " sizes";
  if (!mxfp4 && t.rows == kGEMVMMARows &&
      failed(verifyGroupedGEMVMMA(op, kind, t)))
    return failure();
  // MXFP4 weights multiply on the tensor cores: a warp's 16 rows by at
  // most 8 tokens, one mma.sync m16n8k16 tile (MXFP4WarpMMA.h).
  if (mxfp4) {
    if (t.rows != 16 || t.tokens < 1 || t.tokens > 8)
      return op->emitOpError()
             << kind
             << " with MXFP4 weights has the tile R = 16 and TT in [1, 8], "
                "got ["
             << t.rows << ", " << t.tokens << "]";
  } else if (t.rows != kGEMVMMARows &&
             (t.rows < 1 || t.rows > 8 || t.tokens < 1 || t.tokens > 16)) {
    return op->emitOpError() << kind
                             << " tile R must be in [1, 8] and TT in [1, 16], "
                                "got ["
                             << t.rows << ", " << t.tokens << "]";
  }
  if (int64_t rows = groupedTileRows(op); rows && rows != t.tokens)
    return op->emitOpError()
           << kind << " tile TT = " << t.tokens
           << " must be k3.moe_dispatch's tile_rows = " << rows;
  if (int64_t n = groupedGEMVOutputs(op); n % t.rows != 0)
    return op->emitOpError()
           << kind << " tile R = " << t.rows << " must divide N = " << n;
  if (t.warps < 1 || t.warps > 32)
    return op->emitOpError()
           << kind << " warps must be in [1, 32], got " << t.warps;
  return success();
}

/// Four output rows per warp (gate/up: 4 channels of each, 8 weight rows),
/// the most that divides N; the dispatch's tile rows, or four tokens per
/// weight read for the dense form; 4 warps. On Kimi-Linear-48B's decode,
/// R = 4 for both GEMMs against [1, 4] / [2, 4]: B = 1 4.93 ms a step
/// against 5.07, B = 8 10.70 against 11.58, B = 64 42.2 against 48.6 (more
/// loads in flight per lane, a quarter of the blocks); R = 8, 8 warps or 2
/// warps did not pay (bench/results/e2e-checks/
/// decode-ab-nvidia-h200-20261202.txt).
/// The dense GLU of a decode step (the shared expert: 1024 rows, the dense
/// layer's 9216) takes R = 2: at R = 4 the shared expert's grid was 64
/// blocks, fewer than the SMs; R = 2 gave 3.63 / 9.28 / 39.7 ms a step at
/// B = 1 / 8 / 64 against 3.69 / 9.35 / 39.7, R = 1 3.59 / 9.39 / 40.2
/// (e2e-checks/decode-moe-tile-ab-nvidia-h200-20261203T0105Z.txt; the
/// routed experts stay at R = 4: R = 1, 2 or 8 were slower there).
/// MXFP4 experts multiply on the tensor cores, 16 rows of each weight
/// per warp (MXFP4WarpMMA.h). The earlier CUDA-core form (a lane's
/// 32-element block decoded to f16 and multiplied per token) was bound by
/// the decoding and by too few warps to hide its loads: 0.202 / 1.43 /
/// 9.61 ms at K3's T = 1 / 8 / 64 with R = 2 and 4 blocks per SM
/// (bench/results/moe-mxfp4-nvidia-h200-20261203T073931Z.json).

/// bf16 experts multiply on the tensor cores the same way
/// (defaultGroupedMMAConfig).
KernelConfigAttr defaultGroupedGEMVConfig(Operation *op, KernelKind kind) {
  int64_t tt = groupedTileRows(op);
  if (hasMXFP4Weights(op))
    return config(op->getContext(), kind, {16, tt ? tt : 4}, 4);
  if (groupedMMAOperands(op) && tt <= 8 &&
      groupedGEMVOutputs(op) % kGEMVMMARows == 0)
    return defaultGroupedMMAConfig(op, kind, tt ? tt : 8);
  int64_t rows = isa<GLUGateUpOp>(op) ? 2 : 4;
  while (groupedGEMVOutputs(op) % rows != 0)
    rows /= 2;
  return config(op->getContext(), kind, {rows, tt ? tt : 4}, 4);
}

//===----------------------------------------------------------------------===//
// k3.argmax, a block per row (lowering/cuda/ArgmaxRows.cpp)
//===----------------------------------------------------------------------===//

bool argmaxRowsApplies(ArgmaxOp op) {
  auto t = cast<RankedTensorType>(op.getLogits().getType());
  return t.getRank() == 2 && !t.isDynamicDim(1) && t.getDimSize(1) > 0;
}

LogicalResult verifyArgmaxRows(ArgmaxOp op, KernelConfigAttr c) {
  if (!argmaxRowsApplies(op))
    return op.emitOpError() << "argmax_rows needs logits [rows, vocab] with "
                               "a static vocabulary";
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "argmax_rows warps must be in [1, 32], got " << c.getWarps();
  return success();
}

//===----------------------------------------------------------------------===//
// k3.latent_attention, a block per (token, head)
// (lowering/cuda/LatentAttentionRows.cpp)
//===----------------------------------------------------------------------===//

/// Shared memory (f32 words) of the kernel: the query, its absorbed form,
/// each warp's softmax state and partial latent sum, the merged context.
/// Shared words of LatentAttentionRows.cpp with `warps` warps and `group`
/// heads per block: per head its query, absorbed query and context; the
/// warps' softmax states.
int64_t latentRowsSharedWords(LatentAttentionOp op, int64_t warps,
                              int64_t group) {
  int64_t rank = op.getKvLoraRank();
  return group * (op.getQkNopeHeadDim() + op.getQkRopeHeadDim() + 2 * rank) +
         2 * warps + warps * rank;
}

/// Heads per block: each key is read once per block for all of them. A
/// decode step keeps one (more blocks for its few tokens).
int64_t latentRowsGroup(LatentAttentionOp op, bool decode) {
  int64_t heads = op.getNumHeads();
  if (decode)
    return 1;
  for (int64_t g : {4, 2})
    if (heads % g == 0)
      return g;
  return 1;
}

LogicalResult verifyLatentAttentionRows(LatentAttentionOp op,
                                        KernelConfigAttr c) {
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "latent_attention_rows warps must be in [1, 32], got "
           << c.getWarps();
  ArrayRef<int64_t> tile = c.getTile();
  if (tile.size() > 1 || (tile.size() == 1 && (tile[0] < 1 || tile[0] > 8 ||
                                               op.getNumHeads() % tile[0])))
    return op.emitOpError() << "latent_attention_rows tile is [heads per "
                               "block], 1 to 8 dividing num_heads = "
                            << op.getNumHeads();
  int64_t group = tile.empty() ? 1 : tile[0];
  // Static shared memory: the 48 KiB that needs no opt-in.
  if (int64_t bytes = 4 * latentRowsSharedWords(op, c.getWarps(), group);
      bytes > 48 * 1024)
    return op.emitOpError()
           << "latent_attention_rows needs " << bytes
           << " bytes of shared memory with " << c.getWarps() << " warps and "
           << group << " heads per block (at most 48 KiB)";
  return success();
}

//===----------------------------------------------------------------------===//
// k3.latent_attention in a decode step, split-KV on the tensor cores
// (lowering/cuda/LatentAttentionSplit.cpp, LatentSplitPlan.h)
//===----------------------------------------------------------------------===//

/// Work items (token, key split) the split count aims at: one wave of an
/// H200's 132 SMs at one block each (the attend phase's shared memory),
/// over the head groups. Ceil(264 / T) splits left a partial third wave
/// at T = 64 (Nsight Compute: bench/results/ncu/
/// ncu-mla-decode-split-B64-C32768-20261204T1547Z.txt).
constexpr int64_t kLatentSplitBlocks = 132;

/// The dimensions the kernel's tiles need: heads in 16-row tiles, whole
/// 16-channel steps in each quarter of the latent width, the context in
/// 512-channel chunks (the combine's 128 threads, 4 channels each; W_v rows
/// in 256-channel lane strides), outputs in rounds of 16; a cache (a decode
/// step). Other ranks take the block per head.
bool latentSplitApplies(LatentAttentionOp op) {
  int64_t r = op.getKvLoraRank(), dr = op.getQkRopeHeadDim();
  return op.getLatentCache() && op.getNumHeads() % 16 == 0 && r % 512 == 0 &&
         (r + dr) % 64 == 0 && op.getVHeadDim() % 16 == 0 &&
         op.getQkNopeHeadDim() % 4 == 0;
}

LogicalResult verifyLatentAttentionSplit(LatentAttentionOp op,
                                         KernelConfigAttr c) {
  if (!latentSplitApplies(op))
    return op.emitOpError()
           << "latent_attention_split needs a latent cache, num_heads a "
              "multiple of 16, kv_lora_rank a multiple of 512, kv_lora_rank "
              "+ qk_rope_head_dim a multiple of 64, v_head_dim a multiple "
              "of 16 and qk_nope_head_dim a multiple of 4";
  ArrayRef<int64_t> tile = c.getTile();
  if (tile.size() < 2 || tile.size() > 3 || tile[0] < 16 || tile[0] % 16 ||
      op.getNumHeads() % tile[0] || tile[1] < 1 ||
      (tile.size() == 3 && tile[2] != 32 && tile[2] != 64))
    return op.emitOpError()
           << "latent_attention_split tile is [heads per block, a multiple "
              "of 16 dividing num_heads = "
           << op.getNumHeads()
           << "; work items aimed at, >= 1; keys a tile, 32 or 64 (32 if "
              "absent)]";
  if (c.getWarps() != 4 * tile[0] / 16)
    return op.emitOpError() << "latent_attention_split warps must be 4 per "
                               "16 heads of a block: "
                            << 4 * tile[0] / 16 << ", got " << c.getWarps();
  if (latentCacheType(op).isBF16() && c.getStages() < 2)
    return op.emitOpError() << "latent_attention_split stages (bf16 tiles "
                               "in the ring of a bf16 cache) must be >= 2, "
                               "got "
                            << c.getStages();
  LatentSplitDims d = LatentSplitDims::of(op, c);
  if (!latentSplitTilesDivide(d, latentCacheType(op)))
    return op.emitOpError()
           << "latent_attention_split: a tile's 16-byte vectors of the cache ("
           << d.keys << " keys of " << d.width()
           << " channels) do not divide over the block's " << 32 * c.getWarps()
           << " threads";
  if (int64_t bytes = latentSplitAttendSharedBytes(d, latentCacheType(op));
      bytes > kSm90SmemPerBlock)
    return op.emitOpError() << "latent_attention_split needs " << bytes
                            << " bytes of shared memory with " << tile[0]
                            << " heads per block (at most 227 KiB)";
  return success();
}

//===----------------------------------------------------------------------===//
// k3.rms_norm and k3.add_rms_norm, a block per row
// (lowering/cuda/RMSNormRows.cpp)
//===----------------------------------------------------------------------===//

/// Columns per row (static) of a norm the row kernel covers, else 0.
int64_t rmsNormRowsColumns(Operation *op) {
  if (!isa<RMSNormOp, PartialRMSNormOp, AddRMSNormOp, GatedRMSNormOp>(op))
    return 0;
  auto t = cast<RankedTensorType>(op->getOperand(0).getType());
  if (t.getRank() < 1 || t.isDynamicDim(t.getRank() - 1))
    return 0;
  int64_t n = t.getDimSize(t.getRank() - 1);
  return n > 0 && n <= 64 * 1024 ? n : 0;
}

/// A thread keeps ceil(n / threads) values of the row in registers.
constexpr int64_t kRMSNormMaxPerThread = 64;
/// Rows up to this many channels default to a warp per row.
constexpr int64_t kRMSNormWarpRowColumns = 1024;

LogicalResult verifyRMSNormRows(Operation *op, KernelConfigAttr c) {
  int64_t n = rmsNormRowsColumns(op);
  if (n == 0)
    return op->emitOpError() << "rms_norm_rows needs a static row of at most "
                                "65536 channels";
  int64_t w = c.getWarps();
  if (w < 1 || w > 32)
    return op->emitOpError()
           << "rms_norm_rows warps must be in [1, 32], got " << w;
  // Tile [R]: R rows per block, a warp each.
  ArrayRef<int64_t> tile = c.getTile();
  if (!tile.empty()) {
    if (tile.size() != 1 || tile[0] != w)
      return op->emitOpError() << "rms_norm_rows tile is [R], R rows per "
                                  "block, a warp each (R = warps = "
                               << w << ")";
    if ((n + 31) / 32 > kRMSNormMaxPerThread)
      return op->emitOpError()
             << "rms_norm_rows with a warp per row keeps more than "
             << kRMSNormMaxPerThread << " values per lane of " << n;
    return success();
  }
  if ((n + 32 * w - 1) / (32 * w) > kRMSNormMaxPerThread)
    return op->emitOpError()
           << "rms_norm_rows with " << w << " warps keeps more than "
           << kRMSNormMaxPerThread << " values per thread of " << n;
  return success();
}

LogicalResult verifyLinearWGMMA(Operation *op, KernelConfigAttr c,
                                GPUTargetAttr target) {
  if (!linearWGMMAApplies(op))
    return op->emitOpError() << "linear_tma_wgmma needs a 2-D bf16 input, "
                                "bf16 weights whose sizes are multiples of 8 "
                                "x 64 (one K for all), and f32 or bf16 "
                                "results";
  // [128, 128, 64] with one warpgroup, or the warp-specialised [128, 256,
  // 64] (two consumers share each tile) with a producer and two consumer
  // warpgroups (LinearWGMMA.cpp). (Consumers alternating on [64, 256, 64]
  // tiles, CUTLASS's ping-pong, were slower on every shape measured and
  // were removed: docs/gemm.md.)
  ArrayRef<int64_t> tile = c.getTile();
  bool narrow = tile == ArrayRef<int64_t>{128, 128, 64} && c.getWarps() == 4;
  bool wide = linearWideTile(c) && c.getWarps() == 12;
  if (!narrow && !wide)
    return op->emitOpError()
           << "linear_tma_wgmma has the tile [128, 128, 64] with one "
              "warpgroup (4 warps), or [128, 256 or 192, 64] with three (12 "
              "warps)";
  if (c.getStages() < 2 || c.getStages() > 6)
    return op->emitOpError()
           << "linear_tma_wgmma stages must be in [2, 6], got "
           << c.getStages();
  // The warp-specialised schedule's register split (setmaxnreg) assumes
  // the whole register file: one block per SM.
  if (wide && c.getBlocksPerSm() != 1)
    return op->emitOpError()
           << "linear_tma_wgmma with a 256- or 192-column tile runs one block "
              "per SM "
              "(blocks_per_sm = 1), got "
           << c.getBlocksPerSm();
  bool splitK = narrow && c.getCluster() > 1;
  int64_t bytes =
      linearWGMMASharedBytes(c.getStages(), tile[1], tile[0],
                             linearStoresThroughShared(op, c), splitK);
  if (bytes > target.getSmemPerBlock())
    return op->emitOpError() << "linear_tma_wgmma needs " << bytes
                             << " bytes of shared memory, the target has "
                             << target.getSmemPerBlock();
  // A split tile's partial tile beside its stages: fewer blocks fit an SM
  // than the unsplit tile's.
  if (splitK && c.getBlocksPerSm() * bytes > target.getSmemPerSm())
    return op->emitOpError()
           << "linear_tma_wgmma with K split needs " << bytes
           << " bytes of shared memory a block: " << c.getBlocksPerSm()
           << " blocks per SM do not fit the target's "
           << target.getSmemPerSm();
  return success();
}

bool linearMMAApplies(LinearOp op) {
  int64_t nOut = dimOf(op.getWeight(), 0), nIn = dimOf(op.getWeight(), 1);
  return nOut > 0 && nIn > 0 && nOut % 32 == 0 && nIn % 32 == 0 &&
         elementOf(op.getInput()).isF32();
}

//===----------------------------------------------------------------------===//
// The grouped MoE ops (lowering/cuda/MoEDispatchRows.cpp,
// lowering/cuda/MoEGroupedWGMMA.cpp)
//===----------------------------------------------------------------------===//

/// The short convolution by channels (lowering/cuda/ShortConvRows.cpp):
/// static channels and kernel size.
bool shortConvRowsApplies(ShortConvOp op) {
  auto x = cast<RankedTensorType>(op.getInput().getType());
  return x.getRank() == 2 && !x.isDynamicDim(1) && op.getKernelSize() >= 1 &&
         op.getKernelSize() <= 16;
}

/// The group's kernel has the decode form only (a sequence has at most one
/// token): in a function marked k3.decode, every member's channels static.
bool shortConvGroupRowsApplies(ShortConvGroupOp op) {
  if (!inDecodeEntry(op))
    return false;
  return llvm::all_of(op.getInputs(), [](Value x) {
    return !cast<RankedTensorType>(x.getType()).isDynamicDim(1);
  });
}

LogicalResult verifyShortConvRowsConfig(Operation *op, KernelConfigAttr c) {
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op->emitOpError()
           << "short_conv_rows warps must be in [1, 32], got " << c.getWarps();
  ArrayRef<int64_t> tile = c.getTile();
  if (tile.empty() || tile.size() > 2 || tile[0] < 1 || tile[0] > 1024)
    return op->emitOpError()
           << "short_conv_rows tile is [TT] or [TT, V], TT tokens per "
              "block in [1, 1024]";
  if (tile.size() == 2) {
    int64_t v = tile[1];
    auto conv = dyn_cast<ShortConvOp>(op);
    int64_t channels = conv ? dimOf(conv.getInput(), 1) : 0;
    if (!llvm::is_contained({1, 2, 4, 8}, v) || (conv && channels % v != 0))
      return op->emitOpError()
             << "short_conv_rows V (channels a thread) must be 1, 2, 4 or 8 "
                "and divide the channels, got "
             << v;
  }
  return success();
}

LogicalResult verifyShortConvRows(Operation *op, KernelConfigAttr c) {
  if (auto o = dyn_cast<ShortConvOp>(op); o && !shortConvRowsApplies(o))
    return op->emitOpError() << "short_conv_rows needs [T, C] input with a "
                                "static C and a kernel size in [1, 16]";
  if (auto o = dyn_cast<ShortConvGroupOp>(op);
      o && !shortConvGroupRowsApplies(o))
    return op->emitOpError()
           << "short_conv_rows runs a short_conv_group only in a decode "
              "entry, with static channel counts";
  return verifyShortConvRowsConfig(op, c);
}

/// Shared memory of a router block of G tokens: their rows in x's element
/// type and their logits in f32 (lowering/cuda/MoERouterRows.cpp).
int64_t routerSharedBytes(MoERouterOp op, int64_t group) {
  int64_t hidden = dimOf(op.getInput(), 1), experts = dimOf(op.getWeight(), 0);
  int64_t xBytes = op.getInput().getType().getElementTypeBitWidth() / 8;
  return (group * experts * 4 + 15) / 16 * 16 + group * hidden * xBytes;
}

/// The router block keeps its tokens' rows and logits in shared memory (48
/// KiB) and warp g one score per 32 experts per lane in registers.
bool moeRouterRowsApplies(MoERouterOp op) {
  int64_t hidden = dimOf(op.getInput(), 1), experts = dimOf(op.getWeight(), 0);
  return hidden > 0 && experts > 0 && experts <= 1024 &&
         routerSharedBytes(op, 1) <= 48 * 1024;
}

/// The router on the tensor cores (moe_router_mma): bf16 x and W, a hidden
/// size of whole 16-channel k-steps. Its shared memory for G tokens and
/// chunks of C channels: the logits [G][E] f32 and the x chunk [G][C + 8]
/// bf16.
bool moeRouterMMAApplies(MoERouterOp op) {
  int64_t hidden = dimOf(op.getInput(), 1), experts = dimOf(op.getWeight(), 0);
  return hidden > 0 && hidden % 16 == 0 && experts > 0 && experts <= 1024 &&
         op.getInput().getType().getElementType().isBF16() &&
         op.getWeight().getType().getElementType().isBF16();
}
int64_t routerMMASharedBytes(MoERouterOp op, int64_t group, int64_t chunk) {
  int64_t experts = dimOf(op.getWeight(), 0);
  return (group * experts * 4 + 15) / 16 * 16 + group * (chunk + 8) * 2;
}
/// 32 tokens per block (two row tiles: each B fragment of W serves both)
/// where the logits fit 100 KiB with the chunk (Kimi Linear's 256
/// experts), else 16 (K3's 896: 57 KiB); chunks of 128 channels (8
/// k-steps between barriers) or the largest power of two dividing H.
KernelConfigAttr defaultRouterMMAConfig(MoERouterOp op, int64_t warps) {
  int64_t hidden = dimOf(op.getInput(), 1), chunk = 128;
  while (hidden % chunk != 0)
    chunk /= 2;
  int64_t group = routerMMASharedBytes(op, 32, chunk) <= 100 * 1024 ? 32 : 16;
  return config(op.getContext(), KernelKind::moe_router_mma, {group, chunk},
                warps);
}

/// k3.moe_topk's kernel (MoERouterRows.cpp): a warp per token, each lane
/// holding its experts' scores in registers (at most 32 each).
bool moeTopKRowsApplies(MoETopKOp op) {
  int64_t experts = dimOf(op.getLogits(), 1);
  return experts > 0 && experts <= 1024;
}

LogicalResult verifyMoETopKRows(MoETopKOp op, KernelConfigAttr c) {
  if (!moeTopKRowsApplies(op))
    return op.emitOpError()
           << "moe_topk_rows needs a static expert count of at most 1024";
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "moe_topk_rows warps must be in [1, 32], got " << c.getWarps();
  return success();
}

/// The combine's kernel (MoECombineRows.cpp), for k3.moe_combine and
/// k3.moe_combine_add_rms_norm: a static row width, rows [T, K (+ 1), D],
/// and the widest vector of at most 16 bytes of every float operand's and
/// result's element that divides D (0 where none applies).
int64_t moeCombineVector(Operation *op) {
  if (!isa<MoECombineOp, MoECombineAddRMSNormOp>(op))
    return 0;
  auto rows = cast<RankedTensorType>(op->getOperand(0).getType());
  if (rows.getRank() != 3 || rows.isDynamicDim(1) || rows.isDynamicDim(2))
    return 0;
  int64_t width = rows.getDimSize(2), bits = 0;
  // Every operand but the positions (operand 1), and the results.
  SmallVector<Value> values(op->getOperands());
  values.erase(values.begin() + 1);
  llvm::append_range(values, op->getResults());
  for (Value v : values)
    bits = std::max<int64_t>(bits, elementOf(v).getIntOrFloatBitWidth());
  int64_t v = 128 / bits;
  while (v > 1 && width % v != 0)
    v /= 2;
  return width > 0 ? v : 0;
}

/// The fewest warps whose threads hold one vector of the row each, at most
/// 32.
int64_t moeCombineWarps(int64_t width, int64_t vec) {
  return std::clamp<int64_t>((width / vec + 31) / 32, 1, 32);
}

LogicalResult verifyMoECombineRows(Operation *op, KernelConfigAttr c) {
  int64_t v = moeCombineVector(op);
  if (v == 0)
    return op->emitOpError()
           << "moe_combine_rows needs rows [T, K (+ 1), D] with static K, D";
  int64_t width = dimOf(op->getOperand(0), 2);
  ArrayRef<int64_t> tile = c.getTile();
  if (tile.size() != 1 || tile[0] < 1 || tile[0] > v || v % tile[0] != 0)
    return op->emitOpError() << "moe_combine_rows tile is [V], V channels a "
                                "thread dividing "
                             << v << " (16 bytes of the widest element that "
                             << "divide D = " << width << ")";
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op->emitOpError()
           << "moe_combine_rows warps must be in [1, 32], got " << c.getWarps();
  return success();
}

LogicalResult verifyMoERouterMMA(MoERouterOp op, KernelConfigAttr c) {
  if (!moeRouterMMAApplies(op))
    return op.emitOpError() << "moe_router_mma needs bf16 x and W, a hidden "
                               "size that is a multiple of 16 and at most "
                               "1024 experts";
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "moe_router_mma warps must be in [1, 32], got " << c.getWarps();
  ArrayRef<int64_t> tile = c.getTile();
  int64_t hidden = dimOf(op.getInput(), 1);
  if (tile.size() != 2 || (tile[0] != 16 && tile[0] != 32) || tile[1] < 16 ||
      tile[1] % 16 != 0 || hidden % tile[1] != 0)
    return op.emitOpError()
           << "moe_router_mma tile is [G, C]: G = 16 or 32 tokens per block, "
              "C channels per chunk (a multiple of 16 dividing "
           << hidden << ")";
  if (routerMMASharedBytes(op, tile[0], tile[1]) > kSm90SmemPerBlock)
    return op.emitOpError() << "moe_router_mma needs "
                            << routerMMASharedBytes(op, tile[0], tile[1])
                            << " bytes of shared memory (max 232448)";
  return success();
}

/// Tokens per router block: each 16-byte load of W serves all of them, so
/// as many as the warps (one top-k each) and 48 KiB allow, up to 8
/// (Kimi Linear: 8 at hidden 2304; K3's 7168: 2).
int64_t defaultRouterTokensPerBlock(MoERouterOp op, int64_t warps) {
  for (int64_t g : {8, 4, 2})
    if (g <= warps && routerSharedBytes(op, g) <= 48 * 1024)
      return g;
  return 1;
}

LogicalResult verifyMoERouterRows(MoERouterOp op, KernelConfigAttr c) {
  if (!moeRouterRowsApplies(op))
    return op.emitOpError() << "moe_router_rows needs static sizes, at most "
                               "1024 experts and the row and logits in 48 KiB";
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "moe_router_rows warps must be in [1, 32], got " << c.getWarps();
  ArrayRef<int64_t> tile = c.getTile();
  int64_t g = routerTokensPerBlock(c);
  if (tile.size() > 1 || g < 1 || g > c.getWarps())
    return op.emitOpError()
           << "moe_router_rows tile is [G], G tokens per "
              "block in [1, warps], got ["
           << llvm::make_range(tile.begin(), tile.end()) << "]";
  if (routerSharedBytes(op, g) > 48 * 1024)
    return op.emitOpError()
           << "moe_router_rows: " << g << " tokens per block need "
           << routerSharedBytes(op, g) << " bytes of shared memory (max 49152)";
  return success();
}

/// The dispatch block keeps a histogram of all experts in shared memory.
bool moeDispatchRowsApplies(MoEDispatchOp op) {
  return op.getNumExperts() * 4 <= 48 * 1024;
}

LogicalResult verifyMoEDispatchRows(MoEDispatchOp op, KernelConfigAttr c) {
  if (!moeDispatchRowsApplies(op))
    return op.emitOpError() << "moe_dispatch_rows keeps one count per expert "
                               "in 48 KiB of shared memory: at most 12288 "
                               "experts, got "
                            << op.getNumExperts();
  if (c.getWarps() < 1 || c.getWarps() > 32)
    return op.emitOpError()
           << "moe_dispatch_rows warps must be in [1, 32], got "
           << c.getWarps();
  return success();
}

/// Whether MoEGroupedWGMMA.cpp's kernel covers `op` (the grouped MoE GEMMs,
/// kind moe_grouped_wgmma, and its one-expert form for k3.glu_gate_up, kind
/// glu_wgmma): bf16 rows, bf16 weights (or, for the MoE ops, MXFP4 ones,
/// decoded to bf16 in shared memory), sizes in whole 64-wide k steps and
/// whole column tiles (64 channels of gate and up; 128 output columns), and
/// for the MoE ops routing tables cut in the kernel's 128-row tiles.
bool groupedWGMMAApplies(Operation *op) {
  if (hasSharedExpert(op))
    return false; // the decode entry's form (k3-fuse-shared-expert)
  auto bf16OrMXFP4 = [](Value w) {
    Type t = elementOf(w);
    return t.isBF16() || isa<Float4E2M1FNType>(t);
  };
  if (auto o = dyn_cast<GLUGateUpOp>(op)) {
    int64_t hidden = dimOf(o.getWGate(), 1), inter = dimOf(o.getWGate(), 0);
    return elementOf(o.getInput()).isBF16() &&
           elementOf(o.getWGate()).isBF16() && elementOf(o.getWUp()).isBF16() &&
           elementOf(o.getResult()).isBF16() && hidden > 0 &&
           hidden % 64 == 0 && inter > 0 && inter % 64 == 0;
  }
  // Row tiles of 128, or the tall tile's 384 (k3-moe-grouped tile-rows).
  auto tiledForWGMMA = [](Value tileOffsets) {
    int64_t rows = dispatchTileRows(tileOffsets);
    return rows == 128 || rows == kTallGroupedTileRows;
  };
  if (auto o = dyn_cast<MoEGroupedGLUOp>(op)) {
    int64_t hidden = dimOf(o.getW1(), 2), inter = dimOf(o.getW1(), 1);
    return elementOf(o.getInput()).isBF16() && bf16OrMXFP4(o.getW1()) &&
           elementOf(o.getW3()) == elementOf(o.getW1()) &&
           elementOf(o.getResult()).isBF16() && hidden > 0 &&
           hidden % 64 == 0 && inter > 0 && inter % 64 == 0 &&
           tiledForWGMMA(o.getTileOffsets());
  }
  if (auto o = dyn_cast<MoEGroupedDownOp>(op)) {
    int64_t width = dimOf(o.getW2(), 1), inter = dimOf(o.getW2(), 2);
    return elementOf(o.getInput()).isBF16() && bf16OrMXFP4(o.getW2()) &&
           (elementOf(o.getResult()).isF32() ||
            elementOf(o.getResult()).isBF16()) &&
           width > 0 && width % 128 == 0 && inter > 0 && inter % 64 == 0 &&
           tiledForWGMMA(o.getTileOffsets());
  }
  return false;
}

/// The one-warpgroup tile [128, 128, 64, S] of the grouped MoE GEMMs,
/// whose products take a tile's rows as wgmma's N in steps of S
/// (MoEGroupedKernel.h): 8, 16 or 32 (the N of a bf16 wgmma is a multiple
/// of 8; 64 is the halves' step); bf16 weights by TMA, one block a tile.
static LogicalResult verifyRowsAsN(Operation *op, KernelConfigAttr c,
                                   StringRef kind) {
  int64_t step = c.getTile()[3];
  if (step != 8 && step != 16 && step != 32)
    return op->emitOpError()
           << kind << " tile [128, 128, 64, S] takes the rows as wgmma's N "
           << "in steps of S = 8, 16 or 32, got " << step;
  if (c.getKernel() != KernelKind::moe_grouped_wgmma || hasMXFP4Weights(op) ||
      c.getCluster() > 1)
    return op->emitOpError()
           << kind << " tile [128, 128, 64, " << step
           << "] (rows as wgmma's N) applies to k3.moe_grouped_glu and "
              "k3.moe_grouped_down with bf16 weights and no cluster";
  return success();
}

LogicalResult verifyGroupedWGMMA(Operation *op, KernelConfigAttr c,
                                 GPUTargetAttr target) {
  StringRef kind = stringifyKernelKind(c.getKernel());
  if (!groupedWGMMAApplies(op))
    return op->emitOpError()
           << kind
           << " needs bf16 rows, bf16 or (MoE) MXFP4 weights, the widths in "
              "multiples of 64 "
              "(the MoE down output in multiples of 128, f32 or bf16), and for "
              "the MoE "
              "ops k3.moe_dispatch's tiles of 128 (or 384) rows";
  // [128, 128, 64] with one warpgroup, or the warp-specialised [128, 256,
  // 64] (two consumers share each tile) with a copying producer and two
  // consumer warpgroups (MoEGroupedWGMMA.cpp, MoEGroupedPersistent.cpp,
  // WGMMAPipeline.h).
  ArrayRef<int64_t> tile = c.getTile();
  // [128, 128, 64, S]: the one-warpgroup tile, its rows as wgmma's N.
  bool rowsAsN = tile.size() == 4 &&
                 tile.take_front(3) == ArrayRef<int64_t>{128, 128, 64} &&
                 c.getWarps() == 4;
  if (rowsAsN && failed(verifyRowsAsN(op, c, kind)))
    return failure();
  bool narrow =
      (tile == ArrayRef<int64_t>{128, 128, 64} && c.getWarps() == 4) || rowsAsN;
  bool wide = tile == ArrayRef<int64_t>{128, 256, 64} && c.getWarps() == 12;
  bool tall = tile == ArrayRef<int64_t>{kTallGroupedTileRows, 128, 64} &&
              c.getWarps() == 12;
  if (!narrow && !wide && !tall)
    return op->emitOpError() << kind
                             << " has the tile [128, 128, 64] or [128, "
                                "128, 64, S] with one warpgroup (4 warps), "
                                "or [128, 256, 64] or [384, 128, 64] with "
                                "three (12 warps)";
  if (failed(verifyGroupedTileRows(op, kind, tile[0], tall)))
    return failure();
  if (c.getStages() < 2 || c.getStages() > 6)
    return op->emitOpError()
           << kind << " stages must be in [2, 6], got " << c.getStages();
  bool mxfp4 = hasMXFP4Weights(op);
  if (tall && c.getBlocksPerSm() != 1)
    return op->emitOpError() << kind
                             << " with the tall tile has one block per SM, "
                                "got "
                             << c.getBlocksPerSm();
  // MXFP4 tiles are decoded by the threads that multiply them, one weight
  // row each (MXFP4Tile.h): the one-warpgroup schedule.
  if (mxfp4 && !narrow)
    return op->emitOpError() << kind
                             << " with MXFP4 weights has the tile [128, 128, "
                                "64] with one warpgroup (4 warps)";
  if (wide) {
    // With two stages the producer could not run a step ahead of the
    // products (its copies land while it waits for the release of the
    // stage before): correct, but each refill would wait, so the rule is
    // for speed, as the pairs' is.
    if (c.getStages() < 3 || c.getBlocksPerSm() != 1)
      return op->emitOpError()
             << kind
             << " with a 256-column tile needs at "
                "least 3 stages and one block per SM, got "
             << c.getStages() << " and " << c.getBlocksPerSm();
    // Whole 256-column tiles: 128 channels of gate and up, or 256 outputs.
    int64_t columns = isa<MoEGroupedDownOp>(op)
                          ? dimOf(cast<MoEGroupedDownOp>(op).getW2(), 1)
                      : isa<MoEGroupedGLUOp>(op)
                          ? 2 * dimOf(cast<MoEGroupedGLUOp>(op).getW1(), 1)
                          : 2 * dimOf(cast<GLUGateUpOp>(op).getWGate(), 0);
    if (columns % 256 != 0)
      return op->emitOpError() << kind
                               << " with a 256-column tile needs "
                                  "output columns in multiples of 256, got "
                               << columns;
  }
  if (int64_t bytes =
          groupedWGMMASharedBytes(c.getStages(), tile[1], mxfp4, tile[0],
                                  groupedSharedEpilogueColumns(op, c));
      bytes > target.getSmemPerBlock())
    return op->emitOpError() << kind << " needs " << bytes
                             << " bytes of shared memory, the target has "
                             << target.getSmemPerBlock();
  return success();
}

// k3.mla_prefill_attention on Hopper (lowering/cuda/MLAFlashWGMMA.cpp):
// 64 queries of one head per warpgroup, keys in tiles of 64, every head
// dimension cut into 64-column boxes of one 128-byte swizzled row.
bool mlaFlashApplies(MLAPrefillAttentionOp op) {
  int64_t dn = op.getQkNopeHeadDim(), dr = op.getQkRopeHeadDim(),
          dv = op.getVHeadDim(), width = dimOf(op.getLatent(), 1),
          heads = dimOf(op.getQ(), 1);
  Type out = elementOf(op.getResult());
  return elementOf(op.getQ()).isBF16() && elementOf(op.getKv()).isBF16() &&
         elementOf(op.getLatent()).isBF16() && (out.isBF16() || out.isF32()) &&
         !ShapedType::isDynamic(heads) && !ShapedType::isDynamic(width) &&
         dn % 64 == 0 && dr % 64 == 0 && dv % 64 == 0 && dn + dr <= 256 &&
         dv <= 256 && (width - dr) % 8 == 0;
}

LogicalResult verifyMLAFlash(MLAPrefillAttentionOp op, KernelConfigAttr c,
                             GPUTargetAttr target) {
  if (!mlaFlashApplies(op))
    return op->emitOpError()
           << "mla_flash_wgmma needs bf16 q, kv and latent, a bf16 or f32 "
              "result, static heads and latent width, the head dims in "
              "multiples of 64 (Dn + Dr and Dv at most 256)";
  ArrayRef<int64_t> tile = c.getTile();
  // A warpgroup (4 warps) per 64 queries, and with a producer warpgroup
  // (FlashAttention-3's warp specialisation) one more; 192 queries only
  // with it and key tiles of 64 (three consumers hold 160 registers).
  bool shaped = tile.size() == 2 &&
                (tile[0] == 64 || tile[0] == 128 || tile[0] == 192) &&
                (tile[1] == 64 || tile[1] == 128);
  bool producer = shaped && c.getWarps() == tile[0] / 16 + 4;
  if (!shaped || (c.getWarps() != tile[0] / 16 && !producer) ||
      (tile[0] == 192 && (!producer || tile[1] != 64)))
    return op->emitOpError()
           << "mla_flash_wgmma has the tile [64 or 128 queries, 64 or 128 "
              "keys] with a warpgroup (4 warps) per 64 queries, or one "
              "more warpgroup that produces (also [192, 64])";
  if (producer && c.getBlocksPerSm() < 1)
    return op->emitOpError() << "mla_flash_wgmma with a producer warpgroup "
                                "needs blocks_per_sm (its registers are "
                                "split by setmaxnreg)";
  if (c.getStages() < 1 || c.getStages() > 4)
    return op->emitOpError()
           << "mla_flash_wgmma stages must be in [1, 4], got " << c.getStages();
  if (int64_t bytes = mlaFlashSharedBytes(op, c.getStages(), tile[0], tile[1]);
      bytes > target.getSmemPerBlock())
    return op->emitOpError() << "mla_flash_wgmma needs " << bytes
                             << " bytes of shared memory, the target has "
                             << target.getSmemPerBlock();
  return success();
}

/// Tokens one sequence must be able to hold (max tokens / max sequences)
/// for the producer tile to be the default.
constexpr int64_t kMLAProducerSequenceRows = 8192;

/// The default of mla_flash_wgmma. Where one sequence can be long, a
/// producer warpgroup and two consumer warpgroups on 128 queries with key
/// tiles of 128, two stages (FlashAttention-3's form): at B1 T8192 on an
/// H100, 1.169 ms at Kimi's dims against 1.343 for the form below, and
/// 3.678 against 4.763 with K3's 96 heads (bench/results/
/// mla-prefill-pk-nvidia-h100-80gb-hbm3-20261207T160950Z.json). It loses
/// on short sequences (8 x 1024 packed: 0.375 against 0.309 ms;
/// ...-pk-short-...-20261207T161128Z.json), where one block an SM leaves
/// each block's start and end bare. There, and where the bounds are
/// unknown: one key/value stage (73 KiB with Kimi's dims) and three blocks
/// per SM, one block's softmax and loads beside the others' products (two
/// stages, 113 KiB, left room for one block per SM only: 239 TFLOP/s at
/// Kimi's B1 T8192 against 396, mla-prefill-tuning-nvidia-h200-
/// 20261202T061207Z.json).
KernelConfigAttr defaultMLAFlashConfig(MLAPrefillAttentionOp op,
                                       GPUTargetAttr target, int64_t maxRows,
                                       int64_t maxSeqs) {
  MLIRContext *ctx = op->getContext();
  bool longSequences = maxRows > 0 && maxSeqs > 0 &&
                       maxRows / maxSeqs >= kMLAProducerSequenceRows;
  if (longSequences &&
      mlaFlashSharedBytes(op, 2, 128, 128) <= target.getSmemPerBlock())
    return config(ctx, KernelKind::mla_flash_wgmma, {128, 128}, 12, 2, 1);
  return config(ctx, KernelKind::mla_flash_wgmma, {64, 64}, 4, 1, 3);
}

/// Whether `columnTiles` [128, 256] output tiles per 128 rows, at
/// `maxRows` rows (at least kSharedEpilogueMinRows: the measured range),
/// keep the SMs' last wave at least 80 % busy on the persistent
/// warp-specialised schedule (one block per SM: at 192 tiles on 132 SMs
/// the second wave idles half of them, where the [128, 128] tiles at three
/// blocks an SM balance).
constexpr int64_t kSharedEpilogueMinRows = 1024;

/// Whether every result of `op` is bf16 (what a shared result tile holds).
bool resultsAreBF16(Operation *op) {
  return llvm::all_of(op->getResults(), [](Value r) {
    return cast<ShapedType>(r.getType()).getElementType().isBF16();
  });
}

/// The persistent schedule whose consumers share [128, 256, 64] tiles,
/// with room beside its stages for two 64-row bf16 result tiles of
/// `columns` columns in sm_90's 227 KiB a block (sharedEpilogueMaxStages:
/// 3 stages beside 256 columns, 4 beside the gate/up GEMM's 128). Each
/// block's result tiles are its own, so the grouped gate/up GEMM's pairs,
/// which share only weight tiles, have them too; the linear's pairs write
/// from registers (linearStoresThroughShared).
bool sharedEpilogueSchedule(KernelConfigAttr c, int64_t columns) {
  return c.getTile() == ArrayRef<int64_t>{128, 256, 64} &&
         c.getStages() <= sharedEpilogueMaxStages(columns);
}

/// The share of the SMs' waves that `columnTiles` output tiles per 128
/// rows keep busy at `maxRows` rows, one block per SM.
double persistentWaveShare(int64_t columnTiles, GPUTargetAttr target,
                           int64_t maxRows) {
  int64_t tiles = (maxRows + 127) / 128 * columnTiles,
          sms = target.getSmCount();
  int64_t waves = (tiles + sms - 1) / sms;
  return double(tiles) / double(waves * sms);
}

bool persistentTilesBalance(int64_t columnTiles, GPUTargetAttr target,
                            int64_t maxRows) {
  return maxRows >= kSharedEpilogueMinRows &&
         persistentWaveShare(columnTiles, target, maxRows) >= 0.8;
}

/// Column tiles of `width` output columns of a k3.linear or
/// k3.linear_group (each weight's last tile may be partial).
int64_t linearColumnTiles(Operation *op, int64_t width) {
  int64_t tiles = 0;
  for (Value w : op->getOperands().drop_front())
    tiles += (dimOf(w, 0) + width - 1) / width;
  return tiles;
}

/// Whether a prefill linear takes the persistent warp-specialised schedule
/// with its results through shared memory (linearStoresThroughShared): bf16
/// results, and tiles that balance (persistentTilesBalance). On an H100 at
/// T = 8192 it ran 1.13-1.39x the [128, 128] tiles on the projections of
/// Kimi-Linear-48B and K3 with 384 or more tiles, level with them on the
/// narrow ones (at most 64 tiles: the rule keeps [128, 128]), and 6 %
/// behind on c_kv (N = 576, 192 tiles: the reason for the 80 %)
/// (bench/results/gemm-nvidia-h100-80gb-hbm3-20261206T075113Z.json).
bool linearPrefersSharedEpilogue(Operation *op, GPUTargetAttr target,
                                 int64_t maxRows) {
  return resultsAreBF16(op) &&
         persistentTilesBalance(linearColumnTiles(op, 256), target, maxRows);
}

/// The persistent schedule's output columns a tile: 256, or 192 where
/// [128, 256] tiles leave the last wave idle enough that a 192-column
/// tile's busier waves pay for its 11 % more operand bytes per product
/// ((128 + 192) / (128 x 192) against (128 + 256) / (128 x 256)): N =
/// 2304 (the KDA and MLA o projections, the shared and dense experts'
/// down) at T = 8192 gives 576 tiles of 256, 4.4 waves of 132 (87 %), or
/// 768 of 192, 5.8 waves (97 %).
int64_t linearWideColumns(Operation *op, GPUTargetAttr target,
                          int64_t maxRows) {
  double wide =
             persistentWaveShare(linearColumnTiles(op, 256), target, maxRows),
         narrower =
             persistentWaveShare(linearColumnTiles(op, 192), target, maxRows);
  return narrower >= wide + 0.08 ? 192 : 256;
}

/// Blocks of a cluster that split K for a prefill linear's [128, 128]
/// tiles (LinearWGMMA.cpp; 1: none): where the tiles at `maxRows` rows
/// would leave half the SMs idle, the least of 2, 4 and 8 that gives at
/// least half of them a block, each block 8 or more of K's 64-column
/// steps. On an H100
/// at T = 1024: K3's c_kv (40 tiles) 240 TFLOP/s against 121 (cuBLAS 307),
/// its router (56) 294 against 178, Kimi-Linear's c_kv 161 against 117
/// (cuBLAS 126), its router (16 tiles, 4 blocks) 105 against 53; 144
/// tiles (Kimi's o projection) lost 27 % split in two; between them 96
/// and 128 tiles gained 8-10 % (bench/results/
/// gemm-nvidia-h100-80gb-hbm3-20261206T123241Z.json, ...123245Z.json).
int64_t linearSplitK(Operation *op, GPUTargetAttr target, int64_t maxRows) {
  int64_t tiles = (maxRows + 127) / 128 * linearColumnTiles(op, 128),
          sms = target.getSmCount(), steps = dimOf(op->getOperand(1), 1) / 64;
  // Without a row bound (max-tokens 0) the tiles are unknown.
  if (maxRows <= 0 || 2 * tiles > sms)
    return 1;
  int64_t chosen = 1;
  for (int64_t split : {2, 4, 8}) {
    if (steps % split != 0 || steps / split < 8)
      break;
    chosen = split;
    if (2 * tiles * split >= sms)
      break;
  }
  return chosen;
}

/// The same for the dense GLU's gate/up GEMM (its h is bf16; a tile is 128
/// channels of gate and up): at T = 8192 on an H100 Kimi-Linear-48B's
/// dense MLP ran at 741 TFLOP/s against 608 (cuBLAS's three GEMMs 662),
/// its shared expert at 676 against 543 (cuBLAS 600); at T = 1024 the
/// dense MLP lost (494 against 536) (bench/results/
/// moe-nvidia-h100-80gb-hbm3-20261206T081647Z.json). (The grouped
/// gate/up GEMM has its own rule, groupedGateUpPrefersPersistent.)
bool gluPrefersSharedEpilogue(GLUGateUpOp op, GPUTargetAttr target,
                              int64_t maxRows) {
  int64_t inter = dimOf(op.getWGate(), 0);
  return inter % 128 == 0 &&
         persistentTilesBalance(inter / 128, target, maxRows);
}

/// Least average rows of an expert's segment at max-tokens for which a
/// prefill's grouped gate/up GEMM takes the persistent schedule.
constexpr int64_t kPersistentGateUpSegmentRows = 256;

/// Whether a prefill's grouped gate/up GEMM (bf16 experts) takes the
/// persistent warp-specialised schedule: [128, 256, 64] tiles, 4 stages
/// (its 128 result columns a tile go through shared memory beside them),
/// tiles claimed from a counter. Its producer gathers the rows by cp.async
/// and runs ahead of the products (k3gpu.mbarrier_arrive_copies): on an
/// H100, Kimi-Linear-48B's gate/up at T = 8192 took 1.186 ms against the
/// one-warpgroup tiles' 1.316 (the MoE layer 2.034 against 2.168), level
/// at T = 1024 (0.808 against 0.811); strided tiles varied from 1.17 to
/// 1.65 ms (bench/results/moe-nvidia-h100-80gb-hbm3-20261206T142859Z.json).
/// Where the segments average fewer rows than the 256 of Kimi-Linear at
/// T = 8192 (K3: 16 x 8192 / 896 = 146), the persistent schedule was
/// measured 30 % slower (moe-nvidia-h200-20261204T211152Z.json, before
/// the producer ran ahead), so those keep the one-warpgroup tiles.
bool groupedGateUpPrefersPersistent(MoEGroupedGLUOp op, int64_t maxRows) {
  int64_t experts = dimOf(op.getW1(), 0), topK = dimOf(op.getIndices(), 1),
          inter = dimOf(op.getW1(), 1);
  return maxRows > 0 && inter % 128 == 0 &&
         maxRows * topK >= kPersistentGateUpSegmentRows * experts;
}

/// The default parameters of kernel `kind` for `op` (which it applies to).
KernelConfigAttr configOfKind(Operation *op, KernelKind kind,
                              GPUTargetAttr target, bool decode,
                              int64_t maxRows, int64_t maxSeqs) {
  MLIRContext *ctx = op->getContext();
  switch (kind) {
  case KernelKind::loop_nest:
    return config(ctx, kind, {}, kLoopNestWarps);
  case KernelKind::kda_recurrent: {
    auto o = cast<KDAOp>(op);
    KDARecurrentTile t =
        chooseKDARecurrentTile(dimOf(o.getQ(), 3), dimOf(o.getV(), 3), decode);
    return config(ctx, kind, {t.bv, t.p, t.s, t.c}, t.threads() / 32);
  }
  case KernelKind::kda_mma_operands:
    // Latency-bound per block (barriers, a 16-step solve): throughput comes
    // from blocks per SM, so the registers are capped for 5 (85 registers,
    // no spills, 38.5 KB of shared memory at K = 128). The unbounded gate's
    // products by levels take 128 registers: 4 blocks (at 5 ptxas spills
    // 32 bytes, and the 4-layer Kimi-Linear prefill measured 0.5 % slower:
    // bench/results/e2e-checks/
    // kda-softplus-levels-prefill-ab-cut4-nvidia-h100-20261205T1615Z.txt).
    if (cast<KDAMMAOperandsOp>(op).getGateKind() == DecayGateKind::neg_softplus)
      return config(ctx, kind, {16}, 4, 0, 4);
    return config(ctx, kind, {16}, 4, 0, 5);
  case KernelKind::kda_mma_chain: {
    auto o = cast<KDAMMARecurrenceOp>(op);
    int64_t w = chooseKDAMMAChainWarps(dimOf(o.getV(), 3));
    // Three stages: chunks c+1, c+2 load while chunk c multiplies. One
    // block per SM (the state lives in registers): ptxas may spend up to
    // 255 registers per thread, which it uses to hoist the ldmatrix loads.
    // Tile [16, 16]: a call with few sequences may split a block's value
    // columns down to one warp's 16 (decided at run time).
    return config(ctx, kind, {16, 16}, w, 3, 1);
  }
  case KernelKind::linear_mma_3xtf32:
    // 64 x 32 output tiles, K steps of 32, 4 warps (LinearMMA.cpp).
    return config(ctx, kind, {64, 32, 32}, 4);
  case KernelKind::linear_gemv: {
    // defaultGEMVTile: the tensor-core form for bf16 (with its launch
    // bounds), else two rows per warp and four tokens on the CUDA cores.
    LinearGEMVTile t = defaultGEMVTile(op, maxRows);
    int64_t blocks = t.rows == kGEMVMMARows ? mmaGEMVBlocksPerSM(t.warps) : 0;
    return gemvTileConfig(ctx, kind, t, blocks);
  }
  case KernelKind::argmax_rows:
    // 1024 threads per row: 160 columns each at a vocabulary of 163840.
    return config(ctx, kind, {}, 32);
  case KernelKind::rms_norm_rows: {
    // Rows of at most 1024 channels: a warp each, 8 rows per block (KDA's
    // gated norm at T = 8192: 0.32 ms with a block per 128-channel row).
    // Wider rows a block each: 8 warps (hidden 2304: 9 values per thread),
    // more for wide rows, fewer for short ones.
    int64_t n = rmsNormRowsColumns(op), w = 8;
    if (n <= kRMSNormWarpRowColumns)
      return config(ctx, kind, {8}, 8);
    while (w < 32 && (n + 32 * w - 1) / (32 * w) > 32)
      w *= 2;
    while (w > 1 && 16 * w >= n)
      w /= 2;
    return config(ctx, kind, {}, w);
  }
  case KernelKind::latent_attention_rows: {
    // 8 warps share the keys, 4 heads per block in prefill; fewer where
    // shared memory would pass 48 KiB (R = 512: 36 KiB with 8 warps and 4
    // heads).
    auto o = cast<LatentAttentionOp>(op);
    int64_t w = 8, g = latentRowsGroup(o, decode);
    while (g > 1 && 4 * latentRowsSharedWords(o, 1, g) > 48 * 1024)
      g /= 2;
    while (w > 1 && 4 * latentRowsSharedWords(o, w, g) > 48 * 1024)
      w /= 2;
    return config(ctx, kind, {g}, w);
  }
  case KernelKind::latent_attention_split: {
    // 32 heads a block (8 warps) where they divide: each staged key serves
    // them all; 16 otherwise.
    auto o = cast<LatentAttentionOp>(op);
    int64_t hb = o.getNumHeads() % 32 == 0 ? 32 : 16;
    int64_t target =
        std::max<int64_t>(1, kLatentSplitBlocks / (o.getNumHeads() / hb));
    // A bf16 cache: 4 tiles in the ring (3 in flight, 110 KiB: per SM more
    // than its share of HBM bandwidth times the latency).
    return config(ctx, kind, {hb, target}, 4 * hb / 16, 4);
  }
  case KernelKind::linear_tma_wgmma:
    if (!decode && linearPrefersSharedEpilogue(op, target, maxRows)) {
      int64_t columns = linearWideColumns(op, target, maxRows);
      return config(ctx, kind, {128, columns, 64}, 12,
                    linearSharedEpilogueMaxStages(columns), 1,
                    kDefaultRasterRowTiles);
    }
    // 128 x 128 output tiles, K steps of 64 (one 128-byte swizzled row of
    // bf16), one warpgroup; 2 TMA stages (65 KiB) so that three blocks
    // share an SM: at T = 8192, 656 TFLOP/s instead of 496 on Kimi's o
    // projection, 626 instead of 416 on K3's qkv (a few narrow shapes lose:
    // bench/results/gemm-nvidia-h200-20261202T030949Z.json). The tiles in
    // bands of 16 row tiles: a W larger than L2 (LM heads, K3's q/k/v) is
    // read once a band instead of once a wave of row tiles.
    if (int64_t split = decode ? 1 : linearSplitK(op, target, maxRows);
        split > 1)
      return config(ctx, kind, {128, 128, 64}, 4, 4, 1, kDefaultRasterRowTiles,
                    split);
    return config(ctx, kind, {128, 128, 64}, 4, 2, 3, kDefaultRasterRowTiles);
  case KernelKind::moe_dispatch_rows:
    // 16 warps: 2048 pairs per step of the ordered walk. A decode step has
    // at most max-seqs x top-k pairs (512 at 64 x 8: one step of 4 warps),
    // and there the block's barriers and scan are the cost: 4 warps took
    // 0.07-0.27 ms off a B = 1 step of Kimi-Linear-48B, B = 8 and 64 level
    // (bench/results/e2e-checks/
    // decode-config-overrides-ab-nvidia-h200-20261203T1845Z.txt).
    return config(ctx, kind, {}, decode ? 4 : 16);
  case KernelKind::moe_router_rows:
    // 8 warps share the experts' dot products.
    return config(ctx, kind,
                  {defaultRouterTokensPerBlock(cast<MoERouterOp>(op), 8)}, 8);
  case KernelKind::glu_wgmma:
    if (auto glu = dyn_cast<GLUGateUpOp>(op);
        glu && !decode && gluPrefersSharedEpilogue(glu, target, maxRows))
      return config(ctx, kind, {128, 256, 64}, 12, sharedEpilogueMaxStages(256),
                    1, kDefaultRasterRowTiles);
    [[fallthrough]];
  case KernelKind::moe_grouped_wgmma:
    // linear_tma_wgmma's tile; two stages (65 KiB) so that three blocks
    // share an SM and one's barriers, drains and epilogue hide behind the
    // others' products: at T = 8192 the gate/up GEMM ran at 303 TFLOP/s
    // with 4 stages and one block per SM, 446 with 3 and two, 488 with 2
    // and three (bench/results/moe-nvidia-h200-20261202T023517Z.json).
    // MXFP4 weights, decoded by the block's threads while its previous
    // step's products run, take three stages and two blocks per SM (the
    // copies of step kt + 1 have a step more to land): at K3's T = 8192
    // gate/up 236 TFLOP/s against 208 with two stages and three blocks,
    // 75 % of bf16's 316 (bench/results/
    // moe-mxfp4-nvidia-h200-20261203T092851Z.json).
    // The dense GLU's tiles in bands, as the linear's (its W of 2 x 9216
    // rows is larger than L2); the grouped ops' tiles follow the experts.
    if (hasMXFP4Weights(op))
      return config(ctx, kind, {128, 128, 64}, 4, 3, 2);
    // Tables cut in tall tiles (k3-moe-grouped tile-rows=384) take the tall
    // persistent schedule, the only one for them (docs/moe.md, "Tall
    // tiles").
    if (groupedTileRows(op) == kTallGroupedTileRows)
      return config(ctx, kind, {kTallGroupedTileRows, 128, 64}, 12, 3, 1, 0, 0,
                    TileScheduler::counter);
    if (auto gateUp = dyn_cast<MoEGroupedGLUOp>(op);
        gateUp && !decode && groupedGateUpPrefersPersistent(gateUp, maxRows)) {
      // As many stages as leave room for the result tiles of act(gate,
      // up)'s 128 channels: 4. In cluster pairs that share the weights'
      // tiles where the column tiles pair up and no shared expert rides in
      // the launch (verifyGateUpPairs): Kimi-Linear's gate/up at T = 8192
      // 1.127 ms against 1.190-1.191 unpaired, in two runs, and its 4-layer
      // prefill 17.06-17.10 ms against 17.17-17.31 in three interleaved
      // rounds, on an H100 (bench/results/e2e-checks/
      // gate-up-pairs-shared-epilogue-ab-cut4-nvidia-h100-20261206T1825Z.txt).
      bool pairs = (dimOf(gateUp.getW1(), 1) / 128) % 2 == 0 &&
                   !gateUp.hasSharedExpert();
      return config(ctx, kind, {128, 256, 64}, 12, sharedEpilogueMaxStages(128),
                    1, 0, pairs ? 2 : 0, TileScheduler::counter);
    }
    return config(ctx, kind, {128, 128, 64}, 4, 2, 3,
                  kind == KernelKind::glu_wgmma ? kDefaultRasterRowTiles : 0);
  case KernelKind::moe_router_mma:
    return defaultRouterMMAConfig(cast<MoERouterOp>(op), 8);
  case KernelKind::moe_grouped_gemv:
  case KernelKind::glu_gemv:
    return defaultGroupedGEMVConfig(op, kind);
  case KernelKind::moe_topk_rows:
    // A warp per token, 8 tokens per block.
    return config(ctx, kind, {}, 8);
  case KernelKind::moe_combine_rows: {
    // A block per token, a 16-byte vector of the row per thread (hidden
    // 2304 in bf16: 9 warps).
    int64_t v = moeCombineVector(op);
    return config(ctx, kind, {v},
                  moeCombineWarps(dimOf(op->getOperand(0), 2), v));
  }
  case KernelKind::short_conv_rows: {
    // 16 tokens a thread: each input read once, the weights loaded once per
    // 16 outputs. In prefill 4 channels a thread where they divide the
    // channels (each token's load and store one 8-byte vector of bf16), 8
    // tokens and 4 warps: 16 tokens kept 125 registers and 23 % occupancy,
    // 0.082 ms a call at T = 8192 and 4096 channels against 0.071
    // (bench/results/e2e-checks/short-conv-tiles-nvidia-h200-20261204T0724Z.txt).
    // Five blocks an SM (ptxas: 96 registers; the two copies of the walk
    // took 125 uncapped): 0.0523-0.0526 ms a call against 0.0554-0.0559
    // uncapped and 0.0547-0.0550 before the straight-line copy, on an H100
    // (bench/results/e2e-checks/short-conv-inside-profile-cut4-nvidia-h100-20261206T1740Z.txt).
    auto conv = dyn_cast<ShortConvOp>(op);
    if (conv && !decode && dimOf(conv.getInput(), 1) % 4 == 0)
      return config(ctx, kind, {8, 4}, 4, 0, 5);
    return config(ctx, kind, {16}, 8);
  }
  case KernelKind::mla_flash_wgmma:
    return defaultMLAFlashConfig(cast<MLAPrefillAttentionOp>(op), target,
                                 maxRows, maxSeqs);
  }
  llvm_unreachable("kernel kind");
}

/// A linear's kernel: in a decode entry (a few tokens) the GEMV, which
/// reads the weights once per 4 tokens at bandwidth; in prefill the
/// tensor cores (wgmma for bf16 inputs, 3xTF32 for f32 ones), and the GEMV
/// where neither covers the shape. The loop nest is the last resort.
KernelKind defaultLinearKind(LinearOp op, bool decode) {
  if (decode && linearGEMVApplies(op))
    return KernelKind::linear_gemv;
  if (linearWGMMAApplies(op))
    return KernelKind::linear_tma_wgmma;
  if (linearMMAApplies(op))
    return KernelKind::linear_mma_3xtf32;
  if (linearGEMVApplies(op))
    return KernelKind::linear_gemv;
  return KernelKind::loop_nest;
}

/// The dedicated kernel of `op` by default, else the loop nest.
KernelKind defaultKind(Operation *op, bool decode) {
  if (auto o = dyn_cast<LinearOp>(op))
    return defaultLinearKind(o, decode);
  // k3-group-linears groups a decode step's linears for the GEMV, and on
  // CUDA a prefill's for the wgmma GEMM.
  if (isa<LinearGroupOp>(op)) {
    if (decode && linearGEMVApplies(op))
      return KernelKind::linear_gemv;
    if (linearWGMMAApplies(op))
      return KernelKind::linear_tma_wgmma;
    return linearGEMVApplies(op) ? KernelKind::linear_gemv
                                 : KernelKind::loop_nest;
  }
  if (auto o = dyn_cast<ArgmaxOp>(op))
    return argmaxRowsApplies(o) ? KernelKind::argmax_rows
                                : KernelKind::loop_nest;
  // A decode step's attention over the cache: split-KV on the tensor
  // cores, each cached latent read once for all heads (the block per head
  // read it once per head, 32 blocks over the whole context at B = 1).
  if (auto o = dyn_cast<LatentAttentionOp>(op))
    return decode && latentSplitApplies(o) ? KernelKind::latent_attention_split
                                           : KernelKind::latent_attention_rows;
  if (auto o = dyn_cast<MLAPrefillAttentionOp>(op))
    return mlaFlashApplies(o) ? KernelKind::mla_flash_wgmma
                              : KernelKind::loop_nest;
  if (isa<RMSNormOp, PartialRMSNormOp, AddRMSNormOp, GatedRMSNormOp>(op))
    return rmsNormRowsColumns(op) ? KernelKind::rms_norm_rows
                                  : KernelKind::loop_nest;
  if (auto o = dyn_cast<ShortConvOp>(op))
    return shortConvRowsApplies(o) ? KernelKind::short_conv_rows
                                   : KernelKind::loop_nest;
  if (auto o = dyn_cast<ShortConvGroupOp>(op))
    return shortConvGroupRowsApplies(o) ? KernelKind::short_conv_rows
                                        : KernelKind::loop_nest;
  if (auto o = dyn_cast<KDAOp>(op))
    return kdaRecurrentApplies(o) ? KernelKind::kda_recurrent
                                  : KernelKind::loop_nest;
  if (isa<KDAMMAOperandsOp>(op))
    return KernelKind::kda_mma_operands;
  if (isa<KDAMMARecurrenceOp>(op))
    return KernelKind::kda_mma_chain;
  if (auto o = dyn_cast<MoEDispatchOp>(op))
    return moeDispatchRowsApplies(o) ? KernelKind::moe_dispatch_rows
                                     : KernelKind::loop_nest;
  // In a decode step the loop nest's warp per (token, expert) spreads the
  // scores over the GPU; one block per token took 0.25 ms per layer there
  // (bench/results/profile-gpu/history/
  // real4-bf16-T64-20261202T034250Z-cf6544a.txt).
  // In prefill the tensor cores take the scores where x and W are bf16.
  // k3-split-router's selection: a warp per token, prefill and decode.
  if (auto o = dyn_cast<MoETopKOp>(op))
    return moeTopKRowsApplies(o) ? KernelKind::moe_topk_rows
                                 : KernelKind::loop_nest;
  if (isa<MoECombineOp, MoECombineAddRMSNormOp>(op))
    return moeCombineVector(op) ? KernelKind::moe_combine_rows
                                : KernelKind::loop_nest;
  if (auto o = dyn_cast<MoERouterOp>(op)) {
    if (decode)
      return KernelKind::loop_nest;
    if (moeRouterMMAApplies(o))
      return KernelKind::moe_router_mma;
    return moeRouterRowsApplies(o) ? KernelKind::moe_router_rows
                                   : KernelKind::loop_nest;
  }
  // The dispatch's tiles decide: 128 rows for the tensor cores (prefill),
  // a few for the GEMV (decode, k3-moe-grouped's decode-tile-rows).
  if (isa<MoEGroupedGLUOp, MoEGroupedDownOp>(op)) {
    if (groupedWGMMAApplies(op))
      return KernelKind::moe_grouped_wgmma;
    return groupedGEMVApplies(op) ? KernelKind::moe_grouped_gemv
                                  : KernelKind::loop_nest;
  }
  // In a decode step the 128-row tiles would be mostly padding: the GEMV
  // reads each weight once per 4 tokens instead.
  if (isa<GLUGateUpOp>(op)) {
    if (decode)
      return groupedGEMVApplies(op) ? KernelKind::glu_gemv
                                    : KernelKind::loop_nest;
    return groupedWGMMAApplies(op) ? KernelKind::glu_wgmma
                                   : KernelKind::loop_nest;
  }
  return KernelKind::loop_nest;
}

} // namespace

bool mlir::k3::kernelApplies(Operation *op, KernelKind kind, Attribute target) {
  if (kind == KernelKind::loop_nest)
    return true;
  if (!isa<GPUTargetAttr>(target))
    return false;
  switch (kind) {
  case KernelKind::kda_recurrent:
    return isa<KDAOp>(op) && kdaRecurrentApplies(cast<KDAOp>(op));
  case KernelKind::kda_mma_operands:
    return isa<KDAMMAOperandsOp>(op);
  case KernelKind::kda_mma_chain:
    return isa<KDAMMARecurrenceOp>(op);
  case KernelKind::linear_mma_3xtf32:
    return isa<LinearOp>(op) && linearMMAApplies(cast<LinearOp>(op));
  case KernelKind::linear_tma_wgmma:
    return linearWGMMAApplies(op);
  case KernelKind::linear_gemv:
    return isa<LinearOp, LinearGroupOp>(op) && linearGEMVApplies(op);
  case KernelKind::argmax_rows:
    return isa<ArgmaxOp>(op) && argmaxRowsApplies(cast<ArgmaxOp>(op));
  case KernelKind::latent_attention_rows:
    return isa<LatentAttentionOp>(op);
  case KernelKind::latent_attention_split:
    return isa<LatentAttentionOp>(op) &&
           latentSplitApplies(cast<LatentAttentionOp>(op));
  case KernelKind::rms_norm_rows:
    return rmsNormRowsColumns(op) != 0;
  case KernelKind::moe_dispatch_rows:
    return isa<MoEDispatchOp>(op) &&
           moeDispatchRowsApplies(cast<MoEDispatchOp>(op));
  case KernelKind::moe_grouped_wgmma:
    return isa<MoEGroupedGLUOp, MoEGroupedDownOp>(op) &&
           groupedWGMMAApplies(op);
  case KernelKind::glu_wgmma:
    return isa<GLUGateUpOp>(op) && groupedWGMMAApplies(op);
  case KernelKind::moe_router_rows:
    return isa<MoERouterOp>(op) && moeRouterRowsApplies(cast<MoERouterOp>(op));
  case KernelKind::mla_flash_wgmma:
    return isa<MLAPrefillAttentionOp>(op) &&
           mlaFlashApplies(cast<MLAPrefillAttentionOp>(op));
  case KernelKind::short_conv_rows:
    if (auto o = dyn_cast<ShortConvGroupOp>(op))
      return shortConvGroupRowsApplies(o);
    return isa<ShortConvOp>(op) && shortConvRowsApplies(cast<ShortConvOp>(op));
  case KernelKind::moe_router_mma:
    return isa<MoERouterOp>(op) && moeRouterMMAApplies(cast<MoERouterOp>(op));
  case KernelKind::moe_grouped_gemv:
    return isa<MoEGroupedGLUOp, MoEGroupedDownOp>(op) && groupedGEMVApplies(op);
  case KernelKind::glu_gemv:
    return isa<GLUGateUpOp>(op) && groupedGEMVApplies(op);
  case KernelKind::moe_topk_rows:
    return isa<MoETopKOp>(op) && moeTopKRowsApplies(cast<MoETopKOp>(op));
  case KernelKind::moe_combine_rows:
    return moeCombineVector(op) != 0;
  case KernelKind::loop_nest:
    break;
  }
  return true;
}

KernelConfigAttr mlir::k3::kernelConfigOfKind(Operation *op, KernelKind kind,
                                              Attribute target, bool decode,
                                              int64_t maxRows,
                                              int64_t maxSeqs) {
  if (auto gpu = dyn_cast<GPUTargetAttr>(target))
    return configOfKind(op, kind, gpu, decode, maxRows, maxSeqs);
  return config(op->getContext(), KernelKind::loop_nest, {}, 0);
}

KDARecurrentTile mlir::k3::kdaRecurrentTile(KernelConfigAttr config) {
  ArrayRef<int64_t> t = config.getTile();
  KDARecurrentTile tile;
  if (t.size() == 4) {
    tile.bv = t[0];
    tile.p = t[1];
    tile.s = t[2];
    tile.c = t[3];
  }
  return tile;
}

LinearGEMVTile mlir::k3::linearGEMVTile(KernelConfigAttr config) {
  LinearGEMVTile tile;
  ArrayRef<int64_t> t = config.getTile();
  if (t.size() == 2 || t.size() == 3) {
    tile.rows = t[0];
    tile.tokens = t[1];
  }
  if (t.size() == 3)
    tile.slices = t[2];
  tile.warps = config.getWarps();
  return tile;
}

int64_t mlir::k3::linearGEMVVectorElements(Type weightElement) {
  return 128 / weightElement.getIntOrFloatBitWidth();
}

int64_t mlir::k3::linearGEMVRowTiles(int64_t nOut, const LinearGEMVTile &t) {
  int64_t rowsPerBlock = t.warps / std::max<int64_t>(t.slices, 1) * t.rows;
  return (nOut + rowsPerBlock - 1) / rowsPerBlock;
}

namespace {
/// Per stage a tileM x 64 bf16 tile of x and a tileN x 64 one of W (8 or
/// 16, and 16 or 32 KiB), and `stagedPerStage` more bytes after all the stages'
/// tiles; 1 KiB to align the tiles to the 128-byte swizzle's 1024-byte
/// pattern. With `epilogueTile` the epilogue reuses the stages for the f32
/// tile: 128 x 128 (68 KiB with its rows padded, WGMMA.h), or for the
/// warp-specialised schedule 192 x 256 (198 KiB: its consumers' rows land
/// 64 rows in, LinearWGMMA.cpp).
int64_t wgmmaSharedBytes(int64_t stages, int64_t tileN, int64_t stagedPerStage,
                         bool epilogueTile = true, int64_t tileM = 128) {
  int64_t epilogueRows = tileN == 256 ? 192 : 128;
  int64_t stageBytes = stages * ((tileM + tileN) * 64 * 2 + stagedPerStage);
  if (!epilogueTile)
    return stageBytes + 1024;
  return std::max<int64_t>(stageBytes,
                           epilogueRows * wgmmaEpilogueRowStride(tileN) * 4) +
         1024;
}
} // namespace

int64_t mlir::k3::linearWGMMASharedBytes(int64_t stages, int64_t tileN,
                                         int64_t tileM, bool sharedEpilogue,
                                         bool splitK) {
  if (splitK) // the f32 partial tile after the stages, not over them
    return wgmmaSharedBytes(stages, tileN, 0, /*epilogueTile=*/false, tileM) +
           tileM * wgmmaEpilogueRowStride(tileN) * 4;
  // The persistent warp-specialised schedules (tileN 256 or 192) write
  // their tiles from registers, or through two 64-row bf16 tiles after the
  // stages.
  return wgmmaSharedBytes(stages, tileN, 0, /*epilogueTile=*/tileN <= 128,
                          tileM) +
         (sharedEpilogue ? 2 * 64 * tileN * 2 : 0);
}

/// The most stages (at least 1) whose `bytes(stages)` fit sm_90's shared
/// memory a block.
static int64_t mostStagesThatFit(llvm::function_ref<int64_t(int64_t)> bytes) {
  int64_t stages = 1;
  while (bytes(stages + 1) <= kSm90SmemPerBlock)
    ++stages;
  return stages;
}

int64_t mlir::k3::sharedEpilogueMaxStages(int64_t columns) {
  return mostStagesThatFit([&](int64_t stages) {
    return groupedWGMMASharedBytes(stages, 256, /*mxfp4=*/false, 128, columns);
  });
}

bool mlir::k3::linearStoresThroughShared(Operation *op, KernelConfigAttr c) {
  return c.getKernel() == KernelKind::linear_tma_wgmma && c.getCluster() != 2 &&
         linearWideTile(c) &&
         c.getStages() <= linearSharedEpilogueMaxStages(c.getTile()[1]) &&
         resultsAreBF16(op);
}

bool mlir::k3::linearWideTile(KernelConfigAttr c) {
  ArrayRef<int64_t> t = c.getTile();
  return t.size() == 3 && t[0] == 128 && (t[1] == 256 || t[1] == 192) &&
         t[2] == 64;
}

int64_t mlir::k3::linearSharedEpilogueMaxStages(int64_t columns) {
  return mostStagesThatFit([&](int64_t stages) {
    return linearWGMMASharedBytes(stages, columns, 128,
                                  /*sharedEpilogue=*/true);
  });
}

int64_t mlir::k3::groupedWGMMASharedBytes(int64_t stages, int64_t tileN,
                                          bool mxfp4, int64_t tileM,
                                          int64_t epilogueColumns) {
  // MXFP4: each weight row's staged bytes (MXFP4Tile.h); the epilogue's
  // f32 tile may cover them. The persistent warp-specialised schedule
  // (tileN 256) writes its tiles from registers (the stages alone) or
  // through two 64-row bf16 tiles after the stages.
  return wgmmaSharedBytes(
             stages, tileN, mxfp4 ? tileN * kMXFP4StagedRowBytes : 0,
             /*epilogueTile=*/tileN != 256 && tileM == 128, tileM) +
         2 * 64 * epilogueColumns * 2;
}

int64_t mlir::k3::groupedSharedEpilogueColumns(Operation *op,
                                               KernelConfigAttr c) {
  KernelKind k = c.getKernel();
  if ((k != KernelKind::moe_grouped_wgmma && k != KernelKind::glu_wgmma) ||
      !resultsAreBF16(op))
    return 0;
  int64_t columns = isa<MoEGroupedDownOp>(op) ? 256 : 128;
  return sharedEpilogueSchedule(c, columns) ? columns : 0;
}

int64_t mlir::k3::mlaFlashSharedBytes(MLAPrefillAttentionOp op, int64_t stages,
                                      int64_t queryRows, int64_t keys) {
  // 128 bytes (64 bf16 columns) a row of a box: q's (Dn + Dr) / 64 boxes
  // of 64 rows per 64 query rows; per stage the keys' (Dn + Dr) / 64 and
  // the values' Dv / 64 boxes of `keys` rows; 1 KiB to align to the
  // swizzle's 1024-byte pattern. (P stays in registers.)
  int64_t qk = (op.getQkNopeHeadDim() + op.getQkRopeHeadDim()) / 64,
          v = op.getVHeadDim() / 64;
  return 128 * (qk * queryRows + stages * (qk + v) * keys) + 1024;
}

int64_t mlir::k3::kdaMMAChainStageBytes(int64_t kDim, int64_t warps) {
  // Packed rows of 3K/2 + 16 words, padded by 4 words (conflict-free),
  // e^{G_C} as K f32, v's 16 rows of 16 W bf16 padded by 16 bytes (ldmatrix
  // reads 8 rows of a column block without bank conflicts).
  int64_t rowStride = 3 * kDim / 2 + 16 + 4;
  return 16 * rowStride * 4 + kDim * 4 + 16 * (16 * warps * 2 + 16);
}

KernelConfigAttr mlir::k3::defaultKernelConfig(Operation *op, Attribute target,
                                               bool decode, int64_t maxRows,
                                               int64_t maxSeqs) {
  return kernelConfigOfKind(op, defaultKind(op, decode), target, decode,
                            maxRows, maxSeqs);
}

/// `raster` orders the output tiles of the GEMMs over a dense grid of
/// tiles (linear_tma_wgmma, glu_wgmma: TileRaster.h); the other kernels
/// have no such grid and would ignore it.
static LogicalResult verifyRaster(Operation *op, KernelConfigAttr c) {
  int64_t raster = c.getRaster();
  if (raster == 0)
    return success();
  KernelKind kind = c.getKernel();
  // A decode entry's linears run on the GEMV: an override meant for the
  // prefill's GEMMs is scoped to it (<op>@prefill.raster=N).
  if (kind != KernelKind::linear_tma_wgmma && kind != KernelKind::glu_wgmma)
    return op->emitOpError()
           << "raster applies to linear_tma_wgmma and glu_wgmma, not "
           << stringifyKernelKind(kind)
           << " (an override for the prefill's GEMMs alone: "
              "<op>@prefill.raster=N)";
  if (raster < 0 || raster > kMaxRasterRowTiles)
    return op->emitOpError() << "raster must be in [0, " << kMaxRasterRowTiles
                             << "] row tiles, got " << raster;
  return success();
}

/// Clusters of the linear kernel (LinearWGMMA.cpp): on the warp-specialised
/// schedules, pairs of row tiles sharing W's tiles by TMA multicast; on the
/// one-warpgroup tile, 2, 4 or 8 blocks that split K and sum their partial
/// tiles through distributed shared memory (K's 64-column steps divisible
/// by the cluster).
static LogicalResult verifyLinearCluster(Operation *op, KernelConfigAttr c) {
  int64_t cluster = c.getCluster();
  if (c.getTile() == ArrayRef<int64_t>{128, 128, 64}) {
    int64_t k = dimOf(op->getOperand(1), 1);
    if ((cluster != 2 && cluster != 4 && cluster != 8) ||
        k % (64 * cluster) != 0)
      return op->emitOpError()
             << "cluster " << cluster
             << " of linear_tma_wgmma's [128, 128, 64] tile splits K: 2, 4 "
                "or 8 blocks, each an equal number of 64-column steps (K = "
             << k << ")";
    return success();
  }
  if (cluster != 2 || c.getTile() != ArrayRef<int64_t>{128, 256, 64})
    return op->emitOpError()
           << "cluster " << cluster
           << " of linear_tma_wgmma: 2 on the warp-specialised tile [128, "
              "256, 64] (pairs of row tiles share W's tiles), or 2, 4 or 8 "
              "on the [128, 128, 64] tile (split K)";
  return success();
}

/// Pairs of the grouped gate/up GEMM's persistent schedule, which share
/// an expert's weight tiles by TMA multicast and take their tiles from the
/// counter, which rank 0 claims for both (MoEGroupedPersistent.cpp).
static LogicalResult verifyGateUpPairs(MoEGroupedGLUOp op, KernelConfigAttr c) {
  if (c.getTile() != ArrayRef<int64_t>{128, 256, 64} ||
      c.getScheduler() != TileScheduler::counter)
    return op.emitOpError()
           << "cluster 2 of k3.moe_grouped_glu pairs the persistent "
              "schedule's blocks: tile [128, 256, 64] and scheduler counter";
  if (hasMXFP4Weights(op) || op.hasSharedExpert())
    return op.emitOpError() << "cluster 2 of k3.moe_grouped_glu needs bf16 "
                               "routed weights (by TMA) and no shared expert "
                               "in the launch";
  if (int64_t columnTiles = dimOf(op.getW1(), 1) / 128; columnTiles % 2 != 0)
    return op.emitOpError()
           << "cluster 2 of k3.moe_grouped_glu gives a solo pair tile two "
              "column tiles: the intermediate width must be a multiple of "
              "256, got "
           << dimOf(op.getW1(), 1);
  return success();
}

/// Clusters: pairs of blocks of the grouped MoE down GEMM's one-warpgroup
/// schedule, which share its rows' tiles by TMA multicast (MoEGroupedKernel.h),
/// of the gate/up GEMM's persistent schedule, which share the weights'
/// (verifyGateUpPairs), and of the linear kernel's warp-specialised
/// schedule, which share W's.
static LogicalResult verifyCluster(Operation *op, KernelConfigAttr c) {
  int64_t cluster = c.getCluster();
  if (cluster == 0 || cluster == 1)
    return success();
  if (c.getKernel() == KernelKind::linear_tma_wgmma)
    return verifyLinearCluster(op, c);
  if (auto glu = dyn_cast<MoEGroupedGLUOp>(op);
      glu && c.getKernel() == KernelKind::moe_grouped_wgmma && cluster == 2)
    return verifyGateUpPairs(glu, c);
  auto down = dyn_cast<MoEGroupedDownOp>(op);
  if (c.getKernel() != KernelKind::moe_grouped_wgmma || !down || cluster != 2)
    return op->emitOpError()
           << "cluster " << cluster
           << " applies, as 2, to linear_tma_wgmma's 256-column tiles "
              "(pairs of row tiles sharing W), to k3.moe_grouped_down's "
              "moe_grouped_wgmma kernel (pairs of column tiles sharing the "
              "rows) and to k3.moe_grouped_glu's persistent one (pairs "
              "sharing the weights), got "
           << stringifyKernelKind(c.getKernel()) << " on " << op->getName()
           << " (an override for the prefill's GEMMs alone: "
              "<op>@prefill.cluster=2)";
  if (c.getTile() != ArrayRef<int64_t>{128, 128, 64} || hasMXFP4Weights(op))
    return op->emitOpError() << "cluster 2 needs the [128, 128, 64] tile "
                                "and bf16 weights (rows by TMA)";
  // The pair's refill lands while the steps before it multiply
  // (MoEGroupedKernel.h, mainLoopPaired): with 2 stages it would be
  // correct but wait on every refill, so the rule is for speed.
  if (c.getStages() < 3)
    return op->emitOpError() << "cluster 2 needs at least 3 stages (a "
                                "refill lands while two steps multiply), got "
                             << c.getStages();
  if (int64_t width = dimOf(down.getW2(), 1); width % 256 != 0)
    return op->emitOpError() << "cluster 2 pairs 128-column tiles: the "
                                "output width must be a multiple of 256, got "
                             << width;
  return success();
}

/// The counter scheduler: the grouped and dense GLU wgmma kernels'
/// persistent schedule whose two consumers share [128, 256, 64] tiles
/// (MoEGroupedPersistent.cpp), unpaired.
static LogicalResult verifyScheduler(Operation *op, KernelConfigAttr c) {
  if (c.getScheduler() == TileScheduler::strided)
    return success();
  bool grouped = c.getKernel() == KernelKind::moe_grouped_wgmma ||
                 c.getKernel() == KernelKind::glu_wgmma;
  // Pairs claim from the counter only on the gate/up GEMM
  // (verifyGateUpPairs).
  bool pairs = c.getCluster() == 2 && !isa<MoEGroupedGLUOp>(op);
  bool persistent =
      c.getTile() == ArrayRef<int64_t>{128, 256, 64} ||
      c.getTile() == ArrayRef<int64_t>{kTallGroupedTileRows, 128, 64};
  if (!grouped || !persistent || pairs)
    return op->emitOpError()
           << "scheduler counter applies to the persistent schedules of "
              "moe_grouped_wgmma and glu_wgmma (tile [128, 256, 64] or "
              "[384, 128, 64]; cluster 2 only on k3.moe_grouped_glu), got "
           << stringifyKernelKind(c.getKernel()) << " with tile ["
           << c.getTile() << "]";
  return success();
}

/// L2 prefetches of the TMA tiles ahead of the refills: the grouped and
/// dense GLU wgmma kernels (MoEGroupedWGMMA.cpp, MoEGroupedPersistent.cpp)
/// with TMA weights (MXFP4 weights come by cp.async).
static LogicalResult verifyPrefetch(Operation *op, KernelConfigAttr c) {
  int64_t prefetch = c.getPrefetch();
  if (prefetch == 0)
    return success();
  if (prefetch < 0 || prefetch > kMaxPrefetchSteps)
    return op->emitOpError() << "prefetch must be in [0, " << kMaxPrefetchSteps
                             << "] k-steps, got " << prefetch;
  bool grouped = c.getKernel() == KernelKind::moe_grouped_wgmma ||
                 c.getKernel() == KernelKind::glu_wgmma;
  if (!grouped || hasMXFP4Weights(op))
    return op->emitOpError()
           << "prefetch applies to moe_grouped_wgmma and glu_wgmma with bf16 "
              "weights, got "
           << stringifyKernelKind(c.getKernel())
           << (hasMXFP4Weights(op) ? " with MXFP4 weights" : "");
  return success();
}

LogicalResult mlir::k3::verifyKernelConfig(Operation *op,
                                           KernelConfigAttr config,
                                           Attribute target) {
  auto gpu = dyn_cast<GPUTargetAttr>(target);
  KernelKind kind = config.getKernel();
  if (failed(verifyRaster(op, config)) || failed(verifyCluster(op, config)) ||
      failed(verifyScheduler(op, config)) || failed(verifyPrefetch(op, config)))
    return failure();
  if (kind == KernelKind::loop_nest) {
    if (!gpu)
      return success();
    int64_t threads = config.getWarps() * 32;
    if (threads < 32 || threads > gpu.getThreadsPerBlock())
      return op->emitOpError()
             << "loop_nest warps must give 32 to " << gpu.getThreadsPerBlock()
             << " threads, got " << config.getWarps() << " warps";
    return verifyGroupedTablesHaveKernel(op);
  }
  if (!gpu)
    return op->emitOpError() << "kernel " << stringifyKernelKind(kind)
                             << " exists only for GPU targets";
  auto wrongOp = [&]() {
    return op->emitOpError()
           << "cannot be lowered by kernel " << stringifyKernelKind(kind);
  };
  switch (kind) {
  case KernelKind::kda_recurrent:
    if (auto o = dyn_cast<KDAOp>(op))
      return verifyKDARecurrent(o, config);
    return wrongOp();
  case KernelKind::kda_mma_operands:
    if (auto o = dyn_cast<KDAMMAOperandsOp>(op))
      return verifyKDAMMAOperands(o, config);
    return wrongOp();
  case KernelKind::kda_mma_chain:
    if (auto o = dyn_cast<KDAMMARecurrenceOp>(op))
      return verifyKDAMMAChain(o, config, gpu);
    return wrongOp();
  case KernelKind::linear_mma_3xtf32:
    if (auto o = dyn_cast<LinearOp>(op))
      return verifyLinearMMA(o, config);
    return wrongOp();
  case KernelKind::linear_tma_wgmma:
    if (isa<LinearOp, LinearGroupOp>(op))
      return verifyLinearWGMMA(op, config, gpu);
    return wrongOp();
  case KernelKind::linear_gemv:
    if (isa<LinearOp, LinearGroupOp>(op))
      return verifyLinearGEMV(op, config);
    return wrongOp();
  case KernelKind::argmax_rows:
    if (auto o = dyn_cast<ArgmaxOp>(op))
      return verifyArgmaxRows(o, config);
    return wrongOp();
  case KernelKind::latent_attention_rows:
    if (auto o = dyn_cast<LatentAttentionOp>(op))
      return verifyLatentAttentionRows(o, config);
    return wrongOp();
  case KernelKind::latent_attention_split:
    if (auto o = dyn_cast<LatentAttentionOp>(op))
      return verifyLatentAttentionSplit(o, config);
    return wrongOp();
  case KernelKind::rms_norm_rows:
    if (isa<RMSNormOp, PartialRMSNormOp, AddRMSNormOp, GatedRMSNormOp>(op))
      return verifyRMSNormRows(op, config);
    return wrongOp();
  case KernelKind::moe_dispatch_rows:
    if (auto o = dyn_cast<MoEDispatchOp>(op))
      return verifyMoEDispatchRows(o, config);
    return wrongOp();
  case KernelKind::moe_grouped_wgmma:
    if (isa<MoEGroupedGLUOp, MoEGroupedDownOp>(op))
      return verifyGroupedWGMMA(op, config, gpu);
    return wrongOp();
  case KernelKind::glu_wgmma:
    if (isa<GLUGateUpOp>(op))
      return verifyGroupedWGMMA(op, config, gpu);
    return wrongOp();
  case KernelKind::moe_router_rows:
    if (auto o = dyn_cast<MoERouterOp>(op))
      return verifyMoERouterRows(o, config);
    return wrongOp();
  case KernelKind::mla_flash_wgmma:
    if (auto o = dyn_cast<MLAPrefillAttentionOp>(op))
      return verifyMLAFlash(o, config, gpu);
    return wrongOp();
  case KernelKind::short_conv_rows:
    if (isa<ShortConvOp, ShortConvGroupOp>(op))
      return verifyShortConvRows(op, config);
    return wrongOp();
  case KernelKind::moe_router_mma:
    if (auto o = dyn_cast<MoERouterOp>(op))
      return verifyMoERouterMMA(o, config);
    return wrongOp();
  case KernelKind::moe_grouped_gemv:
    if (isa<MoEGroupedGLUOp, MoEGroupedDownOp>(op))
      return verifyGroupedGEMV(op, config);
    return wrongOp();
  case KernelKind::glu_gemv:
    if (isa<GLUGateUpOp>(op))
      return verifyGroupedGEMV(op, config);
    return wrongOp();
  case KernelKind::moe_topk_rows:
    if (auto o = dyn_cast<MoETopKOp>(op))
      return verifyMoETopKRows(o, config);
    return wrongOp();
  case KernelKind::moe_combine_rows:
    if (isa<MoECombineOp, MoECombineAddRMSNormOp>(op))
      return verifyMoECombineRows(op, config);
    return wrongOp();
  case KernelKind::loop_nest:
    break;
  }
  return success();
}

int64_t mlir::k3::routerTokensPerBlock(KernelConfigAttr config) {
  ArrayRef<int64_t> tile = config.getTile();
  return tile.empty() ? 1 : tile[0];
}

int64_t mlir::k3::routerVectorWidth(MoERouterOp op) {
  auto bytes = [](Value v) {
    return cast<ShapedType>(v.getType()).getElementTypeBitWidth() / 8;
  };
  int64_t width = 16 / std::max(bytes(op.getInput()), bytes(op.getWeight()));
  return dimOf(op.getInput(), 1) % width == 0 ? width : 1;
}

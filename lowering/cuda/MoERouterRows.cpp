//===- MoERouterRows.cpp - k3.moe_router, a block per G tokens --*- C++ -*-===//
//
// The MoE router in one launch with a block per G tokens (config kernel
// `moe_router_rows`, tile [G]): the loop nest ran the scores as one launch
// and the top-k as another with one thread per token (0.88 ms of a
// 2048-token prefill of the real-width cut, 8 blocks; 50 us per layer and
// decode step: bench/results/profile-gpu/real4-bf16-T2048.txt, -T64.txt).
// With a block per token (G = 1) each block read all of W with 2-byte
// loads: 0.59 ms per layer at T = 2048 (profile-gpu/history/
// real4-bf16-T2048-20261202T082800Z-1d803d9.txt).
//
//   1. The G tokens' rows of x into shared memory; the warps take experts
//      e, e + W, ... and each lane sums chunks of V channels (16-byte
//      vector loads of W[e], each used for all G tokens) of x_g . W[e] for
//      the G tokens; butterflies of shuffles add the lanes; the logits go
//      to shared memory.
//   2. Warp g < G takes token g: lane l holds experts l, l + 32, ... in
//      registers: the score
//      (sigmoid, or softmax over the row: max and sum by shuffles) and the
//      score plus the correction bias. k rounds: each lane's best untaken
//      expert, then the warp's (larger biased score, or equal with a lower
//      id: the loop nest's and the oracle's tie rule), whose lane marks it
//      taken. The weights are the unbiased scores, renormalised and scaled
//      as the op says; lane 0 writes them with the ids.
//
// k3.moe_topk (k3-split-router's selection from logits that a k3.linear
// computed) runs step 2 alone: kernel moe_topk_rows, a warp per token.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/RouterTopK.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

class RouterKernel {
public:
  RouterKernel(MoERouterOp op, const KernelEmission &e)
      : op(op), kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        warps(e.config.getWarps()) {
    auto ops = operandsOf(op, e.inputs);
    x = ops.getInput().full;
    w = ops.getWeight().full;
    wBase = ops.getWeight().base;
    bias = ops.getCorrectionBias();
    hidden = ops.getInput().shape[1];
    experts = ops.getWeight().shape[0];
    numTokens = ops.getInput().shape[0];
    idx = resultOf(e.outputs, op.getIndices()).full;
    wts = resultOf(e.outputs, op.getWeights()).full;
    group = routerTokensPerBlock(e.config);
    vec = routerVectorWidth(op);
    if (e.config.getKernel() == KernelKind::moe_router_mma) {
      chunk = e.config.getTile()[1];
      tensorCores = true;
    }
  }

  /// Dynamic shared memory: the logits [G][E] f32, then the rows [G][H] in
  /// x's element type (16-byte aligned for the vector loads).
  int64_t sharedBytes() const {
    if (tensorCores)
      return rowsOffset() + group * (chunk + kPad) * 2;
    return rowsOffset() + group * hidden * elementBytes(x);
  }

  void emit() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    t0 = kb.muli(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x),
                 kb.idx(group));
    lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
    Value smem = em.dynamicSharedMemory();
    logits = em.sharedView(smem, b.getF32Type(), kb.idx(0), {group * experts});
    if (tensorCores) {
      row = em.sharedView(smem, b.getBF16Type(), kb.idx(rowsOffset()),
                          {group, chunk + kPad});
      scoresMMA();
    } else {
      row = em.sharedView(smem, elementType(x), kb.idx(rowsOffset()),
                          {group * hidden});
      scores();
    }
    // Warp w takes tokens w, w + W, ... of the block.
    strided(warp, kb.idx(group), warps, [&](Value g) {
      Value t = kb.addi(t0, g);
      kb.ifThen(kb.lti(t, kb.dim(numTokens)),
                [&] { topK(t, kb.muli(g, kb.idx(experts))); });
    });
  }

private:
  /// for (i = first; i < n; i += step) body(i).
  void strided(Value first, Value n, int64_t step,
               const std::function<void(Value)> &body) {
    auto loop = scf::ForOp::create(b, loc, first, n, kb.idx(step));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar());
  }

  static Type elementType(Value mem) {
    return cast<MemRefType>(mem.getType()).getElementType();
  }
  static int64_t elementBytes(Value mem) {
    return elementType(mem).getIntOrFloatBitWidth() / 8;
  }
  int64_t rowsOffset() const { return (group * experts * 4 + 15) / 16 * 16; }

  /// Step 1: logits[g][e] = x[t0 + g] . W[e] (rows past the tokens are 0).
  void scores() {
    Value tokens = kb.dim(numTokens);
    strided(tid, kb.idx(group * hidden), 32 * warps, [&](Value i) {
      Value g = em.divu(i, hidden), d = em.remu(i, hidden);
      Value t = kb.addi(t0, g);
      Value in = kb.lti(t, tokens);
      Value v = memref::LoadOp::create(
          b, loc, x, ValueRange{kb.minsi(t, kb.subi(tokens, kb.idx(1))), d});
      Value zero =
          arith::ConstantOp::create(b, loc, b.getZeroAttr(elementType(x)));
      em.sts(kb.select(in, v, zero), row, {i});
    });
    gpu::BarrierOp::create(b, loc);
    // W as one contiguous vector (16-byte loads need a unit-stride view).
    Value wFlat = em.contiguousView(wBase, {kb.idx(experts * hidden)});
    strided(warp, kb.idx(experts), warps, [&](Value e) {
      SmallVector<Value> init(group, kb.f32(0.0));
      auto loop = scf::ForOp::create(b, loc, lane, kb.idx(hidden / vec),
                                     kb.idx(32), init);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value d = kb.muli(loop.getInductionVar(), kb.idx(vec));
        SmallVector<Value> wv =
            em.loadVector(wFlat, {kb.addi(kb.muli(e, kb.idx(hidden)), d)}, vec);
        SmallVector<Value> acc(loop.getRegionIterArgs());
        for (int64_t g = 0; g < group; ++g) {
          SmallVector<Value> xv =
              em.loadVector(row, {kb.addi(kb.idx(g * hidden), d)}, vec);
          for (int64_t j = 0; j < vec; ++j)
            acc[g] = kb.fma(xv[j], wv[j], acc[g]);
        }
        scf::YieldOp::create(b, loc, acc);
      }
      for (int64_t g = 0; g < group; ++g) {
        Value sum = em.warpSum(loop.getResult(g));
        kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
          em.sts(sum, logits, {kb.addi(kb.idx(g * experts), e)});
        });
      }
    });
    gpu::BarrierOp::create(b, loc);
  }

  /// Step 1 on the tensor cores (kernel moe_router_mma, bf16 x and W):
  /// the block's G tokens (G / 16 row tiles) against the experts, 32 per
  /// warp and pass (4 column tiles of mma.sync m16n8k16, f32 accumulators
  /// in registers), over chunks of C channels: the chunk of x rows staged
  /// in shared memory (rows padded by 8 bf16 against ldmatrix bank
  /// conflicts) and read as A fragments by ldmatrix, W's B fragments
  /// loaded from global memory (each lane's two 4-byte pairs of an
  /// expert's row; W is the same for every block, so L2 serves it). Warps
  /// past the last expert compute a clamped row and store nothing.
  void scoresMMA() {
    Value tokens = kb.dim(numTokens);
    Value wFlat = em.contiguousView(wBase, {kb.idx(experts * hidden)});
    std::array<Value, 2> posA = em.ldmatrixLaneA(lane);
    Value g = em.divu(lane, 4), tig = em.remu(lane, 4);
    const int64_t tiles = group / 16, perPass = 32 * warps;
    auto pairType = VectorType::get({2}, b.getBF16Type());
    for (int64_t pass = 0; pass * perPass < experts; ++pass) {
      Value e0 = kb.addi(kb.idx(pass * perPass), kb.muli(warp, kb.idx(32)));
      SmallVector<Value> init(tiles * 4 * 4, kb.f32(0.0));
      auto loop = scf::ForOp::create(
          b, loc, kb.idx(0), kb.idx(hidden), kb.idx(chunk), init,
          [&](OpBuilder &, Location, Value k0, ValueRange accIn) {
            gpu::BarrierOp::create(b, loc);
            strided(tid, kb.idx(group * chunk), 32 * warps, [&](Value i) {
              Value r = em.divu(i, chunk), k = em.remu(i, chunk);
              Value t = kb.addi(t0, r);
              Value v = memref::LoadOp::create(
                  b, loc, x,
                  ValueRange{kb.minsi(t, kb.subi(tokens, kb.idx(1))),
                             kb.addi(k0, k)});
              Value zero = arith::ConstantOp::create(
                  b, loc, b.getZeroAttr(elementType(x)));
              em.sts(kb.select(kb.lti(t, tokens), v, zero), row, {r, k});
            });
            gpu::BarrierOp::create(b, loc);
            SmallVector<Acc> acc(tiles * 4);
            for (int64_t i = 0; i < tiles * 4; ++i)
              acc[i] = {accIn[4 * i], accIn[4 * i + 1], accIn[4 * i + 2],
                        accIn[4 * i + 3]};
            for (int64_t ks = 0; ks < chunk / 16; ++ks) {
              SmallVector<Value> a;
              for (int64_t m = 0; m < tiles; ++m)
                a.push_back(em.ldmatrix4(row,
                                         {kb.addi(posA[0], kb.idx(16 * m)),
                                          kb.addi(posA[1], kb.idx(16 * ks))},
                                         /*transpose=*/false));
              for (int64_t nt = 0; nt < 4; ++nt) {
                Value e = kb.minsi(kb.addi(e0, kb.addi(kb.idx(8 * nt), g)),
                                   kb.idx(experts - 1));
                Value at =
                    kb.addi(kb.addi(kb.muli(e, kb.idx(hidden)), k0),
                            kb.addi(kb.idx(16 * ks), kb.muli(tig, kb.idx(2))));
                auto load = [&](Value i) {
                  auto ld = vector::LoadOp::create(b, loc, pairType, wFlat,
                                                   ValueRange{i});
                  ld.setAlignment(4);
                  return ld.getResult();
                };
                Value bf = em.stack({load(at), load(kb.addi(at, kb.idx(8)))});
                for (int64_t m = 0; m < tiles; ++m)
                  acc[m * 4 + nt] = em.mma(a[m], bf, acc[m * 4 + nt]);
              }
            }
            SmallVector<Value> out;
            for (const Acc &c : acc)
              out.append(c.begin(), c.end());
            scf::YieldOp::create(b, loc, out);
          });
      // Accumulator (m, nt): c0, c1 at (row 16 m + g, cols e0 + 8 nt +
      // 2 tig, +1), c2, c3 at row + 8.
      for (int64_t m = 0; m < tiles; ++m)
        for (int64_t nt = 0; nt < 4; ++nt)
          for (int64_t r = 0; r < 4; ++r) {
            Value tok = kb.addi(g, kb.idx(16 * m + 8 * (r / 2)));
            Value e = kb.addi(
                e0, kb.addi(kb.idx(8 * nt + r % 2), kb.muli(tig, kb.idx(2))));
            Value v = loop.getResult((m * 4 + nt) * 4 + r);
            kb.ifThen(kb.lti(e, kb.idx(experts)), [&] {
              em.sts(v, logits, {kb.addi(kb.muli(tok, kb.idx(experts)), e)});
            });
          }
    }
    gpu::BarrierOp::create(b, loc);
  }

  /// Step 2 (warp g: token t, its logits from `base`).
  void topK(Value t, Value base) {
    RouterSelection sel{op.getScore(),
                        int64_t(op.getTopK()),
                        op.getRenormalize(),
                        op.getRoutedScalingFactor().convertToDouble(),
                        bias,
                        idx,
                        wts,
                        experts,
                        int64_t(op.getNGroup()),
                        int64_t(op.getTopkGroup())};
    emitWarpTopK(kb, em, sel, lane, t,
                 [&](Value e) { return em.lds(logits, {kb.addi(base, e)}); });
  }

  MoERouterOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  static constexpr int64_t kPad = 8;
  int64_t warps, hidden = 0, experts = 0, numTokens = 0, group = 1, vec = 1;
  int64_t chunk = 0;
  bool tensorCores = false;
  Value x, w, wBase, idx, wts, row, logits, tid, t0, lane, warp;
  KernelOperand bias; // optional
};

struct MoERouterPattern : OpKernelPattern<MoERouterOp> {
  explicit MoERouterPattern(KernelKind kind) : OpKernelPattern(kind) {}
  LogicalResult emit(MoERouterOp op, Adaptor a,
                     KernelEmission &e) const override {
    auto tokens = e.tokenForm(op, a.getInput().shape[0]);
    if (failed(tokens))
      return failure();
    RouterKernel kernel(op, e);
    int64_t group = routerTokensPerBlock(e.config);
    e.setLaunch(*tokens, 1, group - 1, group, {32 * e.config.getWarps(), 1, 1},
                kernel.sharedBytes());
    kernel.emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

struct MoERouterRowsPattern : MoERouterPattern {
  MoERouterRowsPattern() : MoERouterPattern(KernelKind::moe_router_rows) {}
};
struct MoERouterMMAPattern : MoERouterPattern {
  MoERouterMMAPattern() : MoERouterPattern(KernelKind::moe_router_mma) {}
};

/// k3.moe_topk (kernel moe_topk_rows, tile []): a warp per token, `warps`
/// tokens per block, each lane reading its experts' logits from global
/// memory (coalesced over the lanes) into emitWarpTopK.
struct MoETopKRowsPattern : OpKernelPattern<MoETopKOp> {
  MoETopKRowsPattern() : OpKernelPattern(KernelKind::moe_topk_rows) {}
  LogicalResult emit(MoETopKOp op, Adaptor a,
                     KernelEmission &e) const override {
    KernelOperand logits = a.getLogits();
    auto tokens = e.tokenForm(op, logits.shape[0]);
    if (failed(tokens))
      return failure();
    int64_t warps = e.config.getWarps();
    e.setLaunch(*tokens, 1, warps - 1, warps, {32 * warps, 1, 1});
    KernelBuilder &kb = e.kb;
    OpBuilder &b = kb.builder();
    Location loc = op.getLoc();
    MMAEmitter em{b, loc, kb};
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value block = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value lane = em.remu(tid, 32);
    Value t = kb.addi(kb.muli(block, kb.idx(warps)), em.divu(tid, 32));
    RouterSelection sel{op.getScore(),
                        int64_t(op.getTopK()),
                        op.getRenormalize(),
                        op.getRoutedScalingFactor().convertToDouble(),
                        a.getCorrectionBias(),
                        resultOf(e.outputs, op.getIndices()).full,
                        resultOf(e.outputs, op.getWeights()).full,
                        logits.shape[1],
                        int64_t(op.getNGroup()),
                        int64_t(op.getTopkGroup())};
    kb.ifThen(kb.lti(t, kb.dim(logits.shape[0])), [&] {
      emitWarpTopK(kb, em, sel, lane, t,
                   [&](Value ex) { return kb.load(logits.full, {t, ex}); });
    });
    e.finishSinglePhase(loc);
    return success();
  }
};

} // namespace

void mlir::k3::populateMoERouterRowsPattern(KernelPatternSet &patterns) {
  patterns.add<MoERouterRowsPattern, MoERouterMMAPattern, MoETopKRowsPattern>();
}

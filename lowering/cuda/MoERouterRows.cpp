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
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
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
  }

  /// Dynamic shared memory: the logits [G][E] f32, then the rows [G][H] in
  /// x's element type (16-byte aligned for the vector loads).
  int64_t sharedBytes() const {
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
    row = em.sharedView(smem, elementType(x), kb.idx(rowsOffset()),
                        {group * hidden});
    scores();
    Value t = kb.addi(t0, warp);
    kb.ifThen(
        kb.andi(kb.lti(warp, kb.idx(group)), kb.lti(t, kb.dim(numTokens))),
        [&] { topK(t, kb.muli(warp, kb.idx(experts))); });
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

  Value warpMax(Value v) {
    for (int64_t off = 16; off >= 1; off /= 2)
      v = kb.maxf(v, em.shuffleXor(v, off));
    return v;
  }

  /// Step 2 (warp g: token t, its logits from `base`).
  void topK(Value t, Value base) {
    int64_t slots = (experts + 31) / 32;
    SmallVector<Value> ids, score, biased;
    for (int64_t i = 0; i < slots; ++i) {
      Value e = kb.addi(lane, kb.idx(32 * i));
      Value in = kb.lti(e, kb.idx(experts));
      Value at = kb.minsi(e, kb.idx(experts - 1));
      ids.push_back(e);
      score.push_back(kb.select(in, em.lds(logits, {kb.addi(base, at)}),
                                kb.f32(-INFINITY)));
    }
    if (op.getScore() == RouterScore::softmax) {
      Value m = kb.f32(-INFINITY);
      for (Value s : score)
        m = kb.maxf(m, s);
      m = warpMax(m);
      Value z = kb.f32(0.0);
      for (Value &s : score) {
        s = kb.exp(kb.sub(s, m)); // -inf (past E) gives 0
        z = kb.add(z, s);
      }
      Value inv = kb.div(kb.f32(1.0), em.warpSum(z));
      for (Value &s : score)
        s = kb.mul(s, inv);
    } else {
      for (Value &s : score)
        s = kb.sigmoid(s);
    }
    for (int64_t i = 0; i < slots; ++i) {
      Value in = kb.lti(ids[i], kb.idx(experts));
      Value s = score[i];
      if (bias)
        s = kb.add(s,
                   kb.load(bias.full, {kb.minsi(ids[i], kb.idx(experts - 1))}));
      biased.push_back(kb.select(in, s, kb.f32(-INFINITY)));
    }
    int64_t k = op.getTopK();
    SmallVector<Value> chosenIds, chosenW;
    Value total = kb.f32(0.0);
    for (int64_t j = 0; j < k; ++j) {
      // The lane's best untaken slot (first maximum), then the warp's.
      Value bv = kb.f32(-INFINITY), bi = kb.idx(experts), bs = kb.f32(0.0);
      for (int64_t i = 0; i < slots; ++i) {
        Value better = kb.gtf(biased[i], bv);
        bv = kb.select(better, biased[i], bv);
        bi = kb.select(better, ids[i], bi);
        bs = kb.select(better, score[i], bs);
      }
      Value bi32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), bi);
      for (int64_t off = 16; off >= 1; off /= 2) {
        Value ov = em.shuffleXor(bv, off), oi = em.shuffleXor(bi32, off),
              os = em.shuffleXor(bs, off);
        Value eq =
            arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, ov, bv);
        Value lower =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, oi, bi32);
        Value take = kb.ori(kb.gtf(ov, bv), kb.andi(eq, lower));
        bv = kb.select(take, ov, bv);
        bi32 = kb.select(take, oi, bi32);
        bs = kb.select(take, os, bs);
      }
      Value winner = arith::IndexCastOp::create(b, loc, b.getIndexType(), bi32);
      for (int64_t i = 0; i < slots; ++i)
        biased[i] =
            kb.select(kb.eqi(ids[i], winner), kb.f32(-INFINITY), biased[i]);
      chosenIds.push_back(winner);
      chosenW.push_back(bs);
      total = kb.add(total, bs);
    }
    double factor = op.getRoutedScalingFactor().convertToDouble();
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      for (int64_t j = 0; j < k; ++j) {
        Value wj = chosenW[j];
        if (op.getRenormalize())
          wj = kb.div(wj, kb.add(total, kb.f32(1e-20)));
        kb.storeIndex(chosenIds[j], idx, {t, kb.idx(j)});
        kb.store(kb.mul(wj, kb.f32(factor)), wts, {t, kb.idx(j)});
      }
    });
  }

  MoERouterOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t warps, hidden = 0, experts = 0, numTokens = 0, group = 1, vec = 1;
  Value x, w, wBase, idx, wts, row, logits, tid, t0, lane, warp;
  KernelOperand bias; // optional
};

struct MoERouterRowsPattern : OpKernelPattern<MoERouterOp> {
  MoERouterRowsPattern() : OpKernelPattern(KernelKind::moe_router_rows) {}
  LogicalResult emit(MoERouterOp op, Adaptor a,
                     KernelEmission &e) const override {
    auto tokens = e.kb.linearForm(e.kb.dim(a.getInput().shape[0]));
    if (!tokens)
      return op.emitOpError() << "moe_router_rows needs a token count linear "
                                 "in one runtime size";
    RouterKernel kernel(op, e);
    int64_t group = routerTokensPerBlock(e.config);
    e.setLaunch(*tokens, 1, group - 1, group, {32 * e.config.getWarps(), 1, 1},
                kernel.sharedBytes());
    kernel.emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateMoERouterRowsPattern(KernelPatternSet &patterns) {
  patterns.add<MoERouterRowsPattern>();
}

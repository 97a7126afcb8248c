//===- LatentAttentionSplit.cpp - k3.latent_attention, split-KV decode ----===//
//
// Kernel `latent_attention_split`: the absorbed MLA decode step in three
// launches (LatentSplitPlan.h). This file has the pattern (workspace,
// launches), phase 0 (absorb) and phase 2 (combine, W_v, cache append);
// phase 1 is LatentSplitAttend.cpp.
//
// Phases 0 and 2 take a block per (head h, group of 8 tokens), 4 warps, so
// that the head's W_k (W_v) rows are read once per 8 tokens, not per token.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/StateInPlace.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/CachedRowsCopy.h"
#include "lowering/cuda/LatentSplitPlan.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kThreads = 128;
constexpr int64_t kGroup = kLatentSplitTokens;
/// Phase 0: latent channels a block, slices of the Dn rows (one a warp),
/// rows whose loads are issued together.
constexpr int64_t kAbsorbChannels = 128;
constexpr int64_t kAbsorbSlices = kThreads / (kAbsorbChannels / 4);
constexpr int64_t kAbsorbUnroll = 16;
/// Phase 2: partial rows loaded at a time.
constexpr int64_t kCombineUnroll = 8;

/// Phases 0 and 2: the views, and the block's head and first token.
class SplitKernel {
public:
  SplitKernel(LatentAttentionOp op, const KernelEmission &e)
      : op(op), kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        d(LatentSplitDims::of(op, e.config)) {
    auto ops = operandsOf(op, e.inputs);
    q = ops.getQ().full;
    tokens = kb.dim(ops.getQ().shape[0]);
    latent = ops.getLatent();
    kvb = em.contiguousView(ops.getKvB());
    cache = ops.getLatentCache();
    lens = ops.getCacheLens().full;
    if (KernelOperand c = ops.getCuSeqlens())
      cu = c.full;
    o = resultOf(e.outputs, op.getResult()).full;
    cacheOut = resultOf(e.outputs, op.getLatentCacheOut());
    size_t ws = op->getNumResults();
    qa = em.contiguousView(e.outputs[ws]);
    partFirst = em.contiguousView(e.outputs[ws + 1]);
    partRest = em.contiguousView(e.outputs[ws + 2]);
    scaleLog2 = op.getScale().convertToDouble() / std::log(2.0);
  }

  /// Phase 0: qa[t, h] = [q_nope W_k | q_pe] scale log2(e), bf16. A block
  /// per (head, 8 tokens, 128 latent channels); its 4 warps split the Dn
  /// rows of W_k and meet in shared memory.
  void absorb() {
    blockIds(kAbsorbChunks());
    kb.ifThen(kb.lti(t0, tokens), [&] {
      Value smem = em.dynamicSharedMemory();
      Value qn = em.sharedView(smem, b.getF32Type(), kb.idx(0), {kGroup, d.dn});
      Value part =
          em.sharedView(smem, b.getF32Type(), kb.idx(4 * kGroup * d.dn),
                        {kAbsorbSlices, kGroup, kAbsorbChannels});
      forThreads(kGroup * d.dn, [&](Value i) {
        Value u = em.divu(i, d.dn), c = em.remu(i, d.dn);
        em.sts(kb.load(q, {token(u), h, c}), qn, {u, c});
      });
      gpu::BarrierOp::create(b, loc);
      absorbSlice(qn, part);
      gpu::BarrierOp::create(b, loc);
      absorbSum(part);
      kb.ifThen(kb.eqi(chunk, kb.idx(0)), [&] { copyRopeQueries(); });
    });
  }

  /// Phase 2: the splits combined per (token, head), o = W_v ctx, and the
  /// cache's new rows (and, where the output cache is another buffer, its
  /// old rows).
  void combine() {
    blockIds();
    // An unread cache (the last tokens' attention after a prefill's
    // append, StateInPlace.h) is written not at all.
    if (!leavesStateUnwritten(op))
      copyOldRows();
    kb.ifThen(kb.lti(t0, tokens), [&] {
      Value smem = em.dynamicSharedMemory();
      Value ctx =
          em.sharedView(smem, b.getF32Type(), kb.idx(0), {kGroup, d.rank});
      Value weights = em.sharedView(smem, b.getF32Type(),
                                    kb.idx(4 * kGroup * d.rank), {d.target});
      Value scratch = em.sharedView(smem, b.getF32Type(),
                                    kb.idx(4 * (kGroup * d.rank + d.target)),
                                    {2 * kThreads / 32});
      Value splits = latentSplitsPerToken(kb, d, tokens);
      scf::ForOp::create(b, loc, kb.idx(0), kb.idx(kGroup), kb.idx(1),
                         ValueRange{},
                         [&](OpBuilder &, Location, Value u, ValueRange) {
                           Value t = kb.addi(t0, u);
                           kb.ifThen(kb.lti(t, tokens), [&] {
                             combineToken(ctx, weights, scratch, u, t, splits);
                           });
                           scf::YieldOp::create(b, loc);
                         });
      gpu::BarrierOp::create(b, loc);
      project(ctx);
    });
  }

private:
  /// Block (chunk, head, token group), chunk fastest.
  void blockIds(int64_t chunks = 1) {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    chunk = em.remu(bid, chunks);
    Value rest = em.divu(bid, chunks);
    h = em.remu(rest, d.heads);
    t0 = kb.muli(em.divu(rest, d.heads), kb.idx(kGroup));
  }
  int64_t kAbsorbChunks() const { return d.rank / kAbsorbChannels; }
  /// Token t0 + u, clamped to the last (its results are not stored).
  Value token(Value u) {
    return kb.minsi(kb.addi(t0, u), kb.subi(tokens, kb.idx(1)));
  }
  /// for (i = tid; i < n; i += threads) body(i), unrolled.
  void forThreads(int64_t n, const std::function<void(Value)> &body) {
    for (int64_t k = 0; k < (n + kThreads - 1) / kThreads; ++k) {
      Value i = kb.addi(tid, kb.idx(k * kThreads));
      if ((k + 1) * kThreads <= n)
        body(i);
      else
        kb.ifThen(kb.lti(i, kb.idx(n)), [&] { body(i); });
    }
  }

  /// Thread (slice, quad): channels 4 quad .. + 3 of the block's chunk,
  /// summed over its slice of the Dn rows of W_k (all of its rows' loads
  /// issued before the FMAs: a few round trips, not one a row), into
  /// `part`.
  void absorbSlice(Value qn, Value part) {
    const int64_t rows = d.dn / kAbsorbSlices;
    Value quad = em.remu(tid, kAbsorbChannels / 4);
    Value slice = em.divu(tid, kAbsorbChannels / 4);
    Value c = kb.addi(kb.muli(chunk, kb.idx(kAbsorbChannels)),
                      kb.muli(quad, kb.idx(4)));
    Value row0 =
        kb.addi(kb.muli(h, kb.idx(d.dn + d.dv)), kb.muli(slice, kb.idx(rows)));
    SmallVector<Value> acc(4 * kGroup, kb.f32(0));
    for (int64_t r0 = 0; r0 < rows; r0 += kAbsorbUnroll) {
      SmallVector<SmallVector<Value>> w;
      for (int64_t r = r0; r < std::min(rows, r0 + kAbsorbUnroll); ++r)
        w.push_back(em.loadVector(kvb, {kb.addi(row0, kb.idx(r)), c}, 4));
      for (int64_t r = r0; r < std::min(rows, r0 + kAbsorbUnroll); ++r) {
        Value dd = kb.addi(kb.muli(slice, kb.idx(rows)), kb.idx(r));
        for (int64_t u = 0; u < kGroup; ++u) {
          Value x = em.lds(qn, {kb.idx(u), dd});
          for (int64_t e = 0; e < 4; ++e)
            acc[4 * u + e] = em.fmaContract(x, w[r - r0][e], acc[4 * u + e]);
        }
      }
    }
    for (int64_t u = 0; u < kGroup; ++u)
      em.storeVector(ArrayRef<Value>(acc).slice(4 * u, 4), part,
                     {slice, kb.idx(u), kb.muli(quad, kb.idx(4))});
  }

  /// The slices' sums, scaled, as bf16 into qa.
  void absorbSum(Value part) {
    auto vt = VectorType::get({4}, b.getBF16Type());
    forThreads(kGroup * kAbsorbChannels / 4, [&](Value i) {
      Value u = em.divu(i, kAbsorbChannels / 4);
      Value c = kb.muli(em.remu(i, kAbsorbChannels / 4), kb.idx(4));
      Value t = kb.addi(t0, u);
      kb.ifThen(kb.lti(t, tokens), [&] {
        SmallVector<Value> sum(4, kb.f32(0));
        for (int64_t sl = 0; sl < kAbsorbSlices; ++sl) {
          SmallVector<Value> x = em.loadVector(part, {kb.idx(sl), u, c}, 4);
          for (int64_t e = 0; e < 4; ++e)
            sum[e] = kb.add(sum[e], x[e]);
        }
        SmallVector<Value> hs;
        for (Value x : sum)
          hs.push_back(em.bf16(kb.mul(x, kb.f32(scaleLog2))));
        Value col = kb.addi(kb.muli(chunk, kb.idx(kAbsorbChannels)), c);
        em.alignedStore(vector::FromElementsOp::create(b, loc, vt, hs), qa,
                        {t, h, col});
      });
    });
  }

  /// qa's last Dr channels: q_pe scaled.
  void copyRopeQueries() {
    forThreads(kGroup * d.dr, [&](Value i) {
      Value u = em.divu(i, d.dr), e = em.remu(i, d.dr);
      Value t = kb.addi(t0, u);
      kb.ifThen(kb.lti(t, tokens), [&] {
        Value x = kb.load(q, {t, h, kb.addi(kb.idx(d.dn), e)});
        em.sts(em.bf16(kb.mul(x, kb.f32(scaleLog2))), qa,
               {t, h, kb.addi(kb.idx(d.rank), e)});
      });
    });
  }

  /// `n` words at column `col` of the partial row of (item, h).
  SmallVector<Value> loadPartial(Value item, Value col, int64_t n) {
    Value p = kb.idx(d.target);
    SmallVector<Type> types(n, b.getF32Type());
    auto branch = scf::IfOp::create(b, loc, types, kb.lti(item, p), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b, loc, em.loadVector(partFirst, {item, h, col}, n));
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(
        b, loc, em.loadVector(partRest, {kb.subi(item, p), h, col}, n));
    return SmallVector<Value>(branch.getResults());
  }

  /// The block's maximum (sum) of one value a thread, through `scratch`
  /// at `slot` (a barrier).
  Value blockReduce(Value v, Value scratch, int64_t slot, bool isMax) {
    return em.blockReduce(
        v, tid, kThreads / 32, scratch, slot,
        [&](Value x, Value y) { return isMax ? kb.maxf(x, y) : kb.add(x, y); });
  }

  /// One token's splits: its first work item, the non-empty splits and the
  /// last of them.
  struct TokenSplits {
    Value first, used, last;
  };

  /// The splits' weights 2^(m_j - M) into `weights` (M their maximum) and
  /// their total weight sum_j 2^(m_j - M) l_j: a split's (m, l) a thread.
  Value splitWeights(const TokenSplits &ts, Value weights, Value scratch) {
    const int64_t perThread = (d.target + kThreads - 1) / kThreads;
    SmallVector<Value> ms, ls, oks, js;
    Value big = kb.f32(-INFINITY);
    for (int64_t k = 0; k < perThread; ++k) {
      Value j = kb.addi(tid, kb.idx(k * kThreads));
      Value ok = kb.lti(j, ts.used);
      SmallVector<Value> ml = loadPartial(
          kb.addi(ts.first, kb.minsi(j, ts.last)), kb.idx(d.rank), 2);
      ms.push_back(kb.select(ok, ml[0], kb.f32(-INFINITY)));
      ls.push_back(ml[1]);
      oks.push_back(ok);
      js.push_back(j);
      big = kb.maxf(big, ms.back());
    }
    big = blockReduce(big, scratch, 0, /*isMax=*/true);
    Value total = kb.f32(0);
    for (int64_t k = 0; k < perThread; ++k) {
      Value w = math::Exp2Op::create(b, loc, kb.sub(ms[k], big));
      w = kb.select(oks[k], w, kb.f32(0));
      kb.ifThen(oks[k], [&] { em.sts(w, weights, {js[k]}); });
      total = em.fmaContract(w, ls[k], total);
    }
    return blockReduce(total, scratch, kThreads / 32, /*isMax=*/false);
  }

  /// The thread's channels of sum_j weights[j] ctx_j, kCombineUnroll
  /// partial rows loaded at a time.
  SmallVector<Value> weightedContext(const TokenSplits &ts, Value weights) {
    const int64_t chunks = d.rank / 4 / kThreads;
    SmallVector<Value> init(4 * chunks, kb.f32(0));
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), ts.used,
                                   kb.idx(kCombineUnroll), init);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j0 = loop.getInductionVar();
    SmallVector<Value> acc(loop.getRegionIterArgs());
    SmallVector<Value> w;
    SmallVector<SmallVector<Value>> x;
    for (int64_t v = 0; v < kCombineUnroll; ++v) {
      Value j = kb.addi(j0, kb.idx(v));
      Value jc = kb.minsi(j, ts.last);
      w.push_back(
          kb.select(kb.lti(j, ts.used), em.lds(weights, {jc}), kb.f32(0)));
      for (int64_t k = 0; k < chunks; ++k)
        x.push_back(loadPartial(kb.addi(ts.first, jc), channelQuad(k), 4));
    }
    for (int64_t v = 0; v < kCombineUnroll; ++v)
      for (int64_t k = 0; k < chunks; ++k)
        for (int64_t e = 0; e < 4; ++e)
          acc[4 * k + e] =
              em.fmaContract(w[v], x[v * chunks + k][e], acc[4 * k + e]);
    scf::YieldOp::create(b, loc, acc);
    b.setInsertionPointAfter(loop);
    return SmallVector<Value>(loop.getResults());
  }
  /// The thread's k-th 4 context channels.
  Value channelQuad(int64_t k) {
    return kb.muli(kb.addi(tid, kb.idx(k * kThreads)), kb.idx(4));
  }

  /// ctx[u] = sum_j 2^(m_j - M) ctx_j / sum_j 2^(m_j - M) l_j over token
  /// t's non-empty splits (M their maximum); then its row appended.
  void combineToken(Value ctx, Value weights, Value scratch, Value u, Value t,
                    Value splits) {
    auto [start, seq] =
        cu ? emitSequenceOf(kb, cu, t) : std::pair{kb.idx(0), kb.idx(0)};
    Value oldLen = kb.loadIndex(lens, {seq});
    LatentSplit split = latentSplitOf(
        kb, d, latentKeyCount(kb, t, start, oldLen, kb.dim(cache.shape[1])),
        splits);
    TokenSplits ts{kb.muli(t, splits), split.used,
                   kb.subi(split.used, kb.idx(1))};
    Value inv = kb.div(kb.f32(1.0), splitWeights(ts, weights, scratch));
    SmallVector<Value> sum = weightedContext(ts, weights);
    for (int64_t k = 0; k < d.rank / 4 / kThreads; ++k) {
      SmallVector<Value> vals;
      for (int64_t e = 0; e < 4; ++e)
        vals.push_back(kb.mul(sum[4 * k + e], inv));
      em.storeVector(vals, ctx, {u, channelQuad(k)});
    }
    if (!leavesStateUnwritten(op))
      appendRow(t, start, seq, oldLen);
  }

  /// The head-0 block of token t writes its latent at row oldLen + t -
  /// start of its sequence's cache (unless past the capacity).
  void appendRow(Value t, Value start, Value seq, Value oldLen) {
    Value pos = kb.addi(oldLen, kb.subi(t, start));
    Value in = kb.lti(pos, kb.dim(cache.shape[1]));
    kb.ifThen(kb.andi(kb.eqi(h, kb.idx(0)), in), [&] {
      forThreads(d.width(), [&](Value c) {
        kb.store(kb.load(latent.full, {t, c}), cacheOut.full, {seq, pos, c});
      });
    });
  }

  /// Where the output cache is not the input's buffer: the old rows copied
  /// by all blocks of the phase (grid-stride). Phase 1 read the input.
  void copyOldRows() {
    Value grid = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    emitCopyCachedRows(kb, cache, cacheOut, lens,
                       kb.addi(kb.muli(bid, kb.idx(kThreads)), tid),
                       kb.muli(grid, kb.idx(kThreads)));
  }

  /// o[t, h, j] = W_v[j] . ctx[t]: a warp per output j (outputs warp,
  /// warp + 4, ... in rounds of four), each lane 8 consecutive channels of
  /// every 256. The next round's weight rows are loaded while this round's
  /// dot products run (a round's loads waited for were a round trip each:
  /// most of a short-context step's combine), over the group's tokens only.
  void project(Value ctx) {
    Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
    const int64_t rounds = d.dv / 16;
    Value rowBase = kb.addi(kb.muli(h, kb.idx(d.dn + d.dv)), kb.idx(d.dn));
    auto output = [&](Value round, int64_t k) {
      return kb.addi(
          warp,
          kb.muli(kb.addi(kb.muli(round, kb.idx(4)), kb.idx(k)), kb.idx(4)));
    };
    auto laneChannels = [&](Value mem, Value row) {
      SmallVector<Value> x;
      for (int64_t v = 0; v < d.rank / 256; ++v)
        llvm::append_range(
            x,
            em.loadVector(
                mem, {row, kb.addi(kb.muli(lane, kb.idx(8)), kb.idx(256 * v))},
                8));
      return x;
    };
    auto loadRound = [&](Value round) {
      SmallVector<Value> w;
      for (int64_t k = 0; k < 4; ++k)
        llvm::append_range(
            w, laneChannels(kvb, kb.addi(rowBase, output(round, k))));
      return w;
    };
    Value count = kb.minsi(kb.idx(kGroup), kb.subi(tokens, t0));
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.idx(rounds), kb.idx(1),
                                   loadRound(kb.idx(0)));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value round = loop.getInductionVar();
    ValueRange w = loop.getRegionIterArgs();
    SmallVector<Value> next =
        loadRound(kb.minsi(kb.addi(round, kb.idx(1)), kb.idx(rounds - 1)));
    const int64_t per = w.size() / 4;
    scf::ForOp::create(b, loc, kb.idx(0), count, kb.idx(1), ValueRange{},
                       [&](OpBuilder &, Location, Value u, ValueRange) {
                         SmallVector<Value> x = laneChannels(ctx, u);
                         Value t = kb.addi(t0, u);
                         for (int64_t k = 0; k < 4; ++k) {
                           Value dot = kb.f32(0);
                           for (int64_t i = 0; i < per; ++i)
                             dot = em.fmaContract(w[k * per + i], x[i], dot);
                           Value sum = em.warpSum(dot);
                           kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
                             kb.store(sum, o, {t, h, output(round, k)});
                           });
                         }
                         scf::YieldOp::create(b, loc);
                       });
    scf::YieldOp::create(b, loc, next);
  }

  LatentAttentionOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  LatentSplitDims d;
  Value q, kvb, lens, cu, o, qa, partFirst, partRest;
  /// The query rows (a decode step's tokens, or a prefill's last tokens:
  /// not the entry's num_tokens there).
  Value tokens;
  KernelOperand latent, cache, cacheOut;
  double scaleLog2 = 0;
  Value tid, h, t0, chunk;
};

struct LatentAttentionSplitPattern : OpKernelPattern<LatentAttentionOp> {
  LatentAttentionSplitPattern()
      : OpKernelPattern(KernelKind::latent_attention_split) {}

  SmallVector<KernelWorkspace>
  workspace(Operation *op, KernelConfigAttr config,
            ArrayRef<SymShape> inShapes) const override {
    auto o = cast<LatentAttentionOp>(op);
    LatentSplitDims d = LatentSplitDims::of(o, config);
    MLIRContext *ctx = op->getContext();
    Type f32 = Float32Type::get(ctx), bf16 = BFloat16Type::get(ctx);
    int64_t tokens = inShapes[0][0];
    return {{bf16, SymShape{tokens, d.heads, d.width()}},
            {f32, SymShape{d.target, d.heads, d.rowWords()}},
            {f32, SymShape{tokens, d.heads, d.rowWords()}}};
  }

  LogicalResult emit(LatentAttentionOp op, Adaptor operands,
                     KernelEmission &e) const override {
    if (!operands.getLatentCache())
      return op.emitOpError()
             << "latent_attention_split needs a latent cache (a decode step)";
    FailureOr<KernelBuilder::Linear> tokens =
        e.tokenForm(op, operands.getQ().shape[0]);
    if (failed(tokens))
      return failure();
    LatentSplitDims d = LatentSplitDims::of(op, e.config);
    SplitKernel kernel(op, e);
    e.emitPhase(0, [&] { kernel.absorb(); });
    e.emitPhase(1, [&] {
      MMAEmitter em{e.kb.builder(), e.kb.getLoc(), e.kb};
      auto ops = operandsOf(op, e.inputs);
      size_t ws = op->getNumResults();
      KernelOperand cu = ops.getCuSeqlens();
      emitLatentSplitAttend(
          {e.kb, d, e.kb.dim(ops.getQ().shape[0]),
           em.contiguousView(e.outputs[ws]), ops.getLatentCache(),
           em.contiguousView(ops.getLatentCache()),
           em.contiguousView(ops.getLatent()), ops.getCacheLens().full,
           cu ? cu.full : Value(), em.contiguousView(e.outputs[ws + 1]),
           em.contiguousView(e.outputs[ws + 2])});
    });
    e.emitPhase(2, [&] { kernel.combine(); });
    const int64_t attendThreads = 32 * 4 * (d.headsPerBlock / 16);
    const int64_t groups = d.headGroups();
    const int64_t absorbBlocks = d.heads * (d.rank / kAbsorbChannels);
    e.finishPhases(
        op.getLoc(),
        {e.launchShape(*tokens, absorbBlocks, (kGroup - 1) * absorbBlocks,
                       kGroup, {kThreads, 1, 1},
                       4 * kGroup * (d.dn + kAbsorbSlices * kAbsorbChannels)),
         e.launchShape(*tokens, groups, (d.target - 1) * groups, 1,
                       {attendThreads, 1, 1},
                       latentSplitAttendSharedBytes(d, latentCacheType(op))),
         e.launchShape(*tokens, d.heads, (kGroup - 1) * d.heads, kGroup,
                       {kThreads, 1, 1},
                       4 * (kGroup * d.rank + d.target + 2 * kThreads / 32))});
    return success();
  }
};

} // namespace

void mlir::k3::populateLatentAttentionSplitPattern(KernelPatternSet &patterns) {
  patterns.add<LatentAttentionSplitPattern>();
}

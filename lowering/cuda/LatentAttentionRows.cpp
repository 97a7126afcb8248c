//===- LatentAttentionRows.cpp - k3.latent_attention, a block per head -===//
//
// The latent (absorbed) form of MLA attention with a block per (token,
// group of G heads) (config kernel `latent_attention_rows`, tile [G]).
// Each key is read once per block and scored against all G heads' queries:
// with a block per head a 2048-token prefill of the real-width cut re-read
// every key 32 times from L2 (17.2 ms, bench/results/profile-gpu/
// real4-bf16-T2048.txt). A decode step keeps G = 1 (more blocks for one
// token). The loop nest gives each
// (token, head) one thread, which then does ~2.4e5 dependent FMAs through
// local memory: 9.9 ms per decode step of the real-width Kimi-Linear cut
// (bench/results/profile-gpu/real4-T64.txt). Here the block's warps share
// the work:
//
//   1. the query's nope part absorbed into the latent space, qa = q_nope
//      W_k (W_k: the head's first Dn rows of kv_b), a thread per latent
//      channel, into shared memory;
//   2. the keys split over the warps (key s to warp s mod W); per key the
//      lanes hold channels lane, lane + 32, ... of the latent (and of
//      k_pe), the score is a warp sum, and each warp keeps an online
//      softmax (running max m, sum l) and its lanes' channels of
//      sum_s p_s latent_s;
//   3. the warps' partial results merged in shared memory (rescaled to the
//      common max), ctx = sum_s p_s latent_s / l;
//   4. the output o[j] = W_v[j] . ctx, a warp per output channel (W_v: the
//      head's last Dv rows of kv_b).
//
// Keys come from the old cache (positions < cache_lens[n]) or from the
// new tokens' latents, never from the updated cache, so the cache update
// (the old rows copied where the output cache is another buffer, the new
// rows appended) runs in the same launch without ordering: every block
// copies a grid-stride share of the old rows, and the head-0 block of
// each token appends its row.
//
// Numerics: f32 throughout (the operands widened on load); the sums run
// in another order than the loop nest's, so results match it to rounding.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/StateInPlace.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/CachedRowsCopy.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The kernel body, step by step.
class LatentRowsKernel {
public:
  LatentRowsKernel(LatentAttentionOp op, const KernelEmission &e)
      : op(op), kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        warps(e.config.getWarps()), threads(32 * warps) {
    auto ops = operandsOf(op, e.inputs);
    q = ops.getQ().full;
    latent = ops.getLatent().full;
    kvb = ops.getKvB().full;
    cache = ops.getLatentCache();
    lens = ops.getCacheLens();
    cu = ops.getCuSeqlens();
    o = resultOf(e.outputs, op.getResult()).full;
    if (cache)
      cacheOut = resultOf(e.outputs, op.getLatentCacheOut());
    numTokens = kb.dim(ops.getQ().shape[0]);
    heads = op.getNumHeads();
    dn = op.getQkNopeHeadDim();
    dr = op.getQkRopeHeadDim();
    dv = op.getVHeadDim();
    rank = op.getKvLoraRank();
    ArrayRef<int64_t> tile = e.config.getTile();
    group = tile.empty() ? 1 : tile[0];
    scale = kb.f32(op.getScale().convertToDouble());
    allocShared(e);
  }

  void emit() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
    t = em.divu(bid, heads / group);
    h = kb.muli(em.remu(bid, heads / group), kb.idx(group)); // first head
    std::tie(start, seq) =
        cu ? emitSequenceOf(kb, cu.full, t) : std::pair{kb.idx(0), kb.idx(0)};
    oldLen = cache ? kb.loadIndex(lens.full, {seq}) : kb.idx(0);
    // An unread cache (StateInPlace.h) is written not at all.
    if (cache && !leavesStateUnwritten(op))
      updateCache(bid);
    Value count = kb.addi(kb.subi(t, start), kb.idx(1));
    if (cache)
      count = kb.minsi(kb.addi(count, oldLen), kb.dim(cache.shape[1]));
    stageQuery();
    absorbQuery();
    gpu::BarrierOp::create(b, loc);
    SmallVector<OnlineSoftmax> parts = attendKeys(count);
    for (int64_t g = 0; g < group; ++g)
      mergeWarps(parts[g], g);
    projectValues();
  }

private:
  /// Running softmax state of a warp: max, sum, and the lane's channels of
  /// the probability-weighted latent sum.
  struct OnlineSoftmax {
    Value m, l;
    SmallVector<Value> acc;
  };

  int64_t channelsPerLane() const { return (rank + 31) / 32; }
  int64_t peChannelsPerLane() const { return (dr + 31) / 32; }

  /// One f32 shared array; the regions at fixed offsets (in words): per
  /// head of the group its query (nope, pe), absorbed query and context;
  /// the warps' partial softmax states, merged one head at a time.
  void allocShared(const KernelEmission &e) {
    offQNope = 0;
    offQa = offQNope + group * (dn + dr);
    offM = offQa + group * rank;
    offL = offM + warps;
    offAcc = offL + warps;
    offCtx = offAcc + warps * rank;
    int64_t words = offCtx + group * rank;
    smem = em.workgroupArray(e.fn, b.getF32Type(), words);
  }
  Value lds(int64_t base, Value i) {
    return em.lds(smem, {kb.addi(kb.idx(base), i)});
  }
  void sts(Value v, int64_t base, Value i) {
    em.sts(v, smem, {kb.addi(kb.idx(base), i)});
  }

  /// for (i = tid; i < n; i += threads) body(i).
  void forThreads(Value n, const std::function<void(Value)> &body) {
    scf::ForOp::create(b, loc, tid, n, kb.idx(threads), ValueRange{},
                       [&](OpBuilder &, Location, Value i, ValueRange) {
                         body(i);
                         scf::YieldOp::create(b, loc);
                       });
  }

  /// The old rows copied to the output cache unless it is the input
  /// buffer (a grid-stride share per block), and token t's row appended by
  /// its head-0 block. Disjoint writes; nothing here is read by attention.
  void updateCache(Value bid) {
    Value len = kb.dim(cache.shape[1]);
    int64_t width = cache.shape[2];
    Value out = cacheOut.full;
    emitCopyCachedRows(
        kb, cache, cacheOut, lens.full,
        kb.addi(kb.muli(bid, kb.idx(threads)), tid),
        kb.muli(kb.muli(numTokens, kb.idx(heads / group)), kb.idx(threads)));
    Value pos = kb.addi(oldLen, kb.subi(t, start));
    kb.ifThen(kb.andi(kb.eqi(h, kb.idx(0)), kb.lti(pos, len)), [&] {
      forThreads(kb.idx(width), [&](Value c) {
        kb.store(kb.load(latent, {t, c}), out, {seq, pos, c});
      });
    });
  }

  /// The group's queries, head g at offQNope + g (Dn + Dr).
  void stageQuery() {
    forThreads(kb.idx(group * (dn + dr)), [&](Value i) {
      Value g = em.divu(i, dn + dr), d = em.remu(i, dn + dr);
      sts(kb.load(q, {t, kb.addi(h, g), d}), offQNope, i);
    });
    gpu::BarrierOp::create(b, loc);
  }
  /// Query channel d of head g of the group, from shared memory.
  Value queryAt(int64_t g, Value d) { return lds(offQNope + g * (dn + dr), d); }

  /// qa_g[r] = sum_d q_nope_g[d] kv_b[(h + g) (Dn + Dv) + d, r].
  void absorbQuery() {
    forThreads(kb.idx(group * rank), [&](Value i) {
      Value g = em.divu(i, rank), r = em.remu(i, rank);
      Value headRow = kb.muli(kb.addi(h, g), kb.idx(dn + dv));
      Value qRow = kb.muli(g, kb.idx(dn + dr));
      auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.idx(dn), kb.idx(1),
                                     ValueRange{kb.f32(0.0)});
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(loop.getBody());
        Value d = loop.getInductionVar();
        Value w = kb.load(kvb, {kb.addi(headRow, d), r});
        scf::YieldOp::create(
            b, loc,
            ValueRange{em.fmaContract(lds(offQNope, kb.addi(qRow, d)), w,
                                      loop.getRegionIterArgs()[0])});
      }
      sts(loop.getResult(0), offQa, i);
    });
  }

  /// Key s's channel c (c < R + Dr): the old cache or a new token's latent.
  Value keyAt(Value s, Value c) {
    if (!cache)
      return kb.load(latent, {kb.addi(start, s), c});
    Value isOld = kb.lti(s, oldLen);
    Value oldS = kb.minsi(s, kb.subi(kb.dim(cache.shape[1]), kb.idx(1)));
    Value newT = kb.minsi(kb.addi(start, kb.subi(s, oldLen)),
                          kb.subi(numTokens, kb.idx(1)));
    newT = kb.maxsi(newT, kb.idx(0));
    return kb.select(isOld, kb.load(cache.full, {seq, oldS, c}),
                     kb.load(latent, {newT, c}));
  }

  /// Lane's channel i of a row of width w: lane + 32 i, clamped (the
  /// value is masked where it is past the width).
  std::pair<Value, Value> laneChannel(int64_t i, int64_t w) {
    Value c = kb.addi(lane, kb.idx(32 * i));
    return {kb.lti(c, kb.idx(w)), kb.minsi(c, kb.idx(w - 1))};
  }

  /// Step 2: keys warp, warp + W, ... with an online softmax per warp and
  /// head of the group; each key's channels are loaded once for all heads.
  SmallVector<OnlineSoftmax> attendKeys(Value count) {
    const int64_t nr = channelsPerLane(), ne = peChannelsPerLane();
    const int64_t state = 2 + nr; // m, l, acc per head
    // The lane's query channels of every head, loaded once.
    SmallVector<SmallVector<Value>> qa(group), qpe(group);
    for (int64_t g = 0; g < group; ++g) {
      for (int64_t i = 0; i < nr; ++i) {
        auto [ok, c] = laneChannel(i, rank);
        qa[g].push_back(kb.select(ok, lds(offQa + g * rank, c), kb.f32(0.0)));
      }
      for (int64_t i = 0; i < ne; ++i) {
        auto [ok, c] = laneChannel(i, dr);
        qpe[g].push_back(
            kb.select(ok, queryAt(g, kb.addi(kb.idx(dn), c)), kb.f32(0.0)));
      }
    }
    SmallVector<Value> init;
    for (int64_t g = 0; g < group; ++g) {
      init.append({kb.f32(-INFINITY), kb.f32(0.0)});
      init.append(nr, kb.f32(0.0));
    }
    // Two keys per iteration, s and s + W: both keys' loads are issued
    // before either score, so an iteration is one memory round trip for
    // two keys (one key per iteration was one round trip each). The second
    // key past the end scores -inf (weight 0).
    auto loop =
        scf::ForOp::create(b, loc, warp, count, kb.idx(2 * warps), init);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value s = loop.getInductionVar();
    ValueRange it = loop.getRegionIterArgs();
    Value s2 = kb.addi(s, kb.idx(warps));
    Value has2 = kb.lti(s2, count);
    auto loadKey = [&](Value k, SmallVector<Value> &key,
                       SmallVector<Value> &pe) {
      for (int64_t i = 0; i < nr; ++i) {
        auto [ok, c] = laneChannel(i, rank);
        key.push_back(kb.select(ok, keyAt(k, c), kb.f32(0.0)));
      }
      for (int64_t i = 0; i < ne; ++i) {
        auto [ok, c] = laneChannel(i, dr);
        pe.push_back(
            kb.select(ok, keyAt(k, kb.addi(kb.idx(rank), c)), kb.f32(0.0)));
      }
    };
    SmallVector<Value> key, pe, key2, pe2;
    loadKey(s, key, pe);
    loadKey(kb.minsi(s2, kb.subi(count, kb.idx(1))), key2, pe2);
    auto score = [&](int64_t g, ArrayRef<Value> k, ArrayRef<Value> e) {
      Value dot = kb.f32(0.0);
      for (int64_t i = 0; i < nr; ++i)
        dot = em.fmaContract(qa[g][i], k[i], dot);
      for (int64_t i = 0; i < ne; ++i)
        dot = em.fmaContract(qpe[g][i], e[i], dot);
      return kb.mul(em.warpSum(dot), scale);
    };
    SmallVector<Value> next;
    for (int64_t g = 0; g < group; ++g) {
      ValueRange st = it.slice(g * state, state);
      Value sc = score(g, key, pe);
      Value sc2 = kb.select(has2, score(g, key2, pe2), kb.f32(-INFINITY));
      Value m = kb.maxf(st[0], kb.maxf(sc, sc2));
      Value alpha = kb.exp(kb.sub(st[0], m)), p = kb.exp(kb.sub(sc, m)),
            p2 = kb.exp(kb.sub(sc2, m));
      next.append({m, em.fmaContract(st[1], alpha, kb.add(p, p2))});
      for (int64_t i = 0; i < nr; ++i)
        next.push_back(em.fmaContract(
            st[2 + i], alpha, em.fmaContract(p, key[i], kb.mul(p2, key2[i]))));
    }
    scf::YieldOp::create(b, loc, next);
    b.setInsertionPointAfter(loop);
    SmallVector<OnlineSoftmax> out;
    for (int64_t g = 0; g < group; ++g) {
      OnlineSoftmax o{
          loop.getResult(g * state), loop.getResult(g * state + 1), {}};
      for (int64_t i = 0; i < nr; ++i)
        o.acc.push_back(loop.getResult(g * state + 2 + i));
      out.push_back(o);
    }
    return out;
  }

  /// Step 3, head g of the group: ctx_g[r] = sum_w acc_w[r] e^{m_w - M} /
  /// sum_w l_w e^{m_w - M} (the warps' buffers are reused head by head).
  void mergeWarps(const OnlineSoftmax &part, int64_t g) {
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      sts(part.m, offM, warp);
      sts(part.l, offL, warp);
    });
    for (int64_t i = 0; i < channelsPerLane(); ++i) {
      auto [ok, c] = laneChannel(i, rank);
      kb.ifThen(ok, [&, c = c] {
        sts(part.acc[i], offAcc, kb.addi(kb.muli(warp, kb.idx(rank)), c));
      });
    }
    gpu::BarrierOp::create(b, loc);
    // Warps without keys hold m = -inf, l = 0: their weight e^{-inf} = 0.
    Value big = kb.f32(-INFINITY);
    for (int64_t w = 0; w < warps; ++w)
      big = kb.maxf(big, lds(offM, kb.idx(w)));
    SmallVector<Value> weight;
    Value total = kb.f32(0.0);
    for (int64_t w = 0; w < warps; ++w) {
      weight.push_back(kb.exp(kb.sub(lds(offM, kb.idx(w)), big)));
      total = em.fmaContract(lds(offL, kb.idx(w)), weight.back(), total);
    }
    Value inv = kb.div(kb.f32(1.0), total);
    forThreads(kb.idx(rank), [&](Value r) {
      Value sum = kb.f32(0.0);
      for (int64_t w = 0; w < warps; ++w)
        sum = em.fmaContract(lds(offAcc, kb.addi(kb.idx(w * rank), r)),
                             weight[w], sum);
      sts(kb.mul(sum, inv), offCtx + g * rank, r);
    });
    gpu::BarrierOp::create(b, loc);
  }

  /// Step 4: o[t, h + g, j] = kv_b[(h + g) (Dn + Dv) + Dn + j, :] . ctx_g,
  /// a warp per (g, j).
  void projectValues() {
    // A warp takes outputs warp, warp + W, ... in rounds of kProjectUnroll:
    // a round's weight rows are loaded before its dot products, so a round
    // is one memory round trip (one output per trip took 16 in a row per
    // warp at Dv = 128, W = 8).
    const int64_t outputs = group * dv;
    const int64_t perWarp = (outputs + warps - 1) / warps;
    const int64_t rounds = (perWarp + kProjectUnroll - 1) / kProjectUnroll;
    scf::ForOp::create(
        b, loc, kb.idx(0), kb.idx(rounds), kb.idx(1), ValueRange{},
        [&](OpBuilder &, Location, Value round, ValueRange) {
          SmallVector<Value> gs, js, valid;
          SmallVector<SmallVector<Value>> ws(kProjectUnroll);
          for (int64_t u = 0; u < kProjectUnroll; ++u) {
            Value k =
                kb.addi(kb.muli(round, kb.idx(kProjectUnroll)), kb.idx(u));
            Value gj = kb.addi(warp, kb.muli(k, kb.idx(warps)));
            valid.push_back(kb.lti(gj, kb.idx(outputs)));
            gj = kb.minsi(gj, kb.idx(outputs - 1));
            Value g = em.divu(gj, dv), j = em.remu(gj, dv);
            gs.push_back(g);
            js.push_back(j);
            Value row = kb.addi(kb.muli(kb.addi(h, g), kb.idx(dn + dv)),
                                kb.addi(kb.idx(dn), j));
            for (int64_t i = 0; i < channelsPerLane(); ++i) {
              auto [ok, c] = laneChannel(i, rank);
              ws[u].push_back(
                  kb.select(ok, kb.load(kvb, {row, c}), kb.f32(0.0)));
            }
          }
          for (int64_t u = 0; u < kProjectUnroll; ++u) {
            Value g = gs[u], j = js[u];
            Value ctx = kb.muli(g, kb.idx(rank));
            Value dot = kb.f32(0.0);
            for (int64_t i = 0; i < channelsPerLane(); ++i) {
              auto [ok, c] = laneChannel(i, rank);
              dot = em.fmaContract(ws[u][i], lds(offCtx, kb.addi(ctx, c)), dot);
            }
            Value sum = em.warpSum(dot);
            kb.ifThen(kb.andi(valid[u], kb.eqi(lane, kb.idx(0))),
                      [&] { kb.store(sum, o, {t, kb.addi(h, g), j}); });
          }
          scf::YieldOp::create(b, loc);
        });
  }

  /// Outputs per warp and round of projectValues.
  static constexpr int64_t kProjectUnroll = 4;

  LatentAttentionOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t warps, threads;
  Value q, latent, kvb, o;
  KernelOperand cache, lens, cu, cacheOut; // optional
  Value numTokens, scale;
  int64_t heads = 0, dn = 0, dr = 0, dv = 0, rank = 0, group = 1;
  int64_t offQNope = 0, offQa = 0, offM = 0, offL = 0, offAcc = 0, offCtx = 0;
  Value smem, tid, lane, warp, t, h, start, seq, oldLen;
};

struct LatentAttentionRowsPattern : OpKernelPattern<LatentAttentionOp> {
  LatentAttentionRowsPattern()
      : OpKernelPattern(KernelKind::latent_attention_rows) {}
  LogicalResult emit(LatentAttentionOp op, Adaptor,
                     KernelEmission &e) const override {
    KernelBuilder &kb = e.kb;
    auto tokens =
        kb.linearForm(kb.dim(operandsOf(op, e.inputs).getQ().shape[0]));
    if (!tokens)
      return op.emitOpError() << "latent_attention_rows needs a token count "
                                 "linear in one runtime size";
    // A block per (token, group of heads).
    ArrayRef<int64_t> tile = e.config.getTile();
    int64_t group = tile.empty() ? 1 : tile[0];
    e.setLaunch(*tokens, op.getNumHeads() / group, 0, 1,
                {32 * e.config.getWarps(), 1, 1});
    LatentRowsKernel(op, e).emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateLatentAttentionRowsPattern(KernelPatternSet &patterns) {
  patterns.add<LatentAttentionRowsPattern>();
}

//===- KDAMMAOperands.cpp - state-independent KDA chunk operands -------===//
//
// The token-parallel half of the tensor-core KDA (k3.kda_mma_operands): one
// block of 4 warps per 16-token window; for every chunk that starts in the
// window (one per sequence overlapping it, so many in decode-like batches of
// short sequences) it computes the chunk's gates, normalised q and k, the
// cumulative decays G, the decayed operands, the 16 x 16 products
// L = beta k e^{G-G_m} (k e^{G_m-G})^T and Aqk = q e^{G-G_m} (k e^{G_m-G})^T
// and the solve P = (I + L)^-1 Diag(beta) (16 lanes' forward
// substitution), and packs them per token as the op documents.
//
// The products, on the tensor cores: with the lower-bounded gate factored
// about the middle token m = 7 (each factor spans at most 8 tokens of a
// bounded decay, so it stays in range). The unbounded softplus gate has no
// such factorisation for the whole chunk (one token's decay alone can
// leave f32's range), so there each block of a binary split of the chunk
// is factored about the token between its rows and columns (levelProducts:
// every factor <= 1, nothing overflows, and what underflows is below f32's
// range in the true value too).
//
// Work per chunk: loads and gates (all warps, 4 tokens each, lanes over
// channels), the in-chunk cumulative sum (a thread per channel), the
// operands (bf16 pairs), the two products (warps 0 and 1), the solve
// (warp 0), with five block barriers. Many blocks per SM hide their
// latency: nothing here waits on the state. The kernel is latency-bound,
// so the code keeps rounds of memory latency few (a 32-ary sequence
// search, the window's loads issued together) and instructions cheap
// (vector loads, ldmatrix, approximate reciprocal; docs/kda-cuda.md).
//
// Built from typed values: shared memory as workgroup memref views,
// vector.load for the channel loads, nvgpu.ldmatrix and k3gpu.mma_sync for
// the products, k3gpu.ballot for the search, the gate from DecayGate.h;
// the phases are OperandsKernel's member functions.
//
//===----------------------------------------------------------------------===//
#include "lowering/DecayGate.h"
#include "lowering/cuda/CUDAKernels.h"

#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {
constexpr int64_t kChunk = 16, kHalf = kChunk / 2, kMid = 7, kWarps = 4;
constexpr int64_t kThreads = 32 * kWarps, kTPW = kChunk / kWarps;
constexpr double kLog2e = 1.4426950408889634;

/// For x0 <= x1: the numbers of entries of cu[0..N] that are <= x0 and
/// <= x1 (cu non-decreasing, cu[0] = 0 <= x0). A 32-ary search for both
/// keys at once: each round, lane l of every warp samples cu at lo + l step
/// and a ballot counts the samples <= x, so one round of loads divides the
/// interval by 32: a single round up to 31 sequences. (A binary search per
/// key cost log2(N + 1) dependent loads each, most of the block's latency
/// before its first token's loads.)
std::pair<Value, Value> countAtMost2(KernelBuilder &kb, MMAEmitter &em,
                                     Value lane, Value cu, Value numSeqs,
                                     Value x0, Value x1) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Type idx = b.getIndexType();
  Value zero = kb.idx(0), count = kb.addi(numSeqs, kb.idx(1));
  SmallVector<Type> types(4, idx);
  auto loop =
      scf::WhileOp::create(b, loc, types, ValueRange{zero, count, zero, count});
  {
    OpBuilder::InsertionGuard g(b);
    SmallVector<Location> locs(4, loc);
    Block *before = b.createBlock(&loop.getBefore(), {}, types, locs);
    b.setInsertionPointToStart(before);
    auto open = [&](int i) {
      return kb.lti(kb.idx(1), kb.subi(before->getArgument(i + 1),
                                       before->getArgument(i)));
    };
    scf::ConditionOp::create(b, loc, kb.ori(open(0), open(2)),
                             before->getArguments());
    Block *after = b.createBlock(&loop.getAfter(), {}, types, locs);
    b.setInsertionPointToStart(after);
    // Invariant: cu[lo] <= x and every entry from hi on is > x. An
    // interval of one stays as it is (only lane 0 samples). Lane 0's sample
    // (cu[lo]) counts as <= x without looking: the invariant says so, and
    // it keeps every index inside [lo, hi) even for x < 0 (no tokens: the
    // idle blocks past the last window) or an unsorted cu_seqlens.
    auto round = [&](Value lo, Value hi, Value x) -> std::pair<Value, Value> {
      Value step = em.divu(kb.addi(kb.subi(hi, lo), kb.idx(31)), 32);
      Value i = kb.addi(lo, kb.muli(lane, step));
      Value v = kb.loadIndex(cu, {kb.minsi(i, numSeqs)});
      Value le = kb.ori(kb.eqi(lane, kb.idx(0)),
                        kb.andi(kb.lti(i, hi), kb.notb(kb.lti(x, v))));
      Value c = arith::IndexCastOp::create(
          b, loc, idx,
          k3gpu::BallotCountOp::create(b, loc, b.getI32Type(), le));
      return {kb.addi(lo, kb.muli(kb.subi(c, kb.idx(1)), step)),
              kb.minsi(kb.addi(lo, kb.muli(c, step)), hi)};
    };
    auto [lo0, hi0] = round(after->getArgument(0), after->getArgument(1), x0);
    auto [lo1, hi1] = round(after->getArgument(2), after->getArgument(3), x1);
    scf::YieldOp::create(b, loc, ValueRange{lo0, hi0, lo1, hi1});
  }
  return {kb.addi(loop.getResult(0), kb.idx(1)),
          kb.addi(loop.getResult(2), kb.idx(1))};
}

/// One token's raw loads (P1), issued before the barrier.
struct TokenLoads {
  Value row, valid, tok, beta;
  SmallVector<Value> q, k, g;
};

/// The kernel body: per chunk that starts in the block's window, the
/// phases P1 (loads, gates, norms), P2 (cumulative decay), P3 (decayed
/// operands), the two products and the solve, five barriers apart.
class OperandsKernel {
public:
  OperandsKernel(KDAMMAOperandsOp op, KernelBuilder &kb,
                 ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, a(in, op),
        packed(out[0].full), packedRows(em.contiguousView(out[0])) {
    kDim = in[0].shape[3];
    heads = in[0].shape[2];
    CPL = kDim / 32;
    R = 3 * kDim / 2;
    pow2Part = CPL & -CPL;
    scale = op.getScale().convertToDouble();
    gateKind = op.getGateKind();
    unbounded = gateKind == DecayGateKind::neg_softplus;
    if (auto lb = op.getLowerBound())
      lowerBound = lb->convertToDouble();
    l2 = op.getUseQkL2norm();
    sigmoidBeta = op.getUseBetaSigmoid();
    opStride = kDim / 2 + 4;
    rowStride = kDim + (unbounded ? kRowPadLevels : kRowPad);
  }

  /// Shared memory bytes (every region 16-byte aligned for vector loads).
  int64_t layout() {
    // The unbounded gate's Aqk rows (levelProducts) follow its decays
    // inside the factors' words: 16 (K + 8) + 256 <= 3 * 16 (K / 2 + 4)
    // words for K >= 24 (k3.kda_mma_operands has K a multiple of 64).
    offQ = kChunk * rowStride * 4;
    offK = offQ + kChunk * rowStride * 4;
    offOps = offK + kChunk * rowStride * 4;
    offNorm = offOps + 3 * kChunk * opStride * 4;
    offBeta = offNorm + kChunk * 2 * 4;
    offL = offBeta + kChunk * 4;
    offChan = offL + kChunk * kLStride * 4;
    return offChan + 3 * kDim * 4;
  }

  void emit() {
    views();
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
    gq = em.divu(lane, 4);
    tig = em.remu(lane, 4);
    tig2 = kb.muli(tig, kb.idx(2));
    ch0 = kb.muli(lane, kb.idx(CPL));
    Value numTokens = kb.dim(a.getQ().shape[1]);
    Value head = em.remu(bid, heads);
    w0 = kb.muli(em.divu(bid, heads), kb.idx(kChunk));
    w1 = kb.minsi(kb.addi(w0, kb.idx(kChunk)), numTokens);
    for (int i = 0; i < 3; ++i)
      gIn[i] = flatView(i == 0 ? a.getQ() : i == 1 ? a.getK() : a.getG());

    // The chunks that start in this window: one per overlapping sequence.
    auto perChunk = [&](Value start, Value end) {
      Value off = kb.maxsi(kb.subi(w0, start), kb.idx(0));
      Value chunks = em.divu(kb.addi(off, kb.idx(kChunk - 1)), kChunk);
      Value t0 = kb.addi(start, kb.muli(chunks, kb.idx(kChunk)));
      kb.ifThen(kb.lti(t0, kb.minsi(w1, end)), [&] { perHead(head, t0, end); });
    };
    KernelOperand cu = a.getCuSeqlens();
    if (cu.base) {
      Value numSeqs = kb.subi(kb.dim(cu.shape[0]), kb.idx(1));
      auto [atW0, atW1] = countAtMost2(kb, em, lane, cu.full, numSeqs, w0,
                                       kb.subi(w1, kb.idx(1)));
      Value sLo = kb.subi(atW0, kb.idx(1));
      Value sHi = kb.minsi(atW1, numSeqs);
      kb.forRange(kb.maxsi(sLo, kb.idx(0)), sHi, [&](Value s) {
        perChunk(kb.loadIndex(cu.full, {s}),
                 kb.loadIndex(cu.full, {kb.addi(s, kb.idx(1))}));
      });
    } else {
      perChunk(kb.idx(0), numTokens);
    }
  }

private:
  static constexpr int64_t kLStride = 20; // L's rows 16-byte aligned
  /// G's, q's, k's and the decays' rows are K + 4 words apart (16-byte
  /// aligned) for the bounded gate: at K words (a multiple of the 32
  /// banks) the unbounded gate's former off-diagonal block's loads (8 rows,
  /// 4 column pairs a warp) had an 8-way bank conflict; 2.3-way on average
  /// over the kernel's shared loads (bench/results/e2e-checks/
  /// ncu-kda-operands-banks-nvidia-h200-20261204T0727Z.txt).
  static constexpr int64_t kRowPad = 4;
  /// The unbounded gate's levelProducts load two channels (8 bytes) of 8
  /// rows a warp, a half-warp 4 rows: at K + 8 words 4 consecutive rows
  /// (levels 8 and 4, the diagonal) fall on disjoint banks; levels 2 and
  /// 1 (rows 2 apart) keep a 2-way conflict (bench/results/e2e-checks/
  /// kda-operands-pad8-ab-cut4-nvidia-h100-20261205T1656Z.txt).
  static constexpr int64_t kRowPadLevels = 8;

  /// Shared memory: G [16][K] f32 (log2 units), the masked raw q and k
  /// [16][K] f32 with their per-token norm factors [16][2] (held here, not
  /// in registers across barriers: registers set how many blocks share an
  /// SM), beta [16], L [16][20] f32, and the intra-chunk factors
  /// q e^{G-Gm}, k e^{G-Gm}, k e^{Gm-G} as bf16 pairs [16][K/2 + 4], and
  /// per channel G_m, 2^{G_m}, 2^{G_C-G_m} [3][K]. The unbounded gate
  /// keeps the per-token decays 2^g [16][K] f32 where the factors would be
  /// (3 (K/2 + 4) >= K words per row), its Aqk rows [16][16] f32 after
  /// them, and G_C in the first row of the per-channel values.
  void views() {
    Value smem = em.dynamicSharedMemory();
    auto viewAs = [&](Type elem, int64_t off, ArrayRef<int64_t> shape) {
      return em.sharedView(smem, elem, kb.idx(off), shape);
    };
    Type f32 = b.getF32Type();
    sG = viewAs(f32, 0, {kChunk * rowStride});
    sQ = viewAs(f32, offQ, {kChunk * rowStride});
    sK = viewAs(f32, offK, {kChunk * rowStride});
    sNorm = viewAs(f32, offNorm, {kChunk * 2});
    sBeta = viewAs(f32, offBeta, {kChunk});
    sL = viewAs(f32, offL, {kChunk * kLStride});
    sChan = viewAs(f32, offChan, {3 * kDim});
    for (int i = 0; i < 3; ++i) {
      int64_t off = offOps + i * kChunk * opStride * 4;
      sOp[i] = viewAs(b.getI32Type(), off, {kChunk * opStride});
      sOpTile[i] = viewAs(b.getBF16Type(), off, {kChunk, 2 * opStride});
    }
    sDecay = viewAs(f32, offOps, {kChunk * rowStride});
    // The unbounded gate's Aqk rows [16][16] f32 (levelProducts) after the
    // decays, in the factors' words that it leaves free.
    sAqkRows = viewAs(f32, offOps + kChunk * rowStride * 4, {kChunk * kChunk});
  }

  Value flatView(const KernelOperand &x) {
    Value size = kb.idx(1);
    for (int64_t d : x.shape)
      size = kb.muli(size, kb.dim(d));
    return em.contiguousView(x.base, {size});
  }

  /// Lane's CPL channels (ch0 = lane * CPL, contiguous) of token `tok`,
  /// head hh of input `which` (q, k or g) as f32, in vector loads of up to
  /// 16 bytes: the rows are K-element aligned and buffers 256-byte aligned.
  /// A load covers a power of two of channels dividing CPL, so that it is
  /// aligned to its size (K = 192: CPL = 6, loads of 2).
  SmallVector<Value> loadChannels(int which, Value tok, Value hh) {
    Type elem = cast<MemRefType>(gIn[which].getType()).getElementType();
    const int64_t bytes = elem.getIntOrFloatBitWidth() / 8;
    const int64_t perLoad = std::min<int64_t>(pow2Part, 16 / bytes);
    Value first = kb.addi(
        kb.muli(kb.addi(kb.muli(tok, kb.idx(heads)), hh), kb.idx(kDim)), ch0);
    SmallVector<Value> vals;
    for (int64_t e = 0; e < CPL; e += perLoad)
      llvm::append_range(
          vals, em.loadVector(gIn[which], kb.addi(first, kb.idx(e)), perLoad));
    return vals;
  }
  /// CPL consecutive f32 of a shared view at index i (16-byte aligned for
  /// CPL >= 4).
  /// Stores CPL f32 `vals` at index i of a shared view, as ldsChannels
  /// loads them.
  void stsChannels(ArrayRef<Value> vals, Value view, Value i) {
    const int64_t perStore = std::min<int64_t>(pow2Part, 4);
    for (int64_t e = 0; e < CPL; e += perStore)
      em.storeVector(vals.slice(e, perStore), view, kb.addi(i, kb.idx(e)));
  }
  SmallVector<Value> ldsChannels(Value view, Value i) {
    const int64_t perLoad = std::min<int64_t>(pow2Part, 4);
    SmallVector<Value> vals;
    for (int64_t e = 0; e < CPL; e += perLoad)
      llvm::append_range(vals,
                         em.loadVector(view, kb.addi(i, kb.idx(e)), perLoad));
    return vals;
  }
  Value exp2(Value x) { return math::Exp2Op::create(b, loc, x); }
  Value tokenRow(Value i) { return kb.addi(kb.muli(warp, kb.idx(kTPW)), i); }

  /// One chunk of head hh: tokens [t0, min(t0 + 16, end)).
  void perHead(Value hh, Value t0, Value end) {
    count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value last = kb.subi(end, kb.idx(1));
    Value gateA = kb.exp(kb.load(a.getALog().full, {hh}));
    SmallVector<Value> dtb(CPL);
    for (int64_t e = 0; e < CPL; ++e)
      dtb[e] = kb.load(a.getDtBias().full, {kb.addi(kb.muli(hh, kb.idx(kDim)),
                                                    kb.addi(ch0, kb.idx(e)))});
    // P1: the four tokens' loads are issued together, before the barrier
    // that guards shared memory: one round of memory latency per block.
    SmallVector<TokenLoads> toks;
    for (int64_t i = 0; i < kTPW; ++i) {
      TokenLoads tl;
      tl.row = tokenRow(kb.idx(i));
      tl.valid = kb.lti(tl.row, count);
      tl.tok = kb.minsi(kb.addi(t0, tl.row), last);
      tl.q = loadChannels(0, tl.tok, hh);
      tl.k = loadChannels(1, tl.tok, hh);
      tl.g = loadChannels(2, tl.tok, hh);
      tl.beta = kb.load(a.getBeta().full, {kb.idx(0), tl.tok, hh});
      toks.push_back(std::move(tl));
    }
    gpu::BarrierOp::create(b, loc);
    for (const TokenLoads &tl : toks)
      gatesAndNorms(tl, gateA, dtb);
    gpu::BarrierOp::create(b, loc);
    cumulativeDecay(hh, t0);
    gpu::BarrierOp::create(b, loc);
    decayedOperands(hh, t0);
    gpu::BarrierOp::create(b, loc);
    products(hh, t0);
    gpu::BarrierOp::create(b, loc);
    if (unbounded)
      packAqk(hh, t0);
    solve(hh, t0);
  }

  /// P1 (warp w: tokens 4w..4w+3, lane: CPL channels): the log decay in
  /// log2 units (exponentials are then single ex2 instructions); q and k
  /// to shared memory masked, their norm factors beside them.
  void gatesAndNorms(const TokenLoads &tl, Value gateA, ArrayRef<Value> dtb) {
    Value zero = kb.f32(0.0);
    Value row = tl.row, valid = tl.valid;
    Value sqq = zero, skk = zero;
    Value at = kb.addi(kb.muli(row, kb.idx(rowStride)), ch0);
    SmallVector<Value> qs, ks, gs;
    for (int64_t e = 0; e < CPL; ++e) {
      Value qe = kb.select(valid, tl.q[e], zero);
      Value ke = kb.select(valid, tl.k[e], zero);
      sqq = kb.fma(qe, qe, sqq);
      skk = kb.fma(ke, ke, skk);
      qs.push_back(qe);
      ks.push_back(ke);
      // lb * sigmoid(A (g + dt_bias)) * log2(e), the reciprocal by the
      // special-function unit.
      Value lgt = emitGateLogDecay(
          kb, gateKind, lowerBound, gateA, kb.add(tl.g[e], dtb[e]),
          {kLog2e, [&](Value x) { return em.rcpApprox(x); },
           [&](Value x) { return em.lg2Approx(x); }});
      gs.push_back(kb.select(valid, lgt, zero));
    }
    stsChannels(qs, sQ, at);
    stsChannels(ks, sK, at);
    stsChannels(gs, sG, at);
    Value nq = kb.f32(scale), nk = kb.f32(1.0);
    if (l2) {
      nq = kb.mul(nq, kb.rsqrt(kb.add(em.warpSum(sqq), kb.f32(1e-6))));
      nk = kb.rsqrt(kb.add(em.warpSum(skk), kb.f32(1e-6)));
    }
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      Value bt = tl.beta;
      if (sigmoidBeta)
        bt = kb.sigmoid(bt);
      em.sts(kb.select(valid, bt, zero), sBeta, row);
      Value n2 = kb.muli(row, kb.idx(2));
      em.sts(nq, sNorm, n2);
      em.sts(nk, sNorm, kb.addi(n2, kb.idx(1)));
    });
  }

  /// P2: cumulative decay per channel (a thread per channel); e^{G_C} on
  /// the last row.
  void cumulativeDecay(Value hh, Value t0) {
    Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
    for (int64_t c0 = 0; c0 < kDim; c0 += kThreads) {
      Value c = kb.addi(kb.idx(c0), tid);
      auto body = [&] {
        // The 16 increments loaded first (independent loads), then the
        // scan in registers.
        SmallVector<Value> inc;
        for (int64_t t = 0; t < kChunk; ++t)
          inc.push_back(em.lds(sG, kb.addi(kb.idx(t * rowStride), c)));
        Value run = kb.f32(0.0), gm;
        for (int64_t t = 0; t < kChunk; ++t) {
          run = kb.add(run, inc[t]);
          em.sts(run, sG, kb.addi(kb.idx(t * rowStride), c));
          if (t == kMid)
            gm = run;
          if (unbounded)
            em.sts(exp2(inc[t]), sDecay, kb.addi(kb.idx(t * rowStride), c));
        }
        if (unbounded) {
          em.sts(run, sChan, c);
        } else {
          // Per channel: G_m and the factors that turn the two relative
          // exponentials of P3 into e^G and e^{G_C - G} (two ex2 per element
          // instead of four; each factor stays inside f32's range).
          em.sts(gm, sChan, c);
          em.sts(exp2(gm), sChan, kb.addi(kb.idx(kDim), c));
          em.sts(exp2(kb.sub(run, gm)), sChan, kb.addi(kb.idx(2 * kDim), c));
        }
        Value bits =
            arith::BitcastOp::create(b, loc, b.getI32Type(), exp2(run));
        em.sts(bits, packed,
               {kb.idx(0), lastRow, hh, kb.addi(kb.idx(R + 16), c)});
      };
      if (c0 + kThreads > kDim)
        kb.ifThen(kb.lti(c, kb.idx(kDim)), body);
      else
        body();
    }
  }

  /// Warp w's token 4 w + i as staged by P1/P2: its row, norm factors and
  /// the lane's channels of G, q and k.
  struct StagedToken {
    Value t, nq, nk;
    SmallVector<Value> g, q, k;
  };
  StagedToken stagedToken(Value i) {
    StagedToken r;
    r.t = tokenRow(i);
    Value at = kb.addi(kb.muli(r.t, kb.idx(rowStride)), ch0);
    Value n2 = kb.muli(r.t, kb.idx(2));
    r.nq = em.lds(sNorm, n2);
    r.nk = em.lds(sNorm, kb.addi(n2, kb.idx(1)));
    r.g = ldsChannels(sG, at);
    r.q = ldsChannels(sQ, at);
    r.k = ldsChannels(sK, at);
    return r;
  }

  /// P3 for the unbounded gate: e^G and e^{G_C - G} directly (both <= 1),
  /// the three operands to the packed rows of the valid tokens.
  void decayedOperandsUnbounded(Value hh, Value t0) {
    SmallVector<Value> gC = ldsChannels(sChan, ch0);
    kb.forRange(kb.idx(0), kb.idx(kTPW), [&](Value i) {
      StagedToken r = stagedToken(i);
      Value t = r.t;
      SmallVector<std::array<Value, 3>> vals(CPL);
      for (int64_t e = 0; e < CPL; ++e) {
        Value eG = exp2(r.g[e]), eTail = exp2(kb.sub(gC[e], r.g[e]));
        Value qv = kb.mul(r.q[e], r.nq), kv = kb.mul(r.k[e], r.nk);
        vals[e] = {kb.mul(qv, eG), kb.mul(kv, eG), kb.mul(kv, eTail)};
      }
      Value tok = kb.addi(t0, t);
      kb.ifThen(kb.lti(t, count), [&] {
        for (int x = 0; x < 3; ++x)
          storeOperandWords(vals, x, tok, hh);
      });
    });
  }

  /// The lane's CPL channels of value `x` of `vals` as CPL / 2 bf16-pair
  /// words, two words (8 bytes) a store where CPL / 2 is even: one word a
  /// store left each warp store half of its sectors (lanes 8 bytes apart),
  /// 39 % excess sectors over the kernel (bench/results/e2e-checks/
  /// ncu-prefill-after-nvidia-h200-20261204T0813Z.txt).
  template <typename Vals>
  SmallVector<Value> channelWords(const Vals &vals, int x) {
    SmallVector<Value> words;
    for (int64_t e = 0; e < CPL; e += 2)
      words.push_back(em.packWord(vals[e][x], vals[e + 1][x]));
    return words;
  }
  /// Stores `words` from index `at` of the 1-D or trailing dimension of
  /// `mem` (ValueRange `lead` before it), in pairs where they are even.
  void storeWords(ArrayRef<Value> words, Value mem, ValueRange lead, Value at) {
    auto index = [&](int64_t i) {
      SmallVector<Value> idx(lead.begin(), lead.end());
      idx.push_back(kb.addi(at, kb.idx(i)));
      return idx;
    };
    int64_t n = words.size();
    if (n % 2 != 0) {
      for (int64_t i = 0; i < n; ++i)
        em.sts(words[i], mem, index(i));
      return;
    }
    for (int64_t i = 0; i < n; i += 2) {
      Value pair = vector::FromElementsOp::create(
          b, loc, VectorType::get({2}, b.getI32Type()),
          ValueRange{words[i], words[i + 1]});
      em.alignedStore(pair, mem, index(i));
    }
  }
  /// Operand x (q e^G, k e^G, k e^{G_C-G}) of token `tok` to its packed
  /// row: words x K / 2 + ch0 / 2 ...
  template <typename Vals>
  void storeOperandWords(const Vals &vals, int x, Value tok, Value hh) {
    storeWords(channelWords(vals, x), packedRows, {kb.idx(0), tok, hh},
               kb.addi(kb.idx(x * kDim / 2), em.divu(ch0, 2)));
  }
  /// Factor `x` of `vals` to the shared factor rows `view` at `rowW`.
  template <typename Vals>
  void storeFactorWords(const Vals &vals, int x, Value view, Value rowW) {
    storeWords(channelWords(vals, x), view, {}, kb.addi(rowW, em.divu(ch0, 2)));
  }

  /// P3: the decayed operands: q e^G, k e^G, k e^{G_C-G} to the packed
  /// rows (valid tokens), the intra-chunk factors to shared memory.
  void decayedOperands(Value hh, Value t0) {
    if (unbounded)
      return decayedOperandsUnbounded(hh, t0);
    // The lane's channels' G_m, 2^{G_m}, 2^{G_C - G_m}: token-independent.
    SmallVector<Value> gmC = ldsChannels(sChan, ch0),
                       e2Gm = ldsChannels(sChan, kb.addi(ch0, kb.idx(kDim))),
                       e2Tail =
                           ldsChannels(sChan, kb.addi(ch0, kb.idx(2 * kDim)));
    kb.forRange(kb.idx(0), kb.idx(kTPW), [&](Value i) {
      StagedToken r = stagedToken(i);
      Value t = r.t, nq = r.nq, nk = r.nk;
      Value valid = kb.lti(t, count);
      SmallVector<Value> &rG = r.g, &rQ = r.q, &rK = r.k;
      SmallVector<std::array<Value, 6>> vals(CPL);
      for (int64_t e = 0; e < CPL; ++e) {
        // e^{G-Gm}, e^{Gm-G}; e^G = e^{G-Gm} e^{Gm}, e^{Gc-G} = e^{Gc-Gm}
        // e^{Gm-G}.
        Value eRel = exp2(kb.sub(rG[e], gmC[e]));
        Value eInv = exp2(kb.sub(gmC[e], rG[e]));
        Value eG = kb.mul(eRel, e2Gm[e]), eTail = kb.mul(e2Tail[e], eInv);
        Value qv = kb.mul(rQ[e], nq), kv = kb.mul(rK[e], nk);
        vals[e] = {kb.mul(qv, eG),   kb.mul(kv, eG),   kb.mul(kv, eTail),
                   kb.mul(qv, eRel), kb.mul(kv, eRel), kb.mul(kv, eInv)};
      }
      Value rowW = kb.muli(t, kb.idx(opStride));
      Value tok = kb.addi(t0, t);
      for (int x = 0; x < 3; ++x)
        storeFactorWords(vals, 3 + x, sOp[x], rowW);
      kb.ifThen(valid, [&] {
        for (int x = 0; x < 3; ++x)
          storeOperandWords(vals, x, tok, hh);
      });
    });
  }

  /// The 16 x 16 product of factor `aOp` with (k e^{Gm-G})^T, k = K:
  /// fragments by ldmatrix (rows of opStride words: 16-byte aligned,
  /// conflict-free).
  std::array<Acc, 2> product(int aOp) {
    std::array<Value, 2> posA = em.ldmatrixLaneA(lane),
                         posB = em.ldmatrixLaneB(lane);
    std::array<Acc, 2> acc = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < kDim / 16; ++ks) {
      FragA fa = em.ldmatrix4(
          sOpTile[aOp], {posA[0], kb.addi(posA[1], kb.idx(16 * ks))}, false);
      auto bf =
          em.loadB2(sOpTile[kKM], {posB[0], kb.addi(posB[1], kb.idx(16 * ks))},
                    /*fromKN=*/false);
      for (int64_t nt = 0; nt < 2; ++nt)
        acc[nt] = em.mma(fa, bf[nt], acc[nt]);
    }
    return acc;
  }

  /// The unbounded gate's in-chunk products, all on the tensor cores, in
  /// blocks whose decays factor about a token between their rows and
  /// columns. For s < t, let h be the highest power of two where t and s
  /// differ (both in the same 2h-token block B, t in its upper half, s in
  /// its lower one); with r = B's last token of the lower half,
  ///   D_tsc = 2^{G_tc - G_rc} 2^{G_rc - G_sc},
  /// both factors <= 1 (G falls along the chunk; r lies between s and t),
  /// so neither overflows and what underflows is below f32 in the true
  /// product too. Each level h = 8, 4, 2, 1 is one m16n8k16 per 16
  /// channels: A's rows g are q_t 2^{G_t - G_r} and rows g + 8 the same
  /// of k_t, for the eight upper-half tokens t of the level's blocks; B's
  /// column n is k_s 2^{G_r - G_s} for the eight lower-half tokens; the
  /// entries of matching blocks are the products. At h = 1 the row
  /// factor is the token's decay 2^{g_t} and the column's is 1. The
  /// diagonal (s = t, no decay) is two more tiles. Warps 0-2 take the
  /// levels 8, 4 and 2, warp 3 the level 1 and the diagonal (no
  /// exponentials). Each writes its entries, normalised, to sAqkRows (f32,
  /// [16][16]) and L's to sL (times -beta_t, the solve's sign);
  /// packAqk packs Aqk's rows after the barrier. The factors are rounded
  /// to bf16 as the bounded gate's are. A factor is formed from a
  /// difference of the chunk's cumulative f32 G, as e^{G_C - G} and the
  /// former off-diagonal block's were: its relative error is about
  /// |G| 2^-24 ln 2, below bf16's rounding while |G| < 2^15 (log2 units,
  /// a mean decay of e^-1400 per token of the chunk); the exact sums
  /// below multiplied per-token decays instead. (Exact f32 sums over distances
  /// on the CUDA cores for the two diagonal 8 x 8 blocks took 0.50 ms a
  /// layer at T = 8192, H32, on the H200.)
  void levelProducts() {
    // Each warp's tiles: the level h (0: the diagonal at token base d).
    struct Tile {
      int64_t h, d;
    };
    SmallVector<Tile> tiles[kWarps] = {
        {{8, 0}}, {{4, 0}}, {{2, 0}}, {{1, 0}, {0, 0}, {0, kHalf}}};
    for (int64_t w = 0; w < kWarps; ++w)
      kb.ifThen(kb.eqi(warp, kb.idx(w)), [&] {
        for (Tile tile : tiles[w])
          levelTile(tile.h, tile.d);
      });
  }

  /// A level-h tile's token for fragment row or column i (0..7) and the
  /// reference token of its block: rows are the upper halves' tokens,
  /// columns the lower halves'.
  std::pair<Value, Value> levelToken(int64_t h, int64_t d, Value i,
                                     bool upper) {
    if (h == 0) {
      Value t = kb.addi(i, kb.idx(d));
      return {t, t};
    }
    Value block = kb.muli(em.divu(i, h), kb.idx(2 * h));
    Value ref = kb.addi(block, kb.idx(h - 1));
    Value t = kb.addi(block, em.remu(i, h));
    return {upper ? kb.addi(t, kb.idx(h)) : t, ref};
  }

  /// Two channels (c, c + 1) of row `tok` of a staged f32 view.
  SmallVector<Value> ldsPair(Value view, Value tok, Value c) {
    return em.loadVector(view, kb.addi(kb.muli(tok, kb.idx(rowStride)), c), 2);
  }
  /// 2^{G_hi - G_lo} for channels (c, c + 1).
  SmallVector<Value> decayBetween(Value hi, Value lo, Value c) {
    SmallVector<Value> gh = ldsPair(sG, hi, c), gl = ldsPair(sG, lo, c);
    return {exp2(kb.sub(gh[0], gl[0])), exp2(kb.sub(gh[1], gl[1]))};
  }

  void levelTile(int64_t h, int64_t d) {
    Value tA, refA, sB, refB;
    std::tie(tA, refA) = levelToken(h, d, gq, /*upper=*/true);
    std::tie(sB, refB) = levelToken(h, d, gq, /*upper=*/false);
    auto loop = scf::ForOp::create(
        b, loc, kb.idx(0), kb.idx(kDim / 16), kb.idx(1),
        SmallVector<Value>(4, kb.f32(0.0)),
        [&](OpBuilder &, Location, Value step, ValueRange acc) {
          SmallVector<Value> aRows, bRows;
          for (int64_t half = 0; half < 2; ++half)
            levelFragmentRows(h, tA, refA, sB, refB,
                              kb.addi(kb.muli(step, kb.idx(16)),
                                      kb.addi(tig2, kb.idx(8 * half))),
                              aRows, bRows);
          Acc r = em.mma(em.stack(aRows), em.stack(bRows),
                         {acc[0], acc[1], acc[2], acc[3]});
          scf::YieldOp::create(b, loc, ValueRange{r[0], r[1], r[2], r[3]});
        });
    storeLevelEntries(h, d, tA, refA, SmallVector<Value>(loop.getResults()));
  }

  /// Channels (c, c + 1) of a level-h tile's fragments: A's rows q_t and
  /// k_t times 2^{G_t - G_r} (h = 1: the token's decay; the diagonal: 1),
  /// B's row k_s times 2^{G_r - G_s}, appended as bf16 pairs.
  void levelFragmentRows(int64_t h, Value tA, Value refA, Value sB, Value refB,
                         Value c, SmallVector<Value> &aRows,
                         SmallVector<Value> &bRows) {
    SmallVector<Value> fa, fb;
    if (h == 1) {
      fa = ldsPair(sDecay, tA, c);
    } else if (h > 1) {
      fa = decayBetween(tA, refA, c);
      fb = decayBetween(refB, sB, c);
    }
    SmallVector<Value> q = ldsPair(sQ, tA, c), k = ldsPair(sK, tA, c),
                       ks = ldsPair(sK, sB, c);
    for (int64_t m = 0; m < 2 && !fa.empty(); ++m) {
      q[m] = kb.mul(q[m], fa[m]);
      k[m] = kb.mul(k[m], fa[m]);
    }
    for (int64_t m = 0; m < 2 && !fb.empty(); ++m)
      ks[m] = kb.mul(ks[m], fb[m]);
    aRows.push_back(em.pair(q[0], q[1]));
    aRows.push_back(em.pair(k[0], k[1]));
    bRows.push_back(em.pair(ks[0], ks[1]));
  }

  /// A level-h tile's accumulators to sAqkRows and sL, normalised: lane
  /// (g, tig) holds rows g (q) and g + 8 (k) of columns 2 tig, +1; only
  /// the entries of matching blocks are products.
  void storeLevelEntries(int64_t h, int64_t d, Value tA, Value refA,
                         ArrayRef<Value> acc) {
    Value nqT = em.lds(sNorm, kb.muli(tA, kb.idx(2)));
    Value nkT = em.lds(sNorm, kb.addi(kb.muli(tA, kb.idx(2)), kb.idx(1)));
    Value lScale = kb.mul(kb.neg(em.lds(sBeta, tA)), nkT);
    for (int64_t m = 0; m < 2; ++m) {
      Value n = kb.addi(tig2, kb.idx(m));
      Value s, refS;
      std::tie(s, refS) = levelToken(h, d, n, /*upper=*/false);
      // Matching blocks share the reference token (level 1 and the
      // diagonal: the same column).
      Value match = h > 1 ? kb.eqi(refS, refA) : kb.eqi(n, gq);
      kb.ifThen(match, [&] {
        Value nkS = em.lds(sNorm, kb.addi(kb.muli(s, kb.idx(2)), kb.idx(1)));
        em.sts(kb.mul(kb.mul(nqT, nkS), acc[m]), sAqkRows,
               kb.addi(kb.muli(tA, kb.idx(kChunk)), s));
        if (h > 0)
          em.sts(kb.mul(kb.mul(lScale, nkS), acc[2 + m]), sL,
                 kb.addi(kb.muli(tA, kb.idx(kLStride)), s));
      });
    }
  }

  /// After the barrier: Aqk's rows from sAqkRows as bf16 pairs, zeros above
  /// the diagonal; thread i packs word i % 8 of row i / 8.
  void packAqk(Value hh, Value t0) {
    Value t = em.divu(tid, kChunk / 2), w = em.remu(tid, kChunk / 2);
    Value s0 = kb.muli(w, kb.idx(2));
    SmallVector<Value> v =
        em.loadVector(sAqkRows, kb.addi(kb.muli(t, kb.idx(kChunk)), s0), 2);
    for (int64_t m = 0; m < 2; ++m)
      v[m] = kb.select(kb.lti(t, kb.addi(s0, kb.idx(m))), kb.f32(0.0), v[m]);
    kb.ifThen(kb.lti(t, count), [&] {
      em.sts(em.packWord(v[0], v[1]), packed,
             {kb.idx(0), kb.addi(t0, t), hh, kb.addi(kb.idx(R + 8), w)});
    });
  }

  /// Warp 0: L (to shared memory); warp 1: Aqk (to the packed rows).
  void products(Value hh, Value t0) {
    if (unbounded)
      return levelProducts();
    Value zero = kb.f32(0.0);
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      auto acc = product(kKMM);
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          Value t = kb.addi(gq, kb.idx(8 * (c / 2)));
          Value s = kb.addi(tig2, kb.idx(8 * nt + c % 2));
          // Stored negated: the solve's updates are then plain FMAs.
          Value lv = kb.select(
              kb.lti(s, t), kb.mul(kb.neg(em.lds(sBeta, t)), acc[nt][c]), zero);
          em.sts(lv, sL, kb.addi(kb.muli(t, kb.idx(kLStride)), s));
        }
    });
    kb.ifThen(kb.eqi(warp, kb.idx(1)), [&] {
      auto acc = product(kQM);
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t half = 0; half < 2; ++half) {
          Value t = kb.addi(gq, kb.idx(8 * half));
          Value sc[2];
          for (int64_t c = 0; c < 2; ++c) {
            Value s = kb.addi(tig2, kb.idx(8 * nt + c));
            sc[c] = kb.select(kb.lti(t, s), zero, acc[nt][2 * half + c]);
          }
          Value word = kb.addi(kb.idx(R + 8 + 4 * nt), tig);
          kb.ifThen(kb.lti(t, count), [&] {
            em.sts(em.packWord(sc[0], sc[1]), packed,
                   {kb.idx(0), kb.addi(t0, t), hh, word});
          });
        }
    });
  }

  /// Warp 0: T = (I + L)^-1 by columns (lane j < 16), P = T Diag(beta);
  /// even lanes write the pair (j, j + 1) of each row.
  void solve(Value hh, Value t0) {
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      Value j = em.remu(lane, kChunk);
      SmallVector<Value> x(kChunk);
      for (int64_t i = 0; i < kChunk; ++i) {
        Value xi = kb.select(kb.eqi(j, kb.idx(i)), kb.f32(1.0), kb.f32(0.0));
        // Row i of -L (a broadcast read), four words per load.
        for (int64_t m0 = 0; m0 < i; m0 += 4) {
          SmallVector<Value> l =
              em.loadVector(sL, kb.idx(i * kLStride + m0), 4);
          for (int64_t m = m0; m < std::min<int64_t>(i, m0 + 4); ++m)
            xi = math::FmaOp::create(b, loc, l[m - m0], x[m], xi);
        }
        x[i] = xi;
        // A copy of x_i in shared memory (q's staging, done with): a store
        // the compiler cannot move the next rows' loads of L above, so only
        // one row of L is live at a time.
        em.sts(xi, sQ, kb.addi(kb.idx(i * 32), lane));
      }
      Value bj = em.lds(sBeta, j);
      Value even = kb.eqi(em.remu(lane, 2), kb.idx(0));
      Value store = kb.andi(even, kb.lti(lane, kb.idx(kChunk)));
      for (int64_t i = 0; i < kChunk; ++i) {
        Value pv = kb.mul(x[i], bj);
        Value pNext = em.shuffleXor(pv, 1);
        kb.ifThen(kb.andi(store, kb.lti(kb.idx(i), count)), [&] {
          em.sts(em.packWord(pv, pNext), packed,
                 {kb.idx(0), kb.addi(t0, kb.idx(i)), hh,
                  kb.addi(kb.idx(R), em.divu(j, 2))});
        });
      }
    });
  }

  enum { kQM, kKMM, kKM };
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  KDAMMAOperandsOp::GenericAdaptor<ArrayRef<KernelOperand>> a;
  Value packed;
  Value packedRows; // packed with a unit innermost stride (vector stores)
  int64_t kDim, heads, CPL, R, pow2Part, opStride, rowStride;
  double scale;
  DecayGateKind gateKind;
  std::optional<double> lowerBound;
  bool l2, sigmoidBeta, unbounded;
  int64_t offQ, offK, offNorm, offBeta, offL, offOps, offChan;
  Value sG, sQ, sK, sNorm, sBeta, sL, sChan, sOp[3], sOpTile[3], sDecay,
      sAqkRows;
  Value gIn[3];
  Value tid, lane, warp, gq, tig, tig2, ch0, w0, w1, count;
};
} // namespace

LogicalResult mlir::k3::emitKDAMMAOperandsCUDA(KDAMMAOperandsOp op,
                                               const KernelEmission &e) {
  ArrayRef<KernelOperand> in = e.inputs, out = e.outputs;
  const int64_t kDim = in[0].shape[3], heads = in[0].shape[2];
  if (kDim <= 0 || heads <= 0)
    return op.emitOpError() << "needs static head count and key dimension";
  // The kernel is latency-bound per block (barriers, a 16-step solve):
  // throughput comes from blocks per SM, so setLaunch caps the registers
  // for the config's blocks_per_sm resident blocks (KernelConfigRules.cpp).
  OperandsKernel kernel(op, e.kb, in, out);
  // H blocks per 16-token window (a few past the last window stay idle).
  e.setLaunch(GridSymbol::num_tokens, heads, (kChunk - 1) * heads, kChunk,
              {kThreads, 1, 1}, kernel.layout());
  kernel.emit();
  return success();
}

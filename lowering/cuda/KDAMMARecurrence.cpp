//===- KDAMMARecurrence.cpp - the KDA chain on the tensor cores -*- C++ -*-===//
//
// The serial half of the tensor-core KDA (k3.kda_mma_recurrence). A block of
// W warps per (sequence n, head h, slice of BV = 16 W value columns); an
// active warp owns 16 value columns and keeps its slice of the state
// transposed, S^T (16 x K, f32), in mma accumulator fragments for the whole
// sequence. Per chunk of 16 tokens, everything it reads was prepared by
// k3.kda_mma_operands, so the chain is only products:
//
//   r^T     = v^T - S0^T (k e^G)^T          mma, k = K       (A = S0^T)
//   o^T     = S0^T (q e^G)^T                mma, k = K       (A = S0^T)
//   delta^T = r^T P^T                       mma, k = 16      (A = r^T)
//   o^T    += delta^T Aqk^T                 mma, k = 16      (A = delta^T)
//   S^T     = S0^T e^{G_C} + delta^T (k e^{G_C - G})   mma, k = 16
//
// An accumulator of S^T, r^T or delta^T (rows = value columns) is already
// the A fragment of the next product (tiles n, n + 1 -> one 16 x 16 block),
// so the chain never leaves registers. The chunk's operands (16 packed
// rows, e^{G_C}, v's slice) move into shared memory with cp.async
// (nvgpu.device_async_copy into typed views of the stage), three
// stages by default: chunks c + 1 and c + 2 are in flight while chunk c
// multiplies, one barrier per chunk. B fragments come by ldmatrix (.trans
// where a pair runs along tokens: k e^{G_C - G} and v). Rows past the
// sequence's end are zero-filled (cp.async with source size 0), which makes
// their delta zero.
//
// The split of a slice is chosen at run time, from the number of sequences
// N: the chain is a serial walk over chunks, so its time is one block's
// walk as long as the blocks fit the SMs in one wave, and a block of W
// warps stages each chunk's rows once for W slices (the rows are most of a
// chunk's bytes). With N H (V / BV) blocks at least the SMs (packed
// batches), every warp of a block is active; with fewer, each slice is
// split over s = 2, 4, ... blocks (at most the config's split) while the
// blocks still fit the SMs, and a block's W / s active warps take its
// share of the slice; the other warps stage operands and pass the barriers
// only. One compiled block size serves both: which is faster depends on N,
// known only at run time (B8 T4096 H32: 8 active warps 1.20 ms against
// 1.53 with 2; B1 T8192 H64: 4 active warps 0.67 against 0.86 with 8;
// docs/kda-cuda.md). The grid has the wide form's blocks plus one per SM,
// enough for either form; blocks past the split's items return at once.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {
constexpr int64_t kChunk = 16;

/// The chain's static shape.
struct ChainPlan {
  int64_t words, heads, vDim, kDim;
  int64_t R;        // word of P in a packed row
  int64_t rowWords; // words staged per row
  int64_t RS;       // staged row stride in words: conflict-free
  int64_t NT, KS;
  int64_t warps, BV, threads, nvb, stages;
  int64_t maxSplit; // blocks a slice may be split over at run time
  int64_t smCount;  // the target's SMs: one wave of chain blocks
  // A stage: the rows [16][RS] i32, e^{G_C} [K] f32, v's tile [16][vStride
  // bytes] bf16.
  int64_t rowsBytes, egcBytes, vStride, stageBytes;
};

/// The plan for the config's warps and stages (chosen and checked by
/// k3-select-kernel-config: KernelConfigRules.cpp).
ChainPlan makePlan(ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out,
                   KernelConfigAttr config, int64_t smCount) {
  ChainPlan p;
  p.words = in[0].shape[3];
  p.heads = in[0].shape[2];
  p.vDim = in[1].shape[3];
  p.kDim = out[1].shape[2];
  p.R = 3 * p.kDim / 2;
  p.rowWords = p.R + 16;
  p.RS = p.rowWords + 4;
  p.NT = p.kDim / 8;
  p.KS = p.kDim / 16;
  p.warps = config.getWarps();
  p.BV = 16 * p.warps;
  p.threads = 32 * p.warps;
  p.nvb = p.vDim / p.BV;
  // tile[1]: the fewest value columns a block takes (16 per active warp).
  ArrayRef<int64_t> tile = config.getTile();
  p.maxSplit = tile.size() > 1 ? std::max<int64_t>(1, p.BV / tile[1]) : 1;
  p.smCount = smCount;
  // Chunks c+1 .. c+stages-1 are in flight while chunk c multiplies.
  p.stages = config.getStages();
  p.rowsBytes = kChunk * p.RS * 4;
  p.egcBytes = p.kDim * 4;
  // v's rows padded by 16 bytes: ldmatrix reads 8 rows of a column block
  // without bank conflicts.
  p.vStride = p.BV * 2 + 16;
  p.stageBytes = p.rowsBytes + p.egcBytes + kChunk * p.vStride;
  return p;
}

/// A thread's share of a chunk's 16-byte copies: slot p0 + tid is (row of
/// the chunk, 16-byte column), at element `src` of the source from the
/// chunk's first token and `dst` of the stage's region (elements). The same
/// for every chunk: computed once, so that a chunk's issue is an add and a
/// select per piece.
struct Piece {
  Value row, src, dst;
  int64_t p0;
};

/// One stage's operands, typed views of the dynamic shared memory.
struct Stage {
  Value rows; // [16][2 RS] bf16: the packed rows, as ldmatrix reads them
  Value egc;  // [K] f32: e^{G_C}
  Value v;    // [16][vStride / 2] bf16: v's tile
};

class ChainKernel {
public:
  ChainKernel(KDAMMARecurrenceOp op, KernelBuilder &kb, const ChainPlan &p,
              ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, p(p),
        a(in, op), out(out) {}

  void emit() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    kb.ifThen(workItem(), [&] { emitItem(); });
  }

private:
  /// The split of each slice over blocks for this call's N sequences, the
  /// block's (sequence, head, value slice, part) and whether it has one.
  Value workItem() {
    Value units = kb.muli(kb.dim(out[1].shape[0]), kb.idx(p.heads * p.nvb));
    Value split = kb.idx(1);
    for (int64_t s = 2; s <= p.maxSplit; s *= 2)
      split =
          kb.select(kb.lti(kb.muli(units, kb.idx(s)), kb.idx(p.smCount + 1)),
                    kb.idx(s), split);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value part = arith::RemUIOp::create(b, loc, bid, split);
    Value slice = arith::DivUIOp::create(b, loc, bid, split);
    vb = em.remu(slice, p.nvb);
    Value hn = em.divu(slice, p.nvb);
    h = em.remu(hn, p.heads);
    n = em.divu(hn, p.heads);
    // Warp w of part j of the slice takes columns 16 (j W / s + w) of it;
    // the warps past W / s only stage operands (their columns clamped to
    // their own, in bounds, for the loads they share with the others).
    active = arith::DivUIOp::create(b, loc, kb.idx(p.warps), split);
    warp = em.divu(tid, 32);
    warpActive = kb.lti(warp, active);
    slot = kb.select(warpActive, kb.addi(kb.muli(part, active), warp), warp);
    return kb.lti(bid, kb.muli(units, split));
  }

  void emitItem() {
    smem = em.dynamicSharedMemory();
    // The stages as the copies write them: 32-bit words and bf16.
    const int64_t total = p.stages * p.stageBytes;
    all32 = em.sharedView(smem, b.getI32Type(), kb.idx(0), {total / 4});
    all16 = em.sharedView(smem, b.getBF16Type(), kb.idx(0), {total / 2});
    positions();
    SmallVector<Value> acc0 = initialState();
    copySlots();
    for (int64_t c0 = 0; c0 < p.stages - 1; ++c0) {
      kb.ifThen(kb.lti(kb.idx(c0), numChunks), [&] { issue(kb.idx(c0)); });
      group = commit();
    }
    // Lane positions of the ldmatrix reads inside a stage.
    laneA = em.ldmatrixLaneA(lane);
    laneB = em.ldmatrixLaneB(lane);
    // Two loops with the same copies and barriers: the active warps' with
    // the products, the others' without (a branch per chunk around the
    // products measured 2-4 % slower on whole blocks; the barriers count
    // warps, wherever each arrives from).
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, warpActive, true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    auto chunks =
        scf::ForOp::create(b, loc, kb.idx(0), numChunks, kb.idx(1), acc0);
    {
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(chunks.getBody());
      scf::YieldOp::create(
          b, loc, chunk(chunks.getInductionVar(), chunks.getRegionIterArgs()));
    }
    wait(0);
    for (int64_t nt = 0; nt < p.NT; ++nt)
      for (int64_t c = 0; c < 4; ++c)
        kb.store(chunks.getResult(4 * nt + c), out[1].full,
                 {n, h, kCol(nt, c), vRow[c / 2]});
    b.setInsertionPointToStart(branch.elseBlock());
    auto staging = scf::ForOp::create(b, loc, kb.idx(0), numChunks, kb.idx(1));
    {
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(staging.getBody());
      stageNext(staging.getInductionVar());
    }
    wait(0);
  }

  /// The lane's rows of S^T and the sequence's chunks.
  void positions() {
    lane = em.remu(tid, 32);
    Value gq = em.divu(lane, 4);
    tig = em.remu(lane, 4);
    tig2 = kb.muli(tig, kb.idx(2));
    Value vcol0 = kb.addi(kb.muli(vb, kb.idx(p.BV)), kb.muli(slot, kb.idx(16)));
    vRow[0] = kb.addi(vcol0, gq);
    vRow[1] = kb.addi(vcol0, kb.addi(gq, kb.idx(8)));

    KernelOperand cu = a.getCuSeqlens();
    bIdx = cu.base ? kb.idx(0) : n;
    start = cu.base ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
    end = cu.base ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))})
                  : kb.dim(a.getPacked().shape[1]);
    numChunks =
        em.divu(kb.addi(kb.subi(end, start), kb.idx(kChunk - 1)), kChunk);
  }

  /// Channel of accumulator element c of N tile nt.
  Value kCol(int64_t nt, int64_t c) {
    return kb.addi(kb.idx(8 * nt + c % 2), tig2);
  }

  /// S^T's accumulators (N tile nt: channels 8 nt..8 nt + 7).
  SmallVector<Value> initialState() {
    KernelOperand init = a.getInitialState();
    SmallVector<Value> acc0;
    for (int64_t nt = 0; nt < p.NT; ++nt)
      for (int64_t c = 0; c < 4; ++c)
        acc0.push_back(
            init.base ? kb.load(init.full, {n, h, kCol(nt, c), vRow[c / 2]})
                      : kb.f32(0.0));
    return acc0;
  }

  /// Each thread's pieces of the three copies, and the global sources as
  /// flat arrays (token-major: a piece's offset from the chunk's first
  /// token is the same for every chunk).
  void copySlots() {
    auto slots = [&](int64_t total, int64_t perRow, int64_t elemBytes,
                     int64_t srcRow, int64_t dstRow) {
      SmallVector<Piece> ps;
      for (int64_t p0 = 0; p0 < total; p0 += p.threads) {
        Value q = kb.addi(kb.idx(p0), tid);
        Value r = em.divu(q, perRow), c = em.remu(q, perRow);
        Value src = kb.addi(kb.muli(r, kb.idx(srcRow)),
                            kb.muli(c, kb.idx(16 / elemBytes)));
        Value dst = kb.addi(kb.muli(r, kb.idx(dstRow)),
                            kb.muli(c, kb.idx(16 / elemBytes)));
        ps.push_back({r, src, dst, p0});
      }
      return ps;
    };
    rowSlots = slots(kChunk * (p.rowWords / 4), p.rowWords / 4, 4,
                     p.heads * p.words, p.RS);
    egcSlots = slots(p.kDim / 4, p.kDim / 4, 4, 0, 0);
    vSlots = slots(kChunk * (p.BV / 8), p.BV / 8, 2, p.heads * p.vDim,
                   p.vStride / 2);
    auto flat = [&](const KernelOperand &x) {
      Value size = kb.idx(1);
      for (int64_t d : x.shape)
        size = kb.muli(size, kb.dim(d));
      return em.contiguousView(x.base, {size});
    };
    gPacked = flat(a.getPacked());
    gV = flat(a.getV());
    vCol0 = kb.muli(vb, kb.idx(p.BV));
  }
  /// Element (bIdx, t, h, 0) of a [B][T][H][width] source.
  Value tokenAt(Value t, Value tokens, int64_t width) {
    return kb.muli(
        kb.addi(kb.muli(kb.addi(kb.muli(bIdx, tokens), t), kb.idx(p.heads)), h),
        kb.idx(width));
  }

  /// Chunk c's stage (c % stages).
  Stage stage(Value c) {
    Value off = kb.muli(em.remu(c, p.stages), kb.idx(p.stageBytes));
    Value egcOff = kb.addi(off, kb.idx(p.rowsBytes));
    Value vOff = kb.addi(off, kb.idx(p.rowsBytes + p.egcBytes));
    Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
    return {em.sharedView(smem, bf16, off, {kChunk, 2 * p.RS}),
            em.sharedView(smem, f32, egcOff, {p.kDim}),
            em.sharedView(smem, bf16, vOff, {kChunk, p.vStride / 2})};
  }

  /// Issues chunk c's copies into its stage (every thread a share).
  void issue(Value c) {
    Value t0 = kb.addi(start, kb.muli(c, kb.idx(kChunk)));
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    // Destinations: element offsets into the whole shared memory, narrowed
    // to 32 bits after the stage's offset is added (MMAEmitter::narrow):
    // the pieces' own offsets then stay 32-bit registers across the loop.
    Value st = em.remu(c, p.stages);
    auto dstAt = [&](const Piece &pc, int64_t elemBytes, int64_t region) {
      Value first = kb.addi(kb.muli(st, kb.idx(p.stageBytes / elemBytes)),
                            kb.idx(region / elemBytes));
      return em.narrow(kb.addi(first, pc.dst));
    };
    auto each = [&](ArrayRef<Piece> ps, int64_t total,
                    const std::function<void(const Piece &)> &body) {
      for (const Piece &pc : ps) {
        if (pc.p0 + p.threads > total)
          kb.ifThen(kb.lti(kb.addi(kb.idx(pc.p0), tid), kb.idx(total)),
                    [&] { body(pc); });
        else
          body(pc);
      }
    };
    // Rows past the sequence read row t0 (in bounds) with source size 0.
    Value rowsAt = tokenAt(t0, kb.dim(a.getPacked().shape[1]), p.words);
    each(rowSlots, kChunk * (p.rowWords / 4), [&](const Piece &pc) {
      Value ok = kb.lti(pc.row, count);
      Value src = kb.addi(rowsAt, kb.select(ok, pc.src, kb.idx(0)));
      em.asyncCopy(all32, dstAt(pc, 4, 0), gPacked, src, 4, ok);
    });
    Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
    Value egcAt =
        kb.addi(tokenAt(lastRow, kb.dim(a.getPacked().shape[1]), p.words),
                kb.idx(p.R + 16));
    each(egcSlots, p.kDim / 4, [&](const Piece &pc) {
      em.asyncCopy(all32, dstAt(pc, 4, p.rowsBytes), gPacked,
                   kb.addi(egcAt, pc.src), 4, Value());
    });
    Value vAt = kb.addi(tokenAt(t0, kb.dim(a.getV().shape[1]), p.vDim), vCol0);
    // The whole slice's columns, also where a split block reads a part of
    // them: a predicate on the column cost whole blocks 2 % (B1 T8192 H96,
    // bench/results/kda-chain-split-trial), more than the bytes it saves.
    each(vSlots, kChunk * (p.BV / 8), [&](const Piece &pc) {
      Value ok = kb.lti(pc.row, count);
      Value src = kb.addi(vAt, kb.select(ok, pc.src, kb.idx(0)));
      em.asyncCopy(all16, dstAt(pc, 2, p.rowsBytes + p.egcBytes), gV, src, 8,
                   ok);
    });
  }
  Value commit() { return em.commitGroup(); }
  /// The token, the prologue's last group, only places the wait after the
  /// prologue's commits.
  void wait(int32_t pending) { em.waitGroups(group, pending); }

  /// One chunk: its operands landed, the next stage's copies issued, the
  /// products; returns S^T's accumulators after it.
  /// Chunk c has landed (only chunk c + 1's group may be pending), and
  /// after the barrier every warp is done with chunk c - 1, whose stage
  /// then takes chunk c + stages - 1: one barrier per chunk.
  /// The active warps reach the barrier from the products' loop, the
  /// others from the staging loop: the unaligned barrier.sync
  /// (k3gpu.barrier_sync), since bar.sync (gpu.barrier) requires every
  /// thread of the block at the same instruction; compute-sanitizer's
  /// synccheck reported it (bench/results/e2e-checks/
  /// sanitizer-kda-operands-levels-nvidia-h100-20261205T1615Z.txt).
  void stageNext(Value c) {
    wait(int32_t(p.stages - 2));
    k3gpu::BarrierSyncOp::create(b, loc);
    Value cNext = kb.addi(c, kb.idx(p.stages - 1));
    kb.ifThen(kb.lti(cNext, numChunks), [&] { issue(cNext); });
    commit();
  }

  SmallVector<Value> chunk(Value c, ValueRange it) {
    stageNext(c);

    Value t0 = kb.addi(start, kb.muli(c, kb.idx(kChunk)));
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Stage s = stage(c);
    SmallVector<FragA> aS(p.KS);
    for (int64_t ks = 0; ks < p.KS; ++ks)
      aS[ks] = em.accToA(
          {it[8 * ks + 0], it[8 * ks + 1], it[8 * ks + 2], it[8 * ks + 3]},
          {it[8 * ks + 4], it[8 * ks + 5], it[8 * ks + 6], it[8 * ks + 7]});
    auto [pS, oT] = stateProducts(s, aS);
    FragA aD = delta(s, pS);
    output(s, aD, oT, t0, count);
    return nextState(s, aD, it);
  }

  /// B fragments from the rows ([token][word]: N = tokens) at word `word`.
  std::array<FragB, 2> rowsB(const Stage &s, int64_t word) {
    return em.loadB2(s.rows, {laneB[0], kb.addi(laneB[1], kb.idx(2 * word))},
                     /*fromKN=*/false);
  }

  /// S0^T (k e^G)^T and S0^T (q e^G)^T, k = K.
  std::pair<std::array<Acc, 2>, std::array<Acc, 2>>
  stateProducts(const Stage &s, ArrayRef<FragA> aS) {
    std::array<Acc, 2> pS = {em.zero(), em.zero()}, oT = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < p.KS; ++ks) {
      auto bKe = rowsB(s, p.kDim / 2 + 8 * ks);
      auto bQg = rowsB(s, 8 * ks);
      for (int64_t nt = 0; nt < 2; ++nt) {
        pS[nt] = em.mma(aS[ks], bKe[nt], pS[nt]);
        oT[nt] = em.mma(aS[ks], bQg[nt], oT[nt]);
      }
    }
    return {pS, oT};
  }

  /// delta^T = (v^T - S0^T (k e^G)^T) P^T, as the A fragment of the next
  /// products.
  FragA delta(const Stage &s, const std::array<Acc, 2> &pS) {
    // v^T's tile in accumulator layout (rows = value columns, cols =
    // tokens): ldmatrix.trans of [token][column] gives row j the bf16
    // pair (tokens 2 tig, +1 of block j / 2; column g + 8 (j % 2)).
    Value vPairs = em.ldmatrix4(
        s.v, {laneB[0], kb.addi(laneB[1], kb.muli(slot, kb.idx(16)))},
        /*transpose=*/true);
    Acc r[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        Value vv = em.unpackBF16(em.extract(vPairs, {2 * nt + e / 2}), e % 2);
        r[nt][e] = kb.sub(vv, pS[nt][e]);
      }
    FragA aR = em.accToA(r[0], r[1]);
    auto bP = rowsB(s, p.R);
    Acc dT[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      dT[nt] = em.mma(aR, bP[nt], em.zero());
    return em.accToA(dT[0], dT[1]);
  }

  /// o^T += delta^T Aqk^T, stored for the chunk's tokens.
  void output(const Stage &s, FragA aD, std::array<Acc, 2> oT, Value t0,
              Value count) {
    auto bAqk = rowsB(s, p.R + 8);
    for (int64_t nt = 0; nt < 2; ++nt) {
      oT[nt] = em.mma(aD, bAqk[nt], oT[nt]);
      for (int64_t e = 0; e < 4; ++e) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + e % 2));
        kb.ifThen(kb.lti(t, count), [&] {
          kb.store(oT[nt][e], out[0].full,
                   {bIdx, kb.addi(t0, t), h, vRow[e / 2]});
        });
      }
    }
  }

  /// S^T = S0^T e^{G_C} + delta^T kg: B = kg (k = token, n = K) from
  /// [token][channel] rows, two N tiles per ldmatrix.trans.
  SmallVector<Value> nextState(const Stage &s, FragA aD, ValueRange it) {
    SmallVector<Value> next;
    for (int64_t nt = 0; nt < p.NT; nt += 2) {
      auto bK = em.loadB2(
          s.rows, {laneA[0], kb.addi(laneA[1], kb.idx(2 * (p.kDim + 4 * nt)))},
          /*fromKN=*/true);
      for (int64_t x = 0; x < 2; ++x) {
        int64_t n8 = nt + x;
        SmallVector<Value> d =
            em.loadVector(s.egc, {kb.addi(kb.idx(8 * n8), tig2)}, 2);
        Acc acc{kb.mul(it[4 * n8 + 0], d[0]), kb.mul(it[4 * n8 + 1], d[1]),
                kb.mul(it[4 * n8 + 2], d[0]), kb.mul(it[4 * n8 + 3], d[1])};
        acc = em.mma(aD, bK[x], acc);
        next.append(acc.begin(), acc.end());
      }
    }
    return next;
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  const ChainPlan &p;
  KDAMMARecurrenceOp::GenericAdaptor<ArrayRef<KernelOperand>> a;
  ArrayRef<KernelOperand> out;
  Value smem, all32, all16, group;
  Value tid, vb, h, n, lane, warp, tig, tig2, vRow[2];
  Value active, warpActive, slot;
  Value bIdx, start, end, numChunks;
  SmallVector<Piece> rowSlots, egcSlots, vSlots;
  Value gPacked, gV, vCol0;
  std::array<Value, 2> laneA, laneB;
};
} // namespace

LogicalResult mlir::k3::emitKDAMMARecurrenceCUDA(KDAMMARecurrenceOp op,
                                                 const KernelEmission &e) {
  KernelBuilder &kb = e.kb;
  ArrayRef<KernelOperand> in = e.inputs, out = e.outputs;
  const int64_t heads = in[0].shape[2], vDim = in[1].shape[3],
                kDim = out[1].shape[2];
  if (heads <= 0 || vDim <= 0 || kDim <= 0)
    return op.emitOpError() << "needs static heads, key and value dimensions";
  ChainPlan p =
      makePlan(in, out, e.config, cast<GPUTargetAttr>(e.target).getSmCount());
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return op.emitOpError() << "needs a sequence count linear in N";
  // A block per (sequence, head, 16 W value columns), and one per SM more:
  // a call whose blocks would not fill the SMs splits its slices over up to
  // that many blocks (workItem).
  e.setLaunch(*nForm, p.heads * p.nvb, p.maxSplit > 1 ? p.smCount : 0, 1,
              {p.threads, 1, 1}, p.stages * p.stageBytes);
  ChainKernel(op, kb, p, in, out).emit();
  return success();
}

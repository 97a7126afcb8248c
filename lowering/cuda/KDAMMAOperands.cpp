//===- KDAMMAOperands.cpp - state-independent KDA chunk operands -*- C++
//-*-===//
//
// The token-parallel half of the tensor-core KDA (k3.kda_mma_operands): one
// block of 4 warps per 16-token window; for every chunk that starts in the
// window (one per sequence overlapping it, so many in decode-like batches of
// short sequences) it computes the chunk's gates, normalised q and k, the
// cumulative decays G, the decayed operands, the 16 x 16 products
// L = beta k e^{G-G_m} (k e^{G_m-G})^T and Aqk = q e^{G-G_m} (k e^{G_m-G})^T
// on the tensor cores (m = token 7: each factor spans at most 8 tokens of
// decay) and the solve P = (I + L)^-1 Diag(beta) (16 lanes' forward
// substitution), and packs them per token as the op documents.
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
//===----------------------------------------------------------------------===//
#include "lowering/DecayGate.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/LegacyMMA.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::legacy;

namespace {
constexpr int64_t kChunk = 16, kMid = 7, kWarps = 4;
constexpr int64_t kThreads = 32 * kWarps, kTPW = kChunk / kWarps;
} // namespace

/// For x0 <= x1: the numbers of entries of cu[0..N] that are <= x0 and
/// <= x1 (cu non-decreasing, cu[0] = 0 <= x0). A 32-ary search for both
/// keys at once: each round, lane l of every warp samples cu at lo + l step
/// and a ballot counts the samples <= x, so one round of loads divides the
/// interval by 32: a single round up to 31 sequences. (A binary search per
/// key cost log2(N + 1) dependent loads each, most of the block's latency
/// before its first token's loads.)
static std::pair<Value, Value> countAtMost2(KernelBuilder &kb, MMAEmitter &em,
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
      Value all = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
      Value mask = NVVM::VoteSyncOp::create(b, loc, b.getI32Type(), all, le,
                                            NVVM::VoteSyncKind::ballot);
      Value c = arith::IndexCastOp::create(
          b, loc, idx, LLVM::CtPopOp::create(b, loc, b.getI32Type(), mask));
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

FailureOr<bool>
mlir::k3::emitKDAMMAOperandsCUDA(KDAMMAOperandsOp op, gpu::GPUFuncOp fn,
                                 KernelBuilder &kb, ArrayRef<KernelOperand> in,
                                 ArrayRef<KernelOperand> out,
                                 const CUDAKernelOptions &options) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  const KernelOperand *cu = op.getCuSeqlens() ? &in[4] : nullptr;
  const KernelOperand &aLog = in[cu ? 5 : 4], &dtBias = in[cu ? 6 : 5];
  const int64_t kDim = in[0].shape[3], heads = in[0].shape[2];
  if (kDim <= 0 || heads <= 0)
    return op.emitOpError() << "needs static head count and key dimension";
  const int64_t CPL = kDim / 32, R = 3 * kDim / 2; // R: word of P's row
  const double scale = op.getScale().convertToDouble();
  const double lowerBound = op.getLowerBound().convertToDouble();
  const bool l2 = op.getUseQkL2norm(), sigmoidBeta = op.getUseBetaSigmoid();

  // H blocks per 16-token window (a few past the last window stay idle).
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr(
                  {kNumTokens, heads, (kChunk - 1) * heads, kChunk}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({kThreads, 1, 1}));
  // The kernel is latency-bound per block (barriers, a 16-step solve):
  // throughput comes from blocks per SM, so cap the registers for
  // cuda-kda-operands-blocks-per-sm resident blocks (default 5: 85
  // registers, no spills, 38.5 KB of shared memory each at K = 128, which
  // also caps an H200 SM at 5 blocks).
  int64_t blocksPerSM = options.kdaOperandsBlocksPerSM;
  fn->setAttr("nvvm.maxntid",
              b.getDenseI32ArrayAttr({int32_t(kThreads), 1, 1}));
  fn->setAttr("nvvm.minctasm", b.getI32IntegerAttr(int32_t(blocksPerSM)));

  // Shared memory: G [16][K] f32 (log2 units), the masked raw q and k
  // [16][K] f32 with their per-token norm factors [16][2] (held here, not
  // in registers across barriers: registers set how many blocks share an
  // SM), beta [16], L [16][17] f32, and the intra-chunk factors
  // q e^{G-Gm}, k e^{G-Gm}, k e^{Gm-G} as bf16 pairs [16][K/2 + 4], and
  // per channel G_m, 2^{G_m}, 2^{G_C-G_m} [3][K] (every region 16-byte
  // aligned for the vector loads).
  const int64_t opStride = kDim / 2 + 4, lStride = 20; // rows 16-byte aligned
  const int64_t offQ = kChunk * kDim * 4, offK = offQ + kChunk * kDim * 4;
  const int64_t offNorm = offK + kChunk * kDim * 4;
  const int64_t offBeta = offNorm + kChunk * 2 * 4, offL = offBeta + kChunk * 4;
  const int64_t offOps = offL + kChunk * lStride * 4;
  const int64_t offChan = offOps + 3 * kChunk * opStride * 4;
  const int64_t total = offChan + 3 * kDim * 4;
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(total));
  MMAEmitter em{b, loc, kb};
  Value smem = em.dynamicSharedMemory();
  auto viewAs = [&](Type elem, int64_t off, int64_t count) {
    return em.sharedView(smem, elem, kb.idx(off), count);
  };
  Value sG = viewAs(b.getF32Type(), 0, kChunk * kDim);
  Value sQ = viewAs(b.getF32Type(), offQ, kChunk * kDim);
  Value sK = viewAs(b.getF32Type(), offK, kChunk * kDim);
  Value sNorm = viewAs(b.getF32Type(), offNorm, kChunk * 2);
  Value sBeta = viewAs(b.getF32Type(), offBeta, kChunk);
  Value sL = viewAs(b.getF32Type(), offL, kChunk * lStride);
  // Per channel: G_m, 2^{G_m}, 2^{G_C - G_m}.
  Value sChan = viewAs(b.getF32Type(), offChan, 3 * kDim);
  enum { kQM, kKMM, kKM };
  Value sOp[3];
  for (int i = 0; i < 3; ++i)
    sOp[i] = viewAs(b.getI32Type(), offOps + i * kChunk * opStride * 4,
                    kChunk * opStride);

  Value beta = in[3].full;
  Value packed = out[0].full;
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
  Value gq = em.divu(lane, 4), tig = em.remu(lane, 4);
  Value tig2 = kb.muli(tig, kb.idx(2));
  Value ch0 = kb.muli(lane, kb.idx(CPL));
  Value numTokens = kb.dim(in[0].shape[1]);
  Value head = em.remu(bid, heads);
  Value w0 = kb.muli(em.divu(bid, heads), kb.idx(kChunk));
  Value w1 = kb.minsi(kb.addi(w0, kb.idx(kChunk)), numTokens);

  // Lane's CPL channels (ch0 = lane * CPL, contiguous) of token `tok`,
  // head hh of input `which` (q, k or g) as f32, in vector loads of up to
  // 16 bytes: the rows are K-element aligned and buffers 256-byte aligned.
  // A load covers a power of two of channels dividing CPL, so that it is
  // aligned to its size (K = 192: CPL = 6, loads of 2).
  const int64_t pow2Part = CPL & -CPL;
  Value inPtr[3];
  for (int i = 0; i < 3; ++i)
    inPtr[i] = em.pointer(em.addressOf(in[i].base), 1);
  auto loadChannels = [&](int which, Value tok, Value hh) {
    Type elem = cast<MemRefType>(in[which].full.getType()).getElementType();
    const int64_t bytes = elem.getIntOrFloatBitWidth() / 8;
    const int64_t perLoad = std::min<int64_t>(pow2Part, 16 / bytes);
    Value first = kb.addi(
        kb.muli(kb.addi(kb.muli(tok, kb.idx(heads)), hh), kb.idx(kDim)), ch0);
    SmallVector<Value> vals;
    for (int64_t e = 0; e < CPL; e += perLoad)
      llvm::append_range(
          vals,
          em.loadVector(
              em.offsetPointer(inPtr[which], kb.muli(kb.addi(first, kb.idx(e)),
                                                     kb.idx(bytes))),
              elem, perLoad));
    return vals;
  };
  Value smemPtr = em.pointer(em.addressOf(smem), 3);
  auto smemAt = [&](Value bytes) { return em.offsetPointer(smemPtr, bytes); };
  // CPL consecutive f32 of shared memory at float index i (16-byte aligned
  // for CPL >= 4).
  auto ldsChannels = [&](int64_t offBytes, Value i) {
    const int64_t perLoad = std::min<int64_t>(pow2Part, 4);
    SmallVector<Value> vals;
    for (int64_t e = 0; e < CPL; e += perLoad)
      llvm::append_range(vals,
                         em.loadVector(smemAt(kb.addi(kb.idx(offBytes + 4 * e),
                                                      kb.muli(i, kb.idx(4)))),
                                       b.getF32Type(), perLoad));
    return vals;
  };

  // One chunk of head hh: tokens [t0, min(t0 + 16, end)).
  auto perHead = [&](Value hh, Value t0, Value end) {
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value last = kb.subi(end, kb.idx(1));
    Value gateA = kb.exp(kb.load(aLog.full, {hh}));
    SmallVector<Value> dtb(CPL);
    for (int64_t e = 0; e < CPL; ++e)
      dtb[e] = kb.load(dtBias.full, {kb.addi(kb.muli(hh, kb.idx(kDim)),
                                             kb.addi(ch0, kb.idx(e)))});
    // P1: loads, gates, norms (warp w: tokens 4w..4w+3, lane: CPL
    // channels). The log decay is kept in log2 units (exponentials are
    // then single ex2 instructions); q and k go to shared memory masked,
    // their norm factors beside them. The four tokens' loads are issued
    // together, before the barrier that guards shared memory: one round
    // of memory latency per block, not four.
    Value zero = kb.f32(0.0);
    const double log2e = 1.4426950408889634;
    auto exp2 = [&](Value x) { return math::Exp2Op::create(b, loc, x); };
    auto tokenRow = [&](Value i) {
      return kb.addi(kb.muli(warp, kb.idx(kTPW)), i);
    };
    struct TokenLoads {
      Value row, valid, tok, beta;
      SmallVector<Value> q, k, g;
    };
    SmallVector<TokenLoads> toks;
    for (int64_t i = 0; i < kTPW; ++i) {
      TokenLoads tl;
      tl.row = tokenRow(kb.idx(i));
      tl.valid = kb.lti(tl.row, count);
      tl.tok = kb.minsi(kb.addi(t0, tl.row), last);
      tl.q = loadChannels(0, tl.tok, hh);
      tl.k = loadChannels(1, tl.tok, hh);
      tl.g = loadChannels(2, tl.tok, hh);
      tl.beta = kb.load(beta, {kb.idx(0), tl.tok, hh});
      toks.push_back(std::move(tl));
    }
    gpu::BarrierOp::create(b, loc);

    for (const TokenLoads &tl : toks) {
      Value row = tl.row, valid = tl.valid;
      Value sqq = zero, skk = zero;
      Value rowBase = kb.muli(row, kb.idx(kDim));
      for (int64_t e = 0; e < CPL; ++e) {
        Value qe = kb.select(valid, tl.q[e], zero);
        Value ke = kb.select(valid, tl.k[e], zero);
        sqq = kb.fma(qe, qe, sqq);
        skk = kb.fma(ke, ke, skk);
        Value at = kb.addi(rowBase, kb.addi(ch0, kb.idx(e)));
        em.sts(qe, sQ, at);
        em.sts(ke, sK, at);
        // lb * sigmoid(A (g + dt_bias)) * log2(e), the reciprocal by the
        // special-function unit.
        Value lgt =
            emitGateLogDecay(kb, DecayGateKind::lower_bounded_sigmoid,
                             lowerBound, gateA, kb.add(tl.g[e], dtb[e]),
                             {log2e, [&](Value x) { return em.rcpApprox(x); }});
        em.sts(kb.select(valid, lgt, zero), sG, at);
      }
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
    gpu::BarrierOp::create(b, loc);

    // P2: cumulative decay per channel; e^{G_C} on the last row.
    Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
    for (int64_t c0 = 0; c0 < kDim; c0 += kThreads) {
      Value c = kb.addi(kb.idx(c0), tid);
      auto body = [&] {
        // The 16 increments loaded first (independent loads), then the
        // scan in registers.
        SmallVector<Value> inc;
        for (int64_t t = 0; t < kChunk; ++t)
          inc.push_back(em.lds(sG, kb.addi(kb.idx(t * kDim), c)));
        Value run = kb.f32(0.0), gm;
        for (int64_t t = 0; t < kChunk; ++t) {
          run = kb.add(run, inc[t]);
          em.sts(run, sG, kb.addi(kb.idx(t * kDim), c));
          if (t == kMid)
            gm = run;
        }
        // Per channel: G_m and the factors that turn the two relative
        // exponentials of P3 into e^G and e^{G_C - G} (two ex2 per element
        // instead of four; each factor stays inside f32's range).
        em.sts(gm, sChan, c);
        em.sts(exp2(gm), sChan, kb.addi(kb.idx(kDim), c));
        em.sts(exp2(kb.sub(run, gm)), sChan, kb.addi(kb.idx(2 * kDim), c));
        Value bits =
            arith::BitcastOp::create(b, loc, b.getI32Type(), exp2(run));
        memref::StoreOp::create(
            b, loc, bits, packed,
            ValueRange{kb.idx(0), lastRow, hh, kb.addi(kb.idx(R + 16), c)});
      };
      if (c0 + kThreads > kDim)
        kb.ifThen(kb.lti(c, kb.idx(kDim)), body);
      else
        body();
    }
    gpu::BarrierOp::create(b, loc);

    // P3: the decayed operands: q e^G, k e^G, k e^{G_C-G} to the packed
    // rows (valid tokens), the intra-chunk factors to shared memory.
    // The lane's channels' G_m, 2^{G_m}, 2^{G_C - G_m}: token-independent.
    SmallVector<Value> gmC = ldsChannels(offChan, ch0),
                       e2Gm = ldsChannels(offChan, kb.addi(ch0, kb.idx(kDim))),
                       e2Tail =
                           ldsChannels(offChan, kb.addi(ch0, kb.idx(2 * kDim)));
    kb.forRange(kb.idx(0), kb.idx(kTPW), [&](Value i) {
      Value t = tokenRow(i);
      Value valid = kb.lti(t, count);
      Value at = kb.addi(kb.muli(t, kb.idx(kDim)), ch0);
      Value n2 = kb.muli(t, kb.idx(2));
      Value nq = em.lds(sNorm, n2), nk = em.lds(sNorm, kb.addi(n2, kb.idx(1)));
      SmallVector<Value> rG = ldsChannels(0, at), rQ = ldsChannels(offQ, at),
                         rK = ldsChannels(offK, at);
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
      for (int64_t e = 0; e < CPL; e += 2) {
        Value wIdx = em.divu(kb.addi(ch0, kb.idx(e)), 2);
        for (int x = 0; x < 3; ++x)
          em.sts(em.pack(vals[e][3 + x], vals[e + 1][3 + x]), sOp[x],
                 kb.addi(rowW, wIdx));
        kb.ifThen(valid, [&] {
          for (int x = 0; x < 3; ++x)
            memref::StoreOp::create(
                b, loc, em.pack(vals[e][x], vals[e + 1][x]), packed,
                ValueRange{kb.idx(0), tok, hh,
                           kb.addi(kb.idx(x * kDim / 2), wIdx)});
        });
      }
    });
    gpu::BarrierOp::create(b, loc);

    // Warp 0: L (to shared memory); warp 1: Aqk (to the packed rows).
    // Fragments by ldmatrix (rows of opStride words: 16-byte aligned,
    // conflict-free).
    Value offA = em.ldmatrixOffsetA(lane, opStride * 4);
    Value offB = em.ldmatrixOffsetB(lane, opStride * 4);
    auto opAddr = [&](int x, Value laneOff, int64_t ks) {
      return smemAt(kb.addi(
          laneOff, kb.idx(offOps + x * kChunk * opStride * 4 + 32 * ks)));
    };
    auto product = [&](int aOp) {
      std::array<Acc, 2> acc = {em.zero(), em.zero()};
      for (int64_t ks = 0; ks < kDim / 16; ++ks) {
        FragA a = em.loadA(opAddr(aOp, offA, ks));
        auto bf = em.loadB2(opAddr(kKM, offB, ks), /*fromKN=*/false);
        for (int64_t nt = 0; nt < 2; ++nt)
          acc[nt] = em.mma(a, bf[nt], acc[nt]);
      }
      return acc;
    };
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      auto acc = product(kKMM);
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          Value t = kb.addi(gq, kb.idx(8 * (c / 2)));
          Value s = kb.addi(tig2, kb.idx(8 * nt + c % 2));
          // Stored negated: the solve's updates are then plain FMAs.
          Value lv = kb.select(
              kb.lti(s, t), kb.mul(kb.neg(em.lds(sBeta, t)), acc[nt][c]), zero);
          em.sts(lv, sL, kb.addi(kb.muli(t, kb.idx(lStride)), s));
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
            memref::StoreOp::create(
                b, loc, em.pack(sc[0], sc[1]), packed,
                ValueRange{kb.idx(0), kb.addi(t0, t), hh, word});
          });
        }
    });
    gpu::BarrierOp::create(b, loc);

    // Warp 0: T = (I + L)^-1 by columns (lane j < 16), P = T Diag(beta);
    // even lanes write the pair (j, j + 1) of each row.
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      Value j = em.remu(lane, kChunk);
      SmallVector<Value> x(kChunk);
      for (int64_t i = 0; i < kChunk; ++i) {
        Value xi = kb.select(kb.eqi(j, kb.idx(i)), kb.f32(1.0), zero);
        // Row i of -L (a broadcast read), four words per load.
        for (int64_t m0 = 0; m0 < i; m0 += 4) {
          SmallVector<Value> l = em.loadVector(
              smemAt(kb.idx(offL + 4 * (i * lStride + m0))), b.getF32Type(), 4);
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
        Value p = kb.mul(x[i], bj);
        Value pNext = em.shuffleXor(p, 1);
        kb.ifThen(kb.andi(store, kb.lti(kb.idx(i), count)), [&] {
          memref::StoreOp::create(
              b, loc, em.pack(p, pNext), packed,
              ValueRange{kb.idx(0), kb.addi(t0, kb.idx(i)), hh,
                         kb.addi(kb.idx(R), em.divu(j, 2))});
        });
      }
    });
  };

  // The chunks that start in this window: one per overlapping sequence.
  auto perChunk = [&](Value start, Value end) {
    Value off = kb.maxsi(kb.subi(w0, start), kb.idx(0));
    Value chunks = em.divu(kb.addi(off, kb.idx(kChunk - 1)), kChunk);
    Value t0 = kb.addi(start, kb.muli(chunks, kb.idx(kChunk)));
    kb.ifThen(kb.lti(t0, kb.minsi(w1, end)), [&] { perHead(head, t0, end); });
  };
  if (cu) {
    Value numSeqs = kb.subi(kb.dim(cu->shape[0]), kb.idx(1));
    auto [atW0, atW1] = countAtMost2(kb, em, lane, cu->full, numSeqs, w0,
                                     kb.subi(w1, kb.idx(1)));
    Value sLo = kb.subi(atW0, kb.idx(1));
    Value sHi = kb.minsi(atW1, numSeqs);
    kb.forRange(kb.maxsi(sLo, kb.idx(0)), sHi, [&](Value s) {
      perChunk(kb.loadIndex(cu->full, {s}),
               kb.loadIndex(cu->full, {kb.addi(s, kb.idx(1))}));
    });
  } else {
    perChunk(kb.idx(0), numTokens);
  }
  return true;
}

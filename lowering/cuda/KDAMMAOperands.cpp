//===- KDAMMAOperands.cpp - state-independent KDA chunk operands -*- C++ -*-===//
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
// latency: nothing here waits on the state.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"


using namespace mlir;
using namespace mlir::k3;

namespace {
constexpr int64_t kChunk = 16, kMid = 7, kWarps = 4;
constexpr int64_t kThreads = 32 * kWarps, kTPW = kChunk / kWarps;
} // namespace

/// Number of entries of cu[0..N] that are <= x (binary search; cu is
/// non-decreasing).
static Value countAtMost(KernelBuilder &kb, Value cu, Value numSeqs, Value x) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value lo = kb.idx(0), hi = kb.addi(numSeqs, kb.idx(1));
  // 2^32 sequences is beyond any plan.
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.idx(32), kb.idx(1),
                                 ValueRange{lo, hi});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value l = loop.getRegionIterArgs()[0], h = loop.getRegionIterArgs()[1];
    Value open = kb.lti(l, h);
    Value mid = arith::DivUIOp::create(b, loc, kb.addi(l, h), kb.idx(2));
    Value midc = kb.minsi(mid, numSeqs);
    Value le = kb.ifElse(open, b.getIndexType(),
                         [&] { return kb.loadIndex(cu, {midc}); },
                         [&] { return kb.idx(0); });
    Value goRight = kb.andi(open, kb.notb(kb.lti(x, le)));
    Value goLeft = kb.andi(open, kb.lti(x, le));
    Value nl = kb.select(goRight, kb.addi(mid, kb.idx(1)), l);
    Value nh = kb.select(goLeft, mid, h);
    scf::YieldOp::create(b, loc, ValueRange{nl, nh});
  }
  return loop.getResult(0);
}

FailureOr<bool> mlir::k3::emitKDAMMAOperandsCUDA(KDAMMAOperandsOp op,
                                                 gpu::GPUFuncOp fn,
                                                 KernelBuilder &kb,
                                                 ArrayRef<KernelOperand> in,
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
              b.getDenseI64ArrayAttr({kNumTokens, heads, (kChunk - 1) * heads,
                                      kChunk}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({kThreads, 1, 1}));
  // The kernel is latency-bound per block (barriers, a 16-step solve):
  // throughput comes from blocks per SM, so cap the registers for
  // cuda-kda-operands-blocks-per-sm resident blocks (default 5: 85
  // registers, no spills, 38.5 KB of shared memory each at K = 128, which
  // also caps an H200 SM at 5 blocks).
  int64_t blocksPerSM = options.kdaOperandsBlocksPerSM;
  fn->setAttr("nvvm.maxntid", b.getDenseI32ArrayAttr({int32_t(kThreads), 1, 1}));
  fn->setAttr("nvvm.minctasm", b.getI32IntegerAttr(int32_t(blocksPerSM)));

  // Shared memory: G [16][K] f32 (log2 units), the masked raw q and k
  // [16][K] f32 with their per-token norm factors [16][2] (held here, not
  // in registers across barriers: registers set how many blocks share an
  // SM), beta [16], L [16][17] f32, and the intra-chunk factors
  // q e^{G-Gm}, k e^{G-Gm}, k e^{Gm-G} as bf16 pairs [16][K/2 + 4].
  const int64_t opStride = kDim / 2 + 4, lStride = 17;
  const int64_t offQ = kChunk * kDim * 4, offK = offQ + kChunk * kDim * 4;
  const int64_t offNorm = offK + kChunk * kDim * 4;
  const int64_t offBeta = offNorm + kChunk * 2 * 4, offL = offBeta + kChunk * 4;
  const int64_t offOps = offL + kChunk * lStride * 4;
  const int64_t total = offOps + 3 * kChunk * opStride * 4;
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
  enum { kQM, kKMM, kKM };
  Value sOp[3];
  for (int i = 0; i < 3; ++i)
    sOp[i] = viewAs(b.getI32Type(), offOps + i * kChunk * opStride * 4,
                    kChunk * opStride);

  Value q = in[0].full, k = in[1].full, g = in[2].full, beta = in[3].full;
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

  // One chunk of head hh: tokens [t0, min(t0 + 16, end)).
  auto perHead = [&](Value hh, Value t0, Value end) {
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value last = kb.subi(end, kb.idx(1));
    Value gateA = kb.exp(kb.load(aLog.full, {hh}));
    SmallVector<Value> dtb(CPL);
    for (int64_t e = 0; e < CPL; ++e)
      dtb[e] = kb.load(dtBias.full, {kb.addi(kb.muli(hh, kb.idx(kDim)),
                                             kb.addi(ch0, kb.idx(e)))});
    gpu::BarrierOp::create(b, loc);

    // P1: loads, gates, norms (warp w: tokens 4w..4w+3, lane: CPL
    // channels). The log decay is kept in log2 units (exponentials are
    // then single ex2 instructions); q and k go to shared memory masked,
    // their norm factors beside them.
    // Tokens one at a time (a loop, not unrolled): what one token needs
    // in registers is all the kernel holds, so more blocks fit on an SM.
    Value zero = kb.f32(0.0);
    const double log2e = 1.4426950408889634;
    auto exp2 = [&](Value x) { return math::Exp2Op::create(b, loc, x); };
    auto tokenRow = [&](Value i) {
      return kb.addi(kb.muli(warp, kb.idx(kTPW)), i);
    };
    kb.forRange(kb.idx(0), kb.idx(kTPW), [&](Value i) {
      Value row = tokenRow(i);
      Value valid = kb.lti(row, count);
      Value tok = kb.minsi(kb.addi(t0, row), last);
      SmallVector<Value> rq(CPL), rk(CPL), rg(CPL);
      for (int64_t e = 0; e < CPL; ++e) {
        Value c = kb.addi(ch0, kb.idx(e));
        rq[e] = kb.load(q, {kb.idx(0), tok, hh, c});
        rk[e] = kb.load(k, {kb.idx(0), tok, hh, c});
        rg[e] = kb.load(g, {kb.idx(0), tok, hh, c});
      }
      Value sqq = zero, skk = zero;
      Value rowBase = kb.muli(row, kb.idx(kDim));
      for (int64_t e = 0; e < CPL; ++e) {
        Value qe = kb.select(valid, rq[e], zero);
        Value ke = kb.select(valid, rk[e], zero);
        sqq = kb.fma(qe, qe, sqq);
        skk = kb.fma(ke, ke, skk);
        Value at = kb.addi(rowBase, kb.addi(ch0, kb.idx(e)));
        em.sts(qe, sQ, at);
        em.sts(ke, sK, at);
        // lb * sigmoid(A (g + dt_bias)) * log2(e).
        Value u = kb.mul(gateA, kb.add(rg[e], dtb[e]));
        Value sig = kb.div(kb.f32(1.0),
                           kb.add(kb.f32(1.0), exp2(kb.mul(u, kb.f32(-log2e)))));
        Value lgt = kb.mul(kb.f32(lowerBound * log2e), sig);
        em.sts(kb.select(valid, lgt, zero), sG, at);
      }
      Value nq = kb.f32(scale), nk = kb.f32(1.0);
      if (l2) {
        nq = kb.mul(nq, kb.rsqrt(kb.add(em.warpSum(sqq), kb.f32(1e-6))));
        nk = kb.rsqrt(kb.add(em.warpSum(skk), kb.f32(1e-6)));
      }
      kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
        Value bt = kb.load(beta, {kb.idx(0), tok, hh});
        if (sigmoidBeta)
          bt = kb.sigmoid(bt);
        em.sts(kb.select(valid, bt, zero), sBeta, row);
        Value n2 = kb.muli(row, kb.idx(2));
        em.sts(nq, sNorm, n2);
        em.sts(nk, sNorm, kb.addi(n2, kb.idx(1)));
      });
    });
    gpu::BarrierOp::create(b, loc);

    // P2: cumulative decay per channel; e^{G_C} on the last row.
    Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
    for (int64_t c0 = 0; c0 < kDim; c0 += kThreads) {
      Value c = kb.addi(kb.idx(c0), tid);
      auto body = [&] {
        Value run = kb.f32(0.0);
        for (int64_t t = 0; t < kChunk; ++t) {
          Value at = kb.addi(kb.idx(t * kDim), c);
          run = kb.add(run, em.lds(sG, at));
          em.sts(run, sG, at);
        }
        Value bits = arith::BitcastOp::create(b, loc, b.getI32Type(),
                                              exp2(run));
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
    kb.forRange(kb.idx(0), kb.idx(kTPW), [&](Value i) {
      Value t = tokenRow(i);
      Value valid = kb.lti(t, count);
      Value rowBase = kb.muli(t, kb.idx(kDim));
      Value n2 = kb.muli(t, kb.idx(2));
      Value nq = em.lds(sNorm, n2), nk = em.lds(sNorm, kb.addi(n2, kb.idx(1)));
      SmallVector<std::array<Value, 6>> vals(CPL);
      for (int64_t e = 0; e < CPL; ++e) {
        Value c = kb.addi(ch0, kb.idx(e));
        Value at = kb.addi(rowBase, c);
        Value G = em.lds(sG, at);
        Value Gm = em.lds(sG, kb.addi(kb.idx(kMid * kDim), c));
        Value Gc = em.lds(sG, kb.addi(kb.idx((kChunk - 1) * kDim), c));
        Value eG = exp2(G), eRel = exp2(kb.sub(G, Gm));
        Value eInv = exp2(kb.sub(Gm, G)), eTail = exp2(kb.sub(Gc, G));
        Value qv = kb.mul(em.lds(sQ, at), nq), kv = kb.mul(em.lds(sK, at), nk);
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
    auto loadA = [&](Value mem, int64_t wc) -> FragA {
      Value r0 = kb.addi(kb.muli(gq, kb.idx(opStride)), kb.addi(tig, kb.idx(wc)));
      Value r1 = kb.addi(r0, kb.idx(8 * opStride));
      return {em.lds(mem, r0), em.lds(mem, r1), em.lds(mem, kb.addi(r0, kb.idx(4))),
              em.lds(mem, kb.addi(r1, kb.idx(4)))};
    };
    auto loadB = [&](Value mem, int64_t n0, int64_t wc) -> FragB {
      Value r = kb.addi(kb.muli(kb.addi(gq, kb.idx(n0)), kb.idx(opStride)),
                        kb.addi(tig, kb.idx(wc)));
      return {em.lds(mem, r), em.lds(mem, kb.addi(r, kb.idx(4)))};
    };
    auto product = [&](Value aMem) {
      std::array<Acc, 2> acc = {em.zero(), em.zero()};
      for (int64_t ks = 0; ks < kDim / 16; ++ks) {
        FragA a = loadA(aMem, 8 * ks);
        for (int64_t nt = 0; nt < 2; ++nt)
          acc[nt] = em.mma(a, loadB(sOp[kKM], 8 * nt, 8 * ks), acc[nt]);
      }
      return acc;
    };
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      auto acc = product(sOp[kKMM]);
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          Value t = kb.addi(gq, kb.idx(8 * (c / 2)));
          Value s = kb.addi(tig2, kb.idx(8 * nt + c % 2));
          Value lv = kb.select(kb.lti(s, t),
                               kb.mul(em.lds(sBeta, t), acc[nt][c]), zero);
          em.sts(lv, sL, kb.addi(kb.muli(t, kb.idx(lStride)), s));
        }
    });
    kb.ifThen(kb.eqi(warp, kb.idx(1)), [&] {
      auto acc = product(sOp[kQM]);
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
            memref::StoreOp::create(b, loc, em.pack(sc[0], sc[1]), packed,
                                    ValueRange{kb.idx(0), kb.addi(t0, t), hh,
                                               word});
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
        for (int64_t m = 0; m < i; ++m)
          xi = kb.sub(xi, kb.mul(em.lds(sL, kb.idx(i * lStride + m)), x[m]));
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
    Value sLo = kb.subi(countAtMost(kb, cu->full, numSeqs, w0), kb.idx(1));
    Value sHi = countAtMost(kb, cu->full, numSeqs, kb.subi(w1, kb.idx(1)));
    sHi = kb.minsi(sHi, numSeqs);
    kb.forRange(kb.maxsi(sLo, kb.idx(0)), sHi, [&](Value s) {
      perChunk(kb.loadIndex(cu->full, {s}),
               kb.loadIndex(cu->full, {kb.addi(s, kb.idx(1))}));
    });
  } else {
    perChunk(kb.idx(0), numTokens);
  }
  return true;
}

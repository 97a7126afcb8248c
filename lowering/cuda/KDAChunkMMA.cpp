//===- KDAChunkMMA.cpp - chunked KDA on tensor cores (mma.sync) -*- C++ -*-===//
//
// A dedicated sm_90a kernel for `k3.kda` in its chunkwise form, with every
// product on the tensor cores (`mma.sync.m16n8k16`, bf16 operands, f32
// accumulation). One block per (sequence n, head h, slice of BV = 16 W value
// columns); warp w owns 16 value columns and holds its slice of the state
// *transposed*, S^T (16 x K, f32), as mma accumulator fragments for the
// whole sequence. Tokens go in chunks of C = 16 (one mma tile).
//
// With G the within-chunk cumulative log decay (per channel), k, q the
// normalised keys and queries (scale folded into q), beta the gates and S0
// the state at the chunk's start, the chunk's delta rule is (derivation in
// docs/kda-chunkwise.md):
//
//   L[t][s]  = beta_t k_t . (e^{G_t - G_s} k_s)        s < t
//   T        = (I + L)^-1,  P[t][j] = T[t][j] beta_j   (16 x 16 solve)
//   r^T      = v^T - S0^T (k e^G)^T                    (mma, k = K)
//   delta^T  = r^T P^T                                  (mma, k = 16)
//   o^T      = S0^T (q e^G)^T + delta^T Aqk^T           (mma)
//   Aqk[t][s]= q_t . (e^{G_t - G_s} k_s)                s <= t
//   S^T      = S0^T e^{G_C} + delta^T (k e^{G_C - G})   (mma, k = 16)
//
// Keeping S^T (rows = value columns) makes an accumulator fragment of S^T
// the A operand of the next products without leaving registers (the
// accumulator of m16n8 tiles n and n+1 is the A fragment of a 16 x 16
// block), and likewise for r^T and delta^T: only chunk operands shared by
// all warps go through shared memory.
//
// The intra-chunk products L and Aqk use the chunk's middle token m as the
// decay reference (k e^{G - G_m} times k e^{G_m - G}): each factor spans at
// most 8 tokens of decay, so with the lower-bounded gate (log decay >= lb
// per token) nothing leaves the f32/bf16 exponent range as long as the
// masked-out products e^{15 |lb|} do not overflow: |lb| <= 5.5 (K3: 5).
//
// Per chunk: four block barriers (staging reuse; raw log decays; cumulative
// decays; operands), then each warp runs its products alone (L, Aqk and
// the solve are recomputed per warp so no further block barrier is needed;
// the 16 x 16 solve is 16 lanes' forward substitution).
//
// Used for bf16 q/k/v (the tensor cores' operand precision is the input's)
// with the in-op lower-bounded gate, K % 64 == 0, K <= 256, V % 16 == 0,
// f32 state. Other forms use the recurrent kernel (KDARecurrent.cpp).
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cstdlib>

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kChunk = 16; // tokens per chunk: one mma M/K tile
constexpr int64_t kMid = 7;    // decay reference token of L and Aqk

/// Shared memory regions (bytes) of one block.
struct SmemLayout {
  int64_t kDim, bv, warps;
  // Operand matrices [16][K] of bf16 pairs, rows padded by 4 words so that
  // the 8 rows a fragment load touches fall in distinct banks.
  int64_t opStride() const { return kDim / 2 + 4; } // i32 words per row
  int64_t opWords() const { return kChunk * opStride(); }
  // [K][16] bf16 (k e^{G_C - G} transposed: pairs along tokens), rows of 24.
  static constexpr int64_t kTStride = 24; // bf16 per row
  static constexpr int64_t sqStride = 24; // bf16 per row of 16x16 operands
  static constexpr int64_t lStride = 17;  // f32 per row of L

  int64_t glog = 0;                                  // f32 [16][K]
  int64_t egc() const { return glog + kChunk * kDim * 4; }     // f32 [K]
  int64_t beta() const { return egc() + kDim * 4; }            // f32 [16]
  int64_t v() const { return beta() + kChunk * 4; }            // f32 [16][BV]
  int64_t ops() const { return v() + kChunk * bv * 4; }        // 5 x words
  int64_t kgT() const { return ops() + 5 * opWords() * 4; }    // bf16 [K][24]
  // Per warp: L f32 [16][17], Aqk and P bf16 [16][24].
  int64_t warpBase() const { return kgT() + kDim * kTStride * 2; }
  int64_t warpBytes() const {
    return kChunk * lStride * 4 + 2 * kChunk * sqStride * 2;
  }
  int64_t total() const { return warpBase() + warps * warpBytes(); }
};

} // namespace

FailureOr<bool> mlir::k3::emitKDAChunkMMACUDA(KDAOp op, gpu::GPUFuncOp fn,
                                              KernelBuilder &kb,
                                              ArrayRef<KernelOperand> in,
                                              ArrayRef<KernelOperand> out) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  MLIRContext *ctx = b.getContext();

  unsigned next = 5;
  const KernelOperand *init = op.getInitialState() ? &in[next++] : nullptr;
  const KernelOperand *cu = op.getCuSeqlens() ? &in[next++] : nullptr;
  const KernelOperand *aLog = op.getALog() ? &in[next++] : nullptr;
  const KernelOperand *dtBias = op.getDtBias() ? &in[next++] : nullptr;

  // The form this kernel covers (see the file comment).
  auto elemOf = [](Value m) {
    return cast<MemRefType>(m.getType()).getElementType();
  };
  auto gateKind = op.getGateKind();
  if (!gateKind || *gateKind != DecayGateKind::lower_bounded_sigmoid ||
      !aLog || !dtBias || !op.getLowerBoundAttr())
    return false;
  double lowerBound = op.getLowerBoundAttr().getValueAsDouble();
  if (!(lowerBound >= -5.5 && lowerBound <= 0.0))
    return false;
  for (int i = 0; i < 3; ++i)
    if (!elemOf(in[i].base).isBF16())
      return false;
  if (!elemOf(out[1].base).isF32() || (init && !elemOf(init->base).isF32()))
    return false;
  const int64_t kDim = in[0].shape[3], vDim = in[2].shape[3],
                heads = in[0].shape[2];
  if (kDim <= 0 || vDim <= 0 || heads <= 0 || kDim % 64 != 0 || kDim > 256 ||
      vDim % 16 != 0 || in[2].shape[3] != vDim)
    return false;

  // Warps per block: each owns 16 value columns. K3_KDA_MMA_WARPS tunes.
  int64_t warps = 4;
  if (const char *env = std::getenv("K3_KDA_MMA_WARPS"))
    warps = std::atoi(env);
  if (warps != 1 && warps != 2 && warps != 4 && warps != 8)
    warps = 4;
  while (warps > 1 && (vDim / 16) % warps != 0)
    warps /= 2;
  const int64_t BV = 16 * warps, threads = 32 * warps;
  const int64_t nvb = vDim / BV;
  const int64_t TPW = kChunk / warps;  // tokens each warp stages
  const int64_t CPL = kDim / 32;       // channels per lane (even)
  const int64_t NT = kDim / 8;         // accumulator tiles of S^T
  SmemLayout sl{kDim, BV, warps};
  // Dynamic shared memory (the runtime raises the limit past 48 KiB);
  // leave room for two blocks per SM.
  if (sl.total() > 100 * 1024)
    return false;

  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return false;
  int64_t per = heads * nvb;
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr({nForm->symbol, nForm->a * per,
                                      nForm->b * per, 1}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({threads, 1, 1}));
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(sl.total()));

  // The dynamic shared memory, viewed as f32, i32 (bf16 pairs) and bf16.
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto bytesTy = MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                                 MemRefLayoutAttrInterface{}, wg);
  Value smem = gpu::DynamicSharedMemoryOp::create(b, loc, bytesTy);
  auto viewAs = [&](Type elem, int64_t byteOff, int64_t count) {
    auto ty = MemRefType::get({count}, elem, MemRefLayoutAttrInterface{}, wg);
    return memref::ViewOp::create(b, loc, ty, smem, kb.idx(byteOff),
                                  ValueRange{})
        .getResult();
  };
  Value sG = viewAs(b.getF32Type(), sl.glog, kChunk * kDim);
  Value sEgc = viewAs(b.getF32Type(), sl.egc(), kDim);
  Value sBeta = viewAs(b.getF32Type(), sl.beta(), kChunk);
  Value sV = viewAs(b.getF32Type(), sl.v(), kChunk * BV);
  // qg, ke, qm, kmm, km: [16][opStride] words each.
  enum { kQG, kKE, kQM, kKMM, kKM, kNumOps };
  SmallVector<Value> sOp;
  for (int i = 0; i < kNumOps; ++i)
    sOp.push_back(viewAs(b.getI32Type(), sl.ops() + i * sl.opWords() * 4,
                         sl.opWords()));
  Value sKgT16 = viewAs(b.getBF16Type(), sl.kgT(), kDim * sl.kTStride);
  Value sKgT32 = viewAs(b.getI32Type(), sl.kgT(), kDim * sl.kTStride / 2);

  MMAEmitter em{b, loc, kb};
  Value q = in[0].full, k = in[1].full, v = in[2].full, g = in[3].full,
        beta = in[4].full, o = out[0].full;
  const double scale = op.getScale().convertToDouble();
  const bool l2 = op.getUseQkL2norm(), sigmoidBeta = op.getUseBetaSigmoid();

  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value vb = em.remu(bid, nvb);
  Value hn = em.divu(bid, nvb);
  Value h = em.remu(hn, heads);
  Value n = em.divu(hn, heads);
  Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
  Value gq = em.divu(lane, 4), tig = em.remu(lane, 4);
  Value tig2 = kb.muli(tig, kb.idx(2));
  Value vcol0 = kb.addi(kb.muli(vb, kb.idx(BV)), kb.muli(warp, kb.idx(16)));
  Value vRow[2] = {kb.addi(vcol0, gq), kb.addi(vcol0, kb.addi(gq, kb.idx(8)))};

  Value bIdx = cu ? kb.idx(0) : n;
  Value start = cu ? kb.loadIndex(cu->full, {n}) : kb.idx(0);
  Value end = cu ? kb.loadIndex(cu->full, {kb.addi(n, kb.idx(1))})
                 : kb.dim(in[0].shape[1]);
  Value last = kb.maxsi(kb.subi(end, kb.idx(1)), start);

  // The warp's S^T: tile nt covers K columns 8 nt .. 8 nt + 7; element
  // (value row vRow[c / 2], K column 8 nt + 2 tig + c % 2).
  auto kCol = [&](int64_t nt, int64_t c) {
    return kb.addi(kb.idx(8 * nt + c % 2), tig2);
  };
  SmallVector<Value> acc0;
  for (int64_t nt = 0; nt < NT; ++nt)
    for (int64_t c = 0; c < 4; ++c)
      acc0.push_back(init ? kb.load(init->full, {n, h, kCol(nt, c), vRow[c / 2]})
                          : kb.f32(0.0));

  // Per-lane constants of the gate: lane l stages channels l CPL .. + CPL-1.
  Value gateA = kb.exp(kb.load(aLog->full, {h}));
  Value ch0 = kb.muli(lane, kb.idx(CPL));
  SmallVector<Value> dtb(CPL);
  for (int64_t e = 0; e < CPL; ++e)
    dtb[e] = kb.load(dtBias->full, {kb.addi(kb.muli(h, kb.idx(kDim)),
                                            kb.addi(ch0, kb.idx(e)))});
  // Per-warp regions.
  Value wBase = kb.addi(kb.idx(sl.warpBase()),
                        kb.muli(warp, kb.idx(sl.warpBytes())));
  auto warpView = [&](Type elem, int64_t off, int64_t count) {
    auto ty = MemRefType::get({count}, elem, MemRefLayoutAttrInterface{}, wg);
    return memref::ViewOp::create(b, loc, ty, smem,
                                  kb.addi(wBase, kb.idx(off)), ValueRange{})
        .getResult();
  };
  const int64_t sq = SmemLayout::sqStride;
  Value sL = warpView(b.getF32Type(), 0, kChunk * SmemLayout::lStride);
  int64_t aqkOff = kChunk * SmemLayout::lStride * 4;
  int64_t pOff = aqkOff + kChunk * sq * 2;
  Value sAqk32 = warpView(b.getI32Type(), aqkOff, kChunk * sq / 2);
  Value sP16 = warpView(b.getBF16Type(), pOff, kChunk * sq);
  Value sP32 = warpView(b.getI32Type(), pOff, kChunk * sq / 2);

  auto chunks = scf::ForOp::create(b, loc, start, end, kb.idx(kChunk), acc0);
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value t0 = chunks.getInductionVar();
    ValueRange it = chunks.getRegionIterArgs();
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    gpu::BarrierOp::create(b, loc);

    // P1. Warp w stages tokens w TPW .. + TPW-1; lane l channels l CPL ..:
    // normalised q (with the scale), k, and the raw log decay; padded
    // tokens (past the sequence) get q = k = v = beta = 0 and no decay.
    SmallVector<Value> qn(TPW * CPL), kn(TPW * CPL);
    {
      SmallVector<Value> rq(TPW * CPL), rk(TPW * CPL), rg(TPW * CPL);
      SmallVector<Value> tokRow(TPW), tok(TPW), valid(TPW);
      for (int64_t i = 0; i < TPW; ++i) {
        tokRow[i] = kb.addi(kb.muli(warp, kb.idx(TPW)), kb.idx(i));
        tok[i] = kb.minsi(kb.addi(t0, tokRow[i]), last);
        valid[i] = kb.lti(tokRow[i], count);
        for (int64_t e = 0; e < CPL; ++e) {
          Value c = kb.addi(ch0, kb.idx(e));
          rq[i * CPL + e] = kb.load(q, {bIdx, tok[i], h, c});
          rk[i * CPL + e] = kb.load(k, {bIdx, tok[i], h, c});
          rg[i * CPL + e] = kb.load(g, {bIdx, tok[i], h, c});
        }
      }
      // v: 16 x BV values over the block's threads.
      const int64_t VE = kChunk * BV / threads;
      SmallVector<Value> rv(VE), vAt(VE);
      for (int64_t m = 0; m < VE; ++m) {
        Value e = kb.addi(kb.idx(m * threads), tid);
        Value t = em.divu(e, BV);
        Value col = kb.addi(kb.muli(vb, kb.idx(BV)), em.remu(e, BV));
        Value x = kb.load(v, {bIdx, kb.minsi(kb.addi(t0, t), last), h, col});
        rv[m] = kb.select(kb.lti(t, count), x, kb.f32(0.0));
        vAt[m] = e;
      }
      for (int64_t m = 0; m < VE; ++m)
        em.sts(rv[m], sV, vAt[m]);
      Value zero = kb.f32(0.0);
      for (int64_t i = 0; i < TPW; ++i) {
        Value sqq = zero, skk = zero;
        for (int64_t e = 0; e < CPL; ++e) {
          Value &qe = rq[i * CPL + e], &ke = rk[i * CPL + e];
          qe = kb.select(valid[i], qe, zero);
          ke = kb.select(valid[i], ke, zero);
          sqq = kb.fma(qe, qe, sqq);
          skk = kb.fma(ke, ke, skk);
          Value u = kb.add(rg[i * CPL + e], dtb[e]);
          Value lgt = kb.mul(kb.f32(lowerBound), kb.sigmoid(kb.mul(gateA, u)));
          lgt = kb.select(valid[i], lgt, zero);
          em.sts(lgt, sG, kb.addi(kb.muli(tokRow[i], kb.idx(kDim)),
                                  kb.addi(ch0, kb.idx(e))));
        }
        Value nq = kb.f32(scale), nk = kb.f32(1.0);
        if (l2) {
          nq = kb.mul(nq, kb.rsqrt(kb.add(em.warpSum(sqq), kb.f32(1e-6))));
          nk = kb.rsqrt(kb.add(em.warpSum(skk), kb.f32(1e-6)));
        }
        for (int64_t e = 0; e < CPL; ++e) {
          qn[i * CPL + e] = kb.mul(rq[i * CPL + e], nq);
          kn[i * CPL + e] = kb.mul(rk[i * CPL + e], nk);
        }
        kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
          Value bt = kb.load(beta, {bIdx, tok[i], h});
          if (sigmoidBeta)
            bt = kb.sigmoid(bt);
          em.sts(kb.select(valid[i], bt, zero), sBeta, tokRow[i]);
        });
      }
    }
    gpu::BarrierOp::create(b, loc);

    // P2. Cumulative log decay per channel (in place), and e^{G_C}.
    for (int64_t c0 = 0; c0 < kDim; c0 += threads) {
      Value c = kb.addi(kb.idx(c0), tid);
      auto body = [&] {
        Value run = kb.f32(0.0);
        for (int64_t t = 0; t < kChunk; ++t) {
          Value at = kb.addi(kb.idx(t * kDim), c);
          run = kb.add(run, em.lds(sG, at));
          em.sts(run, sG, at);
        }
        em.sts(kb.exp(run), sEgc, c);
      };
      if (c0 + threads > kDim)
        kb.ifThen(kb.lti(c, kb.idx(kDim)), body);
      else
        body();
    }
    gpu::BarrierOp::create(b, loc);

    // P3. The chunk's bf16 operands.
    for (int64_t i = 0; i < TPW; ++i) {
      Value t = kb.addi(kb.muli(warp, kb.idx(TPW)), kb.idx(i));
      SmallVector<std::array<Value, kNumOps>> vals(CPL);
      for (int64_t e = 0; e < CPL; ++e) {
        Value c = kb.addi(ch0, kb.idx(e));
        Value G = em.lds(sG, kb.addi(kb.muli(t, kb.idx(kDim)), c));
        Value Gm = em.lds(sG, kb.addi(kb.idx(kMid * kDim), c));
        Value Gc = em.lds(sG, kb.addi(kb.idx((kChunk - 1) * kDim), c));
        Value eG = kb.exp(G), eRel = kb.exp(kb.sub(G, Gm));
        Value eInv = kb.exp(kb.sub(Gm, G)), eTail = kb.exp(kb.sub(Gc, G));
        Value qv = qn[i * CPL + e], kv = kn[i * CPL + e];
        vals[e] = {kb.mul(qv, eG), kb.mul(kv, eG), kb.mul(qv, eRel),
                   kb.mul(kv, eRel), kb.mul(kv, eInv)};
        Value kg = kb.mul(kv, eTail);
        em.sts(em.bf16(kg), sKgT16,
               kb.addi(kb.muli(c, kb.idx(SmemLayout::kTStride)), t));
      }
      Value rowW = kb.muli(t, kb.idx(sl.opStride()));
      for (int64_t e = 0; e < CPL; e += 2) {
        Value w = kb.addi(rowW, em.divu(kb.addi(ch0, kb.idx(e)), 2));
        for (int x = 0; x < kNumOps; ++x)
          em.sts(em.pack(vals[e][x], vals[e + 1][x]), sOp[x], w);
      }
    }
    gpu::BarrierOp::create(b, loc);

    // Each warp from here on: fragment loads of shared operands.
    // A operand rows g, g + 8 of a [16][*] operand at word column wc.
    auto loadA = [&](Value mem, int64_t stride, int64_t wc) -> FragA {
      Value r0 = kb.addi(kb.muli(gq, kb.idx(stride)), kb.addi(tig, kb.idx(wc)));
      Value r1 = kb.addi(r0, kb.idx(8 * stride));
      return {em.lds(mem, r0), em.lds(mem, r1),
              em.lds(mem, kb.addi(r0, kb.idx(4))),
              em.lds(mem, kb.addi(r1, kb.idx(4)))};
    };
    // B operand (k x 8) stored as [n][k] rows: n = n0 + g, k pairs at wc.
    auto loadB = [&](Value mem, int64_t stride, int64_t n0, int64_t wc) -> FragB {
      Value r = kb.addi(kb.muli(kb.addi(gq, kb.idx(n0)), kb.idx(stride)),
                        kb.addi(tig, kb.idx(wc)));
      return {em.lds(mem, r), em.lds(mem, kb.addi(r, kb.idx(4)))};
    };
    const int64_t os = sl.opStride(), KS = kDim / 16;

    // S0^T as A fragments, and the products with the state:
    // pS = S0^T (k e^G)^T, oT = S0^T (q e^G)^T (two token tiles each).
    SmallVector<FragA> aS(KS);
    for (int64_t ks = 0; ks < KS; ++ks) {
      Acc lo{it[8 * ks + 0], it[8 * ks + 1], it[8 * ks + 2], it[8 * ks + 3]};
      Acc hi{it[8 * ks + 4], it[8 * ks + 5], it[8 * ks + 6], it[8 * ks + 7]};
      aS[ks] = em.accToA(lo, hi);
    }
    Acc pS[2] = {em.zero(), em.zero()}, oT[2] = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < KS; ++ks)
      for (int64_t nt = 0; nt < 2; ++nt) {
        pS[nt] = em.mma(aS[ks], loadB(sOp[kKE], os, 8 * nt, 8 * ks), pS[nt]);
        oT[nt] = em.mma(aS[ks], loadB(sOp[kQG], os, 8 * nt, 8 * ks), oT[nt]);
      }

    // L = beta_t (k e^{G-Gm}) (k e^{Gm-G})^T below the diagonal and
    // Aqk = (q e^{G-Gm}) (k e^{Gm-G})^T on and below it, this warp's copy.
    Acc aKK[2] = {em.zero(), em.zero()}, aQK[2] = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < KS; ++ks) {
      FragA aK = loadA(sOp[kKMM], os, 8 * ks), aQ = loadA(sOp[kQM], os, 8 * ks);
      for (int64_t nt = 0; nt < 2; ++nt) {
        FragB bK = loadB(sOp[kKM], os, 8 * nt, 8 * ks);
        aKK[nt] = em.mma(aK, bK, aKK[nt]);
        aQK[nt] = em.mma(aQ, bK, aQK[nt]);
      }
    }
    Value zero = kb.f32(0.0);
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t half = 0; half < 2; ++half) {
        Value t = kb.addi(gq, kb.idx(8 * half));
        Value bt = em.lds(sBeta, t);
        Value sc[2];
        for (int64_t c = 0; c < 2; ++c) {
          Value s = kb.addi(tig2, kb.idx(8 * nt + c));
          Value lv = kb.select(kb.lti(s, t), kb.mul(bt, aKK[nt][2 * half + c]),
                               zero);
          em.sts(lv, sL, kb.addi(kb.muli(t, kb.idx(SmemLayout::lStride)), s));
          sc[c] = kb.select(kb.lti(t, s), zero, aQK[nt][2 * half + c]);
        }
        em.sts(em.pack(sc[0], sc[1]), sAqk32,
               kb.addi(kb.muli(t, kb.idx(sq / 2)),
                       kb.addi(tig, kb.idx(4 * nt))));
      }
    em.syncWarp();

    // T = (I + L)^-1 by forward substitution, lane j < 16 one column;
    // P[i][j] = T[i][j] beta_j.
    {
      Value j = em.remu(lane, kChunk);
      SmallVector<Value> x(kChunk);
      for (int64_t i = 0; i < kChunk; ++i) {
        Value xi = kb.select(kb.eqi(j, kb.idx(i)), kb.f32(1.0), zero);
        for (int64_t m = 0; m < i; ++m)
          xi = kb.sub(xi, kb.mul(em.lds(sL, kb.idx(i * SmemLayout::lStride + m)),
                                 x[m]));
        x[i] = xi;
      }
      Value bj = em.lds(sBeta, j);
      kb.ifThen(kb.lti(lane, kb.idx(kChunk)), [&] {
        for (int64_t i = 0; i < kChunk; ++i)
          em.sts(em.bf16(kb.mul(x[i], bj)), sP16, kb.addi(kb.idx(i * sq), j));
      });
    }
    em.syncWarp();

    // r^T = v^T - pS; delta^T = r^T P^T; o^T += delta^T Aqk^T.
    Acc r[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t c = 0; c < 4; ++c) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + c % 2));
        Value col = kb.addi(kb.muli(warp, kb.idx(16)),
                            kb.addi(gq, kb.idx(8 * (c / 2))));
        Value vv = em.lds(sV, kb.addi(kb.muli(t, kb.idx(BV)), col));
        r[nt][c] = kb.sub(vv, pS[nt][c]);
      }
    FragA aR = em.accToA(r[0], r[1]);
    Acc dT[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      dT[nt] = em.mma(aR, loadB(sP32, sq / 2, 8 * nt, 0), em.zero());
    FragA aD = em.accToA(dT[0], dT[1]);
    for (int64_t nt = 0; nt < 2; ++nt) {
      oT[nt] = em.mma(aD, loadB(sAqk32, sq / 2, 8 * nt, 0), oT[nt]);
      for (int64_t c = 0; c < 4; ++c) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + c % 2));
        kb.ifThen(kb.lti(t, count), [&] {
          kb.store(oT[nt][c], o, {bIdx, kb.addi(t0, t), h, vRow[c / 2]});
        });
      }
    }

    // S^T = S0^T e^{G_C} + delta^T (k e^{G_C - G}).
    SmallVector<Value> next;
    for (int64_t nt = 0; nt < NT; ++nt) {
      Value d0 = em.lds(sEgc, kCol(nt, 0)), d1 = em.lds(sEgc, kCol(nt, 1));
      Acc c{kb.mul(it[4 * nt + 0], d0), kb.mul(it[4 * nt + 1], d1),
            kb.mul(it[4 * nt + 2], d0), kb.mul(it[4 * nt + 3], d1)};
      c = em.mma(aD, loadB(sKgT32, SmemLayout::kTStride / 2, 8 * nt, 0), c);
      next.append(c.begin(), c.end());
    }
    scf::YieldOp::create(b, loc, next);
  }

  for (int64_t nt = 0; nt < NT; ++nt)
    for (int64_t c = 0; c < 4; ++c)
      kb.store(chunks.getResult(4 * nt + c), out[1].full,
               {n, h, kCol(nt, c), vRow[c / 2]});
  return true;
}

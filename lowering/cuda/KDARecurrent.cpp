//===- KDARecurrent.cpp - register-resident KDA recurrence ------*- C++ -*-===//
//
// A dedicated sm_90a kernel for `k3.kda` in its recurrent (token-by-token)
// form. One block per (sequence n, head h, slice of BV value columns). A
// group of P adjacent lanes owns C adjacent value columns j..j+C-1; lane p
// of the group holds rows i = r * P + p (r < KS = K / P) of those columns
// of S in registers for the whole sequence (KS * C values, 64 by default:
// C = 4, P = K / 16). With C = 4 the state moves through global memory in
// 16-byte loads and stores (a row's four columns).
//
// Tokens are processed in chunks of S (16 for K = 128). Per chunk:
//  A. the whole block loads, with every load of the chunk in flight at
//     once, raw q_i, k_i, g_i for S tokens and the block's v columns; it
//     stages the decay a_i = exp(gate(g_i)), k_i and q_i interleaved
//     ({a, k, q, pad}: one ld.shared.v4 per row) and v in shared memory,
//     and per-token warp partials of |q|^2, |k|^2, q.k (shuffles);
//  B. one thread per token folds the partials into {scale rq, rk,
//     scale rq rk q.k, beta} (sigmoid applied);
//  C. each lane runs the S recurrence steps on its registers, no barrier:
//
//   S'   = a * S                            (per row)
//   pred = rk * sum_i S'_i k_i              (P-lane shuffle reduction)
//   u    = beta (v_j - pred)
//   S    = S' + k (rk u)
//   o_j  = scale (rq * sum_i S'_i q_i + u * rq rk (q.k))
//
// Three barriers per chunk instead of one per token. S = 1 (the decode
// entry's tile) takes the other form, KDARecurrentTokens.cpp: no staging.
//
// Built from typed values: the staging is a workgroup memref of f32, the
// state's 16-byte moves are vector.load/vector.store on its row-major view,
// the operands come by name through the op's adaptor; the steps above are
// the member functions of RecurrentKernel.
//
// Supported: static K, V <= 256 with K divisible by P, any float q/k/v/g/
// beta/o, an f32 or bf16 state (kda-state-dtype=bf16: widened on load,
// rounded once on store), optional initial state and cu_seqlens, in-op
// gates or a plain log-decay g. Anything else falls back to the generic loop
// nest.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "lowering/DecayGate.h"
#include "lowering/KernelConfigRules.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/KDARecurrentPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/MathExtras.h"

#include <cstdio>
#include <string>

using namespace mlir;
using namespace mlir::k3;

namespace {

using Emitter = KDARecurrentEmitter;
using Plan = KDARecurrentPlan;

/// The kernel body, in the steps the file header describes.
class RecurrentKernel {
public:
  RecurrentKernel(KDAOp op, KernelBuilder &kb, const Plan &p,
                  ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out,
                  Value smem)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{{b, loc, kb}}, p(p),
        a(in, op), out(out), smem(smem), terms(op) {
    init = a.getInitialState();
    cu = a.getCuSeqlens();
  }

  void emit() {
    positions();
    SmallVector<Value> s0 = loadState();
    gateTerms();
    auto chunks = scf::ForOp::create(b, loc, start, end, kb.idx(p.S), s0);
    {
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(chunks.getBody());
      Value t0 = chunks.getInductionVar();
      // The previous chunk's steps are done with the staging.
      gpu::BarrierOp::create(b, loc);
      stageChunk(t0);
      gpu::BarrierOp::create(b, loc);
      tokenScalars(t0);
      gpu::BarrierOp::create(b, loc);
      scf::YieldOp::create(b, loc, steps(t0, chunks.getRegionIterArgs()));
    }
    storeState(chunks.getResults());
  }

private:
  /// The block's (sequence, head, value slice), the lane's group and
  /// columns, and the sequence's tokens.
  void positions() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    this->tid = tid;
    vb = em.remu(bid, kb.idx(p.nvb));
    Value hn = em.divu(bid, kb.idx(p.nvb));
    h = em.remu(hn, kb.idx(p.heads));
    n = em.divu(hn, kb.idx(p.heads));
    pLane = em.remu(tid, kb.idx(p.P));
    Value grp = em.divu(tid, kb.idx(p.P));
    jl = kb.muli(grp, kb.idx(p.C)); // first column, in the block
    j = kb.addi(kb.muli(vb, kb.idx(p.BV)), jl);
    jActive = kb.lti(j, kb.idx(p.vDim));
    jc = kb.minsi(j, kb.idx(p.vDim - p.C));
    lane = em.remu(tid, kb.idx(32));
    warp = em.divu(tid, kb.idx(32));

    bIdx = cu.base ? kb.idx(0) : n;
    start = cu.base ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
    end = cu.base ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))})
                  : kb.dim(a.getQ().shape[1]);
    last = kb.maxsi(kb.subi(end, kb.idx(1)), start);
  }

  /// The columns' initial rows, S[c * KS + r] (16-byte vector loads when
  /// C = 4).
  SmallVector<Value> loadState() {
    rowIdx.assign(p.KS, Value());
    if (init.base && p.C == 4)
      initRows = em.contiguousView(init);
    SmallVector<Value> s0(p.KS * p.C);
    for (int64_t r = 0; r < p.KS; ++r) {
      rowIdx[r] = kb.addi(kb.idx(r * p.P), pLane);
      for (int64_t c = 0; c < p.C; ++c)
        s0[c * p.KS + r] = kb.f32(0.0);
      if (!init.base)
        continue;
      if (p.C == 4) {
        auto vals = em.loadVector(initRows, {n, h, rowIdx[r], jc}, 4);
        for (int64_t c = 0; c < p.C; ++c)
          s0[c * p.KS + r] = vals[c];
      } else {
        s0[r] = kb.load(init.full, {n, h, rowIdx[r], jc});
      }
    }
    return s0;
  }

  /// The rows this thread stages, and their token-independent gate terms.
  void gateTerms() {
    stageRow.assign(p.E, Value());
    stageOk.assign(p.E, Value());
    dtb.assign(p.E, Value());
    if (terms.gateKind)
      gateA = kb.exp(kb.load(a.getALog().full, {h}));
    for (int64_t e = 0; e < p.E; ++e) {
      Value i = kb.addi(kb.idx(e * p.threads), tid);
      stageOk[e] = p.stageGuard ? kb.lti(i, kb.idx(p.kDim)) : Value();
      stageRow[e] = p.stageGuard ? kb.minsi(i, kb.idx(p.kDim - 1)) : i;
      if (terms.gateKind)
        dtb[e] = kb.load(a.getDtBias().full,
                         {kb.addi(kb.muli(h, kb.idx(p.kDim)), stageRow[e])});
    }
  }

  /// A. Every load of the chunk first (tokens past the end repeat the last
  /// one), then the gates, the staging and the partial sums.
  void stageChunk(Value t0) {
    SmallVector<Value> tokOf(p.S);
    for (int64_t s = 0; s < p.S; ++s)
      tokOf[s] = kb.minsi(kb.addi(t0, kb.idx(s)), last);
    const int64_t S = p.S, E = p.E;
    SmallVector<Value> rq(S * E), rk(S * E), rg(S * E);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t e = 0; e < E; ++e) {
        SmallVector<Value, 4> at{bIdx, tokOf[s], h, stageRow[e]};
        rq[s * E + e] = kb.load(a.getQ().full, at);
        rk[s * E + e] = kb.load(a.getK().full, at);
        rg[s * E + e] = kb.load(a.getG().full, at);
      }
    stageValues(t0);
    for (int64_t s = 0; s < S; ++s)
      stageToken(s, ArrayRef(rq).slice(s * E, E), ArrayRef(rk).slice(s * E, E),
                 ArrayRef(rg).slice(s * E, E));
  }

  /// The chunk's v columns, [S][BV] at vBase.
  void stageValues(Value t0) {
    const int64_t SBV = p.S * p.BV;
    const int64_t VE = (SBV + p.threads - 1) / p.threads;
    SmallVector<Value> rv(VE), vAt(VE), vOk(VE);
    for (int64_t m = 0; m < VE; ++m) {
      Value e = kb.addi(kb.idx(m * p.threads), tid);
      vOk[m] = SBV % p.threads != 0 ? kb.lti(e, kb.idx(SBV)) : Value();
      Value ec = vOk[m] ? kb.minsi(e, kb.idx(SBV - 1)) : e;
      Value s = em.divu(ec, kb.idx(p.BV));
      Value col = kb.minsi(
          kb.addi(kb.muli(vb, kb.idx(p.BV)), em.remu(ec, kb.idx(p.BV))),
          kb.idx(p.vDim - 1));
      Value ts = kb.minsi(kb.addi(t0, s), last);
      rv[m] = kb.load(a.getV().full, {bIdx, ts, h, col});
      vAt[m] = kb.addi(kb.idx(p.vBase), ec);
    }
    for (int64_t m = 0; m < VE; ++m) {
      if (vOk[m])
        kb.ifThen(vOk[m], [&] { em.sts(rv[m], smem, vAt[m]); });
      else
        em.sts(rv[m], smem, vAt[m]);
    }
  }

  /// Token s's decays, k and q rows to shared memory, and the warp's
  /// partials of |q|^2, |k|^2, q.k.
  void stageToken(int64_t s, ArrayRef<Value> rq, ArrayRef<Value> rk,
                  ArrayRef<Value> rg) {
    Value sq = kb.f32(0.0), sk = kb.f32(0.0), qk = kb.f32(0.0);
    for (int64_t e = 0; e < p.E; ++e) {
      Value lgt = rg[e];
      if (terms.gateKind)
        lgt = emitGateLogDecay(kb, *terms.gateKind, terms.lowerBound, gateA,
                               kb.add(rg[e], dtb[e]));
      Value dec = kb.exp(lgt);
      Value qe = rq[e], ke = rk[e];
      if (stageOk[e]) {
        qe = kb.select(stageOk[e], qe, kb.f32(0.0));
        ke = kb.select(stageOk[e], ke, kb.f32(0.0));
      }
      if (terms.l2) {
        sq = em.fma(qe, qe, sq);
        sk = em.fma(ke, ke, sk);
      }
      qk = em.fma(qe, ke, qk);
      Value at = kb.muli(kb.addi(kb.idx(s * p.kDim), stageRow[e]), kb.idx(4));
      auto write = [&] {
        em.sts(dec, smem, at);
        em.sts(ke, smem, kb.addi(at, kb.idx(1)));
        em.sts(qe, smem, kb.addi(at, kb.idx(2)));
      };
      if (stageOk[e])
        kb.ifThen(stageOk[e], write);
      else
        write();
    }
    int64_t width = std::min<int64_t>(p.threads, 32);
    SmallVector<Value> sums;
    if (terms.l2)
      sums = {em.groupSum(sq, width), em.groupSum(sk, width),
              em.groupSum(qk, width)};
    else
      sums = {kb.f32(0.0), kb.f32(0.0), em.groupSum(qk, width)};
    Value pb =
        kb.addi(kb.idx(p.partBase + s * p.warps * 4), kb.muli(warp, kb.idx(4)));
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      for (int c = 0; c < 3; ++c)
        em.sts(sums[c], smem, kb.addi(pb, kb.idx(c)));
    });
  }

  /// B. One thread per token: {scale rq, rk, scale rq rk q.k, beta}.
  void tokenScalars(Value t0) {
    for (int64_t s0i = 0; s0i < p.S; s0i += p.threads) {
      Value s = kb.addi(kb.idx(s0i), tid);
      auto body = [&] {
        Value pb = kb.addi(kb.idx(p.partBase), kb.muli(s, kb.idx(p.warps * 4)));
        SmallVector<Value> sum(3, kb.f32(0.0));
        for (int64_t w = 0; w < p.warps; ++w)
          for (int c = 0; c < 3; ++c)
            sum[c] =
                kb.add(sum[c], em.lds(smem, kb.addi(pb, kb.idx(w * 4 + c))));
        Value nq =
            terms.l2 ? kb.rsqrt(kb.add(sum[0], kb.f32(1e-6))) : kb.f32(1.0);
        Value nk =
            terms.l2 ? kb.rsqrt(kb.add(sum[1], kb.f32(1e-6))) : kb.f32(1.0);
        Value ts = kb.minsi(kb.addi(t0, s), last);
        Value bt = kb.load(a.getBeta().full, {bIdx, ts, h});
        if (terms.sigmoidBeta)
          bt = kb.sigmoid(bt);
        Value tb = kb.addi(kb.idx(p.tokBase), kb.muli(s, kb.idx(4)));
        em.sts(kb.mul(kb.f32(terms.scale), nq), smem, tb);
        em.sts(nk, smem, kb.addi(tb, kb.idx(1)));
        em.sts(kb.mul(kb.f32(terms.scale), kb.mul(kb.mul(nq, nk), sum[2])),
               smem, kb.addi(tb, kb.idx(2)));
        em.sts(bt, smem, kb.addi(tb, kb.idx(3)));
      };
      if (s0i + p.threads > p.S)
        kb.ifThen(kb.lti(s, kb.idx(p.S)), body);
      else
        body();
    }
  }

  /// C. The chunk's steps, in registers; returns the state after them.
  ValueRange steps(Value t0, ValueRange st) {
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(p.S));
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(0), count, kb.idx(1), ValueRange(st));
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value s = loop.getInductionVar();
    Value tb = kb.addi(kb.idx(p.tokBase), kb.muli(s, kb.idx(4)));
    TokenStep t;
    t.srq = em.lds(smem, tb);
    t.nk = em.lds(smem, kb.addi(tb, kb.idx(1)));
    t.skq = em.lds(smem, kb.addi(tb, kb.idx(2)));
    t.bt = em.lds(smem, kb.addi(tb, kb.idx(3)));
    Value vAt0 =
        kb.addi(kb.addi(kb.idx(p.vBase), kb.muli(s, kb.idx(p.BV))), jl);
    for (int64_t c = 0; c < p.C; ++c)
      t.v.push_back(em.lds(smem, kb.addi(vAt0, kb.idx(c))));
    scf::YieldOp::create(b, loc, step(t, s, t0, loop.getRegionIterArgs()));
    return loop.getResults();
  }

  struct TokenStep {
    Value srq, nk, skq, bt;
    SmallVector<Value> v;
  };

  /// One token's update of the lane's state `it`; stores o.
  SmallVector<Value> step(const TokenStep &t, Value s, Value t0,
                          ValueRange it) {
    const int64_t KS = p.KS, C = p.C;
    Value base = kb.muli(kb.addi(kb.muli(s, kb.idx(p.kDim)), pLane), kb.idx(4));
    const int64_t acc = std::min<int64_t>(std::max<int64_t>(1, 4 / C), KS);
    SmallVector<Value> pAcc(C * acc, kb.f32(0.0)), oAcc(C * acc, kb.f32(0.0));
    SmallVector<Value> sd(KS * C), kr(KS);
    for (int64_t r = 0; r < KS; ++r) {
      Value at = kb.addi(base, kb.idx(r * p.P * 4));
      Value dec = em.lds(smem, at);
      kr[r] = em.lds(smem, kb.addi(at, kb.idx(1)));
      Value qr = em.lds(smem, kb.addi(at, kb.idx(2)));
      for (int64_t c = 0; c < C; ++c) {
        Value &pa = pAcc[c * acc + r % acc], &oa = oAcc[c * acc + r % acc];
        sd[c * KS + r] = kb.mul(dec, it[c * KS + r]);
        pa = em.fma(sd[c * KS + r], kr[r], pa);
        oa = em.fma(sd[c * KS + r], qr, oa);
      }
    }
    SmallVector<Value> yields(KS * C);
    for (int64_t c = 0; c < C; ++c) {
      Value pred = pAcc[c * acc], oq = oAcc[c * acc];
      for (int64_t x = 1; x < acc; ++x) {
        pred = kb.add(pred, pAcc[c * acc + x]);
        oq = kb.add(oq, oAcc[c * acc + x]);
      }
      pred = em.groupSum(pred, p.P);
      Value u = kb.mul(t.bt, kb.sub(t.v[c], kb.mul(t.nk, pred)));
      Value uk = kb.mul(u, t.nk);
      for (int64_t r = 0; r < KS; ++r)
        yields[c * KS + r] = em.fma(kr[r], uk, sd[c * KS + r]);
      oq = em.groupSum(oq, p.P);
      Value ot = em.fma(t.srq, oq, kb.mul(u, t.skq));
      kb.ifThen(kb.andi(jActive, kb.eqi(pLane, kb.idx(0))), [&] {
        kb.store(ot, out[0].full,
                 {bIdx, kb.addi(t0, s), h, kb.addi(j, kb.idx(c))});
      });
    }
    return yields;
  }

  /// The final state (16-byte vector stores when C = 4).
  void storeState(ValueRange fin) {
    Value finalRows = p.C == 4 ? em.contiguousView(out[1]) : Value();
    kb.ifThen(jActive, [&] {
      for (int64_t r = 0; r < p.KS; ++r) {
        if (p.C == 4) {
          SmallVector<Value> vals;
          for (int64_t c = 0; c < p.C; ++c)
            vals.push_back(fin[c * p.KS + r]);
          em.storeVector(vals, finalRows, {n, h, rowIdx[r], jc});
        } else {
          kb.store(fin[r], out[1].full, {n, h, rowIdx[r], j});
        }
      }
    });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  Emitter em;
  const Plan &p;
  KDAOp::GenericAdaptor<ArrayRef<KernelOperand>> a;
  ArrayRef<KernelOperand> out;
  Value smem;
  KernelOperand init, cu;
  const KDAStepTerms terms;
  // positions()
  Value tid, vb, h, n, pLane, jl, j, jActive, jc, lane, warp;
  Value bIdx, start, end, last;
  SmallVector<Value> rowIdx, stageRow, stageOk, dtb;
  Value gateA, initRows;
};

} // namespace

LogicalResult mlir::k3::emitKDARecurrentCUDA(KDAOp op,
                                             const KernelEmission &e) {
  KernelBuilder &kb = e.kb;
  OpBuilder &b = kb.builder();
  ArrayRef<KernelOperand> in = e.inputs, out = e.outputs;
  FunctionOpInterface fnOp = e.fn;
  auto fn = cast<gpu::GPUFuncOp>(fnOp.getOperation());
  KDAOp::GenericAdaptor<ArrayRef<KernelOperand>> a(in, op);
  KernelOperand init = a.getInitialState();
  std::optional<Plan> p =
      makeKDARecurrentPlan(in, out, init.base ? &init : nullptr, e.config);
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!p || !nForm)
    return op.emitOpError() << "kernel kda_recurrent does not cover this op ("
                            << e.config << ")";
  // The grid: N * H * nvb blocks, N = the final state's leading dimension.
  e.setLaunch(*nForm, p->heads * p->nvb, 0, 1, {p->threads, 1, 1});
  if (p->S == 1) {
    emitKDARecurrentTokens(op, e, *p);
    return success();
  }

  // The chunk's staging: a static workgroup buffer of f32 words.
  auto wg =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto smemType = MemRefType::get({p->words}, b.getF32Type(),
                                  MemRefLayoutAttrInterface{}, wg);
  Value smem = fn.addWorkgroupAttribution(smemType, kb.getLoc());
  // 16-byte aligned: LLVM merges its f32 accesses into 16-byte vectors.
  fn.setWorkgroupAttributionAttr(fn.getNumWorkgroupAttributions() - 1,
                                 "llvm.align", b.getI64IntegerAttr(16));
  RecurrentKernel(op, kb, *p, in, out, smem).emit();
  return success();
}

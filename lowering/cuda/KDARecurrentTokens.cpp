//===- KDARecurrentTokens.cpp - KDA recurrence without staging --*- C++ -*-===//
//
// Kernel `kda_recurrent` at S = 1, the decode step's tile: one block per
// (sequence n, head h, slice of BV value columns), a group of P adjacent
// lanes per C adjacent columns, as in KDARecurrent.cpp, but lane p of a
// group holds the contiguous rows i = p KS + r (r < KS = K / P) of its
// columns, and reads those rows of q, k and g itself, in 16-byte vectors.
// Per token, with no shared memory and no barrier:
//
//   every load of the token at once: the lane's rows of q, k, g (and of
//   dt_bias once), its C columns of v, beta;
//   a_i = exp(gate(g_i)) for its rows; |q|^2, |k|^2, q.k over its rows,
//   summed over the group by shuffles (every group of the block holds the
//   whole head's rows, so each has the norms without the block);
//   the step of KDARecurrent.cpp on the registers:
//     S' = a * S; pred = rk sum_i S'_i k_i; u = beta (v_j - pred);
//     S = S' + k (rk u); o_j = scale (rq sum_i S'_i q_i + u rq rk (q.k)).
//
// Why: a decode step's block lives a few microseconds, and the staged form
// spent them behind three barriers and a one-thread fold of the token's
// scalars (docs/kda-cuda.md, "Decode"); here the only wait is the loads',
// and the state's loads go out first.
//
//===----------------------------------------------------------------------===//
#include "lowering/DecayGate.h"
#include "lowering/cuda/KDARecurrentPlan.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// One token's inputs in the lane's registers, and its scalars.
struct Token {
  SmallVector<Value> q, k, decay, v;
  Value srq, nk, skq, beta;
};

class TokenKernel {
public:
  TokenKernel(KDAOp op, KernelBuilder &kb, const KDARecurrentPlan &p,
              ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{{b, loc, kb}}, p(p),
        a(in, op), out(out) {
    init = a.getInitialState();
    cu = a.getCuSeqlens();
    scale = op.getScale().convertToDouble();
    l2 = op.getUseQkL2norm();
    sigmoidBeta = op.getUseBetaSigmoid();
    gateKind = op.getGateKind();
    if (auto lb = op.getLowerBoundAttr())
      lowerBound = lb.getValueAsDouble();
  }

  void emit() {
    positions();
    SmallVector<Value> s0 = loadState();
    gateTerms();
    auto tokens = scf::ForOp::create(b, loc, start, end, kb.idx(1), s0);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(tokens.getBody());
      Value t = tokens.getInductionVar();
      Token tok = loadToken(t);
      scalars(tok);
      scf::YieldOp::create(b, loc, step(tok, t, tokens.getRegionIterArgs()));
    }
    storeState(tokens.getResults());
  }

private:
  /// The block's (sequence, head, value slice), the lane's group, columns
  /// and rows, and the sequence's tokens.
  void positions() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value vb = em.remu(bid, kb.idx(p.nvb));
    Value hn = em.divu(bid, kb.idx(p.nvb));
    h = em.remu(hn, kb.idx(p.heads));
    n = em.divu(hn, kb.idx(p.heads));
    pLane = em.remu(tid, kb.idx(p.P));
    Value group = em.divu(tid, kb.idx(p.P));
    j = kb.addi(kb.muli(vb, kb.idx(p.BV)), kb.muli(group, kb.idx(p.C)));
    jActive = kb.lti(j, kb.idx(p.vDim));
    jc = kb.minsi(j, kb.idx(p.vDim - p.C));
    row0 = kb.muli(pLane, kb.idx(p.KS));

    bIdx = cu.base ? kb.idx(0) : n;
    start = cu.base ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
    end = cu.base ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))})
                  : kb.dim(a.getQ().shape[1]);
  }

  /// Elements per vector load of `n` consecutive rows of `x` (16 bytes
  /// where the rows and the innermost size allow it; the runtime's buffers
  /// are 256-byte aligned).
  int64_t vectorWidth(const KernelOperand &x, int64_t n, int64_t inner) {
    int64_t bytes = cast<MemRefType>(x.full.getType()).getElementTypeBitWidth() / 8;
    int64_t w = std::max<int64_t>(1, 16 / bytes);
    while (w > 1 && (n % w != 0 || inner % w != 0))
      w /= 2;
    return w;
  }

  /// `n` consecutive elements of `x` from `at` (its last index first, a
  /// multiple of n plus a multiple of `inner`), as f32, in vectors of
  /// vectorWidth.
  SmallVector<Value> loadRun(const KernelOperand &x, SmallVector<Value> at,
                             int64_t n, int64_t inner) {
    int64_t w = vectorWidth(x, n, inner);
    SmallVector<Value> vals;
    if (w == 1) {
      Value first = at.back();
      for (int64_t i = 0; i < n; ++i) {
        at.back() = kb.addi(first, kb.idx(i));
        vals.push_back(kb.load(x.full, at));
      }
      return vals;
    }
    Value view = em.contiguousView(x);
    Value first = at.back();
    for (int64_t i = 0; i < n; i += w) {
      at.back() = kb.addi(first, kb.idx(i));
      llvm::append_range(vals, em.loadVector(view, at, w));
    }
    return vals;
  }

  /// The lane's rows of its columns' initial state, S[c * KS + r] (16-byte
  /// vector loads when C = 4).
  SmallVector<Value> loadState() {
    SmallVector<Value> s0(p.KS * p.C, kb.f32(0.0));
    if (!init.base)
      return s0;
    Value rows = p.C == 4 ? em.contiguousView(init) : Value();
    for (int64_t r = 0; r < p.KS; ++r) {
      Value i = kb.addi(row0, kb.idx(r));
      if (p.C == 4) {
        auto vals = em.loadVector(rows, {n, h, i, jc}, 4);
        for (int64_t c = 0; c < p.C; ++c)
          s0[c * p.KS + r] = vals[c];
      } else {
        s0[r] = kb.load(init.full, {n, h, i, jc});
      }
    }
    return s0;
  }

  /// The head's A = exp(A_log) and the lane's rows of dt_bias.
  void gateTerms() {
    if (!gateKind)
      return;
    gateA = kb.exp(kb.load(a.getALog().full, {h}));
    dtb = loadRun(a.getDtBias(),
                  {kb.addi(kb.muli(h, kb.idx(p.kDim)), row0)}, p.KS,
                  p.kDim);
  }

  /// Token t's rows of q, k and the decay, the lane's v columns, beta.
  Token loadToken(Value t) {
    Token tok;
    SmallVector<Value> at = {bIdx, t, h, row0};
    tok.q = loadRun(a.getQ(), at, p.KS, p.kDim);
    tok.k = loadRun(a.getK(), at, p.KS, p.kDim);
    SmallVector<Value> g = loadRun(a.getG(), at, p.KS, p.kDim);
    tok.v = loadRun(a.getV(), {bIdx, t, h, jc}, p.C, p.vDim);
    tok.beta = kb.load(a.getBeta().full, {bIdx, t, h});
    for (int64_t r = 0; r < p.KS; ++r) {
      Value lg = g[r];
      if (gateKind)
        lg = emitGateLogDecay(kb, *gateKind, lowerBound, gateA,
                              kb.add(g[r], dtb[r]));
      tok.decay.push_back(kb.exp(lg));
    }
    return tok;
  }

  /// The norms over the whole head's rows (the group's lanes hold them all)
  /// folded into {scale rq, rk, scale rq rk q.k}, and beta's sigmoid.
  void scalars(Token &tok) {
    Value sq = kb.f32(0.0), sk = kb.f32(0.0), qk = kb.f32(0.0);
    for (int64_t r = 0; r < p.KS; ++r) {
      if (l2) {
        sq = em.fma(tok.q[r], tok.q[r], sq);
        sk = em.fma(tok.k[r], tok.k[r], sk);
      }
      qk = em.fma(tok.q[r], tok.k[r], qk);
    }
    qk = em.groupSum(qk, p.P);
    Value nq = kb.f32(1.0), nk = kb.f32(1.0);
    if (l2) {
      nq = kb.rsqrt(kb.add(em.groupSum(sq, p.P), kb.f32(1e-6)));
      nk = kb.rsqrt(kb.add(em.groupSum(sk, p.P), kb.f32(1e-6)));
    }
    tok.srq = kb.mul(kb.f32(scale), nq);
    tok.nk = nk;
    tok.skq = kb.mul(kb.f32(scale), kb.mul(kb.mul(nq, nk), qk));
    if (sigmoidBeta)
      tok.beta = kb.sigmoid(tok.beta);
  }

  /// One token's update of the lane's state `it`; the group's first lane
  /// stores its C outputs.
  SmallVector<Value> step(const Token &tok, Value t, ValueRange it) {
    const int64_t KS = p.KS, C = p.C;
    SmallVector<Value> sd(KS * C), next(KS * C), o(C);
    for (int64_t c = 0; c < C; ++c) {
      Value pred = kb.f32(0.0), oq = kb.f32(0.0);
      for (int64_t r = 0; r < KS; ++r) {
        sd[c * KS + r] = kb.mul(tok.decay[r], it[c * KS + r]);
        pred = em.fma(sd[c * KS + r], tok.k[r], pred);
        oq = em.fma(sd[c * KS + r], tok.q[r], oq);
      }
      pred = em.groupSum(pred, p.P);
      Value u = kb.mul(tok.beta, kb.sub(tok.v[c], kb.mul(tok.nk, pred)));
      Value uk = kb.mul(u, tok.nk);
      for (int64_t r = 0; r < KS; ++r)
        next[c * KS + r] = em.fma(tok.k[r], uk, sd[c * KS + r]);
      oq = em.groupSum(oq, p.P);
      o[c] = em.fma(tok.srq, oq, kb.mul(u, tok.skq));
    }
    storeOutputs(o, t);
    return next;
  }

  /// o[b, t, h, j .. j + C - 1] from the group's first lane, one vector
  /// of the output's type when C = 4.
  void storeOutputs(ArrayRef<Value> o, Value t) {
    const KernelOperand &y = out[0];
    Type elem = cast<MemRefType>(y.full.getType()).getElementType();
    kb.ifThen(kb.andi(jActive, kb.eqi(pLane, kb.idx(0))), [&] {
      if (p.C != 4) {
        for (int64_t c = 0; c < p.C; ++c)
          kb.store(o[c], y.full, {bIdx, t, h, kb.addi(j, kb.idx(c))});
        return;
      }
      SmallVector<Value> vals;
      for (Value v : o)
        vals.push_back(elem.isF32() ? v
                                    : arith::TruncFOp::create(b, loc, elem, v)
                                          .getResult());
      auto type = VectorType::get({p.C}, elem);
      Value vec = vector::FromElementsOp::create(b, loc, type, vals);
      em.alignedStore(vec, em.contiguousView(y), {bIdx, t, h, j});
    });
  }

  /// The final state (16-byte vector stores when C = 4).
  void storeState(ValueRange fin) {
    Value rows = p.C == 4 ? em.contiguousView(out[1]) : Value();
    kb.ifThen(jActive, [&] {
      for (int64_t r = 0; r < p.KS; ++r) {
        Value i = kb.addi(row0, kb.idx(r));
        if (p.C == 4) {
          SmallVector<Value> vals;
          for (int64_t c = 0; c < p.C; ++c)
            vals.push_back(fin[c * p.KS + r]);
          em.storeVector(vals, rows, {n, h, i, jc});
        } else {
          kb.store(fin[r], out[1].full, {n, h, i, j});
        }
      }
    });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  KDARecurrentEmitter em;
  const KDARecurrentPlan &p;
  KDAOp::GenericAdaptor<ArrayRef<KernelOperand>> a;
  ArrayRef<KernelOperand> out;
  KernelOperand init, cu;
  double scale;
  bool l2, sigmoidBeta;
  std::optional<DecayGateKind> gateKind;
  std::optional<double> lowerBound;
  Value h, n, pLane, j, jActive, jc, row0, bIdx, start, end, gateA;
  SmallVector<Value> dtb;
};

} // namespace

void mlir::k3::emitKDARecurrentTokens(KDAOp op, KernelBuilder &kb,
                                      const KDARecurrentPlan &p,
                                      ArrayRef<KernelOperand> in,
                                      ArrayRef<KernelOperand> out) {
  TokenKernel(op, kb, p, in, out).emit();
}

//===- KDARecurrentTokens.cpp - KDA recurrence without staging --*- C++ -*-===//
//
// Kernel `kda_recurrent` at S = 1, the decode step's tile: one block per
// (sequence n, head h, slice of BV value columns), G = BV / C column
// groups of C adjacent columns, P row lanes per group, each holding the
// contiguous rows i = p KS + r (r < KS = K / P) of its group's columns and
// reading those rows of q, k and g itself, in 16-byte vectors.
//
// The lanes of a warp are column-major: Gw = min(G, 32) groups side by
// side, Pw = 32 / Gw row lanes, so that one state load of a warp covers
// Pw whole rows of its Gw C columns (8 groups of 4 f32 columns: 128-byte
// lines, as fla's fused recurrent kernel reads them; lanes of one column
// group and adjacent rows took 64-byte halves of 8 rows). A row lane's
// sums go over the warp by shuffles (offsets Gw .. 16), then, where the
// rows span W = P / Pw warps, through shared memory: one barrier a token,
// double-buffered by the token's parity.
//
// Per token:
//   every load of the token at once: the lane's rows of q, k, g (and of
//   dt_bias once), its C columns of v, beta;
//   a_i = exp(gate(g_i)) for its rows;
//   the partial sums over its rows of S'_i k_i and S'_i q_i per column
//   (S' = a * S) and of |q|^2, |k|^2, q.k, summed over the row lanes;
//   then S = S' + k (rk u) with u = beta (v_j - rk pred) and
//   o_j = scale (rq sum_i S'_i q_i + u rq rk (q.k)), the norms folded in
//   after the sums (rq, rk: the L2 norms' reciprocals).
//
// Why: a decode step's block lives a few microseconds, and the staged form
// spent them behind three barriers and a one-thread fold of the token's
// scalars (docs/kda-cuda.md, "Decode").
//
//===----------------------------------------------------------------------===//
#include "lowering/DecayGate.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/KDARecurrentPlan.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// One token's inputs in the lane's registers.
struct Token {
  SmallVector<Value> q, k, decay, v;
  Value beta;
};

class TokenKernel {
public:
  TokenKernel(KDAOp op, const KernelEmission &e, const KDARecurrentPlan &p)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{{b, loc, kb}}, p(p),
        a(e.inputs, op), out(e.outputs), fn(e.fn), terms(op) {
    init = a.getInitialState();
    cu = a.getCuSeqlens();
    groupsPerWarp = std::min<int64_t>(p.G, 32);
    rowLanesPerWarp = 32 / groupsPerWarp;
    rowWarps = p.P / rowLanesPerWarp;
  }

  void emit() {
    positions();
    if (rowWarps > 1)
      partials = em.workgroupArray(fn, b.getF32Type(),
                                   2 * rowWarps * p.G * sumsPerGroup());
    SmallVector<Value> s0 = loadState();
    gateTerms();
    auto tokens = scf::ForOp::create(b, loc, start, end, kb.idx(1), s0);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(tokens.getBody());
      Value t = tokens.getInductionVar();
      Token tok = loadToken(t);
      scf::YieldOp::create(b, loc, step(tok, t, tokens.getRegionIterArgs()));
    }
    storeState(tokens.getResults());
  }

private:
  /// The block's (sequence, head, value slice), the lane's column group
  /// and row lane (column-major in the warp: see the file header), its
  /// columns and rows, and the sequence's tokens.
  void positions() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value vb = em.remu(bid, kb.idx(p.nvb));
    Value hn = em.divu(bid, kb.idx(p.nvb));
    h = em.remu(hn, kb.idx(p.heads));
    n = em.divu(hn, kb.idx(p.heads));
    Value lane = em.remu(tid, kb.idx(32)), warp = em.divu(tid, kb.idx(32));
    Value colWarps = kb.idx(p.G / groupsPerWarp);
    group = kb.addi(kb.muli(em.remu(warp, colWarps), kb.idx(groupsPerWarp)),
                    em.remu(lane, kb.idx(groupsPerWarp)));
    rowWarp = em.divu(warp, colWarps);
    Value laneRow = em.divu(lane, kb.idx(groupsPerWarp));
    firstRowLane = kb.eqi(laneRow, kb.idx(0));
    Value rowLane = kb.addi(kb.muli(rowWarp, kb.idx(rowLanesPerWarp)), laneRow);
    j = kb.addi(kb.muli(vb, kb.idx(p.BV)), kb.muli(group, kb.idx(p.C)));
    jActive = kb.lti(j, kb.idx(p.vDim));
    jc = kb.minsi(j, kb.idx(p.vDim - p.C));
    row0 = kb.muli(rowLane, kb.idx(p.KS));

    bIdx = cu.base ? kb.idx(0) : n;
    start = cu.base ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
    end = cu.base ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))})
                  : kb.dim(a.getQ().shape[1]);
  }

  /// Elements per vector load of `n` consecutive rows of `x` (16 bytes
  /// where the rows and the innermost size allow it; the runtime's buffers
  /// are 256-byte aligned).
  int64_t vectorWidth(const KernelOperand &x, int64_t n, int64_t inner) {
    int64_t bytes =
        cast<MemRefType>(x.full.getType()).getElementTypeBitWidth() / 8;
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
    Value first = at.back();
    if (w == 1) {
      for (int64_t i = 0; i < n; ++i) {
        at.back() = kb.addi(first, kb.idx(i));
        vals.push_back(kb.load(x.full, at));
      }
      return vals;
    }
    Value view = em.contiguousView(x);
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
    if (!terms.gateKind)
      return;
    gateA = kb.exp(kb.load(a.getALog().full, {h}));
    dtb = loadRun(a.getDtBias(), {kb.addi(kb.muli(h, kb.idx(p.kDim)), row0)},
                  p.KS, p.kDim);
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
    if (terms.sigmoidBeta)
      tok.beta = kb.sigmoid(tok.beta);
    for (int64_t r = 0; r < p.KS; ++r) {
      Value lg = g[r];
      if (terms.gateKind)
        lg = emitGateLogDecay(kb, *terms.gateKind, terms.lowerBound, gateA,
                              kb.add(g[r], dtb[r]));
      tok.decay.push_back(kb.exp(lg));
    }
    return tok;
  }

  /// The sums a token needs over all K rows: per column S'k and S'q, then
  /// |q|^2, |k|^2 and q.k.
  int64_t sumsPerGroup() const { return 2 * p.C + 3; }

  /// `v` (the lane's partial sums) summed over the group's row lanes: by
  /// shuffles over the warp's, then through shared memory over the row
  /// warps, in warp order (the buffer of the token's parity).
  SmallVector<Value> sumOverRows(SmallVector<Value> v, Value t) {
    for (Value &x : v)
      for (int64_t off = groupsPerWarp; off < 32; off *= 2)
        x = kb.add(x, em.shuffleXor(x, off));
    if (rowWarps == 1)
      return v;
    const int64_t m = sumsPerGroup();
    Value parity = em.remu(t, kb.idx(2));
    auto at = [&](Value warp, int64_t i) {
      Value record =
          kb.addi(kb.muli(kb.addi(kb.muli(parity, kb.idx(rowWarps)), warp),
                          kb.idx(p.G)),
                  group);
      return kb.addi(kb.muli(record, kb.idx(m)), kb.idx(i));
    };
    kb.ifThen(firstRowLane, [&] {
      for (int64_t i = 0; i < m; ++i)
        em.sts(v[i], partials, at(rowWarp, i));
    });
    gpu::BarrierOp::create(b, loc);
    SmallVector<Value> sums(m, kb.f32(0.0));
    for (int64_t w = 0; w < rowWarps; ++w)
      for (int64_t i = 0; i < m; ++i)
        sums[i] = kb.add(sums[i], em.lds(partials, at(kb.idx(w), i)));
    return sums;
  }

  /// One token's update of the lane's state `it`; the group's first lane
  /// stores its C outputs.
  SmallVector<Value> step(const Token &tok, Value t, ValueRange it) {
    const int64_t KS = p.KS, C = p.C;
    SmallVector<Value> sd(KS * C), next(KS * C), o(C), part;
    for (int64_t c = 0; c < C; ++c) {
      Value pred = kb.f32(0.0), oq = kb.f32(0.0);
      for (int64_t r = 0; r < KS; ++r) {
        sd[c * KS + r] = kb.mul(tok.decay[r], it[c * KS + r]);
        pred = em.fma(sd[c * KS + r], tok.k[r], pred);
        oq = em.fma(sd[c * KS + r], tok.q[r], oq);
      }
      part.push_back(pred);
      part.push_back(oq);
    }
    Value sq = kb.f32(0.0), sk = kb.f32(0.0), qk = kb.f32(0.0);
    for (int64_t r = 0; r < KS; ++r) {
      if (terms.l2) {
        sq = em.fma(tok.q[r], tok.q[r], sq);
        sk = em.fma(tok.k[r], tok.k[r], sk);
      }
      qk = em.fma(tok.q[r], tok.k[r], qk);
    }
    part.append({sq, sk, qk});
    SmallVector<Value> sum = sumOverRows(part, t);
    Value nq = kb.f32(1.0), nk = kb.f32(1.0);
    if (terms.l2) {
      nq = kb.rsqrt(kb.add(sum[2 * C], kb.f32(1e-6)));
      nk = kb.rsqrt(kb.add(sum[2 * C + 1], kb.f32(1e-6)));
    }
    Value srq = kb.mul(kb.f32(terms.scale), nq);
    Value skq =
        kb.mul(kb.f32(terms.scale), kb.mul(kb.mul(nq, nk), sum[2 * C + 2]));
    for (int64_t c = 0; c < C; ++c) {
      Value u = kb.mul(tok.beta, kb.sub(tok.v[c], kb.mul(nk, sum[2 * c])));
      Value uk = kb.mul(u, nk);
      for (int64_t r = 0; r < KS; ++r)
        next[c * KS + r] = em.fma(tok.k[r], uk, sd[c * KS + r]);
      o[c] = em.fma(srq, sum[2 * c + 1], kb.mul(u, skq));
    }
    storeOutputs(o, t);
    return next;
  }

  /// o[b, t, h, j .. j + C - 1] from the group's first row lane, one
  /// vector of the output's type when C = 4.
  void storeOutputs(ArrayRef<Value> o, Value t) {
    const KernelOperand &y = out[0];
    Type elem = cast<MemRefType>(y.full.getType()).getElementType();
    kb.ifThen(
        kb.andi(jActive, kb.andi(firstRowLane, kb.eqi(rowWarp, kb.idx(0)))),
        [&] {
          if (p.C != 4) {
            for (int64_t c = 0; c < p.C; ++c)
              kb.store(o[c], y.full, {bIdx, t, h, kb.addi(j, kb.idx(c))});
            return;
          }
          SmallVector<Value> vals;
          for (Value v : o)
            vals.push_back(
                elem.isF32()
                    ? v
                    : arith::TruncFOp::create(b, loc, elem, v).getResult());
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
  FunctionOpInterface fn;
  KernelOperand init, cu;
  const KDAStepTerms terms;
  int64_t groupsPerWarp, rowLanesPerWarp, rowWarps;
  Value h, n, group, rowWarp, firstRowLane, j, jActive, jc, row0, bIdx, start,
      end, gateA, partials;
  SmallVector<Value> dtb;
};

} // namespace

void mlir::k3::emitKDARecurrentTokens(KDAOp op, const KernelEmission &e,
                                      const KDARecurrentPlan &p) {
  TokenKernel(op, e, p).emit();
}

//===- KDARecurrent.cpp - register-resident KDA recurrence ------*- C++ -*-===//
//
// A dedicated sm_90a kernel for `k3.kda` in its recurrent (token-by-token)
// form. One block per (sequence n, head h, slice of BV value columns); each
// value column j is owned by P adjacent lanes, lane p holding the rows
// i = r * P + p (r < K / P) of S[:, j] in registers for the whole sequence.
//
// Per token the block stages, cooperatively and once, what every column
// needs: raw q_i, k_i and the decay a_i = exp(gate(g_i)) in shared memory
// (double-buffered: token t + 1 is loaded from global memory and staged
// while token t is computed, so one barrier per token suffices), and the
// three scalars |q|^2, |k|^2 and q.k as block reductions (warp shuffles,
// then shared memory across warps). The L2 norms fold into scalars:
//
//   S'   = a * S                            (per row)
//   pred = rk * sum_i S'_i k_i              (P-lane shuffle reduction)
//   u    = beta (v_j - pred)
//   S    = S' + k (rk u)
//   o_j  = scale (rq * sum_i S'_i q_i + u * rq rk (q.k))
//
// so a row costs one multiply, three FMAs and the shared loads of a_i, k_i,
// q_i (interleaved so that one 16-byte load serves them; k is stored twice,
// the second copy, apart, read again for the update).
//
// Supported: static K, V <= 256 with K divisible by P, any float q/k/v/g/
// beta/o, f32 state, optional initial state and cu_seqlens, in-op gates or
// a plain log-decay g. Anything else falls back to the generic loop nest.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/MathExtras.h"

#include <cstdlib>
#include <cstdio>

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The tile: BV value columns per block, P lanes per column.
struct KDATile {
  int64_t bv = 32, p = 2;
};

/// K3_KDA_CUDA_TILE="BV,P" overrides the tile (for tuning runs).
KDATile chooseTile(int64_t kDim, int64_t vDim) {
  KDATile t;
  // Two lanes per column, at most 64 rows per lane: measured on the H200
  // (2026-11-29, B1 T8192 H96) 11.2 ms against 13.0 ms for four lanes of
  // 32 rows and 12.8 ms for BV = 16 with four lanes. 64 rows per lane take
  // 254 registers (ptxas hoists a token's shared loads) without spilling;
  // 128 rows per lane spill.
  t.p = std::max<int64_t>(2, kDim / 64);
  if (const char *env = std::getenv("K3_KDA_CUDA_TILE")) {
    long bv = 0, p = 0;
    if (std::sscanf(env, "%ld,%ld", &bv, &p) == 2 && bv > 0 && p > 0) {
      t.bv = bv;
      t.p = p;
    }
  }
  t.bv = std::min<int64_t>(t.bv, llvm::PowerOf2Ceil(vDim));
  // Whole warps: shuffles use the full-warp mask.
  t.bv = std::max<int64_t>(t.bv, 32 / std::min<int64_t>(t.p, 32));
  return t;
}

struct Emitter {
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;

  Value divu(Value a, Value c) { return arith::DivUIOp::create(b, loc, a, c); }
  Value remu(Value a, Value c) { return arith::RemUIOp::create(b, loc, a, c); }

  Value fma(Value a, Value x, Value c) {
    return math::FmaOp::create(b, loc, a, x, c);
  }
  Value shuffleXor(Value v, int64_t offset) {
    auto shfl = gpu::ShuffleOp::create(b, loc, v, offset, 32,
                                       gpu::ShuffleMode::XOR);
    return shfl.getShuffleResult();
  }
  /// Sum over groups of `lanes` adjacent lanes (a power of two <= 32).
  Value groupSum(Value v, int64_t lanes) {
    for (int64_t off = lanes / 2; off >= 1; off /= 2)
      v = kb.add(v, shuffleXor(v, off));
    return v;
  }
  Value lds(Value mem, Value i) {
    return memref::LoadOp::create(b, loc, mem, ValueRange{i});
  }
  void sts(Value v, Value mem, Value i) {
    memref::StoreOp::create(b, loc, v, mem, ValueRange{i});
  }
};

} // namespace

FailureOr<bool> mlir::k3::emitKDARecurrentCUDA(KDAOp op, gpu::GPUFuncOp fn,
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
  auto gateKind = op.getGateKind();
  if (gateKind && (!aLog || !dtBias))
    return false;

  // Static K, V and H: the column lives in registers, unrolled over K.
  const int64_t kDim = in[0].shape[3], vDim = in[2].shape[3],
                heads = in[0].shape[2];
  if (kDim <= 0 || vDim <= 0 || heads <= 0 || kDim > 256 || vDim > 256)
    return false;
  if (!cast<MemRefType>(out[1].base.getType()).getElementType().isF32())
    return false;
  KDATile tile = chooseTile(kDim, vDim);
  const int64_t P = tile.p, BV = tile.bv;
  if (!llvm::isPowerOf2_64(P) || P > 32 || kDim % P != 0 ||
      !llvm::isPowerOf2_64(BV) || kDim / P > 128 || BV * P > 1024)
    return false;
  const int64_t KS = kDim / P;              // rows per lane
  const int64_t threads = BV * P;           // a multiple of 32
  const int64_t warps = threads / 32;
  const int64_t nvb = (vDim + BV - 1) / BV; // value slices per head
  const int64_t E = (kDim + threads - 1) / threads; // staged rows per thread
  const bool stageGuard = kDim % threads != 0;

  // The grid: N * H * nvb blocks, N = the final state's leading dimension.
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return false;
  int64_t per = heads * nvb;
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr({nForm->symbol, nForm->a * per,
                                      nForm->b * per, 1}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({threads, 1, 1}));
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(0));

  // Shared memory: two token buffers of K x {a, k, q, pad}, two more copies
  // of k (read again for the update), then two sets
  // of per-warp partial sums {|q|^2, |k|^2, q.k}.
  const int64_t bufStride = kDim * 4;
  const int64_t kCopyBase = 2 * bufStride;
  const int64_t partBase = kCopyBase + 2 * kDim;
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto smemType = MemRefType::get({partBase + 2 * warps * 4}, b.getF32Type(),
                                  MemRefLayoutAttrInterface{}, wg);
  Value smem = fn.addWorkgroupAttribution(smemType, loc);

  Emitter em{b, loc, kb};
  Value q = in[0].full, k = in[1].full, v = in[2].full, g = in[3].full,
        beta = in[4].full, o = out[0].full, fs = out[1].full;
  double scale = op.getScale().convertToDouble();
  bool l2 = op.getUseQkL2norm(), sigmoidBeta = op.getUseBetaSigmoid();
  std::optional<double> lowerBound;
  if (auto lb = op.getLowerBoundAttr())
    lowerBound = lb.getValueAsDouble();

  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value vb = em.remu(bid, kb.idx(nvb));
  Value hn = em.divu(bid, kb.idx(nvb));
  Value h = em.remu(hn, kb.idx(heads));
  Value n = em.divu(hn, kb.idx(heads));
  Value pLane = em.remu(tid, kb.idx(P));
  Value col = em.divu(tid, kb.idx(P));
  Value j = kb.addi(kb.muli(vb, kb.idx(BV)), col);
  Value jActive = kb.lti(j, kb.idx(vDim));
  Value jc = kb.minsi(j, kb.idx(vDim - 1));
  Value lane = em.remu(tid, kb.idx(32));
  Value warp = em.divu(tid, kb.idx(32));

  Value bIdx = cu ? kb.idx(0) : n;
  Value start = cu ? kb.loadIndex(cu->full, {n}) : kb.idx(0);
  Value end = cu ? kb.loadIndex(cu->full, {kb.addi(n, kb.idx(1))})
                 : kb.dim(in[0].shape[1]);

  // Rows this thread stages, and their token-independent gate terms.
  SmallVector<Value> stageRow(E), stageOk(E), dtb(E);
  Value gateA;
  if (gateKind)
    gateA = kb.exp(kb.load(aLog->full, {h}));
  for (int64_t e = 0; e < E; ++e) {
    Value i = kb.addi(kb.idx(e * threads), tid);
    stageOk[e] = stageGuard ? kb.lti(i, kb.idx(kDim)) : Value();
    stageRow[e] = stageGuard ? kb.minsi(i, kb.idx(kDim - 1)) : i;
    if (gateKind)
      dtb[e] = kb.load(dtBias->full,
                       {kb.addi(kb.muli(h, kb.idx(kDim)), stageRow[e])});
  }

  // Loads for staging token t: raw q, k, g per staged row, then v_j, beta.
  struct Raw {
    SmallVector<Value> q, k, g;
    Value v, beta;
  };
  auto loadToken = [&](Value t) {
    Raw r;
    for (int64_t e = 0; e < E; ++e) {
      r.q.push_back(kb.load(q, {bIdx, t, h, stageRow[e]}));
      r.k.push_back(kb.load(k, {bIdx, t, h, stageRow[e]}));
      r.g.push_back(kb.load(g, {bIdx, t, h, stageRow[e]}));
    }
    r.v = kb.load(v, {bIdx, t, h, jc});
    r.beta = kb.load(beta, {bIdx, t, h});
    return r;
  };
  // Writes token t's staging into buffer `buf` (index), returns the
  // warp-reduced sums {|q|^2, |k|^2, q.k}; with several warps they also go
  // to the buffer's partials.
  auto stage = [&](const Raw &r, Value buf) {
    Value base = kb.muli(buf, kb.idx(bufStride));
    Value sq = kb.f32(0.0), sk = kb.f32(0.0), qk = kb.f32(0.0);
    for (int64_t e = 0; e < E; ++e) {
      Value z = r.g[e];
      Value lg;
      if (!gateKind) {
        lg = z;
      } else {
        Value u = kb.add(z, dtb[e]);
        if (*gateKind == DecayGateKind::lower_bounded_sigmoid)
          lg = kb.mul(kb.f32(*lowerBound), kb.sigmoid(kb.mul(gateA, u)));
        else
          lg = kb.neg(kb.mul(gateA, kb.softplus(u)));
      }
      Value a = kb.exp(lg);
      Value qe = r.q[e], ke = r.k[e];
      if (stageOk[e]) {
        qe = kb.select(stageOk[e], qe, kb.f32(0.0));
        ke = kb.select(stageOk[e], ke, kb.f32(0.0));
      }
      sq = em.fma(qe, qe, sq);
      sk = em.fma(ke, ke, sk);
      qk = em.fma(qe, ke, qk);
      Value at = kb.addi(base, kb.muli(stageRow[e], kb.idx(4)));
      auto write = [&] {
        em.sts(a, smem, at);
        em.sts(ke, smem, kb.addi(at, kb.idx(1)));
        em.sts(qe, smem, kb.addi(at, kb.idx(2)));
        em.sts(ke, smem,
               kb.addi(kb.addi(kb.idx(kCopyBase), kb.muli(buf, kb.idx(kDim))),
                       stageRow[e]));
      };
      if (stageOk[e])
        kb.ifThen(stageOk[e], write);
      else
        write();
    }
    int64_t width = std::min<int64_t>(threads, 32);
    SmallVector<Value> sums = {em.groupSum(sq, width), em.groupSum(sk, width),
                               em.groupSum(qk, width)};
    if (warps > 1) {
      Value pb = kb.addi(kb.idx(partBase),
                         kb.muli(kb.addi(kb.muli(buf, kb.idx(warps)), warp),
                                 kb.idx(4)));
      kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
        for (int c = 0; c < 3; ++c)
          em.sts(sums[c], smem, kb.addi(pb, kb.idx(c)));
      });
    }
    return sums;
  };
  // The block's sums for buffer `buf` (after the barrier).
  auto blockSums = [&](Value buf, ValueRange carried) -> SmallVector<Value> {
    if (warps == 1)
      return {carried[0], carried[1], carried[2]};
    SmallVector<Value> s(3, kb.f32(0.0));
    Value pb = kb.addi(kb.idx(partBase), kb.muli(buf, kb.idx(warps * 4)));
    for (int64_t w = 0; w < warps; ++w)
      for (int c = 0; c < 3; ++c)
        s[c] = kb.add(s[c], em.lds(smem, kb.addi(pb, kb.idx(w * 4 + c))));
    return s;
  };

  // The column's initial rows.
  SmallVector<Value> s0(KS);
  SmallVector<Value> rowIdx(KS);
  for (int64_t r = 0; r < KS; ++r) {
    rowIdx[r] = kb.addi(kb.idx(r * P), pLane);
    s0[r] = init ? kb.load(init->full, {n, h, rowIdx[r], jc}) : kb.f32(0.0);
  }

  Type f32 = b.getF32Type();
  SmallVector<Type> stateTypes(KS, f32);
  auto nonEmpty = scf::IfOp::create(b, loc, stateTypes, kb.lti(start, end),
                                    /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&nonEmpty.getElseRegion().front());
    scf::YieldOp::create(b, loc, s0);
    b.setInsertionPointToStart(&nonEmpty.getThenRegion().front());

    // Prologue: stage the first token into buffer start % 2.
    Raw first = loadToken(start);
    SmallVector<Value> firstSums = stage(first, em.remu(start, kb.idx(2)));
    gpu::BarrierOp::create(b, loc);

    SmallVector<Value> inits(s0);
    inits.push_back(first.v);
    inits.push_back(first.beta);
    inits.append(firstSums);
    auto loop = scf::ForOp::create(b, loc, start, end, kb.idx(1), inits);
    {
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(loop.getBody());
      Value t = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      Value cur = em.remu(t, kb.idx(2));
      Value nxt = kb.subi(kb.idx(1), cur);
      // Issue token t + 1's loads first; they land while t is computed.
      Value tn = kb.minsi(kb.addi(t, kb.idx(1)), kb.subi(end, kb.idx(1)));
      Raw ahead = loadToken(tn);

      SmallVector<Value> sums = blockSums(cur, it.slice(KS + 2, 3));
      Value rq = l2 ? kb.rsqrt(kb.add(sums[0], kb.f32(1e-6))) : kb.f32(1.0);
      Value rk = l2 ? kb.rsqrt(kb.add(sums[1], kb.f32(1e-6))) : kb.f32(1.0);
      Value kq = kb.mul(kb.mul(rq, rk), sums[2]);
      Value bt = it[KS + 1];
      if (sigmoidBeta)
        bt = kb.sigmoid(bt);

      // Decay, and the two dot products, four accumulators each.
      Value base = kb.addi(kb.muli(cur, kb.idx(bufStride)),
                           kb.muli(pLane, kb.idx(4)));
      Value kBase = kb.addi(kb.addi(kb.idx(kCopyBase),
                                    kb.muli(cur, kb.idx(kDim))),
                            pLane);
      const int64_t acc = std::min<int64_t>(4, KS);
      SmallVector<Value> pAcc(acc, kb.f32(0.0)), oAcc(acc, kb.f32(0.0));
      SmallVector<Value> sd(KS);
      for (int64_t r = 0; r < KS; ++r) {
        Value at = kb.addi(base, kb.idx(r * P * 4));
        Value a = em.lds(smem, at);
        Value kr = em.lds(smem, kb.addi(at, kb.idx(1)));
        Value qr = em.lds(smem, kb.addi(at, kb.idx(2)));
        sd[r] = kb.mul(a, it[r]);
        pAcc[r % acc] = em.fma(sd[r], kr, pAcc[r % acc]);
        oAcc[r % acc] = em.fma(sd[r], qr, oAcc[r % acc]);
      }
      Value pred = pAcc[0], oq = oAcc[0];
      for (int64_t c = 1; c < acc; ++c) {
        pred = kb.add(pred, pAcc[c]);
        oq = kb.add(oq, oAcc[c]);
      }
      pred = em.groupSum(pred, P);
      Value u = kb.mul(bt, kb.sub(it[KS], kb.mul(rk, pred)));
      Value uk = kb.mul(u, rk);
      // k is read again (from its second copy, which the compiler cannot
      // merge with the first read) rather than kept: holding it beside S'
      // across the reduction would double the live registers.
      SmallVector<Value> yields(KS);
      for (int64_t r = 0; r < KS; ++r) {
        Value kAgain = em.lds(smem, kb.addi(kBase, kb.idx(r * P)));
        yields[r] = em.fma(kAgain, uk, sd[r]);
      }
      oq = em.groupSum(oq, P);
      Value ot = kb.mul(kb.f32(scale), em.fma(rq, oq, kb.mul(u, kq)));
      kb.ifThen(kb.andi(jActive, kb.eqi(pLane, kb.idx(0))),
                [&] { kb.store(ot, o, {bIdx, t, h, j}); });

      // Stage token t + 1 (a harmless repeat of the last token at the end).
      SmallVector<Value> nextSums = stage(ahead, nxt);
      gpu::BarrierOp::create(b, loc);
      yields.push_back(ahead.v);
      yields.push_back(ahead.beta);
      yields.append(nextSums);
      scf::YieldOp::create(b, loc, yields);
    }
    scf::YieldOp::create(b, loc, loop.getResults().take_front(KS));
  }

  kb.ifThen(jActive, [&] {
    for (int64_t r = 0; r < KS; ++r)
      kb.store(nonEmpty.getResult(r), fs, {n, h, rowIdx[r], j});
  });
  return true;
}

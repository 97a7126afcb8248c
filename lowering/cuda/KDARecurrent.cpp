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
// Three barriers per chunk instead of one per token; decode (one token per
// sequence) is one chunk: the state's 16-byte loads are issued first.
//
// Supported: static K, V <= 256 with K divisible by P, any float q/k/v/g/
// beta/o, f32 state, optional initial state and cu_seqlens, in-op gates or
// a plain log-decay g. Anything else falls back to the generic loop nest.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "lowering/DecayGate.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/LegacyMMA.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/MathExtras.h"

#include <cstdio>
#include <string>

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::legacy;

namespace {

/// The tile: BV value columns per block, C adjacent columns and P lanes
/// per lane group, S tokens per staged chunk.
struct KDATile {
  int64_t bv = 32, p = 8, s = 16, c = 4;
};

/// Shared memory words (f32) of the chunk staging.
int64_t smemWords(int64_t kDim, int64_t bv, int64_t s, int64_t warps) {
  return s * kDim * 4 + s * bv + s * 4 + s * warps * 4;
}

/// cuda-kda-recurrent-tile="BV,P[,S[,C]]" overrides the tile (verified
/// by CUDAKernelOptions::verify).
KDATile chooseTile(int64_t kDim, int64_t vDim, const std::string &override,
                   bool decode) {
  KDATile t;
  t.c = vDim % 4 == 0 ? 4 : 1;
  // 64 state values per lane (measured 2026-11-29: 64 rows of one column
  // take 254 registers without spills; 128 spill).
  t.p = std::max<int64_t>(1, kDim * t.c / 64);
  // A decode entry stages one token per chunk (S = 1): a one-token
  // sequence then loads and gates one token, not a padded chunk of 16.
  t.s = decode ? 1 : 0;
  if (!override.empty()) {
    long bv = 0, p = 0, s = 0, c = 0;
    int got = std::sscanf(override.c_str(), "%ld,%ld,%ld,%ld", &bv, &p, &s, &c);
    if (got >= 2 && bv > 0 && p > 0) {
      t.bv = bv;
      t.p = p;
    }
    if (got >= 3 && s > 0)
      t.s = s;
    if (got >= 4 && (c == 1 || c == 4) && vDim % c == 0)
      t.c = c;
  }
  t.bv = std::min<int64_t>(t.bv, llvm::PowerOf2Ceil(vDim));
  t.bv = std::max<int64_t>(t.bv, t.c);
  // Whole warps: shuffles use the full-warp mask.
  int64_t groups = t.bv / t.c;
  if (groups * t.p < 32)
    t.p = std::min<int64_t>(kDim, 32 / groups);
  if (t.s == 0) {
    // The largest chunk whose staging fits the 48 KiB of static shared
    // memory (with room to spare for more blocks per SM).
    int64_t warps = std::max<int64_t>(1, groups * t.p / 32);
    int64_t rowsPerThread = (kDim + warps * 32 - 1) / (warps * 32);
    // 16 tokens per chunk is the measured prefill optimum at K = 128;
    // more staged tokens spill at small K (32 did at K = 16 with the in-op
    // gate: 212 bytes).
    t.s = 16;
    // At most 32 staged rows (96 loads of q, k, g) in flight per thread,
    // beside the state: more spill.
    while (t.s > 1 && (smemWords(kDim, t.bv, t.s, warps) * 4 > 40 * 1024 ||
                       t.s * rowsPerThread > 32))
      t.s /= 2;
  }
  return t;
}

/// The fragment-free part of MMAEmitter (shared-memory access, shuffles,
/// global pointers, vector loads) plus what this kernel adds.
struct Emitter : MMAEmitter {
  Value divu(Value a, Value c) { return arith::DivUIOp::create(b, loc, a, c); }
  Value remu(Value a, Value c) { return arith::RemUIOp::create(b, loc, a, c); }

  Value fma(Value a, Value x, Value c) {
    return math::FmaOp::create(b, loc, a, x, c);
  }
  /// Sum over groups of `lanes` adjacent lanes (a power of two <= 32).
  Value groupSum(Value v, int64_t lanes) {
    for (int64_t off = lanes / 2; off >= 1; off /= 2)
      v = kb.add(v, shuffleXor(v, off));
    return v;
  }

  /// The global address of f32 element `elem` of the buffer `base`.
  Value globalPtr(Value base, Value elem) {
    return pointer(kb.addi(addressOf(base), kb.muli(elem, kb.idx(4))), 1);
  }
  /// Four f32 at element `elem` (a multiple of 4) of `base`: one 16-byte load.
  SmallVector<Value> load4(Value base, Value elem) {
    return loadVector(globalPtr(base, elem), b.getF32Type(), 4);
  }
  void store4(ArrayRef<Value> vals, Value base, Value elem) {
    auto vt = VectorType::get({4}, b.getF32Type());
    Value v = LLVM::PoisonOp::create(b, loc, vt);
    for (int c = 0; c < 4; ++c)
      v = LLVM::InsertElementOp::create(
          b, loc, v, vals[c],
          arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(c)));
    LLVM::StoreOp::create(b, loc, v, globalPtr(base, elem), 16);
  }
};

} // namespace

FailureOr<bool> mlir::k3::emitKDARecurrentCUDA(
    KDAOp op, gpu::GPUFuncOp fn, KernelBuilder &kb, ArrayRef<KernelOperand> in,
    ArrayRef<KernelOperand> out, const CUDAKernelOptions &options) {
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

  // Static K, V and H: the columns live in registers, unrolled over K.
  const int64_t kDim = in[0].shape[3], vDim = in[2].shape[3],
                heads = in[0].shape[2];
  if (kDim <= 0 || vDim <= 0 || heads <= 0 || kDim > 256 || vDim > 256)
    return false;
  if (!cast<MemRefType>(out[1].base.getType()).getElementType().isF32())
    return false;
  if (init && !cast<MemRefType>(init->base.getType()).getElementType().isF32())
    return false;
  KDATile tile =
      chooseTile(kDim, vDim, options.kdaRecurrentTile, options.decode);
  const int64_t P = tile.p, BV = tile.bv, S = tile.s, C = tile.c;
  if (!llvm::isPowerOf2_64(P) || P > 32 || kDim % P != 0 ||
      !llvm::isPowerOf2_64(BV) || BV % C != 0 || vDim % C != 0 ||
      kDim / P * C > 128 || S < 1 || S > 256)
    return false;
  const int64_t KS = kDim / P; // rows per lane
  const int64_t G = BV / C;    // lane groups per block
  const int64_t threads = G * P;
  if (threads % 32 != 0 || threads > 1024)
    return false;
  const int64_t warps = threads / 32;
  const int64_t nvb = (vDim + BV - 1) / BV;         // value slices per head
  const int64_t E = (kDim + threads - 1) / threads; // staged rows per thread
  const bool stageGuard = kDim % threads != 0;
  const int64_t words = smemWords(kDim, BV, S, warps);
  if (words * 4 > 48 * 1024)
    return false;

  // The grid: N * H * nvb blocks, N = the final state's leading dimension.
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return false;
  int64_t per = heads * nvb;
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr(
                  {nForm->symbol, nForm->a * per, nForm->b * per, 1}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({threads, 1, 1}));
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(0));

  // Shared memory: the chunk's {a, k, q, pad} per (token, row), its v
  // columns [S][BV], per-token scalars [S][4], per-warp partials [S][w][4].
  const int64_t vBase = S * kDim * 4;
  const int64_t tokBase = vBase + S * BV;
  const int64_t partBase = tokBase + S * 4;
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto smemType =
      MemRefType::get({words}, b.getF32Type(), MemRefLayoutAttrInterface{}, wg);
  Value smem = fn.addWorkgroupAttribution(smemType, loc);

  Emitter em{{b, loc, kb}};
  Value q = in[0].full, k = in[1].full, v = in[2].full, g = in[3].full,
        beta = in[4].full, o = out[0].full;
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
  Value grp = em.divu(tid, kb.idx(P));
  Value jl = kb.muli(grp, kb.idx(C)); // first column, in the block
  Value j = kb.addi(kb.muli(vb, kb.idx(BV)), jl);
  Value jActive = kb.lti(j, kb.idx(vDim));
  Value jc = kb.minsi(j, kb.idx(vDim - C));
  Value lane = em.remu(tid, kb.idx(32));
  Value warp = em.divu(tid, kb.idx(32));

  Value bIdx = cu ? kb.idx(0) : n;
  Value start = cu ? kb.loadIndex(cu->full, {n}) : kb.idx(0);
  Value end = cu ? kb.loadIndex(cu->full, {kb.addi(n, kb.idx(1))})
                 : kb.dim(in[0].shape[1]);
  Value last = kb.maxsi(kb.subi(end, kb.idx(1)), start);

  // The columns' initial rows (16-byte loads when C = 4): S[c * KS + r].
  SmallVector<Value> rowIdx(KS);
  SmallVector<Value> s0(KS * C);
  Value stateRow0 =
      kb.muli(kb.addi(kb.muli(n, kb.idx(heads)), h), kb.idx(kDim));
  auto stateElem = [&](int64_t r) {
    return kb.addi(kb.muli(kb.addi(stateRow0, rowIdx[r]), kb.idx(vDim)), jc);
  };
  for (int64_t r = 0; r < KS; ++r) {
    rowIdx[r] = kb.addi(kb.idx(r * P), pLane);
    for (int64_t c = 0; c < C; ++c)
      s0[c * KS + r] = kb.f32(0.0);
    if (!init)
      continue;
    if (C == 4) {
      auto vals = em.load4(init->base, stateElem(r));
      for (int64_t c = 0; c < C; ++c)
        s0[c * KS + r] = vals[c];
    } else {
      s0[r] = kb.load(init->full, {n, h, rowIdx[r], jc});
    }
  }

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

  auto chunks = scf::ForOp::create(b, loc, start, end, kb.idx(S), s0);
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value t0 = chunks.getInductionVar();
    ValueRange st = chunks.getRegionIterArgs();
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(S));
    // The previous chunk's steps are done with the staging.
    gpu::BarrierOp::create(b, loc);

    // A. Every load of the chunk first (tokens past the end repeat the
    // last one), then the gates, the staging and the partial sums.
    SmallVector<Value> tokOf(S);
    for (int64_t s = 0; s < S; ++s)
      tokOf[s] = kb.minsi(kb.addi(t0, kb.idx(s)), last);
    SmallVector<Value> rq(S * E), rk(S * E), rg(S * E);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t e = 0; e < E; ++e) {
        rq[s * E + e] = kb.load(q, {bIdx, tokOf[s], h, stageRow[e]});
        rk[s * E + e] = kb.load(k, {bIdx, tokOf[s], h, stageRow[e]});
        rg[s * E + e] = kb.load(g, {bIdx, tokOf[s], h, stageRow[e]});
      }
    const int64_t VE = (S * BV + threads - 1) / threads;
    SmallVector<Value> rv(VE), vAt(VE), vOk(VE);
    for (int64_t m = 0; m < VE; ++m) {
      Value e = kb.addi(kb.idx(m * threads), tid);
      vOk[m] = (S * BV) % threads != 0 ? kb.lti(e, kb.idx(S * BV)) : Value();
      Value ec = vOk[m] ? kb.minsi(e, kb.idx(S * BV - 1)) : e;
      Value s = em.divu(ec, kb.idx(BV));
      Value col =
          kb.minsi(kb.addi(kb.muli(vb, kb.idx(BV)), em.remu(ec, kb.idx(BV))),
                   kb.idx(vDim - 1));
      Value ts = kb.minsi(kb.addi(t0, s), last);
      rv[m] = kb.load(v, {bIdx, ts, h, col});
      vAt[m] = kb.addi(kb.idx(vBase), ec);
    }
    for (int64_t m = 0; m < VE; ++m) {
      if (vOk[m])
        kb.ifThen(vOk[m], [&] { em.sts(rv[m], smem, vAt[m]); });
      else
        em.sts(rv[m], smem, vAt[m]);
    }
    int64_t width = std::min<int64_t>(threads, 32);
    for (int64_t s = 0; s < S; ++s) {
      Value sq = kb.f32(0.0), sk = kb.f32(0.0), qk = kb.f32(0.0);
      for (int64_t e = 0; e < E; ++e) {
        Value z = rg[s * E + e];
        Value lgt = z;
        if (gateKind)
          lgt = emitGateLogDecay(kb, *gateKind, lowerBound, gateA,
                                 kb.add(z, dtb[e]));
        Value a = kb.exp(lgt);
        Value qe = rq[s * E + e], ke = rk[s * E + e];
        if (stageOk[e]) {
          qe = kb.select(stageOk[e], qe, kb.f32(0.0));
          ke = kb.select(stageOk[e], ke, kb.f32(0.0));
        }
        if (l2) {
          sq = em.fma(qe, qe, sq);
          sk = em.fma(ke, ke, sk);
        }
        qk = em.fma(qe, ke, qk);
        Value at = kb.muli(kb.addi(kb.idx(s * kDim), stageRow[e]), kb.idx(4));
        auto write = [&] {
          em.sts(a, smem, at);
          em.sts(ke, smem, kb.addi(at, kb.idx(1)));
          em.sts(qe, smem, kb.addi(at, kb.idx(2)));
        };
        if (stageOk[e])
          kb.ifThen(stageOk[e], write);
        else
          write();
      }
      SmallVector<Value> sums;
      if (l2)
        sums = {em.groupSum(sq, width), em.groupSum(sk, width),
                em.groupSum(qk, width)};
      else
        sums = {kb.f32(0.0), kb.f32(0.0), em.groupSum(qk, width)};
      Value pb =
          kb.addi(kb.idx(partBase + s * warps * 4), kb.muli(warp, kb.idx(4)));
      kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
        for (int c = 0; c < 3; ++c)
          em.sts(sums[c], smem, kb.addi(pb, kb.idx(c)));
      });
    }
    gpu::BarrierOp::create(b, loc);

    // B. One thread per token: {scale rq, rk, scale rq rk q.k, beta}.
    for (int64_t s0i = 0; s0i < S; s0i += threads) {
      Value s = kb.addi(kb.idx(s0i), tid);
      auto body = [&] {
        Value pb = kb.addi(kb.idx(partBase), kb.muli(s, kb.idx(warps * 4)));
        SmallVector<Value> sum(3, kb.f32(0.0));
        for (int64_t w = 0; w < warps; ++w)
          for (int c = 0; c < 3; ++c)
            sum[c] =
                kb.add(sum[c], em.lds(smem, kb.addi(pb, kb.idx(w * 4 + c))));
        Value nq = l2 ? kb.rsqrt(kb.add(sum[0], kb.f32(1e-6))) : kb.f32(1.0);
        Value nk = l2 ? kb.rsqrt(kb.add(sum[1], kb.f32(1e-6))) : kb.f32(1.0);
        Value ts = kb.minsi(kb.addi(t0, s), last);
        Value bt = kb.load(beta, {bIdx, ts, h});
        if (sigmoidBeta)
          bt = kb.sigmoid(bt);
        Value tb = kb.addi(kb.idx(tokBase), kb.muli(s, kb.idx(4)));
        em.sts(kb.mul(kb.f32(scale), nq), smem, tb);
        em.sts(nk, smem, kb.addi(tb, kb.idx(1)));
        em.sts(kb.mul(kb.f32(scale), kb.mul(kb.mul(nq, nk), sum[2])), smem,
               kb.addi(tb, kb.idx(2)));
        em.sts(bt, smem, kb.addi(tb, kb.idx(3)));
      };
      if (s0i + threads > S)
        kb.ifThen(kb.lti(s, kb.idx(S)), body);
      else
        body();
    }
    gpu::BarrierOp::create(b, loc);

    // C. The chunk's steps, in registers.
    auto steps =
        scf::ForOp::create(b, loc, kb.idx(0), count, kb.idx(1), ValueRange(st));
    {
      OpBuilder::InsertionGuard sg(b);
      b.setInsertionPointToStart(steps.getBody());
      Value s = steps.getInductionVar();
      ValueRange it = steps.getRegionIterArgs();
      Value tb = kb.addi(kb.idx(tokBase), kb.muli(s, kb.idx(4)));
      Value srq = em.lds(smem, tb);
      Value nk = em.lds(smem, kb.addi(tb, kb.idx(1)));
      Value skq = em.lds(smem, kb.addi(tb, kb.idx(2)));
      Value bt = em.lds(smem, kb.addi(tb, kb.idx(3)));
      Value vAt0 = kb.addi(kb.addi(kb.idx(vBase), kb.muli(s, kb.idx(BV))), jl);
      SmallVector<Value> vv(C);
      for (int64_t c = 0; c < C; ++c)
        vv[c] = em.lds(smem, kb.addi(vAt0, kb.idx(c)));

      Value base = kb.muli(kb.addi(kb.muli(s, kb.idx(kDim)), pLane), kb.idx(4));
      const int64_t acc = std::min<int64_t>(std::max<int64_t>(1, 4 / C), KS);
      SmallVector<Value> pAcc(C * acc, kb.f32(0.0)), oAcc(C * acc, kb.f32(0.0));
      SmallVector<Value> sd(KS * C), kr(KS);
      for (int64_t r = 0; r < KS; ++r) {
        Value at = kb.addi(base, kb.idx(r * P * 4));
        Value a = em.lds(smem, at);
        kr[r] = em.lds(smem, kb.addi(at, kb.idx(1)));
        Value qr = em.lds(smem, kb.addi(at, kb.idx(2)));
        for (int64_t c = 0; c < C; ++c) {
          Value &pa = pAcc[c * acc + r % acc], &oa = oAcc[c * acc + r % acc];
          sd[c * KS + r] = kb.mul(a, it[c * KS + r]);
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
        pred = em.groupSum(pred, P);
        Value u = kb.mul(bt, kb.sub(vv[c], kb.mul(nk, pred)));
        Value uk = kb.mul(u, nk);
        for (int64_t r = 0; r < KS; ++r)
          yields[c * KS + r] = em.fma(kr[r], uk, sd[c * KS + r]);
        oq = em.groupSum(oq, P);
        Value ot = em.fma(srq, oq, kb.mul(u, skq));
        kb.ifThen(kb.andi(jActive, kb.eqi(pLane, kb.idx(0))), [&] {
          kb.store(ot, o, {bIdx, kb.addi(t0, s), h, kb.addi(j, kb.idx(c))});
        });
      }
      scf::YieldOp::create(b, loc, yields);
    }
    scf::YieldOp::create(b, loc, steps.getResults());
  }

  kb.ifThen(jActive, [&] {
    for (int64_t r = 0; r < KS; ++r) {
      if (C == 4) {
        SmallVector<Value> vals;
        for (int64_t c = 0; c < C; ++c)
          vals.push_back(chunks.getResult(c * KS + r));
        em.store4(vals, out[1].base, stateElem(r));
      } else {
        kb.store(chunks.getResult(r), out[1].full, {n, h, rowIdx[r], j});
      }
    }
  });
  return true;
}

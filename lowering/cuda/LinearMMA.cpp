//===- LinearMMA.cpp - k3.linear on the tensor cores, f32-accurate ------===//
//
// `y[r, o] = sum_i x[r, i] w[o, i]` with f32 activations on the tensor cores
// at f32 accuracy: the error-compensated "3xTF32" split. Each f32 operand is
// a = a_hi + a_lo with a_hi = a rounded down to tf32 (the low 13 mantissa
// bits cleared) and a_lo = a - a_hi (exact in f32, then itself cut to tf32);
// a b ~ a_lo b_hi + a_hi b_lo + a_hi b_hi, the small terms first, with
// f32 accumulation (k3gpu.mma_sync m16n8k8 tf32, fragments vector<4x1xf32>
// and vector<2x1xf32>): a relative error near f32's
// instead of tf32's 2^-11. bf16/f16 weights are exact in tf32, so b_lo = 0
// and two products suffice.
//
// Tiles: a block of 4 warps computes 64 rows x 32 outputs (warp: 32 x 16,
// two m16 by two n8 tiles), stepping K by 32 through shared memory (f32,
// rows padded to 36 words: the fragment loads of 8 rows x 4 columns hit 32
// distinct banks). Grid: ceil(rows / 64) x (N / 32) blocks, laid out as
// ceil((N/32) (rows + 63) / 64) so that it is linear in the token count;
// blocks past the last row tile load zeros and store nothing.
//
// Covered: N and K multiples of 32, rows linear in T or N. Selected with
// the option cuda-linear=mma-3xtf32 (docs/cuda-linear.md).
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {
constexpr int64_t kBM = 64, kBN = 32, kBK = 32, kWarps = 4;
constexpr int64_t kThreads = 32 * kWarps, kStride = kBK + 4;

/// The kernel body: per K step, stage the tiles, then the warp's 2 x 2
/// fragments of 3xTF32 products; the C fragments stored at the end.
class LinearKernel {
public:
  LinearKernel(KernelBuilder &kb, ArrayRef<KernelOperand> in,
               ArrayRef<KernelOperand> out, Value rows, bool wSplit)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, rows(rows),
        wSplit(wSplit), nOut(in[1].shape[0]), nIn(in[1].shape[1]) {
    Value smem = em.dynamicSharedMemory();
    xs = em.sharedView(smem, b.getF32Type(), kb.idx(0), {kBM * kStride});
    ws = em.sharedView(smem, b.getF32Type(), kb.idx(kBM * kStride * 4),
                       {kBN * kStride});
    x = kb.view(in[0].base, {rows, kb.idx(nIn)});
    w = in[1].full;
    y = kb.view(out[0].base, {rows, kb.idx(nOut)});
  }

  void emit() {
    const int64_t nb = nOut / kBN;
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    n0 = kb.muli(em.remu(bid, nb), kb.idx(kBN));
    m0 = kb.muli(em.divu(bid, nb), kb.idx(kBM));
    Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
    gq = em.divu(lane, 4);
    tig = em.remu(lane, 4);
    wm = kb.muli(em.divu(warp, 2), kb.idx(32));
    wn = kb.muli(em.remu(warp, 2), kb.idx(16));
    mask = arith::ConstantOp::create(b, loc,
                                     b.getI32IntegerAttr(int32_t(0xFFFFE000u)));

    SmallVector<Value> acc0(2 * 2 * 4, kb.f32(0.0));
    auto kLoop =
        scf::ForOp::create(b, loc, kb.idx(0), kb.idx(nIn), kb.idx(kBK), acc0);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(kLoop.getBody());
      gpu::BarrierOp::create(b, loc);
      stage(kLoop.getInductionVar());
      gpu::BarrierOp::create(b, loc);
      scf::YieldOp::create(b, loc, multiply(kLoop.getRegionIterArgs()));
    }
    store(kLoop.getResults());
  }

private:
  /// Stages x[m0.., k0..] (rows past the end: 0) and w[n0.., k0..] as f32.
  void stage(Value k0) {
    SmallVector<std::pair<Value, Value>> staged;
    for (int64_t p = 0; p < kBM * kBK / kThreads; ++p) {
      Value e = kb.addi(kb.idx(p * kThreads), tid);
      Value r = em.divu(e, kBK), c = em.remu(e, kBK);
      Value row = kb.addi(m0, r);
      Value ok = kb.lti(row, rows);
      Value v = kb.ifElse(
          ok, b.getF32Type(), [&] { return kb.load(x, {row, kb.addi(k0, c)}); },
          [&] { return kb.f32(0.0); });
      staged.push_back({kb.addi(kb.muli(r, kb.idx(kStride)), c), v});
    }
    for (auto &[at, v] : staged)
      em.sts(v, xs, at);
    for (int64_t p = 0; p < kBN * kBK / kThreads; ++p) {
      Value e = kb.addi(kb.idx(p * kThreads), tid);
      Value r = em.divu(e, kBK), c = em.remu(e, kBK);
      em.sts(kb.load(w, {kb.addi(n0, r), kb.addi(k0, c)}), ws,
             kb.addi(kb.muli(r, kb.idx(kStride)), c));
    }
  }

  /// The 3xTF32 split: hi = f with the low 13 mantissa bits cleared, lo =
  /// (f - hi) likewise (tf32 operands are f32 values whose low bits the
  /// tensor cores ignore; they are cleared so that the split is exact).
  Value hiBits(Value f) {
    Value bits = arith::BitcastOp::create(b, loc, b.getI32Type(), f);
    Value hi = arith::AndIOp::create(b, loc, bits, mask);
    return arith::BitcastOp::create(b, loc, b.getF32Type(), hi);
  }
  std::pair<Value, Value> split(Value f) {
    Value hi = hiBits(f);
    return {hi, hiBits(kb.sub(f, hi))};
  }
  /// tf32 fragments: A vector<4x1xf32>, B vector<2x1xf32>.
  Value frag(ArrayRef<Value> regs) {
    SmallVector<Value> rs;
    for (Value r : regs)
      rs.push_back(vector::FromElementsOp::create(
          b, loc, VectorType::get({1}, b.getF32Type()), r));
    return em.stack(rs);
  }
  Acc mma(ArrayRef<Value> a, ArrayRef<Value> bb, const Acc &c) {
    return em.mma(frag(a), frag(bb), c);
  }

  /// The K step's products on the warp's 2 x 2 accumulators `it`.
  SmallVector<Value> multiply(ValueRange it) {
    SmallVector<Acc> acc(4);
    for (int64_t i = 0; i < 4; ++i)
      acc[i] = {it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3]};
    for (int64_t kk = 0; kk < kBK; kk += 8) {
      Value col = kb.addi(tig, kb.idx(kk));
      SmallVector<std::array<Value, 4>> aHi(2), aLo(2);
      for (int64_t mt = 0; mt < 2; ++mt) {
        Value r0 = kb.addi(wm, kb.addi(gq, kb.idx(16 * mt)));
        Value at0 = kb.addi(kb.muli(r0, kb.idx(kStride)), col);
        Value at1 = kb.addi(at0, kb.idx(8 * kStride));
        Value v[4] = {em.lds(xs, at0), em.lds(xs, at1),
                      em.lds(xs, kb.addi(at0, kb.idx(4))),
                      em.lds(xs, kb.addi(at1, kb.idx(4)))};
        for (int64_t q = 0; q < 4; ++q)
          std::tie(aHi[mt][q], aLo[mt][q]) = split(v[q]);
      }
      for (int64_t nt = 0; nt < 2; ++nt) {
        Value r = kb.addi(wn, kb.addi(gq, kb.idx(8 * nt)));
        Value at = kb.addi(kb.muli(r, kb.idx(kStride)), col);
        Value v[2] = {em.lds(ws, at), em.lds(ws, kb.addi(at, kb.idx(4)))};
        std::array<Value, 2> bHi, bLo;
        for (int64_t q = 0; q < 2; ++q)
          std::tie(bHi[q], bLo[q]) = split(v[q]);
        for (int64_t mt = 0; mt < 2; ++mt) {
          Acc &c = acc[mt * 2 + nt];
          c = mma(aLo[mt], bHi, c);
          if (wSplit)
            c = mma(aHi[mt], bLo, c);
          c = mma(aHi[mt], bHi, c);
        }
      }
    }
    SmallVector<Value> next;
    for (const Acc &c : acc)
      next.append(c.begin(), c.end());
    return next;
  }

  /// C fragment: (row g, cols 2 tig, +1) and (row g + 8, same cols).
  void store(ValueRange result) {
    Value tig2 = kb.muli(tig, kb.idx(2));
    for (int64_t mt = 0; mt < 2; ++mt)
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          Value row = kb.addi(
              m0, kb.addi(wm, kb.addi(gq, kb.idx(16 * mt + 8 * (c / 2)))));
          Value colv =
              kb.addi(n0, kb.addi(wn, kb.addi(tig2, kb.idx(8 * nt + c % 2))));
          Value v = result[(mt * 2 + nt) * 4 + c];
          kb.ifThen(kb.lti(row, rows), [&] { kb.store(v, y, {row, colv}); });
        }
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  Value rows;
  bool wSplit;
  int64_t nOut, nIn;
  Value xs, ws, x, w, y;
  Value tid, n0, m0, gq, tig, wm, wn, mask;
};
} // namespace

LogicalResult mlir::k3::emitLinearMMACUDA(LinearOp op,
                                          const KernelEmission &e) {
  KernelBuilder &kb = e.kb;
  ArrayRef<KernelOperand> in = e.inputs, out = e.outputs;
  // Shapes and types: checked by the config (KernelConfigRules.cpp).
  const int64_t nOut = in[1].shape[0];
  auto elem = [](Value m) {
    return cast<MemRefType>(m.getType()).getElementType();
  };
  const bool wSplit = elem(in[1].base).isF32(); // bf16/f16: exact in tf32

  // Rows: every leading dimension of x, as one linear size.
  Value rows = kb.numElements(ArrayRef<int64_t>(in[0].shape).drop_back());
  auto form = kb.linearForm(rows);
  if (!form)
    return op.emitOpError() << "linear_mma_3xtf32 needs a row count linear "
                               "in one runtime size";
  // ceil(rows / 64) row tiles x nOut / 32 column tiles (a few idle blocks
  // past the last row tile).
  const int64_t nb = nOut / kBN;
  e.setLaunch(*form, nb, (kBM - 1) * nb, kBM, {kThreads, 1, 1},
              (kBM + kBN) * kStride * 4);
  LinearKernel(kb, in, out, rows, wSplit).emit();
  return success();
}

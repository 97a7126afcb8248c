//===- MoECombineRows.cpp - k3.moe_combine, a block per token ---*- C++ -*-===//
//
// The MoE combine (config kernel `moe_combine_rows`, tile [V]), and with
// k3.moe_combine_add_rms_norm the residual add and RMSNorm after it: block t
// sums token t's K expert rows (and the shared expert's row T K + t, then
// the addend) for all D channels; thread i owns the V consecutive channels
// at V i, V i + V B, ... (B threads), so each of a token's rows is read as
// 16-byte vectors and the positions are loaded once per thread, not once
// per channel. The sum is the loop nest's (lowering/kernels/MoEGrouped.cpp)
// in the same order and rounding, so the two agree bit for bit.
//
// The loop nest gave every (token, channel) its own thread: 8 index loads
// and 8 two-byte loads each, 0.137 ms a call at T = 8192, K = 8, D = 2304
// in bf16, 2.75 TB/s (bench/results/e2e-checks/
// ncu-prefill-small-kernels-nvidia-h200-20261204T0712Z.txt); this kernel
// 0.095 ms against the loop nest's 0.144 in the same profile (bench/results/
// e2e-checks/short-conv-tiles-nvidia-h200-20261204T0724Z.txt).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The fused op's norm (k3.moe_combine_add_rms_norm): the residual stream
/// `input`, the weight, and where the sum and the normalised row go.
struct NormOperands {
  Value input, weight, sum, result;
  double eps = 0;
};

class CombineRowsKernel {
public:
  CombineRowsKernel(const KernelEmission &e, const KernelOperand &rowsOp,
                    const KernelOperand &pos, const KernelOperand &addendOp,
                    const KernelOperand &out)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        vec(e.config.getTile()[0]), warps(e.config.getWarps()),
        threads(32 * warps) {
    topK = pos.shape[1];
    width = rowsOp.shape[2];
    shared = rowsOp.shape[1] == topK + 1;
    tokens = kb.dim(pos.shape[0]);
    pairs = kb.muli(tokens, kb.idx(topK));
    Value allRows = kb.muli(tokens, kb.idx(rowsOp.shape[1]));
    rows = em.contiguousView(rowsOp.base, {allRows, kb.idx(width)});
    positions = pos.full;
    if (addendOp)
      addend = rowView(addendOp);
    y = rowView(out);
  }

  /// A [T, D] operand as a contiguous view.
  Value rowView(const KernelOperand &o) {
    return em.contiguousView(o.base, {tokens, kb.idx(width)});
  }

  /// A [D] operand as a contiguous view.
  Value vectorView(const KernelOperand &o) {
    return em.contiguousView(o.base, {kb.idx(width)});
  }

  /// k3.moe_combine: the block's token, its chunks stored as summed.
  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value t = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    SmallVector<Value> at = rowsOf(t);
    const int64_t chunks = width / vec;
    for (int64_t i = 0; i * threads < chunks; ++i) {
      Value chunk = kb.addi(tid, kb.idx(i * threads));
      auto body = [&, chunk] {
        Value c = kb.muli(chunk, kb.idx(vec));
        storeVector(sumChunk(t, c, at), y, t, c);
      };
      if ((i + 1) * threads <= chunks)
        body();
      else
        kb.ifThen(kb.lti(chunk, kb.idx(chunks)), body);
    }
  }

  /// k3.moe_combine_add_rms_norm: the combine's chunks, rounded as it
  /// stored them, plus the residual stream's, rounded and stored as the
  /// sum; then the row's sum of squares over the block (the thread's
  /// chunks, a warp sum, the warps' sums: the sum is RMSNormRows.cpp's
  /// bits, the normalised row agrees to rounding, its squares added in
  /// another order) and the normalised row. Every chunk stays in
  /// registers across the block sum. Positions are never -1 here (the
  /// CUDA target refuses expert parallelism, MoELocalIds.cpp).
  void emitNorm(FunctionOpInterface fn, const NormOperands &n) {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value t = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value warpSums = em.workgroupArray(fn, b.getF32Type(), warps);
    Type sumElem = cast<MemRefType>(n.sum.getType()).getElementType();
    SmallVector<Value> at = rowsOf(t);
    const int64_t chunks = width / vec, per = (chunks + threads - 1) / threads;
    SmallVector<Value> ok(per), col(per);
    SmallVector<SmallVector<Value>> sums(per), w(per);
    // Every load is issued before the first store (a store of the sum may
    // alias a later load as far as the compiler knows; RMSNormRows.cpp).
    SmallVector<SmallVector<Value>> routed(per), x(per);
    for (int64_t i = 0; i < per; ++i) {
      Value chunk = kb.addi(tid, kb.idx(i * threads));
      ok[i] = kb.lti(chunk, kb.idx(chunks));
      col[i] = kb.muli(kb.minsi(chunk, kb.idx(chunks - 1)), kb.idx(vec));
      routed[i] = sumChunk(t, col[i], at);
      x[i] = em.loadVector(n.input, {t, col[i]}, vec);
      w[i] = em.loadVector(n.weight, {col[i]}, vec);
    }
    Value ss = kb.f32(0.0);
    for (int64_t i = 0; i < per; ++i) {
      for (int64_t k = 0; k < vec; ++k) {
        Value c = kb.roundTo(routed[i][k], sumElem);
        sums[i].push_back(kb.roundTo(kb.add(x[i][k], c), sumElem));
        Value v = kb.select(ok[i], sums[i][k], kb.f32(0.0));
        ss = em.fmaContract(v, v, ss);
      }
      kb.ifThen(ok[i], [&, i] { storeVector(sums[i], n.sum, t, col[i]); });
    }
    Value total =
        em.blockReduce(ss, tid, warps, warpSums, 0,
                       [&](Value p, Value q) { return kb.add(p, q); });
    Value inv =
        kb.rsqrt(kb.add(kb.div(total, kb.f32(double(width))), kb.f32(n.eps)));
    for (int64_t i = 0; i < per; ++i)
      kb.ifThen(ok[i], [&, i] {
        SmallVector<Value> out;
        for (int64_t k = 0; k < vec; ++k)
          out.push_back(kb.mul(kb.mul(sums[i][k], inv), w[i][k]));
        storeVector(out, n.result, t, col[i]);
      });
  }

private:
  /// Token t's rows: its K positions, then the shared expert's row.
  SmallVector<Value> rowsOf(Value t) {
    SmallVector<Value> at;
    for (int64_t j = 0; j < topK; ++j)
      at.push_back(kb.loadIndex(positions, {t, kb.idx(j)}));
    if (shared)
      at.push_back(kb.addi(pairs, t));
    return at;
  }

  /// Channels [c, c + V) of token t: its rows `at` summed in slot order (the
  /// shared expert's last), then the addend; f32, before the store's
  /// rounding.
  SmallVector<Value> sumChunk(Value t, Value c, ArrayRef<Value> at) {
    SmallVector<SmallVector<Value>> in;
    for (Value r : at)
      in.push_back(em.loadVector(rows, {r, c}, vec));
    SmallVector<Value> plus;
    if (addend)
      plus = em.loadVector(addend, {t, c}, vec);
    Type yElem = cast<MemRefType>(y.getType()).getElementType();
    SmallVector<Value> acc(in[0]);
    for (int64_t k = 0; k < vec; ++k) {
      for (size_t j = 1; j < in.size(); ++j)
        acc[k] = kb.add(in[j][k], acc[k]);
      // The routed sum as the k3.add it replaces read it: rounded to the
      // result's type (the oracle rounds there too), then the addend.
      if (addend)
        acc[k] = kb.add(kb.roundTo(acc[k], yElem), plus[k]);
    }
    return acc;
  }

  /// `v` (f32) as one vector store of mem's element type at [t, c].
  void storeVector(ArrayRef<Value> v, Value mem, Value t, Value c) {
    Type elem = cast<MemRefType>(mem.getType()).getElementType();
    Value vv = vector::FromElementsOp::create(
        b, loc, VectorType::get({vec}, b.getF32Type()), v);
    if (!elem.isF32())
      vv = arith::TruncFOp::create(b, loc, VectorType::get({vec}, elem), vv);
    auto st = vector::StoreOp::create(b, loc, vv, mem, ValueRange{t, c});
    st.setAlignment(vec * elem.getIntOrFloatBitWidth() / 8);
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t vec, warps, threads, topK = 0, width = 0;
  bool shared = false;
  Value tokens, pairs, rows, positions, addend, y;
};

/// A block per token of `positions` [T, K], the config's warps a block.
LogicalResult launchPerToken(Operation *op, KernelEmission &e,
                             const KernelOperand &positions) {
  FailureOr<KernelBuilder::Linear> form = e.tokenForm(op, positions.shape[0]);
  if (failed(form))
    return failure();
  e.setLaunch(*form, 1, 0, 1, {32 * e.config.getWarps(), 1, 1});
  return success();
}

struct MoECombineRowsPattern : OpKernelPattern<MoECombineOp> {
  MoECombineRowsPattern() : OpKernelPattern(KernelKind::moe_combine_rows) {}
  LogicalResult emit(MoECombineOp op, Adaptor,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    if (failed(launchPerToken(op, e, ops.getPositions())))
      return failure();
    CombineRowsKernel(e, ops.getRows(), ops.getPositions(), ops.getAddend(),
                      e.outputs[0])
        .emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

struct MoECombineAddRMSNormRowsPattern
    : OpKernelPattern<MoECombineAddRMSNormOp> {
  MoECombineAddRMSNormRowsPattern()
      : OpKernelPattern(KernelKind::moe_combine_rows) {}
  LogicalResult emit(MoECombineAddRMSNormOp op, Adaptor,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    if (failed(launchPerToken(op, e, ops.getPositions())))
      return failure();
    KernelOperand sum = resultOf(e.outputs, op.getSum());
    CombineRowsKernel k(e, ops.getRows(), ops.getPositions(), ops.getAddend(),
                        sum);
    NormOperands n{k.rowView(ops.getInput()), k.vectorView(ops.getWeight()),
                   k.rowView(sum),
                   k.rowView(resultOf(e.outputs, op.getResult())),
                   op.getEpsilon().convertToDouble()};
    k.emitNorm(e.fn, n);
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateMoECombineRowsPattern(KernelPatternSet &patterns) {
  patterns.add<MoECombineRowsPattern, MoECombineAddRMSNormRowsPattern>();
}

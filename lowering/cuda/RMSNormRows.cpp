//===- RMSNormRows.cpp - k3.rms_norm and k3.add_rms_norm by rows -*- C++
//-*-===//
//
// RMSNorm over rows of a few thousand channels, a block per row (config
// kernel `rms_norm_rows`). The loop nest gives each row one thread, which
// reads the row twice alone: at one or 64 tokens that is one block of the
// GPU (0.22 ms per decode-step call at hidden 2304,
// bench/results/profile-gpu/real4-T64.txt). Here thread i holds columns
// i, i + B, ... of the row in registers (a static count), the sum of
// squares is a warp sum then a shared-memory sum over the warps, and the
// row is scaled from registers: one read, one write. Rows of at most 1024
// channels (KDA's output norm: a head's 128; MLA's latent: 512) take a warp
// each, 8 rows per block (tile [8]): the sum is the warp's alone, no
// barrier. A block per 128-channel row gave a T = 8192 prefill 262144
// blocks and 0.32 ms per gated norm, 5.6x its bytes' time
// (bench/results/profile-gpu/kl48b-prefill-T8192-20261203T1925Z-327ab3c.txt).
//
// k3.partial_rms_norm (MLA's [c_kv | k_pe]) normalises a row's leading
// columns and stores the others as loaded.
//
// k3.add_rms_norm first forms sum = input + residual, stores it in its own
// type and normalises the stored value, as the loop nest does (so the
// fused op stays what k3.add then k3.rms_norm compute). k3.gated_rms_norm
// (KDA's output norm, rows of one head's 128 channels) multiplies each
// output by sigmoid(gate) at the store (MMAEmitter::sigmoidApprox: an
// element's expf and IEEE division were most of its instructions); its
// loop nest gave each of the
// T x H rows one thread (0.19 ms per layer at T = 2048, H = 32:
// bench/results/profile-gpu/history/real4-bf16-T2048-20261202T082800Z-1d803d9.txt).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// One row per block (or, with a tile [R], one row per warp and R rows per
/// block): load (and for add_rms_norm, sum and store), the row's sum of
/// squares, the scaled row.
class RMSNormRowsKernel {
public:
  /// `normalized`: the leading columns that are normalised (all `cols`
  /// but for k3.partial_rms_norm, which copies the others).
  RMSNormRowsKernel(const KernelEmission &e, int64_t cols, int64_t normalized,
                    double eps)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, cols(cols),
        normalized(normalized), warps(e.config.getWarps()), eps(eps),
        rowsPerBlock(e.config.getTile().empty() ? 0 : e.config.getTile()[0]) {
    threads = rowsPerBlock ? 32 : 32 * warps;
    if (!rowsPerBlock)
      warpSums = em.workgroupArray(e.fn, b.getF32Type(), warps);
  }

  /// y = w * v / sqrt(mean(v^2) + eps) (* sigmoid(gate)) with v = x (+ r,
  /// stored to s), for the block's row or its warps' rows (`rows` of them
  /// in all).
  void emit(Value x, Value r, Value s, Value w, Value y, Value gate,
            Value rows) {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    if (!rowsPerBlock)
      return emitRow(x, r, s, w, y, gate, bid, tid);
    Value row = kb.addi(kb.muli(bid, kb.idx(rowsPerBlock)), em.divu(tid, 32));
    kb.ifThen(kb.lti(row, rows),
              [&] { emitRow(x, r, s, w, y, gate, row, em.remu(tid, 32)); });
  }

private:
  /// Row `row` by the `threads` threads of its block or warp; `tid` is the
  /// thread's index among them.
  void emitRow(Value x, Value r, Value s, Value w, Value y, Value gate,
               Value row, Value tid) {
    const int64_t per = (cols + threads - 1) / threads;
    SmallVector<Value> v(per), ok(per), norm(per), col(per), xv(per), rv(per),
        wv(per), gv(per);
    // k3.partial_rms_norm: columns from `normalized` on are copied.
    const bool copiesTail = normalized < cols;
    // Every load of the row is issued before the first store: a store of
    // the sum may alias a later load as far as the compiler knows, so
    // loads interleaved with the stores became one memory round trip per
    // column group (9 at hidden 2304: 6.7 us per decode-step call,
    // bench/results/profile-gpu/ncu-kl48b-decode-B1-20261203T1242Z-f9d92c8.txt).
    // The weight and gate come with the row too, not after the block's sum.
    for (int64_t i = 0; i < per; ++i) {
      Value c = kb.addi(tid, kb.idx(i * threads));
      ok[i] = kb.lti(c, kb.idx(cols));
      col[i] = kb.minsi(c, kb.idx(cols - 1));
      xv[i] = kb.load(x, {row, col[i]});
      // Columns past the normalised ones are copied; their weight load
      // stays in bounds.
      norm[i] = copiesTail ? kb.lti(c, kb.idx(normalized)) : ok[i];
      wv[i] = kb.load(
          w, {copiesTail ? kb.minsi(c, kb.idx(normalized - 1)) : col[i]});
      if (gate)
        gv[i] = kb.load(gate, {row, col[i]});
      if (r)
        rv[i] = kb.load(r, {row, col[i]});
    }
    Value ss = kb.f32(0.0);
    for (int64_t i = 0; i < per; ++i) {
      Value val = xv[i];
      if (r) {
        val = kb.roundTo(kb.add(val, rv[i]),
                         cast<MemRefType>(s.getType()).getElementType());
        kb.ifThen(ok[i], [&, i] { kb.store(val, s, {row, col[i]}); });
      }
      v[i] = kb.select(norm[i], val, kb.f32(0.0));
      ss = em.fmaContract(v[i], v[i], ss);
    }
    Value sum = rowsPerBlock ? em.warpSum(ss) : blockSum(tid, ss);
    Value inv =
        kb.rsqrt(kb.add(kb.div(sum, kb.f32(double(normalized))), kb.f32(eps)));
    for (int64_t i = 0; i < per; ++i)
      kb.ifThen(ok[i], [&, i] {
        Value out = kb.mul(kb.mul(v[i], inv), wv[i]);
        if (gate)
          out = kb.mul(out, em.sigmoidApprox(gv[i]));
        if (copiesTail)
          out = kb.select(norm[i], out, xv[i]);
        kb.store(out, y, {row, col[i]});
      });
  }

  /// The block's sum of `v` in every thread: warp sums, then the warps'.
  Value blockSum(Value tid, Value v) {
    return em.blockReduce(v, tid, warps, warpSums, 0,
                          [&](Value x, Value y) { return kb.add(x, y); });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t cols, normalized, warps, threads;
  double eps;
  int64_t rowsPerBlock; // 0: a block per row
  Value warpSums;       // the block sum's per-warp slots (a block per row)
};

/// The launch and body of a norm over the rows of `x` (sum and residual:
/// the fused add's, else null), its leading dimensions as one row count
/// linear in a runtime size.
LogicalResult
emitNormRows(Operation *op, KernelEmission &e, const KernelOperand &x,
             const KernelOperand *residual, const KernelOperand *sum,
             Value weight, const KernelOperand &result, double eps,
             const KernelOperand *gate = nullptr, int64_t normalized = 0) {
  KernelBuilder &kb = e.kb;
  Value rows = kb.numElements(ArrayRef<int64_t>(x.shape).drop_back());
  auto form = kb.linearForm(rows);
  if (!form)
    return op->emitOpError()
           << "rms_norm_rows needs a row count linear in one runtime size";
  int64_t cols = x.shape.back();
  // A block per row, or with a tile [R] R rows (a warp each) per block.
  int64_t perBlock = e.config.getTile().empty() ? 1 : e.config.getTile()[0];
  e.setLaunch(*form, 1, perBlock - 1, perBlock,
              {32 * e.config.getWarps(), 1, 1});
  auto view = [&](const KernelOperand *t) {
    return t ? kb.view(t->base, {rows, kb.idx(cols)}) : Value();
  };
  RMSNormRowsKernel(e, cols, normalized ? normalized : cols, eps)
      .emit(view(&x), view(residual), view(sum), weight, view(&result),
            view(gate), rows);
  e.finishSinglePhase(op->getLoc());
  return success();
}

struct RMSNormRowsPattern : OpKernelPattern<RMSNormOp> {
  RMSNormRowsPattern() : OpKernelPattern(KernelKind::rms_norm_rows) {}
  LogicalResult emit(RMSNormOp op, Adaptor, KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    return emitNormRows(op, e, ops.getInput(), nullptr, nullptr,
                        ops.getWeight().full, e.outputs[0],
                        op.getEpsilon().convertToDouble());
  }
};

struct PartialRMSNormRowsPattern : OpKernelPattern<PartialRMSNormOp> {
  PartialRMSNormRowsPattern() : OpKernelPattern(KernelKind::rms_norm_rows) {}
  LogicalResult emit(PartialRMSNormOp op, Adaptor,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    return emitNormRows(op, e, ops.getInput(), nullptr, nullptr,
                        ops.getWeight().full, e.outputs[0],
                        op.getEpsilon().convertToDouble(), nullptr,
                        ops.getWeight().shape[0]);
  }
};

struct AddRMSNormRowsPattern : OpKernelPattern<AddRMSNormOp> {
  AddRMSNormRowsPattern() : OpKernelPattern(KernelKind::rms_norm_rows) {}
  LogicalResult emit(AddRMSNormOp op, Adaptor,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    KernelOperand residual = ops.getResidual(),
                  sum = resultOf(e.outputs, op.getSum());
    return emitNormRows(
        op, e, ops.getInput(), &residual, &sum, ops.getWeight().full,
        resultOf(e.outputs, op.getResult()), op.getEpsilon().convertToDouble());
  }
};

struct GatedRMSNormRowsPattern : OpKernelPattern<GatedRMSNormOp> {
  GatedRMSNormRowsPattern() : OpKernelPattern(KernelKind::rms_norm_rows) {}
  LogicalResult emit(GatedRMSNormOp op, Adaptor,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    KernelOperand gate = ops.getGate();
    return emitNormRows(op, e, ops.getInput(), nullptr, nullptr,
                        ops.getWeight().full, e.outputs[0],
                        op.getEpsilon().convertToDouble(), &gate);
  }
};

} // namespace

void mlir::k3::populateRMSNormRowsPatterns(KernelPatternSet &patterns) {
  patterns.add<RMSNormRowsPattern, PartialRMSNormRowsPattern,
               AddRMSNormRowsPattern, GatedRMSNormRowsPattern>();
}

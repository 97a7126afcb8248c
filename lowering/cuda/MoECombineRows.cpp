//===- MoECombineRows.cpp - k3.moe_combine, a block per token ---*- C++ -*-===//
//
// The MoE combine (config kernel `moe_combine_rows`, tile [V]): block t
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

class CombineRowsKernel {
public:
  CombineRowsKernel(const KernelEmission &e, MoECombineOp op)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        vec(e.config.getTile()[0]), threads(32 * e.config.getWarps()) {
    auto ops = operandsOf(op, e.inputs);
    const KernelOperand &rowsOp = ops.getRows(), &pos = ops.getPositions();
    topK = pos.shape[1];
    width = rowsOp.shape[2];
    shared = rowsOp.shape[1] == topK + 1;
    tokens = kb.dim(pos.shape[0]);
    pairs = kb.muli(tokens, kb.idx(topK));
    Value allRows = kb.muli(tokens, kb.idx(rowsOp.shape[1]));
    rows = em.contiguousView(rowsOp.base, {allRows, kb.idx(width)});
    positions = pos.full;
    if (KernelOperand addendOp = ops.getAddend())
      addend = em.contiguousView(addendOp.base, {tokens, kb.idx(width)});
    y = em.contiguousView(e.outputs[0].base, {tokens, kb.idx(width)});
  }

  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value t = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    SmallVector<Value> at;
    for (int64_t j = 0; j < topK; ++j)
      at.push_back(kb.loadIndex(positions, {t, kb.idx(j)}));
    if (shared)
      at.push_back(kb.addi(pairs, t));
    const int64_t chunks = width / vec;
    for (int64_t i = 0; i * threads < chunks; ++i) {
      Value chunk = kb.addi(tid, kb.idx(i * threads));
      auto body = [&, chunk] { emitChunk(t, kb.muli(chunk, kb.idx(vec)), at); };
      if ((i + 1) * threads <= chunks)
        body();
      else
        kb.ifThen(kb.lti(chunk, kb.idx(chunks)), body);
    }
  }

private:
  /// Channels [c, c + V) of token t: its rows `at` summed in slot order (the
  /// shared expert's last), then the addend.
  void emitChunk(Value t, Value c, ArrayRef<Value> at) {
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
    Value v = vector::FromElementsOp::create(
        b, loc, VectorType::get({vec}, b.getF32Type()), acc);
    if (!yElem.isF32())
      v = arith::TruncFOp::create(b, loc, VectorType::get({vec}, yElem), v);
    auto st = vector::StoreOp::create(b, loc, v, y, ValueRange{t, c});
    st.setAlignment(vec * yElem.getIntOrFloatBitWidth() / 8);
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t vec, threads, topK = 0, width = 0;
  bool shared = false;
  Value tokens, pairs, rows, positions, addend, y;
};

struct MoECombineRowsPattern : OpKernelPattern<MoECombineOp> {
  MoECombineRowsPattern() : OpKernelPattern(KernelKind::moe_combine_rows) {}
  LogicalResult emit(MoECombineOp op, Adaptor,
                     KernelEmission &e) const override {
    FailureOr<KernelBuilder::Linear> form =
        e.tokenForm(op, operandsOf(op, e.inputs).getPositions().shape[0]);
    if (failed(form))
      return failure();
    e.setLaunch(*form, 1, 0, 1, {32 * e.config.getWarps(), 1, 1});
    CombineRowsKernel(e, op).emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateMoECombineRowsPattern(KernelPatternSet &patterns) {
  patterns.add<MoECombineRowsPattern>();
}

//===- KDAChunkwise.cpp - k3.kda to the chunkwise form ----------*- C++ -*-===//
//
// Rewrites the token-serial KDA core into chunk-parallel matrix work with a
// short serial chain (docs/kda-chunkwise.md):
//
//   prepare -> gram(I + BL) -> tri_solve (U, W) -> state passing -> output
//                           \-> gram(M) -------------------------/
//
// Every intermediate is token-indexed [B, T, H, ...] or per sequence, so the
// symbolic shapes stay within T, N and N + 1.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/Support/MathExtras.h"

#include <cmath>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3KDACHUNKWISE
#include "passes/Passes.h.inc"

namespace {

/// The lower bound of the log-decay when the gate guarantees one.
std::optional<double> gateLowerBound(KDAOp op) {
  if (auto kind = op.getGateKind()) {
    if (*kind == DecayGateKind::lower_bounded_sigmoid && op.getLowerBound())
      return op.getLowerBound()->convertToDouble();
    return std::nullopt;
  }
  Value g = op.getG();
  if (auto e = g.getDefiningOp<tensor::ExpandShapeOp>())
    g = e.getSrc();
  if (auto gate = g.getDefiningOp<KDAGateOp>())
    if (gate.getKind() == DecayGateKind::lower_bounded_sigmoid &&
        gate.getLowerBound())
      return gate.getLowerBound()->convertToDouble();
  return std::nullopt;
}

struct K3KDAChunkwisePass : impl::K3KDAChunkwiseBase<K3KDAChunkwisePass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkSize <= 0 || chunkSize % 16 != 0) {
      getOperation()->emitError()
          << "k3-kda-chunkwise: chunk-size must be a positive multiple of 16 "
             "(the tile size), got "
          << static_cast<int64_t>(chunkSize.getValue());
      return signalPassFailure();
    }
    if (tileSize <= 0 || !llvm::isPowerOf2_64(tileSize) ||
        chunkSize % tileSize != 0) {
      getOperation()->emitError()
          << "k3-kda-chunkwise: tile-size must be a power of two dividing "
             "chunk-size "
          << static_cast<int64_t>(chunkSize.getValue()) << ", got "
          << static_cast<int64_t>(tileSize.getValue());
      return signalPassFailure();
    }
    if (decayForm != "auto" && decayForm != "tile-factored" &&
        decayForm != "pairwise") {
      getOperation()->emitError() << "k3-kda-chunkwise: decay-form must be "
                                     "auto, tile-factored or pairwise, got '"
                                  << decayForm << "'";
      return signalPassFailure();
    }
    if (numSegments < 0) {
      getOperation()->emitError()
          << "k3-kda-chunkwise: num-segments must be >= 0";
      return signalPassFailure();
    }
    SmallVector<KDAOp> ops;
    getOperation()->walk([&](KDAOp op) {
      if (!inDecodeEntry(op))
        ops.push_back(op);
    });
    for (KDAOp op : ops)
      if (failed(rewrite(op)))
        return signalPassFailure();
  }

  LogicalResult rewrite(KDAOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Type f32 = Float32Type::get(ctx);
    auto qType = cast<RankedTensorType>(op.getQ().getType());
    auto vType = cast<RankedTensorType>(op.getV().getType());
    auto fsType = cast<RankedTensorType>(op.getFinalState().getType());
    ArrayRef<int64_t> qs = qType.getShape();
    auto qF = RankedTensorType::get(qs, f32);
    auto vF = RankedTensorType::get(vType.getShape(), f32);
    auto betaF = RankedTensorType::get(qs.take_front(3), f32);
    SmallVector<int64_t> mat(qs.take_front(3));
    mat.push_back(chunkSize);
    auto matF = RankedTensorType::get(mat, f32);

    // Where the bounded-gate assumption is used: gate_lower_bound on the
    // Gram ops selects the tile-factored exponent.
    std::optional<double> lb = gateLowerBound(op);
    bool fits = lb && std::fabs(*lb) * double(tileSize - 1) <= 88.0;
    FloatAttr lbAttr;
    if (decayForm == "tile-factored") {
      if (!lb)
        return op.emitOpError()
               << "has an unbounded decay gate (neg_softplus, or a log-decay "
                  "not produced by a lower_bounded_sigmoid gate): the "
                  "tile-factored decay form needs a lower-bounded gate; use "
                  "decay-form=pairwise (or auto)";
      if (!fits)
        return op.emitOpError()
               << "gate lower bound " << *lb << " over a tile of "
               << static_cast<int64_t>(tileSize.getValue())
               << " tokens overflows f32 in the tile-factored form (needs "
                  "|lb| * (tile - 1) <= 88); use a smaller tile-size or "
                  "decay-form=pairwise";
    }
    if (decayForm != "pairwise" && fits)
      lbAttr = b.getF64FloatAttr(*lb);

    Value cu = op.getCuSeqlens();
    auto prep = KDAChunkPrepareOp::create(
        b, loc, TypeRange{qF, qF, qF, qF, betaF}, op.getQ(), op.getK(),
        op.getG(), op.getBeta(), cu, op.getALog(), op.getDtBias(),
        b.getI64IntegerAttr(chunkSize), op.getScaleAttr(),
        op.getUseQkL2normAttr(), op.getUseBetaSigmoidAttr(),
        op.getGateKindAttr(), op.getLowerBoundAttr());
    Value qn = prep.getQScaled(), kn = prep.getKNorm(), G = prep.getGCum(),
          kg = prep.getKGamma(), beta = prep.getBetaOut();
    auto chunkAttr = b.getI64IntegerAttr(chunkSize);
    auto tileAttr = b.getI64IntegerAttr(tileSize);

    // I + diag(beta) L, L_ij = sum_c k_ic k_jc exp(G_ic - G_jc), j < i.
    auto ibl = KDAChunkGramOp::create(b, loc, matF, kn, kn, G, beta, cu,
                                      chunkAttr, tileAttr, b.getUnitAttr(),
                                      b.getUnitAttr(), lbAttr);
    // The UT transform: (I + BL) U = BV, (I + BL) W = B (K ⊙ Γ).
    auto fwd = b.getStringAttr("forward");
    auto U = TriSolveOp::create(b, loc, vF, ibl, op.getV(), beta, cu, chunkAttr,
                                fwd, IntegerAttr());
    auto W = TriSolveOp::create(b, loc, qF, ibl, kg, beta, cu, chunkAttr, fwd,
                                IntegerAttr());
    // M_ij = sum_c q_ic k_jc exp(G_ic - G_jc), j <= i.
    auto M =
        KDAChunkGramOp::create(b, loc, matF, qn, kn, G, Value(), cu, chunkAttr,
                               tileAttr, UnitAttr(), UnitAttr(), lbAttr);

    // The final state in the op's storage type (f32, or bf16 under
    // kda-state-dtype=bf16: the kernel rounds it once, at the end).
    auto stF = fsType;
    KDAChunkStateOp state;
    if (numSegments > 0) {
      int64_t N = fsType.getDimSize(0), H = qs[2], K = qs[3],
              V = vType.getDimSize(3);
      auto transF = RankedTensorType::get({N, numSegments, H, K, K}, f32);
      auto contF = RankedTensorType::get({N, numSegments, H, K, V}, f32);
      auto segAttr = b.getI64IntegerAttr(numSegments);
      auto summary =
          KDASegmentSummaryOp::create(b, loc, TypeRange{transF, contF}, U, W,
                                      kn, G, cu, chunkAttr, segAttr);
      auto scan = KDASegmentScanOp::create(
          b, loc, contF, summary.getTransition(), summary.getContribution(),
          op.getInitialState());
      state =
          KDAChunkStateOp::create(b, loc, TypeRange{vF, vF, stF}, U, W, kn, qn,
                                  G, Value(), scan, cu, chunkAttr, segAttr);
    } else {
      state = KDAChunkStateOp::create(b, loc, TypeRange{vF, vF, stF}, U, W, kn,
                                      qn, G, op.getInitialState(), Value(), cu,
                                      chunkAttr, IntegerAttr());
    }
    auto out = KDAChunkOutputOp::create(b, loc, op.getOutput().getType(), M,
                                        state.getVNew(), state.getOInter(), cu,
                                        chunkAttr);
    op.getOutput().replaceAllUsesWith(out.getOutput());
    op.getFinalState().replaceAllUsesWith(state.getFinalState());
    op.erase();
    return success();
  }
};

} // namespace
} // namespace mlir::k3

//===- FuseSharedExpert.cpp - the shared expert in MoE launches -*- C++ -*-===//
//
// A Kimi-Linear-48B decode step ran each MoE layer's shared expert as two
// GEMVs of its own (gate/up 2304 -> 2 x 1024, down 1024 -> 2304) and an add
// after the routed experts' combine: three launches of a few microseconds,
// each too small to fill the GPU (64 and 288 blocks;
// bench/results/profile-gpu/kl48b-decode-B1-20261203T0014Z-19e499b.txt).
// The shared expert is one more expert that every token takes with weight
// one, so it runs as rows T K + t of the grouped ops' launches (K3MoEOps.td)
// and the combine adds it last.
//
// Only functions marked k3.decode, and a prefill's last layer where it runs
// on the sequences' last tokens (k3-last-token-logits, RowWise.h): the
// prefill's shared expert is a dense GEMM that fills the GPU on its own,
// and the grouped wgmma kernel keeps one weight layout.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/RowWise.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSESHAREDEXPERT
#include "passes/Passes.h.inc"

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// The ops of one MoE layer's output, routed and shared, as the add sees
/// them.
struct MoEOutput {
  AddOp add;
  MoECombineOp combine;
  MoEGroupedDownOp down;
  MoEGroupedGLUOp glu;
  LinearOp sharedDown;
  GLUGateUpOp sharedGLU;
};

/// `add(combine(down(glu)), linear(glu_gate_up))`, in either operand order,
/// where every intermediate value has the add as its only reader.
std::optional<MoEOutput> matchMoEOutput(AddOp add) {
  for (auto [routed, shared] : {std::pair(add.getLhs(), add.getRhs()),
                                std::pair(add.getRhs(), add.getLhs())}) {
    MoEOutput m{add, routed.getDefiningOp<MoECombineOp>(), {},
                {},  shared.getDefiningOp<LinearOp>(),     {}};
    if (!m.combine || !m.sharedDown)
      continue;
    m.down = m.combine.getRows().getDefiningOp<MoEGroupedDownOp>();
    m.sharedGLU = m.sharedDown.getInput().getDefiningOp<GLUGateUpOp>();
    if (!m.down || !m.sharedGLU)
      continue;
    m.glu = m.down.getInput().getDefiningOp<MoEGroupedGLUOp>();
    if (!m.glu)
      continue;
    Operation *inner[] = {m.combine, m.down, m.glu, m.sharedDown, m.sharedGLU};
    if (llvm::all_of(inner, [](Operation *op) { return op->hasOneUse(); }))
      return m;
  }
  return std::nullopt;
}

/// Whether the shared expert is one more expert of the grouped ops: the
/// same input, GLU and widths, weights of the routed ones' element type.
bool sharedFitsGroupedOps(MoEOutput m) {
  MoEGroupedGLUOp glu = m.glu;
  GLUGateUpOp s = m.sharedGLU;
  if (glu.hasSharedExpert() || m.down.hasSharedExpert() ||
      s.getInput() != glu.getInput() ||
      s.getActivation() != glu.getActivation() ||
      s.getBetaAttr() != glu.getBetaAttr() ||
      s.getLinearBetaAttr() != glu.getLinearBetaAttr())
    return false;
  auto fits = [](Value shared, Value routed) {
    auto st = tensorType(shared), rt = tensorType(routed);
    return st.getRank() == 2 && rt.getRank() == 3 && st.hasStaticShape() &&
           rt.hasStaticShape() && st.getShape() == rt.getShape().drop_front() &&
           st.getElementType() == rt.getElementType();
  };
  return fits(s.getWGate(), glu.getW1()) && fits(s.getWUp(), glu.getW3()) &&
         fits(m.sharedDown.getWeight(), m.down.getW2()) &&
         m.add.getType() == m.combine.getType();
}

/// `v`'s type with one more slot in dimension 1: [T, K + 1, width].
RankedTensorType withSharedSlot(Value v) {
  auto t = tensorType(v);
  SmallVector<int64_t> shape(t.getShape());
  shape[1] += 1;
  return t.clone(shape);
}

bool weightsMovable(MoEOutput m) {
  return weightMovableBefore(m.sharedGLU.getWGate(), m.glu) &&
         weightMovableBefore(m.sharedGLU.getWUp(), m.glu) &&
         weightMovableBefore(m.sharedDown.getWeight(), m.glu);
}

void fuse(MoEOutput m) {
  MoEGroupedGLUOp glu = m.glu;
  MoEGroupedDownOp down = m.down;
  for (Value w :
       {m.sharedGLU.getWGate(), m.sharedGLU.getWUp(), m.sharedDown.getWeight()})
    hoistWeightBefore(w, glu);
  OpBuilder b(glu);
  Location gluLoc = b.getFusedLoc({glu.getLoc(), m.sharedGLU.getLoc()});
  auto newGLU = MoEGroupedGLUOp::create(
      b, gluLoc, withSharedSlot(glu.getResult()), glu.getInput(),
      glu.getIndices(), glu.getRowSource(), glu.getOffsets(),
      glu.getTileOffsets(), glu.getW1(), glu.getW3(), m.sharedGLU.getWGate(),
      m.sharedGLU.getWUp(), glu.getActivationAttr(), glu.getBetaAttr(),
      glu.getLinearBetaAttr());
  b.setInsertionPoint(down);
  auto newDown = MoEGroupedDownOp::create(
      b, b.getFusedLoc({down.getLoc(), m.sharedDown.getLoc()}),
      withSharedSlot(down.getResult()), newGLU.getResult(), down.getIndices(),
      down.getRowSource(), down.getOffsets(), down.getTileOffsets(),
      down.getWeights(), down.getW2(), m.sharedDown.getWeight());
  b.setInsertionPoint(m.add);
  auto combine = MoECombineOp::create(
      b, b.getFusedLoc({m.combine.getLoc(), m.add.getLoc()}), m.add.getType(),
      newDown.getResult(), m.combine.getPositions(), /*addend=*/Value());
  m.add.getResult().replaceAllUsesWith(combine.getResult());
  // Readers before the values they read.
  Operation *dead[] = {m.add, m.combine, m.sharedDown, m.sharedGLU, down, glu};
  for (Operation *op : dead)
    op->erase();
}

struct K3FuseSharedExpertPass
    : impl::K3FuseSharedExpertBase<K3FuseSharedExpertPass> {
  void runOnOperation() override {
    getOperation()->walk([&](func::FuncOp fn) {
      bool decode =
          K3Dialect::DecodeAttrHelper(fn.getContext()).isAttrPresent(fn);
      SmallVector<MoEOutput> found;
      fn.walk([&](AddOp add) {
        std::optional<MoEOutput> m = matchMoEOutput(add);
        // A prefill's last layer on its last tokens runs as a decode step.
        if (m && (decode || onLastTokenRows(m->glu.getInput())) &&
            sharedFitsGroupedOps(*m) && weightsMovable(*m))
          found.push_back(*m);
      });
      for (MoEOutput m : found)
        fuse(m);
    });
  }
};

} // namespace
} // namespace mlir::k3

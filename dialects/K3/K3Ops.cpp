//===- K3Ops.cpp - K3 op verifiers ------------------------------*- C++ -*-===//
//
// Verifiers report the operand by name and the dimension by index and
// meaning, so that an ill-shaped model description points at its mistake.
// Dynamic dimensions are compared only where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/DecayGate.h"
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <optional>

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

namespace {

bool isValidStateName(StringRef name) {
  return !name.empty() && name.find_first_of(" \t\n\"") == StringRef::npos;
}

/// cu_seqlens is a 1-D i32 tensor of N + 1 offsets.
LogicalResult verifyCuSeqlens(Operation *op, Value cuSeqlens) {
  if (!cuSeqlens)
    return success();
  return expectRank(op, named("cu_seqlens", cuSeqlens), 1);
}

/// K3's gate lower bound lives in [-5, 0) (DecayGate.h says why).
LogicalResult verifyDecayGate(Operation *op, DecayGateKind kind,
                              std::optional<double> lowerBound) {
  if (kind == DecayGateKind::lower_bounded_sigmoid) {
    if (!lowerBound)
      return op->emitOpError()
             << "lower_bounded_sigmoid gate requires 'lower_bound'";
    if (!isValidGateLowerBound(*lowerBound))
      return op->emitOpError()
             << "expects 'lower_bound' in [-5, 0), got " << *lowerBound;
    return success();
  }
  if (lowerBound)
    return op->emitOpError()
           << "'lower_bound' applies only to the lower_bounded_sigmoid gate";
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Resources
//===----------------------------------------------------------------------===//

bool WeightOp::isExpertStack() { return getName().contains("{expert}"); }

LogicalResult WeightOp::verify() {
  Named r = named("result", getResult());
  if (getName().empty())
    return emitOpError() << "expects a non-empty weight name";
  if (failed(expectStatic(*this, r)) || failed(expectWeightBlocks(*this, r)))
    return failure();
  if (isExpertStack()) {
    if (r.type.getRank() < 2)
      return emitOpError() << "expert stack '" << getName()
                           << "' needs rank >= 2 (experts first), got rank "
                           << r.type.getRank();
    if (getName().count("{expert}") != 1)
      return emitOpError() << "expects one '{expert}' placeholder in '"
                           << getName() << "'";
  } else if (getName().contains('{') || getName().contains('}')) {
    return emitOpError() << "unknown placeholder in weight name '" << getName()
                         << "' (only {expert} is defined)";
  }
  return success();
}

LogicalResult StateReadOp::verify() {
  if (!isValidStateName(getName()))
    return emitOpError() << "expects a non-empty state name without spaces";
  Named r = named("result", getResult());
  if (failed(expectRankAtLeast(*this, r, 2)))
    return failure();
  for (int64_t d = 1; d < r.type.getRank(); ++d)
    if (r.type.isDynamicDim(d))
      return emitOpError() << "expects only the sequence dimension (0) of "
                              "state '"
                           << getName() << "' to be dynamic, got " << r.type;
  return success();
}

LogicalResult StateWriteOp::verify() {
  if (!isValidStateName(getName()))
    return emitOpError() << "expects a non-empty state name without spaces";
  return expectRankAtLeast(*this, named("value", getValue()), 2);
}

//===----------------------------------------------------------------------===//
// Dense building blocks
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  Named ids = named("ids", getIds()), table = named("table", getTable()),
        r = named("result", getResult());
  if (failed(expectRank(*this, ids, 1)) ||
      failed(expectRank(*this, table, 2)) || failed(expectRank(*this, r, 2)))
    return failure();
  if (failed(expectSameDim(*this, ids, 0, r, 0, "token count")) ||
      failed(expectSameDim(*this, table, 1, r, 1, "hidden size")))
    return failure();
  return success();
}

LogicalResult RMSNormOp::verify() {
  Named x = named("input", getInput()), w = named("weight", getWeight()),
        r = named("result", getResult());
  if (failed(expectRankAtLeast(*this, x, 1)) ||
      failed(expectRank(*this, w, 1)) || failed(expectSameShape(*this, x, r)))
    return failure();
  if (failed(expectSameDim(*this, x, x.type.getRank() - 1, w, 0,
                           "normalised size")))
    return failure();
  return expectPositive(*this, "epsilon", getEpsilon().convertToDouble());
}

LogicalResult GatedRMSNormOp::verify() {
  Named x = named("input", getInput()), z = named("gate", getGate()),
        w = named("weight", getWeight()), r = named("result", getResult());
  if (failed(expectRank(*this, x, 3)) || failed(expectRank(*this, w, 1)) ||
      failed(expectSameShape(*this, x, z)) ||
      failed(expectSameShape(*this, x, r)) ||
      failed(expectSameDim(*this, x, 2, w, 0, "head dimension")))
    return failure();
  return expectPositive(*this, "epsilon", getEpsilon().convertToDouble());
}

LogicalResult LinearOp::verify() {
  Named x = named("input", getInput()), w = named("weight", getWeight()),
        r = named("result", getResult());
  if (failed(expectRankAtLeast(*this, x, 1)) || failed(expectRank(*this, w, 2)))
    return failure();
  if (r.type.getRank() != x.type.getRank())
    return emitOpError() << "expects the result to have the rank of 'input' ("
                         << x.type.getRank() << "), got " << r.type.getRank();
  int64_t last = x.type.getRank() - 1;
  for (int64_t d = 0; d < last; ++d)
    if (failed(expectSameDim(*this, x, d, r, d, "batch dimension")))
      return failure();
  if (failed(expectSameDim(*this, x, last, w, 1, "input features")) ||
      failed(expectSameDim(*this, w, 0, r, last, "output features")))
    return failure();
  return success();
}

LogicalResult SigmoidGateOp::verify() {
  Named x = named("input", getInput()), z = named("gate", getGate()),
        r = named("result", getResult());
  if (failed(expectSameShape(*this, x, z)) ||
      failed(expectSameShape(*this, x, r)))
    return failure();
  return success();
}

LogicalResult ShortConvOp::verify() {
  Named x = named("input", getInput()), w = named("weight", getWeight()),
        r = named("result", getResult()),
        s = named("final_state", getFinalState());
  int64_t ks = getKernelSize();
  if (ks < 1 || ks > 16)
    return emitOpError() << "expects 'kernel_size' in [1, 16], got " << ks;
  if (failed(expectShortConvShapes(*this, x, w, s, r, ks)))
    return failure();
  if (Value cs = getConvState()) {
    Named in = named("conv_state", cs);
    if (failed(expectSameShape(*this, in, s)))
      return failure();
  }
  return verifyCuSeqlens(*this, getCuSeqlens());
}

//===----------------------------------------------------------------------===//
// KDA
//===----------------------------------------------------------------------===//

LogicalResult KDAGateOp::verify() {
  Named z = named("input", getInput()), a = named("A_log", getALog()),
        b = named("dt_bias", getDtBias()), r = named("result", getResult());
  if (failed(expectRank(*this, z, 3)) || failed(expectRank(*this, a, 1)) ||
      failed(expectRank(*this, b, 1)) || failed(expectSameShape(*this, z, r)))
    return failure();
  int64_t h = z.type.getDimSize(1), k = z.type.getDimSize(2);
  if (!ShapedType::isDynamic(h) && !a.type.isDynamicDim(0) &&
      a.type.getDimSize(0) < h)
    return emitOpError() << "expects 'A_log' to hold at least one entry per "
                            "head ("
                         << h << "), got " << a.type.getDimSize(0);
  if (!ShapedType::isDynamic(h) && !ShapedType::isDynamic(k) &&
      failed(expectDim(*this, b, 0, h * k, "heads * head_dim")))
    return failure();
  std::optional<double> lb;
  if (auto attr = getLowerBoundAttr())
    lb = attr.getValueAsDouble();
  return verifyDecayGate(*this, getKind(), lb);
}

LogicalResult KDAOp::verify() {
  Named q = named("q", getQ()), k = named("k", getK()), v = named("v", getV()),
        g = named("g", getG()), beta = named("beta", getBeta()),
        o = named("output", getOutput()),
        fs = named("final_state", getFinalState());
  for (Named t : {q, k, v, g, o})
    if (failed(expectRank(*this, t, 4)))
      return failure();
  if (failed(expectRank(*this, beta, 3)) || failed(expectRank(*this, fs, 4)))
    return failure();
  if (failed(expectSameShape(*this, q, k)) ||
      failed(expectSameShape(*this, q, g)) ||
      failed(expectSameShape(*this, v, o)))
    return failure();
  for (int64_t d = 0; d < 3; ++d)
    if (failed(expectSameDim(*this, q, d, v, d,
                             d == 0   ? "batch"
                             : d == 1 ? "token count"
                                      : "head count")) ||
        failed(expectSameDim(*this, q, d, beta, d,
                             d == 0   ? "batch"
                             : d == 1 ? "token count"
                                      : "head count")))
      return failure();
  // Final state [N, H, K, V].
  if (failed(expectSameDim(*this, q, 2, fs, 1, "head count")) ||
      failed(expectSameDim(*this, q, 3, fs, 2, "key dimension")) ||
      failed(expectSameDim(*this, v, 3, fs, 3, "value dimension")))
    return failure();
  if (!getCuSeqlens() &&
      failed(expectSameDim(*this, q, 0, fs, 0, "sequence count")))
    return failure();
  if (Value init = getInitialState()) {
    if (failed(expectSameShape(*this, named("initial_state", init), fs)))
      return failure();
    // One storage type for the state across calls (f32, or bf16 under
    // kda-state-dtype=bf16).
    if (cast<RankedTensorType>(init.getType()).getElementType() !=
        cast<RankedTensorType>(getFinalState().getType()).getElementType())
      return emitOpError() << "expects 'initial_state' of the final state's "
                              "element type";
  }
  if (Value cu = getCuSeqlens()) {
    if (failed(verifyCuSeqlens(*this, cu)) ||
        failed(expectDim(*this, q, 0, 1,
                         "batch, which must be 1 with "
                         "cu_seqlens")))
      return failure();
  }
  int64_t hk = q.type.getDimSize(3), hv = v.type.getDimSize(3);
  if ((!ShapedType::isDynamic(hk) && hk > 256) ||
      (!ShapedType::isDynamic(hv) && hv > 256))
    return emitOpError() << "supports head dimensions up to 256, got K = " << hk
                         << ", V = " << hv;
  if (failed(expectPositive(*this, "scale", getScale().convertToDouble())))
    return failure();

  // The in-op gate needs its parameters, and only then. The custom syntax
  // gives both or neither; the generic form can give one alone.
  if (bool(getALog()) != bool(getDtBias()))
    return emitOpError() << "expects gate_params to give both 'A_log' and "
                            "'dt_bias'";
  bool hasParams = getALog() != nullptr;
  std::optional<double> lb;
  if (auto attr = getLowerBoundAttr())
    lb = attr.getValueAsDouble();
  if (auto kind = getGateKind()) {
    if (!hasParams)
      return emitOpError() << "'gate_kind' requires gate_params(A_log, "
                              "dt_bias)";
    if (failed(verifyDecayGate(*this, *kind, lb)))
      return failure();
    Named a = named("A_log", getALog()), b = named("dt_bias", getDtBias());
    if (failed(expectRank(*this, a, 1)) || failed(expectRank(*this, b, 1)))
      return failure();
    int64_t h = q.type.getDimSize(2);
    if (!ShapedType::isDynamic(h) && !ShapedType::isDynamic(hk) &&
        failed(expectDim(*this, b, 0, h * hk, "heads * head_dim")))
      return failure();
  } else {
    if (hasParams)
      return emitOpError() << "gate_params given without 'gate_kind'";
    if (lb)
      return emitOpError() << "'lower_bound' given without 'gate_kind'";
    if (!g.type.getElementType().isF32())
      return emitOpError() << "expects the log-decay 'g' in f32 (it is "
                              "summed over a chunk), got "
                           << g.type.getElementType();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

LogicalResult CausalAttentionOp::verify() {
  Named q = named("q", getQ()), k = named("k", getK()), v = named("v", getV()),
        r = named("result", getResult());
  for (Named t : {q, k, v, r})
    if (failed(expectRank(*this, t, 3)))
      return failure();
  if (failed(expectSameShape(*this, q, k)) ||
      failed(expectSameDim(*this, q, 0, v, 0, "token count")) ||
      failed(expectSameDim(*this, q, 1, v, 1, "head count")) ||
      failed(expectSameShape(*this, v, r)))
    return failure();
  if (failed(expectPositive(*this, "scale", getScale().convertToDouble())))
    return failure();
  return verifyCuSeqlens(*this, getCuSeqlens());
}

LogicalResult LatentAttentionOp::verify() {
  int64_t h = getNumHeads(), dn = getQkNopeHeadDim(), dr = getQkRopeHeadDim(),
          dv = getVHeadDim(), rank = getKvLoraRank();
  if (failed(expectPositive(*this, "num_heads", h)) ||
      failed(expectPositive(*this, "qk_nope_head_dim", dn)) ||
      failed(expectPositive(*this, "v_head_dim", dv)) ||
      failed(expectPositive(*this, "kv_lora_rank", rank)))
    return failure();
  if (dr < 0)
    return emitOpError() << "expects 'qk_rope_head_dim' >= 0, got " << dr;
  Named q = named("q", getQ()), lat = named("latent", getLatent()),
        kvb = named("kv_b", getKvB()), r = named("result", getResult());
  if (failed(expectRank(*this, q, 3)) || failed(expectRank(*this, lat, 2)) ||
      failed(expectRank(*this, kvb, 2)) || failed(expectRank(*this, r, 3)))
    return failure();
  if (failed(expectDim(*this, q, 1, h, "num_heads")) ||
      failed(expectDim(*this, q, 2, dn + dr,
                       "qk_nope_head_dim + qk_rope_head_dim")) ||
      failed(expectDim(*this, lat, 1, rank + dr,
                       "kv_lora_rank + qk_rope_head_dim")) ||
      failed(expectDim(*this, kvb, 0, h * (dn + dv),
                       "num_heads * (qk_nope_head_dim + v_head_dim)")) ||
      failed(expectDim(*this, kvb, 1, rank, "kv_lora_rank")) ||
      failed(expectSameDim(*this, q, 0, lat, 0, "token count")) ||
      failed(expectSameDim(*this, q, 0, r, 0, "token count")) ||
      failed(expectDim(*this, r, 1, h, "num_heads")) ||
      failed(expectDim(*this, r, 2, dv, "v_head_dim")))
    return failure();
  if (failed(expectPositive(*this, "scale", getScale().convertToDouble())))
    return failure();
  Value cache = getLatentCache();
  if (bool(cache) != bool(getCacheLens()))
    return emitOpError() << "expects 'cache_lens' exactly when a "
                            "'latent_cache' operand is given";
  if (bool(cache) != bool(getLatentCacheOut()))
    return emitOpError() << "expects a 'latent_cache' result exactly when a "
                            "latent cache operand is given";
  if (cache) {
    Named c = named("latent_cache", cache),
          co = named("latent_cache_out", getLatentCacheOut()),
          lens = named("cache_lens", getCacheLens());
    if (failed(expectRank(*this, c, 3)) ||
        failed(expectDim(*this, c, 2, rank + dr,
                         "kv_lora_rank + qk_rope_head_dim")) ||
        failed(expectSameShape(*this, c, co)) ||
        failed(expectRank(*this, lens, 1)) ||
        failed(expectSameDim(*this, c, 0, lens, 0, "sequence count")))
      return failure();
  }
  return verifyCuSeqlens(*this, getCuSeqlens());
}

//===----------------------------------------------------------------------===//
// MLPs and MoE
//===----------------------------------------------------------------------===//

static std::optional<double> optDouble(FloatAttr a) {
  if (!a)
    return std::nullopt;
  return a.getValueAsDouble();
}

LogicalResult GLUMLPOp::verify() {
  Named x = named("input", getInput()), wg = named("w_gate", getWGate()),
        wu = named("w_up", getWUp()), wd = named("w_down", getWDown()),
        r = named("result", getResult());
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, wg, 2)) ||
      failed(expectRank(*this, wd, 2)) ||
      failed(expectSameShape(*this, wg, wu)) ||
      failed(expectSameShape(*this, x, r)))
    return failure();
  if (failed(expectSameDim(*this, x, 1, wg, 1, "hidden size")) ||
      failed(expectSameDim(*this, wd, 0, x, 1, "hidden size")) ||
      failed(expectSameDim(*this, wd, 1, wg, 0, "intermediate size")))
    return failure();
  return expectGLUActivation(*this, getActivation(), optDouble(getBetaAttr()),
                             optDouble(getLinearBetaAttr()));
}

LogicalResult MoERouterOp::verify() {
  Named x = named("input", getInput()), w = named("weight", getWeight()),
        idx = named("indices", getIndices());
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, w, 2)) ||
      failed(expectSameDim(*this, x, 1, w, 1, "hidden size")) ||
      failed(expectRank(*this, idx, 2)) ||
      failed(expectSameDim(*this, x, 0, idx, 0, "token count")))
    return failure();
  return expectRouterRule(*this, w, 0);
}

LogicalResult MoEExpertsOp::verify() {
  Named x = named("input", getInput()), idx = named("indices", getIndices()),
        wts = named("weights", getWeights()), w1 = named("w1", getW1()),
        w3 = named("w3", getW3()), w2 = named("w2", getW2()),
        r = named("result", getResult());
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, idx, 2)) ||
      failed(expectSameShape(*this, idx, wts)) ||
      failed(expectRank(*this, w1, 3)) || failed(expectRank(*this, w2, 3)) ||
      failed(expectSameShape(*this, w1, w3)) ||
      failed(expectSameWeightType(*this, w1, w3)) ||
      failed(expectWeightBlocks(*this, w1)) ||
      failed(expectWeightBlocks(*this, w2)) ||
      failed(expectSameShape(*this, x, r)))
    return failure();
  if (failed(expectSameDim(*this, x, 0, idx, 0, "token count")) ||
      failed(expectSameDim(*this, w1, 2, x, 1, "expert input width")) ||
      failed(expectSameDim(*this, w2, 0, w1, 0, "expert count")) ||
      failed(expectSameDim(*this, w2, 1, x, 1, "expert output width")) ||
      failed(expectSameDim(*this, w2, 2, w1, 1, "expert intermediate size")))
    return failure();
  return expectGLUActivation(*this, getActivation(), optDouble(getBetaAttr()),
                             optDouble(getLinearBetaAttr()));
}

//===----------------------------------------------------------------------===//
// AttnRes
//===----------------------------------------------------------------------===//

LogicalResult AttnResMixOp::verify() {
  Named b = named("blocks", getBlocks()), p = named("partial", getPartial()),
        nw = named("norm_weight", getNormWeight()),
        pw = named("proj_weight", getProjWeight()),
        r = named("result", getResult());
  if (failed(expectRank(*this, b, 3)) || failed(expectRank(*this, p, 2)) ||
      failed(expectRank(*this, nw, 1)) || failed(expectRank(*this, pw, 2)) ||
      failed(expectSameShape(*this, p, r)))
    return failure();
  if (failed(expectSameDim(*this, b, 1, p, 0, "token count")) ||
      failed(expectSameDim(*this, b, 2, p, 1, "hidden size")) ||
      failed(expectSameDim(*this, nw, 0, p, 1, "hidden size")) ||
      failed(expectDim(*this, pw, 0, 1, "pseudo-query count")) ||
      failed(expectSameDim(*this, pw, 1, p, 1, "hidden size")))
    return failure();
  return expectPositive(*this, "epsilon", getEpsilon().convertToDouble());
}

LogicalResult AttnResPushOp::verify() {
  Named b = named("blocks", getBlocks()), p = named("partial", getPartial()),
        r = named("result", getResult());
  if (failed(expectRank(*this, b, 3)) || failed(expectRank(*this, p, 2)) ||
      failed(expectRank(*this, r, 3)))
    return failure();
  if (failed(expectSameDim(*this, b, 1, p, 0, "token count")) ||
      failed(expectSameDim(*this, b, 2, p, 1, "hidden size")) ||
      failed(expectSameDim(*this, r, 1, p, 0, "token count")) ||
      failed(expectSameDim(*this, r, 2, p, 1, "hidden size")))
    return failure();
  int64_t nb = b.type.getDimSize(0), nr = r.type.getDimSize(0);
  if (!ShapedType::isDynamic(nb) && !ShapedType::isDynamic(nr) && nr != nb + 1)
    return emitOpError() << "expects the result to hold " << nb + 1
                         << " blocks, got " << nr;
  return success();
}

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

LogicalResult LayerOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto fn =
      symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!fn)
    return emitOpError() << "'" << getCallee()
                         << "' does not name a func.func layer template";
  FunctionType type = fn.getFunctionType();
  if (type.getNumInputs() != getArgs().size())
    return emitOpError() << "passes " << getArgs().size() << " arguments to '"
                         << getCallee() << "', which takes "
                         << type.getNumInputs();
  for (auto [i, arg] : llvm::enumerate(getArgs()))
    if (arg.getType() != type.getInput(i))
      return emitOpError() << "argument " << i << " has type " << arg.getType()
                           << " but '" << getCallee() << "' expects "
                           << type.getInput(i);
  if (type.getNumResults() != getNumResults())
    return emitOpError() << "expects " << getNumResults() << " results but '"
                         << getCallee() << "' returns " << type.getNumResults();
  for (auto [i, res] : llvm::enumerate(getResults()))
    if (res.getType() != type.getResult(i))
      return emitOpError() << "result " << i << " has type " << res.getType()
                           << " but '" << getCallee() << "' returns "
                           << type.getResult(i);
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<FunctionOpInterface>(
      *this, getKernelAttr());
  if (!fn)
    return emitOpError() << "kernel " << getKernelAttr() << " not found";
  // Then one parameter per TMA tensor map the kernel declares.
  ArrayAttr maps = K3Dialect::TensorMapsAttrHelper(getContext()).getAttr(fn);
  size_t expected =
      getInputs().size() + getNumResults() + 2 + (maps ? maps.size() : 0);
  if (fn.getNumArguments() != expected)
    return emitOpError() << "kernel " << getKernelAttr() << " takes "
                         << fn.getNumArguments() << " arguments, expected "
                         << expected
                         << " (inputs, outputs, num_tokens, "
                            "num_seqs, tensor maps)";
  return success();
}

LogicalResult ArgmaxOp::verify() {
  Named l = named("logits", getLogits()), r = named("result", getResult());
  if (failed(expectRank(*this, l, 2)) || failed(expectRank(*this, r, 1)) ||
      failed(expectSameDim(*this, l, 0, r, 0, "token count")))
    return failure();
  return success();
}

#define GET_OP_CLASSES
#include "dialects/K3/K3Ops.cpp.inc"

//===- EmitModule.cpp - Config to K3 IR -----------------------------------===//
//
// The emitter creates ops in the order they are printed, so the structure of
// each function below follows the order of the IR it writes (weights first,
// then the computation), and `k3-import`'s output stays byte-stable.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-import/lib/EmitModule.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <map>
#include <tuple>

using namespace mlir;
using namespace mlir::k3;

namespace k3import {

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

class Emitter {
public:
  Emitter(MLIRContext &ctx, const Config &c, const ExpertPrecision &experts,
          ModuleOp m, const EmitOptions &opts)
      : ctx_(ctx), c_(c), experts_(experts), m_(m), b_(&ctx),
        loc_(UnknownLoc::get(&ctx)) {
    f32_ = b_.getF32Type();
    bf16_ = opts.f32Weights ? f32_ : b_.getBF16Type();
    i32_ = b_.getI32Type();
    kdaOperand_ = opts.bf16KdaOperands ? b_.getBF16Type() : f32_;
  }

  void emit(int64_t maxContext);

private:
  // Types and small op builders.
  RankedTensorType t(ArrayRef<int64_t> s, Type e) {
    return RankedTensorType::get(s, e);
  }
  RankedTensorType act(int64_t w) { return t({kDyn, w}, f32_); }
  Value weight(StringRef name, ArrayRef<int64_t> shape, bool f32 = false) {
    return WeightOp::create(b_, loc_, t(shape, f32 ? f32_ : bf16_),
                            b_.getStringAttr(name));
  }
  FloatAttr fa(double v) { return b_.getF64FloatAttr(v); }
  Value linear(Value x, Value w) {
    auto wt = cast<RankedTensorType>(w.getType());
    auto xt = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> s(xt.getShape());
    s.back() = wt.getDimSize(0);
    return LinearOp::create(b_, loc_, t(s, f32_), x, w);
  }
  Value rmsNorm(Value x, Value w, double eps) {
    return RMSNormOp::create(b_, loc_, x.getType(), x, w, fa(eps));
  }
  Value add(Value a, Value b) {
    return AddOp::create(b_, loc_, a.getType(), a, b);
  }
  Value tokens(Value x) {
    Value c0 = arith::ConstantIndexOp::create(b_, loc_, 0);
    return tensor::DimOp::create(b_, loc_, x, c0);
  }
  Value expand(Value x, RankedTensorType to, ArrayRef<ReassociationIndices> re,
               ArrayRef<OpFoldResult> shape) {
    return tensor::ExpandShapeOp::create(b_, loc_, to, x, re, shape);
  }
  Value collapse(Value x, ArrayRef<ReassociationIndices> re) {
    return tensor::CollapseShapeOp::create(b_, loc_, x, re);
  }
  GLUActivation glu() const {
    return c_.situ ? GLUActivation::situ : GLUActivation::silu;
  }
  FloatAttr beta() { return c_.situ ? fa(*c_.situBeta) : FloatAttr(); }
  FloatAttr linearBeta() {
    return c_.situ && c_.situLinearBeta ? fa(*c_.situLinearBeta) : FloatAttr();
  }
  Value gluMlp(Value x, StringRef prefix, int64_t inter);
  func::FuncOp startFunc(StringRef name, TypeRange ins, TypeRange outs);

  // KDA mixer template.
  struct KdaWeights {
    Value proj[3], conv[3], fa, fb, alog, dtBias, b, g, ga, gb, oNorm, o;
  };
  KdaWeights kdaWeights();
  void kdaShortConvs(Value x, Value cu, const KdaWeights &w, Value out[3]);
  void emitKdaMixer();

  // MLA mixer template.
  Value mlaLatent(Value ckv, Value T, Value kvNorm);
  void emitMlaMixer(int64_t maxContext);

  // MoE blocks and layer templates.
  void nameMoeBlocks();
  void emitMoe(ExpertPrecision::Layer mxfp4);
  std::string emitLayer(bool kda, bool moe, bool open,
                        ExpertPrecision::Layer mxfp4);

  // @forward.
  func::FuncOp declareForward();
  std::vector<std::string> emitTemplates(int64_t maxContext);
  void emitForwardBody(func::FuncOp fwd, const std::vector<std::string> &fns);

  MLIRContext &ctx_;
  const Config &c_;
  const ExpertPrecision &experts_;
  ModuleOp m_;
  OpBuilder b_;
  Location loc_;
  Type f32_, bf16_, i32_, kdaOperand_;
  /// The MoE block template of each expert precision (its name's suffix),
  /// in layer order.
  std::map<ExpertPrecision::Layer, std::string> moeSuffix_;
  std::vector<ExpertPrecision::Layer> moeOrder_;
  std::string moeBlock(ExpertPrecision::Layer mxfp4) {
    return (c_.latent ? "latent_moe" : "moe") + moeSuffix_[mxfp4];
  }
};

Value Emitter::gluMlp(Value x, StringRef prefix, int64_t inter) {
  int64_t D = c_.hidden;
  Value g = weight((prefix + "gate_proj.weight").str(), {inter, D});
  Value u = weight((prefix + "up_proj.weight").str(), {inter, D});
  Value d = weight((prefix + "down_proj.weight").str(), {D, inter});
  return GLUMLPOp::create(b_, loc_, act(D), x, g, u, d,
                          GLUActivationAttr::get(&ctx_, glu()), beta(),
                          linearBeta());
}

func::FuncOp Emitter::startFunc(StringRef name, TypeRange ins, TypeRange outs) {
  auto fn =
      func::FuncOp::create(loc_, name, FunctionType::get(&ctx_, ins, outs));
  fn.setPrivate();
  m_.push_back(fn);
  b_.setInsertionPointToStart(fn.addEntryBlock());
  return fn;
}

//===----------------------------------------------------------------------===//
// KDA mixer (K3-SPEC §2)
//===----------------------------------------------------------------------===//

Emitter::KdaWeights Emitter::kdaWeights() {
  int64_t D = c_.hidden, H = c_.kdaHeads, d = c_.kdaDim, P = H * d,
          K = c_.convKernel;
  KdaWeights w;
  w.proj[0] = weight("q_proj.weight", {P, D});
  w.proj[1] = weight("k_proj.weight", {P, D});
  w.proj[2] = weight("v_proj.weight", {P, D});
  w.conv[0] = weight("q_conv1d.weight", {P, 1, K}, true);
  w.conv[1] = weight("k_conv1d.weight", {P, 1, K}, true);
  w.conv[2] = weight("v_conv1d.weight", {P, 1, K}, true);
  w.fa = weight("f_a_proj.weight", {d, D});
  w.fb = weight("f_b_proj.weight", {P, d});
  int64_t alogLen =
      c_.lowerBound ? std::max(H, d) : H; // K3 pads A_log to 128 (K3-SPEC §2)
  w.alog = weight("A_log", {alogLen}, true);
  w.dtBias = weight("dt_bias", {P}, true);
  w.b = weight("b_proj.weight", {H, D});
  if (c_.fullRankGate) {
    w.g = weight("g_proj.weight", {P, D});
  } else {
    w.ga = weight("g_a_proj.weight", {d, D});
    w.gb = weight("g_b_proj.weight", {P, d});
  }
  w.oNorm = weight("o_norm.weight", {d}, true);
  w.o = weight("o_proj.weight", {D, P});
  return w;
}

/// q, k, v: projection, causal short convolution with carried state.
void Emitter::kdaShortConvs(Value x, Value cu, const KdaWeights &w,
                            Value out[3]) {
  int64_t P = c_.kdaHeads * c_.kdaDim, K = c_.convKernel;
  auto stTy = t({kDyn, P, K - 1}, f32_);
  const char *names[3] = {"q", "k", "v"};
  auto stateName = [&](int i) {
    return b_.getStringAttr(std::string(names[i]) + "_conv_state");
  };
  Value pre[3], st[3], nst[3];
  for (int i = 0; i < 3; ++i)
    pre[i] = linear(x, w.proj[i]);
  for (int i = 0; i < 3; ++i)
    st[i] = StateReadOp::create(b_, loc_, stTy, stateName(i));
  for (int i = 0; i < 3; ++i) {
    auto op =
        ShortConvOp::create(b_, loc_, t({kDyn, P}, kdaOperand_), stTy, pre[i],
                            w.conv[i], st[i], cu, b_.getI64IntegerAttr(K));
    out[i] = op.getResult();
    nst[i] = op.getFinalState();
  }
  for (int i = 0; i < 3; ++i)
    StateWriteOp::create(b_, loc_, stateName(i), nst[i]);
}

void Emitter::emitKdaMixer() {
  int64_t D = c_.hidden, H = c_.kdaHeads, d = c_.kdaDim;
  auto fn = startFunc("kda_mixer", {act(D), t({kDyn}, i32_)}, {act(D)});
  Value x = fn.getArgument(0), cu = fn.getArgument(1);
  Value T = tokens(x);
  KdaWeights w = kdaWeights();
  Value qkv[3];
  kdaShortConvs(x, cu, w, qkv);

  // Decay gate and beta.
  OpFoldResult Tf = T, Hf = b_.getIndexAttr(H), df = b_.getIndexAttr(d),
               one = b_.getIndexAttr(1);
  Value fz = linear(linear(x, w.fa), w.fb);
  auto thd = t({kDyn, H, d}, f32_);
  Value z = expand(fz, thd, {{0}, {1, 2}}, {Tf, Hf, df});
  Value g = KDAGateOp::create(
      b_, loc_, thd, z, w.alog, w.dtBias,
      DecayGateKindAttr::get(&ctx_, c_.lowerBound
                                        ? DecayGateKind::lower_bounded_sigmoid
                                        : DecayGateKind::neg_softplus),
      c_.lowerBound ? fa(*c_.lowerBound) : FloatAttr());
  Value beta_ = linear(x, w.b);

  // The recurrence, with carried state.
  auto q4t = t({1, kDyn, H, d}, f32_), qkv4t = t({1, kDyn, H, d}, kdaOperand_);
  Value q = expand(qkv[0], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
  Value k = expand(qkv[1], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
  Value v = expand(qkv[2], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
  Value g4 = expand(g, q4t, {{0, 1}, {2}, {3}}, {one, Tf, Hf, df});
  Value b4 = expand(beta_, t({1, kDyn, H}, f32_), {{0, 1}, {2}}, {one, Tf, Hf});
  auto sTy = t({kDyn, H, d, d}, f32_);
  Value s0 =
      StateReadOp::create(b_, loc_, sTy, b_.getStringAttr("recurrent_state"));
  auto kda =
      KDAOp::create(b_, loc_, q4t, sTy, q, k, v, g4, b4, s0, cu, Value(),
                    Value(), fa(1.0 / std::sqrt(double(d))), b_.getUnitAttr(),
                    b_.getUnitAttr(), DecayGateKindAttr(), FloatAttr());
  StateWriteOp::create(b_, loc_, b_.getStringAttr("recurrent_state"),
                       kda.getFinalState());

  // Output gate, gated RMSNorm, o_proj.
  Value o3 = collapse(kda.getOutput(), {{0, 1}, {2}, {3}});
  Value zg = c_.fullRankGate ? linear(x, w.g) : linear(linear(x, w.ga), w.gb);
  Value zg3 = expand(zg, thd, {{0}, {1, 2}}, {Tf, Hf, df});
  Value on =
      GatedRMSNormOp::create(b_, loc_, thd, o3, zg3, w.oNorm, fa(c_.eps));
  Value o2 = collapse(on, {{0}, {1, 2}});
  func::ReturnOp::create(b_, loc_, linear(o2, w.o));
}

//===----------------------------------------------------------------------===//
// MLA mixer (K3-SPEC §3)
//===----------------------------------------------------------------------===//

/// The cached latent of each token: RMSNorm(c_kv) ++ k_pe (un-rotated).
Value Emitter::mlaLatent(Value ckv, Value T, Value kvNorm) {
  int64_t R = c_.kvLoraRank, Dr = c_.rope;
  OpFoldResult Tf = T;
  auto i0 = b_.getIndexAttr(0), i1 = b_.getIndexAttr(1);
  Value cc = tensor::ExtractSliceOp::create(
      b_, loc_, act(R), ckv, ArrayRef<OpFoldResult>{i0, i0},
      ArrayRef<OpFoldResult>{Tf, b_.getIndexAttr(R)},
      ArrayRef<OpFoldResult>{i1, i1});
  Value cn = rmsNorm(cc, kvNorm, 1e-6);
  if (Dr == 0)
    return cn;
  Value kpe = tensor::ExtractSliceOp::create(
      b_, loc_, act(Dr), ckv, ArrayRef<OpFoldResult>{i0, b_.getIndexAttr(R)},
      ArrayRef<OpFoldResult>{Tf, b_.getIndexAttr(Dr)},
      ArrayRef<OpFoldResult>{i1, i1});
  return tensor::ConcatOp::create(b_, loc_, act(R + Dr), 1,
                                  ValueRange{cn, kpe});
}

void Emitter::emitMlaMixer(int64_t L) {
  int64_t D = c_.hidden, H = c_.heads, qd = c_.nope + c_.rope,
          R = c_.kvLoraRank, Dr = c_.rope;
  auto idx = t({kDyn}, i32_);
  auto fn = startFunc("mla_mixer", {act(D), idx, idx}, {act(D)});
  Value x = fn.getArgument(0), cu = fn.getArgument(1), ctx = fn.getArgument(2);
  Value T = tokens(x);
  Value wqa, qan, wqb, wq;
  if (c_.qLoraRank) {
    wqa = weight("q_a_proj.weight", {*c_.qLoraRank, D});
    qan = weight("q_a_layernorm.weight", {*c_.qLoraRank});
    wqb = weight("q_b_proj.weight", {H * qd, *c_.qLoraRank});
  } else {
    wq = weight("q_proj.weight", {H * qd, D});
  }
  Value wkva = weight("kv_a_proj_with_mqa.weight", {R + Dr, D});
  Value kvan = weight("kv_a_layernorm.weight", {R});
  Value wkvb = weight("kv_b_proj.weight", {H * (c_.nope + c_.vDim), R});
  Value wg = c_.mlaGate ? weight("g_proj.weight", {H * c_.vDim, D}) : Value();
  Value wo = weight("o_proj.weight", {D, H * c_.vDim});

  Value q2 = c_.qLoraRank ? linear(rmsNorm(linear(x, wqa), qan, 1e-6), wqb)
                          : linear(x, wq);
  OpFoldResult Tf = T;
  Value q = expand(q2, t({kDyn, H, qd}, f32_), {{0}, {1, 2}},
                   {Tf, b_.getIndexAttr(H), b_.getIndexAttr(qd)});
  Value latent = mlaLatent(linear(x, wkva), T, kvan);
  auto cTy = t({kDyn, L, R + Dr}, f32_);
  Value cache =
      StateReadOp::create(b_, loc_, cTy, b_.getStringAttr("latent_cache"));
  auto la = LatentAttentionOp::create(
      b_, loc_, t({kDyn, H, c_.vDim}, f32_), cTy, q, latent, wkvb, cache, ctx,
      cu, b_.getI64IntegerAttr(H), b_.getI64IntegerAttr(c_.nope),
      b_.getI64IntegerAttr(Dr), b_.getI64IntegerAttr(c_.vDim),
      b_.getI64IntegerAttr(R), fa(1.0 / std::sqrt(double(qd))));
  StateWriteOp::create(b_, loc_, b_.getStringAttr("latent_cache"),
                       la.getLatentCacheOut());
  Value o2 = collapse(la.getResult(), {{0}, {1, 2}});
  if (c_.mlaGate)
    o2 = SigmoidGateOp::create(b_, loc_, o2.getType(), o2, linear(x, wg));
  func::ReturnOp::create(b_, loc_, linear(o2, wo));
}

//===----------------------------------------------------------------------===//
// MoE block (K3-SPEC §5) and decoder layers (§6, §7)
//===----------------------------------------------------------------------===//

/// One MoE block template per precision of the routed experts: the plain
/// name (`latent_moe` for K3, `moe` for Kimi Linear) when all MoE layers
/// agree, else `_mxfp4` (`_mxfp4_w1_w3`: only those projections) on the
/// templates whose experts are MXFP4.
void Emitter::nameMoeBlocks() {
  for (int64_t i = 0; i < c_.layers; ++i)
    if (c_.isMoe[i] && !moeSuffix_.count(experts_.layer(i))) {
      moeSuffix_[experts_.layer(i)] = "";
      moeOrder_.push_back(experts_.layer(i));
    }
  for (const ExpertPrecision::Layer &q : moeOrder_) {
    if (moeOrder_.size() == 1 || !(q[0] || q[1] || q[2]))
      continue;
    std::string &suffix = moeSuffix_[q];
    suffix = "_mxfp4";
    if (!(q[0] && q[1] && q[2]))
      for (int w = 0; w < 3; ++w)
        suffix += q[w] ? std::string("_w") + "123"[w] : "";
  }
}

/// `mxfp4[w]`: expert projection w1/w2/w3 is MXFP4, an f4E2M1FN stack (the
/// runtime loads it from `<name>_packed` / `<name>_scale`, docs/import.md).
void Emitter::emitMoe(ExpertPrecision::Layer mxfp4) {
  int64_t D = c_.hidden, E = c_.experts, k = c_.topK, I = c_.moeInter;
  int64_t Dm = c_.expertWidth();
  auto fn = startFunc(moeBlock(mxfp4), {act(D)}, {act(D)});
  Value x = fn.getArgument(0);
  Value wr = weight("gate.weight", {E, D});
  Value bias = weight("gate.e_score_correction_bias", {E}, true);
  auto router = MoERouterOp::create(
      b_, loc_, t({kDyn, k}, i32_), t({kDyn, k}, f32_), x, wr, bias,
      b_.getI64IntegerAttr(k),
      RouterScoreAttr::get(&ctx_, c_.softmaxRouter ? RouterScore::softmax
                                                   : RouterScore::sigmoid),
      c_.renormalize && k > 1 ? b_.getUnitAttr() : UnitAttr(), fa(c_.scaling),
      b_.getI64IntegerAttr(c_.nGroup), b_.getI64IntegerAttr(c_.topkGroup));
  Value wdown, rnorm, wup;
  if (c_.latent) {
    wdown = weight("routed_expert_down_proj.weight", {Dm, D});
    if (c_.latentNorm)
      rnorm = weight("routed_expert_norm.weight", {Dm});
    wup = weight("routed_expert_up_proj.weight", {D, Dm});
  }
  auto expert = [&](int w, ArrayRef<int64_t> shape) -> Value {
    Type elt = mxfp4[w] ? Type(b_.getType<Float4E2M1FNType>()) : bf16_;
    return WeightOp::create(b_, loc_, t(shape, elt),
                            b_.getStringAttr(std::string("experts.{expert}.w") +
                                             "123"[w] + ".weight"));
  };
  Value w1 = expert(0, {E, I, Dm});
  Value w3 = expert(2, {E, I, Dm});
  Value w2 = expert(1, {E, Dm, I});
  Value l = c_.latent ? linear(x, wdown) : x;
  Value r = MoEExpertsOp::create(
      b_, loc_, act(Dm), l, router.getIndices(), router.getWeights(), w1, w3,
      w2, GLUActivationAttr::get(&ctx_, glu()), beta(), linearBeta());
  if (c_.latent) {
    if (c_.latentNorm)
      r = rmsNorm(r, rnorm, c_.eps);
    r = linear(r, wup);
  }
  if (c_.sharedExperts > 0)
    r = add(r, gluMlp(x, "shared_experts.", I * c_.sharedExperts));
  func::ReturnOp::create(b_, loc_, r);
}

/// One layer template: `(P[, B], cu_seqlens, context_lens) -> (P[, B])`.
/// `open`: the layer starts an AttnRes block (pushes P onto B).
std::string Emitter::emitLayer(bool kda, bool moe, bool open,
                               ExpertPrecision::Layer mxfp4) {
  // kda_moe_layer, or kda_moe_mxfp4_layer beside latent_moe_mxfp4.
  std::string name = std::string(kda ? "kda" : "mla") +
                     (moe ? "_moe" + moeSuffix_[mxfp4] : "_dense") + "_layer" +
                     (open ? "_open" : "");
  int64_t D = c_.hidden;
  bool ar = c_.attnResBlock > 0;
  auto idx = t({kDyn}, i32_), bTy = t({kDyn, kDyn, D}, f32_);
  SmallVector<Type> ins{act(D)}, outs{act(D)};
  if (ar) {
    ins.push_back(bTy);
    outs.push_back(bTy);
  }
  ins.append({idx, idx});
  auto fn = startFunc(name, ins, outs);
  Value p = fn.getArgument(0), bl = ar ? fn.getArgument(1) : Value();
  Value cu = fn.getArgument(ar ? 2 : 1), ctx = fn.getArgument(ar ? 3 : 2);
  Value san, sap, mrn, mrp;
  if (ar) {
    san = weight("self_attention_res_norm.weight", {D});
    sap = weight("self_attention_res_proj.weight", {1, D});
    mrn = weight("mlp_res_norm.weight", {D});
    mrp = weight("mlp_res_proj.weight", {1, D});
  }
  Value inl = weight("input_layernorm.weight", {D});
  Value pal = weight("post_attention_layernorm.weight", {D});
  Value x = ar ? Value(AttnResMixOp::create(b_, loc_, act(D), bl, p, san, sap,
                                            fa(c_.eps)))
               : p;
  Value b1 =
      (ar && open) ? Value(AttnResPushOp::create(b_, loc_, bTy, bl, p)) : bl;
  Value xn = rmsNorm(x, inl, c_.eps);
  SmallVector<Value> mixIn{xn, cu};
  if (!kda)
    mixIn.push_back(ctx);
  Value a =
      LayerOp::create(b_, loc_, TypeRange{act(D)},
                      kda ? "kda_mixer" : "mla_mixer", "self_attn.", mixIn)
          .getResult(0);
  // P after the mixer: a fresh block starts from the mixer output.
  Value p1 = (ar && open) ? a : add(p, a);
  Value y = ar ? Value(AttnResMixOp::create(b_, loc_, act(D), b1, p1, mrn, mrp,
                                            fa(c_.eps)))
               : p1;
  Value yn = rmsNorm(y, pal, c_.eps);
  Value m = moe ? LayerOp::create(b_, loc_, TypeRange{act(D)}, moeBlock(mxfp4),
                                  "block_sparse_moe.", ValueRange{yn})
                      .getResult(0)
                : gluMlp(yn, "mlp.", c_.intermediate);
  SmallVector<Value> rets{add(p1, m)};
  if (ar)
    rets.push_back(b1);
  func::ReturnOp::create(b_, loc_, rets);
  return name;
}

//===----------------------------------------------------------------------===//
// @forward
//===----------------------------------------------------------------------===//

/// `@forward(token_ids, cu_seqlens, context_lens) -> (logits, next_tokens)`,
/// first in the module (as in examples/tiny_k3.mlir); its body comes last.
func::FuncOp Emitter::declareForward() {
  auto idx = t({kDyn}, i32_);
  auto fwd = func::FuncOp::create(
      loc_, "forward",
      FunctionType::get(&ctx_, {idx, idx, idx}, {act(c_.vocab), idx}));
  m_.push_back(fwd);
  const char *argNames[3] = {"token_ids", "cu_seqlens", "context_lens"};
  for (unsigned i = 0; i < 3; ++i)
    fwd.setArgAttr(i, "k3.name", b_.getStringAttr(argNames[i]));
  fwd.setResultAttr(0, "k3.name", b_.getStringAttr("logits"));
  fwd.setResultAttr(1, "k3.name", b_.getStringAttr("next_tokens"));
  return fwd;
}

/// One template per layer kind (mixer, MLP, AttnRes block start), then the
/// shared mixers and MoE block; returns each layer's template.
std::vector<std::string> Emitter::emitTemplates(int64_t L) {
  bool ar = c_.attnResBlock > 0;
  std::map<std::tuple<bool, bool, bool, ExpertPrecision::Layer>, std::string>
      kinds;
  std::vector<std::string> layerFn(c_.layers);
  nameMoeBlocks();
  for (int64_t i = 0; i < c_.layers; ++i) {
    bool open = ar && i % c_.attnResBlock == 0, kda = c_.isKda[i],
         moe = c_.isMoe[i];
    ExpertPrecision::Layer mxfp4 =
        moe ? experts_.layer(i) : ExpertPrecision::Layer{};
    auto key = std::make_tuple(kda, moe, open, mxfp4);
    auto it = kinds.find(key);
    if (it == kinds.end())
      it = kinds.emplace(key, emitLayer(kda, moe, open, mxfp4)).first;
    layerFn[i] = it->second;
  }
  if (c_.anyKda())
    emitKdaMixer();
  if (c_.anyMla())
    emitMlaMixer(L);
  for (const ExpertPrecision::Layer &mxfp4 : moeOrder_)
    emitMoe(mxfp4);
  return layerFn;
}

/// Embedding, one k3.layer per decoder layer, the final AttnRes mix, norm
/// and head, greedy next tokens.
void Emitter::emitForwardBody(func::FuncOp fwd,
                              const std::vector<std::string> &layerFn) {
  int64_t D = c_.hidden, V = c_.vocab;
  bool ar = c_.attnResBlock > 0;
  b_.setInsertionPointToStart(fwd.addEntryBlock());
  Value ids = fwd.getArgument(0), cu = fwd.getArgument(1),
        ctxl = fwd.getArgument(2);
  Value T = tokens(ids);
  Value embed = weight("model.embed_tokens.weight", {V, D});
  Value p = EmbeddingOp::create(b_, loc_, act(D), ids, embed);
  Value bl;
  auto bTy = t({kDyn, kDyn, D}, f32_);
  if (ar) {
    Value none =
        tensor::EmptyOp::create(b_, loc_, t({0, kDyn, D}, f32_), ValueRange{T});
    bl = tensor::CastOp::create(b_, loc_, bTy, none);
  }
  for (int64_t i = 0; i < c_.layers; ++i) {
    std::string prefix = "model.layers." + std::to_string(i) + ".";
    SmallVector<Value> args{p};
    SmallVector<Type> rts{act(D)};
    if (ar) {
      args.push_back(bl);
      rts.push_back(bTy);
    }
    args.append({cu, ctxl});
    auto l = LayerOp::create(b_, loc_, rts, layerFn[i], prefix, args);
    p = l.getResult(0);
    if (ar)
      bl = l.getResult(1);
  }
  Value h = p;
  if (ar) {
    Value onw = weight("model.output_attn_res_norm.weight", {D});
    Value opw = weight("model.output_attn_res_proj.weight", {1, D});
    h = AttnResMixOp::create(b_, loc_, act(D), bl, p, onw, opw, fa(c_.eps));
  }
  Value normw = weight("model.norm.weight", {D});
  Value hn = rmsNorm(h, normw, c_.eps);
  Value head = c_.tie ? embed : weight("lm_head.weight", {V, D});
  Value logits = linear(hn, head);
  Value next = ArgmaxOp::create(b_, loc_, t({kDyn}, i32_), logits);
  func::ReturnOp::create(b_, loc_, ValueRange{logits, next});
}

void Emitter::emit(int64_t L) {
  func::FuncOp fwd = declareForward();
  std::vector<std::string> layerFn = emitTemplates(L);
  emitForwardBody(fwd, layerFn);
}

} // namespace

OwningOpRef<ModuleOp> emitModule(MLIRContext &ctx, const Config &c,
                                 const ExpertPrecision &experts,
                                 const EmitOptions &opts) {
  ctx.loadDialect<K3Dialect, func::FuncDialect, tensor::TensorDialect,
                  arith::ArithDialect>();
  OpBuilder b(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  Operation *op = module->getOperation();
  op->setAttr("k3.model", b.getStringAttr(opts.name));
  op->setAttr("k3.vocab_size", b.getI64IntegerAttr(c.vocab));
  op->setAttr("k3.hidden_size", b.getI64IntegerAttr(c.hidden));
  op->setAttr("k3.max_context", b.getI64IntegerAttr(opts.maxContext));
  // The precision policy, applied by k3-compile (k3-activation-precision).
  if (!opts.activationDType.empty())
    K3Dialect::ActivationDtypeAttrHelper(&ctx).setAttr(
        *module, ActivationDTypeAttr::get(&ctx, opts.activationDType == "bf16"
                                                    ? ActivationDType::bf16
                                                    : ActivationDType::f32));
  Emitter(ctx, c, experts, *module, opts).emit(opts.maxContext);
  return module;
}

} // namespace k3import

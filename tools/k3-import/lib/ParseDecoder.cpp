//===- ParseDecoder.cpp - config.json to Config ---------------------------===//
//
// The decoder's fields are read in a fixed order, one group per function
// (basics, activation, MoE, layer kinds, KDA, MLA, the rest); the first
// problem found is the one reported, so the order is part of the behaviour
// test/Import/errors.test checks.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-import/lib/ParseDecoder.h"

#include <cmath>

#include "tools/k3-import/lib/ConfigFields.h"

#include <set>

using llvm::Error;

namespace k3import {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

/// Checks a 1-based layer list of linear_attn_config.
Error checkLayerList(const std::vector<int64_t> &l, const std::string &field,
                     int64_t n) {
  std::set<int64_t> seen;
  for (int64_t x : l) {
    if (x < 1 || x > n)
      return fieldError(field, "layer " + str(x) +
                                   " is out of range: the lists are 1-based, "
                                   "1.." +
                                   str(n) + " (num_hidden_layers)");
    if (!seen.insert(x).second)
      return fieldError(field, "layer " + str(x) + " is listed twice");
  }
  return Error::success();
}

/// Reads one decoder object (the top level of a Kimi Linear config, or
/// text_config of a K3 one) into `c`.
class DecoderReader {
public:
  DecoderReader(const js::Value &obj, const std::string &prefix,
                Warnings &warnings)
      : f(obj, prefix), warnings(warnings) {}

  Error read();
  Config c;

private:
  Error readBasics();
  Error readActivation();
  Error readMoe();
  Error readMoeGroups(int64_t groups, int64_t topkGroup, bool grouped,
                      bool groupedGiven,
                      const std::optional<std::string> &method);
  Error readMoeChecks(std::optional<int64_t> topK);
  Error
  readMlpLayerTypes(const std::optional<std::vector<std::string>> &mlpTypes);
  Error readLinearAttnConfig();
  Error readKindLists(Fields &l);
  Error readLayerTypes();
  Error readKdaShape();
  Error linearAlias(const std::string &what, const char *flat,
                    std::optional<int64_t> &val);
  Error readMla();
  Error readRest();

  Fields f;
  Warnings &warnings;
  // MoE layer placement (first_k_dense_replace / moe_layer_freq).
  int64_t firstDense = 0, freq = 1;
  bool firstDenseGiven = false;
  // Layer kinds: from linear_attn_config's lists and/or layer_types.
  std::vector<int64_t> kdaL;
  bool haveLists = false;
  std::optional<int64_t> lacHeads, lacDim, lacConv;
};

Error DecoderReader::read() {
  for (auto step :
       {&DecoderReader::readBasics, &DecoderReader::readActivation,
        &DecoderReader::readMoe, &DecoderReader::readLinearAttnConfig,
        &DecoderReader::readLayerTypes, &DecoderReader::readKdaShape,
        &DecoderReader::readMla, &DecoderReader::readRest})
    if (Error e = (this->*step)())
      return e;
  return Error::success();
}

Error DecoderReader::readBasics() {
  std::optional<std::string> mt;
  if (Error e = f.optString("model_type", mt))
    return e;
  if (mt && *mt != "kimi_linear" && *mt != "kimi_k3" && *mt != "kimi_k3_text")
    return fieldError(f.path("model_type"),
                      "'" + *mt +
                          "' is not a Kimi Linear / Kimi K3 decoder "
                          "(expected kimi_linear)");
  if (Error e = f.integer("hidden_size", 1, c.hidden))
    return e;
  if (Error e = f.integer("num_hidden_layers", 1, c.layers))
    return e;
  if (Error e = f.integer("vocab_size", 1, c.vocab))
    return e;
  if (Error e = f.real("rms_norm_eps", c.eps, 1e-5))
    return e;
  if (c.eps <= 0)
    return fieldError(f.path("rms_norm_eps"), "must be > 0");
  if (Error e = f.boolean("tie_word_embeddings", false, c.tie))
    return e;
  if (Error e =
          f.integer("max_position_embeddings", 1, c.maxPosition, int64_t(0)))
    return e;
  if (f.given("model_max_length")) {
    int64_t m;
    if (Error e = f.integer("model_max_length", 1, m))
      return e;
    if (!c.maxPosition)
      c.maxPosition = m;
  }
  return Error::success();
}

Error DecoderReader::readActivation() {
  std::optional<std::string> actName;
  if (Error e = f.optString("hidden_act", actName))
    return e;
  std::string act = actName.value_or("silu");
  if (act == "situ")
    c.situ = true;
  else if (act != "silu" && act != "swish")
    return fieldError(f.path("hidden_act"),
                      "'" + act + "' is not supported (silu or situ)");
  if (Error e = f.optReal("activation_situ_beta", c.situBeta))
    return e;
  if (Error e = f.optReal("activation_situ_linear_beta", c.situLinearBeta))
    return e;
  if (c.situ) {
    if (!c.situBeta)
      c.situBeta = 1.0; // HF `_get_situ_activation_params`: beta or 1.0
    if (*c.situBeta <= 0)
      return fieldError(f.path("activation_situ_beta"), "must be > 0");
    if (c.situLinearBeta && *c.situLinearBeta <= 0)
      return fieldError(f.path("activation_situ_linear_beta"), "must be > 0");
  }
  // AttnRes (0 or null: plain residual; transformers writes 0).
  std::optional<int64_t> block;
  if (Error e = f.optInteger("attn_res_block_size", 0, block))
    return e;
  c.attnResBlock = block.value_or(0);
  // Dense MLP width: transformers' dense_ffn_hidden falls back to
  // intermediate_size.
  std::optional<int64_t> inter, dense;
  if (Error e = f.optInteger("intermediate_size", 1, inter))
    return e;
  if (Error e = f.optInteger("dense_ffn_hidden", 1, dense))
    return e;
  if (inter && dense && *inter != *dense)
    return fieldError(f.path("dense_ffn_hidden"),
                      str(*dense) + " contradicts intermediate_size " +
                          str(*inter));
  c.intermediate = dense ? *dense : inter.value_or(0);
  return Error::success();
}

Error DecoderReader::readMoe() {
  std::optional<int64_t> experts, topK, shared, groups, topkGroup;
  if (Error e = f.aliasInteger(
          {"num_experts", "n_routed_experts", "num_local_experts"}, 0, experts))
    return e;
  c.experts = experts.value_or(0);
  // Each expert is a module of the checkpoint that the quantization plan
  // visits (ExpertPrecision.cpp): a bound keeps an import in seconds. The
  // largest public MoE has 896 (K3).
  if (c.experts > kMaxExperts)
    return fieldError(f.path("num_experts"), std::to_string(c.experts) +
                                                 " is more than the " +
                                                 std::to_string(kMaxExperts) +
                                                 " experts the importer takes");
  if (Error e = f.aliasInteger({"num_experts_per_token", "num_experts_per_tok"},
                               1, topK))
    return e;
  if (Error e =
          f.aliasInteger({"num_shared_experts", "n_shared_experts"}, 0, shared))
    return e;
  c.sharedExperts = shared.value_or(0);
  if (Error e = f.aliasBoolean({"moe_renormalize", "norm_topk_prob"}, true,
                               c.renormalize))
    return e;
  if (Error e = f.aliasInteger({"num_expert_group", "n_group"}, 1, groups))
    return e;
  if (Error e = f.optInteger("topk_group", 1, topkGroup))
    return e;
  bool grouped;
  if (Error e = f.boolean("use_grouped_topk", false, grouped))
    return e;
  std::optional<std::string> tm;
  if (Error e = f.optString("topk_method", tm))
    return e;
  if (tm && *tm != "noaux_tc" && *tm != "greedy")
    return fieldError(f.path("topk_method"),
                      "'" + *tm + "' is not supported (noaux_tc)");
  if (Error e = f.integer("first_k_dense_replace", 0, firstDense, int64_t(0)))
    return e;
  firstDenseGiven = f.given("first_k_dense_replace");
  if (Error e = f.integer("moe_layer_freq", 1, freq, int64_t(1)))
    return e;
  if (Error e = readMoeGroups(groups.value_or(1), topkGroup.value_or(1),
                              grouped, f.given("use_grouped_topk"), tm))
    return e;
  return readMoeChecks(topK);
}

/// Group-limited routing as Kimi's gate (KimiMoEGate) and transformers'
/// KimiLinearTopkRouter apply it: only when num_expert_group > 1 and
/// topk_group < num_expert_group (else every group is kept: the plain
/// top-k, nGroup = topkGroup = 1 in the IR). A config that says not to
/// group (use_grouped_topk false, topk_method greedy) while limiting the
/// groups is refused: vLLM would ignore the groups, the model's own gate
/// would not, and the two choose different experts.
Error DecoderReader::readMoeGroups(int64_t groups, int64_t topkGroup,
                                   bool grouped, bool groupedGiven,
                                   const std::optional<std::string> &method) {
  if (topkGroup > groups)
    return fieldError(f.path("topk_group"), str(topkGroup) +
                                                " exceeds num_expert_group " +
                                                str(groups));
  if (groups == 1 || topkGroup == groups)
    return Error::success();
  if (groupedGiven && !grouped)
    return fieldError(f.path("use_grouped_topk"),
                      "false contradicts num_expert_group " + str(groups) +
                          " with topk_group " + str(topkGroup));
  if (method && *method == "greedy")
    return fieldError(f.path("topk_method"),
                      "'greedy' (no group limit) contradicts "
                      "num_expert_group " +
                          str(groups) + " with topk_group " + str(topkGroup));
  c.nGroup = groups;
  c.topkGroup = topkGroup;
  return Error::success();
}

/// The MoE block's shape and router (after the aliases of readMoe), then
/// which layers are MoE.
Error DecoderReader::readMoeChecks(std::optional<int64_t> topK) {
  std::optional<std::vector<std::string>> mlpTypes;
  if (Error e = f.optStringList("mlp_layer_types", mlpTypes))
    return e;
  if (Error e = f.optInteger("routed_expert_hidden_size", 1, c.latent))
    return e;
  if (Error e = f.boolean("latent_moe_use_norm", false, c.latentNorm))
    return e;
  if (Error e = f.real("routed_scaling_factor", c.scaling, 1.0))
    return e;
  if (!(c.scaling > 0.0) || !std::isfinite(c.scaling))
    return fieldError(f.path("routed_scaling_factor"),
                      formatNumber(c.scaling) + " is not a positive number");
  std::optional<std::string> scoreName;
  if (Error e = f.optString("moe_router_activation_func", scoreName))
    return e;
  std::string score = scoreName.value_or("sigmoid");
  if (score == "softmax")
    c.softmaxRouter = true;
  else if (score != "sigmoid")
    return fieldError(f.path("moe_router_activation_func"),
                      "'" + score + "' is not supported (sigmoid or softmax)");
  if (c.experts > 0) {
    if (Error e = f.integer("moe_intermediate_size", 1, c.moeInter))
      return e;
    if (!topK)
      return fieldError(f.path("num_experts_per_token"),
                        "required field is missing (num_experts is set)");
    c.topK = *topK;
    if (c.topK > c.experts)
      return fieldError(f.path("num_experts_per_token"),
                        str(c.topK) + " exceeds num_experts " + str(c.experts));
    if (c.nGroup > 1) {
      std::string field = f.path("num_expert_group");
      if (c.experts % c.nGroup != 0)
        return fieldError(field, str(c.nGroup) +
                                     " does not divide num_experts " +
                                     str(c.experts));
      int64_t perGroup = c.experts / c.nGroup;
      // The gate scores a group by its two best experts (noaux_tc).
      if (perGroup < 2)
        return fieldError(field, str(c.nGroup) + " groups of " + str(perGroup) +
                                     " expert: a group needs 2 (the group "
                                     "score sums its best two)");
      if (c.topK > c.topkGroup * perGroup)
        return fieldError(f.path("num_experts_per_token"),
                          str(c.topK) + " exceeds the " +
                              str(c.topkGroup * perGroup) +
                              " experts of topk_group " + str(c.topkGroup) +
                              " groups of " + str(perGroup));
    }
    if (c.latentNorm && !c.latent)
      return fieldError(f.path("latent_moe_use_norm"),
                        "true needs routed_expert_hidden_size (the latent "
                        "width)");
  } else {
    f.ignore({"moe_intermediate_size"});
  }
  return readMlpLayerTypes(mlpTypes);
}

/// Which layers are MoE: mlp_layer_types, else first_k_dense_replace /
/// moe_layer_freq (they must agree when both are given).
Error DecoderReader::readMlpLayerTypes(
    const std::optional<std::vector<std::string>> &mlpTypes) {
  c.isMoe.assign(c.layers, false);
  if (mlpTypes) {
    std::string field = f.path("mlp_layer_types");
    if (int64_t(mlpTypes->size()) != c.layers)
      return fieldError(field, "has " + str(mlpTypes->size()) +
                                   " entries, num_hidden_layers is " +
                                   str(c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string &t = (*mlpTypes)[i];
      std::string at = field + "[" + str(i) + "]";
      if (t == "sparse")
        c.isMoe[i] = true;
      else if (t != "dense")
        return fieldError(at, "'" + t + "' is not dense or sparse");
      if (c.isMoe[i] && c.experts == 0)
        return fieldError(at, "sparse layer but num_experts is missing or 0");
      if (firstDenseGiven && c.isMoe[i] != (i >= firstDense && i % freq == 0))
        return fieldError(at, "'" + t + "' contradicts first_k_dense_replace " +
                                  str(firstDense) + " / moe_layer_freq " +
                                  str(freq));
    }
  } else {
    for (int64_t i = 0; i < c.layers; ++i)
      c.isMoe[i] = c.experts > 0 && i >= firstDense && i % freq == 0;
  }
  if (c.anyDense() && c.intermediate == 0)
    return fieldError(f.path("intermediate_size"),
                      "required field is missing (there are dense layers)");
  return Error::success();
}

/// linear_attn_config (remote code / K3): the 1-based KDA / MLA layer lists
/// and the KDA shape.
Error DecoderReader::readLinearAttnConfig() {
  const js::Value *lacV = f.get("linear_attn_config");
  if (!lacV || lacV->type == js::Type::Null)
    return Error::success();
  if (!lacV->isObject())
    return fieldError(f.path("linear_attn_config"),
                      std::string("expected an object, got ") +
                          js::typeName(lacV->type));
  Fields l(*lacV, f.path("linear_attn_config."));
  if (Error e = readKindLists(l))
    return e;
  if (Error e = l.optInteger("num_heads", 1, lacHeads))
    return e;
  if (Error e = l.optInteger("head_dim", 1, lacDim))
    return e;
  if (Error e = l.optInteger("short_conv_kernel_size", 1, lacConv))
    return e;
  if (Error e = l.optReal("gate_lower_bound", c.lowerBound))
    return e;
  if (Error e = l.boolean("use_full_rank_gate", false, c.fullRankGate))
    return e;
  l.ignore({"kv_head_dim", "kv_num_heads"});
  return l.checkUnknown();
}

/// kda_layers / full_attn_layers: both or neither; disjoint; together they
/// cover every layer.
Error DecoderReader::readKindLists(Fields &l) {
  std::optional<std::vector<int64_t>> k, fl;
  if (Error e = l.optIntList("kda_layers", k))
    return e;
  if (Error e = l.optIntList("full_attn_layers", fl))
    return e;
  if (!k && !fl)
    return Error::success();
  if (!k)
    return fieldError(l.path("kda_layers"),
                      "required field is missing (full_attn_layers is given)");
  if (!fl)
    return fieldError(l.path("full_attn_layers"),
                      "required field is missing (kda_layers is given)");
  if (Error e = checkLayerList(*k, l.path("kda_layers"), c.layers))
    return e;
  if (Error e = checkLayerList(*fl, l.path("full_attn_layers"), c.layers))
    return e;
  std::set<int64_t> all(k->begin(), k->end());
  for (int64_t x : *fl)
    if (all.count(x))
      return fieldError(l.path("full_attn_layers"),
                        "layer " + str(x) + " is also in kda_layers");
  all.insert(fl->begin(), fl->end());
  for (int64_t i = 1; i <= c.layers; ++i)
    if (!all.count(i))
      return fieldError(
          l.path("kda_layers"),
          "layer " + str(i) +
              " (1-based) is in neither kda_layers nor full_attn_layers; "
              "together they must cover num_hidden_layers " +
              str(c.layers));
  kdaL = *k;
  haveLists = true;
  return Error::success();
}

/// transformers' layer_types (must agree with the lists when both are given).
Error DecoderReader::readLayerTypes() {
  c.isKda.assign(c.layers, false);
  if (haveLists)
    for (int64_t x : kdaL)
      c.isKda[x - 1] = true;
  std::optional<std::vector<std::string>> lt;
  if (Error e = f.optStringList("layer_types", lt))
    return e;
  if (lt) {
    if (int64_t(lt->size()) != c.layers)
      return fieldError(f.path("layer_types"),
                        "has " + str(lt->size()) +
                            " entries, num_hidden_layers is " + str(c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string &t = (*lt)[i];
      std::string at = f.path("layer_types") + "[" + str(i) + "]";
      bool kda;
      if (t == "linear_attention" || t == "kda_attention" || t == "kda")
        kda = true;
      else if (t == "full_attention" || t == "mla")
        kda = false;
      else
        return fieldError(
            at, "'" + t + "' is not linear_attention or full_attention");
      if (haveLists && kda != c.isKda[i])
        return fieldError(at, "'" + t +
                                  "' contradicts linear_attn_config (layer " +
                                  str(i + 1) + " in 1-based lists)");
      c.isKda[i] = kda;
    }
    haveLists = true;
  }
  if (!haveLists)
    return fieldError(f.path("linear_attn_config"),
                      "missing: give linear_attn_config.kda_layers/"
                      "full_attn_layers or layer_types");
  return Error::success();
}

/// A KDA shape value given flat (transformers) and/or in linear_attn_config:
/// they must agree; `val` holds the linear_attn_config value (or the flat
/// names read so far) and receives the result.
Error DecoderReader::linearAlias(const std::string &what, const char *flat,
                                 std::optional<int64_t> &val) {
  std::optional<int64_t> v;
  if (Error e = f.optInteger(flat, 1, v))
    return e;
  if (v && val && *v != *val)
    return fieldError(f.path(flat), str(*v) +
                                        " contradicts the linear "
                                        "attention " +
                                        what + " " + str(*val));
  if (!val)
    val = v;
  return Error::success();
}

Error DecoderReader::readKdaShape() {
  // transformers has written these as linear_num_heads / linear_head_dim and
  // as linear_num_key_heads / linear_key_head_dim (+ value twins that must
  // agree).
  std::optional<int64_t> kh = lacHeads, kd = lacDim, kc = lacConv;
  for (const char *n :
       {"linear_num_heads", "linear_num_key_heads", "linear_num_value_heads"})
    if (Error e = linearAlias("num_heads", n, kh))
      return e;
  for (const char *n :
       {"linear_head_dim", "linear_key_head_dim", "linear_value_head_dim"})
    if (Error e = linearAlias("head_dim", n, kd))
      return e;
  if (Error e =
          linearAlias("short_conv_kernel_size", "linear_conv_kernel_dim", kc))
    return e;
  if (c.anyKda()) {
    if (!kh)
      return fieldError(f.path("linear_attn_config.num_heads"),
                        "required field is missing (there are KDA layers)");
    if (!kd)
      return fieldError(f.path("linear_attn_config.head_dim"),
                        "required field is missing (there are KDA layers)");
  }
  c.kdaHeads = kh.value_or(0);
  c.kdaDim = kd.value_or(0);
  c.convKernel = kc.value_or(4);
  // k3.short_conv keeps kernel_size - 1 tokens of state, at most 15.
  if (c.convKernel < 2 || c.convKernel > 16)
    return fieldError(f.path("linear_attn_config.short_conv_kernel_size"),
                      std::to_string(c.convKernel) + " is outside [2, 16]");
  // k3.kda's kernels hold a state column per lane: K and V up to 256.
  if (c.anyKda() && c.kdaDim > 256)
    return fieldError(f.path("linear_attn_config.head_dim"),
                      std::to_string(c.kdaDim) +
                          " is larger than the 256 k3.kda supports");
  if (c.lowerBound && (*c.lowerBound < -5.0 || *c.lowerBound >= 0.0))
    return fieldError(f.path("linear_attn_config.gate_lower_bound"),
                      formatNumber(*c.lowerBound) + " is outside [-5, 0)");
  return Error::success();
}

Error DecoderReader::readMla() {
  bool anyMla = c.anyMla();
  if (Error e = f.integer("num_attention_heads", 1, c.heads,
                          anyMla ? std::nullopt : std::optional<int64_t>(1)))
    return e;
  std::optional<int64_t> kv, qh;
  if (Error e = f.optInteger("num_key_value_heads", 1, kv))
    return e;
  if (kv && *kv != c.heads)
    return fieldError(f.path("num_key_value_heads"),
                      str(*kv) + " differs from num_attention_heads " +
                          str(c.heads) +
                          ": MLA has one key/value head per query head");
  if (anyMla) {
    for (auto [name, out, min] :
         {std::make_tuple("kv_lora_rank", &c.kvLoraRank, 1),
          std::make_tuple("qk_nope_head_dim", &c.nope, 1),
          std::make_tuple("qk_rope_head_dim", &c.rope, 0),
          std::make_tuple("v_head_dim", &c.vDim, 1)})
      if (Error e = f.integer(name, min, *out))
        return e;
    if (Error e = f.optInteger("q_lora_rank", 1, c.qLoraRank))
      return e;
  } else {
    f.ignore({"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim", "q_lora_rank"});
  }
  if (Error e = f.optInteger("qk_head_dim", 1, qh))
    return e;
  if (qh && anyMla && *qh != c.nope + c.rope)
    return fieldError(f.path("qk_head_dim"),
                      str(*qh) +
                          " differs from qk_nope_head_dim + qk_rope_head_dim "
                          "= " +
                          str(c.nope + c.rope));
  // NoPE: the "rope" part of the head is used un-rotated (K3-SPEC §3).
  bool nope = true;
  if (f.has("mla_use_nope"))
    if (Error e = f.boolean("mla_use_nope", true, nope))
      return e;
  if (!nope && anyMla && c.rope > 0)
    return fieldError(f.path("mla_use_nope"),
                      "false (rotary MLA) is not supported: Kimi models use "
                      "NoPE MLA (mla_use_nope true)");
  if (Error e = f.boolean("mla_use_output_gate", false, c.mlaGate))
    return e;
  // transformers sets head_dim = qk_rope_head_dim; it carries no information
  // here.
  f.ignore({"head_dim"});
  return Error::success();
}

/// Multi-token prediction (warned about, not imported), the allow-list of
/// fields without effect on inference, and the unknown-field check.
Error DecoderReader::readRest() {
  std::optional<int64_t> mtp;
  if (Error e = f.optInteger("num_mtp_layers", 0, mtp))
    return e;
  if (mtp && *mtp != 0)
    warnings.push_back(
        {f.path("num_mtp_layers"),
         str(*mtp) + " multi-token-prediction layers are not imported"});
  int64_t nn;
  if (Error e = f.integer("num_nextn_predict_layers", 0, nn, int64_t(0)))
    return e;
  if (nn != 0)
    warnings.push_back(
        {f.path("num_nextn_predict_layers"),
         str(nn) + " multi-token-prediction layers are not imported"});
  // Known fields that do not change the decoder's inference computation.
  // (quantization_config is read by Quantization.h.)
  f.ignore({"architectures",
            "auto_map",
            "transformers_version",
            "torch_dtype",
            "dtype",
            "rope_theta",
            "rope_scaling",
            "rope_parameters",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
            "initializer_range",
            "use_cache",
            "attention_bias",
            "attention_dropout",
            "pretraining_tp",
            "output_router_logits",
            "router_aux_loss_coef",
            "aux_loss_alpha",
            "seq_aux",
            "keys_to_ignore_at_inference",
            "media_placeholder_token_id",
            "_name_or_path",
            "use_bfloat16",
            "quantization_config",
            "is_decoder",
            "scoring_func",
            "ignore_index",
            "return_dict",
            "tie_encoder_decoder"});
  return f.checkUnknown();
}

/// The K3 (VLM) wrapper around text_config: its own fields are checked, then
/// the decoder is read from text_config.
Error readWrapper(const js::Value &root, const js::Value &tc) {
  if (!tc.isObject())
    return fieldError("text_config", std::string("expected an object, got ") +
                                         js::typeName(tc.type));
  Fields top(root, "");
  top.get("text_config");
  std::optional<std::string> mt;
  if (Error e = top.optString("model_type", mt))
    return e;
  if (mt && *mt != "kimi_k3" && *mt != "kimi_linear")
    return fieldError("model_type", "'" + *mt +
                                        "' is not kimi_k3 (a config with "
                                        "text_config)");
  // Wrapper fields that do not affect the text decoder.
  top.ignore({"architectures",
              "auto_map",
              "transformers_version",
              "torch_dtype",
              "dtype",
              "vision_config",
              "media_placeholder_token_id",
              "bos_token_id",
              "eos_token_id",
              "pad_token_id",
              "ignore_index",
              "use_cache",
              "tie_word_embeddings",
              "quantization_config",
              "image_token_id",
              "video_token_id",
              "vocab_size",
              "projector_config",
              "mm_projector_type",
              "_name_or_path",
              "initializer_range"});
  return top.checkUnknown();
}

bool givenIn(const js::Value &obj, const char *key) {
  const js::Value *v = obj.get(key);
  return v && v->type != js::Type::Null;
}

} // namespace

llvm::Expected<ParsedConfig> parseConfig(const js::Value &root,
                                         Warnings &warnings) {
  ParsedConfig out;
  const js::Value *tc = root.get("text_config");
  bool wrapped = tc && tc->type != js::Type::Null;
  if (wrapped)
    if (Error e = readWrapper(root, *tc))
      return std::move(e);
  DecoderReader reader(wrapped ? *tc : root, wrapped ? "text_config." : "",
                       warnings);
  if (Error e = reader.read())
    return std::move(e);
  out.decoder = std::move(reader.c);
  // A K3 config keeps quantization_config at the top level; accept it inside
  // text_config as well.
  if (givenIn(root, "quantization_config")) {
    out.quantization = root.get("quantization_config");
    out.quantizationPath = "quantization_config";
  } else if (wrapped && givenIn(*tc, "quantization_config")) {
    out.quantization = tc->get("quantization_config");
    out.quantizationPath = "text_config.quantization_config";
  }
  return out;
}

} // namespace k3import

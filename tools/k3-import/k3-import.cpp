//===- k3-import.cpp - Hugging Face config.json to K3 IR --------*- C++ -*-===//
//
// k3-import config.json -o model.mlir [--max-context N] [--name NAME]
//
// Reads a Kimi K3 (`kimi_k3`, decoder fields under `text_config`) or Kimi
// Linear (`kimi_linear`, remote-code or transformers-native field names)
// config.json and emits the model in the style of examples/tiny_k3.mlir:
// `@forward`, one private template per layer kind, one `k3.layer` per layer,
// relative weight names inside templates, routed experts as one stacked
// `experts.{expert}.*` weight. See docs/import.md.
//
// Every config problem is one line `<config>: <field>: <what>` on stderr and
// exit code 1.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "k3/json.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::k3;
namespace js = ::k3::json;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

static std::string gConfigName = "config.json";

[[noreturn]] static void fail(const std::string &field,
                              const std::string &what) {
  llvm::errs() << gConfigName << ": " << field << ": " << what << "\n";
  std::exit(1);
}

static void warn(const std::string &field, const std::string &what) {
  llvm::errs() << gConfigName << ": " << field << ": warning: " << what << "\n";
}

static std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

//===----------------------------------------------------------------------===//
// Strict field access: every key of an object must be read or allow-listed.
//===----------------------------------------------------------------------===//

class Fields {
public:
  Fields(const js::Value &obj, std::string prefix)
      : obj_(obj), prefix_(std::move(prefix)) {}

  std::string path(const std::string &k) const { return prefix_ + k; }
  bool has(const std::string &k) {
    used_.insert(k);
    return obj_.get(k) != nullptr;
  }
  // Present and not null.
  bool given(const std::string &k) {
    const js::Value *v = get(k);
    return v && v->type != js::Type::Null;
  }
  const js::Value *get(const std::string &k) {
    used_.insert(k);
    return obj_.get(k);
  }
  void ignore(std::initializer_list<const char *> ks) {
    for (auto *k : ks)
      used_.insert(k);
  }

  int64_t integer(const std::string &k, int64_t min,
                  std::optional<int64_t> def = std::nullopt) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null) {
      if (def)
        return *def;
      fail(path(k), v ? "must not be null" : "required field is missing");
    }
    return asInt(*v, path(k), min);
  }
  std::optional<int64_t> optInteger(const std::string &k, int64_t min) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return std::nullopt;
    return asInt(*v, path(k), min);
  }
  double real(const std::string &k, std::optional<double> def = std::nullopt) {
    auto r = optReal(k);
    if (r)
      return *r;
    if (def)
      return *def;
    fail(path(k),
         obj_.get(k) ? "must not be null" : "required field is missing");
  }
  std::optional<double> optReal(const std::string &k) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return std::nullopt;
    if (v->type != js::Type::Number)
      fail(path(k),
           std::string("expected a number, got ") + js::typeName(v->type));
    if (!std::isfinite(v->number))
      fail(path(k), "must be finite");
    return v->number;
  }
  bool boolean(const std::string &k, bool def) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return def;
    if (v->type != js::Type::Bool)
      fail(path(k),
           std::string("expected true or false, got ") + js::typeName(v->type));
    return v->boolean;
  }
  std::optional<std::string> optString(const std::string &k) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return std::nullopt;
    if (v->type != js::Type::String)
      fail(path(k),
           std::string("expected a string, got ") + js::typeName(v->type));
    return v->str;
  }
  std::optional<std::vector<int64_t>> optIntList(const std::string &k) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return std::nullopt;
    if (v->type != js::Type::Array)
      fail(path(k), std::string("expected a list of integers, got ") +
                        js::typeName(v->type));
    std::vector<int64_t> out;
    for (size_t i = 0; i < v->array.size(); ++i)
      out.push_back(asInt(v->array[i], path(k) + "[" + std::to_string(i) + "]",
                          INT64_MIN));
    return out;
  }
  std::optional<std::vector<std::string>> optStringList(const std::string &k) {
    const js::Value *v = get(k);
    if (!v || v->type == js::Type::Null)
      return std::nullopt;
    if (v->type != js::Type::Array)
      fail(path(k), std::string("expected a list of strings, got ") +
                        js::typeName(v->type));
    std::vector<std::string> out;
    for (size_t i = 0; i < v->array.size(); ++i) {
      if (v->array[i].type != js::Type::String)
        fail(path(k) + "[" + std::to_string(i) + "]",
             std::string("expected a string, got ") +
                 js::typeName(v->array[i].type));
      out.push_back(v->array[i].str);
    }
    return out;
  }
  // Every key not read and not allow-listed is an error naming it.
  void checkUnknown() const {
    for (auto &kv : obj_.object)
      if (!used_.count(kv.first))
        fail(path(kv.first), "unknown field (not a Kimi K3 / Kimi Linear "
                             "config field this importer knows)");
  }

private:
  static int64_t asInt(const js::Value &v, const std::string &p, int64_t min) {
    if (v.type != js::Type::Number)
      fail(p, std::string("expected an integer, got ") + js::typeName(v.type));
    int64_t i;
    if (v.isInt)
      i = v.integer;
    else if (std::floor(v.number) == v.number && std::fabs(v.number) < 9e15)
      i = int64_t(v.number);
    else
      fail(p, "expected an integer, got " + num(v.number));
    if (i < min)
      fail(p,
           "must be >= " + std::to_string(min) + ", got " + std::to_string(i));
    return i;
  }
  const js::Value &obj_;
  std::string prefix_;
  std::set<std::string> used_;
};

//===----------------------------------------------------------------------===//
// The decoder configuration (field meanings: K3-SPEC.md §1, docs/import.md)
//===----------------------------------------------------------------------===//

struct Config {
  std::string family; // "kimi_k3" or "kimi_linear" (informational)
  int64_t hidden = 0, layers = 0, vocab = 0;
  double eps = 1e-5;
  bool tie = false;
  bool situ = false; // else SiLU
  std::optional<double> situBeta, situLinearBeta;
  int64_t attnResBlock = 0; // 0: plain residual
  int64_t intermediate = 0;
  // MoE
  int64_t experts = 0, topK = 0, sharedExperts = 0, moeInter = 0;
  std::optional<int64_t> latent; // routed_expert_hidden_size
  bool latentNorm = false;
  double scaling = 1.0;
  bool softmaxRouter = false;
  bool renormalize = true;
  std::vector<bool> isMoe, isKda;
  // MLA
  int64_t heads = 0, kvLoraRank = 0, nope = 0, rope = 0, vDim = 0;
  std::optional<int64_t> qLoraRank;
  bool mlaGate = false;
  // KDA
  int64_t kdaHeads = 0, kdaDim = 0, convKernel = 4;
  std::optional<double> lowerBound;
  bool fullRankGate = false;
  int64_t maxPosition = 0;
};

static void checkLayerList(const std::vector<int64_t> &l,
                           const std::string &field, int64_t n) {
  std::set<int64_t> seen;
  for (int64_t x : l) {
    if (x < 1 || x > n)
      fail(field, "layer " + std::to_string(x) +
                      " is out of range: the lists are 1-based, 1.." +
                      std::to_string(n) + " (num_hidden_layers)");
    if (!seen.insert(x).second)
      fail(field, "layer " + std::to_string(x) + " is listed twice");
  }
}

static Config parseDecoder(const js::Value &root, const std::string &prefix,
                           bool wrapped) {
  Fields f(root, prefix);
  Config c;
  auto mt = f.optString("model_type");
  if (mt && *mt != "kimi_linear" && *mt != "kimi_k3" && *mt != "kimi_k3_text")
    fail(f.path("model_type"),
         "'" + *mt +
             "' is not a Kimi Linear / Kimi K3 decoder (expected kimi_linear)");
  c.hidden = f.integer("hidden_size", 1);
  c.layers = f.integer("num_hidden_layers", 1);
  c.vocab = f.integer("vocab_size", 1);
  c.eps = f.real("rms_norm_eps", 1e-5);
  if (c.eps <= 0)
    fail(f.path("rms_norm_eps"), "must be > 0");
  c.tie = f.boolean("tie_word_embeddings", false);
  c.maxPosition = f.integer("max_position_embeddings", 1, int64_t(0));
  if (f.given("model_max_length")) {
    int64_t m = f.integer("model_max_length", 1);
    if (!c.maxPosition)
      c.maxPosition = m;
  }

  // Activation.
  std::string act = f.optString("hidden_act").value_or("silu");
  if (act == "situ")
    c.situ = true;
  else if (act != "silu" && act != "swish")
    fail(f.path("hidden_act"), "'" + act + "' is not supported (silu or situ)");
  c.situBeta = f.optReal("activation_situ_beta");
  c.situLinearBeta = f.optReal("activation_situ_linear_beta");
  if (c.situ) {
    if (!c.situBeta)
      c.situBeta = 1.0; // HF `_get_situ_activation_params`: beta or 1.0
    if (*c.situBeta <= 0)
      fail(f.path("activation_situ_beta"), "must be > 0");
    if (c.situLinearBeta && *c.situLinearBeta <= 0)
      fail(f.path("activation_situ_linear_beta"), "must be > 0");
  }

  // AttnRes (0 or null: plain residual; transformers writes 0).
  c.attnResBlock = f.optInteger("attn_res_block_size", 0).value_or(0);

  // Dense MLP width: transformers' dense_ffn_hidden falls back to
  // intermediate_size.
  auto inter = f.optInteger("intermediate_size", 1);
  auto dense = f.optInteger("dense_ffn_hidden", 1);
  if (inter && dense && *inter != *dense)
    fail(f.path("dense_ffn_hidden"), std::to_string(*dense) +
                                         " contradicts intermediate_size " +
                                         std::to_string(*inter));
  c.intermediate = dense ? *dense : inter.value_or(0);

  // Aliases: a value may be given under several names; they must agree.
  auto aliasInt = [&](std::initializer_list<const char *> names, int64_t min) {
    std::optional<int64_t> v;
    std::string first;
    for (auto *n : names) {
      auto x = f.optInteger(n, min);
      if (!x)
        continue;
      if (v && *v != *x)
        fail(f.path(n), std::to_string(*x) + " contradicts " + first + " " +
                            std::to_string(*v));
      if (!v)
        first = n;
      v = x;
    }
    return v;
  };
  auto aliasBool = [&](std::initializer_list<const char *> names, bool def) {
    std::optional<bool> v;
    std::string first;
    for (auto *n : names) {
      if (!f.given(n))
        continue;
      bool x = f.boolean(n, def);
      if (v && *v != x)
        fail(f.path(n),
             std::string(x ? "true" : "false") + " contradicts " + first);
      if (!v)
        first = n;
      v = x;
    }
    return v.value_or(def);
  };

  // MoE.
  c.experts =
      aliasInt({"num_experts", "n_routed_experts", "num_local_experts"}, 0)
          .value_or(0);
  auto topK = aliasInt({"num_experts_per_token", "num_experts_per_tok"}, 1);
  c.sharedExperts =
      aliasInt({"num_shared_experts", "n_shared_experts"}, 0).value_or(0);
  c.renormalize = aliasBool({"moe_renormalize", "norm_topk_prob"}, true);
  int64_t groups = aliasInt({"num_expert_group", "n_group"}, 1).value_or(1);
  int64_t topkGroup = f.optInteger("topk_group", 1).value_or(1);
  f.boolean("use_grouped_topk", false);
  if (auto tm = f.optString("topk_method");
      tm && *tm != "noaux_tc" && *tm != "greedy")
    fail(f.path("topk_method"), "'" + *tm + "' is not supported (noaux_tc)");
  int64_t firstDense = f.integer("first_k_dense_replace", 0, int64_t(0));
  bool firstDenseGiven = f.given("first_k_dense_replace");
  int64_t freq = f.integer("moe_layer_freq", 1, int64_t(1));
  auto mlpTypes = f.optStringList("mlp_layer_types");
  c.latent = f.optInteger("routed_expert_hidden_size", 1);
  c.latentNorm = f.boolean("latent_moe_use_norm", false);
  c.scaling = f.real("routed_scaling_factor", 1.0);
  std::string score =
      f.optString("moe_router_activation_func").value_or("sigmoid");
  if (score == "softmax")
    c.softmaxRouter = true;
  else if (score != "sigmoid")
    fail(f.path("moe_router_activation_func"),
         "'" + score + "' is not supported (sigmoid or softmax)");
  if (c.experts > 0) {
    c.moeInter = f.integer("moe_intermediate_size", 1);
    if (!topK)
      fail(f.path("num_experts_per_token"),
           "required field is missing (num_experts is set)");
    c.topK = *topK;
    if (c.topK > c.experts)
      fail(f.path("num_experts_per_token"), std::to_string(c.topK) +
                                                " exceeds num_experts " +
                                                std::to_string(c.experts));
    if (groups > 1 && topkGroup < groups)
      fail(f.path("num_expert_group"),
           std::to_string(groups) + " groups with topk_group " +
               std::to_string(topkGroup) +
               ": group-limited routing is not supported");
    if (c.latentNorm && !c.latent)
      fail(f.path("latent_moe_use_norm"),
           "true needs routed_expert_hidden_size (the latent width)");
  } else {
    f.ignore({"moe_intermediate_size"});
  }
  c.isMoe.assign(c.layers, false);
  if (mlpTypes) {
    if (int64_t(mlpTypes->size()) != c.layers)
      fail(f.path("mlp_layer_types"),
           "has " + std::to_string(mlpTypes->size()) +
               " entries, num_hidden_layers is " + std::to_string(c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string &t = (*mlpTypes)[i];
      if (t == "sparse")
        c.isMoe[i] = true;
      else if (t != "dense")
        fail(f.path("mlp_layer_types") + "[" + std::to_string(i) + "]",
             "'" + t + "' is not dense or sparse");
      if (c.isMoe[i] && c.experts == 0)
        fail(f.path("mlp_layer_types") + "[" + std::to_string(i) + "]",
             "sparse layer but num_experts is missing or 0");
      if (firstDenseGiven && c.isMoe[i] != (i >= firstDense && i % freq == 0))
        fail(f.path("mlp_layer_types") + "[" + std::to_string(i) + "]",
             "'" + t + "' contradicts first_k_dense_replace " +
                 std::to_string(firstDense) + " / moe_layer_freq " +
                 std::to_string(freq));
    }
  } else {
    for (int64_t i = 0; i < c.layers; ++i)
      c.isMoe[i] = c.experts > 0 && i >= firstDense && i % freq == 0;
  }
  bool anyDense = false;
  for (bool m : c.isMoe)
    anyDense |= !m;
  if (anyDense && c.intermediate == 0)
    fail(f.path("intermediate_size"),
         "required field is missing (there are dense layers)");

  // MLA.
  bool anyMla = false;
  // Layer kinds: linear_attn_config (remote code / K3), or transformers'
  // layer_types.
  std::vector<int64_t> kdaL, fullL;
  bool haveLists = false;
  std::optional<int64_t> lacHeads, lacDim, lacConv;
  if (const js::Value *lacV = f.get("linear_attn_config");
      lacV && lacV->type != js::Type::Null) {
    if (!lacV->isObject())
      fail(f.path("linear_attn_config"),
           std::string("expected an object, got ") + js::typeName(lacV->type));
    Fields l(*lacV, f.path("linear_attn_config."));
    auto k = l.optIntList("kda_layers");
    auto fl = l.optIntList("full_attn_layers");
    if (k || fl) {
      if (!k)
        fail(l.path("kda_layers"),
             "required field is missing (full_attn_layers is given)");
      if (!fl)
        fail(l.path("full_attn_layers"),
             "required field is missing (kda_layers is given)");
      checkLayerList(*k, l.path("kda_layers"), c.layers);
      checkLayerList(*fl, l.path("full_attn_layers"), c.layers);
      std::set<int64_t> ks(k->begin(), k->end());
      for (int64_t x : *fl)
        if (ks.count(x))
          fail(l.path("full_attn_layers"),
               "layer " + std::to_string(x) + " is also in kda_layers");
      if (int64_t(k->size() + fl->size()) != c.layers) {
        std::set<int64_t> all(ks);
        all.insert(fl->begin(), fl->end());
        for (int64_t i = 1; i <= c.layers; ++i)
          if (!all.count(i))
            fail(
                l.path("kda_layers"),
                "layer " + std::to_string(i) +
                    " (1-based) is in neither kda_layers nor full_attn_layers; "
                    "together they must cover num_hidden_layers " +
                    std::to_string(c.layers));
      }
      kdaL = *k;
      fullL = *fl;
      haveLists = true;
    }
    lacHeads = l.optInteger("num_heads", 1);
    lacDim = l.optInteger("head_dim", 1);
    lacConv = l.optInteger("short_conv_kernel_size", 1);
    c.lowerBound = l.optReal("gate_lower_bound");
    c.fullRankGate = l.boolean("use_full_rank_gate", false);
    l.ignore({"kv_head_dim", "kv_num_heads"});
    l.checkUnknown();
  }
  c.isKda.assign(c.layers, false);
  if (haveLists)
    for (int64_t x : kdaL)
      c.isKda[x - 1] = true;
  if (auto lt = f.optStringList("layer_types")) {
    if (int64_t(lt->size()) != c.layers)
      fail(f.path("layer_types"), "has " + std::to_string(lt->size()) +
                                      " entries, num_hidden_layers is " +
                                      std::to_string(c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string &t = (*lt)[i];
      bool kda;
      if (t == "linear_attention" || t == "kda_attention" || t == "kda")
        kda = true;
      else if (t == "full_attention" || t == "mla")
        kda = false;
      else
        fail(f.path("layer_types") + "[" + std::to_string(i) + "]",
             "'" + t + "' is not linear_attention or full_attention");
      if (haveLists && kda != c.isKda[i])
        fail(f.path("layer_types") + "[" + std::to_string(i) + "]",
             "'" + t + "' contradicts linear_attn_config (layer " +
                 std::to_string(i + 1) + " in 1-based lists)");
      c.isKda[i] = kda;
    }
    haveLists = true;
  }
  if (!haveLists)
    fail(f.path("linear_attn_config"),
         "missing: give linear_attn_config.kda_layers/full_attn_layers or "
         "layer_types");
  for (bool k : c.isKda)
    anyMla |= !k;

  auto heads = [&](const std::string &what, const char *flat,
                   std::optional<int64_t> lacVal) {
    std::string lacName = "the linear attention " + what;
    auto v = f.optInteger(flat, 1);
    if (v && lacVal && *v != *lacVal)
      fail(f.path(flat), std::to_string(*v) + " contradicts " + lacName + " " +
                             std::to_string(*lacVal));
    return lacVal ? lacVal : v;
  };
  // transformers has written these as linear_num_heads / linear_head_dim and as
  // linear_num_key_heads / linear_key_head_dim (+ value twins that must agree).
  auto kh = heads("num_heads", "linear_num_heads", lacHeads);
  kh = heads("num_heads", "linear_num_key_heads", kh);
  kh = heads("num_heads", "linear_num_value_heads", kh);
  auto kd = heads("head_dim", "linear_head_dim", lacDim);
  kd = heads("head_dim", "linear_key_head_dim", kd);
  kd = heads("head_dim", "linear_value_head_dim", kd);
  auto kc = heads("short_conv_kernel_size", "linear_conv_kernel_dim", lacConv);
  bool anyKda = false;
  for (bool k : c.isKda)
    anyKda |= k;
  if (anyKda) {
    if (!kh)
      fail(f.path("linear_attn_config.num_heads"),
           "required field is missing (there are KDA layers)");
    if (!kd)
      fail(f.path("linear_attn_config.head_dim"),
           "required field is missing (there are KDA layers)");
  }
  c.kdaHeads = kh.value_or(0);
  c.kdaDim = kd.value_or(0);
  c.convKernel = kc.value_or(4);
  if (c.convKernel < 2)
    fail(f.path("linear_attn_config.short_conv_kernel_size"), "must be >= 2");
  if (c.lowerBound && (*c.lowerBound < -5.0 || *c.lowerBound >= 0.0))
    fail(f.path("linear_attn_config.gate_lower_bound"),
         num(*c.lowerBound) + " is outside [-5, 0)");

  c.heads = f.integer("num_attention_heads", 1,
                      anyMla ? std::nullopt : std::optional<int64_t>(1));
  if (auto kv = f.optInteger("num_key_value_heads", 1); kv && *kv != c.heads)
    fail(f.path("num_key_value_heads"),
         std::to_string(*kv) + " differs from num_attention_heads " +
             std::to_string(c.heads) +
             ": MLA has one key/value head per query head");
  if (anyMla) {
    c.kvLoraRank = f.integer("kv_lora_rank", 1);
    c.nope = f.integer("qk_nope_head_dim", 1);
    c.rope = f.integer("qk_rope_head_dim", 0);
    c.vDim = f.integer("v_head_dim", 1);
    c.qLoraRank = f.optInteger("q_lora_rank", 1);
  } else {
    f.ignore({"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim", "q_lora_rank"});
  }
  if (auto qh = f.optInteger("qk_head_dim", 1);
      qh && anyMla && *qh != c.nope + c.rope)
    fail(f.path("qk_head_dim"),
         std::to_string(*qh) +
             " differs from qk_nope_head_dim + qk_rope_head_dim = " +
             std::to_string(c.nope + c.rope));
  // NoPE: the "rope" part of the head is used un-rotated (K3-SPEC §3).
  if (f.has("mla_use_nope") && !f.boolean("mla_use_nope", true) && anyMla &&
      c.rope > 0)
    fail(f.path("mla_use_nope"), "false (rotary MLA) is not supported: Kimi "
                                 "models use NoPE MLA (mla_use_nope true)");
  c.mlaGate = f.boolean("mla_use_output_gate", false);
  // transformers sets head_dim = qk_rope_head_dim; it carries no information
  // here.
  f.ignore({"head_dim"});

  if (auto mtp = f.optInteger("num_mtp_layers", 0); mtp && *mtp != 0)
    warn(f.path("num_mtp_layers"),
         std::to_string(*mtp) +
             " multi-token-prediction layers are not imported");
  if (int64_t nn = f.integer("num_nextn_predict_layers", 0, int64_t(0));
      nn != 0)
    warn(f.path("num_nextn_predict_layers"),
         std::to_string(nn) +
             " multi-token-prediction layers are not imported");

  if (!wrapped && f.given("quantization_config")) {
    // handled by the caller (warning); just mark it read.
  }
  // Known fields that do not change the decoder's inference computation.
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
  f.checkUnknown();
  return c;
}

//===----------------------------------------------------------------------===//
// IR emission
//===----------------------------------------------------------------------===//

static constexpr int64_t kDyn = ShapedType::kDynamic;

class Emitter {
public:
  /// `f32Weights`: the weights the checkpoint keeps in bf16 are f32 instead
  /// (an f32 checkpoint, e.g. a model saved by transformers in float32).
  /// `bf16KdaOperands`: the short convolutions store q, k, v in bf16 (as
  /// the reference implementations hand them to their KDA kernels), which
  /// lets the CUDA pipeline run KDA on the tensor cores (k3-kda-mma-split).
  Emitter(MLIRContext &ctx, const Config &c, ModuleOp m, bool f32Weights,
          bool bf16KdaOperands)
      : ctx_(ctx), c_(c), m_(m), b_(&ctx), loc_(UnknownLoc::get(&ctx)) {
    f32_ = b_.getF32Type();
    bf16_ = f32Weights ? f32_ : b_.getBF16Type();
    i32_ = b_.getI32Type();
    kdaOperand_ = bf16KdaOperands ? b_.getBF16Type() : f32_;
  }

  void emit(int64_t maxContext);

private:
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
  Value gluMlp(Value x, StringRef prefix, int64_t inter) {
    int64_t D = c_.hidden;
    Value g = weight((prefix + "gate_proj.weight").str(), {inter, D});
    Value u = weight((prefix + "up_proj.weight").str(), {inter, D});
    Value d = weight((prefix + "down_proj.weight").str(), {D, inter});
    return GLUMLPOp::create(b_, loc_, act(D), x, g, u, d,
                            GLUActivationAttr::get(&ctx_, glu()), beta(),
                            linearBeta());
  }

  func::FuncOp startFunc(StringRef name, TypeRange ins, TypeRange outs) {
    auto fn =
        func::FuncOp::create(loc_, name, FunctionType::get(&ctx_, ins, outs));
    fn.setPrivate();
    m_.push_back(fn);
    b_.setInsertionPointToStart(fn.addEntryBlock());
    return fn;
  }

  void emitKdaMixer();
  void emitMlaMixer(int64_t maxContext);
  void emitMoe();
  std::string emitLayer(bool kda, bool moe, bool open);

  MLIRContext &ctx_;
  const Config &c_;
  ModuleOp m_;
  OpBuilder b_;
  Location loc_;
  Type f32_, bf16_, i32_, kdaOperand_;
  std::string moeName_;
};

void Emitter::emitKdaMixer() {
  int64_t D = c_.hidden, H = c_.kdaHeads, d = c_.kdaDim, P = H * d,
          K = c_.convKernel;
  auto fn = startFunc("kda_mixer", {act(D), t({kDyn}, i32_)}, {act(D)});
  Value x = fn.getArgument(0), cu = fn.getArgument(1);
  Value T = tokens(x);
  Value wq = weight("q_proj.weight", {P, D}),
        wk = weight("k_proj.weight", {P, D}),
        wv = weight("v_proj.weight", {P, D});
  Value cq = weight("q_conv1d.weight", {P, 1, K}, true),
        ck = weight("k_conv1d.weight", {P, 1, K}, true),
        cv = weight("v_conv1d.weight", {P, 1, K}, true);
  Value wfa = weight("f_a_proj.weight", {d, D}),
        wfb = weight("f_b_proj.weight", {P, d});
  int64_t alogLen =
      c_.lowerBound ? std::max(H, d) : H; // K3 pads A_log to 128 (K3-SPEC §2)
  Value alog = weight("A_log", {alogLen}, true);
  Value dtb = weight("dt_bias", {P}, true);
  Value wb = weight("b_proj.weight", {H, D});
  Value wg, wga, wgb;
  if (c_.fullRankGate)
    wg = weight("g_proj.weight", {P, D});
  else {
    wga = weight("g_a_proj.weight", {d, D});
    wgb = weight("g_b_proj.weight", {P, d});
  }
  Value onw = weight("o_norm.weight", {d}, true);
  Value wo = weight("o_proj.weight", {D, P});

  auto stTy = t({kDyn, P, K - 1}, f32_);
  Value outs[3];
  const char *names[3] = {"q", "k", "v"};
  Value ws[3] = {wq, wk, wv}, cs[3] = {cq, ck, cv};
  Value pre[3];
  for (int i = 0; i < 3; ++i)
    pre[i] = linear(x, ws[i]);
  Value st[3];
  for (int i = 0; i < 3; ++i)
    st[i] = StateReadOp::create(
        b_, loc_, stTy,
        b_.getStringAttr(std::string(names[i]) + "_conv_state"));
  Value nst[3];
  for (int i = 0; i < 3; ++i) {
    auto op =
        ShortConvOp::create(b_, loc_, t({kDyn, P}, kdaOperand_), stTy, pre[i],
                            cs[i], st[i], cu, b_.getI64IntegerAttr(K));
    outs[i] = op.getResult();
    nst[i] = op.getFinalState();
  }
  for (int i = 0; i < 3; ++i)
    StateWriteOp::create(
        b_, loc_, b_.getStringAttr(std::string(names[i]) + "_conv_state"),
        nst[i]);

  OpFoldResult Tf = T, Hf = b_.getIndexAttr(H), df = b_.getIndexAttr(d),
               one = b_.getIndexAttr(1);
  Value fa_ = linear(x, wfa);
  Value fz = linear(fa_, wfb);
  auto thd = t({kDyn, H, d}, f32_);
  Value z = expand(fz, thd, {{0}, {1, 2}}, {Tf, Hf, df});
  Value g = KDAGateOp::create(
      b_, loc_, thd, z, alog, dtb,
      DecayGateKindAttr::get(&ctx_, c_.lowerBound
                                        ? DecayGateKind::lower_bounded_sigmoid
                                        : DecayGateKind::neg_softplus),
      c_.lowerBound ? fa(*c_.lowerBound) : FloatAttr());
  Value beta_ = linear(x, wb);

  auto q4t = t({1, kDyn, H, d}, f32_), qkv4t = t({1, kDyn, H, d}, kdaOperand_);
  Value q = expand(outs[0], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
  Value k = expand(outs[1], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
  Value v = expand(outs[2], qkv4t, {{0, 1}, {2, 3}}, {one, Tf, Hf, df});
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

  Value o3 = collapse(kda.getOutput(), {{0, 1}, {2}, {3}});
  Value zg = c_.fullRankGate ? linear(x, wg) : linear(linear(x, wga), wgb);
  Value zg3 = expand(zg, thd, {{0}, {1, 2}}, {Tf, Hf, df});
  Value on = GatedRMSNormOp::create(b_, loc_, thd, o3, zg3, onw, fa(c_.eps));
  Value o2 = collapse(on, {{0}, {1, 2}});
  Value y = linear(o2, wo);
  func::ReturnOp::create(b_, loc_, y);
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

  Value ckv = linear(x, wkva);
  Value latent;
  {
    auto i0 = b_.getIndexAttr(0), i1 = b_.getIndexAttr(1);
    Value cc = tensor::ExtractSliceOp::create(
        b_, loc_, act(R), ckv, ArrayRef<OpFoldResult>{i0, i0},
        ArrayRef<OpFoldResult>{Tf, b_.getIndexAttr(R)},
        ArrayRef<OpFoldResult>{i1, i1});
    Value cn = rmsNorm(cc, kvan, 1e-6);
    if (Dr > 0) {
      Value kpe = tensor::ExtractSliceOp::create(
          b_, loc_, act(Dr), ckv,
          ArrayRef<OpFoldResult>{i0, b_.getIndexAttr(R)},
          ArrayRef<OpFoldResult>{Tf, b_.getIndexAttr(Dr)},
          ArrayRef<OpFoldResult>{i1, i1});
      latent = tensor::ConcatOp::create(b_, loc_, act(R + Dr), 1,
                                        ValueRange{cn, kpe});
    } else {
      latent = cn;
    }
  }
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

void Emitter::emitMoe() {
  int64_t D = c_.hidden, E = c_.experts, k = c_.topK, I = c_.moeInter;
  int64_t Dm = c_.latent.value_or(D);
  moeName_ = c_.latent ? "latent_moe" : "moe";
  auto fn = startFunc(moeName_, {act(D)}, {act(D)});
  Value x = fn.getArgument(0);
  Value wr = weight("gate.weight", {E, D});
  Value bias = weight("gate.e_score_correction_bias", {E}, true);
  auto router = MoERouterOp::create(
      b_, loc_, t({kDyn, k}, i32_), t({kDyn, k}, f32_), x, wr, bias,
      b_.getI64IntegerAttr(k),
      RouterScoreAttr::get(&ctx_, c_.softmaxRouter ? RouterScore::softmax
                                                   : RouterScore::sigmoid),
      c_.renormalize && k > 1 ? b_.getUnitAttr() : UnitAttr(), fa(c_.scaling));
  Value wdown, rnorm, wup;
  if (c_.latent) {
    wdown = weight("routed_expert_down_proj.weight", {Dm, D});
    if (c_.latentNorm)
      rnorm = weight("routed_expert_norm.weight", {Dm});
    wup = weight("routed_expert_up_proj.weight", {D, Dm});
  }
  Value w1 = weight("experts.{expert}.w1.weight", {E, I, Dm});
  Value w3 = weight("experts.{expert}.w3.weight", {E, I, Dm});
  Value w2 = weight("experts.{expert}.w2.weight", {E, Dm, I});
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

std::string Emitter::emitLayer(bool kda, bool moe, bool open) {
  std::string name = std::string(kda ? "kda" : "mla") +
                     (moe ? "_moe" : "_dense") + "_layer" +
                     (open ? "_open" : "");
  int64_t D = c_.hidden;
  bool ar = c_.attnResBlock > 0;
  auto idx = t({kDyn}, i32_);
  auto bTy = t({kDyn, kDyn, D}, f32_);
  SmallVector<Type> ins{act(D)}, outs{act(D)};
  if (ar) {
    ins.push_back(bTy);
    outs.push_back(bTy);
  }
  ins.push_back(idx);
  ins.push_back(idx);
  auto fn = startFunc(name, ins, outs);
  Value p = fn.getArgument(0);
  Value bl = ar ? fn.getArgument(1) : Value();
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
  Value b1 = bl;
  if (ar && open)
    b1 = AttnResPushOp::create(b_, loc_, bTy, bl, p);
  Value xn = rmsNorm(x, inl, c_.eps);
  Value a;
  if (kda)
    a = LayerOp::create(b_, loc_, TypeRange{act(D)}, "kda_mixer", "self_attn.",
                        ValueRange{xn, cu})
            .getResult(0);
  else
    a = LayerOp::create(b_, loc_, TypeRange{act(D)}, "mla_mixer", "self_attn.",
                        ValueRange{xn, cu, ctx})
            .getResult(0);
  // P after the mixer: a fresh block starts from the mixer output.
  Value p1 = (ar && open) ? a : add(p, a);
  Value y = ar ? Value(AttnResMixOp::create(b_, loc_, act(D), b1, p1, mrn, mrp,
                                            fa(c_.eps)))
               : p1;
  Value yn = rmsNorm(y, pal, c_.eps);
  Value m = moe ? LayerOp::create(b_, loc_, TypeRange{act(D)}, moeName_,
                                  "block_sparse_moe.", ValueRange{yn})
                      .getResult(0)
                : gluMlp(yn, "mlp.", c_.intermediate);
  Value p2 = add(p1, m);
  SmallVector<Value> rets{p2};
  if (ar)
    rets.push_back(b1);
  func::ReturnOp::create(b_, loc_, rets);
  return name;
}

void Emitter::emit(int64_t L) {
  int64_t D = c_.hidden, V = c_.vocab;
  bool ar = c_.attnResBlock > 0;
  auto idx = t({kDyn}, i32_);
  // @forward first, then the templates (as in examples/tiny_k3.mlir).
  auto fwd = func::FuncOp::create(
      loc_, "forward",
      FunctionType::get(&ctx_, {idx, idx, idx}, {act(V), idx}));
  m_.push_back(fwd);
  const char *argNames[3] = {"token_ids", "cu_seqlens", "context_lens"};
  for (unsigned i = 0; i < 3; ++i)
    fwd.setArgAttr(i, "k3.name", b_.getStringAttr(argNames[i]));
  fwd.setResultAttr(0, "k3.name", b_.getStringAttr("logits"));
  fwd.setResultAttr(1, "k3.name", b_.getStringAttr("next_tokens"));

  // Templates.
  std::map<std::tuple<bool, bool, bool>, std::string> kinds;
  std::vector<std::string> layerFn(c_.layers);
  bool anyKda = false, anyMla = false, anyMoe = false;
  for (int64_t i = 0; i < c_.layers; ++i) {
    anyKda |= c_.isKda[i];
    anyMla |= !c_.isKda[i];
    anyMoe |= bool(c_.isMoe[i]);
  }
  if (anyMoe)
    moeName_ = c_.latent ? "latent_moe" : "moe";
  for (int64_t i = 0; i < c_.layers; ++i) {
    bool open = ar && i % c_.attnResBlock == 0;
    auto key = std::make_tuple(bool(c_.isKda[i]), bool(c_.isMoe[i]), open);
    auto it = kinds.find(key);
    if (it == kinds.end())
      it = kinds.emplace(key, emitLayer(c_.isKda[i], c_.isMoe[i], open)).first;
    layerFn[i] = it->second;
  }
  if (anyKda)
    emitKdaMixer();
  if (anyMla)
    emitMlaMixer(L);
  if (anyMoe)
    emitMoe();

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
    args.push_back(cu);
    args.push_back(ctxl);
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
  Value next = ArgmaxOp::create(b_, loc_, idx, logits);
  func::ReturnOp::create(b_, loc_, ValueRange{logits, next});
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

static void usage() {
  llvm::errs()
      << "usage: k3-import config.json|DIR -o model.mlir [--max-context "
         "N] [--name NAME] [--weight-dtype bf16|f32]\n"
         "                 [--kda-operand-dtype f32|bf16] "
         "[--activation-dtype f32|bf16]\n"
         "  Imports a Kimi K3 (kimi_k3, text_config) or Kimi Linear "
         "(kimi_linear)\n"
         "  Hugging Face config.json as K3 IR (docs/import.md); a "
         "checkpoint\n  directory DIR stands for DIR/config.json "
         "(model named after DIR).\n";
}

int main(int argc, char **argv) {
  std::string in, out = "-", name;
  int64_t maxContext = -1;
  bool f32Weights = false, bf16KdaOperands = false;
  std::string activationDType;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        llvm::errs() << "k3-import: " << a << " needs a value\n";
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "-o")
      out = next();
    else if (a == "--name")
      name = next();
    else if (a == "--weight-dtype") {
      std::string v = next();
      if (v != "bf16" && v != "f32") {
        llvm::errs() << "k3-import: --weight-dtype: '" << v
                     << "' is not bf16 or f32\n";
        return 1;
      }
      f32Weights = v == "f32";
    } else if (a == "--kda-operand-dtype") {
      std::string v = next();
      if (v != "bf16" && v != "f32") {
        llvm::errs() << "k3-import: --kda-operand-dtype: '" << v
                     << "' is not f32 or bf16\n";
        return 1;
      }
      bf16KdaOperands = v == "bf16";
    } else if (a == "--activation-dtype") {
      activationDType = next();
      if (activationDType != "bf16" && activationDType != "f32") {
        llvm::errs() << "k3-import: --activation-dtype: '" << activationDType
                     << "' is not f32 or bf16\n";
        return 1;
      }
    } else if (a == "--max-context") {
      std::string v = next();
      char *end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > (1ll << 31)) {
        llvm::errs() << "k3-import: --max-context: '" << v
                     << "' is not a positive integer\n";
        return 1;
      }
      maxContext = n;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      llvm::errs() << "k3-import: unknown option " << a << "\n";
      usage();
      return 1;
    } else if (in.empty())
      in = a;
    else {
      llvm::errs() << "k3-import: more than one input file\n";
      return 1;
    }
  }
  if (in.empty()) {
    usage();
    return 1;
  }
  // A checkpoint directory: its config.json, named after the directory.
  if (llvm::sys::fs::is_directory(in)) {
    while (in.size() > 1 && in.back() == '/')
      in.pop_back();
    if (name.empty())
      name = in.substr(in.find_last_of('/') == std::string::npos
                           ? 0
                           : in.find_last_of('/') + 1);
    std::string dir = in;
    in += "/config.json";
    if (!llvm::sys::fs::exists(in)) {
      llvm::errs() << dir << ": checkpoint directory has no config.json\n";
      return 1;
    }
  }
  gConfigName = in;
  std::ifstream fs(in, std::ios::binary);
  if (!fs) {
    llvm::errs() << in << ": cannot open\n";
    return 1;
  }
  std::stringstream ss;
  ss << fs.rdbuf();
  std::string text = ss.str();
  js::Value root;
  std::string err;
  if (!js::parse(text, root, err)) {
    llvm::errs() << in << ": invalid JSON: " << err << "\n";
    return 1;
  }
  if (!root.isObject()) {
    llvm::errs() << in << ": expected a JSON object at the top level\n";
    return 1;
  }

  // A K3 (VLM) config keeps the decoder under text_config.
  Config cfg;
  const js::Value *tc = root.get("text_config");
  const js::Value *quant = root.get("quantization_config");
  if (tc && tc->type != js::Type::Null) {
    if (!tc->isObject())
      fail("text_config",
           std::string("expected an object, got ") + js::typeName(tc->type));
    Fields top(root, "");
    top.get("text_config");
    auto mt = top.optString("model_type");
    if (mt && *mt != "kimi_k3" && *mt != "kimi_linear")
      fail("model_type",
           "'" + *mt + "' is not kimi_k3 (a config with text_config)");
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
    top.checkUnknown();
    cfg = parseDecoder(*tc, "text_config.", true);
    if (!quant)
      quant = tc->get("quantization_config");
  } else {
    cfg = parseDecoder(root, "", false);
  }
  if (quant && quant->type != js::Type::Null) {
    std::string what;
    if (quant->isObject()) {
      if (auto *m = quant->get("quant_method"); m && m->isString())
        what = m->str;
      if (auto *f = quant->get("format"); f && f->isString())
        what += (what.empty() ? "" : " ") + std::string("\"") + f->str + "\"";
    }
    warn("quantization_config",
         (what.empty() ? std::string("quantised checkpoint") : what) +
             " is not supported yet: routed experts must be given as "
             "dequantised bf16 weights "
             "(experts.{e}.w1/w2/w3.weight); importing the bf16 model");
  }

  if (maxContext < 0)
    maxContext =
        cfg.maxPosition ? std::min<int64_t>(cfg.maxPosition, 4096) : 4096;
  if (name.empty()) {
    std::string base = in.substr(in.find_last_of('/') == std::string::npos
                                     ? 0
                                     : in.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".json") == 0)
      base.resize(base.size() - 5);
    name = base;
  }

  MLIRContext ctx;
  ctx.loadDialect<K3Dialect, func::FuncDialect, tensor::TensorDialect,
                  arith::ArithDialect>();
  OpBuilder b(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  module->getOperation()->setAttr("k3.model", b.getStringAttr(name));
  module->getOperation()->setAttr("k3.vocab_size",
                                  b.getI64IntegerAttr(cfg.vocab));
  module->getOperation()->setAttr("k3.hidden_size",
                                  b.getI64IntegerAttr(cfg.hidden));
  module->getOperation()->setAttr("k3.max_context",
                                  b.getI64IntegerAttr(maxContext));
  // The precision policy, applied by k3-compile (k3-activation-precision).
  if (!activationDType.empty())
    K3Dialect::ActivationDtypeAttrHelper(&ctx).setAttr(
        *module, ActivationDTypeAttr::get(&ctx, activationDType == "bf16"
                                                    ? ActivationDType::bf16
                                                    : ActivationDType::f32));
  Emitter(ctx, cfg, *module, f32Weights, bf16KdaOperands).emit(maxContext);
  if (failed(verify(*module))) {
    llvm::errs() << in
                 << ": internal error: the imported module does not verify\n";
    return 2;
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(out, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "k3-import: cannot write " << out << ": " << ec.message()
                 << "\n";
    return 1;
  }
  os << "// Imported by k3-import from " << in << " (" << cfg.layers
     << " layers).\n";
  module->print(os);
  os << "\n";
  return 0;
}

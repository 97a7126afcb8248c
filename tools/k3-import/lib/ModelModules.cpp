//===- ModelModules.cpp - the decoder's quantizable modules ---------------===//
#include "tools/k3-import/lib/ModelModules.h"

using llvm::Error;

namespace k3import {

const char *const kExpertProjections[3] = {"w1", "w2", "w3"};

namespace {

/// Emits modules under one prefix, stopping at the first error.
class Lister {
public:
  Lister(const Config &c, llvm::function_ref<Error(const ModelModule &)> fn)
      : c(c), fn(fn) {}

  Error all();

private:
  Error linear(const std::string &name) { return module(name, "Linear"); }
  Error module(const std::string &name, llvm::StringRef cls) {
    ModelModule m;
    m.name = name;
    m.cls = cls;
    return fn(m);
  }
  Error linears(const std::string &prefix,
                std::initializer_list<const char *> names) {
    for (const char *n : names)
      if (Error e = linear(prefix + n))
        return e;
    return Error::success();
  }
  Error mixer(int64_t i, const std::string &p);
  Error mlp(int64_t i, const std::string &p);
  Error experts(int64_t i, const std::string &p);

  const Config &c;
  llvm::function_ref<Error(const ModelModule &)> fn;
};

Error Lister::all() {
  if (Error e = module("model.embed_tokens", "Embedding"))
    return e;
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    if (Error e = mixer(i, p + "self_attn."))
      return e;
    if (c.attnResBlock > 0)
      if (Error e = linears(p, {"self_attention_res_proj", "mlp_res_proj"}))
        return e;
    if (Error e = mlp(i, p))
      return e;
  }
  if (c.attnResBlock > 0)
    if (Error e = linear("model.output_attn_res_proj"))
      return e;
  return c.tie ? Error::success() : linear("lm_head");
}

Error Lister::mixer(int64_t i, const std::string &p) {
  if (c.isKda[i]) {
    if (Error e = linears(p, {"q_proj", "k_proj", "v_proj", "f_a_proj",
                              "f_b_proj", "b_proj"}))
      return e;
    if (Error e = c.fullRankGate ? linears(p, {"g_proj"})
                                 : linears(p, {"g_a_proj", "g_b_proj"}))
      return e;
    return linears(p, {"o_proj"});
  }
  if (Error e = c.qLoraRank ? linears(p, {"q_a_proj", "q_b_proj"})
                            : linears(p, {"q_proj"}))
    return e;
  if (Error e = linears(p, {"kv_a_proj_with_mqa", "kv_b_proj"}))
    return e;
  if (c.mlaGate)
    if (Error e = linears(p, {"g_proj"}))
      return e;
  return linears(p, {"o_proj"});
}

Error Lister::mlp(int64_t i, const std::string &p) {
  if (!c.isMoe[i])
    return linears(p + "mlp.", {"gate_proj", "up_proj", "down_proj"});
  std::string moe = p + "block_sparse_moe.";
  if (Error e = module(moe + "gate", "KimiMoEGate"))
    return e;
  if (c.latent)
    if (Error e =
            linears(moe, {"routed_expert_down_proj", "routed_expert_up_proj"}))
      return e;
  if (Error e = experts(i, moe))
    return e;
  if (c.sharedExperts > 0)
    return linears(moe + "shared_experts.",
                   {"gate_proj", "up_proj", "down_proj"});
  return Error::success();
}

/// experts.E.w1 / w2 / w3: w1 (gate) and w3 (up) read the expert width,
/// w2 (down) the intermediate width.
Error Lister::experts(int64_t i, const std::string &moe) {
  int64_t inDims[3] = {c.expertWidth(), c.moeInter, c.expertWidth()};
  for (int64_t e = 0; e < c.experts; ++e) {
    std::string prefix = moe + "experts." + std::to_string(e) + ".";
    for (int w = 0; w < 3; ++w) {
      ModelModule m;
      m.name = prefix + kExpertProjections[w];
      m.cls = "Linear";
      m.layer = i;
      m.expert = e;
      m.proj = w;
      m.inDim = inDims[w];
      if (Error err = fn(m))
        return err;
    }
  }
  return Error::success();
}

} // namespace

Error forEachModule(const Config &c,
                    llvm::function_ref<Error(const ModelModule &)> fn) {
  return Lister(c, fn).all();
}

void nameSpellings(const std::string &name, std::vector<std::string> &out) {
  static const std::string moe = ".block_sparse_moe.", lm = "language_model.";
  size_t at = name.find(moe);
  out.resize(at == std::string::npos ? 2 : 4);
  out[0] = name;
  out[1].assign(lm).append(name);
  if (at == std::string::npos)
    return;
  out[2].assign(name, 0, at).append(".mlp.").append(name, at + moe.size());
  out[3].assign(lm).append(out[2]);
}

} // namespace k3import

// transformers' checkpoint names for the hub names (checkpoint_names.h).
#include "checkpoint_names.h"

#include <regex>

#include "k3/artifact.h"

namespace k3 {
namespace rt {

namespace {

size_t elementBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64")
    return 8;
  if (dtype == "F32" || dtype == "I32")
    return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16")
    return 2;
  return 1;
}

/// Hub spelling -> transformers' spelling of a name segment: the in-memory
/// model's (`mlp.gate`, fused experts) and, for the dense MLP layers, what
/// transformers 5.17's save_pretrained writes (`block_sparse_moe.gate_proj`
/// and so on; everything else it saves under the hub's names:
/// bench/results/hf-saved-names-nvidia-h200-20261202T153119Z.json). The
/// older gate spellings (`forget_gate_down`, ...) are still accepted.
const std::pair<const char *, const char *> kRenames[] = {
    {".mlp.gate_proj.", ".block_sparse_moe.gate_proj."},
    {".mlp.up_proj.", ".block_sparse_moe.up_proj."},
    {".mlp.down_proj.", ".block_sparse_moe.down_proj."},
    {".self_attn.f_a_proj.", ".self_attn.forget_gate_down."},
    {".self_attn.f_b_proj.", ".self_attn.forget_gate_up."},
    {".self_attn.b_proj.", ".self_attn.beta_proj."},
    {".self_attn.g_proj.", ".self_attn.output_gate."},
    {".self_attn.g_a_proj.", ".self_attn.output_gate_down."},
    {".self_attn.g_b_proj.", ".self_attn.output_gate_up."},
    {".block_sparse_moe.gate.", ".mlp.gate."},
    {".block_sparse_moe.shared_experts.", ".mlp.shared_experts."},
};

} // namespace

std::vector<TensorSlab> transformersSources(const std::string &name) {
  std::vector<TensorSlab> out;
  for (auto &[hub, native] : kRenames) {
    size_t at = name.find(hub);
    if (at != std::string::npos)
      out.push_back({name.substr(0, at) + native +
                         name.substr(at + std::string(hub).size()),
                     -1, 0, 1});
  }
  static const std::regex expert(
      R"((.*)\.block_sparse_moe\.experts\.([0-9]+)\.(w1|w2|w3)\.weight)");
  static const std::regex conv(R"((.*)\.self_attn\.([qkv])_conv1d\.weight)");
  std::smatch m;
  if (std::regex_match(name, m, expert)) {
    int64_t e = std::stoll(m[2].str());
    std::string base = m[1].str() + ".mlp.experts.";
    if (m[3] == "w2")
      out.push_back({base + "down_proj", e, 0, 1});
    else
      out.push_back({base + "gate_up_proj", e, m[3] == "w1" ? 0 : 1, 2});
  } else if (std::regex_match(name, m, conv)) {
    int64_t part = std::string("qkv").find(m[2].str());
    out.push_back({m[1].str() + ".self_attn.conv1d.weight", -1, part, 3});
  }
  return out;
}

std::optional<st::TensorInfo> slabOf(const st::TensorInfo &t,
                                     const TensorSlab &s) {
  std::vector<int64_t> shape = t.shape;
  uint64_t bytes = elementBytes(t.dtype) * t.numel(), offset = 0;
  if (s.row >= 0) {
    if (shape.empty() || s.row >= shape[0])
      return std::nullopt;
    bytes /= uint64_t(shape[0]);
    offset = uint64_t(s.row) * bytes;
    shape.erase(shape.begin());
  }
  if (s.subs > 1) {
    if (shape.empty() || shape[0] % s.subs != 0)
      return std::nullopt;
    shape[0] /= s.subs;
    bytes /= uint64_t(s.subs);
    offset += uint64_t(s.sub) * bytes;
  }
  if (s.row < 0 && s.subs == 1)
    return t;
  st::TensorInfo r = t;
  r.name = t.name + (s.row >= 0 ? "[" + std::to_string(s.row) + "]" : "") +
           (s.subs > 1 ? " (part " + std::to_string(s.sub + 1) + " of " +
                             std::to_string(s.subs) + ")"
                       : "");
  r.shape = shape;
  r.begin = t.begin + offset;
  r.end = r.begin + bytes;
  r.data = t.data + offset;
  return r;
}

} // namespace rt
} // namespace k3

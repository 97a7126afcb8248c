// Private: where a weight named as in the hub checkpoint
// (modeling_kimi_linear.py's names, what k3-import's IR uses) lies in a
// checkpoint saved by transformers >= 5 (its native KimiLinear names): a
// renamed tensor, or a slab of a fused one.
#ifndef K3_RT_CHECKPOINT_NAMES_H
#define K3_RT_CHECKPOINT_NAMES_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "k3/safetensors.h"

namespace k3 {
namespace rt {

/// Part `sub` of `subs` equal parts along the first dimension of row `row`
/// (an index into the first dimension; -1: the whole tensor) of tensor
/// `name`.
struct TensorSlab {
  std::string name;
  int64_t row = -1;
  int64_t sub = 0, subs = 1;
};

/// The places `name` may come from under transformers' names, in order:
///   ...self_attn.{f_a,f_b,b,g,g_a,g_b}_proj. -> forget_gate_down/up,
///     beta_proj, output_gate, output_gate_down/up (renamed);
///   ...block_sparse_moe.{gate,shared_experts}. -> ...mlp.* (renamed);
///   ...block_sparse_moe.experts.E.w1/w3.weight -> row E of
///     ...mlp.experts.gate_up_proj [E, 2I, D], its first / second half;
///   ...block_sparse_moe.experts.E.w2.weight -> row E of
///     ...mlp.experts.down_proj [E, D, I];
///   ...self_attn.{q,k,v}_conv1d.weight -> part 0/1/2 of 3 of
///     ...self_attn.conv1d.weight [3P, 1, K].
/// (bench/transformers_compare.py's NAME_RULES: the names transformers 5.17
/// saved, docs/transformers-comparison.md.)
std::vector<TensorSlab> transformersSources(const std::string &name);

/// The slab of `t` as a tensor of its own (its data points into t's), or
/// nothing when t's shape does not split that way.
std::optional<st::TensorInfo> slabOf(const st::TensorInfo &t,
                                     const TensorSlab &s);

} // namespace rt
} // namespace k3

#endif

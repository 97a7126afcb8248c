// The names transformers >= 5 saves for the hub checkpoint's names, and the
// slabs of fused tensors (runtime/lib/checkpoint_names.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "../lib/checkpoint_names.h"

using k3::rt::slabOf;
using k3::rt::TensorSlab;
using k3::rt::transformersSources;

// transformers 5.17 saves the dense first layer's MLP under
// block_sparse_moe (bench/results/hf-saved-names-*.json).
TEST(CheckpointNames, DenseMLPAsTransformersSavesIt) {
  auto r = transformersSources("model.layers.0.mlp.up_proj.weight");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name, "model.layers.0.block_sparse_moe.up_proj.weight");
  EXPECT_EQ(r[0].row, -1);
  EXPECT_TRUE(
      transformersSources("model.layers.3.block_sparse_moe.shared_experts."
                          "gate_proj.weight")[0]
          .name.find(".mlp.shared_experts.gate_proj.") != std::string::npos);
}

TEST(CheckpointNames, RenamesAndFusedSources) {
  auto r = transformersSources("model.layers.0.self_attn.f_a_proj.weight");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name, "model.layers.0.self_attn.forget_gate_down.weight");
  EXPECT_EQ(r[0].row, -1);
  auto w3 = transformersSources(
      "model.layers.7.block_sparse_moe.experts.12.w3.weight");
  ASSERT_EQ(w3.size(), 1u);
  EXPECT_EQ(w3[0].name, "model.layers.7.mlp.experts.gate_up_proj");
  EXPECT_EQ(w3[0].row, 12);
  EXPECT_EQ(w3[0].sub, 1);
  EXPECT_EQ(w3[0].subs, 2);
  auto w2 = transformersSources(
      "model.layers.7.block_sparse_moe.experts.3.w2.weight");
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0].name, "model.layers.7.mlp.experts.down_proj");
  EXPECT_EQ(w2[0].row, 3);
  EXPECT_EQ(w2[0].subs, 1);
  auto v = transformersSources("model.layers.2.self_attn.v_conv1d.weight");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].name, "model.layers.2.self_attn.conv1d.weight");
  EXPECT_EQ(v[0].sub, 2);
  EXPECT_EQ(v[0].subs, 3);
  auto shared = transformersSources(
      "model.layers.1.block_sparse_moe.shared_experts.down_proj.weight");
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].name,
            "model.layers.1.mlp.shared_experts.down_proj.weight");
  EXPECT_TRUE(transformersSources("model.norm.weight").empty());
}

TEST(CheckpointNames, SlabsPointIntoTheFusedTensor) {
  // gate_up_proj [E = 3, 2I = 4, D = 2] in bf16: expert 2's second half.
  std::vector<uint16_t> data(3 * 4 * 2);
  k3::st::TensorInfo t;
  t.name = "g";
  t.dtype = "BF16";
  t.shape = {3, 4, 2};
  t.begin = 100;
  t.end = 100 + data.size() * 2;
  t.data = reinterpret_cast<const uint8_t *>(data.data());
  auto s = slabOf(t, TensorSlab{"g", 2, 1, 2});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(s->data, t.data + (2 * 8 + 4) * 2);
  EXPECT_EQ(s->begin, 100u + (2 * 8 + 4) * 2);
  EXPECT_EQ(s->end - s->begin, 4u * 2);
  EXPECT_EQ(s->name, "g[2] (part 2 of 2)");
  // A packed [3P, 1, K] convolution, part 1 of 3.
  t.shape = {6, 1, 4};
  auto c = slabOf(t, TensorSlab{"g", -1, 1, 3});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->shape, (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(c->data, t.data + 2 * 4 * 2);
  // Shapes that do not split: no slab.
  EXPECT_FALSE(slabOf(t, TensorSlab{"g", -1, 0, 4}).has_value());
  EXPECT_FALSE(slabOf(t, TensorSlab{"g", 6, 0, 1}).has_value());
}

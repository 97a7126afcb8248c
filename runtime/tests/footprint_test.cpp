// The plan's device memory (runtime/lib/footprint.h) and the refusal of a
// plan that does not fit, which names what does not fit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../lib/footprint.h"
#include "k3/artifact.h"
#include "k3/k3_runtime.h"

using namespace k3::artifact;

namespace {

/// Weights 2 x 1000 bf16 + 10 f32; an arena of two buffers; an input, an
/// output; a per-sequence state and a latent cache of 8 tokens x 16 bytes
/// for each of 4 sequences.
Artifact model() {
  Builder b;
  b.setMetadata("max_seq_len", "8");
  b.addWeight("w", DType::BF16, {2, 1000});
  b.addWeight("n", DType::F32, {10});
  b.addBuffer("x", BufferKind::Arena, 400, 0);
  b.addBuffer("y", BufferKind::Arena, 100, 400);
  b.addBuffer("ids", BufferKind::Input, 64);
  b.addBuffer("logits", BufferKind::Output, 256);
  b.addBuffer("model.layers.0.recurrent_state", BufferKind::State, 4 * 512, 0,
              512);
  b.addBuffer("model.layers.3.latent_cache", BufferKind::State, 4 * 128, 0,
              128);
  return b.artifact();
}

TEST(Footprint, SumsThePlan) {
  k3::rt::Footprint f = k3::rt::footprint(model());
  EXPECT_EQ(f.weights, 4000u + 40u);
  EXPECT_EQ(f.activations, 500u);
  EXPECT_EQ(f.io, 64u + 256u);
  EXPECT_EQ(f.state, 2048u + 512u);
  EXPECT_EQ(f.statePerSeq, 512u);
  EXPECT_EQ(f.cachePerToken, 16u);
  EXPECT_EQ(f.total(), 4040u + 500u + 320u + 2560u);
}

TEST(Footprint, FitsOrNamesWhatDoesNot) {
  k3::rt::Footprint f = k3::rt::footprint(model());
  EXPECT_EQ(k3::rt::checkFits(f, f.total(), "cuda:0"), "");
  std::string small = k3::rt::checkFits(f, 1000, "cuda:0");
  EXPECT_NE(small.find("on cuda:0"), std::string::npos) << small;
  EXPECT_NE(small.find("the weights alone"), std::string::npos) << small;
  std::string state = k3::rt::checkFits(f, 5000, "cuda:0");
  EXPECT_NE(state.find("leave"), std::string::npos) << state;
  EXPECT_NE(state.find("smaller max-tokens or max-seqs"), std::string::npos)
      << state;
}

TEST(Footprint, ThroughTheCApi) {
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(model(), bytes, err)) << err;
  k3_artifact *a = nullptr;
  ASSERT_EQ(k3_artifact_open_memory(bytes.data(), bytes.size(), &a), K3_OK)
      << k3_last_error();
  k3_memory_footprint f;
  ASSERT_EQ(k3_artifact_memory_footprint(a, &f), K3_OK);
  EXPECT_EQ(f.weight_bytes, 4040u);
  EXPECT_EQ(f.cache_bytes_per_token, 16u);
  EXPECT_EQ(f.total_bytes, 4040u + 500u + 320u + 2560u);
  EXPECT_EQ(k3_artifact_memory_footprint(a, nullptr),
            K3_ERROR_INVALID_ARGUMENT);
  k3_artifact_close(a);
}

} // namespace

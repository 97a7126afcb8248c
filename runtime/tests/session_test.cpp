#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "fixtures/artifact_bytes.h"
#include "fixtures/toy_model.h"
#include "k3/dtype.h"
#include "k3/k3_runtime.h"
#include "k3/safetensors.h"

using namespace k3::artifact;
using k3test::Handles;

namespace {

bool open(const Artifact &a, Handles &h, const char *device = "cpu") {
  std::vector<uint8_t> bytes;
  std::string err;
  EXPECT_TRUE(serialize(a, bytes, err)) << err;
  EXPECT_EQ(k3_artifact_open_memory(bytes.data(), bytes.size(), &h.art), K3_OK)
      << k3_last_error();
  return k3_session_create(h.art, device, &h.s) == K3_OK;
}

std::vector<float> shiftWeights() {
  const int V = k3test::kToyVocab;
  std::vector<float> w(V * V, 0.f);
  for (int i = 0; i < V; ++i)
    w[i * V + (i + 1) % V] = 1.f;
  return w;
}

std::string writeShift(const std::string &name,
                       std::vector<int64_t> shape = {16, 16},
                       const char *tname = "embed.W") {
  std::vector<float> w = shiftWeights();
  std::string path = std::string(K3_TEST_TMPDIR) + "/" + name, err;
  size_t n = 1;
  for (auto d : shape)
    n *= size_t(d);
  w.resize(n);
  EXPECT_TRUE(
      k3::st::write(path, {{tname, "F32", shape, w.data(), n * 4}}, {}, err))
      << err;
  return path;
}

// One toy-LM call: tokens for one sequence starting at `pos0`.
k3_status runToy(k3_session *s, const std::vector<int32_t> &toks,
                 int32_t pos0) {
  int64_t nt = int64_t(toks.size()), ncu = 2;
  std::vector<int32_t> cu = {0, int32_t(toks.size())}, pos(toks.size());
  for (size_t i = 0; i < toks.size(); ++i)
    pos[i] = pos0 + int32_t(i);
  k3_host_tensor in[3] = {
      {"token_ids", K3_DTYPE_I32, 1, &nt, toks.data(), toks.size() * 4},
      {"cu_seqlens", K3_DTYPE_I32, 1, &ncu, cu.data(), 8},
      {"positions", K3_DTYPE_I32, 1, &nt, pos.data(), pos.size() * 4}};
  k3_symbol_value sv[2] = {{"num_tokens", nt}, {"num_seqs", 1}};
  return k3_session_run(s, "forward", sv, 2, in, 3);
}

int argmaxRow(const k3_tensor_view &v, int64_t row) {
  const float *p = static_cast<const float *>(v.data) + row * v.shape[1];
  int best = 0;
  for (int j = 1; j < v.shape[1]; ++j)
    if (p[j] > p[best])
      best = j;
  return best;
}

} // namespace

TEST(Session, ToyModelPrefillDecodeAndState) {
  Handles h;
  ASSERT_TRUE(open(k3test::toyModel().artifact(), h)) << k3_last_error();
  EXPECT_STREQ(k3_session_device_name(h.s), "cpu");
  std::string w = writeShift("shift.safetensors");
  const char *paths[] = {w.c_str()};
  ASSERT_EQ(k3_session_load_weights(h.s, paths, 1), K3_OK) << k3_last_error();
  ASSERT_EQ(runToy(h.s, {3, 4, 5}, 0), K3_OK) << k3_last_error();
  k3_tensor_view v;
  ASSERT_EQ(k3_session_find_output(h.s, "logits", &v), K3_OK);
  ASSERT_EQ(v.rank, 2);
  EXPECT_EQ(v.shape[0], 3);
  EXPECT_EQ(v.shape[1], 16);
  EXPECT_EQ(argmaxRow(v, 0), 4);
  EXPECT_EQ(argmaxRow(v, 2), 6);
  ASSERT_EQ(k3_session_find_output(h.s, "seen", &v), K3_OK);
  EXPECT_EQ(static_cast<const int32_t *>(v.data)[0], 3);
  // Decode step: the kernel checks positions against the carried state.
  ASSERT_EQ(runToy(h.s, {6}, 3), K3_OK) << k3_last_error();
  ASSERT_EQ(k3_session_find_output(h.s, "logits", &v), K3_OK);
  EXPECT_EQ(argmaxRow(v, 0), 7);
  // A wrong position is detected by the kernel (state is really persistent).
  ASSERT_EQ(runToy(h.s, {6}, 0), K3_OK);
  ASSERT_EQ(k3_session_find_output(h.s, "logits", &v), K3_OK);
  EXPECT_EQ(argmaxRow(v, 0), 0);
  int32_t raw[2];
  ASSERT_EQ(k3_session_read_buffer(h.s, 4, raw, 8), K3_OK);
  EXPECT_EQ(raw[0], 5);
  // Reset slot 0 -> positions start at 0 again.
  ASSERT_EQ(k3_session_reset_state(h.s, 0), K3_OK);
  ASSERT_EQ(runToy(h.s, {1}, 0), K3_OK);
  ASSERT_EQ(k3_session_find_output(h.s, "logits", &v), K3_OK);
  EXPECT_EQ(argmaxRow(v, 0), 2);
  EXPECT_NE(k3_session_reset_state(h.s, 2), K3_OK);
  EXPECT_NE(std::string(k3_last_error()).find("slot 2 out of range"),
            std::string::npos);
}

// k3_session_load_stats and the load's progress callback (the staged
// pipeline itself: weight_upload_test.cpp).
TEST(Session, LoadStatsAndProgress) {
  Handles h;
  ASSERT_TRUE(open(k3test::toyModel().artifact(), h)) << k3_last_error();
  k3_load_stats ls;
  k3_session_load_stats(h.s, &ls);
  EXPECT_EQ(ls.bytes, 0u);
  EXPECT_EQ(ls.files, 0u);
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  k3_session_set_load_progress(
      h.s,
      [](void *user, uint64_t done, uint64_t total) {
        static_cast<std::vector<std::pair<uint64_t, uint64_t>> *>(user)
            ->push_back({done, total});
      },
      &calls);
  std::string w = writeShift("stats.safetensors");
  const char *paths[] = {w.c_str()};
  ASSERT_EQ(k3_session_load_weights(h.s, paths, 1), K3_OK) << k3_last_error();
  k3_session_load_stats(h.s, &ls);
  EXPECT_EQ(ls.bytes, 16u * 16u * 4u);
  EXPECT_EQ(ls.files, 1u);
  EXPECT_GE(ls.seconds, 0.0);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(uint64_t(1024), uint64_t(1024)));
  ASSERT_EQ(runToy(h.s, {3}, 0), K3_OK) << k3_last_error();
  // A checkpoint refused before any copy leaves the weights and the stats
  // of the last load as they were.
  k3_session_set_load_progress(h.s, nullptr, nullptr);
  std::string mis = writeShift("stats-misshaped.safetensors", {16, 8});
  const char *bad[] = {mis.c_str()};
  EXPECT_EQ(k3_session_load_weights(h.s, bad, 1), K3_ERROR_WEIGHTS);
  k3_session_load_stats(h.s, &ls);
  EXPECT_EQ(ls.bytes, 1024u);
  EXPECT_EQ(runToy(h.s, {3}, 0), K3_OK) << k3_last_error();
}

TEST(Session, RunErrors) {
  Handles h;
  ASSERT_TRUE(open(k3test::toyModel().artifact(), h)) << k3_last_error();
  EXPECT_EQ(runToy(h.s, {1, 2}, 0), K3_ERROR_WEIGHTS);
  EXPECT_NE(std::string(k3_last_error()).find("weight 'embed.W' is not loaded"),
            std::string::npos)
      << k3_last_error();
  ASSERT_EQ(k3_session_init_random_weights(h.s, 1), K3_OK);
  std::vector<int32_t> nine(9, 1);
  EXPECT_EQ(runToy(h.s, nine, 0), K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(
      std::string(k3_last_error())
          .find("symbol 'num_tokens' = 9 is outside the compiled range [0, 8]"),
      std::string::npos)
      << k3_last_error();

  int64_t nt = 2, wrong = 3;
  int32_t toks[3] = {1, 2, 3}, cu[2] = {0, 2};
  float ftoks[2] = {1, 2};
  k3_symbol_value sv[2] = {{"num_tokens", 2}, {"num_seqs", 1}};
  int64_t ncu = 2;
  k3_host_tensor good[3] = {{"token_ids", K3_DTYPE_I32, 1, &nt, toks, 8},
                            {"cu_seqlens", K3_DTYPE_I32, 1, &ncu, cu, 8},
                            {"positions", K3_DTYPE_I32, 1, &nt, toks, 8}};
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, good, 3), K3_OK)
      << k3_last_error();
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 1, good, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(
      std::string(k3_last_error()).find("needs a value for symbol 'num_seqs'"),
      std::string::npos)
      << k3_last_error();
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, good, 2),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("input 'positions' not given"),
            std::string::npos)
      << k3_last_error();
  k3_host_tensor bad[3] = {good[0], good[1], good[2]};
  bad[0].shape = &wrong;
  bad[0].nbytes = 12;
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, bad, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(
      std::string(k3_last_error())
          .find("input 'token_ids': shape [3], expected [2] = [num_tokens]"),
      std::string::npos)
      << k3_last_error();
  bad[0] = {"token_ids", K3_DTYPE_F32, 1, &nt, ftoks, 8};
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, bad, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("dtype f32, expected i32"),
            std::string::npos)
      << k3_last_error();
  bad[0] = {"tokens", K3_DTYPE_I32, 1, &nt, toks, 8};
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, bad, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("has no input 'tokens'"),
            std::string::npos)
      << k3_last_error();
  bad[0] = good[0];
  bad[0].nbytes = 4;
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, bad, 3),
            K3_ERROR_INVALID_ARGUMENT);
  k3_symbol_value unk[1] = {{"batch", 1}};
  EXPECT_EQ(k3_session_run(h.s, "forward", unk, 1, good, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("unknown symbol 'batch'"),
            std::string::npos);
  EXPECT_EQ(k3_session_run(h.s, "nope", sv, 2, good, 3),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error())
                .find("unknown entry point 'nope' (artifact has: forward)"),
            std::string::npos);
}

TEST(Session, WeightErrors) {
  Handles h;
  ASSERT_TRUE(open(k3test::toyModel().artifact(), h)) << k3_last_error();
  std::string mis = writeShift("misshaped.safetensors", {16, 8});
  const char *p1[] = {mis.c_str()};
  EXPECT_EQ(k3_session_load_weights(h.s, p1, 1), K3_ERROR_WEIGHTS);
  EXPECT_NE(std::string(k3_last_error())
                .find("weight 'embed.W' has shape [16, 8] in"),
            std::string::npos)
      << k3_last_error();
  EXPECT_NE(std::string(k3_last_error()).find("expects [16, 16]"),
            std::string::npos);
  std::string other = writeShift("othername.safetensors", {16, 16}, "embed.X");
  const char *p2[] = {other.c_str()};
  EXPECT_EQ(k3_session_load_weights(h.s, p2, 1), K3_ERROR_WEIGHTS);
  EXPECT_NE(std::string(k3_last_error())
                .find("weight 'embed.W' (f32 [16, 16]) not found"),
            std::string::npos)
      << k3_last_error();
  std::vector<int32_t> ints(256);
  std::string ip = std::string(K3_TEST_TMPDIR) + "/ints.safetensors", err;
  ASSERT_TRUE(k3::st::write(
      ip, {{"embed.W", "I32", {16, 16}, ints.data(), 1024}}, {}, err));
  const char *p3[] = {ip.c_str()};
  EXPECT_EQ(k3_session_load_weights(h.s, p3, 1), K3_ERROR_WEIGHTS);
  EXPECT_NE(std::string(k3_last_error())
                .find("cannot convert safetensors dtype I32 to f32"),
            std::string::npos)
      << k3_last_error();
  const char *p4[] = {"/nonexistent/x.safetensors"};
  EXPECT_EQ(k3_session_load_weights(h.s, p4, 1), K3_ERROR_IO);
}

TEST(Session, RandomWeightsDeterministic) {
  Weight w{"blk.0.w", DType::F32, {1000}, WeightInit::normal(0.5), 0};
  std::vector<float> a(1000), b(1000), c(1000);
  k3::randomInit(w, 42, a.data(), 1000);
  k3::randomInit(w, 42, b.data(), 1000);
  k3::randomInit(w, 43, c.data(), 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  for (float x : a)
    mean += x;
  mean /= 1000;
  for (float x : a)
    var += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 0.0, 0.06);
  EXPECT_NEAR(std::sqrt(var / 1000), 0.5, 0.05);
  // Element 0 from the documented recipe.
  uint64_t base = k3::splitmix64(42 ^ fnv1a64("blk.0.w", 7));
  double u0 = double(k3::splitmix64(base + 0) >> 11) * 0x1.0p-53,
         u1 = double(k3::splitmix64(base + 1) >> 11) * 0x1.0p-53;
  EXPECT_EQ(a[0], float(0.5 * std::sqrt(-2.0 * std::log(1.0 - u0)) *
                        std::cos(6.283185307179586476925286766559 * u1)));
  Weight k{"norm", DType::BF16, {4}, WeightInit::constant(1.0), 0};
  uint16_t kb[4];
  k3::randomInit(k, 1, kb, 4);
  EXPECT_EQ(kb[3], 0x3f80);
  Weight u{"u", DType::F32, {100}, WeightInit::uniform(0.1), 0};
  std::vector<float> uv(100);
  k3::randomInit(u, 1, uv.data(), 100);
  for (float x : uv)
    EXPECT_LE(std::fabs(x), 0.1f);
}

// The fill is split over host threads; every count gives the same bytes
// (each element depends only on seed, name and index).
TEST(Session, RandomWeightsSameForAnyThreadCount) {
  const size_t n = (size_t(1) << 22) + 77; // 4 chunks of 2^20 and a tail
  Weight w{
      "blk.3.mlp.w", DType::BF16, {int64_t(n)}, WeightInit::normal(0.02), 0};
  std::vector<uint16_t> one(n), many(n), hw(n);
  k3::randomInit(w, 9, one.data(), n, 1);
  k3::randomInit(w, 9, many.data(), n, 7);
  k3::randomInit(w, 9, hw.data(), n);
  EXPECT_EQ(one, many);
  EXPECT_EQ(one, hw);
}

namespace {
// Entry "main": three k3t_fill launches (1 block), k3t_axpy_blocked over
// ceil(n / 4) blocks of 4 (an empty grid when n = 0), one k3t_add_i32.
Artifact blockedArtifact() {
  Builder b;
  uint32_t n = b.addSymbol("n", 100);
  uint32_t obj =
      b.addKernelObject(kTargetCpuX86_64, k3test::readKernelsSo(),
                        {"k3t_fill", "k3t_axpy_blocked", "k3t_add_i32"});
  uint32_t x = b.addBuffer("x", BufferKind::Arena, 400, 0);
  uint32_t y = b.addBuffer("y", BufferKind::Arena, 400, 400);
  uint32_t out = b.addBuffer("out", BufferKind::Output, 400);
  uint32_t ii = b.addBuffer("ii", BufferKind::Input, 400);
  uint32_t io = b.addBuffer("io", BufferKind::Output, 400);
  uint32_t e = b.addEntry("main");
  b.addInput(e, "ints", DType::I32, {DimExpr::symbol(n)}, ii);
  b.addOutput(e, "out", DType::F32, {DimExpr::symbol(n)}, out);
  b.addOutput(e, "ints_plus", DType::I32, {DimExpr::symbol(n)}, io);
  DimExpr one[3] = {DimExpr::constant(1), DimExpr::constant(1),
                    DimExpr::constant(1)};
  b.addLaunch(e, obj, "k3t_fill",
              {Arg::buffer(x), Arg::symbol(n), Arg::f32(2.0f)}, one, one);
  b.addLaunch(e, obj, "k3t_fill",
              {Arg::buffer(y), Arg::symbol(n), Arg::f32(0.5f)}, one, one);
  b.addLaunch(e, obj, "k3t_fill",
              {Arg::buffer(y, 8), Arg::i64(1), Arg::f32(100.0f)}, one,
              one); // byte offset: y[2]
  DimExpr grid[3] = {DimExpr::symbol(n, 1, 0, 4), DimExpr::constant(1),
                     DimExpr::constant(1)};
  DimExpr blk[3] = {DimExpr::constant(4), DimExpr::constant(1),
                    DimExpr::constant(1)};
  b.addLaunch(e, obj, "k3t_axpy_blocked",
              {Arg::buffer(out), Arg::buffer(x), Arg::buffer(y), Arg::f32(3.0f),
               Arg::symbol(n)},
              grid, blk);
  b.addLaunch(e, obj, "k3t_add_i32",
              {Arg::buffer(io), Arg::buffer(ii), Arg::symbol(n), Arg::i32(-5)},
              one, one);
  return b.artifact();
}

// Runs "main" of blockedArtifact() with n = count.
k3_status runBlocked(k3_session *s, int64_t count, std::vector<int32_t> &ints) {
  ints.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    ints[size_t(i)] = int32_t(i * 3);
  k3_host_tensor in = {"ints", K3_DTYPE_I32, 1,
                       &count, ints.data(),  ints.size() * 4};
  k3_symbol_value sv = {"n", count};
  return k3_session_run(s, "main", &sv, 1, &in, 1);
}
} // namespace

TEST(Session, BlockedLaunchesImmediatesAndEmptyGrid) {
  Handles h;
  ASSERT_TRUE(open(blockedArtifact(), h)) << k3_last_error();
  for (int64_t count : {int64_t(7), int64_t(100), int64_t(0)}) {
    std::vector<int32_t> ints(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      ints[size_t(i)] = int32_t(i * 3);
    k3_host_tensor in = {"ints", K3_DTYPE_I32, 1,
                         &count, ints.data(),  ints.size() * 4};
    k3_symbol_value sv = {"n", count};
    ASSERT_EQ(k3_session_run(h.s, "main", &sv, 1, &in, 1), K3_OK)
        << k3_last_error();
    k3_tensor_view v;
    ASSERT_EQ(k3_session_find_output(h.s, "out", &v), K3_OK);
    ASSERT_EQ(v.shape[0], count);
    const float *o = static_cast<const float *>(v.data);
    for (int64_t i = 0; i < count; ++i)
      EXPECT_EQ(o[i], i == 2 ? 106.0f : 6.5f) << i;
    ASSERT_EQ(k3_session_find_output(h.s, "ints_plus", &v), K3_OK);
    for (int64_t i = 0; i < count; ++i)
      EXPECT_EQ(static_cast<const int32_t *>(v.data)[i], int32_t(i * 3 - 5));
  }
}

// `device_sm_count` is the device's, set by the runtime (1 on the CPU), and
// a caller may not set it.
TEST(Session, DeviceSMCountSymbolComesFromTheDevice) {
  Builder b;
  uint32_t n = b.addSymbol("n", 8);
  uint32_t sm = b.addSymbol(kSymbolDeviceSMCount, 1024);
  uint32_t obj = b.addKernelObject(kTargetCpuX86_64, k3test::readKernelsSo(),
                                   {"k3t_fill"});
  uint32_t out = b.addBuffer("out", BufferKind::Output, 32);
  uint32_t e = b.addEntry("main");
  b.addOutput(e, "out", DType::F32, {DimExpr::symbol(n)}, out);
  DimExpr one[3] = {DimExpr::constant(1), DimExpr::constant(1),
                    DimExpr::constant(1)};
  b.addLaunch(e, obj, "k3t_fill",
              {Arg::buffer(out), Arg::symbol(sm), Arg::f32(2.0f)}, one, one);
  Handles h;
  ASSERT_TRUE(open(b.artifact(), h)) << k3_last_error();
  k3_symbol_value sv = {"n", 4};
  ASSERT_EQ(k3_session_run(h.s, "main", &sv, 1, nullptr, 0), K3_OK)
      << k3_last_error();
  k3_tensor_view v;
  ASSERT_EQ(k3_session_find_output(h.s, "out", &v), K3_OK);
  const float *o = static_cast<const float *>(v.data);
  EXPECT_EQ(o[0], 2.0f);
  EXPECT_EQ(o[1], 0.0f);
  k3_symbol_value both[2] = {{"n", 4}, {kSymbolDeviceSMCount, 132}};
  EXPECT_EQ(k3_session_run(h.s, "main", both, 2, nullptr, 0),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("set by the runtime"),
            std::string::npos);
}

TEST(Session, CudaUnavailableIsReportedCleanly) {
  Handles h;
  bool ok = open(k3test::toyModel(kTargetCudaSm90a).artifact(), h, "cuda:0");
  if (ok)
    GTEST_SKIP() << "a CUDA device is present: " << k3_session_device_name(h.s);
  std::string e = k3_last_error();
  // On a GPU machine the fixture's fake "cubin" (an ELF .so) is refused
  // cleanly.
  if (e.find("cuModuleLoadData (kernel object 0 (cuda-sm_90a)) failed: "
             "CUDA_ERROR_INVALID_IMAGE") != std::string::npos)
    GTEST_SKIP() << e;
  EXPECT_TRUE(e.find("no CUDA driver") != std::string::npos ||
              e.find("no CUDA device") != std::string::npos)
      << e;
  Handles h2;
  EXPECT_FALSE(open(k3test::toyModel().artifact(), h2, "cuda:1x"));
  EXPECT_NE(std::string(k3_last_error()).find("invalid device 'cuda:1x'"),
            std::string::npos);
  Handles h3;
  EXPECT_FALSE(open(k3test::toyModel().artifact(), h3, "tpu"));
}

TEST(Session, WrongTargetForDevice) {
  Handles h;
  EXPECT_FALSE(open(k3test::toyModel(kTargetCudaSm90a).artifact(), h, "cpu"));
  std::string e = k3_last_error();
  EXPECT_NE(e.find("artifact has no kernels for device cpu (its targets: "
                   "'cuda-sm_90a')"),
            std::string::npos)
      << e;
}

TEST(Session, BadKernelObject) {
  Builder b = k3test::toyModel();
  b.artifact().objects[0].data = std::vector<uint8_t>(64, 0);
  Handles h;
  EXPECT_FALSE(open(b.artifact(), h));
  EXPECT_NE(std::string(k3_last_error()).find("is not an ELF shared object"),
            std::string::npos)
      << k3_last_error();
  Builder b2 = k3test::toyModel();
  b2.artifact().objects[0].symbols.push_back("k3t_missing");
  b2.artifact().entries[0].launches[1].kernel = "k3t_missing";
  Handles h2;
  EXPECT_FALSE(open(b2.artifact(), h2));
  EXPECT_NE(std::string(k3_last_error())
                .find("kernel symbol 'k3t_missing' not found"),
            std::string::npos)
      << k3_last_error();
}

TEST(Session, TwoSessionsShareNothing) {
  Handles a, b;
  ASSERT_TRUE(open(k3test::toyModel().artifact(), a)) << k3_last_error();
  ASSERT_TRUE(open(k3test::toyModel().artifact(), b)) << k3_last_error();
  ASSERT_EQ(k3_session_init_random_weights(a.s, 1), K3_OK);
  ASSERT_EQ(k3_session_init_random_weights(b.s, 1), K3_OK);
  ASSERT_EQ(runToy(a.s, {1, 2}, 0), K3_OK) << k3_last_error();
  ASSERT_EQ(runToy(b.s, {1}, 0), K3_OK) << k3_last_error();
  k3_tensor_view v;
  ASSERT_EQ(k3_session_find_output(b.s, "seen", &v), K3_OK);
  EXPECT_EQ(static_cast<const int32_t *>(v.data)[0], 1);
}

// Runs only where a CUDA device is present: a hand-written PTX fill kernel
// (cuModuleLoadData JIT-compiles PTX) exercising alloc, params, launch dims
// from symbols, outputs and driver error reporting.
TEST(Session, CudaFillPtxOnDevice) {
  static const char kPtx[] =
      ".version 8.0\n.target sm_90a\n.address_size 64\n"
      ".visible .entry k3t_fill(.param .u64 out, .param .u64 n, .param .f32 v) "
      "{\n"
      "  .reg .pred %p<2>; .reg .b32 %r<5>; .reg .b64 %rd<6>; .reg .f32 "
      "%f<2>;\n"
      "  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [n]; ld.param.f32 %f1, "
      "[v];\n"
      "  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;\n"
      "  mad.lo.s32 %r4, %r1, %r2, %r3; cvt.s64.s32 %rd3, %r4;\n"
      "  setp.ge.s64 %p1, %rd3, %rd2; @%p1 bra DONE;\n"
      "  cvta.to.global.u64 %rd4, %rd1; shl.b64 %rd5, %rd3, 2; add.s64 %rd4, "
      "%rd4, %rd5;\n"
      "  st.global.f32 [%rd4], %f1;\nDONE:\n  ret;\n}\n";
  Builder b;
  uint32_t n = b.addSymbol("n", 100000);
  uint32_t obj = b.addKernelObject(
      kTargetCudaSm90a, std::vector<uint8_t>(kPtx, kPtx + sizeof kPtx - 1),
      {"k3t_fill"});
  uint32_t out = b.addBuffer("out", BufferKind::Output, 400000);
  uint32_t e = b.addEntry("main");
  b.addOutput(e, "out", DType::F32, {DimExpr::symbol(n)}, out);
  DimExpr grid[3] = {DimExpr::symbol(n, 1, 0, 128), DimExpr::constant(1),
                     DimExpr::constant(1)};
  DimExpr blk[3] = {DimExpr::constant(128), DimExpr::constant(1),
                    DimExpr::constant(1)};
  b.addLaunch(e, obj, "k3t_fill",
              {Arg::buffer(out), Arg::symbol(n), Arg::f32(1.5f)}, grid, blk);
  Handles h;
  if (!open(b.artifact(), h, "cuda:0")) {
    std::string err = k3_last_error();
    if (err.find("no CUDA") != std::string::npos)
      GTEST_SKIP() << err;
    FAIL() << err;
  }
  printf("device: %s\n", k3_session_device_name(h.s));
  for (int64_t count : {int64_t(1000), int64_t(99999)}) {
    k3_symbol_value sv = {"n", count};
    ASSERT_EQ(k3_session_run(h.s, "main", &sv, 1, nullptr, 0), K3_OK)
        << k3_last_error();
    k3_tensor_view v;
    ASSERT_EQ(k3_session_find_output(h.s, "out", &v), K3_OK);
    ASSERT_EQ(v.shape[0], count);
    const float *o = static_cast<const float *>(v.data);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(o[i], 1.5f) << i;
  }
  // Profiling with CUDA events, and the timing API (device time).
  EXPECT_STREQ(k3_session_clock_name(h.s), "CUDA events");
  ASSERT_EQ(k3_session_set_profiling(h.s, 1), K3_OK);
  {
    k3_symbol_value sv = {"n", 99999};
    std::vector<double> ms(5, -1.0);
    ASSERT_EQ(k3_session_time(h.s, "main", &sv, 1, nullptr, 0, 2, 5, ms.data()),
              K3_OK)
        << k3_last_error();
    for (double t : ms)
      EXPECT_GT(t, 0.0);
    ASSERT_EQ(k3_session_profile_snapshot(h.s, "main"), 1u);
    k3_kernel_profile p;
    ASSERT_EQ(k3_session_profile_kernel(h.s, 0, &p), K3_OK);
    EXPECT_STREQ(p.kernel, "k3t_fill");
    EXPECT_EQ(p.calls, 7u);
    EXPECT_EQ(p.runs, 7u);
    EXPECT_GT(p.min_ms, 0.0);
    EXPECT_NEAR(p.share, 1.0, 1e-12);
    ASSERT_EQ(k3_session_set_profiling(h.s, 0), K3_OK);
  }
  // Too much dynamic shared memory is refused with the kernel named.
  b.artifact().entries[0].launches[0].sharedMemBytes =
      DimExpr::constant(1 << 30);
  Handles h2;
  ASSERT_TRUE(open(b.artifact(), h2, "cuda:0")) << k3_last_error();
  k3_symbol_value sv = {"n", 10};
  EXPECT_EQ(k3_session_run(h2.s, "main", &sv, 1, nullptr, 0), K3_ERROR_DEVICE);
  EXPECT_NE(std::string(k3_last_error()).find("k3t_fill"), std::string::npos)
      << k3_last_error();
  // An out-of-range ordinal is a clean error.
  Handles h3;
  EXPECT_FALSE(open(b.artifact(), h3, "cuda:99"));
  EXPECT_NE(std::string(k3_last_error()).find("no CUDA device cuda:99"),
            std::string::npos)
      << k3_last_error();
}

TEST(Session, ProfileCountsEveryLaunchedKernel) {
  Handles h;
  ASSERT_TRUE(open(blockedArtifact(), h)) << k3_last_error();
  EXPECT_STREQ(k3_session_clock_name(h.s), "host steady_clock");
  std::vector<int32_t> ints;
  // Not profiling: nothing recorded.
  ASSERT_EQ(runBlocked(h.s, 5, ints), K3_OK) << k3_last_error();
  EXPECT_EQ(k3_session_profile_snapshot(h.s, nullptr), 0u);
  ASSERT_EQ(k3_session_set_profiling(h.s, 1), K3_OK);
  // n = 7 and n = 8: axpy over 2 blocks both times; n = 0: its grid is
  // empty, so it is not launched (and not counted). Repeating n = 8 would
  // replay a launch graph when not profiling.
  for (int64_t n : {int64_t(7), int64_t(8), int64_t(8), int64_t(0)})
    ASSERT_EQ(runBlocked(h.s, n, ints), K3_OK) << k3_last_error();
  size_t captured = 0, replayed = 0;
  k3_session_graph_stats(h.s, &captured, &replayed);
  EXPECT_EQ(captured, 0u) << "launch graphs must be off while profiling";
  EXPECT_EQ(replayed, 0u);
  ASSERT_EQ(k3_session_profile_snapshot(h.s, "main"), 3u);
  std::map<std::string, k3_kernel_profile> byName;
  double share = 0, prev = 1e300;
  for (size_t i = 0; i < 3; ++i) {
    k3_kernel_profile p;
    ASSERT_EQ(k3_session_profile_kernel(h.s, i, &p), K3_OK);
    EXPECT_STREQ(p.entry, "main");
    EXPECT_EQ(p.runs, 4u);
    EXPECT_LE(p.total_ms, prev) << "sorted by total time";
    prev = p.total_ms;
    EXPECT_GE(p.min_ms, 0.0);
    EXPECT_LE(p.min_ms, p.max_ms);
    EXPECT_LE(p.max_ms, p.total_ms + 1e-12);
    share += p.share;
    byName[p.kernel] = p;
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  ASSERT_EQ(byName.count("k3t_fill"), 1u);
  EXPECT_EQ(byName["k3t_fill"].calls, 12u);
  EXPECT_EQ(byName["k3t_add_i32"].calls, 4u);
  const k3_kernel_profile &axpy = byName["k3t_axpy_blocked"];
  EXPECT_EQ(axpy.calls, 3u);
  EXPECT_EQ(axpy.grid[0], 2);
  EXPECT_EQ(axpy.block[0], 4);
  EXPECT_EQ(axpy.dims_varied, 0);
  // n = 100: 25 blocks, another grid.
  ASSERT_EQ(runBlocked(h.s, 100, ints), K3_OK);
  ASSERT_EQ(k3_session_profile_snapshot(h.s, nullptr), 3u);
  for (size_t i = 0; i < 3; ++i) {
    k3_kernel_profile p;
    ASSERT_EQ(k3_session_profile_kernel(h.s, i, &p), K3_OK);
    if (std::string(p.kernel) == "k3t_axpy_blocked") {
      EXPECT_EQ(p.calls, 4u);
      EXPECT_EQ(p.dims_varied, 1);
    }
  }
  k3_kernel_profile p;
  EXPECT_NE(k3_session_profile_kernel(h.s, 3, &p), K3_OK);
  EXPECT_EQ(k3_session_profile_snapshot(h.s, "other"), 0u);
  // Results are still right while profiling.
  k3_tensor_view v;
  ASSERT_EQ(k3_session_find_output(h.s, "out", &v), K3_OK);
  EXPECT_EQ(static_cast<const float *>(v.data)[3], 6.5f);
  // Reset, and turning profiling off stops recording.
  ASSERT_EQ(k3_session_reset_profile(h.s), K3_OK);
  EXPECT_EQ(k3_session_profile_snapshot(h.s, nullptr), 0u);
  ASSERT_EQ(k3_session_set_profiling(h.s, 0), K3_OK);
  ASSERT_EQ(runBlocked(h.s, 5, ints), K3_OK);
  EXPECT_EQ(k3_session_profile_snapshot(h.s, nullptr), 0u);
}

TEST(Session, TimeRunsAnEntryWarmupPlusRepsTimes) {
  Handles h;
  ASSERT_TRUE(open(blockedArtifact(), h)) << k3_last_error();
  ASSERT_EQ(k3_session_set_profiling(h.s, 1), K3_OK);
  int64_t count = 9;
  std::vector<int32_t> ints(9, 1);
  k3_host_tensor in = {"ints", K3_DTYPE_I32, 1, &count, ints.data(), 36};
  k3_symbol_value sv = {"n", count};
  std::vector<double> ms(4, -1.0);
  ASSERT_EQ(k3_session_time(h.s, "main", &sv, 1, &in, 1, 2, 4, ms.data()),
            K3_OK)
      << k3_last_error();
  for (double t : ms)
    EXPECT_GE(t, 0.0);
  ASSERT_EQ(k3_session_profile_snapshot(h.s, nullptr), 3u);
  k3_kernel_profile p;
  ASSERT_EQ(k3_session_profile_kernel(h.s, 0, &p), K3_OK);
  EXPECT_EQ(p.runs, 6u); // 2 warm-ups + 4 timed runs
  // Outputs stay on the device; fetch them.
  ASSERT_EQ(k3_session_fetch_outputs(h.s), K3_OK);
  k3_tensor_view v;
  ASSERT_EQ(k3_session_find_output(h.s, "ints_plus", &v), K3_OK);
  EXPECT_EQ(static_cast<const int32_t *>(v.data)[0], -4);
  EXPECT_EQ(k3_session_time(h.s, "main", &sv, 1, &in, 1, 0, 0, ms.data()),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(k3_session_time(h.s, "nope", &sv, 1, &in, 1, 0, 1, ms.data()),
            K3_ERROR_INVALID_ARGUMENT);
  // Without profiling, repeated runs go through a launch graph: still timed.
  ASSERT_EQ(k3_session_set_profiling(h.s, 0), K3_OK);
  ASSERT_EQ(k3_session_time(h.s, "main", &sv, 1, &in, 1, 1, 3, ms.data()),
            K3_OK);
  size_t captured = 0, replayed = 0;
  k3_session_graph_stats(h.s, &captured, &replayed);
  EXPECT_GE(replayed, 1u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_GE(ms[i], 0.0);
}

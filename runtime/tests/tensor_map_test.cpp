// TMA tensor maps: the TMAP section and ArgKind::TensorMap (round trip,
// every validation error), run-time evaluation, the per-launch device slots
// (with a fake backend), the CPU refusal, and on a CUDA device (skipped
// without one) encoding and a TMA copy kernel run through the session.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "../lib/backend.h"
#include "../lib/session.h"
#include "../lib/tensor_map.h"
#include "fixtures/artifact_bytes.h"
#include "fixtures/toy_model.h"
#include "k3/artifact.h"
#include "k3/k3_runtime.h"

using namespace k3::artifact;
using k3test::bytesOf;
using k3test::Handles;
using k3test::readErr;

namespace {

// A bf16 [rows = num_tokens, 128] tile source: dims {128, num_tokens}, row
// stride 256 bytes, box {64, 32}.
TensorMapSpec rowsMap(uint32_t source, uint32_t numTokensSym) {
  TensorMapSpec t;
  t.source = Arg::buffer(source);
  t.dtype = DType::BF16;
  t.rank = 2;
  t.dims = {DimExpr::constant(128), DimExpr::symbol(numTokensSym)};
  t.strides = {DimExpr::constant(256)};
  t.box = {64, 32};
  t.swizzle = 3;
  t.l2Promotion = 2;
  return t;
}

// The toy model plus an entry "tma" whose launch takes two tensor maps (one
// over a buffer, one over a bf16 weight), on the toy's CPU object.
Builder tmaModel(bool withForward = true) {
  Builder b = k3test::toyModel();
  Artifact &a = b.artifact();
  if (!withForward)
    a.entries.clear();
  uint32_t nt = uint32_t(a.findSymbol("num_tokens"));
  uint32_t x = b.addBuffer("tma.x", BufferKind::Arena, 64 * 256, 64);
  uint32_t w = b.addWeight("tma.w", DType::BF16, {64, 128});
  uint32_t m0 = b.addTensorMap(rowsMap(x, nt));
  TensorMapSpec wm;
  wm.source = Arg::weight(w);
  wm.dtype = DType::BF16;
  wm.rank = 2;
  wm.dims = {DimExpr::constant(128), DimExpr::constant(64)};
  wm.strides = {DimExpr::constant(256)};
  wm.box = {64, 64};
  uint32_t m1 = b.addTensorMap(wm);
  uint32_t e = b.addEntry("tma");
  DimExpr grid[3] = {DimExpr::constant(2), DimExpr::symbol(nt, 1, 0, 32),
                     DimExpr::constant(1)};
  DimExpr block[3] = {DimExpr::constant(128), DimExpr::constant(1),
                      DimExpr::constant(1)};
  b.addLaunch(
      e, 0, "k3t_fill",
      {Arg::tensorMap(m0), Arg::i32(3), Arg::tensorMap(m1), Arg::buffer(x, 16)},
      grid, block);
  return b;
}

bool hasSection(const std::vector<uint8_t> &b, const char *tag) {
  uint32_t n;
  memcpy(&n, &b[32], 4);
  for (uint32_t i = 0; i < n; ++i)
    if (memcmp(&b[64 + 24 * i], tag, 4) == 0)
      return true;
  return false;
}

} // namespace

TEST(ArtifactTensorMap, RoundTrip) {
  Artifact a = tmaModel().artifact();
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  EXPECT_TRUE(hasSection(bytes, "TMAP"));
  Artifact b;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(b.versionMinor, kVersionMinor);
  ASSERT_EQ(b.tensorMaps.size(), 2u);
  EXPECT_EQ(b.tensorMaps[0].swizzle, 3);
  EXPECT_EQ(b.tensorMaps[0].l2Promotion, 2);
  EXPECT_EQ(b.tensorMaps[1].source.kind, ArgKind::Weight);
  const Launch &l = b.entries[1].launches[0];
  EXPECT_EQ(l.args[0].kind, ArgKind::TensorMap);
  EXPECT_EQ(l.args[2].index, 1u);
  std::vector<uint8_t> again;
  ASSERT_TRUE(serialize(b, again, err));
  EXPECT_EQ(bytes, again);
  // Artifacts without tensor maps have no TMAP section (and still load).
  std::vector<uint8_t> plain = bytesOf(k3test::toyModel().artifact(), false);
  EXPECT_FALSE(hasSection(plain, "TMAP"));
  ASSERT_TRUE(deserialize(plain.data(), plain.size(), b, err)) << err;
  EXPECT_TRUE(b.tensorMaps.empty());
  // The seed of the artifact fuzzer's corpus (K3_WRITE_FUZZ_SEED=path):
  // small, so the kernel object is a stand-in.
  if (const char *p = getenv("K3_WRITE_FUZZ_SEED")) {
    Artifact small = a;
    small.objects[0].data = {0x7f, 'E', 'L', 'F'};
    ASSERT_TRUE(writeFile(p, small, err)) << err;
  }
}

TEST(ArtifactTensorMap, Describe) {
  std::string d = describe(tmaModel().artifact());
  EXPECT_NE(d.find("tensor map 0: buffer 'tma.x', bf16 dims [128, num_tokens]"
                   " byte strides [256] box [64, 32] swizzle 128B l2 128B"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("arg 0: tensor map 0"), std::string::npos) << d;
  EXPECT_NE(d.find("arg 3: buffer 'tma.x' + 16"), std::string::npos) << d;
}

TEST(ArtifactTensorMap, ValidationErrors) {
  const Artifact base = tmaModel().artifact();
  auto expectErr = [&](const char *needle, auto edit) {
    Artifact a = base;
    edit(a);
    std::string e = readErr(a);
    EXPECT_NE(e.find(needle), std::string::npos) << needle << " <- " << e;
    std::vector<uint8_t> out;
    std::string err;
    EXPECT_FALSE(serialize(a, out, err)) << needle; // the builder refuses too
  };
  auto m0 = [](Artifact &a) -> TensorMapSpec & { return a.tensorMaps[0]; };
  expectErr("rank 0 is outside 1..5", [&](Artifact &a) {
    m0(a).rank = 0;
    m0(a).dims.clear();
    m0(a).strides.clear();
    m0(a).box.clear();
  });
  expectErr("rank 6 is outside 1..5", [&](Artifact &a) { m0(a).rank = 6; });
  expectErr("rank 2 needs 2 dims, 1 strides and 2 box sizes (has 2, 0, 2)",
            [&](Artifact &a) { m0(a).strides.clear(); });
  expectErr("box size 0 is outside 1..256",
            [&](Artifact &a) { m0(a).box[1] = 0; });
  expectErr("box size 257 is outside 1..256",
            [&](Artifact &a) { m0(a).box[1] = 257; });
  expectErr("innermost box 12 x 2 bytes = 24 bytes is not a multiple of 16",
            [&](Artifact &a) { m0(a).box[0] = 12; });
  expectErr("innermost box of 128 bytes exceeds the 64-byte swizzle span",
            [&](Artifact &a) { m0(a).swizzle = 2; });
  expectErr("swizzle 4 is not one of", [&](Artifact &a) { m0(a).swizzle = 4; });
  expectErr("interleave 1 is not supported",
            [&](Artifact &a) { m0(a).interleave = 1; });
  expectErr("l2 promotion 4 is not one of",
            [&](Artifact &a) { m0(a).l2Promotion = 4; });
  expectErr("oob fill 2 is not one of",
            [&](Artifact &a) { m0(a).oobFill = 2; });
  expectErr("NaN out-of-bounds fill needs a float dtype", [&](Artifact &a) {
    m0(a).dtype = DType::I32;
    m0(a).box[0] = 32;
    m0(a).oobFill = 1;
  });
  expectErr("stride 264 bytes is not a positive multiple of 16",
            [&](Artifact &a) { m0(a).strides[0] = DimExpr::constant(264); });
  expectErr("dim 0 is outside 1..2^32",
            [&](Artifact &a) { m0(a).dims[0] = DimExpr::constant(0); });
  expectErr("stride 1 = 128 bytes is smaller than the 256 bytes of dim 0",
            [&](Artifact &a) {
              a.tensorMaps[1].strides[0] = DimExpr::constant(128);
            });
  expectErr("symbol index 9 out of range",
            [&](Artifact &a) { m0(a).dims[1] = DimExpr::symbol(9); });
  expectErr("source must be a buffer or weight argument",
            [&](Artifact &a) { m0(a).source = Arg::i64(1); });
  expectErr("buffer id 99 out of range",
            [&](Artifact &a) { m0(a).source = Arg::buffer(99); });
  expectErr("byte offset 8 into buffer 'tma.x' is not a multiple of 16",
            [&](Artifact &a) { m0(a).source.offset = 8; });
  expectErr("weight index 99 out of range",
            [&](Artifact &a) { m0(a).source = Arg::weight(99); });
  expectErr("describes 2048 bytes at the symbols' max bounds but the source "
            "has 1024",
            [&](Artifact &a) { m0(a).source.offset = 64 * 256 - 1024; });
  expectErr(
      "describes 32768 bytes at the symbols' max bounds",
      [&](Artifact &a) { a.tensorMaps[1].dims[1] = DimExpr::constant(128); });
  expectErr("tensor map id 7 out of range (2 tensor maps)", [&](Artifact &a) {
    a.entries[1].launches[0].args[0] = Arg::tensorMap(7);
  });
  // The reader names the record's offset.
  Artifact a = base;
  a.tensorMaps[1].box[0] = 0;
  std::string e = readErr(a);
  EXPECT_EQ(e.rfind("offset ", 0), 0u) << e;
  EXPECT_NE(e.find("tensor_maps[1].box[0]: tensor map 1 (weight 'tma.w')"),
            std::string::npos)
      << e;
}

TEST(ArtifactTensorMap, TruncatedAndCorruptSection) {
  std::vector<uint8_t> b = bytesOf(tmaModel().artifact(), false);
  // Locate TMAP and corrupt every byte of it in turn: each must fail cleanly
  // or decode to something valid.
  uint32_t n;
  memcpy(&n, &b[32], 4);
  uint64_t off = 0, size = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (memcmp(&b[64 + 24 * i], "TMAP", 4) == 0) {
      memcpy(&off, &b[64 + 24 * i + 8], 8);
      memcpy(&size, &b[64 + 24 * i + 16], 8);
    }
  ASSERT_GT(size, 0u);
  for (uint64_t i = 0; i < size; ++i) {
    std::vector<uint8_t> t = b;
    t[off + i] ^= 0x5A;
    uint64_t sum = fnv1a64(t.data() + kHeaderSize, t.size() - kHeaderSize);
    for (int k = 0; k < 8; ++k)
      t[24 + k] = uint8_t(sum >> (8 * k));
    Artifact a;
    std::string err;
    if (!deserialize(t.data(), t.size(), a, err)) {
      EXPECT_FALSE(err.empty());
    }
  }
  // A padding byte that is not zero is named.
  std::vector<uint8_t> t = b;
  t[off + 4 + 13 + 6] = 1; // count, source (13), dtype + 4 modes, pad[0]
  uint64_t sum = fnv1a64(t.data() + kHeaderSize, t.size() - kHeaderSize);
  for (int k = 0; k < 8; ++k)
    t[24 + k] = uint8_t(sum >> (8 * k));
  Artifact a;
  std::string err;
  EXPECT_FALSE(deserialize(t.data(), t.size(), a, err));
  EXPECT_NE(err.find("tensor_maps[0] padding: not zero"), std::string::npos)
      << err;
}

TEST(SessionTensorMap, EvalRunTimeRules) {
  const Artifact a = tmaModel().artifact();
  const TensorMapSpec &t = a.tensorMaps[0];
  k3::rt::TensorMapParams p;
  std::string err;
  int64_t sv[2] = {50, 1};
  ASSERT_TRUE(k3::rt::evalTensorMap(t, sv, 2, 0x10000, 64 * 256, "m", p, err))
      << err;
  EXPECT_EQ(p.rank, 2u);
  EXPECT_EQ(p.dims[0], 128u);
  EXPECT_EQ(p.dims[1], 50u);
  EXPECT_EQ(p.strides[0], 256u);
  EXPECT_EQ(p.box[1], 32u);
  EXPECT_EQ(p.address, 0x10000u);
  // Zero tokens: encoded as one row (the kernel sees num_tokens = 0).
  sv[0] = 0;
  ASSERT_TRUE(k3::rt::evalTensorMap(t, sv, 2, 0x10000, 64 * 256, "m", p, err))
      << err;
  EXPECT_EQ(p.dims[1], 1u);
  sv[0] = 8;
  EXPECT_FALSE(k3::rt::evalTensorMap(t, sv, 2, 0x10008, 64 * 256, "m", p, err));
  EXPECT_NE(err.find("m: global address 0x10008 is not 16-byte aligned"),
            std::string::npos)
      << err;
  EXPECT_FALSE(
      k3::rt::evalTensorMap(t, sv, 2, 0x10000, 8 * 256 - 16, "m", p, err));
  EXPECT_NE(err.find("describes 2048 bytes but its source has 2032"),
            std::string::npos)
      << err;
  TensorMapSpec s = t;
  s.dims[1] = DimExpr::symbol(0, -1, 0, 1);
  EXPECT_FALSE(k3::rt::evalTensorMap(s, sv, 2, 0x10000, 1 << 20, "m", p, err));
  EXPECT_NE(err.find("dim 1 evaluates to -8"), std::string::npos) << err;
  s = t;
  s.strides[0] = DimExpr::symbol(0, 2, 0, 1); // 16 bytes for 8 tokens
  EXPECT_FALSE(k3::rt::evalTensorMap(s, sv, 2, 0x10000, 1 << 20, "m", p, err));
  EXPECT_NE(err.find("stride 1 = 16 bytes is smaller than the 256 bytes"),
            std::string::npos)
      << err;
  s.strides[0] = DimExpr::symbol(0, 36, 0, 1); // 288 for 8 tokens: fine
  EXPECT_TRUE(k3::rt::evalTensorMap(s, sv, 2, 0x10000, 1 << 20, "m", p, err))
      << err;
  sv[0] = 7; // 252: not a multiple of 16
  EXPECT_FALSE(k3::rt::evalTensorMap(s, sv, 2, 0x10000, 1 << 20, "m", p, err));
  EXPECT_NE(err.find("not a positive multiple of 16"), std::string::npos)
      << err;
}

namespace {
// Host memory standing in for a device that encodes tensor maps: an
// "encoded" map is the TensorMapParams bytes.
class FakeTmaBackend : public k3::rt::Backend {
public:
  int encodes = 0, uploads = 0;
  std::string name() const override { return "fake"; }
  bool supportsTarget(const std::string &, std::string &) const override {
    return true;
  }
  bool alloc(size_t n, uint64_t &p, std::string &) override {
    p = uint64_t(uintptr_t(calloc(1, n)));
    return true;
  }
  void release(uint64_t p) override { free(reinterpret_cast<void *>(p)); }
  bool upload(uint64_t d, const void *s, size_t n, std::string &) override {
    ++uploads;
    memcpy(reinterpret_cast<void *>(d), s, n);
    return true;
  }
  bool download(void *d, uint64_t s, size_t n, std::string &) override {
    memcpy(d, reinterpret_cast<void *>(s), n);
    return true;
  }
  bool zero(uint64_t d, size_t n, std::string &) override {
    memset(reinterpret_cast<void *>(d), 0, n);
    return true;
  }
  bool copy(uint64_t d, uint64_t s, size_t n, std::string &) override {
    memmove(reinterpret_cast<void *>(d), reinterpret_cast<void *>(s), n);
    return true;
  }
  bool loadObject(const KernelObject &, size_t, void *&,
                  std::string &) override {
    return true;
  }
  void unloadObject(void *) override {}
  bool getKernel(void *, const std::string &, void *&, std::string &) override {
    return true;
  }
  bool launch(void *, const std::string &, const int64_t *, const int64_t *,
              int64_t, void **, size_t, std::string &) override {
    return true;
  }
  bool synchronize(std::string &) override { return true; }
  bool supportsTensorMaps(std::string &) const override { return true; }
  bool encodeTensorMap(const k3::rt::TensorMapParams &p, void *out,
                       std::string &) override {
    ++encodes;
    EXPECT_EQ(uintptr_t(out) % 64, 0u);
    static_assert(sizeof p <= k3::rt::kTensorMapBytes, "fits a slot");
    memcpy(out, &p, sizeof p);
    return true;
  }
};
} // namespace

TEST(SessionTensorMap, SlotsReencodeOnlyOnChange) {
  const Artifact a = tmaModel().artifact();
  FakeTmaBackend be;
  k3::rt::TensorMapSlots slots;
  slots.plan(a);
  ASSERT_EQ(slots.count(), 2u);
  std::string err;
  ASSERT_TRUE(slots.allocate(be, err)) << err;
  // Buffers and weights at 256-aligned fake addresses.
  std::vector<uint64_t> bufPtr(a.buffers.size()), weightPtr(a.weights.size());
  for (size_t i = 0; i < bufPtr.size(); ++i)
    bufPtr[i] = 0x100000 + 0x10000 * i;
  for (size_t i = 0; i < weightPtr.size(); ++i)
    weightPtr[i] = 0x900000 + 0x10000 * i;
  uint64_t s0 = slots.address(1, 0, 0), s1 = slots.address(1, 0, 2);
  EXPECT_EQ(s0 % 64, 0u);
  EXPECT_EQ(s1, s0 + 128);
  EXPECT_EQ(slots.address(1, 0, 1), 0u); // not a tensor-map argument
  auto mapAt = [](uint64_t slot) {
    k3::rt::TensorMapParams p;
    memcpy(&p, reinterpret_cast<void *>(slot), sizeof p);
    return p;
  };
  std::vector<int64_t> sv = {40, 1};
  slots.refresh(be, a, 1, sv, bufPtr, weightPtr);
  EXPECT_EQ(be.encodes, 2);
  EXPECT_EQ(mapAt(s0).dims[1], 40u);
  EXPECT_EQ(mapAt(s0).address, bufPtr[a.findBuffer("tma.x")]);
  EXPECT_EQ(mapAt(s1).address, weightPtr[a.findWeight("tma.w")]);
  slots.refresh(be, a, 1, sv, bufPtr, weightPtr); // same values: nothing
  EXPECT_EQ(be.encodes, 2);
  sv[0] = 33; // only the symbol-dependent map changes
  slots.refresh(be, a, 1, sv, bufPtr, weightPtr);
  EXPECT_EQ(be.encodes, 3);
  EXPECT_EQ(mapAt(s0).dims[1], 33u);
  sv[0] = 0; // empty grid: the launch is skipped, nothing encoded
  slots.refresh(be, a, 1, sv, bufPtr, weightPtr);
  EXPECT_EQ(be.encodes, 3);
  EXPECT_EQ(mapAt(s0).dims[1], 33u);
  weightPtr[a.findWeight("tma.w")] += 0x100; // a new address re-encodes
  sv[0] = 33;
  slots.refresh(be, a, 1, sv, bufPtr, weightPtr);
  EXPECT_EQ(be.encodes, 4);
  weightPtr[a.findWeight("tma.w")] += 8; // misaligned: a clear error
  try {
    slots.refresh(be, a, 1, sv, bufPtr, weightPtr);
    ADD_FAILURE() << "no error";
  } catch (const k3::rt::Error &e) {
    EXPECT_EQ(e.status, K3_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.message.find("entry 'tma' launch 0 ('k3t_fill') arg 2: tensor "
                             "map 1: global address"),
              std::string::npos)
        << e.message;
  }
  slots.release(be);
}

namespace {
bool open(const Artifact &a, Handles &h, const char *device) {
  std::vector<uint8_t> bytes;
  std::string err;
  EXPECT_TRUE(serialize(a, bytes, err)) << err;
  EXPECT_EQ(k3_artifact_open_memory(bytes.data(), bytes.size(), &h.art), K3_OK)
      << k3_last_error();
  return k3_session_create(h.art, device, &h.s) == K3_OK;
}
} // namespace

TEST(SessionTensorMap, CpuRefusesTensorMaps) {
  {
    // Only a tensor-map entry: the session cannot be created.
    Handles h;
    EXPECT_FALSE(open(tmaModel(false).artifact(), h, "cpu"));
    std::string e = k3_last_error();
    EXPECT_NE(e.find("entry 'tma' launch 0 ('k3t_fill') arg 0 is a TMA tensor "
                     "map: tensor maps need a CUDA device (this is cpu)"),
              std::string::npos)
        << e;
  }
  {
    // With a runnable entry too: creation works, running 'tma' fails.
    Handles h;
    ASSERT_TRUE(open(tmaModel().artifact(), h, "cpu")) << k3_last_error();
    k3_symbol_value sv[1] = {{"num_tokens", 8}};
    EXPECT_EQ(k3_session_run(h.s, "tma", sv, 1, nullptr, 0),
              K3_ERROR_NO_DEVICE);
    std::string e = k3_last_error();
    EXPECT_NE(e.find("tensor maps need a CUDA device"), std::string::npos) << e;
  }
}

// ------------------------------------------------------------ CUDA only
namespace {
std::unique_ptr<k3::rt::Backend> cudaOrSkip(std::string &why) {
  auto be = k3::rt::createCudaBackend(0, why);
  if (be && !be->supportsTensorMaps(why))
    return nullptr;
  return be;
}
uint16_t bf16Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
} // namespace

TEST(SessionTensorMapCuda, EncodeBf16Map) {
  std::string why;
  auto be = cudaOrSkip(why);
  if (!be)
    GTEST_SKIP() << why;
  uint64_t buf = 0;
  std::string err;
  ASSERT_TRUE(be->alloc(64 * 128 * 2, buf, err)) << err;
  // bf16 [64, 128]: dims {128, 64}, row stride 256 bytes, box {64, 64},
  // 128B swizzle (64 bf16 = 128 bytes innermost).
  k3::rt::TensorMapParams p;
  p.dtype = DType::BF16;
  p.rank = 2;
  p.address = buf;
  p.dims[0] = 128;
  p.dims[1] = 64;
  p.strides[0] = 256;
  p.box[0] = 64;
  p.box[1] = 64;
  p.swizzle = 3;
  p.l2Promotion = 2;
  alignas(128) uint8_t map[128];
  memset(map, 0, sizeof map);
  ASSERT_TRUE(be->encodeTensorMap(p, map, err)) << err;
  bool nonzero = false;
  for (uint8_t c : map)
    nonzero |= c != 0;
  EXPECT_TRUE(nonzero);
  // Deterministic: the same parameters encode the same bytes.
  alignas(128) uint8_t again[128];
  ASSERT_TRUE(be->encodeTensorMap(p, again, err)) << err;
  EXPECT_EQ(memcmp(map, again, 128), 0);
  // The driver rejects what the format's checks would have caught
  // (an 8-byte aligned address).
  p.address = buf + 8;
  EXPECT_FALSE(be->encodeTensorMap(p, map, err));
  EXPECT_NE(err.find("cuTensorMapEncodeTiled"), std::string::npos) << err;
  be->release(buf);
}

TEST(SessionTensorMapCuda, TmaCopyKernelThroughSession) {
  std::string why;
  if (!cudaOrSkip(why))
    GTEST_SKIP() << why;
  std::vector<uint8_t> ptx;
  ASSERT_TRUE(readWholeFile(std::string(K3_TEST_FIXTURES_DIR) + "/tma_copy.ptx",
                            ptx, why))
      << why;
  // x: bf16 [num_tokens, 128] (input), y: bf16 [64, 128] (output). One CTA
  // per 64 x 32 tile of x; rows past num_tokens come back zero (TMA's
  // out-of-bounds fill).
  Builder b;
  uint32_t nt = b.addSymbol("num_tokens", 64);
  uint32_t obj = b.addKernelObject(kTargetCudaSm90a, ptx, {"k3t_tma_copy"});
  uint32_t x = b.addBuffer("x", BufferKind::Input, 64 * 256);
  uint32_t y = b.addBuffer("y", BufferKind::Output, 64 * 256);
  TensorMapSpec t = rowsMap(x, nt);
  t.swizzle = 0; // the kernel reads the tile row-major
  uint32_t m = b.addTensorMap(t);
  uint32_t e = b.addEntry("copy");
  b.addInput(e, "x", DType::BF16, {DimExpr::symbol(nt), DimExpr::constant(128)},
             x);
  b.addOutput(e, "y", DType::BF16,
              {DimExpr::constant(64), DimExpr::constant(128)}, y);
  DimExpr grid[3] = {DimExpr::constant(2), DimExpr::symbol(nt, 1, 0, 32),
                     DimExpr::constant(1)};
  DimExpr block[3] = {DimExpr::constant(128), DimExpr::constant(1),
                      DimExpr::constant(1)};
  b.addLaunch(e, obj, "k3t_tma_copy",
              {Arg::tensorMap(m), Arg::buffer(y), Arg::i64(128)}, grid, block);
  Handles h;
  ASSERT_TRUE(open(b.artifact(), h, "cuda:0")) << k3_last_error();
  auto run = [&](int64_t tokens, float base) {
    std::vector<uint16_t> in(size_t(tokens) * 128);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = bf16Bits(base + float(i % 1000));
    int64_t shape[2] = {tokens, 128};
    k3_host_tensor ht{};
    ht.name = "x";
    ht.dtype = K3_DTYPE_BF16;
    ht.rank = 2;
    ht.shape = shape;
    ht.data = in.data();
    ht.nbytes = in.size() * 2;
    k3_symbol_value sv[1] = {{"num_tokens", tokens}};
    ASSERT_EQ(k3_session_run(h.s, "copy", sv, 1, &ht, 1), K3_OK)
        << k3_last_error();
    k3_tensor_view v;
    ASSERT_EQ(k3_session_find_output(h.s, "y", &v), K3_OK) << k3_last_error();
    ASSERT_EQ(v.nbytes, size_t(64 * 128 * 2));
    std::vector<uint16_t> out(64 * 128);
    memcpy(out.data(), v.data, v.nbytes);
    int64_t covered = (tokens + 31) / 32 * 32; // rows the tiles wrote
    for (int64_t r = 0; r < covered; ++r)
      for (int64_t c = 0; c < 128; ++c) {
        uint16_t want = r < tokens ? in[size_t(r * 128 + c)] : 0;
        ASSERT_EQ(out[size_t(r * 128 + c)], want)
            << "tokens " << tokens << " row " << r << " col " << c;
      }
  };
  // 64 tokens, then 50 three times (the decode-loop pattern: the second
  // captures a launch graph, the third replays it), then 64 and 50 again:
  // the replayed graph must see the map re-encoded for 50 rows.
  run(64, 1.f);
  run(50, 2.f);
  run(50, 3.f);
  run(50, 4.f);
  run(64, 5.f);
  run(50, 6.f);
  size_t captured = 0, replayed = 0;
  k3_session_graph_stats(h.s, &captured, &replayed);
  EXPECT_GE(captured, 1u);
  EXPECT_GE(replayed, 2u);
  // Zero tokens: an empty grid, skipped.
  k3_symbol_value sv[1] = {{"num_tokens", 0}};
  int64_t shape[2] = {0, 128};
  k3_host_tensor ht{};
  ht.name = "x";
  ht.dtype = K3_DTYPE_BF16;
  ht.rank = 2;
  ht.shape = shape;
  EXPECT_EQ(k3_session_run(h.s, "copy", sv, 1, &ht, 1), K3_OK)
      << k3_last_error();
}

#include <gtest/gtest.h>

#include <cstring>

#include "fixtures/artifact_bytes.h"
#include "fixtures/toy_model.h"
#include "k3/artifact.h"

using namespace k3::artifact;
using k3test::bytesOf;
using k3test::fixChecksum;
using k3test::readErr;

namespace {

Artifact richArtifact() {
  Builder b = k3test::toyModel();
  b.setMetadata("max_seq_len", "4096");
  b.addWeight("norm.w", DType::BF16, {16}, WeightInit::constant(1.0));
  b.addWeight("u.w", DType::F16, {2, 3}, WeightInit::uniform(0.5));
  b.addWeight("ids", DType::I32, {}, WeightInit());
  b.addKernelObject(kTargetCudaSm90a, std::vector<uint8_t>(100, 7),
                    {"kern_a", "kern_b"});
  uint32_t e = b.addEntry("decode");
  Launch l;
  l.object = 1;
  l.kernel = "kern_b";
  l.grid[0] = DimExpr::symbol(0, 3, 5, 128);
  l.block[0] = DimExpr::constant(256);
  l.sharedMemBytes = DimExpr::constant(100000);
  l.args = {Arg::buffer(5, 16),         Arg::weight(1),  Arg::i32(-7),
            Arg::i64(int64_t(1) << 40), Arg::f32(0.25f), Arg::symbol(1)};
  // Section ANED: what kern_b takes through each argument.
  const Weight &w = b.artifact().weights[1];
  uint64_t numel = 1;
  for (int64_t d : w.shape)
    numel *= uint64_t(d);
  auto none = [](ArgKind k) { return ArgNeed{k, DimExpr::constant(0)}; };
  l.needs = {ArgNeed{ArgKind::Buffer, DimExpr::symbol(0, 4, 0, 1), 0,
                     ArgAccess::Written},
             ArgNeed{ArgKind::Weight,
                     DimExpr::constant(int64_t(tensorBytes(w.dtype, numel)))},
             none(ArgKind::I32),
             none(ArgKind::I64),
             none(ArgKind::F32),
             none(ArgKind::Symbol)};
  b.addLaunch(e, l);
  return b.artifact();
}

} // namespace

TEST(Artifact, RoundTrip) {
  Artifact a = richArtifact();
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  Artifact b;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(*b.meta(kMetaCallingConvention), kCallingConvention);
  EXPECT_EQ(b.entries[1].launches[0].args[4].fimm, 0.25f);
  EXPECT_EQ(b.entries[1].launches[0].args[2].imm, -7);
  // Deterministic encoding.
  std::vector<uint8_t> again;
  ASSERT_TRUE(serialize(b, again, err));
  EXPECT_EQ(bytes, again);
}

TEST(Artifact, FileRoundTrip) {
  Artifact a = richArtifact();
  std::string path = std::string(K3_TEST_TMPDIR) + "/rt.k3bin", err;
  ASSERT_TRUE(writeFile(path, a, err)) << err;
  Artifact b;
  ASSERT_TRUE(readFile(path, b, err)) << err;
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(readFile(path + ".missing", b, err));
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
}

TEST(Artifact, EmptyArtifact) {
  Builder b;
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(b.serialize(bytes, err)) << err;
  Artifact a;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), a, err)) << err;
  EXPECT_TRUE(a == b.artifact());
}

TEST(Artifact, EvalDim) {
  int64_t sv[2] = {10, 3}, v;
  std::string err;
  ASSERT_TRUE(evalDim(DimExpr::constant(7), sv, 2, v, err));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(evalDim(DimExpr::symbol(0, 3, 5, 4), sv, 2, v, err));
  EXPECT_EQ(v, 9); // ceil(35/4)
  ASSERT_TRUE(evalDim(DimExpr::symbol(1, 1, 1), sv, 2, v, err));
  EXPECT_EQ(v, 4);
  ASSERT_TRUE(evalDim(DimExpr::symbol(0, -1, 3, 2), sv, 2, v, err));
  EXPECT_EQ(v, -3); // ceil(-7/2)
  EXPECT_FALSE(
      evalDim(DimExpr::symbol(0, INT64_MAX, INT64_MAX), sv, 2, v, err));
  EXPECT_FALSE(evalDim(DimExpr::symbol(5), sv, 2, v, err));
  EXPECT_FALSE(evalDim(DimExpr::symbol(0, 1, 0, 0), sv, 2, v, err));
  EXPECT_EQ(dimToString(DimExpr::symbol(0, 2, 1, 3), {"n"}),
            "ceil_div(2*n+1, 3)");
}

TEST(ArtifactErrors, TooSmall) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b.resize(10);
  EXPECT_NE(readErr(b).find("file too small"), std::string::npos);
}

TEST(ArtifactErrors, Truncated) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  for (size_t cut : {size_t(64), size_t(100), b.size() / 2, b.size() - 1}) {
    std::vector<uint8_t> t(b.begin(), b.begin() + long(cut));
    std::string e = readErr(t);
    EXPECT_NE(e.find("file_size"), std::string::npos) << e;
    EXPECT_EQ(e.rfind("offset 16:", 0), 0u) << e;
  }
}

TEST(ArtifactErrors, BadMagic) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[1] = 'X';
  EXPECT_NE(readErr(b).find("bad magic"), std::string::npos);
}

TEST(ArtifactErrors, WrongVersion) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[8] = 2;
  std::string e = readErr(b);
  EXPECT_NE(e.find("unsupported format version 2." +
                   std::to_string(kVersionMinor) + " (this runtime reads 1.x)"),
            std::string::npos)
      << e;
}

TEST(ArtifactErrors, NewerMinorVersionAndUnknownSectionAccepted) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[12] = 3; // minor 3
  fixChecksum(b);
  Artifact a;
  std::string err;
  EXPECT_TRUE(deserialize(b.data(), b.size(), a, err)) << err;
}

TEST(ArtifactErrors, BadChecksum) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[b.size() - 3] ^= 0x40;
  std::string e = readErr(b);
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
}

TEST(ArtifactErrors, SectionOutOfFile) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[64 + 8 + 5] = 0x7f; // META offset huge
  fixChecksum(b);
  std::string e = readErr(b);
  EXPECT_NE(e.find("outside the payload"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("offset 72:", 0), 0u) << e;
}

TEST(ArtifactErrors, MissingSection) {
  std::vector<uint8_t> b = bytesOf(richArtifact());
  b[64] = 'Z'; // rename META -> unknown tag
  fixChecksum(b);
  std::string e = readErr(b);
  EXPECT_NE(e.find("missing required section 'META'"), std::string::npos) << e;
}

TEST(ArtifactErrors, HugeCountRejected) {
  Builder bld;
  std::vector<uint8_t> b = bytesOf(bld.artifact());
  // SYMS is the 2nd section; its count is the first u32 of its body.
  uint64_t off = 0;
  for (int k = 0; k < 8; ++k)
    off |= uint64_t(b[64 + 24 + 8 + k]) << (8 * k);
  b[off + 3] = 0x7f;
  fixChecksum(b);
  std::string e = readErr(b);
  EXPECT_NE(e.find("impossible"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("offset " + std::to_string(off) + ":", 0), 0u) << e;
}

TEST(ArtifactErrors, OutOfRangeIds) {
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].args[0].index = 99;
    std::string e = readErr(a);
    EXPECT_NE(e.find("entries[0].launches[0].args[0]: entry 'forward' launch 0 "
                     "('k3t_toy_logits'): buffer id 99 out of range"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.rfind("offset ", 0), 0u) << e;
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[1].object = 5;
    EXPECT_NE(readErr(a).find("object index 5 out of range"),
              std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].args[1].index = 42;
    EXPECT_NE(readErr(a).find("weight index 42 out of range"),
              std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].args[6].index = 9;
    EXPECT_NE(readErr(a).find("symbol index 9 out of range"),
              std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].kernel = "nope";
    EXPECT_NE(readErr(a).find("kernel symbol not listed"), std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].inputs[0].buffer = 77;
    EXPECT_NE(readErr(a).find("input 'token_ids': buffer id 77 out of range"),
              std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].args[0].offset = 1 << 20;
    EXPECT_NE(readErr(a).find("outside buffer 'token_ids'"), std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].launches[0].grid[0].c = 0;
    EXPECT_NE(readErr(a).find("grid.x"), std::string::npos);
  }
  {
    Artifact a = richArtifact();
    a.entries[0].inputs[0].shape[0].sym = 12;
    EXPECT_NE(readErr(a).find("shape[0]"), std::string::npos);
  }
}

TEST(ArtifactErrors, SemanticChecks) {
  auto expectErr = [](Artifact a, const char *needle) {
    std::string e = readErr(a);
    EXPECT_NE(e.find(needle), std::string::npos) << e;
    std::vector<uint8_t> out;
    std::string err;
    EXPECT_FALSE(serialize(a, out, err)); // the builder refuses too
  };
  Artifact base = richArtifact();
  {
    Artifact a = base;
    a.weights.push_back(a.weights[0]);
    expectErr(a, "duplicate weight 'embed.W'");
  }
  {
    Artifact a = base;
    a.weights[0].shape = {-1};
    expectErr(a, "negative dim");
  }
  {
    Artifact a = base;
    a.buffers[5].arenaOffset = 8;
    expectErr(a, "not 16-byte aligned");
  }
  {
    Artifact a = base;
    a.buffers[4].perSeqStride = 3;
    expectErr(a, "not a multiple of the per-sequence stride");
  }
  {
    Artifact a = base;
    a.buffers[0].size = 4;
    expectErr(a, "at the symbols' max bounds");
  }
  {
    Artifact a = base;
    a.symbols[0].maxValue = -1;
    expectErr(a, "negative max");
  }
  {
    Artifact a = base;
    a.objects[0].data.clear();
    expectErr(a, "empty object data");
  }
  {
    Artifact a = base;
    a.metadata.push_back(a.metadata[0]);
    expectErr(a, "duplicate key");
  }
  {
    Artifact a = base;
    a.entries[0].outputs[0].buffer = 0;
    expectErr(a, "output bound to input buffer");
  }
  {
    Artifact a = base;
    a.buffers[0].device = 1;
    expectErr(a, "device 1 but the launch is on device 0");
  }
  {
    Artifact a = base;
    a.weights[0].init.param = -1;
    expectErr(a, "negative init");
  }
  {
    // mxfp4: whole 32-element scale blocks, and a weight dtype only.
    Artifact a = base;
    a.weights[0].dtype = DType::MXFP4;
    a.weights[0].shape = {8, 48};
    expectErr(a, "mxfp4 needs a last dimension that is a multiple of 32");
  }
  {
    Artifact a = base;
    a.entries[0].outputs[0].dtype = DType::MXFP4;
    expectErr(a, "invalid dtype");
  }
}

// Launch dimensions at the symbols' max bounds within CUDA's limits, and a
// CPU kernel's grid within what the CPU backend runs block by block: a
// mutated grid kept k3-run busy for minutes before these checks.
TEST(ArtifactErrors, LaunchDimensionBounds) {
  Artifact base = richArtifact();
  auto expectErr = [](Artifact a, const char *needle) {
    std::string e = readErr(a);
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  auto cuda = [](Artifact &a) -> Launch & { return a.entries[1].launches[0]; };
  {
    Artifact a = base;
    cuda(a).grid[1] = DimExpr::constant(65536);
    expectErr(a, "grid.y ranges over [65536, 65536]");
  }
  {
    Artifact a = base;
    cuda(a).grid[0] = DimExpr::symbol(0, int64_t(1) << 40, 0, 1);
    expectErr(a, "grid.x ranges over [0, ");
  }
  {
    Artifact a = base;
    cuda(a).block[0] = DimExpr::constant(0);
    expectErr(a, "block.x ranges over [0, 0]");
  }
  {
    Artifact a = base;
    cuda(a).block[0] = DimExpr::constant(32);
    cuda(a).block[1] = DimExpr::constant(32);
    cuda(a).block[2] = DimExpr::constant(2);
    expectErr(a, "2048 threads a block");
  }
  {
    Artifact a = base;
    cuda(a).sharedMemBytes = DimExpr::constant(300000);
    expectErr(a, "shared_mem ranges over [300000, 300000]");
  }
  {
    Artifact a = base;
    Launch &l = a.entries[0].launches[0]; // the toy model's CPU kernel
    ASSERT_EQ(a.objects[l.object].target, kTargetCpuX86_64);
    l.grid[0] = DimExpr::constant(2048);
    l.grid[1] = DimExpr::constant(1024);
    expectErr(a, "2097152 blocks of a CPU kernel");
  }
  {
    // The same grid on a CUDA kernel is within its limits.
    Artifact a = base;
    cuda(a).grid[0] = DimExpr::constant(2048);
    cuda(a).grid[1] = DimExpr::constant(1024);
    std::vector<uint8_t> out;
    std::string err;
    ASSERT_TRUE(serialize(a, out, err)) << err;
    Artifact back;
    EXPECT_TRUE(deserialize(out.data(), out.size(), back, err)) << err;
  }
}

TEST(Artifact, MXFP4Bytes) {
  // Codes at half a byte an element, one scale byte per 32 elements.
  EXPECT_EQ(tensorBytes(DType::MXFP4, 8 * 64), 8u * 64 / 2 + 8 * 64 / 32);
  EXPECT_EQ(tensorBytes(DType::BF16, 10), 20u);
  EXPECT_EQ(dtypeSize(DType::MXFP4), 0u);
  EXPECT_STREQ(dtypeName(DType::MXFP4), "mxfp4");
  DType d;
  ASSERT_TRUE(parseDType("mxfp4", d));
  EXPECT_EQ(d, DType::MXFP4);
}

TEST(ArtifactErrors, InvalidEnumBytes) {
  Artifact a = richArtifact();
  a.weights[0].dtype = DType(9);
  std::string e = readErr(a);
  EXPECT_NE(e.find("weight 'embed.W' dtype: invalid dtype code 9"),
            std::string::npos)
      << e;
  Artifact b = richArtifact();
  b.entries[0].launches[0].args[0].kind = ArgKind(17);
  e = readErr(b);
  EXPECT_NE(e.find("invalid arg kind 17"), std::string::npos) << e;
}

TEST(ArtifactErrors, EveryTruncationPointFailsCleanly) {
  // Shrink the body of the ENTR section at every length: each must fail with a
  // precise error, never crash.
  std::vector<uint8_t> b = bytesOf(richArtifact());
  for (size_t i = 0; i + 1 < b.size(); i += 7) {
    std::vector<uint8_t> t = b;
    t[i] ^= 0xA5;
    fixChecksum(t);
    Artifact a;
    std::string err;
    if (!deserialize(t.data(), t.size(), a, err)) {
      EXPECT_FALSE(err.empty());
    }
  }
}

// Section ANED: a launch argument that is not what its kernel takes (a
// smaller buffer, another kind) is rejected before anything runs.
TEST(ArtifactErrors, LaunchArgumentNeeds) {
  Artifact base = richArtifact();
  auto launch = [](Artifact &a) -> Launch & {
    return a.entries[1].launches[0];
  };
  ASSERT_EQ(launch(base).needs.size(), launch(base).args.size());
  {
    Artifact a = base;
    launch(a).needs[0].bytes = DimExpr::constant(int64_t(1) << 40);
    std::string e = readErr(a);
    EXPECT_NE(e.find("argument 0: its kernel may touch 1099511627776 bytes"),
              std::string::npos)
        << e;
  }
  {
    Artifact a = base;
    launch(a).args[5] = Arg::weight(0); // a symbol turned into a pointer
    std::string e = readErr(a);
    EXPECT_NE(e.find("argument 5 is a weight but its kernel takes a symbol"),
              std::string::npos)
        << e;
  }
  {
    Artifact a = base;
    launch(a).needs[1].bytes = DimExpr::constant(1 << 20); // a larger weight
    std::string e = readErr(a);
    EXPECT_NE(e.find("weight 'norm.w' offers 32"), std::string::npos) << e;
  }
  {
    Artifact a = base;
    launch(a).needs[2].bytes = DimExpr::constant(4);
    std::string e = readErr(a);
    EXPECT_NE(e.find("a i32 needs no bytes"), std::string::npos) << e;
  }
  {
    Artifact a = base;
    launch(a).needs.pop_back();
    std::string e = readErr(a);
    EXPECT_NE(e.find("5 needs for 6 arguments"), std::string::npos) << e;
  }
  {
    Artifact a = base;
    launch(a).needs[0].access = ArgAccess(3);
    std::string e = readErr(a);
    EXPECT_NE(e.find("argument 0: access 3 (0 unknown, 1 read, 2 written)"),
              std::string::npos)
        << e;
  }
  {
    Artifact a = base;
    launch(a).needs[5].access = ArgAccess::Read; // a symbol is not memory
    std::string e = readErr(a);
    EXPECT_NE(e.find("argument 5: access 1 on a symbol (only buffers have "
                     "one)"),
              std::string::npos)
        << e;
  }
}

// Section ANED's input byte: an argument the compiler bound to an entry
// input (its kernel reads indices from it, which the runtime checks on that
// input) must stay that input: re-bound to another buffer of enough bytes
// (the run fuzzer's crash: an activation read as context lengths) it is
// rejected.
TEST(ArtifactErrors, LaunchArgumentBoundToAnInput) {
  Builder b = k3test::toyModel();
  for (Launch &l : b.artifact().entries[0].launches)
    for (const Arg &g : l.args)
      l.needs.push_back(ArgNeed{g.kind, DimExpr::constant(0)});
  b.bindNeedsToInputs(0);
  const Launch &toy = b.artifact().entries[0].launches[0];
  // token_ids, cu_seqlens and positions are inputs 0, 1, 2; the logits and
  // the state are not inputs.
  EXPECT_EQ(toy.needs[0].input, 1);
  EXPECT_EQ(toy.needs[2].input, 0);
  EXPECT_EQ(toy.needs[4].input, 2);
  EXPECT_EQ(toy.needs[5].input, 3);
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(b.serialize(bytes, err)) << err;
  Artifact back;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), back, err)) << err;
  EXPECT_TRUE(back == b.artifact());
  {
    Artifact a = b.artifact();
    // cu_seqlens' argument given the positions (an input of enough bytes).
    a.entries[0].launches[0].args[4] = a.entries[0].launches[0].args[5];
    std::string e = readErr(a);
    EXPECT_NE(e.find("argument 4 must be input 'cu_seqlens' (its kernel "
                     "reads its values), not buffer 'positions'"),
              std::string::npos)
        << e;
  }
  {
    Artifact a = b.artifact();
    a.entries[0].launches[0].needs[0].input = 9;
    std::string e = readErr(a);
    EXPECT_NE(e.find("input 8 out of range (the entry has 3)"),
              std::string::npos)
        << e;
  }
}

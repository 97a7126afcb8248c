// Bounds on the values of entry inputs (TensorSpec::maxValue, section IMAX
// of format 1.2): encoding, the reader's checks, describe, and the session
// refusing a run that breaks one before any launch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fixtures/artifact_bytes.h"
#include "fixtures/toy_model.h"
#include "k3/artifact.h"
#include "k3/k3_runtime.h"

using namespace k3::artifact;
using k3test::bytesOf;
using k3test::fixChecksum;
using k3test::Handles;
using k3test::readErr;

namespace {

const char *kReason = "the expanded prefill attention needs empty sequences";

// The toy LM with an input `context_lens [num_seqs]` (the kernels do not
// read it) whose values are bounded by `bound`.
Builder boundedToy(int64_t bound = 0, std::string reason = kReason) {
  Builder b = k3test::toyModel();
  uint32_t buf =
      b.addBuffer("context_lens", BufferKind::Input, k3test::kToyMaxSeqs * 4);
  uint32_t in =
      b.addInput(0, "context_lens", DType::I32, {DimExpr::symbol(1)}, buf);
  b.setInputMaxValue(0, in, bound, std::move(reason));
  return b;
}

// File offset of section `tag`'s body, 0 if absent.
uint64_t sectionOffset(const std::vector<uint8_t> &b, const char *tag) {
  uint32_t n;
  memcpy(&n, &b[32], 4);
  for (uint32_t i = 0; i < n; ++i)
    if (memcmp(&b[64 + 24 * i], tag, 4) == 0) {
      uint64_t off;
      memcpy(&off, &b[64 + 24 * i + 8], 8);
      return off;
    }
  return 0;
}

void putU32(std::vector<uint8_t> &b, uint64_t at, uint32_t v) {
  memcpy(&b[at], &v, 4);
}

void open(const Artifact &a, Handles &h) {
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  ASSERT_EQ(k3_artifact_open_memory(bytes.data(), bytes.size(), &h.art), K3_OK)
      << k3_last_error();
  ASSERT_EQ(k3_session_create(h.art, "cpu", &h.s), K3_OK) << k3_last_error();
  ASSERT_EQ(k3_session_init_random_weights(h.s, 1), K3_OK) << k3_last_error();
}

// One call of two sequences of one token each, with these context lengths;
// on the host, or (`device`) through k3_session_run_device, whose CPU
// "device" addresses are host addresses.
k3_status runCtx(k3_session *s, std::vector<int32_t> ctx, bool device = false) {
  int64_t nt = 2, ns = 2, ncu = 3;
  std::vector<int32_t> toks = {1, 2}, cu = {0, 1, 2}, pos = {0, 0};
  k3_symbol_value sv[2] = {{"num_tokens", nt}, {"num_seqs", ns}};
  if (!device) {
    k3_host_tensor in[4] = {
        {"token_ids", K3_DTYPE_I32, 1, &nt, toks.data(), 8},
        {"cu_seqlens", K3_DTYPE_I32, 1, &ncu, cu.data(), 12},
        {"positions", K3_DTYPE_I32, 1, &nt, pos.data(), 8},
        {"context_lens", K3_DTYPE_I32, 1, &ns, ctx.data(), 8}};
    return k3_session_run(s, "forward", sv, 2, in, 4);
  }
  auto addr = [](std::vector<int32_t> &v) {
    return uint64_t(uintptr_t(v.data()));
  };
  k3_device_tensor in[4] = {
      {"token_ids", K3_DTYPE_I32, 1, &nt, addr(toks), 8},
      {"cu_seqlens", K3_DTYPE_I32, 1, &ncu, addr(cu), 12},
      {"positions", K3_DTYPE_I32, 1, &nt, addr(pos), 8},
      {"context_lens", K3_DTYPE_I32, 1, &ns, addr(ctx), 8}};
  return k3_session_run_device(s, "forward", sv, 2, in, 4);
}

} // namespace

TEST(ArtifactInputBound, RoundTrip) {
  Artifact a = boundedToy().artifact();
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  EXPECT_NE(sectionOffset(bytes, "IMAX"), 0u);
  Artifact b;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(b.versionMinor, kVersionMinor);
  const TensorSpec &t = b.entries[0].inputs[3];
  EXPECT_EQ(t.name, "context_lens");
  ASSERT_TRUE(t.maxValue.has_value());
  EXPECT_EQ(*t.maxValue, 0);
  EXPECT_EQ(t.maxValueReason, kReason);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(b.entries[0].inputs[i].maxValue.has_value());
    EXPECT_TRUE(b.entries[0].inputs[i].maxValueReason.empty());
  }
  // The fields take part in ==.
  Artifact c = b;
  c.entries[0].inputs[3].maxValue = 1;
  EXPECT_FALSE(c == b);
  c = b;
  c.entries[0].inputs[3].maxValueReason = "other";
  EXPECT_FALSE(c == b);
  // A bound without a reason, and a large one.
  Artifact d = boundedToy(int64_t(1) << 40, "").artifact();
  ASSERT_TRUE(serialize(d, bytes, err)) << err;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_TRUE(d == b);
  EXPECT_EQ(*b.entries[0].inputs[3].maxValue, int64_t(1) << 40);
  // Deterministic encoding.
  std::vector<uint8_t> again;
  ASSERT_TRUE(serialize(b, again, err)) << err;
  EXPECT_EQ(bytes, again);
  // The seed of the artifact fuzzer's corpus
  // (K3_WRITE_INPUT_BOUND_FUZZ_SEED=path): small, so the kernel object is a
  // stand-in.
  if (const char *p = getenv("K3_WRITE_INPUT_BOUND_FUZZ_SEED")) {
    Artifact small = a;
    small.objects[0].data = {0x7f, 'E', 'L', 'F'};
    ASSERT_TRUE(writeFile(p, small, err)) << err;
  }
}

TEST(ArtifactInputBound, WithoutBoundsNoSectionAndOlderFilesLoad) {
  Artifact a = k3test::toyModel().artifact();
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  EXPECT_EQ(sectionOffset(bytes, "IMAX"), 0u);
  // A 1.1 file (no IMAX) reads as inputs without bounds.
  bytes[12] = 1;
  fixChecksum(bytes);
  Artifact b;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_EQ(b.versionMinor, 1u);
  for (const TensorSpec &t : b.entries[0].inputs)
    EXPECT_FALSE(t.maxValue.has_value());
}

TEST(ArtifactInputBound, ValidationErrors) {
  // Refused by the writer (validate) and, where the file can say it, by the
  // reader, with the offset of the IMAX record.
  auto expectErr = [](const Artifact &a, const std::string &needle,
                      bool inFile) {
    std::vector<uint8_t> out;
    std::string err;
    EXPECT_FALSE(serialize(a, out, err)) << needle;
    EXPECT_NE(err.find(needle), std::string::npos) << err;
    if (!inFile)
      return;
    std::vector<uint8_t> b = bytesOf(a);
    uint64_t imax = sectionOffset(b, "IMAX");
    std::string e = readErr(b);
    EXPECT_NE(e.find(needle), std::string::npos) << e;
    EXPECT_EQ(e.rfind("offset " + std::to_string(imax + 4) + ":", 0), 0u) << e;
  };
  Artifact base = boundedToy().artifact();
  {
    Artifact a = base;
    a.entries[0].inputs[3].maxValue = -1;
    expectErr(a,
              "entries[0].inputs[3].max_value: entry 'forward' input "
              "'context_lens': max_value -1 is negative",
              true);
  }
  {
    Artifact a = base;
    a.entries[0].inputs[3].dtype = DType::F32;
    expectErr(a,
              "entry 'forward' input 'context_lens': max_value 0 on a f32 "
              "input (value bounds need an integer dtype)",
              true);
  }
  {
    Artifact a = base;
    a.entries[0].outputs[0].maxValue = 3;
    expectErr(a,
              "entries[0].outputs[0].max_value: entry 'forward' output "
              "'logits': max_value 3 on an output",
              false);
  }
  {
    Artifact a = base;
    a.entries[0].inputs[3].maxValue.reset();
    expectErr(a,
              "entry 'forward' input 'context_lens': max_value reason '" +
                  std::string(kReason) + "' without a max_value",
              false);
  }
}

TEST(ArtifactInputBound, MalformedSection) {
  Builder bld = boundedToy();
  bld.setInputMaxValue(0, 0, 15, "vocabulary"); // token_ids, record 0
  std::vector<uint8_t> good = bytesOf(bld.artifact());
  uint64_t imax = sectionOffset(good, "IMAX");
  ASSERT_NE(imax, 0u);
  // Record 0 at imax + 4: u32 entry, u32 input, i64 max, str reason.
  uint64_t rec1 = imax + 4 + 20 + strlen("vocabulary");
  {
    std::vector<uint8_t> b = good;
    putU32(b, imax + 4, 9);
    fixChecksum(b);
    std::string e = readErr(b);
    EXPECT_EQ(e, "offset " + std::to_string(imax + 4) +
                     ": input_bounds[0] entry: entry index 9 out of range (1 "
                     "entries)");
  }
  {
    std::vector<uint8_t> b = good;
    putU32(b, rec1 + 4, 7);
    fixChecksum(b);
    std::string e = readErr(b);
    EXPECT_EQ(e, "offset " + std::to_string(rec1 + 4) +
                     ": input_bounds[1] input: input index 7 out of range "
                     "(entry 'forward' has 4 inputs)");
  }
  {
    std::vector<uint8_t> b = good;
    putU32(b, rec1 + 4, 0); // the second record bounds token_ids again
    fixChecksum(b);
    std::string e = readErr(b);
    EXPECT_NE(e.find("input_bounds[1] input: entry 'forward' input "
                     "'token_ids' has two value bounds"),
              std::string::npos)
        << e;
  }
  {
    std::vector<uint8_t> b = good;
    putU32(b, imax + 4 + 16, 1000); // reason length past the section
    fixChecksum(b);
    std::string e = readErr(b);
    EXPECT_NE(e.find("input 'token_ids' max_value reason: truncated"),
              std::string::npos)
        << e;
  }
  {
    std::vector<uint8_t> b = good;
    putU32(b, imax, 1000000); // record count
    fixChecksum(b);
    std::string e = readErr(b);
    EXPECT_NE(e.find("input bound count: count 1000000 is impossible"),
              std::string::npos)
        << e;
  }
}

TEST(ArtifactInputBound, Describe) {
  std::string d = describe(boundedToy().artifact());
  EXPECT_NE(d.find("  input context_lens: i32 [num_seqs], values <= 0: " +
                   std::string(kReason) + "\n"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("  input token_ids: i32 [num_tokens]\n"), std::string::npos)
      << d;
  d = describe(boundedToy(4, "").artifact());
  EXPECT_NE(d.find("  input context_lens: i32 [num_seqs], values <= 4\n"),
            std::string::npos)
      << d;
}

TEST(SessionInputBound, RefusesAValueAboveTheBoundBeforeAnyLaunch) {
  Handles h;
  open(boundedToy().artifact(), h);
  ASSERT_EQ(runCtx(h.s, {0, 0}), K3_OK) << k3_last_error();
  // The toy's second launch counts tokens per sequence in state "seen".
  int32_t seen[2], after[2];
  size_t seenId = size_t(boundedToy().artifact().findBuffer("seen"));
  ASSERT_EQ(k3_session_read_buffer(h.s, seenId, seen, 8), K3_OK);
  EXPECT_EQ(seen[0], 1);
  for (bool device : {false, true}) {
    EXPECT_EQ(runCtx(h.s, {0, 5}, device), K3_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(
        std::string(k3_last_error()),
        "entry 'forward' input 'context_lens': element 1 = 5 exceeds 0: " +
            std::string(kReason))
        << (device ? "device" : "host");
    // The bound is an upper bound; a negative context is refused by the
    // check of the packed sequences (input_checks.h, checkSequences).
    EXPECT_EQ(runCtx(h.s, {-1, 0}, device), K3_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(k3_last_error()),
              "entry 'forward': sequence 0: context_lens = -1 < 0");
    ASSERT_EQ(k3_session_reset_state(h.s, -1), K3_OK);
  }
  // Nothing ran: no launch of a refused call updated the state.
  ASSERT_EQ(k3_session_reset_state(h.s, -1), K3_OK);
  EXPECT_EQ(runCtx(h.s, {3, 0}), K3_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(k3_session_read_buffer(h.s, seenId, after, 8), K3_OK);
  EXPECT_EQ(after[0], 0);
  EXPECT_EQ(after[1], 0);
}

TEST(SessionInputBound, BoundWithoutReason) {
  Handles h;
  open(boundedToy(7, "").artifact(), h);
  EXPECT_EQ(runCtx(h.s, {7, 7}), K3_OK) << k3_last_error();
  EXPECT_EQ(runCtx(h.s, {8, 0}), K3_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(k3_last_error()),
            "entry 'forward' input 'context_lens': element 0 = 8 exceeds 7");
}

TEST(SessionInputBound, TokenIdsStillChecked) {
  // The vocabulary check shares the helper: host and device inputs.
  Handles h;
  open(boundedToy().artifact(), h);
  int64_t nt = 2, ns = 2, ncu = 3;
  std::vector<int32_t> toks = {1, 16}, cu = {0, 1, 2}, pos = {0, 0},
                       ctx = {0, 0};
  k3_symbol_value sv[2] = {{"num_tokens", nt}, {"num_seqs", ns}};
  k3_host_tensor in[4] = {
      {"token_ids", K3_DTYPE_I32, 1, &nt, toks.data(), 8},
      {"cu_seqlens", K3_DTYPE_I32, 1, &ncu, cu.data(), 12},
      {"positions", K3_DTYPE_I32, 1, &nt, pos.data(), 8},
      {"context_lens", K3_DTYPE_I32, 1, &ns, ctx.data(), 8}};
  EXPECT_EQ(k3_session_run(h.s, "forward", sv, 2, in, 4),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(k3_last_error()),
            "input 'token_ids': token 1 = 16 is out of range for vocab_size "
            "16");
  k3_device_tensor din[4];
  for (int i = 0; i < 4; ++i)
    din[i] = {in[i].name,
              in[i].dtype,
              1,
              in[i].shape,
              uint64_t(uintptr_t(in[i].data)),
              in[i].nbytes};
  EXPECT_EQ(k3_session_run_device(h.s, "forward", sv, 2, din, 4),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("token 1 = 16 is out of range"),
            std::string::npos)
      << k3_last_error();
}

TEST(SessionSequences, ContextPlusNewTokensFitMaxSeqLen) {
  // Two sequences of one token; the model holds 4 tokens a sequence.
  Builder b = boundedToy(100, "");
  b.setMetadata("max_seq_len", "4");
  for (bool device : {false, true}) {
    Handles h;
    open(b.artifact(), h);
    EXPECT_EQ(runCtx(h.s, {3, 0}, device), K3_OK) << k3_last_error();
    EXPECT_EQ(runCtx(h.s, {0, 4}, device), K3_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(k3_last_error()),
              "entry 'forward': sequence 1: 4 tokens of context + 1 new "
              "exceed max_seq_len 4 (the model's longest sequence; recompile "
              "with a larger --max-context)");
  }
}

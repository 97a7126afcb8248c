#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "k3/dtype.h"
#include "k3/safetensors.h"

using namespace k3;

namespace {
std::string tmp(const std::string &name) {
  return std::string(K3_TEST_TMPDIR) + "/" + name;
}

void writeRaw(const std::string &path, const std::string &header,
              size_t dataBytes) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char *>(&n), 8);
  f << header;
  f << std::string(dataBytes, '\x01');
}

std::string openErr(const std::string &path) {
  st::Collection c;
  std::string err;
  EXPECT_FALSE(c.open(path, err)) << path;
  return err;
}
} // namespace

TEST(Safetensors, WriteReadSingle) {
  std::vector<float> a = {1.f, -2.f, 3.5f, 0.f, 1e-3f, 65504.f};
  std::vector<int32_t> b = {7, -9};
  std::string err, p = tmp("single.safetensors");
  ASSERT_TRUE(st::write(
      p, {{"a", "F32", {2, 3}, a.data(), 24}, {"b", "I32", {2}, b.data(), 8}},
      {{"format", "pt"}}, err))
      << err;
  st::Collection c;
  ASSERT_TRUE(c.open(p, err)) << err;
  ASSERT_EQ(c.tensors().size(), 2u);
  const st::TensorInfo *t = c.find("a");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> f(6);
  ASSERT_TRUE(st::convert(*t, artifact::DType::F32, f.data(), err));
  EXPECT_EQ(f, a);
  std::vector<uint16_t> h(6);
  ASSERT_TRUE(st::convert(*t, artifact::DType::BF16, h.data(), err));
  EXPECT_EQ(bf16ToFloat(h[2]), 3.5f);
  ASSERT_TRUE(st::convert(*t, artifact::DType::F16, h.data(), err));
  EXPECT_EQ(f16ToFloat(h[5]), 65504.f);
  EXPECT_NEAR(f16ToFloat(h[4]), 1e-3f, 1e-6f);
  std::vector<int32_t> i(2);
  ASSERT_TRUE(st::convert(*c.find("b"), artifact::DType::I32, i.data(), err));
  EXPECT_EQ(i, b);
  EXPECT_FALSE(st::convert(*c.find("b"), artifact::DType::F32, f.data(), err));
  EXPECT_NE(err.find("cannot convert safetensors dtype I32 to f32"),
            std::string::npos)
      << err;
  ASSERT_EQ(c.metadata().size(), 1u);
  EXPECT_EQ(c.metadata()[0].second, "pt");
}

// MXFP4 weights load their U8 codes and scales byte for byte; no other
// source dtype converts to mxfp4.
TEST(Safetensors, U8ToMXFP4IsACopy) {
  std::vector<uint8_t> codes = {0x21, 0xF0, 0x7A, 0x08};
  std::vector<float> f = {1.f, 2.f};
  std::string err, p = tmp("mxfp4.safetensors");
  ASSERT_TRUE(st::write(p,
                        {{"w.weight_packed", "U8", {2, 2}, codes.data(), 4},
                         {"w.f", "F32", {2}, f.data(), 8}},
                        {}, err))
      << err;
  st::Collection c;
  ASSERT_TRUE(c.open(p, err)) << err;
  std::vector<uint8_t> out(4);
  ASSERT_TRUE(st::convert(*c.find("w.weight_packed"), artifact::DType::MXFP4,
                          out.data(), err))
      << err;
  EXPECT_EQ(out, codes);
  EXPECT_FALSE(
      st::convert(*c.find("w.f"), artifact::DType::MXFP4, out.data(), err));
  EXPECT_NE(err.find("cannot convert safetensors dtype F32 to mxfp4"),
            std::string::npos)
      << err;
}

// convertRange: a part of a tensor, as the checkpoint loader converts a
// large weight in pieces on several threads.
TEST(Safetensors, ConvertRange) {
  std::vector<float> a = {1.f, -2.f, 3.5f, 0.25f, 5.f, 6.f};
  std::vector<int64_t> b = {1, 2, int64_t(1) << 40};
  std::string err, p = tmp("range.safetensors");
  ASSERT_TRUE(st::write(
      p, {{"a", "F32", {6}, a.data(), 24}, {"b", "I64", {3}, b.data(), 24}}, {},
      err))
      << err;
  st::Collection c;
  ASSERT_TRUE(c.open(p, err)) << err;
  std::vector<float> f(3);
  ASSERT_TRUE(st::convertRange(*c.find("a"), artifact::DType::F32, 2, 3,
                               f.data(), err));
  EXPECT_EQ(f, (std::vector<float>{3.5f, 0.25f, 5.f}));
  std::vector<uint16_t> h(2);
  ASSERT_TRUE(st::convertRange(*c.find("a"), artifact::DType::BF16, 4, 2,
                               h.data(), err));
  EXPECT_EQ(bf16ToFloat(h[0]), 5.f);
  EXPECT_EQ(bf16ToFloat(h[1]), 6.f);
  EXPECT_FALSE(st::convertRange(*c.find("a"), artifact::DType::F32, 5, 2,
                                f.data(), err));
  EXPECT_NE(err.find("elements [5, 7) are outside its 6"), std::string::npos)
      << err;
  std::vector<int32_t> i(2);
  ASSERT_TRUE(st::convertRange(*c.find("b"), artifact::DType::I32, 0, 2,
                               i.data(), err));
  EXPECT_EQ(i, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(st::convertRange(*c.find("b"), artifact::DType::I32, 1, 2,
                                i.data(), err));
  EXPECT_NE(err.find("element 2 value 1099511627776 does not fit i32"),
            std::string::npos)
      << err;
}

TEST(Safetensors, Sharded) {
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  std::string err;
  ASSERT_TRUE(st::write(tmp("m-1.safetensors"),
                        {{"a", "F32", {2}, a.data(), 8}}, {}, err));
  ASSERT_TRUE(st::write(
      tmp("m-2.safetensors"),
      {{"b", "F32", {3}, b.data(), 12}, {"unused", "F32", {1}, b.data(), 4}},
      {}, err));
  std::ofstream(tmp("model.safetensors.index.json"))
      << R"({"metadata": {"total_size": 20}, )"
         R"("weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}})";
  st::Collection c;
  ASSERT_TRUE(c.open(tmp("model.safetensors.index.json"), err)) << err;
  EXPECT_EQ(c.tensors().size(), 2u);
  std::vector<float> out(3);
  ASSERT_TRUE(st::convert(*c.find("b"), artifact::DType::F32, out.data(), err));
  EXPECT_EQ(out, b);
  EXPECT_EQ(c.find("unused"), nullptr);
}

TEST(Safetensors, MissingShard) {
  std::ofstream(tmp("missing.index.json"))
      << R"({"weight_map": {"x.w": "nope-00001.safetensors"}})";
  std::string e = openErr(tmp("missing.index.json"));
  EXPECT_NE(
      e.find(
          "shard 'nope-00001.safetensors' (holding tensor 'x.w') is missing"),
      std::string::npos)
      << e;
}

TEST(Safetensors, TensorNotInShard) {
  std::vector<float> a = {1, 2};
  std::string err;
  ASSERT_TRUE(st::write(tmp("s1.safetensors"), {{"a", "F32", {2}, a.data(), 8}},
                        {}, err));
  std::ofstream(tmp("wrong.index.json"))
      << R"({"weight_map": {"zz": "s1.safetensors"}})";
  std::string e = openErr(tmp("wrong.index.json"));
  EXPECT_NE(e.find("tensor 'zz' is mapped to shard 's1.safetensors' but that "
                   "shard does not contain it"),
            std::string::npos)
      << e;
  std::ofstream(tmp("escape.index.json"))
      << R"({"weight_map": {"a": "../s1.safetensors"}})";
  EXPECT_NE(
      openErr(tmp("escape.index.json")).find("outside the index's directory"),
      std::string::npos);
  std::ofstream(tmp("nomap.index.json")) << R"({"metadata": {}})";
  EXPECT_NE(openErr(tmp("nomap.index.json")).find("no 'weight_map'"),
            std::string::npos);
}

TEST(Safetensors, Overlap) {
  writeRaw(tmp("overlap.safetensors"),
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12);
  std::string e = openErr(tmp("overlap.safetensors"));
  EXPECT_NE(e.find("tensor 'b' data [4, 12) overlaps tensor 'a' [0, 8)"),
            std::string::npos)
      << e;
}

TEST(Safetensors, PastEof) {
  writeRaw(tmp("eof.safetensors"),
           R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})", 6);
  std::string e = openErr(tmp("eof.safetensors"));
  EXPECT_NE(e.find("tensor 'w': data_offsets [0, 8] run past end of file (data "
                   "section is 6 bytes)"),
            std::string::npos)
      << e;
}

TEST(Safetensors, HeaderErrors) {
  struct Case {
    std::string header;
    size_t data;
    const char *needle;
  };
  std::vector<Case> cases = {
      {R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1,
       "tensor 'w': unknown dtype 'Q4'"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "needs 12 bytes but data_offsets span 8"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0,
       "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
       "reversed"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4,
       "'data_offsets' must be an array"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
       "unknown field 'x'"},
      {R"([1,2])", 0, "expected an object"},
      {R"({"w":)", 0, "header JSON (at file offset 8)"},
      {R"({"__metadata__":{"a":1}})", 0, "is not a string"},
  };
  for (auto &c : cases) {
    writeRaw(tmp("bad.safetensors"), c.header, c.data);
    std::string e = openErr(tmp("bad.safetensors"));
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.header << " -> " << e;
  }
  {
    std::ofstream f(tmp("hlen.safetensors"), std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char *>(&n), 8);
    f << "{}";
  }
  EXPECT_NE(openErr(tmp("hlen.safetensors")).find("runs past end of file"),
            std::string::npos);
  std::ofstream(tmp("tiny.safetensors")) << "abc";
  EXPECT_NE(openErr(tmp("tiny.safetensors")).find("too small"),
            std::string::npos);
  EXPECT_NE(openErr(tmp("does-not-exist.safetensors")).find("cannot open"),
            std::string::npos);
}

TEST(Safetensors, DuplicateAcrossFiles) {
  std::vector<float> a = {1, 2};
  std::string err;
  ASSERT_TRUE(st::write(tmp("d1.safetensors"), {{"a", "F32", {2}, a.data(), 8}},
                        {}, err));
  st::Collection c;
  ASSERT_TRUE(c.addFile(tmp("d1.safetensors"), err));
  EXPECT_FALSE(c.addFile(tmp("d1.safetensors"), err));
  EXPECT_NE(err.find("also present"), std::string::npos);
}

TEST(Safetensors, WriterRejectsBadInput) {
  float x = 0;
  std::vector<uint8_t> out;
  std::string err;
  EXPECT_FALSE(st::serialize({{"a", "F32", {2}, &x, 4}}, {}, out, err));
  EXPECT_FALSE(st::serialize(
      {{"a", "F32", {1}, &x, 4}, {"a", "F32", {1}, &x, 4}}, {}, out, err));
  EXPECT_FALSE(st::serialize({{"a", "X9", {1}, &x, 4}}, {}, out, err));
  ASSERT_TRUE(st::serialize({{"a", "F32", {1}, &x, 4}}, {}, out, err));
  EXPECT_EQ((out[0] + 8) % 8, 0); // header padded to 8
  std::vector<st::TensorInfo> ts;
  std::vector<std::pair<std::string, std::string>> md;
  EXPECT_TRUE(st::parse(out.data(), out.size(), "mem", ts, md, err)) << err;
}

TEST(DType, Conversions) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.00390625f), 0x3f80); // tie -> even
  EXPECT_EQ(floatToBf16(1.01171875f), 0x3f82); // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(65520.f), 0x7c00);
  EXPECT_EQ(floatToF16(5.9604645e-8f), 0x0001);
  EXPECT_EQ(floatToF16(-2.0f), 0xc000);
  for (uint32_t h = 0; h < 0x7c00; ++h)
    EXPECT_EQ(floatToF16(f16ToFloat(uint16_t(h))), h);
}

#include <gtest/gtest.h>

#include "k3/json.h"

using namespace k3::json;

namespace {
Value ok(const std::string &s) {
  Value v;
  std::string err;
  EXPECT_TRUE(parse(s, v, err)) << s << ": " << err;
  return v;
}
std::string bad(const std::string &s) {
  Value v;
  std::string err;
  EXPECT_FALSE(parse(s, v, err)) << "accepted: " << s;
  return err;
}
} // namespace

TEST(Json, Scalars) {
  EXPECT_EQ(ok("null").type, Type::Null);
  EXPECT_TRUE(ok(" true ").boolean);
  EXPECT_FALSE(ok("false").boolean);
  Value n = ok("-0");
  EXPECT_TRUE(n.isInt);
  EXPECT_EQ(ok("9223372036854775807").integer, INT64_MAX);
  Value big = ok("9223372036854775808");
  EXPECT_FALSE(big.isInt);
  EXPECT_DOUBLE_EQ(big.number, 9223372036854775808.0);
  EXPECT_DOUBLE_EQ(ok("1.5e3").number, 1500.0);
  EXPECT_DOUBLE_EQ(ok("-2.25E-2").number, -0.0225);
  EXPECT_FALSE(ok("1.0").isInt);
}

TEST(Json, Strings) {
  EXPECT_EQ(ok(R"("a\"b\\c\/\b\f\n\r\t")").str, "a\"b\\c/\b\f\n\r\t");
  EXPECT_EQ(ok(R"("\u00e9\u4e2d")").str, "\xc3\xa9\xe4\xb8\xad");
  EXPECT_EQ(ok(R"("\ud83d\ude00")").str, "\xf0\x9f\x98\x80");
  EXPECT_EQ(ok("\"\xf0\x9f\x98\x80\"").str, "\xf0\x9f\x98\x80");
  EXPECT_EQ(ok(R"("")").str, "");
}

TEST(Json, Containers) {
  Value v = ok(R"({"a": [1, 2, {"b": null}], "c": {}, "d": []})");
  ASSERT_TRUE(v.isObject());
  EXPECT_EQ(v.object.size(), 3u);
  EXPECT_EQ(v.get("a")->array.size(), 3u);
  EXPECT_EQ(v.get("a")->array[2].get("b")->type, Type::Null);
  EXPECT_EQ(v.get("zz"), nullptr);
  EXPECT_EQ(dump(v), R"({"a":[1,2,{"b":null}],"c":{},"d":[]})");
}

TEST(Json, Errors) {
  EXPECT_NE(bad("").find("end of input"), std::string::npos);
  EXPECT_NE(bad("[1,]").find("unexpected ']'"), std::string::npos);
  EXPECT_NE(bad("{\"a\":1,}").find("expected string key"), std::string::npos);
  EXPECT_NE(bad("01").find("leading zero"), std::string::npos);
  EXPECT_NE(bad("1.").find("decimal point"), std::string::npos);
  EXPECT_NE(bad("1e").find("exponent"), std::string::npos);
  EXPECT_NE(bad("-").find("invalid number"), std::string::npos);
  EXPECT_NE(bad("NaN").find("unexpected 'N'"), std::string::npos);
  EXPECT_NE(bad("1e999").find("out of range"), std::string::npos);
  EXPECT_NE(bad("tru").find("invalid literal"), std::string::npos);
  EXPECT_NE(bad("\"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(bad("\"a\nb\"").find("control character"), std::string::npos);
  EXPECT_NE(bad(R"("\x")").find("invalid escape"), std::string::npos);
  EXPECT_NE(bad(R"("\u12g4")").find("invalid hex digit"), std::string::npos);
  EXPECT_NE(bad(R"("\udc00")").find("lone low surrogate"), std::string::npos);
  EXPECT_NE(bad(R"("\ud800x")").find("high surrogate"), std::string::npos);
  EXPECT_NE(bad("\"\xc0\xaf\"").find("overlong"), std::string::npos);
  EXPECT_NE(bad("\"\xff\"").find("invalid UTF-8 lead byte"), std::string::npos);
  EXPECT_NE(bad("\"\xe4\xb8\"").find("invalid UTF-8 continuation"),
            std::string::npos);
  EXPECT_NE(bad("\"\xe4\xb8").find("truncated UTF-8"), std::string::npos);
  EXPECT_NE(bad("\"\xed\xa0\x80\"").find("invalid UTF-8 code point"),
            std::string::npos);
  EXPECT_NE(bad(R"({"a":1,"a":2})").find("duplicate object key \"a\""),
            std::string::npos);
  EXPECT_NE(bad("{} x").find("trailing characters"), std::string::npos);
  EXPECT_NE(bad("{\"a\" 1}").find("expected ':'"), std::string::npos);
  EXPECT_NE(bad("[1 2]").find("expected ',' or ']'"), std::string::npos);
  EXPECT_NE(bad("// c\n1").find("unexpected '/'"), std::string::npos);
}

TEST(Json, ErrorPositions) {
  std::string e = bad("{\n  \"a\": [1,\n  2,, 3]\n}");
  EXPECT_NE(e.find("line 3, column 5"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("offset 17 ", 0), 0u) << e;
}

TEST(Json, DepthLimit) {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_NE(bad(deep).find("nesting deeper than 128"), std::string::npos);
  std::string fine(100, '[');
  fine += std::string(100, ']');
  ok(fine);
}

TEST(Json, DumpKeepsNonIntegers) {
  EXPECT_EQ(dump(ok("-0.0")), "-0.0");
  EXPECT_EQ(dump(ok("1e2")), "100.0");
  EXPECT_EQ(dump(ok("-0")), "0");
}

TEST(Json, QuoteRoundTrip) {
  std::string s = std::string("x\"\\\n\x01y", 6);
  Value v = ok(quote(s));
  EXPECT_EQ(v.str, s);
}

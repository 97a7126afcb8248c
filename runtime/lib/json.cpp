// Strict JSON parser. See k3/json.h.
#include "k3/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace k3 {
namespace json {

const char *typeName(Type t) {
  switch (t) {
  case Type::Null:
    return "null";
  case Type::Bool:
    return "bool";
  case Type::Number:
    return "number";
  case Type::String:
    return "string";
  case Type::Array:
    return "array";
  case Type::Object:
    return "object";
  }
  return "?";
}

const Value *Value::get(const std::string &key) const {
  if (type != Type::Object)
    return nullptr;
  for (auto &kv : object)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}

namespace {

struct Parser {
  const char *p;
  size_t n, i = 0, maxDepth;
  std::string err;

  bool fail(const std::string &msg, size_t at) {
    if (!err.empty())
      return false;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < n; ++k) {
      if (p[k] == '\n') {
        ++line;
        col = 1;
      } else
        ++col;
    }
    err = "offset " + std::to_string(at) + " (line " + std::to_string(line) +
          ", column " + std::to_string(col) + "): " + msg;
    return false;
  }
  bool fail(const std::string &msg) { return fail(msg, i); }
  void ws() {
    while (i < n &&
           (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
      ++i;
  }
  std::string describe() {
    if (i >= n)
      return "end of input";
    unsigned char c = (unsigned char)p[i];
    char buf[32];
    if (c >= 32 && c < 127)
      snprintf(buf, sizeof buf, "'%c'", c);
    else
      snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
  }
  bool literal(const char *lit) {
    size_t len = strlen(lit);
    if (n - i < len || memcmp(p + i, lit, len) != 0)
      return fail("invalid literal (expected '" + std::string(lit) + "')");
    i += len;
    return true;
  }
  static void utf8(std::string &s, uint32_t cp) {
    if (cp < 0x80)
      s += char(cp);
    else if (cp < 0x800) {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12));
      s += char(0x80 | ((cp >> 6) & 0x3F));
      s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18));
      s += char(0x80 | ((cp >> 12) & 0x3F));
      s += char(0x80 | ((cp >> 6) & 0x3F));
      s += char(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(uint32_t &v) {
    if (n - i < 4)
      return fail("truncated \\u escape");
    v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = p[i + k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= uint32_t(c - 'A' + 10);
      else
        return fail("invalid hex digit in \\u escape", i + k);
    }
    i += 4;
    return true;
  }
  bool string(std::string &out) {
    size_t start = i;
    ++i; // opening quote
    out.clear();
    while (true) {
      if (i >= n)
        return fail("unterminated string", start);
      unsigned char c = (unsigned char)p[i];
      if (c == '"') {
        ++i;
        return true;
      }
      if (c < 0x20)
        return fail("control character in string (must be escaped)");
      if (c == '\\') {
        if (++i >= n)
          return fail("unterminated escape");
        char e = p[i++];
        switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          size_t at = i - 2;
          uint32_t cp = 0;
          if (!hex4(cp))
            return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF)
            return fail("lone low surrogate in \\u escape", at);
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (n - i < 2 || p[i] != '\\' || p[i + 1] != 'u')
              return fail("high surrogate not followed by a low surrogate", at);
            i += 2;
            if (!hex4(lo))
              return false;
            if (lo < 0xDC00 || lo > 0xDFFF)
              return fail("high surrogate not followed by a low surrogate", at);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default:
          i--;
          return fail("invalid escape '\\" + std::string(1, e) + "'");
        }
        continue;
      }
      if (c < 0x80) {
        out += char(c);
        ++i;
        continue;
      }
      // Validate one UTF-8 sequence.
      size_t len;
      uint32_t cp, min;
      if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp = c & 0x1F;
        min = 0x80;
      } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp = c & 0x0F;
        min = 0x800;
      } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp = c & 0x07;
        min = 0x10000;
      } else
        return fail("invalid UTF-8 lead byte");
      if (n - i < len)
        return fail("truncated UTF-8 sequence");
      for (size_t k = 1; k < len; ++k) {
        unsigned char cc = (unsigned char)p[i + k];
        if ((cc & 0xC0) != 0x80)
          return fail("invalid UTF-8 continuation byte", i + k);
        cp = (cp << 6) | (cc & 0x3F);
      }
      if (cp < min)
        return fail("overlong UTF-8 sequence");
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return fail("invalid UTF-8 code point");
      out.append(p + i, len);
      i += len;
    }
  }
  bool number(Value &v) {
    size_t start = i;
    bool isInt = true;
    if (p[i] == '-')
      ++i;
    if (i >= n || !(p[i] >= '0' && p[i] <= '9'))
      return fail("invalid number", start);
    if (p[i] == '0') {
      ++i;
      if (i < n && p[i] >= '0' && p[i] <= '9')
        return fail("leading zero in number", start);
    } else {
      while (i < n && p[i] >= '0' && p[i] <= '9')
        ++i;
    }
    if (i < n && p[i] == '.') {
      isInt = false;
      ++i;
      if (i >= n || !(p[i] >= '0' && p[i] <= '9'))
        return fail("expected digit after decimal point");
      while (i < n && p[i] >= '0' && p[i] <= '9')
        ++i;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
      isInt = false;
      ++i;
      if (i < n && (p[i] == '+' || p[i] == '-'))
        ++i;
      if (i >= n || !(p[i] >= '0' && p[i] <= '9'))
        return fail("expected digit in exponent");
      while (i < n && p[i] >= '0' && p[i] <= '9')
        ++i;
    }
    std::string text(p + start, i - start);
    v.type = Type::Number;
    if (isInt) {
      errno = 0;
      long long x = strtoll(text.c_str(), nullptr, 10);
      if (errno == 0) {
        v.isInt = true;
        v.integer = x;
        v.number = double(x);
        return true;
      }
    }
    errno = 0;
    double d = strtod(text.c_str(), nullptr);
    if (!std::isfinite(d))
      return fail("number out of range", start);
    v.number = d;
    return true;
  }
  bool value(Value &v, size_t depth) {
    ws();
    if (i >= n)
      return fail("expected a value, got end of input");
    if (depth > maxDepth)
      return fail("nesting deeper than " + std::to_string(maxDepth));
    char c = p[i];
    switch (c) {
    case 'n':
      v.type = Type::Null;
      return literal("null");
    case 't':
      v.type = Type::Bool;
      v.boolean = true;
      return literal("true");
    case 'f':
      v.type = Type::Bool;
      v.boolean = false;
      return literal("false");
    case '"':
      v.type = Type::String;
      return string(v.str);
    case '[': {
      v.type = Type::Array;
      ++i;
      ws();
      if (i < n && p[i] == ']') {
        ++i;
        return true;
      }
      while (true) {
        v.array.emplace_back();
        if (!value(v.array.back(), depth + 1))
          return false;
        ws();
        if (i < n && p[i] == ',') {
          ++i;
          continue;
        }
        if (i < n && p[i] == ']') {
          ++i;
          return true;
        }
        return fail("expected ',' or ']' in array, got " + describe());
      }
    }
    case '{': {
      v.type = Type::Object;
      ++i;
      ws();
      if (i < n && p[i] == '}') {
        ++i;
        return true;
      }
      std::set<std::string> keys;
      while (true) {
        ws();
        if (i >= n || p[i] != '"')
          return fail("expected string key in object, got " + describe());
        size_t keyAt = i;
        std::string key;
        if (!string(key))
          return false;
        if (!keys.insert(key).second)
          return fail("duplicate object key " + quote(key), keyAt);
        ws();
        if (i >= n || p[i] != ':')
          return fail("expected ':' after object key, got " + describe());
        ++i;
        v.object.emplace_back(std::move(key), Value());
        if (!value(v.object.back().second, depth + 1))
          return false;
        ws();
        if (i < n && p[i] == ',') {
          ++i;
          continue;
        }
        if (i < n && p[i] == '}') {
          ++i;
          return true;
        }
        return fail("expected ',' or '}' in object, got " + describe());
      }
    }
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return number(v);
      return fail("unexpected " + describe());
    }
  }
};

} // namespace

bool parse(const char *data, size_t size, Value &out, std::string &err,
           size_t maxDepth) {
  Parser ps{data, size, 0, maxDepth, {}};
  out = Value();
  if (!ps.value(out, 0)) {
    err = ps.err;
    return false;
  }
  ps.ws();
  if (ps.i != size) {
    ps.fail("trailing characters after the JSON value");
    err = ps.err;
    return false;
  }
  return true;
}

bool parse(const std::string &text, Value &out, std::string &err) {
  return parse(text.data(), text.size(), out, err);
}

std::string quote(const std::string &s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      o += "\\\"";
      break;
    case '\\':
      o += "\\\\";
      break;
    case '\n':
      o += "\\n";
      break;
    case '\r':
      o += "\\r";
      break;
    case '\t':
      o += "\\t";
      break;
    default:
      if (c < 0x20) {
        char b[8];
        snprintf(b, sizeof b, "\\u%04x", c);
        o += b;
      } else
        o += char(c);
    }
  }
  return o + "\"";
}

std::string dump(const Value &v) {
  switch (v.type) {
  case Type::Null:
    return "null";
  case Type::Bool:
    return v.boolean ? "true" : "false";
  case Type::Number: {
    if (v.isInt)
      return std::to_string(v.integer);
    char b[40];
    snprintf(b, sizeof b, "%.17g", v.number);
    std::string r = b;
    if (r.find_first_of(".eE") == std::string::npos)
      r += ".0"; // stays a non-integer literal (e.g. -0.0)
    return r;
  }
  case Type::String:
    return quote(v.str);
  case Type::Array: {
    std::string s = "[";
    for (size_t k = 0; k < v.array.size(); ++k) {
      if (k)
        s += ",";
      s += dump(v.array[k]);
    }
    return s + "]";
  }
  case Type::Object: {
    std::string s = "{";
    for (size_t k = 0; k < v.object.size(); ++k) {
      if (k)
        s += ",";
      s += quote(v.object[k].first) + ":" + dump(v.object[k].second);
    }
    return s + "}";
  }
  }
  return "null";
}

} // namespace json
} // namespace k3

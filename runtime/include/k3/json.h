// k3/json.h - a small strict RFC 8259 JSON parser (no external dependency).
// Used for safetensors headers, sharded indexes and model config.json.
// Strictness: no comments, no trailing commas, no NaN/Infinity, no duplicate
// object keys, valid UTF-8 only, nesting depth bounded.
#ifndef K3_JSON_H
#define K3_JSON_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace k3 {
namespace json {

enum class Type { Null, Bool, Number, String, Array, Object };
const char *typeName(Type t);

struct Value {
  Type type = Type::Null;
  bool boolean = false;
  double number = 0.0;
  bool isInt = false;  // the literal was an integer that fits int64
  int64_t integer = 0; // valid when isInt
  std::string str;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object; // in document order

  const Value *
  get(const std::string &key) const; // objects only; null if absent
  bool isObject() const { return type == Type::Object; }
  bool isArray() const { return type == Type::Array; }
  bool isString() const { return type == Type::String; }
  bool isNumber() const { return type == Type::Number; }
};

constexpr size_t kDefaultMaxDepth = 128;
// Parses exactly one JSON value (surrounded by optional whitespace). On error
// `err` reads "offset N (line L, column C): message".
bool parse(const char *data, size_t size, Value &out, std::string &err,
           size_t maxDepth = kDefaultMaxDepth);
bool parse(const std::string &text, Value &out, std::string &err);
// JSON string literal for `s` (with quotes), escaping as needed.
std::string quote(const std::string &s);
// Compact serialization (used by tests and writers).
std::string dump(const Value &v);

} // namespace json
} // namespace k3

#endif

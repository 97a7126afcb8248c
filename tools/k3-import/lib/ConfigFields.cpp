//===- ConfigFields.cpp - strict typed reads of a JSON object -------------===//
#include "tools/k3-import/lib/ConfigFields.h"

#include "tools/k3-import/lib/ImportError.h"

#include <cmath>

using llvm::Error;

namespace k3import {

static std::string got(const char *expected, const js::Value &v) {
  return std::string(expected) + ", got " + js::typeName(v.type);
}

bool Fields::has(const std::string &k) {
  used_.insert(k);
  return obj_.get(k) != nullptr;
}

bool Fields::given(const std::string &k) {
  const js::Value *v = get(k);
  return v && v->type != js::Type::Null;
}

const js::Value *Fields::get(const std::string &k) {
  used_.insert(k);
  return obj_.get(k);
}

void Fields::ignore(std::initializer_list<const char *> ks) {
  for (auto *k : ks)
    used_.insert(k);
}

Error Fields::integer(const std::string &k, int64_t min, int64_t &out,
                      std::optional<int64_t> def) {
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null) {
    if (!def)
      return fieldError(path(k),
                        v ? "must not be null" : "required field is missing");
    out = *def;
    return Error::success();
  }
  return asInt(*v, path(k), min, out);
}

Error Fields::optInteger(const std::string &k, int64_t min,
                         std::optional<int64_t> &out) {
  out.reset();
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  int64_t i;
  if (Error e = asInt(*v, path(k), min, i))
    return e;
  out = i;
  return Error::success();
}

Error Fields::real(const std::string &k, double &out,
                   std::optional<double> def) {
  std::optional<double> r;
  if (Error e = optReal(k, r))
    return e;
  if (!r && !def)
    return fieldError(path(k), obj_.get(k) ? "must not be null"
                                           : "required field is missing");
  out = r ? *r : *def;
  return Error::success();
}

Error Fields::optReal(const std::string &k, std::optional<double> &out) {
  out.reset();
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  if (v->type != js::Type::Number)
    return fieldError(path(k), got("expected a number", *v));
  if (!std::isfinite(v->number))
    return fieldError(path(k), "must be finite");
  out = v->number;
  return Error::success();
}

Error Fields::boolean(const std::string &k, bool def, bool &out) {
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null) {
    out = def;
    return Error::success();
  }
  if (v->type != js::Type::Bool)
    return fieldError(path(k), got("expected true or false", *v));
  out = v->boolean;
  return Error::success();
}

Error Fields::optString(const std::string &k, std::optional<std::string> &out) {
  out.reset();
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  if (v->type != js::Type::String)
    return fieldError(path(k), got("expected a string", *v));
  out = v->str;
  return Error::success();
}

Error Fields::optIntList(const std::string &k,
                         std::optional<std::vector<int64_t>> &out) {
  out.reset();
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  if (v->type != js::Type::Array)
    return fieldError(path(k), got("expected a list of integers", *v));
  std::vector<int64_t> list;
  for (size_t i = 0; i < v->array.size(); ++i) {
    int64_t x;
    if (Error e = asInt(v->array[i], path(k) + "[" + std::to_string(i) + "]",
                        INT64_MIN, x))
      return e;
    list.push_back(x);
  }
  out = std::move(list);
  return Error::success();
}

Error Fields::optStringList(const std::string &k,
                            std::optional<std::vector<std::string>> &out) {
  out.reset();
  const js::Value *v = get(k);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  if (v->type != js::Type::Array)
    return fieldError(path(k), got("expected a list of strings", *v));
  std::vector<std::string> list;
  for (size_t i = 0; i < v->array.size(); ++i) {
    const js::Value &x = v->array[i];
    if (x.type != js::Type::String)
      return fieldError(path(k) + "[" + std::to_string(i) + "]",
                        got("expected a string", x));
    list.push_back(x.str);
  }
  out = std::move(list);
  return Error::success();
}

Error Fields::aliasInteger(std::initializer_list<const char *> names,
                           int64_t min, std::optional<int64_t> &out) {
  out.reset();
  std::string first;
  for (auto *n : names) {
    std::optional<int64_t> x;
    if (Error e = optInteger(n, min, x))
      return e;
    if (!x)
      continue;
    if (out && *out != *x)
      return fieldError(path(n), std::to_string(*x) + " contradicts " + first +
                                     " " + std::to_string(*out));
    if (!out)
      first = n;
    out = x;
  }
  return Error::success();
}

Error Fields::aliasBoolean(std::initializer_list<const char *> names, bool def,
                           bool &out) {
  std::optional<bool> v;
  std::string first;
  for (auto *n : names) {
    if (!given(n))
      continue;
    bool x;
    if (Error e = boolean(n, def, x))
      return e;
    if (v && *v != x)
      return fieldError(path(n), std::string(x ? "true" : "false") +
                                     " contradicts " + first);
    if (!v)
      first = n;
    v = x;
  }
  out = v.value_or(def);
  return Error::success();
}

Error Fields::checkUnknown() const {
  for (auto &kv : obj_.object)
    if (!used_.count(kv.first))
      return fieldError(path(kv.first), unknownMessage_);
  return Error::success();
}

Error Fields::asInt(const js::Value &v, const std::string &p, int64_t min,
                    int64_t &out) {
  if (v.type != js::Type::Number)
    return fieldError(p, got("expected an integer", v));
  int64_t i;
  if (v.isInt)
    i = v.integer;
  else if (std::floor(v.number) == v.number && std::fabs(v.number) < 9e15)
    i = int64_t(v.number);
  else
    return fieldError(p, "expected an integer, got " + formatNumber(v.number));
  if (i < min)
    return fieldError(p, "must be >= " + std::to_string(min) + ", got " +
                             std::to_string(i));
  out = i;
  return Error::success();
}

} // namespace k3import

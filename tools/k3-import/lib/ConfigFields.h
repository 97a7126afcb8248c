//===- ConfigFields.h - strict typed reads of a JSON object -----*- C++ -*-===//
//
// A config.json is read strictly: every key of an object must be read by the
// importer or allow-listed as known-but-irrelevant, so that a field the
// importer does not understand is an error rather than silently ignored.
// Fields wraps one JSON object: it remembers which keys were looked at, reads
// them as typed values (reporting wrong types and bounds with the dotted path
// of the field), reads values given under several alias names, and finally
// reports the keys nobody looked at.
//
// Every getter returns llvm::Error (success: the value was stored in `out`),
// so that callers can write `if (Error e = f.integer(...)) return e;`.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_CONFIGFIELDS_H
#define K3_IMPORT_CONFIGFIELDS_H

#include "k3/json.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace k3import {

namespace js = ::k3::json;

class Fields {
public:
  /// The message for keys nobody read (checkUnknown).
  static constexpr const char *kDecoderUnknown =
      "unknown field (not a Kimi K3 / Kimi Linear config field this importer "
      "knows)";

  /// `obj` is a JSON object; `prefix` is prepended to its keys in messages
  /// ("" at the top level, "text_config." inside text_config).
  Fields(const js::Value &obj, std::string prefix,
         std::string unknownMessage = kDecoderUnknown)
      : obj_(obj), prefix_(std::move(prefix)),
        unknownMessage_(std::move(unknownMessage)) {}

  std::string path(const std::string &k) const { return prefix_ + k; }
  /// Present (possibly null); marks `k` as read.
  bool has(const std::string &k);
  /// Present and not null; marks `k` as read.
  bool given(const std::string &k);
  /// The raw value or null; marks `k` as read.
  const js::Value *get(const std::string &k);
  /// Known fields that do not matter to the importer.
  void ignore(std::initializer_list<const char *> ks);

  /// A required integer >= min (absent or null: `def` if given, else an
  /// error).
  llvm::Error integer(const std::string &k, int64_t min, int64_t &out,
                      std::optional<int64_t> def = std::nullopt);
  /// An integer >= min, or nothing when absent or null.
  llvm::Error optInteger(const std::string &k, int64_t min,
                         std::optional<int64_t> &out);
  /// A required finite number (absent or null: `def` if given).
  llvm::Error real(const std::string &k, double &out,
                   std::optional<double> def = std::nullopt);
  llvm::Error optReal(const std::string &k, std::optional<double> &out);
  /// true/false, `def` when absent or null.
  llvm::Error boolean(const std::string &k, bool def, bool &out);
  llvm::Error optString(const std::string &k, std::optional<std::string> &out);
  llvm::Error optIntList(const std::string &k,
                         std::optional<std::vector<int64_t>> &out);
  llvm::Error optStringList(const std::string &k,
                            std::optional<std::vector<std::string>> &out);

  /// One value under several names (`num_experts` / `n_routed_experts` /
  /// ...): the names that are given must agree; nothing when none is.
  llvm::Error aliasInteger(std::initializer_list<const char *> names,
                           int64_t min, std::optional<int64_t> &out);
  llvm::Error aliasBoolean(std::initializer_list<const char *> names, bool def,
                           bool &out);

  /// Every key not read and not allow-listed is an error naming it.
  llvm::Error checkUnknown() const;

private:
  static llvm::Error asInt(const js::Value &v, const std::string &p,
                           int64_t min, int64_t &out);

  const js::Value &obj_;
  std::string prefix_;
  std::string unknownMessage_;
  std::set<std::string> used_;
};

} // namespace k3import

#endif

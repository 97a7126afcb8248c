//===- QuantTargets.h - compressed-tensors target matching ------*- C++ -*-===//
//
// A compressed-tensors `targets` or `ignore` entry, matched against a module
// the way compressed-tensors does it (src/compressed_tensors/utils/match.py,
// `is_match` = `_match_name` or `_match_class`):
//
//   * "re:PATTERN": Python `re.match(PATTERN, name)`, i.e. anchored at the
//     start of the module name but not at its end (hence `re:.*foo.*`);
//   * any other string: equal to the module name, or to the `__name__` of a
//     class in the module's MRO ("Linear" matches every nn.Linear).
//
// Python regexes are run by llvm::Regex (POSIX ERE, a linear-time matcher: a
// real K3 config is matched against ~250k expert module names), after a
// translation of the Python syntax ERE lacks (\d \w \s, (?:...), lazy
// quantifiers, escapes inside [...]). Whether a match exists does not depend
// on greediness, so lazy quantifiers translate to greedy ones; what has no
// ERE equivalent (lookaround, backreferences, \b) is an error naming the
// entry.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_QUANTTARGETS_H
#define K3_IMPORT_QUANTTARGETS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Regex.h"

#include <memory>
#include <string>
#include <vector>

namespace k3import {

/// A module as matching sees it: every spelling of its name a config may use
/// (docs/import.md) and its class with its bases (e.g. Linear, Module).
struct ModuleView {
  llvm::ArrayRef<std::string> names;
  llvm::ArrayRef<llvm::StringRef> classes;
};

class Target {
public:
  /// `spec` as written in the config; `field` names it in errors
  /// (`quantization_config.ignore[2]`).
  static llvm::Expected<Target> parse(const std::string &spec,
                                      const std::string &field);

  bool matches(const ModuleView &m) const;
  const std::string &spec() const { return spec_; }

private:
  std::string spec_;
  std::shared_ptr<llvm::Regex> regex_; // for "re:" entries
  /// Substrings every match of regex_ contains: a name without one of them
  /// cannot match, and the regex is not run (most names fail this way).
  std::vector<std::string> required_;
};

/// The POSIX ERE equivalent of Python regex `pattern` for an `re.match`
/// (anchored at the start), or an error message.
llvm::Expected<std::string> pythonRegexToEre(llvm::StringRef pattern);

/// Literal strings that every match of Python regex `pattern` contains (the
/// runs of plain characters at its top level; none when it has a top-level
/// `|`). A conservative filter: it may miss some.
std::vector<std::string> requiredLiterals(llvm::StringRef pattern);

} // namespace k3import

#endif

//===- QuantTargets.cpp - compressed-tensors target matching --------------===//
#include "tools/k3-import/lib/QuantTargets.h"

#include "tools/k3-import/lib/ImportError.h"

#include "llvm/ADT/STLExtras.h"

#include <cctype>

using llvm::Error;
using llvm::StringRef;

namespace k3import {

namespace {

llvm::Error unsupported(const std::string &what) {
  return llvm::createStringError(what);
}

/// The text between the braces of a quantifier `{m}`, `{m,}`, `{m,n}` or
/// `{,n}` at `i` (on the `{`); empty when the `{` is a literal, as Python
/// reads any other `{`.
StringRef quantifierBraces(StringRef p, size_t i) {
  size_t end = p.find('}', i);
  if (end == StringRef::npos)
    return StringRef();
  StringRef body = p.slice(i + 1, end);
  auto digits = [](StringRef s) {
    return llvm::all_of(s, [](char c) { return std::isdigit(c); });
  };
  auto [lo, hi] = body.split(',');
  bool quant =
      !body.empty() && digits(lo) && digits(hi) && !(lo.empty() && hi.empty());
  return quant ? body : StringRef();
}

/// Characters that ERE reads as operators outside a bracket expression.
bool ereSpecial(char c) { return StringRef(".[]()*+?{}|^$\\").contains(c); }

/// The members of a Python character class, written out as an ERE bracket
/// expression, where a `]` must come first, a `-` last, a `^` not first, and
/// a backslash is an ordinary character.
struct BracketSet {
  std::string set; // members other than ] - ^
  bool close = false, dash = false, caret = false;

  void add(char c) {
    close |= c == ']';
    dash |= c == '-';
    caret |= c == '^';
    if (c != ']' && c != '-' && c != '^')
      set += c;
  }
  std::string ere(bool negate) const {
    if (!negate && !close && set.empty() && caret) // only ^ (and -)
      return dash ? "[-^]" : "\\^";
    return std::string("[") + (negate ? "^" : "") + (close ? "]" : "") + set +
           (caret ? "^" : "") + (dash ? "-" : "") + "]";
  }
};

/// Translates one Python pattern, left to right.
class Translator {
public:
  explicit Translator(StringRef p) : p_(p) {}
  llvm::Expected<std::string> run();

private:
  Error step();
  Error escape();
  Error bracket();
  Error bracketMember(size_t &j, BracketSet &s);
  Error group();
  Error braces();
  void skipLazy() {
    if (i_ < p_.size() && p_[i_] == '?')
      ++i_; // lazy: the same matches exist
  }

  StringRef p_;
  size_t i_ = 0;
  std::string out_;
};

llvm::Expected<std::string> Translator::run() {
  out_ = "^(";
  while (i_ < p_.size())
    if (Error e = step())
      return std::move(e);
  return out_ + ")";
}

Error Translator::step() {
  char c = p_[i_];
  if (c == '\\')
    return escape();
  if (c == '[')
    return bracket();
  if (c == '(')
    return group();
  if (c == '{')
    return braces();
  out_ += c;
  ++i_;
  if (c == '*' || c == '+' || c == '?') {
    if (i_ < p_.size() && p_[i_] == '+')
      return unsupported("a possessive quantifier");
    skipLazy();
  }
  return Error::success();
}

/// `\x` outside a bracket expression.
Error Translator::escape() {
  if (i_ + 1 >= p_.size())
    return unsupported("a trailing backslash");
  char c = p_[i_ + 1];
  i_ += 2;
  static const std::pair<char, const char *> kClasses[] = {
      {'d', "[0-9]"},
      {'D', "[^0-9]"},
      {'w', "[A-Za-z0-9_]"},
      {'W', "[^A-Za-z0-9_]"},
      {'s', "[ \t\n\r\f\v]"},
      {'S', "[^ \t\n\r\f\v]"},
      {'A', "^"},
      {'Z', "$"},
      {'n', "\n"},
      {'t', "\t"}};
  for (auto &[esc, ere] : kClasses)
    if (c == esc) {
      out_ += ere;
      return Error::success();
    }
  if (std::isalnum(static_cast<unsigned char>(c)))
    return unsupported(std::string("the escape \\") + c);
  if (ereSpecial(c))
    out_ += '\\';
  out_ += c;
  return Error::success();
}

/// One member of [...] at `j`: a character, an escape or a range a-z.
Error Translator::bracketMember(size_t &j, BracketSet &s) {
  char c = p_[j++];
  bool rangeNext = j + 1 < p_.size() && p_[j] == '-' && p_[j + 1] != ']';
  if (c == '[')
    return unsupported("'[' inside [...]");
  if (c != '\\') {
    if (!rangeNext) {
      s.add(c);
      return Error::success();
    }
    char hi = p_[j + 1];
    if (StringRef("[]\\^-").contains(hi) || StringRef("]^-").contains(c))
      return unsupported("a range in [...] with a special character");
    s.set += {c, '-', hi};
    j += 2;
    return Error::success();
  }
  if (j >= p_.size())
    return unsupported("a trailing backslash");
  char e = p_[j++];
  static const std::pair<char, const char *> kClasses[] = {
      {'d', "0-9"}, {'w', "A-Za-z0-9_"}, {'s', " \t\n\r\f\v"}};
  for (auto &[esc, members] : kClasses)
    if (e == esc) {
      s.set += members;
      return Error::success();
    }
  if (std::isalnum(static_cast<unsigned char>(e)) && e != 'n' && e != 't')
    return unsupported(std::string("the escape \\") + e + " in [...]");
  if (j + 1 < p_.size() && p_[j] == '-' && p_[j + 1] != ']')
    return unsupported("a range in [...] from an escape");
  s.add(e == 'n' ? '\n' : e == 't' ? '\t' : e);
  return Error::success();
}

/// A Python character class (a `]` right after `[` or `[^` is a member).
Error Translator::bracket() {
  size_t j = i_ + 1;
  bool negate = j < p_.size() && p_[j] == '^';
  if (negate)
    ++j;
  BracketSet s;
  for (size_t first = j; j < p_.size() && !(p_[j] == ']' && j != first);)
    if (Error e = bracketMember(j, s))
      return e;
  if (j >= p_.size())
    return unsupported("an unterminated [");
  out_ += s.ere(negate);
  i_ = j + 1;
  return Error::success();
}

/// `(`, `(?:`, `(?P<name>`; other `(?` groups have no ERE equivalent.
Error Translator::group() {
  ++i_;
  out_ += '(';
  if (i_ >= p_.size() || p_[i_] != '?')
    return Error::success();
  if (p_.substr(i_).starts_with("?:")) {
    i_ += 2;
    return Error::success();
  }
  if (p_.substr(i_).starts_with("?P<")) {
    size_t end = p_.find('>', i_);
    if (end == StringRef::npos)
      return unsupported("an unterminated (?P<name>");
    i_ = end + 1;
    return Error::success();
  }
  return unsupported("the group (" + p_.substr(i_, 3).str() +
                     "...) (lookaround, flag or reference)");
}

/// `{m}`, `{m,}`, `{m,n}`, `{,n}` are quantifiers; any other `{` is literal
/// in Python.
Error Translator::braces() {
  StringRef body = quantifierBraces(p_, i_);
  if (body.empty()) {
    out_ += "\\{";
    ++i_;
    return Error::success();
  }
  auto [lo, hi] = body.split(',');
  out_ += "{" + (lo.empty() ? std::string("0") : lo.str()) +
          (body.contains(',') ? "," + hi.str() : std::string()) + "}";
  i_ += body.size() + 2;
  skipLazy();
  return Error::success();
}

/// Skips a [...] class starting at `i` (on the `[`); returns the index past
/// its `]` (or the end).
size_t skipClass(StringRef p, size_t i) {
  size_t j = i + 1;
  if (j < p.size() && p[j] == '^')
    ++j;
  for (size_t first = j; j < p.size() && !(p[j] == ']' && j != first); ++j)
    if (p[j] == '\\')
      ++j;
  return j + 1;
}

} // namespace

std::vector<std::string> requiredLiterals(StringRef p) {
  std::vector<std::string> runs;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty())
      runs.push_back(cur);
    cur.clear();
  };
  bool literal = false; // the last atom is the last char of `cur`
  int depth = 0;        // of (...) groups, whose contents are skipped
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    bool wasLiteral = literal;
    literal = false;
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      if (depth == 0 && !std::isalnum(static_cast<unsigned char>(n))) {
        cur += n;
        literal = true;
      } else if (depth == 0) {
        flush();
      }
    } else if (c == '[') {
      i = skipClass(p, i) - 1;
      if (depth == 0)
        flush();
    } else if (c == '(' || c == ')') {
      depth += c == '(' ? 1 : -1;
      flush();
    } else if (depth > 0) {
      continue;
    } else if (c == '|') {
      return {}; // top-level alternation: nothing is required
    } else if (c == '*' || c == '?' ||
               (c == '{' && !quantifierBraces(p, i).empty())) {
      if (wasLiteral)
        cur.pop_back(); // the atom may be absent
      flush();
      if (c == '{')
        i += quantifierBraces(p, i).size() + 1;
    } else if (c == '+' || c == '.' || c == '^' || c == '$') {
      flush();
    } else {
      cur += c;
      literal = true;
    }
  }
  flush();
  return runs;
}

llvm::Expected<std::string> pythonRegexToEre(StringRef pattern) {
  return Translator(pattern).run();
}

llvm::Expected<Target> Target::parse(const std::string &spec,
                                     const std::string &field) {
  Target t;
  t.spec_ = spec;
  if (!StringRef(spec).starts_with("re:"))
    return t;
  llvm::Expected<std::string> ere =
      pythonRegexToEre(StringRef(spec).drop_front(3));
  if (!ere)
    return fieldError(field, "'" + spec +
                                 "': " + llvm::toString(ere.takeError()) +
                                 " is not supported in re: patterns");
  t.regex_ = std::make_shared<llvm::Regex>(*ere);
  t.required_ = requiredLiterals(StringRef(spec).drop_front(3));
  std::string err;
  if (!t.regex_->isValid(err))
    return fieldError(field, "'" + spec + "' is not a supported regex: " + err);
  return t;
}

bool Target::matches(const ModuleView &m) const {
  if (regex_)
    return llvm::any_of(m.names, [&](const std::string &n) {
      for (const std::string &r : required_)
        if (n.find(r) == std::string::npos)
          return false;
      return regex_->match(StringRef(n));
    });
  return llvm::is_contained(m.names, spec_) ||
         llvm::is_contained(m.classes, StringRef(spec_));
}

} // namespace k3import

// Section ANED of a .k3bin (docs/artifact-format.md): every recorded
// launch's arguments against what its kernel takes. The launch table is
// data like any other: an argument that names another, smaller buffer, or
// a symbol where the kernel expects a pointer, would make a kernel read or
// write outside its buffer (found by runtime/fuzz/run_mutated_artifacts.py
// mutating section ENTR). The compiler records each argument's kind and the
// bytes its kernel may touch; here they must match the arguments.
#include "artifact_format.h"

#include <algorithm>

namespace k3 {
namespace artifact {
namespace format {
namespace {

/// The largest value of `d` over the symbols' ranges [0, max]: an
/// expression (a s + b) / c is monotone in s, so one of the two ends.
bool maxOverSymbols(const DimExpr &d, const std::vector<int64_t> &symMax,
                    int64_t &out, std::string &msg) {
  int64_t hi;
  if (!evalDim(d, symMax.data(), symMax.size(), hi, msg))
    return false;
  out = hi;
  if (d.isConstant())
    return true;
  std::vector<int64_t> zeros(symMax.size(), 0);
  int64_t lo;
  if (!evalDim(d, zeros.data(), zeros.size(), lo, msg))
    return false;
  out = std::max(lo, hi);
  return true;
}

/// Bytes the argument `g` offers from its address.
uint64_t bytesOffered(const Artifact &a, const Arg &g) {
  if (g.kind == ArgKind::Buffer) {
    const Buffer &b = a.buffers[g.index];
    return b.size - g.offset; // the offset is inside (checked before)
  }
  return weightBytes(a.weights[g.index]);
}

/// An argument the compiler bound to entry input `input` - 1 is that
/// input's buffer (its kernel may read indices from it, which the runtime
/// checks on that input only).
bool boundToInput(const Artifact &a, const Entry &en, const Arg &g,
                  uint8_t input, const std::string &an, const std::string &np,
                  VErr &e) {
  if (input > en.inputs.size()) {
    e = {np, an + ": input " + std::to_string(input - 1) +
                 " out of range (the entry has " +
                 std::to_string(en.inputs.size()) + ")"};
    return false;
  }
  const TensorSpec &want = en.inputs[input - 1];
  if (g.kind == ArgKind::Buffer && g.index == want.buffer)
    return true;
  std::string got = g.kind == ArgKind::Buffer && g.index < a.buffers.size()
                        ? "buffer '" + a.buffers[g.index].name + "'"
                        : std::string("a ") + argKindName(g.kind);
  e = {np, an + " must be input '" + want.name + "' (its kernel reads its " +
               "values), not " + got};
  return false;
}

} // namespace

bool validateArgNeeds(const Artifact &a, const std::vector<int64_t> &symMax,
                      VErr &e) {
  for (size_t ei = 0; ei < a.entries.size(); ++ei) {
    const Entry &en = a.entries[ei];
    for (size_t li = 0; li < en.launches.size(); ++li) {
      const Launch &l = en.launches[li];
      if (l.needs.empty())
        continue;
      std::string lp = "entries[" + std::to_string(ei) + "].launches[" +
                       std::to_string(li) + "]";
      std::string ln = "entry '" + en.name + "' launch " + std::to_string(li) +
                       " ('" + l.kernel + "')";
      if (l.needs.size() != l.args.size()) {
        e = {lp + ".needs", ln + ": " + std::to_string(l.needs.size()) +
                                " needs for " + std::to_string(l.args.size()) +
                                " arguments"};
        return false;
      }
      for (size_t k = 0; k < l.args.size(); ++k) {
        const Arg &g = l.args[k];
        const ArgNeed &need = l.needs[k];
        std::string np = lp + ".needs[" + std::to_string(k) + "]";
        std::string an = ln + " argument " + std::to_string(k);
        if (g.kind != need.kind) {
          e = {np, an + " is a " + argKindName(g.kind) +
                       " but its kernel takes a " + argKindName(need.kind)};
          return false;
        }
        if (need.input && !boundToInput(a, en, g, need.input, an, np, e))
          return false;
        if (uint8_t(need.access) > uint8_t(ArgAccess::Written) ||
            (need.access != ArgAccess::Unknown && g.kind != ArgKind::Buffer)) {
          e = {np, an + ": access " + std::to_string(int(need.access)) +
                       (g.kind == ArgKind::Buffer
                            ? " (0 unknown, 1 read, 2 written)"
                            : " on a " + std::string(argKindName(g.kind)) +
                                  " (only buffers have one)")};
          return false;
        }
        std::string msg;
        if (!checkDimExpr(need.bytes, a.symbols.size(), msg)) {
          e = {np, an + ": " + msg};
          return false;
        }
        if (g.kind != ArgKind::Buffer && g.kind != ArgKind::Weight) {
          if (!(need.bytes == DimExpr::constant(0))) {
            e = {np, an + ": a " + std::string(argKindName(g.kind)) +
                         " needs no bytes"};
            return false;
          }
          continue;
        }
        int64_t bytes;
        if (!maxOverSymbols(need.bytes, symMax, bytes, msg)) {
          e = {np, an + ": " + msg};
          return false;
        }
        uint64_t offered = bytesOffered(a, g);
        if (bytes < 0 || uint64_t(bytes) > offered) {
          std::string what = g.kind == ArgKind::Buffer
                                 ? "buffer '" + a.buffers[g.index].name + "'"
                                 : "weight '" + a.weights[g.index].name + "'";
          e = {np, an + ": its kernel may touch " + std::to_string(bytes) +
                       " bytes at the symbols' max bounds but " + what +
                       " offers " + std::to_string(offered)};
          return false;
        }
      }
    }
  }
  return true;
}

} // namespace format
} // namespace artifact
} // namespace k3

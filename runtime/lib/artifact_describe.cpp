// describe(): an artifact as text (k3-run --describe, k3-opt reports). See
// docs/artifact-format.md.
#include "k3/artifact.h"

#include <cstdio>

namespace k3 {
namespace artifact {

namespace {
std::string argToString(const Arg &g, const Artifact &a) {
  switch (g.kind) {
  case ArgKind::Buffer:
    return "buffer " +
           (g.index < a.buffers.size() ? "'" + a.buffers[g.index].name + "'"
                                       : std::to_string(g.index)) +
           (g.offset ? " + " + std::to_string(g.offset) : "");
  case ArgKind::Weight:
    return "weight " + (g.index < a.weights.size()
                            ? "'" + a.weights[g.index].name + "'"
                            : std::to_string(g.index));
  case ArgKind::I32:
    return "i32 " + std::to_string(g.imm);
  case ArgKind::I64:
    return "i64 " + std::to_string(g.imm);
  case ArgKind::F32: {
    char buf[48];
    snprintf(buf, sizeof buf, "f32 %g", double(g.fimm));
    return buf;
  }
  case ArgKind::Symbol:
    return "symbol " + (g.index < a.symbols.size() ? a.symbols[g.index].name
                                                   : std::to_string(g.index));
  case ArgKind::TensorMap:
    return "tensor map " + std::to_string(g.index);
  }
  return "invalid arg kind " + std::to_string(int(g.kind));
}
} // namespace

std::string describe(const Artifact &a) {
  std::vector<std::string> sn;
  for (auto &s : a.symbols)
    sn.push_back(s.name);
  auto dims = [&](const std::vector<DimExpr> &v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i)
      r += (i ? ", " : "") + dimToString(v[i], sn);
    return r + "]";
  };
  std::string o = "k3bin " + std::to_string(a.versionMajor) + "." +
                  std::to_string(a.versionMinor) + "\n";
  for (auto &kv : a.metadata)
    if (kv.first != kMetaConfigJson)
      o += "meta " + kv.first + " = " + kv.second + "\n";
  for (auto &s : a.symbols)
    o += "symbol " + s.name + " <= " + std::to_string(s.maxValue) + "\n";
  for (size_t i = 0; i < a.objects.size(); ++i)
    o += "object " + std::to_string(i) + ": " + a.objects[i].target + ", " +
         std::to_string(a.objects[i].data.size()) + " bytes, " +
         std::to_string(a.objects[i].symbols.size()) + " kernels\n";
  o += std::to_string(a.weights.size()) + " weights, " +
       std::to_string(a.buffers.size()) + " buffers\n";
  for (size_t i = 0; i < a.tensorMaps.size(); ++i) {
    const TensorMapSpec &t = a.tensorMaps[i];
    std::string box = "[";
    for (size_t k = 0; k < t.box.size(); ++k)
      box += (k ? ", " : "") + std::to_string(t.box[k]);
    static const char *sw[4] = {"none", "32B", "64B", "128B"};
    static const char *l2[4] = {"none", "64B", "128B", "256B"};
    o += "tensor map " + std::to_string(i) + ": " + argToString(t.source, a) +
         ", " + dtypeName(t.dtype) + " dims " + dims(t.dims) +
         " byte strides " + dims(t.strides) + " box " + box + "] swizzle " +
         (t.swizzle < 4 ? sw[t.swizzle] : "?") + " l2 " +
         (t.l2Promotion < 4 ? l2[t.l2Promotion] : "?") + " oob " +
         (t.oobFill ? "nan" : "zero") + "\n";
  }
  for (const WeightShard &w : a.weightShards)
    o += "shard " +
         (w.weight < a.weights.size() ? "'" + a.weights[w.weight].name + "'"
                                      : std::to_string(w.weight)) +
         ": dim " + std::to_string(w.dim) + " split " +
         std::to_string(w.parts) + " ways over group " + w.group +
         (w.weight < a.weights.size() &&
                  w.dim < a.weights[w.weight].shape.size() &&
                  w.extent != uint64_t(w.parts) *
                                  uint64_t(a.weights[w.weight].shape[w.dim])
              ? " (of " + std::to_string(w.extent) + ")"
              : std::string()) +
         "\n";
  for (auto &e : a.entries) {
    o += "entry " + e.name + ": " + std::to_string(e.inputs.size()) +
         " inputs, " + std::to_string(e.outputs.size()) + " outputs, " +
         std::to_string(e.launches.size()) + " launches\n";
    if (isContextParallelEntry(a, e))
      o += "  context-parallel: each cp rank runs its segment of every "
           "sequence of a call (the runtime cuts the call and puts the "
           "outputs together)\n";
    for (auto &t : e.inputs) {
      o +=
          "  input " + t.name + ": " + dtypeName(t.dtype) + " " + dims(t.shape);
      if (t.maxValue)
        o += ", values <= " + std::to_string(*t.maxValue) +
             (t.maxValueReason.empty() ? "" : ": " + t.maxValueReason);
      o += "\n";
    }
    for (auto &t : e.outputs)
      o += "  output " + t.name + ": " + dtypeName(t.dtype) + " " +
           dims(t.shape) + "\n";
    for (size_t li = 0; li < e.launches.size(); ++li) {
      const Launch &l = e.launches[li];
      if (l.object == kCollectiveObject && l.args.size() == 3 &&
          l.args[2].imm >= 0 &&
          uint64_t(l.args[2].imm) < a.collectives.size()) {
        const Collective &c = a.collectives[size_t(l.args[2].imm)];
        o += "  launch " + std::to_string(li) + ": " + collectiveName(c.kind) +
             (c.kind == CollectiveKind::AllGather ||
                      c.kind == CollectiveKind::AllToAll
                  ? std::string()
              : c.reduce == ReduceOp::Sum ? " sum"
                                          : " max") +
             " over " + c.group + " (" + std::to_string(c.groupSize) +
             " ranks), " + dtypeName(c.dtype) + " [" +
             dimToString(c.outer, sn) + ", " + dimToString(c.chunk, sn) +
             "]: " + argToString(l.args[0], a) + " -> " +
             argToString(l.args[1], a) + "\n";
        continue;
      }
      std::vector<DimExpr> g(l.grid, l.grid + 3), b(l.block, l.block + 3);
      o += "  launch " + std::to_string(li) + ": " + l.kernel + " (object " +
           std::to_string(l.object) + ") grid " + dims(g) + " block " +
           dims(b) + " smem " + dimToString(l.sharedMemBytes, sn) + "\n";
      for (size_t ai = 0; ai < l.args.size(); ++ai) {
        o +=
            "    arg " + std::to_string(ai) + ": " + argToString(l.args[ai], a);
        // Section ANED: the bytes its kernel may touch through it, and
        // whether it writes them.
        if (ai < l.needs.size()) {
          const ArgNeed &need = l.needs[ai];
          const char *verb = need.access == ArgAccess::Read      ? "reads"
                             : need.access == ArgAccess::Written ? "writes"
                                                                 : "touches";
          if (!(need.bytes == DimExpr::constant(0)))
            o += std::string(" (kernel ") + verb +
                 " <= " + dimToString(need.bytes, sn) + " bytes)";
          else if (need.access != ArgAccess::Unknown)
            o += std::string(" (kernel ") + verb + ")";
        }
        o += "\n";
      }
    }
  }
  return o;
}

} // namespace artifact
} // namespace k3

// The validator's rules for a partitioned artifact (sections COLL and SHRD,
// format 1.3): the collectives, the weight shards, one size per group, and
// each collective launch's buffers. See docs/artifact-format.md.
#include "artifact_format.h"

#include <map>
#include <set>

namespace k3 {
namespace artifact {
namespace format {
namespace {

bool failAt(VErr &e, std::string path, std::string msg) {
  e.path = std::move(path);
  e.msg = std::move(msg);
  return false;
}

/// Every group names one size, and the world of them is bounded.
bool checkGroupSize(std::map<std::string, uint32_t> &sizes,
                    const std::string &group, uint32_t size,
                    const std::string &path, VErr &e) {
  if (!isGroupName(group))
    return failAt(e, path,
                  "group '" + group + "' is not one of 'tp', 'ep', 'cp'");
  if (size < 1 || size > kMaxGroupSize)
    return failAt(e, path,
                  "group '" + group + "' size " + std::to_string(size) +
                      " outside [1, " + std::to_string(kMaxGroupSize) + "]");
  auto [it, fresh] = sizes.emplace(group, size);
  if (!fresh && it->second != size)
    return failAt(e, path,
                  "group '" + group + "' has size " + std::to_string(size) +
                      " here but " + std::to_string(it->second) + " elsewhere");
  return true;
}

/// A dim of a collective: valid, and growing with its symbol (so that its
/// value at the symbols' max bounds is its largest).
bool checkCollectiveDim(const DimExpr &d, size_t nsyms, const std::string &path,
                        VErr &e) {
  std::string msg;
  if (!checkDimExpr(d, nsyms, msg))
    return failAt(e, path, msg);
  if (d.a < 0 || (d.isConstant() && d.b < 1))
    return failAt(e, path, "must be positive and grow with its symbol");
  return true;
}

/// Elements of a collective's input or output at the symbols' max bounds.
bool maxElements(const Collective &c, bool output,
                 const std::vector<int64_t> &symMax, unsigned __int128 &n,
                 std::string &err) {
  int64_t outer = 0, chunk = 0;
  if (!evalDim(c.outer, symMax.data(), symMax.size(), outer, err) ||
      !evalDim(c.chunk, symMax.data(), symMax.size(), chunk, err))
    return false;
  n = (unsigned __int128)uint64_t(std::max<int64_t>(outer, 0)) *
      uint64_t(std::max<int64_t>(chunk, 0));
  bool grouped = c.kind == CollectiveKind::AllGather       ? output
                 : c.kind == CollectiveKind::ReduceScatter ? !output
                                                           : false;
  if (grouped)
    n *= c.groupSize;
  return true;
}

} // namespace

bool validatePartition(const Artifact &a, VErr &e) {
  std::map<std::string, uint32_t> sizes;
  for (size_t i = 0; i < a.collectives.size(); ++i) {
    const Collective &c = a.collectives[i];
    std::string p = "collectives[" + std::to_string(i) + "]";
    if (uint8_t(c.kind) > uint8_t(CollectiveKind::AllToAll))
      return failAt(e, p, "invalid kind " + std::to_string(int(c.kind)));
    if (uint8_t(c.reduce) > uint8_t(ReduceOp::Max))
      return failAt(e, p, "invalid reduction " + std::to_string(int(c.reduce)));
    if (c.dtype == DType::MXFP4)
      return failAt(e, p, "mxfp4 is a weight format, not a collective's");
    if (!checkGroupSize(sizes, c.group, c.groupSize, p, e) ||
        !checkCollectiveDim(c.outer, a.symbols.size(), p + ".outer", e) ||
        !checkCollectiveDim(c.chunk, a.symbols.size(), p + ".chunk", e))
      return false;
  }
  std::set<uint32_t> sharded;
  for (size_t i = 0; i < a.weightShards.size(); ++i) {
    const WeightShard &s = a.weightShards[i];
    std::string p = "weight_shards[" + std::to_string(i) + "]";
    if (s.weight >= a.weights.size())
      return failAt(e, p,
                    "weight index " + std::to_string(s.weight) +
                        " out of range (" + std::to_string(a.weights.size()) +
                        " weights)");
    const Weight &w = a.weights[s.weight];
    if (!sharded.insert(s.weight).second)
      return failAt(e, p, "weight '" + w.name + "' sharded twice");
    if (s.dim >= w.shape.size())
      return failAt(e, p,
                    "weight '" + w.name + "': shard dim " +
                        std::to_string(s.dim) + " >= its rank " +
                        std::to_string(w.shape.size()));
    // An MXFP4 rank's part has whole scale blocks (the weights' own rule, a
    // last dimension that is a multiple of 32, holds for its shape); the
    // whole weight must too, or its scales' rows would not be whole.
    if (w.dtype == DType::MXFP4 && s.dim + 1 == w.shape.size() &&
        s.extent % kMXFP4Block != 0)
      return failAt(e, p,
                    "weight '" + w.name + "': mxfp4 extent " +
                        std::to_string(s.extent) +
                        " along its inputs is not a multiple of 32");
    if (!checkGroupSize(sizes, s.group, s.parts, p, e))
      return false;
    uint64_t covered = uint64_t(s.parts) * uint64_t(w.shape[s.dim]);
    if (s.extent < covered || s.extent > (uint64_t(1) << 40))
      return failAt(
          e, p,
          "weight '" + w.name + "': extent " + std::to_string(s.extent) +
              " along dim " + std::to_string(s.dim) + " is not in [" +
              std::to_string(covered) + " (" + std::to_string(s.parts) + " x " +
              std::to_string(w.shape[s.dim]) + "), 2^40]");
  }
  uint64_t world = 1;
  for (auto &[g, n] : sizes)
    world *= n;
  if (world > kMaxGroupSize * kMaxGroupSize)
    return failAt(e, "collectives",
                  "world of " + std::to_string(world) + " ranks is absurd");
  return true;
}

bool validateCollectiveLaunch(const Artifact &a, const Launch &l,
                              const std::vector<int64_t> &symMax,
                              const std::string &lp, const std::string &ln,
                              VErr &e) {
  if (!l.kernel.empty())
    return failAt(e, lp, ln + ": a collective launch names no kernel");
  if (l.args.size() != 3 || l.args[0].kind != ArgKind::Buffer ||
      l.args[1].kind != ArgKind::Buffer || l.args[2].kind != ArgKind::I64)
    return failAt(e, lp,
                  ln + ": a collective launch takes (buffer in, buffer out, "
                       "i64 collective index)");
  if (l.args[2].imm < 0 || uint64_t(l.args[2].imm) >= a.collectives.size())
    return failAt(e, lp + ".args[2]",
                  ln + ": collective index " + std::to_string(l.args[2].imm) +
                      " out of range (" + std::to_string(a.collectives.size()) +
                      " collectives)");
  const Collective &c = a.collectives[size_t(l.args[2].imm)];
  for (int k = 0; k < 2; ++k) {
    const Arg &g = l.args[k];
    std::string ap = lp + ".args[" + std::to_string(k) + "]";
    if (g.index >= a.buffers.size())
      return failAt(e, ap, ln + ": buffer id out of range");
    const Buffer &b = a.buffers[g.index];
    unsigned __int128 n = 0;
    std::string err;
    if (!maxElements(c, k == 1, symMax, n, err))
      return failAt(e, ap, ln + ": " + err);
    unsigned __int128 bytes = n * dtypeSize(c.dtype);
    if (g.offset > b.size || bytes > b.size - g.offset)
      return failAt(e, ap,
                    ln + ": " + collectiveName(c.kind) + " needs " +
                        std::to_string(uint64_t(
                            std::min<unsigned __int128>(bytes, ~uint64_t(0)))) +
                        " bytes at the symbols' max bounds from byte " +
                        std::to_string(g.offset) + " of buffer '" + b.name +
                        "' (" + std::to_string(b.size) + " bytes)");
  }
  if (l.args[0].index == l.args[1].index)
    return failAt(e, lp,
                  ln + ": a collective's input and output share a buffer");
  return true;
}

} // namespace format
} // namespace artifact
} // namespace k3

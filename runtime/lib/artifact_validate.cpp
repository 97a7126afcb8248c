// The .k3bin validator: every rule of the format over an Artifact. See
// docs/artifact-format.md.
#include "artifact_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace k3 {
namespace artifact {

using namespace format;

bool format::checkDimExpr(const DimExpr &d, size_t nsyms, std::string &msg) {
  if (d.c <= 0) {
    msg = "divisor c=" + std::to_string(d.c) + " must be > 0";
    return false;
  }
  if (d.sym != kNoSymbol && d.sym >= nsyms) {
    msg = "symbol index " + std::to_string(d.sym) + " out of range (" +
          std::to_string(nsyms) + " symbols)";
    return false;
  }
  if (d.sym == kNoSymbol && (d.a != 0 || d.c != 1)) {
    msg = "constant dim must have a=0 and c=1";
    return false;
  }
  return true;
}

namespace {

bool checkDim(const DimExpr &d, size_t nsyms, std::string &msg) {
  return checkDimExpr(d, nsyms, msg);
}

// Launch dimensions at the symbols' max bounds: CUDA's limits (grid.x below
// 2^31, grid.y and .z at most 65535; block.x and .y at most 1024, .z 64, and
// 1024 threads in all; the H200's 227 KiB of shared memory a block), which
// also keep a mutated table from launching an absurd amount of work.
constexpr int64_t kMaxBlockThreads = 1024, kMaxCPUBlocks = int64_t(1) << 20;
constexpr int64_t kLaunchDimMax[7] = {
    (int64_t(1) << 31) - 1, 65535, 65535, 1024, 1024, 64, 232448};

/// Dimension k of a launch (grid x, y, z, block x, y, z, shared memory
/// bytes) over every symbol value in [0, max]: an affine ceil in one
/// symbol is monotone, so its extremes are at the ends. Grids and shared
/// memory may be 0 (no blocks at T = 0), blocks not. `hi`: its maximum.
bool launchDimInRange(const DimExpr &d, int k,
                      const std::vector<int64_t> &symMax, int64_t &hi,
                      std::string &msg) {
  std::vector<int64_t> zeros(symMax.size(), 0);
  int64_t lo = 0, top = 0;
  if (!evalDim(d, zeros.data(), zeros.size(), lo, msg) ||
      !evalDim(d, symMax.data(), symMax.size(), top, msg))
    return false;
  hi = std::max(lo, top);
  int64_t least = std::min(lo, top), floor = (k >= 3 && k < 6) ? 1 : 0;
  if (least < floor || hi > kLaunchDimMax[k]) {
    msg = "ranges over [" + std::to_string(least) + ", " + std::to_string(hi) +
          "] for the symbols in [0, max]; it must lie in [" +
          std::to_string(floor) + ", " + std::to_string(kLaunchDimMax[k]) + "]";
    return false;
  }
  return true;
}

// Every rule of cuTensorMapEncodeTiled that holds whatever the symbol
// values: rank, dims/strides/box counts, box sizes, the 16-byte rules,
// swizzle span, enum ranges, the source, and (when every dim grows with the
// symbols) the described bytes fit the source at the symbols' max bounds.
bool validateTensorMaps(const Artifact &a, const std::vector<int64_t> &symMax,
                        VErr &e) {
  auto fail = [&](std::string path, std::string msg) {
    e.path = std::move(path);
    e.msg = std::move(msg);
    return false;
  };
  std::string msg;
  for (size_t i = 0; i < a.tensorMaps.size(); ++i) {
    const TensorMapSpec &t = a.tensorMaps[i];
    std::string p = "tensor_maps[" + std::to_string(i) + "]";
    std::string n = "tensor map " + std::to_string(i);
    uint64_t srcBytes = 0;
    std::string srcName;
    if (t.source.kind == ArgKind::Buffer) {
      if (t.source.index >= a.buffers.size())
        return fail(p + ".source",
                    n + ": buffer id " + std::to_string(t.source.index) +
                        " out of range (" + std::to_string(a.buffers.size()) +
                        " buffers)");
      const Buffer &b = a.buffers[t.source.index];
      srcName = "buffer '" + b.name + "'";
      if (t.source.offset >= b.size)
        return fail(p + ".source", n + ": byte offset " +
                                       std::to_string(t.source.offset) +
                                       " outside " + srcName + " (" +
                                       std::to_string(b.size) + " bytes)");
      if (t.source.offset % 16)
        return fail(p + ".source",
                    n + ": byte offset " + std::to_string(t.source.offset) +
                        " into " + srcName +
                        " is not a multiple of 16 (TMA needs a 16-byte "
                        "aligned global address)");
      srcBytes = b.size - t.source.offset;
    } else if (t.source.kind == ArgKind::Weight) {
      if (t.source.index >= a.weights.size())
        return fail(p + ".source",
                    n + ": weight index " + std::to_string(t.source.index) +
                        " out of range (" + std::to_string(a.weights.size()) +
                        " weights)");
      const Weight &w = a.weights[t.source.index];
      srcName = "weight '" + w.name + "'";
      if (t.source.offset != 0)
        return fail(p + ".source", n + ": a weight source has no offset");
      srcBytes = weightBytes(w);
    } else {
      return fail(p + ".source",
                  n + ": source must be a buffer or weight argument (kind " +
                      std::to_string(int(t.source.kind)) + ")");
    }
    n += " (" + srcName + ")";
    if (uint8_t(t.dtype) >= kNumDTypes || t.dtype == DType::MXFP4)
      return fail(p, n + ": invalid dtype " + std::to_string(int(t.dtype)));
    size_t es = dtypeSize(t.dtype);
    if (t.rank < 1 || t.rank > kMaxTensorMapRank)
      return fail(p,
                  n + ": rank " + std::to_string(t.rank) + " is outside 1..5");
    if (t.dims.size() != t.rank || t.strides.size() != t.rank - 1 ||
        t.box.size() != t.rank)
      return fail(p, n + ": rank " + std::to_string(t.rank) + " needs " +
                         std::to_string(t.rank) + " dims, " +
                         std::to_string(t.rank - 1) + " strides and " +
                         std::to_string(t.rank) + " box sizes (has " +
                         std::to_string(t.dims.size()) + ", " +
                         std::to_string(t.strides.size()) + ", " +
                         std::to_string(t.box.size()) + ")");
    if (t.interleave != 0)
      return fail(p, n + ": interleave " + std::to_string(t.interleave) +
                         " is not supported (only 0, none)");
    if (t.swizzle > 3)
      return fail(p, n + ": swizzle " + std::to_string(t.swizzle) +
                         " is not one of 0 none, 1 32B, 2 64B, 3 128B");
    if (t.l2Promotion > 3)
      return fail(p, n + ": l2 promotion " + std::to_string(t.l2Promotion) +
                         " is not one of 0 none, 1 64B, 2 128B, 3 256B");
    if (t.oobFill > 1)
      return fail(p, n + ": oob fill " + std::to_string(t.oobFill) +
                         " is not one of 0 zeros, 1 NaN");
    if (t.oobFill == 1 && t.dtype == DType::I32)
      return fail(p, n + ": NaN out-of-bounds fill needs a float dtype");
    for (uint32_t k = 0; k < t.rank; ++k) {
      std::string bp = p + ".box[" + std::to_string(k) + "]";
      if (t.box[k] < 1 || t.box[k] > kMaxTensorMapBox)
        return fail(bp, n + ": box size " + std::to_string(t.box[k]) +
                            " is outside 1..256");
    }
    uint64_t innerBytes = uint64_t(t.box[0]) * es;
    if (innerBytes % 16)
      return fail(p + ".box[0]", n + ": innermost box " +
                                     std::to_string(t.box[0]) + " x " +
                                     std::to_string(es) +
                                     " bytes = " + std::to_string(innerBytes) +
                                     " bytes is not a multiple of 16");
    if (t.swizzle) {
      uint64_t span = uint64_t(16) << t.swizzle;
      if (innerBytes > span)
        return fail(p + ".box[0]",
                    n + ": innermost box of " + std::to_string(innerBytes) +
                        " bytes exceeds the " + std::to_string(span) +
                        "-byte swizzle span");
    }
    bool monotone = true;
    for (int isStride = 0; isStride < 2; ++isStride) {
      const auto &list = isStride ? t.strides : t.dims;
      for (size_t k = 0; k < list.size(); ++k) {
        const DimExpr &d = list[k];
        std::string dp =
            p + (isStride ? ".strides[" : ".dims[") + std::to_string(k) + "]";
        if (!checkDim(d, a.symbols.size(), msg))
          return fail(dp, n + ": " + msg);
        if (d.a < 0)
          monotone = false;
        if (!d.isConstant())
          continue;
        if (!isStride && (d.b < 1 || d.b > (int64_t(1) << 32)))
          return fail(dp, n + ": dim " + std::to_string(d.b) +
                              " is outside 1..2^32");
        if (isStride && (d.b <= 0 || d.b % 16 || d.b >= (int64_t(1) << 40)))
          return fail(dp, n + ": stride " + std::to_string(d.b) +
                              " bytes is not a positive multiple of 16 below "
                              "2^40");
      }
    }
    bool allConstant = true;
    for (auto &d : t.dims)
      allConstant &= d.isConstant();
    for (auto &d : t.strides)
      allConstant &= d.isConstant();
    if (allConstant) {
      uint64_t dv[kMaxTensorMapRank], sv[kMaxTensorMapRank] = {};
      for (uint32_t k = 0; k < t.rank; ++k)
        dv[k] = uint64_t(t.dims[k].b);
      for (uint32_t k = 0; k + 1 < t.rank; ++k)
        sv[k] = uint64_t(t.strides[k].b);
      if (!checkTensorMapValues(t, dv, sv, n, msg))
        return fail(p, msg);
    }
    if (monotone) { // the described bytes at the max bounds fit the source
      unsigned __int128 extent = 0;
      int64_t dv[kMaxTensorMapRank], sv[kMaxTensorMapRank];
      for (uint32_t k = 0; k < t.rank; ++k) {
        std::string e2;
        if (!evalDim(t.dims[k], symMax.data(), symMax.size(), dv[k], e2) ||
            (k > 0 && !evalDim(t.strides[k - 1], symMax.data(), symMax.size(),
                               sv[k], e2)))
          return fail(p, n + ": " + e2);
        if (dv[k] < 1)
          dv[k] = 1; // a zero dim is encoded as 1 (see the runtime)
      }
      extent = (unsigned __int128)uint64_t(dv[0]) * es;
      for (uint32_t k = 1; k < t.rank; ++k)
        extent += (unsigned __int128)uint64_t(sv[k] < 0 ? 0 : sv[k]) *
                  uint64_t(dv[k] - 1);
      if (extent > srcBytes)
        return fail(p, n + ": describes " +
                           (extent > (unsigned __int128)(uint64_t(1) << 62)
                                ? std::string("too many")
                                : std::to_string(uint64_t(extent))) +
                           " bytes at the symbols' max bounds but the source "
                           "has " +
                           std::to_string(srcBytes));
    }
  }
  return true;
}

// An input's value bound (section IMAX): on inputs of an integer dtype only,
// not negative, and a reason only with a bound.
bool validateMaxValue(const TensorSpec &t, bool isOutput, const std::string &tp,
                      const std::string &tn, VErr &e) {
  auto fail = [&](std::string msg) {
    e.path = tp + ".max_value";
    e.msg = tn + ": " + std::move(msg);
    return false;
  };
  if (!t.maxValue) {
    if (!t.maxValueReason.empty())
      return fail("max_value reason '" + t.maxValueReason +
                  "' without a max_value");
    return true;
  }
  if (isOutput)
    return fail("max_value " + std::to_string(*t.maxValue) +
                " on an output (value bounds are checked on inputs only)");
  if (!dtypeIsInteger(t.dtype))
    return fail("max_value " + std::to_string(*t.maxValue) + " on a " +
                dtypeName(t.dtype) +
                " input (value bounds need an integer dtype)");
  if (*t.maxValue < 0)
    return fail("max_value " + std::to_string(*t.maxValue) + " is negative");
  return true;
}

} // namespace

bool format::validateArtifact(const Artifact &a, VErr &e) {
  auto fail = [&](std::string path, std::string msg) {
    e.path = std::move(path);
    e.msg = std::move(msg);
    return false;
  };
  std::set<std::string> seen;
  for (size_t i = 0; i < a.metadata.size(); ++i) {
    const auto &kv = a.metadata[i];
    std::string p = "metadata[" + std::to_string(i) + "]";
    if (kv.first.empty())
      return fail(p, "empty key");
    if (!seen.insert(kv.first).second)
      return fail(p, "duplicate key '" + kv.first + "'");
  }
  seen.clear();
  std::vector<int64_t> symMax;
  for (size_t i = 0; i < a.symbols.size(); ++i) {
    const auto &s = a.symbols[i];
    std::string p = "symbols[" + std::to_string(i) + "]";
    if (s.name.empty())
      return fail(p, "empty symbol name");
    if (!seen.insert(s.name).second)
      return fail(p, "duplicate symbol '" + s.name + "'");
    if (s.maxValue < 0)
      return fail(p, "symbol '" + s.name + "' has negative max " +
                         std::to_string(s.maxValue));
    symMax.push_back(s.maxValue);
  }
  seen.clear();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const auto &w = a.weights[i];
    std::string p = "weights[" + std::to_string(i) + "]";
    if (w.name.empty())
      return fail(p, "empty weight name");
    if (!seen.insert(w.name).second)
      return fail(p, "duplicate weight '" + w.name + "'");
    if (uint8_t(w.dtype) >= kNumDTypes)
      return fail(p, "weight '" + w.name + "': invalid dtype");
    if (w.shape.size() > kMaxRank)
      return fail(p, "weight '" + w.name + "': rank " +
                         std::to_string(w.shape.size()) + " > 8");
    unsigned __int128 bytes = std::max<size_t>(dtypeSize(w.dtype), 1);
    for (int64_t d : w.shape) {
      if (d < 0)
        return fail(p, "weight '" + w.name + "': negative dim " +
                           std::to_string(d));
      bytes *= uint64_t(d);
      if (bytes > (unsigned __int128)(int64_t(1) << 50))
        return fail(p, "weight '" + w.name + "': size overflows");
    }
    if (w.dtype == DType::MXFP4 &&
        (w.shape.empty() || w.shape.back() % int64_t(kMXFP4Block) != 0))
      return fail(p, "weight '" + w.name +
                         "': mxfp4 needs a last dimension that is a multiple "
                         "of 32 (one scale per 32 elements)");
    if (uint8_t(w.init.kind) > uint8_t(InitKind::Constant))
      return fail(p, "weight '" + w.name + "': invalid init kind " +
                         std::to_string(int(w.init.kind)));
    if (!std::isfinite(w.init.param))
      return fail(p, "weight '" + w.name + "': init parameter is not finite");
    if ((w.init.kind == InitKind::Normal || w.init.kind == InitKind::Uniform) &&
        w.init.param < 0)
      return fail(p, "weight '" + w.name + "': negative init std/width");
    if (w.device >= kMaxDevices)
      return fail(p, "weight '" + w.name + "': device " +
                         std::to_string(w.device) + " >= 64");
  }
  for (size_t i = 0; i < a.objects.size(); ++i) {
    const auto &o = a.objects[i];
    std::string p = "objects[" + std::to_string(i) + "]";
    if (o.target.empty())
      return fail(p, "empty target");
    if (o.data.empty())
      return fail(p, "empty object data (target '" + o.target + "')");
    std::set<std::string> syms;
    for (size_t j = 0; j < o.symbols.size(); ++j) {
      if (o.symbols[j].empty())
        return fail(p + ".symbols[" + std::to_string(j) + "]",
                    "empty kernel symbol");
      if (!syms.insert(o.symbols[j]).second)
        return fail(p + ".symbols[" + std::to_string(j) + "]",
                    "duplicate kernel symbol '" + o.symbols[j] + "'");
    }
  }
  seen.clear();
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const auto &b = a.buffers[i];
    std::string p = "buffers[" + std::to_string(i) + "]";
    std::string n = "buffer '" + b.name + "'";
    if (b.name.empty())
      return fail(p, "empty buffer name");
    if (!seen.insert(b.name).second)
      return fail(p, "duplicate buffer name '" + b.name + "'");
    if (uint8_t(b.kind) > uint8_t(BufferKind::State))
      return fail(p, n + ": invalid kind " + std::to_string(int(b.kind)));
    if (b.size == 0)
      return fail(p, n + ": size is 0");
    if (b.size > (uint64_t(1) << 50))
      return fail(p, n + ": size " + std::to_string(b.size) + " is absurd");
    if (b.flags & ~kBufferFlagDump)
      return fail(p, n + ": unknown flags " + hex(b.flags));
    if (b.device >= kMaxDevices)
      return fail(p, n + ": device " + std::to_string(b.device) + " >= 64");
    if (b.kind == BufferKind::Arena) {
      if (b.arenaOffset % kArenaAlignment)
        return fail(p, n + ": arena offset " + std::to_string(b.arenaOffset) +
                           " not 16-byte aligned");
      if (b.arenaOffset > (uint64_t(1) << 50))
        return fail(p, n + ": arena offset " + std::to_string(b.arenaOffset) +
                           " is absurd");
    } else if (b.arenaOffset != 0) {
      return fail(p, n + ": arena offset set on a non-arena buffer");
    }
    if (b.kind == BufferKind::State) {
      if (b.perSeqStride && b.size % b.perSeqStride)
        return fail(p, n + ": size " + std::to_string(b.size) +
                           " is not a multiple of the per-sequence stride " +
                           std::to_string(b.perSeqStride));
    } else if (b.perSeqStride) {
      return fail(p, n + ": per-sequence stride set on a non-state buffer");
    }
  }
  std::string msg;
  if (!validateTensorMaps(a, symMax, e) || !validatePartition(a, e))
    return false;
  seen.clear();
  for (size_t ei = 0; ei < a.entries.size(); ++ei) {
    const Entry &en = a.entries[ei];
    std::string p = "entries[" + std::to_string(ei) + "]";
    if (en.name.empty())
      return fail(p, "empty entry name");
    if (!seen.insert(en.name).second)
      return fail(p, "duplicate entry '" + en.name + "'");
    std::set<std::string> io;
    std::set<uint32_t> inBufs;
    for (int isOut = 0; isOut < 2; ++isOut) {
      const auto &list = isOut ? en.outputs : en.inputs;
      for (size_t ti = 0; ti < list.size(); ++ti) {
        const TensorSpec &t = list[ti];
        std::string tp =
            p + (isOut ? ".outputs[" : ".inputs[") + std::to_string(ti) + "]";
        std::string tn = "entry '" + en.name + "' " +
                         (isOut ? "output" : "input") + " '" + t.name + "'";
        if (t.name.empty())
          return fail(tp, "empty tensor name in entry '" + en.name + "'");
        if (!io.insert(t.name).second)
          return fail(tp, tn + ": duplicate input/output name");
        if (uint8_t(t.dtype) >= kNumDTypes || t.dtype == DType::MXFP4)
          return fail(tp, tn + ": invalid dtype");
        if (t.shape.size() > kMaxRank)
          return fail(tp, tn + ": rank > 8");
        if (t.buffer >= a.buffers.size())
          return fail(tp, tn + ": buffer id " + std::to_string(t.buffer) +
                              " out of range (" +
                              std::to_string(a.buffers.size()) + " buffers)");
        const Buffer &b = a.buffers[t.buffer];
        if (!isOut && b.kind != BufferKind::Input)
          return fail(tp, tn + ": bound to buffer '" + b.name +
                              "' which is not an input buffer");
        if (!isOut && !inBufs.insert(t.buffer).second)
          return fail(tp, tn + ": input buffer '" + b.name + "' bound twice");
        if (isOut && b.kind == BufferKind::Input)
          return fail(tp,
                      tn + ": output bound to input buffer '" + b.name + "'");
        if (!validateMaxValue(t, isOut, tp, tn, e))
          return false;
        bool monotone = true;
        for (size_t di = 0; di < t.shape.size(); ++di) {
          if (!checkDim(t.shape[di], a.symbols.size(), msg))
            return fail(tp + ".shape[" + std::to_string(di) + "]",
                        tn + ": " + msg);
          if (t.shape[di].a < 0)
            monotone = false;
        }
        if (monotone) { // size at the max bounds must fit the buffer
          unsigned __int128 bytes = dtypeSize(t.dtype);
          for (size_t di = 0; di < t.shape.size(); ++di) {
            int64_t v;
            std::string e2;
            if (!evalDim(t.shape[di], symMax.data(), symMax.size(), v, e2))
              return fail(tp + ".shape[" + std::to_string(di) + "]",
                          tn + ": " + e2);
            if (v < 0)
              return fail(tp + ".shape[" + std::to_string(di) + "]",
                          tn + ": dim is negative at the symbols' max bounds");
            bytes *= uint64_t(v);
            if (bytes > (unsigned __int128)(uint64_t(1) << 60))
              break;
          }
          if (bytes > b.size)
            return fail(tp,
                        tn + ": needs " + std::to_string(uint64_t(bytes)) +
                            " bytes at the symbols' max bounds but buffer '" +
                            b.name + "' has " + std::to_string(b.size));
        }
      }
    }
    for (size_t li = 0; li < en.launches.size(); ++li) {
      const Launch &l = en.launches[li];
      std::string lp = p + ".launches[" + std::to_string(li) + "]";
      std::string ln = "entry '" + en.name + "' launch " + std::to_string(li) +
                       " ('" + l.kernel + "')";
      bool collective = l.object == kCollectiveObject;
      if (!collective && l.object >= a.objects.size())
        return fail(lp, ln + ": object index " + std::to_string(l.object) +
                            " out of range (" +
                            std::to_string(a.objects.size()) + " objects)");
      if (!collective) {
        bool found = false;
        for (auto &s : a.objects[l.object].symbols)
          found |= (s == l.kernel);
        if (!found)
          return fail(lp, ln + ": kernel symbol not listed by object " +
                              std::to_string(l.object));
      }
      if (l.device >= kMaxDevices)
        return fail(lp, ln + ": device " + std::to_string(l.device) + " >= 64");
      int64_t hi[7];
      for (int k = 0; k < 7; ++k) {
        const DimExpr &d = k < 3   ? l.grid[k]
                           : k < 6 ? l.block[k - 3]
                                   : l.sharedMemBytes;
        static const char *names[7] = {"grid.x",    "grid.y",  "grid.z",
                                       "block.x",   "block.y", "block.z",
                                       "shared_mem"};
        if (!checkDim(d, a.symbols.size(), msg))
          return fail(lp + "." + names[k], ln + ": " + msg);
        if (!launchDimInRange(d, k, symMax, hi[k], msg))
          return fail(lp + "." + names[k], ln + ": " + names[k] + " " + msg);
      }
      if (hi[3] * hi[4] * hi[5] > kMaxBlockThreads)
        return fail(lp + ".block",
                    ln + ": " + std::to_string(hi[3] * hi[4] * hi[5]) +
                        " threads a block at the symbols' max bounds (at "
                        "most " +
                        std::to_string(kMaxBlockThreads) + ")");
      // The CPU backend runs a grid's blocks one after another: the
      // compiler's CPU kernels take one block; a table that asks for
      // billions would keep k3-run busy for hours.
      if (!collective && l.object < a.objects.size() &&
          a.objects[l.object].target.rfind("cpu", 0) == 0 &&
          hi[0] * hi[1] * hi[2] > kMaxCPUBlocks)
        return fail(lp + ".grid",
                    ln + ": " + std::to_string(hi[0] * hi[1] * hi[2]) +
                        " blocks of a CPU kernel at the symbols' max bounds "
                        "(at most " +
                        std::to_string(kMaxCPUBlocks) + ")");
      if (l.args.size() > kMaxArgs)
        return fail(lp, ln + ": too many args");
      for (size_t ai = 0; ai < l.args.size(); ++ai) {
        const Arg &g = l.args[ai];
        std::string ap = lp + ".args[" + std::to_string(ai) + "]";
        switch (g.kind) {
        case ArgKind::Buffer: {
          if (g.index >= a.buffers.size())
            return fail(ap, ln + ": buffer id " + std::to_string(g.index) +
                                " out of range (" +
                                std::to_string(a.buffers.size()) + " buffers)");
          const Buffer &b = a.buffers[g.index];
          if (g.offset >= b.size)
            return fail(ap, ln + ": byte offset " + std::to_string(g.offset) +
                                " outside buffer '" + b.name + "' (" +
                                std::to_string(b.size) + " bytes)");
          if (b.device != l.device)
            return fail(ap, ln + ": buffer '" + b.name + "' is on device " +
                                std::to_string(b.device) +
                                " but the launch is on device " +
                                std::to_string(l.device));
          break;
        }
        case ArgKind::Weight:
          if (g.index >= a.weights.size())
            return fail(ap, ln + ": weight index " + std::to_string(g.index) +
                                " out of range (" +
                                std::to_string(a.weights.size()) + " weights)");
          if (a.weights[g.index].device != l.device)
            return fail(ap, ln + ": weight '" + a.weights[g.index].name +
                                "' is on another device");
          break;
        case ArgKind::Symbol:
          if (g.index >= a.symbols.size())
            return fail(ap, ln + ": symbol index " + std::to_string(g.index) +
                                " out of range (" +
                                std::to_string(a.symbols.size()) + " symbols)");
          break;
        case ArgKind::I32:
          if (g.imm < INT32_MIN || g.imm > INT32_MAX)
            return fail(ap, ln + ": i32 immediate out of range");
          break;
        case ArgKind::I64:
        case ArgKind::F32:
          break;
        case ArgKind::TensorMap: {
          if (g.index >= a.tensorMaps.size())
            return fail(ap, ln + ": tensor map id " + std::to_string(g.index) +
                                " out of range (" +
                                std::to_string(a.tensorMaps.size()) +
                                " tensor maps)");
          const Arg &src = a.tensorMaps[g.index].source;
          uint32_t dev = src.kind == ArgKind::Buffer
                             ? a.buffers[src.index].device
                             : a.weights[src.index].device;
          if (dev != l.device)
            return fail(ap, ln + ": tensor map " + std::to_string(g.index) +
                                " describes a tensor on device " +
                                std::to_string(dev) +
                                " but the launch is on device " +
                                std::to_string(l.device));
          break;
        }
        default:
          return fail(ap,
                      ln + ": invalid arg kind " + std::to_string(int(g.kind)));
        }
      }
      if (collective && !validateCollectiveLaunch(a, l, symMax, lp, ln, e))
        return false;
    }
  }
  return validateArgNeeds(a, symMax, e);
}

bool validate(const Artifact &a, std::string &err) {
  VErr e;
  if (validateArtifact(a, e))
    return true;
  err = e.path + ": " + e.msg;
  return false;
}

bool checkTensorMapValues(const TensorMapSpec &t, const uint64_t *dims,
                          const uint64_t *strides, const std::string &what,
                          std::string &err) {
  uint64_t es = dtypeSize(t.dtype);
  for (uint32_t k = 0; k < t.rank; ++k)
    if (dims[k] < 1 || dims[k] > (uint64_t(1) << 32)) {
      err = what + ": dim " + std::to_string(k) + " = " +
            std::to_string(dims[k]) + " is outside 1..2^32";
      return false;
    }
  for (uint32_t k = 0; k + 1 < t.rank; ++k) {
    uint64_t s = strides[k];
    if (s == 0 || s % 16 || s >= (uint64_t(1) << 40)) {
      err = what + ": stride " + std::to_string(k + 1) + " = " +
            std::to_string(s) +
            " bytes is not a positive multiple of 16 below 2^40";
      return false;
    }
    // dims <= 2^32 and strides < 2^40: the products below fit in 128 bits.
    unsigned __int128 inner = k == 0
                                  ? (unsigned __int128)dims[0] * es
                                  : (unsigned __int128)strides[k - 1] * dims[k];
    if (s < inner) {
      err = what + ": stride " + std::to_string(k + 1) + " = " +
            std::to_string(s) + " bytes is smaller than the " +
            std::to_string(uint64_t(inner)) + " bytes of dim " +
            std::to_string(k) + (k == 0 ? "" : " with its stride") +
            " (tensor rows would overlap)";
      return false;
    }
  }
  return true;
}

} // namespace artifact
} // namespace k3

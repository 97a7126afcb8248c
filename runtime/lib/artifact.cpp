// .k3bin writer, reader and validator. See docs/artifact-format.md.
#include "k3/artifact.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace k3 {
namespace artifact {

namespace {

constexpr uint32_t tag(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 |
         uint32_t(uint8_t(s[2])) << 16 | uint32_t(uint8_t(s[3])) << 24;
}
constexpr uint32_t kTagMeta = tag("META"), kTagSyms = tag("SYMS"),
                   kTagWght = tag("WGHT"), kTagKobj = tag("KOBJ"),
                   kTagBufs = tag("BUFS"), kTagEntr = tag("ENTR"),
                   kTagBlob = tag("BLOB"), kTagTmap = tag("TMAP"),
                   kTagImax = tag("IMAX");
constexpr size_t kSectionEntrySize = 24;
constexpr uint32_t kMaxRank = 8;
constexpr uint32_t kMaxDevices = 64;
constexpr uint32_t kMaxArgs = 4096;

std::string tagName(uint32_t t) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    char c = char((t >> (8 * i)) & 0xff);
    s += (c >= 32 && c < 127) ? c : '?';
  }
  return s;
}

std::string hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)v);
  return buf;
}

// ---------------------------------------------------------------- writer
struct Out {
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u16(uint16_t v) {
    for (int i = 0; i < 2; ++i)
      b.push_back(uint8_t(v >> (8 * i)));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      b.push_back(uint8_t(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      b.push_back(uint8_t(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) {
    uint64_t x;
    memcpy(&x, &v, 8);
    u64(x);
  }
  void str(const std::string &s) {
    u32(uint32_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  void dim(const DimExpr &d) {
    u32(d.sym);
    i64(d.a);
    i64(d.b);
    i64(d.c);
  }
  void pad(size_t align) {
    while (b.size() % align)
      b.push_back(0);
  }
};

void putTensor(Out &o, const TensorSpec &t) {
  o.str(t.name);
  o.u8(uint8_t(t.dtype));
  o.u8(0);
  o.u8(0);
  o.u8(0);
  o.u32(t.buffer);
  o.u32(uint32_t(t.shape.size()));
  for (auto &d : t.shape)
    o.dim(d);
}

// ---------------------------------------------------------------- reader
// Bounds-checked little-endian cursor. The first failure sticks; reads after
// a failure return zeros, so loops stop at the next ok() check.
struct Cursor {
  const uint8_t *base; // start of file
  size_t pos, end;     // absolute file offsets
  std::string err;
  std::string what; // field being decoded (for errors)
  bool ok() const { return err.empty(); }
  void fail(const std::string &msg) {
    if (err.empty())
      err = "offset " + std::to_string(pos) + ": " + what + ": " + msg;
  }
  bool need(size_t n) {
    if (!ok())
      return false;
    if (n > end - pos) {
      fail("truncated (need " + std::to_string(n) + " bytes, " +
           std::to_string(end - pos) + " left in section)");
      return false;
    }
    return true;
  }
  uint64_t le(size_t n) {
    if (!need(n))
      return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= uint64_t(base[pos + i]) << (8 * i);
    pos += n;
    return v;
  }
  uint8_t u8() { return uint8_t(le(1)); }
  uint32_t u32() { return uint32_t(le(4)); }
  uint64_t u64() { return le(8); }
  int64_t i64() { return int64_t(le(8)); }
  double f64() {
    uint64_t x = le(8);
    double d;
    memcpy(&d, &x, 8);
    return d;
  }
  std::string str() {
    uint32_t n = u32();
    if (!need(n))
      return {};
    std::string s(reinterpret_cast<const char *>(base + pos), n);
    pos += n;
    return s;
  }
  // A count of records each at least `minSize` bytes: rejects counts that
  // cannot fit in what is left (so garbage cannot trigger huge allocations).
  uint32_t count(size_t minSize, uint32_t limit = 0xFFFFFFFFu) {
    size_t at = pos;
    uint32_t n = u32();
    if (!ok())
      return 0;
    if (n > limit || (minSize && uint64_t(n) * minSize > end - pos)) {
      pos = at;
      fail("count " + std::to_string(n) + " is impossible (" +
           std::to_string(end - pos - 4) + " bytes left, limit " +
           std::to_string(limit) + ")");
      return 0;
    }
    return n;
  }
  DimExpr dim() {
    DimExpr d;
    d.sym = u32();
    d.a = i64();
    d.b = i64();
    d.c = i64();
    return d;
  }
  DType dtype() {
    uint8_t v = u8();
    if (ok() && v >= kNumDTypes) {
      pos -= 1;
      fail("invalid dtype code " + std::to_string(v));
    }
    return DType(v);
  }
};

struct VErr {
  std::string path, msg;
};

bool checkDim(const DimExpr &d, size_t nsyms, std::string &msg) {
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
      srcBytes = dtypeSize(w.dtype);
      for (int64_t d : w.shape)
        srcBytes *= uint64_t(d);
    } else {
      return fail(p + ".source",
                  n + ": source must be a buffer or weight argument (kind " +
                      std::to_string(int(t.source.kind)) + ")");
    }
    n += " (" + srcName + ")";
    if (uint8_t(t.dtype) >= kNumDTypes)
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

bool validateImpl(const Artifact &a, VErr &e) {
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
    unsigned __int128 bytes = dtypeSize(w.dtype);
    for (int64_t d : w.shape) {
      if (d < 0)
        return fail(p, "weight '" + w.name + "': negative dim " +
                           std::to_string(d));
      bytes *= uint64_t(d);
      if (bytes > (unsigned __int128)(int64_t(1) << 50))
        return fail(p, "weight '" + w.name + "': size overflows");
    }
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
  if (!validateTensorMaps(a, symMax, e))
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
        if (uint8_t(t.dtype) >= kNumDTypes)
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
      if (l.object >= a.objects.size())
        return fail(lp, ln + ": object index " + std::to_string(l.object) +
                            " out of range (" +
                            std::to_string(a.objects.size()) + " objects)");
      const auto &syms = a.objects[l.object].symbols;
      bool found = false;
      for (auto &s : syms)
        found |= (s == l.kernel);
      if (!found)
        return fail(lp, ln + ": kernel symbol not listed by object " +
                            std::to_string(l.object));
      if (l.device >= kMaxDevices)
        return fail(lp, ln + ": device " + std::to_string(l.device) + " >= 64");
      for (int k = 0; k < 7; ++k) {
        const DimExpr &d = k < 3   ? l.grid[k]
                           : k < 6 ? l.block[k - 3]
                                   : l.sharedMemBytes;
        static const char *names[7] = {"grid.x",    "grid.y",  "grid.z",
                                       "block.x",   "block.y", "block.z",
                                       "shared_mem"};
        if (!checkDim(d, a.symbols.size(), msg))
          return fail(lp + "." + names[k], ln + ": " + msg);
      }
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
    }
  }
  return true;
}

} // namespace

bool dtypeIsInteger(DType t) { return t == DType::I32; }

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  }
  return 0;
}
const char *dtypeName(DType t) {
  switch (t) {
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  }
  return "invalid";
}
bool parseDType(const std::string &s, DType &out) {
  for (uint8_t i = 0; i < kNumDTypes; ++i)
    if (s == dtypeName(DType(i))) {
      out = DType(i);
      return true;
    }
  return false;
}

bool evalDim(const DimExpr &d, const int64_t *sv, size_t n, int64_t &out,
             std::string &err) {
  if (d.c <= 0) {
    err = "dim divisor must be > 0";
    return false;
  }
  if (d.sym == kNoSymbol) {
    out = d.b;
    return true;
  }
  if (d.sym >= n) {
    err = "symbol index out of range";
    return false;
  }
  __int128 num = (__int128)d.a * sv[d.sym] + d.b;
  __int128 q = num >= 0 ? (num + d.c - 1) / d.c : -((-num) / d.c);
  if (q > INT64_MAX || q < INT64_MIN) {
    err = "dim expression overflows int64";
    return false;
  }
  out = int64_t(q);
  return true;
}

std::string dimToString(const DimExpr &d,
                        const std::vector<std::string> &names) {
  if (d.isConstant())
    return std::to_string(d.b);
  std::string s =
      d.sym < names.size() ? names[d.sym] : "sym" + std::to_string(d.sym);
  if (d.a != 1)
    s = std::to_string(d.a) + "*" + s;
  if (d.b > 0)
    s += "+" + std::to_string(d.b);
  if (d.b < 0)
    s += std::to_string(d.b);
  if (d.c != 1)
    s = "ceil_div(" + s + ", " + std::to_string(d.c) + ")";
  return s;
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

bool Arg::operator==(const Arg &o) const {
  if (kind != o.kind)
    return false;
  switch (kind) {
  case ArgKind::Buffer:
    return index == o.index && offset == o.offset;
  case ArgKind::Weight:
  case ArgKind::Symbol:
  case ArgKind::TensorMap:
    return index == o.index;
  case ArgKind::I32:
  case ArgKind::I64:
    return imm == o.imm;
  case ArgKind::F32:
    return memcmp(&fimm, &o.fimm, 4) == 0;
  }
  return false;
}
bool Launch::operator==(const Launch &o) const {
  for (int i = 0; i < 3; ++i)
    if (!(grid[i] == o.grid[i]) || !(block[i] == o.block[i]))
      return false;
  return object == o.object && kernel == o.kernel &&
         sharedMemBytes == o.sharedMemBytes && device == o.device &&
         args == o.args;
}
bool Artifact::operator==(const Artifact &o) const {
  return versionMajor == o.versionMajor && versionMinor == o.versionMinor &&
         metadata == o.metadata && symbols == o.symbols &&
         weights == o.weights && objects == o.objects && buffers == o.buffers &&
         entries == o.entries && tensorMaps == o.tensorMaps;
}
const std::string *Artifact::meta(const std::string &key) const {
  for (auto &kv : metadata)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}
int Artifact::findSymbol(const std::string &n) const {
  for (size_t i = 0; i < symbols.size(); ++i)
    if (symbols[i].name == n)
      return int(i);
  return -1;
}
int Artifact::findWeight(const std::string &n) const {
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i].name == n)
      return int(i);
  return -1;
}
int Artifact::findEntry(const std::string &n) const {
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].name == n)
      return int(i);
  return -1;
}
int Artifact::findBuffer(const std::string &n) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == n)
      return int(i);
  return -1;
}

bool validate(const Artifact &a, std::string &err) {
  VErr e;
  if (validateImpl(a, e))
    return true;
  err = e.path + ": " + e.msg;
  return false;
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

bool serialize(const Artifact &a, std::vector<uint8_t> &outBytes,
               std::string &err, bool skipValidation) {
  if (!skipValidation && !validate(a, err)) {
    err = "k3bin: invalid artifact: " + err;
    return false;
  }
  for (auto &kv : a.metadata)
    if (kv.second.size() > 0xFFFFFFFFu) {
      err = "k3bin: metadata value too long";
      return false;
    }
  // Sections are encoded separately then laid out after the section table.
  std::vector<std::pair<uint32_t, Out>> secs;
  {
    Out o;
    o.u32(uint32_t(a.metadata.size()));
    for (auto &kv : a.metadata) {
      o.str(kv.first);
      o.str(kv.second);
    }
    secs.push_back({kTagMeta, std::move(o)});
  }
  {
    Out o;
    o.u32(uint32_t(a.symbols.size()));
    for (auto &s : a.symbols) {
      o.str(s.name);
      o.i64(s.maxValue);
    }
    secs.push_back({kTagSyms, std::move(o)});
  }
  {
    Out o;
    o.u32(uint32_t(a.weights.size()));
    for (auto &w : a.weights) {
      o.str(w.name);
      o.u8(uint8_t(w.dtype));
      o.u8(uint8_t(w.init.kind));
      o.u16(0);
      o.u32(w.device);
      o.f64(w.init.param);
      o.u32(uint32_t(w.shape.size()));
      for (int64_t d : w.shape)
        o.i64(d);
    }
    secs.push_back({kTagWght, std::move(o)});
  }
  Out blob;
  {
    Out o;
    o.u32(uint32_t(a.objects.size()));
    for (auto &k : a.objects) {
      blob.pad(64);
      o.str(k.target);
      o.u64(blob.b.size());
      o.u64(k.data.size());
      blob.b.insert(blob.b.end(), k.data.begin(), k.data.end());
      o.u32(uint32_t(k.symbols.size()));
      for (auto &s : k.symbols)
        o.str(s);
    }
    secs.push_back({kTagKobj, std::move(o)});
  }
  {
    Out o;
    o.u32(uint32_t(a.buffers.size()));
    for (auto &b : a.buffers) {
      o.str(b.name);
      o.u8(uint8_t(b.kind));
      o.u8(0);
      o.u8(0);
      o.u8(0);
      o.u32(b.device);
      o.u32(b.flags);
      o.u64(b.size);
      o.u64(b.arenaOffset);
      o.u64(b.perSeqStride);
    }
    secs.push_back({kTagBufs, std::move(o)});
  }
  {
    Out o;
    o.u32(uint32_t(a.entries.size()));
    for (auto &e : a.entries) {
      o.str(e.name);
      o.u32(uint32_t(e.inputs.size()));
      for (auto &t : e.inputs)
        putTensor(o, t);
      o.u32(uint32_t(e.outputs.size()));
      for (auto &t : e.outputs)
        putTensor(o, t);
      o.u32(uint32_t(e.launches.size()));
      for (auto &l : e.launches) {
        o.u32(l.object);
        o.str(l.kernel);
        o.u32(l.device);
        for (auto &d : l.grid)
          o.dim(d);
        for (auto &d : l.block)
          o.dim(d);
        o.dim(l.sharedMemBytes);
        o.u32(uint32_t(l.args.size()));
        for (auto &g : l.args) {
          o.u8(uint8_t(g.kind));
          switch (g.kind) {
          case ArgKind::Buffer:
            o.u32(g.index);
            o.u64(g.offset);
            break;
          case ArgKind::Weight:
          case ArgKind::Symbol:
          case ArgKind::TensorMap:
            o.u32(g.index);
            break;
          case ArgKind::I32:
            o.u32(uint32_t(int32_t(g.imm)));
            break;
          case ArgKind::I64:
            o.i64(g.imm);
            break;
          case ArgKind::F32: {
            uint32_t x;
            memcpy(&x, &g.fimm, 4);
            o.u32(x);
            break;
          }
          }
        }
      }
    }
    secs.push_back({kTagEntr, std::move(o)});
  }
  if (!a.tensorMaps.empty()) { // optional (1.1): only written when used
    Out o;
    o.u32(uint32_t(a.tensorMaps.size()));
    for (auto &t : a.tensorMaps) {
      o.u8(uint8_t(t.source.kind));
      o.u32(t.source.index);
      o.u64(t.source.offset);
      o.u8(uint8_t(t.dtype));
      o.u8(t.swizzle);
      o.u8(t.interleave);
      o.u8(t.l2Promotion);
      o.u8(t.oobFill);
      o.u8(0);
      o.u8(0);
      o.u8(0);
      o.u32(t.rank);
      o.u32(uint32_t(t.dims.size()));
      for (auto &d : t.dims)
        o.dim(d);
      o.u32(uint32_t(t.strides.size()));
      for (auto &d : t.strides)
        o.dim(d);
      o.u32(uint32_t(t.box.size()));
      for (uint32_t b : t.box)
        o.u32(b);
    }
    secs.push_back({kTagTmap, std::move(o)});
  }
  {
    // Optional (1.2): inputs' value bounds, only written when there are.
    Out o;
    uint32_t n = 0;
    for (size_t ei = 0; ei < a.entries.size(); ++ei)
      for (size_t ti = 0; ti < a.entries[ei].inputs.size(); ++ti) {
        const TensorSpec &t = a.entries[ei].inputs[ti];
        if (!t.maxValue)
          continue;
        o.u32(uint32_t(ei));
        o.u32(uint32_t(ti));
        o.i64(*t.maxValue);
        o.str(t.maxValueReason);
        ++n;
      }
    if (n) {
      Out c;
      c.u32(n);
      c.b.insert(c.b.end(), o.b.begin(), o.b.end());
      secs.push_back({kTagImax, std::move(c)});
    }
  }
  secs.push_back({kTagBlob, std::move(blob)});

  Out f;
  f.b.insert(f.b.end(), kMagic, kMagic + 8);
  f.u32(kVersionMajor);
  f.u32(kVersionMinor);
  f.u64(0); // file size, patched below
  f.u64(0); // checksum, patched below
  f.u32(uint32_t(secs.size()));
  f.u32(0);
  f.pad(kHeaderSize);
  size_t table = f.b.size();
  f.b.resize(table + secs.size() * kSectionEntrySize, 0);
  for (size_t i = 0; i < secs.size(); ++i) {
    f.pad(secs[i].first == kTagBlob ? 64 : 16);
    uint64_t off = f.b.size(), sz = secs[i].second.b.size();
    f.b.insert(f.b.end(), secs[i].second.b.begin(), secs[i].second.b.end());
    uint8_t *e = &f.b[table + i * kSectionEntrySize];
    for (int k = 0; k < 4; ++k)
      e[k] = uint8_t(secs[i].first >> (8 * k));
    for (int k = 0; k < 8; ++k)
      e[8 + k] = uint8_t(off >> (8 * k));
    for (int k = 0; k < 8; ++k)
      e[16 + k] = uint8_t(sz >> (8 * k));
  }
  uint64_t size = f.b.size();
  uint64_t sum = fnv1a64(f.b.data() + kHeaderSize, size - kHeaderSize);
  for (int k = 0; k < 8; ++k)
    f.b[16 + k] = uint8_t(size >> (8 * k));
  for (int k = 0; k < 8; ++k)
    f.b[24 + k] = uint8_t(sum >> (8 * k));
  outBytes = std::move(f.b);
  return true;
}

namespace {
void getTensor(Cursor &c, TensorSpec &t) {
  c.what = "tensor name";
  t.name = c.str();
  c.what = "tensor '" + t.name + "' dtype";
  t.dtype = c.dtype();
  c.what = "tensor '" + t.name + "' padding";
  c.le(3);
  c.what = "tensor '" + t.name + "' buffer";
  t.buffer = c.u32();
  c.what = "tensor '" + t.name + "' shape";
  uint32_t rank = c.count(28, kMaxRank);
  for (uint32_t i = 0; i < rank && c.ok(); ++i)
    t.shape.push_back(c.dim());
}
} // namespace

bool deserialize(const uint8_t *data, size_t size, Artifact &a,
                 std::string &err) {
  a = Artifact();
  auto fail = [&](uint64_t off, const std::string &m) {
    err = "offset " + std::to_string(off) + ": " + m;
    return false;
  };
  if (size < kHeaderSize)
    return fail(size, "file too small for a .k3bin header (" +
                          std::to_string(size) + " bytes, need 64)");
  if (memcmp(data, kMagic, 8) != 0)
    return fail(0, "bad magic (not a .k3bin file)");
  Cursor h{data, 8, kHeaderSize, {}, "header"};
  a.versionMajor = h.u32();
  a.versionMinor = h.u32();
  if (a.versionMajor != kVersionMajor)
    return fail(
        8, "unsupported format version " + std::to_string(a.versionMajor) +
               "." + std::to_string(a.versionMinor) + " (this runtime reads " +
               std::to_string(kVersionMajor) + ".x)");
  uint64_t fileSize = h.u64(), sum = h.u64();
  uint32_t nsec = h.u32(), flags = h.u32();
  if (fileSize != size)
    return fail(16, "header file_size " + std::to_string(fileSize) +
                        " != actual size " + std::to_string(size) +
                        " (truncated or padded file)");
  uint64_t actual = fnv1a64(data + kHeaderSize, size - kHeaderSize);
  if (actual != sum)
    return fail(24, "checksum mismatch (header " + hex(sum) + ", payload " +
                        hex(actual) + ")");
  if (flags != 0)
    return fail(36, "unknown header flags " + hex(flags));
  for (size_t i = 40; i < kHeaderSize; ++i)
    if (data[i])
      return fail(i, "reserved header byte is not zero");
  if (nsec > (size - kHeaderSize) / kSectionEntrySize)
    return fail(32, "section count " + std::to_string(nsec) +
                        " does not fit in the file");
  uint64_t tableEnd = kHeaderSize + uint64_t(nsec) * kSectionEntrySize;
  struct Sec {
    uint64_t off = 0, size = 0;
    bool present = false;
  };
  std::map<uint32_t, Sec> secs;
  const uint32_t known[] = {kTagMeta, kTagSyms, kTagWght, kTagKobj,
                            kTagBufs, kTagEntr, kTagBlob};
  for (uint32_t i = 0; i < nsec; ++i) {
    Cursor t{data,
             kHeaderSize + size_t(i) * kSectionEntrySize,
             size_t(tableEnd),
             {},
             "section table"};
    uint32_t tg = t.u32();
    uint32_t res = t.u32();
    uint64_t off = t.u64(), sz = t.u64();
    uint64_t at = kHeaderSize + uint64_t(i) * kSectionEntrySize;
    if (res != 0)
      return fail(at + 4,
                  "section '" + tagName(tg) + "': reserved field not zero");
    if (off < tableEnd || off > size || sz > size - off)
      return fail(at + 8, "section '" + tagName(tg) + "' range [" +
                              std::to_string(off) + ", +" + std::to_string(sz) +
                              ") outside the payload [" +
                              std::to_string(tableEnd) + ", " +
                              std::to_string(size) + ")");
    bool isKnown = tg == kTagTmap || tg == kTagImax; // optional
    for (uint32_t k : known)
      isKnown |= (k == tg);
    if (!isKnown)
      continue; // unknown sections from newer minor versions are skipped
    if (secs[tg].present)
      return fail(at, "duplicate section '" + tagName(tg) + "'");
    secs[tg] = Sec{off, sz, true};
  }
  for (uint32_t k : known)
    if (!secs[k].present)
      return fail(32, "missing required section '" + tagName(k) + "'");

  // Each record's file offset, keyed by its validation path, so that
  // cross-reference errors found by validate() can name an offset too.
  std::map<std::string, uint64_t> where;
  auto cur = [&](uint32_t tg, const char *what) {
    return Cursor{data,
                  size_t(secs[tg].off),
                  size_t(secs[tg].off + secs[tg].size),
                  {},
                  what};
  };
  auto finish = [&](Cursor &c) {
    if (c.ok() && c.pos != c.end) {
      c.what = "section end";
      c.fail(std::to_string(c.end - c.pos) + " trailing bytes");
    }
    if (!c.ok()) {
      err = c.err;
      return false;
    }
    return true;
  };
  {
    Cursor c = cur(kTagMeta, "metadata count");
    uint32_t n = c.count(8);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      where["metadata[" + std::to_string(i) + "]"] = c.pos;
      c.what = "metadata[" + std::to_string(i) + "] key";
      std::string k = c.str();
      c.what = "metadata '" + k + "' value";
      std::string v = c.str();
      a.metadata.push_back({k, v});
    }
    if (!finish(c))
      return false;
  }
  {
    Cursor c = cur(kTagSyms, "symbol count");
    uint32_t n = c.count(12);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      where["symbols[" + std::to_string(i) + "]"] = c.pos;
      Symbol s;
      c.what = "symbols[" + std::to_string(i) + "] name";
      s.name = c.str();
      c.what = "symbol '" + s.name + "' max";
      s.maxValue = c.i64();
      a.symbols.push_back(s);
    }
    if (!finish(c))
      return false;
  }
  {
    Cursor c = cur(kTagWght, "weight count");
    uint32_t n = c.count(24);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      where["weights[" + std::to_string(i) + "]"] = c.pos;
      Weight w;
      c.what = "weights[" + std::to_string(i) + "] name";
      w.name = c.str();
      c.what = "weight '" + w.name + "' dtype";
      w.dtype = c.dtype();
      c.what = "weight '" + w.name + "' init kind";
      uint8_t ik = c.u8();
      if (c.ok() && ik > uint8_t(InitKind::Constant)) {
        c.pos--;
        c.fail("invalid init kind " + std::to_string(ik));
      }
      w.init.kind = InitKind(ik);
      c.what = "weight '" + w.name + "' reserved";
      c.le(2);
      c.what = "weight '" + w.name + "' device";
      w.device = c.u32();
      c.what = "weight '" + w.name + "' init parameter";
      w.init.param = c.f64();
      c.what = "weight '" + w.name + "' shape";
      uint32_t rank = c.count(8, kMaxRank);
      for (uint32_t d = 0; d < rank && c.ok(); ++d)
        w.shape.push_back(c.i64());
      a.weights.push_back(std::move(w));
    }
    if (!finish(c))
      return false;
  }
  {
    Cursor c = cur(kTagKobj, "kernel object count");
    const Sec &blob = secs[kTagBlob];
    uint32_t n = c.count(24);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      where["objects[" + std::to_string(i) + "]"] = c.pos;
      KernelObject k;
      c.what = "objects[" + std::to_string(i) + "] target";
      k.target = c.str();
      c.what =
          "object " + std::to_string(i) + " ('" + k.target + "') blob offset";
      uint64_t off = c.u64();
      c.what =
          "object " + std::to_string(i) + " ('" + k.target + "') blob size";
      uint64_t sz = c.u64();
      if (c.ok() && (off > blob.size || sz > blob.size - off)) {
        c.pos -= 16;
        c.fail("data range [" + std::to_string(off) + ", +" +
               std::to_string(sz) + ") outside the BLOB section (" +
               std::to_string(blob.size) + " bytes)");
      }
      if (c.ok())
        k.data.assign(data + blob.off + off, data + blob.off + off + sz);
      c.what = "object " + std::to_string(i) + " symbol list";
      uint32_t ns = c.count(4);
      for (uint32_t j = 0; j < ns && c.ok(); ++j)
        k.symbols.push_back(c.str());
      a.objects.push_back(std::move(k));
    }
    if (!finish(c))
      return false;
  }
  {
    Cursor c = cur(kTagBufs, "buffer count");
    uint32_t n = c.count(40);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      where["buffers[" + std::to_string(i) + "]"] = c.pos;
      Buffer b;
      c.what = "buffers[" + std::to_string(i) + "] name";
      b.name = c.str();
      c.what = "buffer '" + b.name + "' kind";
      uint8_t k = c.u8();
      if (c.ok() && k > uint8_t(BufferKind::State)) {
        c.pos--;
        c.fail("invalid buffer kind " + std::to_string(k));
      }
      b.kind = BufferKind(k);
      c.le(3);
      c.what = "buffer '" + b.name + "' fields";
      b.device = c.u32();
      b.flags = c.u32();
      b.size = c.u64();
      b.arenaOffset = c.u64();
      b.perSeqStride = c.u64();
      a.buffers.push_back(std::move(b));
    }
    if (!finish(c))
      return false;
  }
  {
    Cursor c = cur(kTagEntr, "entry count");
    uint32_t n = c.count(16);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      std::string ep = "entries[" + std::to_string(i) + "]";
      where[ep] = c.pos;
      Entry e;
      c.what = ep + " name";
      e.name = c.str();
      for (int isOut = 0; isOut < 2 && c.ok(); ++isOut) {
        c.what =
            "entry '" + e.name + (isOut ? "' output count" : "' input count");
        uint32_t nt = c.count(16);
        for (uint32_t t = 0; t < nt && c.ok(); ++t) {
          where[ep + (isOut ? ".outputs[" : ".inputs[") + std::to_string(t) +
                "]"] = c.pos;
          TensorSpec ts;
          getTensor(c, ts);
          (isOut ? e.outputs : e.inputs).push_back(std::move(ts));
        }
      }
      c.what = "entry '" + e.name + "' launch count";
      uint32_t nl = c.count(4 + 4 + 4 + 7 * 28 + 4);
      for (uint32_t l = 0; l < nl && c.ok(); ++l) {
        std::string lp = ep + ".launches[" + std::to_string(l) + "]";
        where[lp] = c.pos;
        Launch L;
        std::string ln = "entry '" + e.name + "' launch " + std::to_string(l);
        c.what = ln + " object";
        L.object = c.u32();
        c.what = ln + " kernel name";
        L.kernel = c.str();
        c.what = ln + " ('" + L.kernel + "') device";
        L.device = c.u32();
        c.what = ln + " ('" + L.kernel + "') launch dims";
        for (auto &d : L.grid)
          d = c.dim();
        for (auto &d : L.block)
          d = c.dim();
        L.sharedMemBytes = c.dim();
        c.what = ln + " ('" + L.kernel + "') arg count";
        uint32_t na = c.count(5, kMaxArgs);
        for (uint32_t g = 0; g < na && c.ok(); ++g) {
          where[lp + ".args[" + std::to_string(g) + "]"] = c.pos;
          c.what = ln + " ('" + L.kernel + "') arg " + std::to_string(g);
          Arg A;
          uint8_t k = c.u8();
          A.kind = ArgKind(k);
          switch (A.kind) {
          case ArgKind::Buffer:
            A.index = c.u32();
            A.offset = c.u64();
            break;
          case ArgKind::Weight:
          case ArgKind::Symbol:
          case ArgKind::TensorMap:
            A.index = c.u32();
            break;
          case ArgKind::I32:
            A.imm = int32_t(c.u32());
            break;
          case ArgKind::I64:
            A.imm = c.i64();
            break;
          case ArgKind::F32: {
            uint32_t x = c.u32();
            memcpy(&A.fimm, &x, 4);
            break;
          }
          default:
            if (c.ok()) {
              c.pos--;
              c.fail("invalid arg kind " + std::to_string(k));
            }
          }
          L.args.push_back(A);
        }
        e.launches.push_back(std::move(L));
      }
      a.entries.push_back(std::move(e));
    }
    if (!finish(c))
      return false;
  }
  if (secs[kTagTmap].present) {
    Cursor c = cur(kTagTmap, "tensor map count");
    uint32_t n = c.count(32);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      std::string tp = "tensor_maps[" + std::to_string(i) + "]";
      where[tp] = c.pos;
      TensorMapSpec t;
      c.what = tp + " source";
      uint8_t k = c.u8();
      t.source.kind = ArgKind(k);
      t.source.index = c.u32();
      t.source.offset = c.u64();
      c.what = tp + " dtype";
      t.dtype = c.dtype();
      c.what = tp + " modes";
      t.swizzle = c.u8();
      t.interleave = c.u8();
      t.l2Promotion = c.u8();
      t.oobFill = c.u8();
      c.what = tp + " padding";
      if (c.le(3) != 0 && c.ok()) {
        c.pos -= 3;
        c.fail("not zero");
      }
      c.what = tp + " rank";
      t.rank = c.u32();
      c.what = tp + " dims";
      uint32_t nd = c.count(28, kMaxTensorMapRank);
      for (uint32_t d = 0; d < nd && c.ok(); ++d)
        t.dims.push_back(c.dim());
      c.what = tp + " strides";
      uint32_t ns = c.count(28, kMaxTensorMapRank);
      for (uint32_t d = 0; d < ns && c.ok(); ++d)
        t.strides.push_back(c.dim());
      c.what = tp + " box";
      uint32_t nb = c.count(4, kMaxTensorMapRank);
      for (uint32_t d = 0; d < nb && c.ok(); ++d)
        t.box.push_back(c.u32());
      a.tensorMaps.push_back(std::move(t));
    }
    if (!finish(c))
      return false;
  }
  if (secs[kTagImax].present) {
    Cursor c = cur(kTagImax, "input bound count");
    uint32_t n = c.count(20);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      size_t at = c.pos;
      std::string bp = "input_bounds[" + std::to_string(i) + "]";
      c.what = bp + " entry";
      uint32_t ei = c.u32();
      if (c.ok() && ei >= a.entries.size()) {
        c.pos -= 4;
        c.fail("entry index " + std::to_string(ei) + " out of range (" +
               std::to_string(a.entries.size()) + " entries)");
      }
      if (!c.ok())
        break;
      Entry &en = a.entries[ei];
      c.what = bp + " input";
      uint32_t ti = c.u32();
      if (c.ok() && ti >= en.inputs.size()) {
        c.pos -= 4;
        c.fail("input index " + std::to_string(ti) + " out of range (entry '" +
               en.name + "' has " + std::to_string(en.inputs.size()) +
               " inputs)");
      }
      if (!c.ok())
        break;
      TensorSpec &t = en.inputs[ti];
      if (t.maxValue) {
        c.pos -= 4;
        c.fail("entry '" + en.name + "' input '" + t.name +
               "' has two value bounds");
        break;
      }
      where["entries[" + std::to_string(ei) + "].inputs[" + std::to_string(ti) +
            "].max_value"] = at;
      c.what = "entry '" + en.name + "' input '" + t.name + "' max_value";
      int64_t v = c.i64();
      c.what =
          "entry '" + en.name + "' input '" + t.name + "' max_value reason";
      std::string reason = c.str();
      if (c.ok()) {
        t.maxValue = v;
        t.maxValueReason = std::move(reason);
      }
    }
    if (!finish(c))
      return false;
  }
  VErr ve;
  if (!validateImpl(a, ve)) {
    // Find the closest enclosing record with a known offset.
    std::string p = ve.path;
    uint64_t off = 0;
    bool found = false;
    while (!found) {
      auto it = where.find(p);
      if (it != where.end()) {
        off = it->second;
        found = true;
        break;
      }
      size_t cut = p.find_last_of(".[");
      if (cut == std::string::npos || cut == 0)
        break;
      p = p.substr(0, cut); // up one level: "x.f" -> "x", "x[3]" -> "x"
    }
    err = (found ? "offset " + std::to_string(off) + ": " : std::string()) +
          ve.path + ": " + ve.msg;
    return false;
  }
  return true;
}

bool readWholeFile(const std::string &path, std::vector<uint8_t> &bytes,
                   std::string &err) {
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) {
    err = path + ": cannot open: " + strerror(errno);
    return false;
  }
  bytes.clear();
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    bytes.insert(bytes.end(), buf, buf + n);
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    err = path + ": read error";
    return false;
  }
  return true;
}

bool writeWholeFile(const std::string &path, const std::vector<uint8_t> &bytes,
                    std::string &err) {
  FILE *f = fopen(path.c_str(), "wb");
  if (!f) {
    err = path + ": cannot create: " + strerror(errno);
    return false;
  }
  bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    err = path + ": write error";
    return false;
  }
  return true;
}

bool readFile(const std::string &path, Artifact &out, std::string &err) {
  std::vector<uint8_t> bytes;
  if (!readWholeFile(path, bytes, err))
    return false;
  if (!deserialize(bytes.data(), bytes.size(), out, err)) {
    err = path + ": " + err;
    return false;
  }
  return true;
}

bool writeFile(const std::string &path, const Artifact &a, std::string &err) {
  std::vector<uint8_t> bytes;
  return serialize(a, bytes, err) && writeWholeFile(path, bytes, err);
}

// ---------------------------------------------------------------- describe
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
  for (auto &e : a.entries) {
    o += "entry " + e.name + ": " + std::to_string(e.inputs.size()) +
         " inputs, " + std::to_string(e.outputs.size()) + " outputs, " +
         std::to_string(e.launches.size()) + " launches\n";
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
      std::vector<DimExpr> g(l.grid, l.grid + 3), b(l.block, l.block + 3);
      o += "  launch " + std::to_string(li) + ": " + l.kernel + " (object " +
           std::to_string(l.object) + ") grid " + dims(g) + " block " +
           dims(b) + " smem " + dimToString(l.sharedMemBytes, sn) + "\n";
      for (size_t ai = 0; ai < l.args.size(); ++ai)
        o += "    arg " + std::to_string(ai) + ": " +
             argToString(l.args[ai], a) + "\n";
    }
  }
  return o;
}

// ---------------------------------------------------------------- Builder
Builder::Builder() {
  a_.metadata.push_back({kMetaCallingConvention, kCallingConvention});
}
void Builder::setMetadata(const std::string &k, const std::string &v) {
  for (auto &kv : a_.metadata)
    if (kv.first == k) {
      kv.second = v;
      return;
    }
  a_.metadata.push_back({k, v});
}
uint32_t Builder::addSymbol(const std::string &name, int64_t maxValue) {
  a_.symbols.push_back({name, maxValue});
  return uint32_t(a_.symbols.size() - 1);
}
uint32_t Builder::addWeight(const std::string &name, DType dtype,
                            std::vector<int64_t> shape, WeightInit init,
                            uint32_t device) {
  a_.weights.push_back({name, dtype, std::move(shape), init, device});
  return uint32_t(a_.weights.size() - 1);
}
uint32_t Builder::addKernelObject(const std::string &target,
                                  std::vector<uint8_t> data,
                                  std::vector<std::string> symbols) {
  a_.objects.push_back({target, std::move(data), std::move(symbols)});
  return uint32_t(a_.objects.size() - 1);
}
uint32_t Builder::addBuffer(const std::string &name, BufferKind kind,
                            uint64_t size, uint64_t arenaOffset,
                            uint64_t perSeqStride, uint32_t device,
                            uint32_t flags) {
  a_.buffers.push_back(
      {name, kind, size, arenaOffset, perSeqStride, device, flags});
  return uint32_t(a_.buffers.size() - 1);
}
uint32_t Builder::addTensorMap(TensorMapSpec spec) {
  a_.tensorMaps.push_back(std::move(spec));
  return uint32_t(a_.tensorMaps.size() - 1);
}
uint32_t Builder::addEntry(const std::string &name) {
  Entry e;
  e.name = name;
  a_.entries.push_back(std::move(e));
  return uint32_t(a_.entries.size() - 1);
}
uint32_t Builder::addInput(uint32_t entry, const std::string &name, DType dtype,
                           std::vector<DimExpr> shape, uint32_t buffer) {
  auto &in = a_.entries.at(entry).inputs;
  in.push_back({name, dtype, std::move(shape), buffer, {}, {}});
  return uint32_t(in.size() - 1);
}
void Builder::setInputMaxValue(uint32_t entry, uint32_t input, int64_t maxValue,
                               std::string reason) {
  TensorSpec &t = a_.entries.at(entry).inputs.at(input);
  t.maxValue = maxValue;
  t.maxValueReason = std::move(reason);
}
void Builder::addOutput(uint32_t entry, const std::string &name, DType dtype,
                        std::vector<DimExpr> shape, uint32_t buffer) {
  a_.entries.at(entry).outputs.push_back(
      {name, dtype, std::move(shape), buffer, {}, {}});
}
uint32_t Builder::addLaunch(uint32_t entry, Launch launch) {
  auto &l = a_.entries.at(entry).launches;
  l.push_back(std::move(launch));
  return uint32_t(l.size() - 1);
}
uint32_t Builder::addLaunch(uint32_t entry, uint32_t object,
                            const std::string &kernel, std::vector<Arg> args,
                            const DimExpr (&grid)[3], const DimExpr (&block)[3],
                            DimExpr smem, uint32_t device) {
  Launch l;
  l.object = object;
  l.kernel = kernel;
  l.args = std::move(args);
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = grid[i];
    l.block[i] = block[i];
  }
  l.sharedMemBytes = smem;
  l.device = device;
  return addLaunch(entry, std::move(l));
}
bool Builder::serialize(std::vector<uint8_t> &out, std::string &err) const {
  return artifact::serialize(a_, out, err);
}
bool Builder::writeFile(const std::string &path, std::string &err) const {
  return artifact::writeFile(path, a_, err);
}

} // namespace artifact
} // namespace k3

// The .k3bin reader: bytes to an Artifact, bounds-checked, then validated. See
// docs/artifact-format.md.
#include "artifact_format.h"

#include <cstring>
#include <map>
#include <set>

namespace k3 {
namespace artifact {

using namespace format;

namespace {

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
    bool isKnown = tg == kTagTmap || tg == kTagImax || tg == kTagColl ||
                   tg == kTagShrd || tg == kTagAned; // optional
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
  if (secs[kTagColl].present) {
    Cursor c = cur(kTagColl, "collective count");
    uint32_t n = c.count(68);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      std::string cp = "collectives[" + std::to_string(i) + "]";
      where[cp] = c.pos;
      Collective k;
      c.what = cp + " kind";
      k.kind = CollectiveKind(c.u8());
      c.what = cp + " reduction";
      k.reduce = ReduceOp(c.u8());
      c.what = cp + " dtype";
      k.dtype = c.dtype();
      c.what = cp + " padding";
      if (c.u8() != 0 && c.ok()) {
        c.pos -= 1;
        c.fail("not zero");
      }
      c.what = cp + " group";
      k.group = c.str();
      c.what = cp + " group size";
      k.groupSize = c.u32();
      c.what = cp + " outer";
      k.outer = c.dim();
      c.what = cp + " chunk";
      k.chunk = c.dim();
      a.collectives.push_back(std::move(k));
    }
    if (!finish(c))
      return false;
  }
  if (secs[kTagShrd].present) {
    Cursor c = cur(kTagShrd, "weight shard count");
    uint32_t n = c.count(24);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      std::string sp = "weight_shards[" + std::to_string(i) + "]";
      where[sp] = c.pos;
      WeightShard w;
      c.what = sp + " weight";
      w.weight = c.u32();
      c.what = sp + " dim";
      w.dim = c.u32();
      c.what = sp + " group";
      w.group = c.str();
      c.what = sp + " parts";
      w.parts = c.u32();
      c.what = sp + " extent";
      w.extent = c.u64();
      a.weightShards.push_back(std::move(w));
    }
    if (!finish(c))
      return false;
  }
  if (secs[kTagAned].present) {
    Cursor c = cur(kTagAned, "argument needs count");
    uint32_t n = c.count(12);
    for (uint32_t i = 0; i < n && c.ok(); ++i) {
      std::string np = "arg_needs[" + std::to_string(i) + "]";
      c.what = np + " entry";
      uint32_t ei = c.u32();
      c.what = np + " launch";
      uint32_t li = c.u32();
      if (c.ok() &&
          (ei >= a.entries.size() || li >= a.entries[ei].launches.size())) {
        c.fail("no launch " + std::to_string(li) + " in entry " +
               std::to_string(ei));
        break;
      }
      c.what = np + " count";
      uint32_t na = c.count(32, kMaxArgs);
      if (!c.ok())
        break;
      Launch &l = a.entries[ei].launches[li];
      if (!l.needs.empty()) {
        c.fail("a second record for entry " + std::to_string(ei) + " launch " +
               std::to_string(li));
        break;
      }
      if (na != l.args.size()) {
        c.fail(std::to_string(na) + " needs for " +
               std::to_string(l.args.size()) + " arguments");
        break;
      }
      where["entries[" + std::to_string(ei) + "].launches[" +
            std::to_string(li) + "].needs"] = c.pos;
      for (uint32_t k = 0; k < na && c.ok(); ++k) {
        ArgNeed need;
        c.what = np + " kind";
        need.kind = ArgKind(c.u8());
        c.what = np + " input";
        need.input = c.u8();
        c.what = np + " access";
        need.access = ArgAccess(c.u8());
        c.u8();
        c.what = np + " bytes";
        need.bytes = c.dim();
        l.needs.push_back(need);
      }
    }
    if (!finish(c))
      return false;
  }
  VErr ve;
  if (!validateArtifact(a, ve)) {
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

} // namespace artifact
} // namespace k3

// The .k3bin writer: an Artifact to bytes. See docs/artifact-format.md.
#include "artifact_format.h"

#include <cstring>

namespace k3 {
namespace artifact {

using namespace format;

namespace {

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

/// A section of `n` records `o` behind their count (for sections whose
/// records are counted while they are written).
Out counted(uint32_t n, const Out &o) {
  Out c;
  c.u32(n);
  c.b.insert(c.b.end(), o.b.begin(), o.b.end());
  return c;
}

} // namespace

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
    if (n)
      secs.push_back({kTagImax, counted(n, o)});
  }
  if (!a.collectives.empty()) { // optional (1.3)
    Out o;
    o.u32(uint32_t(a.collectives.size()));
    for (const Collective &c : a.collectives) {
      o.u8(uint8_t(c.kind));
      o.u8(uint8_t(c.reduce));
      o.u8(uint8_t(c.dtype));
      o.u8(0);
      o.str(c.group);
      o.u32(c.groupSize);
      o.dim(c.outer);
      o.dim(c.chunk);
    }
    secs.push_back({kTagColl, std::move(o)});
  }
  if (!a.weightShards.empty()) { // optional (1.3)
    Out o;
    o.u32(uint32_t(a.weightShards.size()));
    for (const WeightShard &w : a.weightShards) {
      o.u32(w.weight);
      o.u32(w.dim);
      o.str(w.group);
      o.u32(w.parts);
      o.u64(w.extent);
    }
    secs.push_back({kTagShrd, std::move(o)});
  }
  {
    // optional (1.4): each launch's argument needs, where recorded
    Out o;
    uint32_t n = 0;
    for (size_t ei = 0; ei < a.entries.size(); ++ei)
      for (size_t li = 0; li < a.entries[ei].launches.size(); ++li) {
        const Launch &l = a.entries[ei].launches[li];
        if (l.needs.empty())
          continue;
        o.u32(uint32_t(ei));
        o.u32(uint32_t(li));
        o.u32(uint32_t(l.needs.size()));
        for (const ArgNeed &need : l.needs) {
          o.u8(uint8_t(need.kind));
          o.u8(need.input);
          o.u8(uint8_t(need.access));
          o.u8(0);
          o.dim(need.bytes);
        }
        ++n;
      }
    if (n)
      secs.push_back({kTagAned, counted(n, o)});
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

} // namespace artifact
} // namespace k3

// The artifact model: dtypes, dims, lookups, checksums and files. See
// docs/artifact-format.md.
#include "k3/artifact.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace k3 {
namespace artifact {

bool dtypeIsInteger(DType t) { return t == DType::I32; }

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::MXFP4:
    return 0;
  }
  return 0;
}
uint64_t tensorBytes(DType t, uint64_t numel) {
  if (t == DType::MXFP4)
    return numel / 2 + numel / kMXFP4Block;
  return numel * dtypeSize(t);
}
uint64_t weightBytes(const Weight &w) {
  uint64_t n = 1;
  for (int64_t d : w.shape)
    n *= uint64_t(d);
  return tensorBytes(w.dtype, n);
}
const char *argKindName(ArgKind k) {
  switch (k) {
  case ArgKind::Buffer:
    return "buffer";
  case ArgKind::Weight:
    return "weight";
  case ArgKind::Symbol:
    return "symbol";
  case ArgKind::I32:
    return "i32";
  case ArgKind::I64:
    return "i64";
  case ArgKind::F32:
    return "f32";
  case ArgKind::TensorMap:
    return "tensor map";
  }
  return "invalid";
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
  case DType::MXFP4:
    return "mxfp4";
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
         args == o.args && needs == o.needs;
}
bool Artifact::operator==(const Artifact &o) const {
  return versionMajor == o.versionMajor && versionMinor == o.versionMinor &&
         metadata == o.metadata && symbols == o.symbols &&
         weights == o.weights && objects == o.objects && buffers == o.buffers &&
         entries == o.entries && tensorMaps == o.tensorMaps &&
         collectives == o.collectives && weightShards == o.weightShards;
}

bool isGroupName(const std::string &g) {
  return g == "tp" || g == "ep" || g == "cp";
}

const char *collectiveName(CollectiveKind k) {
  switch (k) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  }
  return "?";
}

uint32_t Partition::size(const std::string &group) const {
  return group == "tp" ? tp : group == "ep" ? ep : group == "cp" ? cp : 1;
}

uint32_t Partition::rankIn(const std::string &group, uint32_t rank) const {
  if (group == "tp")
    return rank % tp;
  if (group == "ep")
    return rank / tp % ep;
  if (group == "cp")
    return rank / (tp * ep) % cp;
  return 0;
}

uint32_t Partition::memberRank(const std::string &group, uint32_t rank,
                               uint32_t member) const {
  uint32_t stride = group == "tp" ? 1 : group == "ep" ? tp : tp * ep;
  return rank - rankIn(group, rank) * stride + member * stride;
}

Partition partitionOf(const Artifact &a) {
  Partition p;
  auto note = [&](const std::string &g, uint32_t n) {
    (g == "tp" ? p.tp : g == "ep" ? p.ep : p.cp) = n;
  };
  for (const Collective &c : a.collectives)
    if (isGroupName(c.group))
      note(c.group, c.groupSize);
  for (const WeightShard &s : a.weightShards)
    if (isGroupName(s.group))
      note(s.group, s.parts);
  return p;
}
bool isContextParallelEntry(const Artifact &a, const Entry &e) {
  if (isOneTokenEntry(a, e.name))
    return false;
  for (const TensorSpec &t : e.inputs)
    if (t.name == "k3.rank.cp")
      return true;
  return false;
}

// Whether the artifact lists `entry` as compiled for one token per
// sequence (metadata one_token_entries, comma-separated).
bool isOneTokenEntry(const Artifact &a, const std::string &entry) {
  const std::string *list = a.meta(kMetaOneTokenEntries);
  if (!list)
    return false;
  size_t at = 0;
  while (at <= list->size()) {
    size_t end = list->find(',', at);
    if (end == std::string::npos)
      end = list->size();
    if (list->compare(at, end - at, entry) == 0)
      return true;
    at = end + 1;
  }
  return false;
}

bool isRankInput(const std::string &name, std::string *group) {
  static const std::string prefix = "k3.rank.";
  if (name.compare(0, prefix.size(), prefix) != 0 ||
      !isGroupName(name.substr(prefix.size())))
    return false;
  if (group)
    *group = name.substr(prefix.size());
  return true;
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

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
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

} // namespace artifact
} // namespace k3

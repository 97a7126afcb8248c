#include "k3/safetensors.h"
#include "k3/artifact.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "k3/dtype.h"
#include "k3/json.h"

namespace k3 {
namespace st {

size_t dtypeSize(const std::string &d) {
  static const std::pair<const char *, size_t> table[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  for (auto &e : table)
    if (d == e.first)
      return e.second;
  return 0;
}

const char *dtypeFor(artifact::DType t) {
  switch (t) {
  case artifact::DType::BF16:
    return "BF16";
  case artifact::DType::F16:
    return "F16";
  case artifact::DType::F32:
    return "F32";
  case artifact::DType::I32:
    return "I32";
  case artifact::DType::MXFP4:
    return "U8"; // its codes and scales, each a U8 tensor
  }
  return "?";
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape)
    n *= uint64_t(d);
  return n;
}

static std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool parse(const uint8_t *data, size_t size, const std::string &file,
           std::vector<TensorInfo> &tensors,
           std::vector<std::pair<std::string, std::string>> &metadata,
           std::string &err) {
  tensors.clear();
  metadata.clear();
  auto fail = [&](const std::string &m) {
    err = file + ": " + m;
    return false;
  };
  if (size < 8)
    return fail("file too small for a safetensors header (" +
                std::to_string(size) + " bytes)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(data[i]) << (8 * i);
  if (n > kMaxHeaderBytes)
    return fail("header length " + std::to_string(n) +
                " exceeds the 100 MiB limit");
  if (n > size - 8)
    return fail("header length " + std::to_string(n) +
                " runs past end of file (" + std::to_string(size) + " bytes)");
  json::Value root;
  std::string jerr;
  if (!json::parse(reinterpret_cast<const char *>(data + 8), size_t(n), root,
                   jerr))
    return fail("header JSON (at file offset 8): " + jerr);
  if (!root.isObject())
    return fail("header JSON is a " + std::string(json::typeName(root.type)) +
                ", expected an object");
  const uint8_t *base = data + 8 + n;
  const uint64_t dataSize = size - 8 - n;
  for (auto &kv : root.object) {
    const std::string &name = kv.first;
    const json::Value &v = kv.second;
    if (name == "__metadata__") {
      if (!v.isObject())
        return fail("__metadata__ must be an object of strings");
      for (auto &m : v.object) {
        if (!m.second.isString())
          return fail("__metadata__ value for '" + m.first +
                      "' is not a string");
        metadata.push_back({m.first, m.second.str});
      }
      continue;
    }
    std::string tn = "tensor '" + name + "': ";
    if (!v.isObject())
      return fail(tn + "entry is not an object");
    TensorInfo t;
    t.name = name;
    t.file = file;
    const json::Value *dt = v.get("dtype"), *sh = v.get("shape"),
                      *off = v.get("data_offsets");
    for (auto &f : v.object)
      if (f.first != "dtype" && f.first != "shape" && f.first != "data_offsets")
        return fail(tn + "unknown field '" + f.first + "'");
    if (!dt || !dt->isString())
      return fail(tn + "missing or non-string 'dtype'");
    t.dtype = dt->str;
    size_t es = dtypeSize(t.dtype);
    if (!es)
      return fail(tn + "unknown dtype '" + t.dtype + "'");
    if (!sh || !sh->isArray())
      return fail(tn + "missing or non-array 'shape'");
    unsigned __int128 bytes = es;
    for (auto &d : sh->array) {
      if (!d.isNumber() || !d.isInt || d.integer < 0)
        return fail(tn + "shape entries must be non-negative integers");
      t.shape.push_back(d.integer);
      bytes *= uint64_t(d.integer);
      if (bytes > (unsigned __int128)UINT64_MAX)
        return fail(tn + "shape " + shapeStr(t.shape) + " overflows");
    }
    if (t.shape.size() > 16)
      return fail(tn + "rank " + std::to_string(t.shape.size()) +
                  " is unreasonable");
    if (!off || !off->isArray() || off->array.size() != 2)
      return fail(tn + "'data_offsets' must be an array [begin, end]");
    for (auto &d : off->array)
      if (!d.isNumber() || !d.isInt || d.integer < 0)
        return fail(tn + "data_offsets must be non-negative integers");
    t.begin = uint64_t(off->array[0].integer);
    t.end = uint64_t(off->array[1].integer);
    if (t.begin > t.end)
      return fail(tn + "data_offsets [" + std::to_string(t.begin) + ", " +
                  std::to_string(t.end) + "] are reversed");
    if (t.end > dataSize)
      return fail(tn + "data_offsets [" + std::to_string(t.begin) + ", " +
                  std::to_string(t.end) +
                  "] run past end of file (data section is " +
                  std::to_string(dataSize) + " bytes)");
    if (uint64_t(bytes) != t.end - t.begin)
      return fail(tn + "dtype " + t.dtype + " shape " + shapeStr(t.shape) +
                  " needs " + std::to_string(uint64_t(bytes)) +
                  " bytes but data_offsets span " +
                  std::to_string(t.end - t.begin));
    t.data = base + t.begin;
    tensors.push_back(std::move(t));
  }
  // Overlap check: sort by begin; empty tensors never overlap.
  std::vector<const TensorInfo *> order;
  for (auto &t : tensors)
    if (t.end > t.begin)
      order.push_back(&t);
  std::sort(
      order.begin(), order.end(), [](const TensorInfo *a, const TensorInfo *b) {
        return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
      });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      return fail("tensor '" + order[i]->name + "' data [" +
                  std::to_string(order[i]->begin) + ", " +
                  std::to_string(order[i]->end) + ") overlaps tensor '" +
                  order[i - 1]->name + "' [" +
                  std::to_string(order[i - 1]->begin) + ", " +
                  std::to_string(order[i - 1]->end) + ")");
  return true;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string &path,
                                             std::string &err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = path + ": cannot open: " + strerror(errno);
    return nullptr;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    err = path + ": stat failed: " + strerror(errno);
    ::close(fd);
    return nullptr;
  }
  if (!S_ISREG(sb.st_mode)) {
    err = path + ": not a regular file";
    ::close(fd);
    return nullptr;
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->size_ = size_t(sb.st_size);
  if (m->size_ > 0) {
    void *p = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      err = path + ": mmap failed: " + strerror(errno);
      ::close(fd);
      return nullptr;
    }
    m->data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_)
    munmap(const_cast<uint8_t *>(data_), size_);
}

bool Collection::addFile(const std::string &path, std::string &err) {
  auto m = MappedFile::open(path, err);
  if (!m)
    return false;
  std::vector<TensorInfo> ts;
  std::vector<std::pair<std::string, std::string>> md;
  if (!parse(m->data(), m->size(), path, ts, md, err))
    return false;
  for (auto &t : ts) {
    auto it = tensors_.find(t.name);
    if (it != tensors_.end()) {
      err =
          path + ": tensor '" + t.name + "' also present in " + it->second.file;
      return false;
    }
  }
  for (auto &t : ts)
    tensors_[t.name] = t;
  for (auto &kv : md)
    metadata_.push_back(kv);
  maps_.push_back(m);
  return true;
}

bool Collection::open(const std::string &path, std::string &err) {
  bool isIndex =
      path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!isIndex)
    return addFile(path, err);
  auto m = MappedFile::open(path, err);
  if (!m)
    return false;
  json::Value root;
  std::string jerr;
  if (!json::parse(reinterpret_cast<const char *>(m->data()), m->size(), root,
                   jerr)) {
    err = path + ": " + jerr;
    return false;
  }
  const json::Value *wm = root.get("weight_map");
  if (!wm || !wm->isObject()) {
    err = path + ": sharded index has no 'weight_map' object";
    return false;
  }
  std::string dir;
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos)
    dir = path.substr(0, slash + 1);
  // Open each shard once, in first-mention order.
  std::map<std::string, std::pair<std::shared_ptr<MappedFile>,
                                  std::map<std::string, TensorInfo>>>
      shards;
  for (auto &kv : wm->object) {
    if (!kv.second.isString() || kv.second.str.empty()) {
      err =
          path + ": weight_map entry for '" + kv.first + "' is not a file name";
      return false;
    }
    const std::string &shard = kv.second.str;
    if (shard[0] == '/' || shard.find("..") != std::string::npos) {
      err = path + ": weight_map entry for '" + kv.first + "' names shard '" +
            shard + "' outside the index's directory";
      return false;
    }
    if (!shards.count(shard)) {
      std::string sp = dir + shard, e2;
      auto sm = MappedFile::open(sp, e2);
      if (!sm) {
        err = path + ": shard '" + shard + "' (holding tensor '" + kv.first +
              "') is missing or unreadable: " + e2;
        return false;
      }
      std::vector<TensorInfo> ts;
      std::vector<std::pair<std::string, std::string>> md;
      if (!parse(sm->data(), sm->size(), sp, ts, md, err))
        return false;
      auto &entry = shards[shard];
      entry.first = sm;
      for (auto &t : ts)
        entry.second[t.name] = t;
      for (auto &x : md)
        metadata_.push_back(x);
      maps_.push_back(sm);
    }
    auto &tmap = shards[shard].second;
    auto it = tmap.find(kv.first);
    if (it == tmap.end()) {
      err = path + ": tensor '" + kv.first + "' is mapped to shard '" + shard +
            "' but that shard does not contain it";
      return false;
    }
    tensors_[kv.first] = it->second;
  }
  if (const json::Value *md = root.get("metadata")) {
    if (md->isObject())
      for (auto &x : md->object)
        metadata_.push_back({x.first, x.second.isString()
                                          ? x.second.str
                                          : json::dump(x.second)});
  }
  return true;
}

const TensorInfo *Collection::find(const std::string &name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

/// Elements [first, first + count) of float tensor `t` (BF16/F16/F32/F64)
/// rounded to `dst` (bf16/f16/f32) at `out`.
bool convertFloats(const TensorInfo &t, artifact::DType dst, uint64_t first,
                   uint64_t count, void *out) {
  using artifact::DType;
  // The source dtype, resolved once (not per element).
  enum class Src { BF16, F16, F32, F64 } src;
  if (t.dtype == "BF16")
    src = Src::BF16;
  else if (t.dtype == "F16")
    src = Src::F16;
  else if (t.dtype == "F32")
    src = Src::F32;
  else
    src = Src::F64;
  const uint8_t *p = t.data + first * dtypeSize(t.dtype);
  for (uint64_t i = 0; i < count; ++i) {
    float f;
    if (src == Src::BF16 || src == Src::F16) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      f = src == Src::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
    } else if (src == Src::F32) {
      memcpy(&f, p + 4 * i, 4);
    } else {
      double d;
      memcpy(&d, p + 8 * i, 8);
      f = float(d);
    }
    if (!storeFloat(dst, out, i, f))
      return false;
  }
  return true;
}

/// Elements [first, first + count) of I64 tensor `t` as i32 at `out`;
/// false (naming the element) when one does not fit.
bool narrowI64(const TensorInfo &t, uint64_t first, uint64_t count, void *out,
               std::string &err) {
  for (uint64_t i = 0; i < count; ++i) {
    int64_t v;
    memcpy(&v, t.data + 8 * (first + i), 8);
    if (v < INT32_MIN || v > INT32_MAX) {
      err = t.file + ": tensor '" + t.name + "': element " +
            std::to_string(first + i) + " value " + std::to_string(v) +
            " does not fit i32";
      return false;
    }
    static_cast<int32_t *>(out)[i] = int32_t(v);
  }
  return true;
}

} // namespace

bool convert(const TensorInfo &t, artifact::DType dst, void *out,
             std::string &err) {
  return convertRange(t, dst, 0, t.numel(), out, err);
}

bool convertRange(const TensorInfo &t, artifact::DType dst, uint64_t first,
                  uint64_t count, void *out, std::string &err) {
  using artifact::DType;
  auto cannot = [&]() {
    err = t.file + ": tensor '" + t.name +
          "': cannot convert safetensors dtype " + t.dtype + " to " +
          artifact::dtypeName(dst);
    return false;
  };
  const uint64_t n = t.numel();
  if (first > n || count > n - first) {
    err = t.file + ": tensor '" + t.name + "': elements [" +
          std::to_string(first) + ", " + std::to_string(first + count) +
          ") are outside its " + std::to_string(n);
    return false;
  }
  bool same = (t.dtype == "BF16" && dst == DType::BF16) ||
              (t.dtype == "F16" && dst == DType::F16) ||
              (t.dtype == "F32" && dst == DType::F32) ||
              (t.dtype == "I32" && dst == DType::I32) ||
              (t.dtype == "U8" && dst == DType::MXFP4); // codes or scales
  if (same) {
    size_t es = dst == DType::MXFP4 ? 1 : artifact::dtypeSize(dst);
    if (count)
      memcpy(out, t.data + first * es, size_t(count) * es);
    return true;
  }
  if (dst == DType::I32)
    return t.dtype == "I64" ? narrowI64(t, first, count, out, err) : cannot();
  bool srcFloat = t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F32" ||
                  t.dtype == "F64";
  if (!srcFloat || !convertFloats(t, dst, first, count, out))
    return cannot();
  return true;
}

bool serialize(const std::vector<WriteTensor> &tensors,
               const std::vector<std::pair<std::string, std::string>> &metadata,
               std::vector<uint8_t> &out, std::string &err) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i)
      h += (i ? "," : "") + json::quote(metadata[i].first) + ":" +
           json::quote(metadata[i].second);
    h += "}";
    first = false;
  }
  uint64_t off = 0;
  std::set<std::string> names;
  for (auto &t : tensors) {
    size_t es = dtypeSize(t.dtype);
    if (!es) {
      err = "safetensors writer: tensor '" + t.name + "': unknown dtype '" +
            t.dtype + "'";
      return false;
    }
    if (t.name.empty() || t.name == "__metadata__" ||
        !names.insert(t.name).second) {
      err = "safetensors writer: invalid or duplicate tensor name '" + t.name +
            "'";
      return false;
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= uint64_t(d);
    if (numel * es != t.nbytes) {
      err = "safetensors writer: tensor '" + t.name + "': shape " +
            shapeStr(t.shape) + " needs " + std::to_string(numel * es) +
            " bytes, got " + std::to_string(t.nbytes);
      return false;
    }
    h += std::string(first ? "" : ",") + json::quote(t.name) +
         ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," +
         std::to_string(off + t.nbytes) + "]}";
    off += t.nbytes;
    first = false;
  }
  h += "}";
  while ((8 + h.size()) % 8)
    h += ' ';
  out.clear();
  out.reserve(8 + h.size() + off);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(uint8_t(n >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  for (auto &t : tensors) {
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    if (t.nbytes)
      out.insert(out.end(), p, p + t.nbytes);
  }
  return true;
}

bool write(const std::string &path, const std::vector<WriteTensor> &tensors,
           const std::vector<std::pair<std::string, std::string>> &metadata,
           std::string &err) {
  std::vector<uint8_t> bytes;
  return serialize(tensors, metadata, bytes, err) &&
         k3::artifact::writeWholeFile(path, bytes, err);
}

} // namespace st
} // namespace k3

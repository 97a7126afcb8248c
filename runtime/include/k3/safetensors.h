// k3/safetensors.h - memory-mapped safetensors reader (single file or sharded
// via model.safetensors.index.json), dtype conversion, and a writer.
#ifndef K3_SAFETENSORS_H
#define K3_SAFETENSORS_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "k3/artifact.h"

namespace k3 {
namespace st {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element size for a safetensors dtype string ("BF16", "F32", ...), 0 if
// unknown.
size_t dtypeSize(const std::string &dtype);
// Safetensors dtype string for an artifact dtype.
const char *dtypeFor(artifact::DType t);

struct TensorInfo {
  std::string name;
  std::string dtype; // safetensors spelling, e.g. "BF16"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;   // data_offsets, relative to the data section
  const uint8_t *data = nullptr; // points into the mapping
  std::string file;              // file it came from (for errors)
  uint64_t numel() const;
};

// Parses a complete safetensors image in memory. `file` is used in errors.
bool parse(const uint8_t *data, size_t size, const std::string &file,
           std::vector<TensorInfo> &tensors,
           std::vector<std::pair<std::string, std::string>> &metadata,
           std::string &err);

class MappedFile {
public:
  static std::shared_ptr<MappedFile> open(const std::string &path,
                                          std::string &err);
  ~MappedFile();
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

private:
  MappedFile() = default;
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

// One or more safetensors files presented as one name -> tensor map.
class Collection {
public:
  // `path` is a .safetensors file or a sharded index (*.json with weight_map).
  bool open(const std::string &path, std::string &err);
  // Adds another single file (tensors already present are an error).
  bool addFile(const std::string &path, std::string &err);
  const TensorInfo *find(const std::string &name) const;
  const std::map<std::string, TensorInfo> &tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, std::string>> &metadata() const {
    return metadata_;
  }

private:
  std::vector<std::shared_ptr<MappedFile>> maps_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// Converts tensor `t` into `numel` elements of `dst` at `out`. Supported:
// BF16/F16/F32/F64 -> bf16/f16/f32 and I32/I64 -> i32 (range-checked).
bool convert(const TensorInfo &t, artifact::DType dst, void *out,
             std::string &err);
// Same for elements [first, first + count) of `t` only (row-major order),
// written from `out` on: a large tensor converted in pieces, by several
// threads at once.
bool convertRange(const TensorInfo &t, artifact::DType dst, uint64_t first,
                  uint64_t count, void *out, std::string &err);

struct WriteTensor {
  std::string name;
  std::string dtype; // safetensors spelling
  std::vector<int64_t> shape;
  const void *data = nullptr;
  size_t nbytes = 0;
};
bool write(const std::string &path, const std::vector<WriteTensor> &tensors,
           const std::vector<std::pair<std::string, std::string>> &metadata,
           std::string &err);
// Same, into memory.
bool serialize(const std::vector<WriteTensor> &tensors,
               const std::vector<std::pair<std::string, std::string>> &metadata,
               std::vector<uint8_t> &out, std::string &err);

} // namespace st
} // namespace k3

#endif

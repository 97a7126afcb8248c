// Private: TMA tensor maps (ArgKind::TensorMap). The session evaluates each
// TensorMapSpec for a run's symbol values and source address
// (evalTensorMap), the backend encodes a CUtensorMap from that
// (Backend::encodeTensorMap), and TensorMapSlots keeps one 128-byte device
// slot per (entry, launch, argument) that the kernel receives the address of.
#ifndef K3_RT_TENSOR_MAP_H
#define K3_RT_TENSOR_MAP_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "k3/artifact.h"

namespace k3 {
namespace rt {

class Backend;

constexpr size_t kTensorMapBytes = 128; // sizeof(CUtensorMap)
constexpr size_t kTensorMapAlign = 64;  // what cuTensorMapEncodeTiled needs

// The evaluated arguments of cuTensorMapEncodeTiled (elementStrides are all
// 1). Unused trailing entries are zero, so == compares whole encodings.
struct TensorMapParams {
  artifact::DType dtype = artifact::DType::BF16;
  uint32_t rank = 0;
  uint64_t address = 0;
  uint64_t dims[artifact::kMaxTensorMapRank] = {};
  uint64_t strides[artifact::kMaxTensorMapRank - 1] = {};
  uint32_t box[artifact::kMaxTensorMapRank] = {};
  uint8_t swizzle = 0, interleave = 0, l2Promotion = 0, oobFill = 0;
  bool operator==(const TensorMapParams &o) const;
  bool operator!=(const TensorMapParams &o) const { return !(*this == o); }
};

// Evaluates `t` for symbol values `sv` over a source at `srcAddr` of
// `srcBytes` bytes (from the buffer offset on) and checks the run-time rules:
// dims >= 0 (a dim that evaluates to 0 is encoded as 1: the kernel, which
// sees the same symbols, must not load from it), strides, the 16-byte
// alignment of the address, and that the described bytes lie inside the
// source. `what` names the map in errors.
bool evalTensorMap(const artifact::TensorMapSpec &t, const int64_t *sv,
                   size_t nsv, uint64_t srcAddr, uint64_t srcBytes,
                   const std::string &what, TensorMapParams &out,
                   std::string &err);

// One device slot (128 bytes, 64-byte aligned, all in one allocation) per
// tensor-map argument of every launch. refresh() re-encodes and uploads a
// slot only when its parameters (symbol-dependent dims/strides, address)
// changed since its last upload; it runs before an entry's launches (and
// before a launch graph is captured or replayed, whose kernels read the
// slots by address), with synchronous uploads ordered before the launches.
class TensorMapSlots {
public:
  void plan(const artifact::Artifact &a);
  size_t count() const { return slots_.size(); }
  bool allocate(Backend &be, std::string &err);
  void release(Backend &be);
  // Throws rt::Error (INVALID_ARGUMENT for values breaking a rule, DEVICE
  // for encode/upload failures). Launches whose grid is empty are skipped.
  void refresh(Backend &be, const artifact::Artifact &a, size_t entry,
               const std::vector<int64_t> &sv,
               const std::vector<uint64_t> &bufPtr,
               const std::vector<uint64_t> &weightPtr);
  // Device address of the slot of (entry, launch, arg).
  uint64_t address(size_t entry, size_t launch, size_t arg) const;

private:
  struct Slot {
    uint32_t entry, launch, arg, map;
    bool valid = false; // uploaded with `last`
    TensorMapParams last;
  };
  std::vector<Slot> slots_;
  // entry -> launch -> first slot index of that launch (slots of one launch
  // are consecutive, in argument order).
  std::vector<std::vector<uint32_t>> first_;
  uint64_t base_ = 0;
};

} // namespace rt
} // namespace k3

#endif

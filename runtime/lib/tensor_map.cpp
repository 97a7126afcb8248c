// TMA tensor maps: evaluation, run-time checks and per-launch device slots.
#include "tensor_map.h"

#include <cstring>

#include "backend.h"
#include "session.h"

namespace k3 {
namespace rt {

using namespace artifact;

bool TensorMapParams::operator==(const TensorMapParams &o) const {
  return dtype == o.dtype && rank == o.rank && address == o.address &&
         memcmp(dims, o.dims, sizeof dims) == 0 &&
         memcmp(strides, o.strides, sizeof strides) == 0 &&
         memcmp(box, o.box, sizeof box) == 0 && swizzle == o.swizzle &&
         interleave == o.interleave && l2Promotion == o.l2Promotion &&
         oobFill == o.oobFill;
}

bool evalTensorMap(const TensorMapSpec &t, const int64_t *sv, size_t nsv,
                   uint64_t srcAddr, uint64_t srcBytes, const std::string &what,
                   TensorMapParams &out, std::string &err) {
  out = TensorMapParams();
  if (t.rank < 1 || t.rank > kMaxTensorMapRank || t.dims.size() != t.rank ||
      t.strides.size() + 1 != t.rank || t.box.size() != t.rank) {
    err = what + ": malformed spec";
    return false;
  }
  out.dtype = t.dtype;
  out.rank = t.rank;
  out.address = srcAddr;
  out.swizzle = t.swizzle;
  out.interleave = t.interleave;
  out.l2Promotion = t.l2Promotion;
  out.oobFill = t.oobFill;
  for (uint32_t k = 0; k < t.rank; ++k) {
    int64_t v;
    std::string e2;
    if (!evalDim(t.dims[k], sv, nsv, v, e2)) {
      err = what + ": dim " + std::to_string(k) + ": " + e2;
      return false;
    }
    if (v < 0) {
      err = what + ": dim " + std::to_string(k) + " evaluates to " +
            std::to_string(v);
      return false;
    }
    out.dims[k] = v == 0 ? 1 : uint64_t(v); // see the header
    out.box[k] = t.box[k];
    if (k == 0)
      continue;
    if (!evalDim(t.strides[k - 1], sv, nsv, v, e2)) {
      err = what + ": stride " + std::to_string(k) + ": " + e2;
      return false;
    }
    if (v < 0) {
      err = what + ": stride " + std::to_string(k) + " evaluates to " +
            std::to_string(v);
      return false;
    }
    out.strides[k - 1] = uint64_t(v);
  }
  if (!checkTensorMapValues(t, out.dims, out.strides, what, err))
    return false;
  if (srcAddr % 16) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)srcAddr);
    err = what + ": global address " + buf + " is not 16-byte aligned";
    return false;
  }
  // Bytes from the address to the last element (dims <= 2^32, strides <
  // 2^40: no overflow in 128 bits).
  unsigned __int128 extent =
      (unsigned __int128)out.dims[0] * dtypeSize(t.dtype);
  for (uint32_t k = 1; k < t.rank; ++k)
    extent += (unsigned __int128)out.strides[k - 1] * (out.dims[k] - 1);
  if (extent > srcBytes) {
    err = what + ": describes " +
          (extent >> 64 ? std::string("more than 2^64")
                        : std::to_string(uint64_t(extent))) +
          " bytes but its source has " + std::to_string(srcBytes);
    return false;
  }
  return true;
}

void TensorMapSlots::plan(const Artifact &a) {
  slots_.clear();
  first_.assign(a.entries.size(), {});
  for (size_t ei = 0; ei < a.entries.size(); ++ei) {
    const Entry &e = a.entries[ei];
    for (size_t li = 0; li < e.launches.size(); ++li) {
      first_[ei].push_back(uint32_t(slots_.size()));
      const Launch &l = e.launches[li];
      for (size_t ai = 0; ai < l.args.size(); ++ai)
        if (l.args[ai].kind == ArgKind::TensorMap) {
          Slot s;
          s.entry = uint32_t(ei);
          s.launch = uint32_t(li);
          s.arg = uint32_t(ai);
          s.map = l.args[ai].index;
          slots_.push_back(s);
        }
    }
    first_[ei].push_back(uint32_t(slots_.size()));
  }
}

bool TensorMapSlots::allocate(Backend &be, std::string &err) {
  if (slots_.empty() || base_)
    return true;
  // Device allocations are at least 256-byte aligned; the extra 64 bytes
  // keep the slots aligned whatever the backend returns.
  uint64_t p = 0;
  if (!be.alloc(slots_.size() * kTensorMapBytes + kTensorMapAlign, p, err))
    return false;
  base_ = p;
  return true;
}

void TensorMapSlots::release(Backend &be) {
  if (base_)
    be.release(base_);
  base_ = 0;
  for (Slot &s : slots_)
    s.valid = false;
}

uint64_t TensorMapSlots::address(size_t entry, size_t launch,
                                 size_t arg) const {
  uint64_t aligned =
      (base_ + kTensorMapAlign - 1) & ~uint64_t(kTensorMapAlign - 1);
  for (uint32_t i = first_[entry][launch]; i < first_[entry][launch + 1]; ++i)
    if (slots_[i].arg == arg)
      return aligned + uint64_t(i) * kTensorMapBytes;
  return 0;
}

void TensorMapSlots::refresh(Backend &be, const Artifact &a, size_t entry,
                             const std::vector<int64_t> &sv,
                             const std::vector<uint64_t> &bufPtr,
                             const std::vector<uint64_t> &weightPtr) {
  const Entry &e = a.entries[entry];
  std::string err;
  for (size_t li = 0; li < e.launches.size(); ++li) {
    uint32_t lo = first_[entry][li], hi = first_[entry][li + 1];
    if (lo == hi)
      continue;
    const Launch &l = e.launches[li];
    // A launch with an empty grid is skipped by the session: its maps (whose
    // dims may be 0 too) are not encoded. Bad grid dims are reported there.
    bool empty = false;
    for (int k = 0; k < 3; ++k) {
      int64_t v = 0;
      std::string ignored;
      if (!evalDim(l.grid[k], sv.data(), sv.size(), v, ignored) || v <= 0)
        empty = true;
    }
    if (empty)
      continue;
    for (uint32_t i = lo; i < hi; ++i) {
      Slot &s = slots_[i];
      const TensorMapSpec &t = a.tensorMaps[s.map];
      std::string what = "entry '" + e.name + "' launch " + std::to_string(li) +
                         " ('" + l.kernel + "') arg " + std::to_string(s.arg) +
                         ": tensor map " + std::to_string(s.map);
      uint64_t addr, bytes;
      if (t.source.kind == ArgKind::Buffer) {
        addr = bufPtr[t.source.index] + t.source.offset;
        bytes = a.buffers[t.source.index].size - t.source.offset;
      } else {
        const Weight &w = a.weights[t.source.index];
        addr = weightPtr[t.source.index];
        bytes = weightBytes(w);
      }
      TensorMapParams p;
      if (!evalTensorMap(t, sv.data(), sv.size(), addr, bytes, what, p, err))
        fail(K3_ERROR_INVALID_ARGUMENT, err);
      if (s.valid && s.last == p)
        continue; // already encoded for these values
      alignas(128) uint8_t host[kTensorMapBytes] = {};
      s.valid = false;
      if (!be.encodeTensorMap(p, host, err))
        fail(K3_ERROR_DEVICE, what + ": " + err);
      if (!be.upload(address(entry, li, s.arg), host, kTensorMapBytes, err))
        fail(K3_ERROR_DEVICE, what + ": uploading: " + err);
      s.last = p;
      s.valid = true;
    }
  }
}

} // namespace rt
} // namespace k3

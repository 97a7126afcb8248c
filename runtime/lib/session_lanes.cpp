// The lanes of an entry's launch graph (launch_lanes.h): each launch's
// footprint from its arguments' device addresses, the bytes its kernel
// may touch through each (artifact section ANED) and whether it writes
// them.
#include "session.h"

#include <algorithm>

namespace k3 {
namespace rt {

using namespace artifact;

LaunchFootprint Session::launchFootprint(size_t ei, size_t li,
                                         const std::vector<int64_t> &sv) const {
  const Launch &l = art_->entries[ei].launches[li];
  LaunchFootprint fp;
  fp.kernel = kernels_[ei][li];
  // A buffer from `offset` on: `bytes` of it where the record says, else
  // to its end; written unless the record says it is only read.
  auto add = [&](uint32_t buffer, uint64_t offset, const ArgNeed *need) {
    uint64_t base = bufPtr_[buffer], size = art_->buffers[buffer].size;
    LaunchFootprint::Range r;
    r.begin = base + std::min(offset, size);
    r.end = base + size;
    if (need) {
      int64_t bytes = 0;
      std::string ignored;
      if (!(need->bytes == DimExpr::constant(0)) &&
          evalDim(need->bytes, sv.data(), sv.size(), bytes, ignored) &&
          bytes >= 0)
        r.end = std::min(r.end, r.begin + uint64_t(bytes));
      r.written = need->access != ArgAccess::Read;
    }
    fp.ranges.push_back(r);
  };
  for (size_t ai = 0; ai < l.args.size(); ++ai) {
    const Arg &g = l.args[ai];
    const ArgNeed *need = ai < l.needs.size() ? &l.needs[ai] : nullptr;
    if (g.kind == ArgKind::Buffer) {
      add(g.index, g.offset, need);
      continue;
    }
    if (g.kind != ArgKind::TensorMap)
      continue; // weights are only read; immediates and symbols are values
    // A map over one of the launch's buffer arguments is covered by that
    // argument; any other map counts as writing its whole source.
    const Arg &src = art_->tensorMaps[g.index].source;
    if (src.kind != ArgKind::Buffer)
      continue;
    bool covered = std::any_of(l.args.begin(), l.args.end(), [&](const Arg &a) {
      return a.kind == ArgKind::Buffer && a.index == src.index &&
             a.offset == src.offset;
    });
    if (!covered)
      add(src.index, src.offset, nullptr);
  }
  return fp;
}

std::unique_ptr<LaunchLanes>
Session::graphLanePlan(size_t ei, const std::vector<int64_t> &sv) {
  const Entry &e = art_->entries[ei];
  unsigned lanes = std::min(launchLanes_, be_->graphLanes());
  if (lanes <= 1)
    return nullptr;
  auto out = std::make_unique<LaunchLanes>();
  out->stepOf.assign(e.launches.size(), LaunchLanes::kNoStep);
  std::vector<LaunchFootprint> footprints;
  for (size_t li = 0; li < e.launches.size(); ++li) {
    const Launch &l = e.launches[li];
    if (l.object == kCollectiveObject)
      return nullptr; // collectives run between kernels, on no lane
    // A launch whose grid is empty at these values does not run
    // (launchAll skips it): no step, nothing waits for it.
    bool empty = false;
    for (int d = 0; d < 3; ++d) {
      int64_t v = 1;
      std::string ignored;
      if (evalDim(l.grid[d], sv.data(), sv.size(), v, ignored) && v == 0)
        empty = true;
    }
    if (empty)
      continue;
    out->stepOf[li] = footprints.size();
    footprints.push_back(launchFootprint(ei, li, sv));
  }
  out->plan = planLanes(footprints, lanes);
  return out;
}

} // namespace rt
} // namespace k3

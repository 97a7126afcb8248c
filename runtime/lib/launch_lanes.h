// Private: which launches of a launch graph may run side by side.
//
// A captured entry is a list of kernel launches. Run in one stream, each
// waits for the one before it, although many depend on none of the
// launches just before them: a MoE layer's shared expert needs only the
// normed hidden state, not the router, the top-k and the dispatch that run
// before it; those small kernels fill a fraction of the SMs. The plan puts
// the launches on a few lanes (streams in the capture, branches of the
// graph) and makes a launch wait only for the earlier launches whose bytes
// it conflicts with:
// * two launches conflict where a byte range that one writes overlaps a
//   range that the other reads or writes (artifact ANED `access`; an
//   argument without it counts as written, its range as the whole buffer
//   where the record has no byte count);
// * launches of one kernel never run side by side (a persistent kernel's
//   tile counter is a global of its module, TileCounter.h).
// Waits are on the last conflicting launch of each other lane; a launch
// goes to the lane of its latest dependency if that launch ends its lane,
// else to a lane whose last launch it already waits for, else to the lane
// used longest ago (then it waits for that lane's last launch too: an
// order the data does not need, never a missing one).
#ifndef K3_RT_LAUNCH_LANES_H
#define K3_RT_LAUNCH_LANES_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace k3 {
namespace rt {

/// The bytes that one launch touches, as device address ranges.
struct LaunchFootprint {
  struct Range {
    uint64_t begin = 0, end = 0; // [begin, end)
    bool written = true;
  };
  std::vector<Range> ranges;
  const void *kernel = nullptr; // launches of one kernel stay ordered
};

/// Where one launch runs and what it waits for.
struct LaneStep {
  unsigned lane = 0;
  /// Earlier launches (indices into the plan) on other lanes to wait for.
  std::vector<size_t> waitFor;
  /// A later launch on another lane waits for this one (its lane records
  /// an event after it).
  bool signals = false;
};

struct LanePlan {
  std::vector<LaneStep> steps; // one per launch, in launch order
  unsigned lanesUsed = 1;
  size_t waits = 0; // cross-lane waits in all
};

/// A plan bound to an entry's launch list: launch li is step stepOf[li]
/// of `plan` (kNoStep: not launched at these symbol values).
struct LaunchLanes {
  static constexpr size_t kNoStep = ~size_t(0);
  LanePlan plan;
  std::vector<size_t> stepOf;
};

/// Whether `b` must follow `a` (either order of the two in the list).
bool conflicts(const LaunchFootprint &a, const LaunchFootprint &b);

/// Plans `launches` (in their sequential order) on at most `lanes` lanes
/// (1: every launch on lane 0, no waits).
LanePlan planLanes(const std::vector<LaunchFootprint> &launches,
                   unsigned lanes);

} // namespace rt
} // namespace k3

#endif

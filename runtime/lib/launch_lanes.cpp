// Which launches of a launch graph may run side by side (launch_lanes.h).
#include "launch_lanes.h"

#include <algorithm>

namespace k3 {
namespace rt {

namespace {

/// A set of launch indices below a fixed count.
class LaunchSet {
public:
  explicit LaunchSet(size_t words) { bits.resize(words); }
  void insert(size_t i) { bits[i / 64] |= uint64_t(1) << (i % 64); }
  bool contains(size_t i) const {
    return (bits[i / 64] >> (i % 64)) & uint64_t(1);
  }
  void merge(const LaunchSet &o) {
    for (size_t w = 0; w < bits.size(); ++w)
      bits[w] |= o.bits[w];
  }

private:
  std::vector<uint64_t> bits;
};

constexpr size_t kNone = ~size_t(0);

/// Launch `i`'s placement on a lane whose last launch is `tail` (kNone:
/// an unused lane): the waits it needs beyond the lane's order, latest
/// first so that each covers what it follows.
std::vector<size_t> waitsOnLane(const std::vector<size_t> &deps, size_t tail,
                                const std::vector<LaunchSet> &before,
                                size_t words) {
  LaunchSet covered(words);
  if (tail != kNone) {
    covered.merge(before[tail]);
    covered.insert(tail);
  }
  std::vector<size_t> waits;
  for (size_t k = deps.size(); k-- > 0;) {
    size_t j = deps[k];
    if (covered.contains(j))
      continue;
    waits.push_back(j);
    covered.insert(j);
    covered.merge(before[j]);
  }
  return waits;
}

} // namespace

bool conflicts(const LaunchFootprint &a, const LaunchFootprint &b) {
  if (a.kernel && a.kernel == b.kernel)
    return true;
  for (const LaunchFootprint::Range &x : a.ranges)
    for (const LaunchFootprint::Range &y : b.ranges)
      if ((x.written || y.written) && x.begin < y.end && y.begin < x.end)
        return true;
  return false;
}

LanePlan planLanes(const std::vector<LaunchFootprint> &launches,
                   unsigned lanes) {
  const size_t n = launches.size();
  LanePlan plan;
  plan.steps.resize(n);
  if (lanes <= 1 || n == 0)
    return plan;
  // before[i]: the launches that have finished whenever launch i starts
  // (its lane's earlier launches, what it waits for, and theirs).
  const size_t words = n / 64 + 1;
  std::vector<LaunchSet> before;
  before.reserve(n);
  for (size_t i = 0; i < n; ++i)
    before.emplace_back(words);
  std::vector<size_t> tail(lanes, kNone);
  std::vector<bool> used(lanes, false);
  for (size_t i = 0; i < n; ++i) {
    std::vector<size_t> deps; // ascending
    LaunchSet needed(words);  // deps and everything before them
    for (size_t j = 0; j < i; ++j)
      if (conflicts(launches[j], launches[i])) {
        deps.push_back(j);
        needed.insert(j);
        needed.merge(before[j]);
      }
    // The best lane: no order that the data does not need, then the
    // fewest waits, then the latest last launch (a chain goes on).
    unsigned best = 0;
    bool bestFalseOrder = true;
    size_t bestWaits = kNone, bestTail = kNone;
    std::vector<size_t> bestWaitList;
    for (unsigned l = 0; l < lanes; ++l) {
      bool falseOrder = tail[l] != kNone && !needed.contains(tail[l]);
      std::vector<size_t> w = waitsOnLane(deps, tail[l], before, words);
      // An unused lane ranks as the oldest tail.
      size_t t = tail[l] == kNone ? 0 : tail[l] + 1;
      bool better = false;
      if (bestWaits == kNone)
        better = true;
      else if (falseOrder != bestFalseOrder)
        better = !falseOrder;
      else if (falseOrder) // all lanes add an order: take the oldest
        better = t < bestTail;
      else if (w.size() != bestWaits)
        better = w.size() < bestWaits;
      else
        better = t > bestTail;
      if (better) {
        best = l;
        bestFalseOrder = falseOrder;
        bestWaits = w.size();
        bestTail = t;
        bestWaitList = std::move(w);
      }
    }
    LaneStep &s = plan.steps[i];
    s.lane = best;
    s.waitFor = bestWaitList;
    std::sort(s.waitFor.begin(), s.waitFor.end());
    if (tail[best] != kNone) {
      before[i].merge(before[tail[best]]);
      before[i].insert(tail[best]);
    }
    for (size_t j : s.waitFor) {
      before[i].insert(j);
      before[i].merge(before[j]);
      plan.steps[j].signals = true;
    }
    plan.waits += s.waitFor.size();
    tail[best] = i;
    used[best] = true;
  }
  plan.lanesUsed = unsigned(std::count(used.begin(), used.end(), true));
  return plan;
}

} // namespace rt
} // namespace k3

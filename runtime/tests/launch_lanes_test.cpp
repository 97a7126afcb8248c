// Which launches of a launch graph may run side by side (launch_lanes.h).
#include "../lib/launch_lanes.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

using namespace k3::rt;

namespace {

using Range = LaunchFootprint::Range;

Range reads(uint64_t begin, uint64_t end) { return {begin, end, false}; }
Range writes(uint64_t begin, uint64_t end) { return {begin, end, true}; }

/// A launch of its own kernel (kernel ids 1, 2, ... as addresses).
LaunchFootprint launchOf(std::vector<Range> ranges, uintptr_t kernel) {
  LaunchFootprint f;
  f.ranges = std::move(ranges);
  f.kernel = reinterpret_cast<const void *>(kernel);
  return f;
}

/// The launches finished whenever each launch starts, from the plan alone:
/// its lane's earlier launches, the launches it waits for, and theirs.
std::vector<std::set<size_t>> finishedBefore(const LanePlan &p) {
  std::vector<std::set<size_t>> before(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    auto follow = [&](size_t j) {
      before[i].insert(j);
      before[i].insert(before[j].begin(), before[j].end());
    };
    for (size_t j = i; j-- > 0;)
      if (p.steps[j].lane == p.steps[i].lane) {
        follow(j);
        break;
      }
    for (size_t j : p.steps[i].waitFor) {
      EXPECT_LT(j, i);
      EXPECT_TRUE(p.steps[j].signals) << "launch " << j;
      EXPECT_NE(p.steps[j].lane, p.steps[i].lane) << "launch " << i;
      follow(j);
    }
  }
  return before;
}

/// Every conflicting pair stays in order.
void expectOrdered(const std::vector<LaunchFootprint> &launches,
                   const LanePlan &p) {
  std::vector<std::set<size_t>> before = finishedBefore(p);
  for (size_t i = 0; i < launches.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (conflicts(launches[j], launches[i])) {
        EXPECT_TRUE(before[i].count(j))
            << "launch " << i << " may run beside launch " << j;
      }
    }
}

} // namespace

TEST(LaunchLanes, Conflicts) {
  LaunchFootprint a = launchOf({reads(0, 100)}, 1);
  EXPECT_FALSE(conflicts(a, launchOf({reads(50, 60)}, 2)));    // both read
  EXPECT_TRUE(conflicts(a, launchOf({writes(99, 120)}, 2)));   // read, write
  EXPECT_FALSE(conflicts(a, launchOf({writes(100, 120)}, 2))); // adjacent
  EXPECT_TRUE(conflicts(launchOf({writes(0, 8)}, 3),
                        launchOf({reads(4, 6)}, 4))); // write, read
  EXPECT_TRUE(conflicts(a, launchOf({}, 1)));         // one kernel: ordered
}

TEST(LaunchLanes, OneLaneKeepsTheOrder) {
  std::vector<LaunchFootprint> l = {launchOf({writes(0, 10)}, 1),
                                    launchOf({writes(20, 30)}, 2)};
  LanePlan p = planLanes(l, 1);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[1].lane, 0u);
  EXPECT_EQ(p.lanesUsed, 1u);
  EXPECT_EQ(p.waits, 0u);
}

TEST(LaunchLanes, ChainStaysOnOneLane) {
  std::vector<LaunchFootprint> l = {
      launchOf({reads(0, 10), writes(10, 20)}, 1),
      launchOf({reads(10, 20), writes(20, 30)}, 2),
      launchOf({reads(20, 30), writes(0, 10)}, 3)};
  LanePlan p = planLanes(l, 4);
  for (const LaneStep &s : p.steps) {
    EXPECT_EQ(s.lane, 0u);
    EXPECT_TRUE(s.waitFor.empty());
  }
  EXPECT_EQ(p.lanesUsed, 1u);
}

// A MoE layer: the shared expert needs only the normed hidden state, so it
// runs beside the router, top-k and dispatch; the combine waits for both.
TEST(LaunchLanes, SharedExpertBesideTheRouter) {
  const uint64_t x = 0, logits = 100, ids = 200, rows = 300, h = 400,
                 shared = 500, routed = 600, out = 700;
  std::vector<LaunchFootprint> l = {
      launchOf({writes(x, x + 100)}, 1),                              // 0 norm
      launchOf({reads(x, x + 100), writes(logits, logits + 100)}, 2), // router
      launchOf({reads(logits, logits + 100), writes(ids, ids + 100)}, 3),
      launchOf({reads(x, x + 100), writes(h, h + 100)}, 4), // 3 shared
      launchOf({reads(h, h + 100), writes(shared, shared + 100)}, 5),
      launchOf(
          {reads(ids, ids + 100), reads(x, x + 100), writes(rows, rows + 100)},
          6), // 5 grouped gate/up
      launchOf({reads(rows, rows + 100), writes(routed, routed + 100)}, 7),
      launchOf({reads(routed, routed + 100), reads(shared, shared + 100),
                writes(out, out + 100)},
               8)}; // 7 combine
  LanePlan p = planLanes(l, 4);
  expectOrdered(l, p);
  EXPECT_EQ(p.steps[3].lane, 1u); // beside the router
  EXPECT_EQ(p.steps[3].waitFor, std::vector<size_t>{0});
  EXPECT_EQ(p.steps[4].lane, 1u);
  EXPECT_EQ(p.steps[5].lane, 0u);
  EXPECT_EQ(p.steps[7].lane, 0u);
  EXPECT_EQ(p.steps[7].waitFor, std::vector<size_t>{4});
  EXPECT_TRUE(p.steps[0].signals);
  EXPECT_TRUE(p.steps[4].signals);
  EXPECT_EQ(p.lanesUsed, 2u);
  EXPECT_EQ(p.waits, 2u);
}

// Reading before a later write (a reused arena region) is an order too.
TEST(LaunchLanes, WriteAfterReadWaits) {
  std::vector<LaunchFootprint> l = {
      launchOf({writes(0, 10)}, 1),                   // 0
      launchOf({reads(0, 10), writes(50, 60)}, 2),    // 1 reads 0's bytes
      launchOf({writes(100, 110)}, 3),                // 2 independent
      launchOf({reads(100, 110), writes(0, 10)}, 4)}; // 3 overwrites 0's
  LanePlan p = planLanes(l, 2);
  expectOrdered(l, p);
  EXPECT_EQ(p.steps[2].lane, 1u);
}

// More launches side by side than lanes: the extra one waits for the
// oldest lane's last launch, an order the data does not need.
TEST(LaunchLanes, MoreBranchesThanLanes) {
  std::vector<LaunchFootprint> l;
  for (uint64_t k = 0; k < 5; ++k)
    l.push_back(launchOf({writes(100 * k, 100 * k + 10)}, 1 + k));
  LanePlan p = planLanes(l, 3);
  expectOrdered(l, p);
  EXPECT_EQ(p.lanesUsed, 3u);
  EXPECT_EQ(p.steps[3].lane, 0u); // after launch 0, the oldest tail
}

// Random footprints: whatever the plan, no conflicting pair runs side by
// side.
TEST(LaunchLanes, RandomFootprintsStayOrdered) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<LaunchFootprint> l(1 + rng() % 40);
    for (LaunchFootprint &f : l) {
      size_t n = 1 + rng() % 4;
      for (size_t k = 0; k < n; ++k) {
        uint64_t b = rng() % 1000, e = b + 1 + rng() % 60;
        f.ranges.push_back({b, e, rng() % 3 == 0});
      }
      f.kernel = reinterpret_cast<const void *>(uintptr_t(1 + rng() % 30));
    }
    unsigned lanes = 1 + rng() % 5;
    LanePlan p = planLanes(l, lanes);
    ASSERT_EQ(p.steps.size(), l.size());
    for (const LaneStep &s : p.steps)
      EXPECT_LT(s.lane, lanes);
    expectOrdered(l, p);
  }
}

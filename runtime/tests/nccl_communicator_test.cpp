// The NCCL communicator (runtime/lib/communicator_nccl.cpp) against the host
// communicator's arithmetic, on a stand-in NCCL that works on host memory
// (fixtures/fake_nccl.cpp, loaded through K3_NCCL_LIB): groups narrower than
// the world (split communicators), gathers and scatters of several rows,
// all-to-all, and one rank per "process" from a shared unique id. What the
// stand-in cannot show is NCCL itself on GPUs (docs/scaling.md).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "../lib/communicator.h"
#include "fixtures/collective_ranks.h"
#include "k3/artifact.h"

using namespace k3::artifact;
using k3::rt::Communicator;

namespace {

using k3test::Outputs;
using k3test::runRanks;

std::shared_ptr<Communicator> fakeNccl(uint32_t ranks) {
  setenv("K3_NCCL_LIB", K3_FAKE_NCCL_SO, 1);
  std::vector<int> devices(ranks);
  for (uint32_t r = 0; r < ranks; ++r)
    devices[r] = int(r);
  std::string err;
  auto comm = k3::rt::makeNcclCommunicator(devices, err);
  EXPECT_TRUE(comm) << err;
  return comm;
}

/// Each collective kind, on two groups of a tp = 2 x ep = 2 world (each
/// group narrower than the world: NCCL communicators split from it) and
/// over rows: the NCCL communicator gives the host communicator's values.
struct Case {
  CollectiveKind kind;
  std::string group;
  uint64_t outer, chunk;
  size_t inElems, outElems;
};

} // namespace

TEST(NcclCommunicator, GroupsAndRowsMatchTheHostCommunicator) {
  Partition p;
  p.tp = 2;
  p.ep = 2;
  const std::vector<Case> cases = {
      {CollectiveKind::AllReduce, "tp", 3, 4, 12, 12},
      {CollectiveKind::AllReduce, "ep", 1, 5, 5, 5},
      {CollectiveKind::AllGather, "ep", 3, 2, 6, 12},
      {CollectiveKind::AllGather, "tp", 1, 3, 3, 6},
      {CollectiveKind::ReduceScatter, "tp", 3, 2, 12, 6},
      {CollectiveKind::AllToAll, "ep", 3, 4, 12, 12},
  };
  auto nccl = fakeNccl(p.world());
  auto host = k3::rt::makeHostCommunicator(p.world());
  for (const Case &k : cases) {
    Collective c;
    c.kind = k.kind;
    c.group = k.group;
    c.groupSize = p.size(k.group);
    c.dtype = DType::F32;
    Outputs in(p.world());
    for (uint32_t r = 0; r < p.world(); ++r)
      for (size_t i = 0; i < k.inElems; ++i)
        in[r].push_back(float(100 * r + i));
    Outputs want = runRanks(c, p, in, k.outer, k.chunk, k.outElems,
                            [&](uint32_t) { return host; });
    Outputs got = runRanks(c, p, in, k.outer, k.chunk, k.outElems,
                           [&](uint32_t) { return nccl; });
    EXPECT_EQ(got, want) << collectiveName(k.kind) << " over " << k.group;
  }
}

TEST(NcclCommunicator, OneRankAProcessFromRankZerosId) {
  // Three "processes" (threads), each with its own communicator made from
  // rank 0's unique id, shared as MPI would share it; then a gather of two
  // rows over the world.
  setenv("K3_NCCL_LIB", K3_FAKE_NCCL_SO, 1);
  Partition p;
  p.tp = 3;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<char> id;
  std::vector<std::shared_ptr<Communicator>> comms(3);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto share = [&](void *bytes, size_t n) {
        std::unique_lock<std::mutex> lock(mu);
        if (r == 0) {
          id.assign(static_cast<char *>(bytes), static_cast<char *>(bytes) + n);
          cv.notify_all();
        } else {
          cv.wait(lock, [&] { return !id.empty(); });
          std::memcpy(bytes, id.data(), n);
        }
        return true;
      };
      std::string err;
      comms[r] = k3::rt::makeNcclRankCommunicator(r, 3, share, err);
      EXPECT_TRUE(comms[r]) << err;
    });
  for (auto &t : threads)
    t.join();
  Collective c;
  c.kind = CollectiveKind::AllGather;
  c.group = "tp";
  c.groupSize = 3;
  Outputs in{{1, 2}, {3, 4}, {5, 6}};
  Outputs got =
      runRanks(c, p, in, 2, 1, 6, [&](uint32_t r) { return comms[r]; });
  for (const auto &o : got)
    EXPECT_EQ(o, (std::vector<float>{1, 3, 5, 2, 4, 6}));
  // A rank has only its own communicator: another rank's call is an error.
  k3::rt::CollectiveCall call;
  call.collective = &c;
  call.partition = p;
  call.rank = 1;
  call.outer = call.chunk = 1;
  std::string err;
  EXPECT_FALSE(comms[0]->run(call, err));
  EXPECT_NE(err.find("rank 1 has no NCCL communicator in this process"),
            std::string::npos)
      << err;
}

TEST(NcclCommunicator, MissingLibraryIsAnError) {
  setenv("K3_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  std::string err;
  EXPECT_FALSE(k3::rt::makeNcclCommunicator({0}, err));
  EXPECT_NE(err.find("cannot load NCCL (/nonexistent/libnccl.so.2)"),
            std::string::npos)
      << err;
}

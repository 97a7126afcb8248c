// A partitioned artifact (format 1.3): its collectives and weight shards
// round-trip and are validated; the rank layout; the host communicator's
// collectives over threads, and a failed rank waking the others.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "../lib/communicator.h"
#include "fixtures/artifact_bytes.h"
#include "fixtures/collective_ranks.h"
#include "fixtures/toy_model.h"
#include "k3/artifact.h"
#include "k3/dtype.h"

using namespace k3::artifact;
using k3test::readErr;

namespace {

/// The toy model with a weight split in two over tp and an all-reduce of
/// its [T, 16] logits into an arena buffer.
Builder partitionedToy() {
  Builder b = k3test::toyModel();
  uint32_t w = b.addWeight("proj.w", DType::BF16, {8, 16});
  b.addWeightShard({w, 0, "tp", 2, 16});
  uint32_t sum = b.addBuffer("sum", BufferKind::Arena,
                             k3test::kToyMaxTokens * k3test::kToyVocab * 4, 0);
  Collective c;
  c.kind = CollectiveKind::AllReduce;
  c.group = "tp";
  c.groupSize = 2;
  c.outer = DimExpr::symbol(0);
  c.chunk = DimExpr::constant(k3test::kToyVocab);
  b.addCollective(0, c,
                  Arg::buffer(uint32_t(b.artifact().findBuffer("logits"))),
                  Arg::buffer(sum));
  return b;
}

} // namespace

TEST(Partition, RoundTripAndDescribe) {
  Artifact a = partitionedToy().artifact();
  std::vector<uint8_t> bytes;
  std::string err;
  ASSERT_TRUE(serialize(a, bytes, err)) << err;
  Artifact b;
  ASSERT_TRUE(deserialize(bytes.data(), bytes.size(), b, err)) << err;
  EXPECT_TRUE(a == b);
  ASSERT_EQ(b.collectives.size(), 1u);
  EXPECT_EQ(b.weightShards[0].group, "tp");
  Partition p = partitionOf(b);
  EXPECT_EQ(p.tp, 2u);
  EXPECT_EQ(p.world(), 2u);
  std::string d = describe(b);
  EXPECT_NE(d.find("all_reduce sum over tp (2 ranks), f32 [num_tokens, 16]"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("shard 'proj.w': dim 0 split 2 ways over group tp"),
            std::string::npos)
      << d;
}

TEST(Partition, ValidatorRefusals) {
  auto mutate = [](const std::function<void(Artifact &)> &f) {
    Artifact a = partitionedToy().artifact();
    f(a);
    return readErr(a);
  };
  EXPECT_NE(mutate([](Artifact &a) {
              a.collectives[0].group = "dp";
            }).find("group 'dp' is not one of 'tp', 'ep', 'cp'"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.collectives[0].groupSize = 4;
            }).find("group 'tp' has size 2 here but 4 elsewhere"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.collectives[0].groupSize = 0;
            }).find("size 0 outside [1, 64]"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.weightShards[0].dim = 2;
            }).find("shard dim 2 >= its rank 2"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.weightShards[0].extent = 15;
            }).find("extent 15 along dim 0 is not in [16 (2 x 8), 2^40]"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.weightShards[0].weight = 99;
            }).find("weight index 99 out of range"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.weightShards.push_back(a.weightShards[0]);
            }).find("sharded twice"),
            std::string::npos);
  // The all-reduce of [num_tokens, 17] does not fit the logits buffer.
  EXPECT_NE(mutate([](Artifact &a) {
              a.collectives[0].chunk = DimExpr::constant(17);
            }).find("needs 544 bytes at the symbols' max bounds"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.entries[0].launches.back().args[2] = Arg::i64(3);
            }).find("collective index 3 out of range"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.entries[0].launches.back().args[1] =
                  a.entries[0].launches.back().args[0];
            }).find("input and output share a buffer"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.entries[0].launches.back().kernel = "k3t_fill";
            }).find("a collective launch names no kernel"),
            std::string::npos);
  EXPECT_NE(mutate([](Artifact &a) {
              a.collectives[0].outer = DimExpr::symbol(0, -1, 8);
            }).find("must be positive and grow with its symbol"),
            std::string::npos);
  // MXFP4 keeps a scale per 32 inputs (its last dimension): a split there
  // must leave each rank whole blocks; a split of another dimension is
  // whole rows of codes and scales.
  auto mxfp4 = [](uint32_t dim, std::vector<int64_t> local, uint64_t extent) {
    Artifact a = partitionedToy().artifact();
    WeightShard &s = a.weightShards[0];
    a.weights[s.weight].dtype = DType::MXFP4;
    a.weights[s.weight].shape = local;
    s.dim = dim;
    s.extent = extent;
    return a;
  };
  std::string mx = readErr(mxfp4(1, {8, 16}, 32));
  EXPECT_NE(mx.find("mxfp4 needs a last dimension that is a multiple of 32"),
            std::string::npos)
      << mx;
  mx = readErr(mxfp4(1, {8, 32}, 80));
  EXPECT_NE(mx.find("mxfp4 extent 80 along its inputs is not a multiple of 32"),
            std::string::npos)
      << mx;
  for (const Artifact &ok : {mxfp4(0, {8, 32}, 16), mxfp4(1, {8, 32}, 64)}) {
    std::vector<uint8_t> b = k3test::bytesOf(ok);
    Artifact back;
    std::string err;
    EXPECT_TRUE(deserialize(b.data(), b.size(), back, err)) << err;
  }
}

TEST(Partition, RankLayout) {
  Partition p;
  p.tp = 2;
  p.ep = 3;
  p.cp = 2;
  EXPECT_EQ(p.world(), 12u);
  // rank = tp_rank + 2 (ep_rank + 3 cp_rank)
  uint32_t r = 1 + 2 * (2 + 3 * 1); // tp 1, ep 2, cp 1
  EXPECT_EQ(p.rankIn("tp", r), 1u);
  EXPECT_EQ(p.rankIn("ep", r), 2u);
  EXPECT_EQ(p.rankIn("cp", r), 1u);
  EXPECT_EQ(p.memberRank("tp", r, 0), r - 1);
  EXPECT_EQ(p.memberRank("ep", r, 0), 1u + 2 * (0 + 3 * 1));
  EXPECT_EQ(p.memberRank("cp", r, 0), 1u + 2 * 2);
}

TEST(Partition, RankInputNames) {
  std::string group;
  EXPECT_TRUE(k3::artifact::isRankInput("k3.rank.ep", &group));
  EXPECT_EQ(group, "ep");
  EXPECT_TRUE(k3::artifact::isRankInput("k3.rank.tp"));
  EXPECT_TRUE(k3::artifact::isRankInput("k3.rank.cp"));
  for (const char *other : {"k3.rank.", "k3.rank.dp", "k3.rank.ep.x", "rank.ep",
                            "token_ids", "k3.rankep"})
    EXPECT_FALSE(k3::artifact::isRankInput(other)) << other;
}

namespace {

/// Runs `c` on `world` threads of a host communicator, rank r's input
/// `inputs[r]`; returns each rank's output.
k3test::Outputs runOnThreads(const Collective &c, Partition p,
                             const k3test::Outputs &inputs, uint64_t outer,
                             uint64_t chunk, size_t outElems) {
  auto comm = k3::rt::makeHostCommunicator(p.world());
  return k3test::runRanks(c, p, inputs, outer, chunk, outElems,
                          [&](uint32_t) { return comm; });
}

} // namespace

TEST(HostCommunicator, AllReduceGatherScatter) {
  Partition p;
  p.tp = 2;
  p.ep = 2;
  std::vector<std::vector<float>> in(4);
  for (uint32_t r = 0; r < 4; ++r)
    for (int i = 0; i < 6; ++i)
      in[r].push_back(float(100 * r + i));
  Collective c;
  c.group = "tp";
  c.groupSize = 2;
  // all_reduce over tp: ranks {0, 1} and {2, 3} sum separately.
  auto sum = runOnThreads(c, p, in, 2, 3, 6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sum[0][i], float(100 + 2 * i));
    EXPECT_EQ(sum[1][i], sum[0][i]);
    EXPECT_EQ(sum[2][i], float(500 + 2 * i));
  }
  // all_gather over ep ({0, 2} and {1, 3}): [2, 3] -> [2, 2, 3].
  c.kind = CollectiveKind::AllGather;
  c.group = "ep";
  auto g = runOnThreads(c, p, in, 2, 3, 12);
  std::vector<float> want0{0, 1, 2, 200, 201, 202, 3, 4, 5, 203, 204, 205};
  EXPECT_EQ(g[0], want0);
  EXPECT_EQ(g[2], want0);
  EXPECT_EQ(g[1][3], 300.f); // ranks 1 and 3: in1[0:3], then in3[0:3]
  // reduce_scatter max over tp: [1, 2, 3] -> rank j keeps slot j of [1, 3].
  c.kind = CollectiveKind::ReduceScatter;
  c.reduce = ReduceOp::Max;
  c.group = "tp";
  auto s = runOnThreads(c, p, in, 1, 3, 3);
  EXPECT_EQ(s[0], (std::vector<float>{100, 101, 102}));
  EXPECT_EQ(s[1], (std::vector<float>{103, 104, 105}));
  EXPECT_EQ(s[3], (std::vector<float>{303, 304, 305}));
}

TEST(HostCommunicator, AllToAllSwapsShards) {
  // Two rows of 6 elements per rank over tp = 3: shard j (2 elements) of
  // each row goes to member j, which keeps it at slot j.
  Partition p;
  p.tp = 3;
  std::vector<std::vector<float>> in(3);
  for (uint32_t r = 0; r < 3; ++r)
    for (int i = 0; i < 12; ++i)
      in[r].push_back(float(100 * r + i));
  Collective c;
  c.kind = CollectiveKind::AllToAll;
  c.group = "tp";
  c.groupSize = 3;
  auto out = runOnThreads(c, p, in, 2, 6, 12);
  for (uint32_t me = 0; me < 3; ++me)
    for (uint64_t o = 0; o < 2; ++o)
      for (uint32_t j = 0; j < 3; ++j)
        for (int k = 0; k < 2; ++k)
          EXPECT_EQ(out[me][o * 6 + j * 2 + k], in[j][o * 6 + me * 2 + k])
              << "rank " << me << " row " << o << " slot " << j;
  // Twice is the identity.
  auto back = runOnThreads(c, p, out, 2, 6, 12);
  EXPECT_EQ(back, in);
}

TEST(HostCommunicator, Bf16SumsInF32InRankOrder) {
  Partition p;
  p.tp = 3;
  Collective c;
  c.dtype = DType::BF16;
  c.group = "tp";
  c.groupSize = 3;
  // 256 + 1 + 1: one rounding at the end gives 258; bf16 partial sums
  // (256 + 1 = 256 in bf16) would give 256.
  std::vector<std::vector<uint16_t>> in{
      {k3::floatToBf16(256.f)}, {k3::floatToBf16(1.f)}, {k3::floatToBf16(1.f)}};
  std::vector<uint16_t> out(3, 0);
  auto comm = k3::rt::makeHostCommunicator(3);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      k3::rt::CollectiveCall call{&c,
                                  p,
                                  r,
                                  reinterpret_cast<uint64_t>(in[r].data()),
                                  reinterpret_cast<uint64_t>(&out[r]),
                                  1,
                                  1};
      std::string err;
      EXPECT_TRUE(comm->run(call, err)) << err;
    });
  for (auto &t : threads)
    t.join();
  for (uint16_t o : out)
    EXPECT_EQ(k3::bf16ToFloat(o), 258.f);
}

TEST(HostCommunicator, AbortWakesWaitingRanks) {
  Partition p;
  p.tp = 2;
  Collective c;
  c.group = "tp";
  c.groupSize = 2;
  auto comm = k3::rt::makeHostCommunicator(2);
  float in = 1, out = 0;
  std::string err;
  std::thread waiter([&] {
    k3::rt::CollectiveCall call{&c,
                                p,
                                0,
                                reinterpret_cast<uint64_t>(&in),
                                reinterpret_cast<uint64_t>(&out),
                                1,
                                1};
    EXPECT_FALSE(comm->run(call, err));
  });
  comm->abort("rank 1: no weights");
  waiter.join();
  EXPECT_NE(err.find("another rank failed: rank 1: no weights"),
            std::string::npos)
      << err;
  // After a reset the world meets again.
  comm->reset();
  std::vector<std::vector<float>> ins{{2.f}, {3.f}};
  auto sums = runOnThreads(c, p, ins, 1, 1, 1);
  EXPECT_EQ(sums[0][0], 5.f);
}

TEST(MpiCommunicator, NamedLibraryThatIsMissingIsAnError) {
  // K3_MPI_LIB, when set, is the only libmpi tried: a wrong path is an
  // error naming it, not a silent fallback to another library.
  setenv("K3_MPI_LIB", "/nonexistent/libmpi.so.40", 1);
  uint32_t rank = 7;
  std::string err;
  auto comm = k3::rt::makeMpiCommunicator(rank, err);
  unsetenv("K3_MPI_LIB");
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(err.find("cannot load libmpi"), std::string::npos) << err;
  EXPECT_NE(err.find("/nonexistent/libmpi.so.40"), std::string::npos) << err;
}

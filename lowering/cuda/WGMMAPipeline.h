//===- WGMMAPipeline.h - producer and consumer warpgroups -------*- C++ -*-===//
//
// The warp-specialised main loop of Hopper GEMMs, as CUTLASS's and
// ThunderKittens' kernels run it: warpgroup 0 produces (one thread issues
// each k-step's TMA loads into one of `stages` shared-memory buffers), the
// next `consumers` warpgroups multiply. Each stage has two mbarriers:
//
// - full[s]: the producer's arrive with the stage's byte count; the TMA
//   bytes complete it. Consumers wait on phase (kt / stages) % 2.
// - empty[s]: every consumer thread arrives once the wgmma groups that read
//   the stage have completed; the producer waits on it before it refills
//   the stage (phase kt / stages - 1).
//
// A producer may also copy with cp.async (rows gathered by index, which
// TMA cannot): then all 128 producer threads run its loop, and each makes
// full[kt % stages] track its copies of step kt
// (`k3gpu.mbarrier_arrive_copies`: its arrive fires once they land) and
// goes on to step kt + 1 without waiting, as far as the empty barriers
// let it; full expects those 128 arrivals besides thread 0's. The bytes
// are generic-proxy writes and wgmma reads through the async proxy, so a
// consumer fences the proxies after its full wait (`fenceCopiesForWGMMA`).
//
// A consumer issues a stage's wgmma groups without waiting, then waits
// until only those are pending (`wgmma.wait_group groupsPerStage`): the
// tensor cores always have the next stage's products queued while the
// previous stage is released. The roles resize their register files with
// `setmaxnreg` (the producer needs few; the consumers hold 64 x 256 f32
// accumulators).
//
// Pairs (a cluster of two blocks, `peers` = 2) share one operand's tiles:
// each block's producer loads half of the shared tile by TMA multicast
// into both blocks' stage, so a stage's full barrier completes on bytes
// that both producers sent. A producer therefore refills a stage only once
// the consumers of both blocks released it: empty[s] counts one arrive per
// consumer warp of each block, lane 0 of every warp arriving on block 0's
// barrier and lane 1 on block 1's (k3gpu.mbarrier_arrive_cluster), after
// the wgmma wait that ends the warp's reads. The barriers are initialised
// and fenced for the cluster before either block loads (a cluster
// barrier), and neither block exits while the other may still write into
// its shared memory or arrive on its barriers (finish()). A copying
// producer may run in a pair too: its copies land in its own block and
// arrive on its own full barrier, beside the multicast TMA bytes (the
// grouped gate/up GEMM's pairs, MoEGroupedPersistent.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_WGMMAPIPELINE_H
#define K3_LOWERING_CUDA_WGMMAPIPELINE_H

#include "lowering/cuda/WGMMA.h"

#include <cassert>
#include <functional>

namespace mlir::k3 {

/// Registers per thread of the producer warpgroup and of each consumer
/// warpgroup after `setmaxnreg` (multiples of 8; with one producer and two
/// consumers 128 x 40 + 256 x 232 = 64512, the 384 x 168 that the launch
/// holds). A copying producer keeps its rows' addresses: 56, and 224 for
/// the consumers.
constexpr int32_t kProducerRegisters = 40, kConsumerRegisters = 232;
constexpr int32_t kCopyingProducerRegisters = 56,
                  kCopyingConsumerRegisters = 224;

/// Registers per consumer thread once a producer warpgroup shrank to
/// `producerRegisters`: each consumer warpgroup's share of what the launch
/// holds (65536 registers an SM over the blocks on it and their threads, in
/// multiples of 8, at most 255 at launch and 240 after).
constexpr int32_t consumerRegistersAfter(int32_t producerRegisters,
                                         int64_t consumerWarpgroups,
                                         int64_t blocksPerSm) {
  int64_t threads = 128 * (consumerWarpgroups + 1);
  int64_t perBlock = 65536 / (blocksPerSm < 1 ? 1 : blocksPerSm);
  int64_t atLaunch = perBlock / threads / 8 * 8;
  atLaunch = atLaunch < 255 ? atLaunch : 255;
  int64_t freed = (atLaunch - producerRegisters) * 128;
  int64_t each = (atLaunch + freed / (128 * consumerWarpgroups)) / 8 * 8;
  return int32_t(each < 240 ? each : 240);
}
static_assert(consumerRegistersAfter(kProducerRegisters, 2, 1) ==
              kConsumerRegisters);
static_assert(consumerRegistersAfter(kCopyingProducerRegisters, 2, 1) ==
              kCopyingConsumerRegisters);

class WGMMAPipeline {
public:
  /// Loads of k-step `kt` into `stage` (called in the producer's thread 0,
  /// after the full barrier expects `stageBytes`).
  using IssueLoads = std::function<void(Value stage, Value kt)>;
  /// The wgmma groups of one landed stage, issued without waiting; returns
  /// the new accumulator.
  using Multiply = std::function<Value(Value stage, Value acc)>;
  /// The same for several accumulators of one tile (each its own rows):
  /// returns the new ones, in order.
  using MultiplyEach =
      std::function<SmallVector<Value>(Value stage, ValueRange acc)>;

  /// `stageBytes`: the TMA bytes of one stage (a pair's: what lands in
  /// each block); `copies`: whether the producer also copies with cp.async
  /// (produceWithCopies; the copies stay in the block); `peers`: 1, or 2
  /// for a cluster pair that shares the stages' multicast TMA tiles.
  WGMMAPipeline(WGMMAEmitter &em, int64_t consumers, int64_t stageBytes,
                bool copies = false, int64_t peers = 1)
      : em(em), consumers(consumers), stageBytes(stageBytes), copies(copies),
        peers(peers) {}

  /// Threads of the block: the producer and the consumers.
  int64_t threads() const { return 128 * (1 + consumers); }

  /// Creates and initialises the barriers (thread 0), then a block barrier
  /// (a pair's: a fence and a cluster barrier).
  void init(Value tid);

  /// A pair's last step, in every thread: a cluster barrier, so that no
  /// block exits while its peer's loads or arrives may still reach it.
  /// Nothing for one block.
  void finish();

  /// The roles' register files (`setmaxnreg`), once before each role.
  void enterProducer();
  void enterConsumer();

  /// What a producer's thread 0 writes for the consumers before the first
  /// arrive of a tile (its expert and rows): they read it once they waited
  /// for that step's stage (waitFull), the arrive's release ordering it.
  using Publish = std::function<void()>;

  /// The producer's role for one tile: thread 0 streams its `steps`
  /// k-steps, the pipeline's steps [first, first + steps) (a persistent
  /// kernel's tiles continue the stages and their phases).
  void produce(Value tid, Value first, Value steps, const IssueLoads &issue,
               const Publish &publish = {});

  /// The copying producer's role for one tile: every thread of warpgroup 0
  /// runs its `steps` k-steps (pipeline steps from `first`); thread 0
  /// issues `loads` (TMA) after the full barrier expects stageBytes, every
  /// thread `copy` (its cp.async copies of the step), whose landing is
  /// the thread's arrive on the step's full barrier.
  void produceWithCopies(Value tid, Value first, Value steps,
                         const IssueLoads &loads, const IssueLoads &copy,
                         const Publish &publish = {});

  /// A step with nothing to load (the counter scheduler's end):
  /// the producer's threads wait for the stage as for a load, thread 0
  /// runs `publish`, and the full barrier completes on arrivals alone.
  void produceEmpty(Value tid, Value step, const Publish &publish);
  /// A consumer's side of an empty step: it waits for the stage and
  /// releases it at once.
  void skip(Value step, Value lane = Value());
  /// A consumer's side of a tile it does not multiply: each of its `steps`
  /// pipeline steps from `first` waited for and released at once.
  void skipSteps(Value first, Value steps, Value lane = Value());

  /// A consumer's proxy fence between a copying producer's landed bytes
  /// (seen through the full barrier) and its wgmma reads of them.
  void fenceCopiesForWGMMA();

  /// Waits until pipeline step `step`'s stage is full.
  void waitFull(Value step);

  /// A consumer's role for one tile (`lane`, the thread's lane, which a
  /// pair's releases need): `steps`
  /// k-steps (pipeline steps from `first`) into a zeroed 64 x `columns`
  /// f32 accumulator; returns it with every product complete and every
  /// stage released.
  Value consume(Value first, Value steps, int64_t columns,
                int64_t groupsPerStage, const Multiply &multiply,
                Value lane = Value());
  /// The same with `count` zeroed 64 x `columns` accumulators, which
  /// `multiply` advances together on each landed stage (a tall tile's
  /// 64-row chunks of one consumer; `groupsPerStage` counts all of their
  /// wgmma groups of a stage).
  SmallVector<Value> consumeEach(Value first, Value steps, int64_t columns,
                                 int64_t count, int64_t groupsPerStage,
                                 const MultiplyEach &multiply,
                                 Value lane = Value());

  /// A persistent kernel's tiles: body(i, tile) for this block's tiles
  /// bid + i grid < total (a grid of one block per SM, each tile's k-steps
  /// the pipeline steps from i steps).
  void forEachTile(Value total, const std::function<void(Value, Value)> &body);

  /// The counter scheduler's tiles (TileCounter.h), for the producer's
  /// threads: body(i, tile) for each tile that `claim(i)` (the block's i-th
  /// claim, the same tile in every producer thread) returns below `total`,
  /// then `end(i)` with i the first claim past the end.
  void forEachClaimedTile(Value total, const std::function<Value(Value)> &claim,
                          const std::function<void(Value, Value)> &body,
                          const std::function<void(Value)> &end);

  /// A consumer's side of forEachClaimedTile: for i = 0, 1, ..., once the
  /// stage of tile i's first step (pipeline step i steps) is full,
  /// `published(i)` reads the tile that the producer published for it;
  /// body(i, tile) while it is below `total`. (The producer publishes one
  /// past the end with produceEmpty.)
  void forEachPublishedTile(Value total, Value steps,
                            const std::function<Value(Value)> &published,
                            const std::function<void(Value, Value)> &body);

  /// The full barriers (TMA loads complete on them).
  Value fullBarriers() const { return full; }

  /// The TMA bytes of each stage of the tiles produced from here on,
  /// instead of the constructor's (a tall tile loads only the boxes of rows
  /// that its segment reaches).
  void setTileBytes(Value bytes) { tileBytes = bytes; }

private:
  /// Waits for the phase of `kt`'s round minus `lag` rounds on `bars`.
  void waitRound(Value bars, Value kt, Value stage, int64_t lag);
  /// From the second round on, waits until the consumers released the
  /// stage of step `kt`'s last round.
  void waitEmpty(Value kt, Value stage);
  /// Thread 0's arrive with the stage's TMA bytes, then `loads`.
  void expectAndLoad(Value stage, Value kt, const IssueLoads &loads);
  /// A consumer thread's release of pipeline step g's stage.
  void release(Value g, Value lane);

  WGMMAEmitter &em;
  int64_t consumers, stageBytes;
  bool copies;
  int64_t peers;
  Value full, empty;
  Value tileBytes;
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_WGMMAPIPELINE_H

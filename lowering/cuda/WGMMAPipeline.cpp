//===- WGMMAPipeline.cpp - producer and consumer warpgroups -----*- C++ -*-===//
#include "lowering/cuda/WGMMAPipeline.h"
#include "lowering/cuda/MMA.h"

#include "dialects/K3GPU/K3GPUDialect.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

void WGMMAPipeline::init(Value tid) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Value first = kb.eqi(tid, em.idx(0));
  full = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
  empty = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
  // full: thread 0's arrive (the TMA bytes complete the phase) and, with
  // copies, every producer thread's once its copies landed; empty: every
  // consumer thread's arrive (a pair's: every consumer warp's of both
  // blocks).
  int64_t fullArrivals = copies ? 1 + 128 : 1;
  int64_t emptyArrivals = peers == 1 ? 128 * consumers : peers * 4 * consumers;
  for (int64_t s = 0; s < em.stages; ++s) {
    nvgpu::MBarrierInitOp::create(b, loc, full, em.idx(fullArrivals), em.idx(s),
                                  first);
    nvgpu::MBarrierInitOp::create(b, loc, empty, em.idx(emptyArrivals),
                                  em.idx(s), first);
  }
  if (peers == 1)
    return (void)gpu::BarrierOp::create(b, loc);
  NVVM::FenceMbarrierInitOp::create(b, loc);
  // Not `.aligned`: the producer's threads reach the cluster barriers from
  // a branch that its thread 0 alone took.
  em.clusterSync();
}

void WGMMAPipeline::finish() {
  if (peers > 1)
    em.clusterSync();
}

void WGMMAPipeline::release(Value g, Value lane) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Value stage = em.remuIdx(g, em.stages);
  if (peers == 1)
    return (void)nvgpu::MBarrierArriveOp::create(b, loc, empty, stage);
  // Lane r of each consumer warp arrives on block r's barrier.
  kb.ifThen(kb.lti(lane, em.idx(peers)), [&] {
    Value rank = arith::IndexCastOp::create(b, loc, b.getI32Type(), lane);
    k3gpu::MBarrierArriveClusterOp::create(b, loc, empty, stage, rank);
  });
}

void WGMMAPipeline::waitRound(Value bars, Value kt, Value stage, int64_t lag) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  Value round = em.divuIdx(kt, em.stages);
  if (lag)
    round = arith::SubIOp::create(b, loc, round, em.idx(lag));
  Value parity = arith::TruncIOp::create(
      b, loc, b.getI1Type(),
      arith::IndexCastOp::create(b, loc, b.getI32Type(), em.remuIdx(round, 2)));
  nvgpu::MBarrierTryWaitParityOp::create(b, loc, bars, parity, em.idx(10000000),
                                         stage);
}

void WGMMAPipeline::waitEmpty(Value kt, Value stage) {
  KernelBuilder &kb = em.kb;
  kb.ifThen(kb.gei(kt, em.idx(em.stages)),
            [&] { waitRound(empty, kt, stage, 1); });
}

void WGMMAPipeline::expectAndLoad(Value stage, Value kt,
                                  const IssueLoads &loads) {
  nvgpu::MBarrierArriveExpectTxOp::create(
      em.b, em.loc, full, tileBytes ? tileBytes : em.idx(stageBytes), stage,
      Value());
  loads(stage, kt);
}

void WGMMAPipeline::enterProducer() {
  NVVM::SetMaxRegisterOp::create(
      em.b, em.loc, copies ? kCopyingProducerRegisters : kProducerRegisters,
      NVVM::SetMaxRegisterAction::decrease);
}

void WGMMAPipeline::enterConsumer() {
  NVVM::SetMaxRegisterOp::create(
      em.b, em.loc, copies ? kCopyingConsumerRegisters : kConsumerRegisters,
      NVVM::SetMaxRegisterAction::increase);
}

void WGMMAPipeline::produce(Value tid, Value first, Value steps,
                            const IssueLoads &issue, const Publish &publish) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  kb.ifThen(kb.eqi(tid, em.idx(0)), [&] {
    auto loop = scf::ForOp::create(b, loc, em.idx(0), steps, em.idx(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar(), g = kb.addi(first, kt);
    Value stage = em.remuIdx(g, em.stages);
    waitEmpty(g, stage);
    if (publish)
      kb.ifThen(kb.eqi(kt, em.idx(0)), publish);
    expectAndLoad(stage, kt, issue);
  });
}

void WGMMAPipeline::produceWithCopies(Value tid, Value first, Value steps,
                                      const IssueLoads &loads,
                                      const IssueLoads &copy,
                                      const Publish &publish) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Value thread0 = kb.eqi(tid, em.idx(0));
  auto loop = scf::ForOp::create(b, loc, em.idx(0), steps, em.idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value kt = loop.getInductionVar(), g = kb.addi(first, kt);
  Value stage = em.remuIdx(g, em.stages);
  waitEmpty(g, stage);
  kb.ifThen(thread0, [&] {
    if (publish)
      kb.ifThen(kb.eqi(kt, em.idx(0)), publish);
    expectAndLoad(stage, kt, loads);
  });
  copy(stage, kt);
  // The thread's arrive on full[stage] fires once these copies land; the
  // thread goes on to the next stage meanwhile.
  k3gpu::MBarrierArriveCopiesOp::create(b, loc, full, stage);
}

void WGMMAPipeline::produceEmpty(Value tid, Value step,
                                 const Publish &publish) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Value stage = em.remuIdx(step, em.stages);
  auto arrive = [&] { nvgpu::MBarrierArriveOp::create(b, loc, full, stage); };
  // A TMA producer's loop runs in thread 0 alone; a copying producer's in
  // all 128 threads, each of which also arrives for its (no) copies.
  Value thread0 = kb.eqi(tid, em.idx(0));
  if (!copies)
    return kb.ifThen(thread0, [&] {
      waitEmpty(step, stage);
      publish();
      arrive();
    });
  waitEmpty(step, stage);
  kb.ifThen(thread0, [&] {
    publish();
    arrive();
  });
  arrive();
}

void WGMMAPipeline::fenceCopiesForWGMMA() {
  // The producer's cp.async bytes are generic-proxy writes, which this
  // thread saw land through the full barrier; wgmma reads through the
  // async proxy.
  NVVM::FenceProxyOp::create(
      em.b, em.loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(em.b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

void WGMMAPipeline::skipSteps(Value first, Value steps, Value lane) {
  OpBuilder &b = em.b;
  auto loop = scf::ForOp::create(b, em.loc, em.idx(0), steps, em.idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  skip(em.kb.addi(first, loop.getInductionVar()), lane);
}

void WGMMAPipeline::skip(Value step, Value lane) {
  waitFull(step);
  release(step, lane);
}

void WGMMAPipeline::waitFull(Value step) {
  waitRound(full, step, em.remuIdx(step, em.stages), 0);
}

Value WGMMAPipeline::consume(Value first, Value steps, int64_t columns,
                             int64_t groupsPerStage, const Multiply &multiply,
                             Value lane) {
  return consumeEach(
      first, steps, columns, 1, groupsPerStage,
      [&](Value stage, ValueRange acc) {
        return SmallVector<Value>{multiply(stage, acc[0])};
      },
      lane)[0];
}

SmallVector<Value> WGMMAPipeline::consumeEach(Value first, Value steps,
                                              int64_t columns, int64_t count,
                                              int64_t groupsPerStage,
                                              const MultiplyEach &multiply,
                                              Value lane) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  assert((peers == 1 || lane) && "a pair's consumers release by lane");
  SmallVector<Value> init;
  for (int64_t i = 0; i < count; ++i)
    init.push_back(nvgpu::WarpgroupMmaInitAccumulatorOp::create(
        b, loc, em.accumulatorType(columns)));
  auto loop = scf::ForOp::create(b, loc, em.idx(0), steps, em.idx(1), init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar(), g = kb.addi(first, kt);
    Value stage = em.remuIdx(g, em.stages);
    waitRound(full, g, stage, 0);
    if (copies)
      fenceCopiesForWGMMA();
    SmallVector<Value> acc = multiply(stage, loop.getRegionIterArgs());
    // Only this stage's groups may still run: the previous stage's
    // products are done and its buffers go back to the producer.
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, groupsPerStage);
    kb.ifThen(kb.gei(kt, em.idx(1)),
              [&] { release(kb.subi(g, em.idx(1)), lane); });
    scf::YieldOp::create(b, loc, acc);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  kb.ifThen(kb.gei(steps, em.idx(1)),
            [&] { release(kb.subi(kb.addi(first, steps), em.idx(1)), lane); });
  return SmallVector<Value>(loop.getResults());
}

void WGMMAPipeline::forEachTile(Value total,
                                const std::function<void(Value, Value)> &body) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value grid = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  auto loop = scf::ForOp::create(b, loc, bid, total, grid);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value tile = loop.getInductionVar();
  body(arith::DivUIOp::create(b, loc, kb.subi(tile, bid), grid), tile);
}

namespace {
/// A while loop over i = 0, 1, ... whose `before` region finds tile i (or
/// one at or past `total`, which ends it): body(i, tile).
void whileTiles(WGMMAEmitter &em, Value total,
                const std::function<Value(Value)> &tileOf,
                const std::function<void(Value, Value)> &body,
                const std::function<void(Value)> &end) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  Type index = b.getIndexType();
  auto loop = scf::WhileOp::create(b, loc, TypeRange{index, index},
                                   ValueRange{em.idx(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    Block *before = b.createBlock(&loop.getBefore(), {}, {index}, {loc});
    Value i = before->getArgument(0);
    Value tile = tileOf(i);
    scf::ConditionOp::create(b, loc, kb.lti(tile, total), ValueRange{i, tile});
    Block *after =
        b.createBlock(&loop.getAfter(), {}, {index, index}, {loc, loc});
    body(after->getArgument(0), after->getArgument(1));
    scf::YieldOp::create(b, loc, kb.addi(after->getArgument(0), em.idx(1)));
  }
  if (end)
    end(loop.getResult(0));
}
} // namespace

void WGMMAPipeline::forEachClaimedTile(
    Value total, const std::function<Value(Value)> &claim,
    const std::function<void(Value, Value)> &body,
    const std::function<void(Value)> &end) {
  whileTiles(em, total, claim, body, end);
}

void WGMMAPipeline::forEachPublishedTile(
    Value total, Value steps, const std::function<Value(Value)> &published,
    const std::function<void(Value, Value)> &body) {
  whileTiles(em, total,
             [&](Value i) {
               waitFull(em.kb.muli(i, steps));
               return published(i);
             },
             body, {});
}

//===- MoEGroupedWGMMA.cpp - grouped MoE GEMMs, wgmma -----------*- C++ -*-===//
//
// k3.moe_grouped_glu, k3.moe_grouped_down and k3.glu_gate_up on Hopper
// (MoEGroupedKernel.h): the one-warpgroup schedule (a block per 128 x 128
// tile, several blocks an SM; its rows as wgmma's M in 64-row halves or as
// its N in steps of the tile's fourth size) and the patterns with their
// epilogues (the GLU into h, the routing weight into the down GEMM's rows).
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/MoEGroupedKernel.h"

using namespace mlir;
using namespace mlir::k3;

namespace mlir::k3::grouped_wgmma {

LogicalResult GroupedKernel::emitDense(const KernelBuilder::Linear &tokens,
                                       const Epilogue &epi) {
  int64_t nb = g.columnTiles;
  e.setLaunch(tokens, nb, (kTile - 1) * nb, kTile, {threads(), 1, 1},
              linearWGMMASharedBytes(em.stages, tileN));
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  denseRowTiles = rowTilesOf(em, kb.dim(g.rows.shape[0]), kTile);
  setTile(bid);
  Value rows = kb.dim(g.rows.shape[0]);
  rowStart = kb.muli(mTile, kb.idx(kTile));
  kb.ifThen(kb.lti(rowStart, rows), [&] {
    validRows = kb.minsi(kb.subi(rows, rowStart), kb.idx(kTile));
    body(epi);
  });
  return success();
}

void GroupedKernel::body(const Epilogue &epi) {
  tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  setUpOperands();
  Value first = kb.eqi(tid, kb.idx(0));
  if (!mxfp4)
    initStageBarriers(first);
  SmallVector<RowCopy> copies = rowCopies();
  int64_t steps = g.reduction / kTileK;
  // One cp.async group per stage even past the last step, so that the
  // main loop's wait count holds for any number of steps.
  Value group;
  for (int64_t s = 0; s < em.stages; ++s) {
    if (s < steps)
      issue(kb.idx(s), kb.idx(s), copies, first);
    group = mma.commitGroup();
  }
  Value weight = rowWeight(tid);
  auto finishAsN = [&](ArrayRef<Value> acc, int64_t rowsAsN) {
    if (weight)
      mma.sts(weight, rowWeights, {tid});
    gpu::BarrierOp::create(b, loc);
    Value tile =
        rowsAsN ? em.storeAccumulatorsTransposed(smem, base, acc, rowsAsN, tid)
                : em.storeAccumulators(smem, base, acc);
    gpu::BarrierOp::create(b, loc);
    epilogueFromTile(tile, epi);
  };
  auto finish = [&](ArrayRef<Value> acc) { finishAsN(acc, 0); };
  if (mxfp4)
    return finish(mainLoopMXFP4(first, steps, copies, group));
  if (g.dense)
    return finish(mainLoop(first, steps, copies, group, 2));
  if (rowStep)
    return productsByRowStep(first, steps, copies, group, finishAsN);
  // An expert's last tile often holds a few rows (at T = 8192 top-8 of
  // 256 experts a segment averages 256 rows: about half the experts end
  // in a tile of 1-32). A tile of at most 64 rows multiplies its first
  // half alone: a uniform branch around two copies of the main loop, so
  // that no wgmma accumulator crosses control flow inside a loop.
  Value small = kb.notb(kb.lti(kb.idx(64), validRows));
  auto branch = scf::IfOp::create(b, loc, TypeRange{}, small,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    finish(mainLoop(first, steps, copies, group, 1));
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    finish(mainLoop(first, steps, copies, group, 2));
  }
}

void GroupedKernel::productsByRowStep(
    Value first, int64_t steps, ArrayRef<RowCopy> copies, Value group,
    const std::function<void(ArrayRef<Value>, int64_t)> &finish) {
  // Branch v multiplies the tile's first rowStep (v + 1) rows; the last
  // branch (all 128) is the default.
  int64_t branches = kTile / rowStep;
  Value rounded = em.divuIdx(kb.addi(validRows, kb.idx(rowStep - 1)), rowStep);
  SmallVector<int64_t> cases;
  for (int64_t v = 0; v + 1 < branches; ++v)
    cases.push_back(v);
  auto sw = scf::IndexSwitchOp::create(
      b, loc, TypeRange{}, kb.subi(rounded, kb.idx(1)), cases, cases.size());
  auto emitBranch = [&](Region &region, int64_t rows) {
    OpBuilder::InsertionGuard guard(b);
    b.createBlock(&region);
    if (rows % 64 == 0)
      finish(mainLoop(first, steps, copies, group, rows / 64), 0);
    else
      finish(mainLoop(first, steps, copies, group, 2, rows), rows);
    scf::YieldOp::create(b, loc);
  };
  for (int64_t v = 0; v + 1 < branches; ++v)
    emitBranch(sw.getCaseRegions()[v], rowStep * (v + 1));
  emitBranch(sw.getDefaultRegion(), kTile);
}

void GroupedKernel::initStageBarriers(Value first) {
  bars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
  for (int64_t s = 0; s < em.stages; ++s)
    nvgpu::MBarrierInitOp::create(b, loc, bars, kb.idx(1), kb.idx(s), first);
  for (Value tm : weightMaps)
    nvgpu::TmaPrefetchOp::create(b, loc, tm, first);
  if (rowsByTMA)
    nvgpu::TmaPrefetchOp::create(b, loc, rowsMap, first);
  // A pair's peer signals these barriers: their initialisation visible to
  // the cluster before either block issues a load.
  if (paired())
    NVVM::FenceMbarrierInitOp::create(b, loc);
  blockSync();
}

void GroupedKernel::epilogueFromTile(Value tile, const Epilogue &epi) {
  int64_t width = g.glu ? 2 : 4, columns = g.glu ? tileN / 2 : tileN;
  auto type = VectorType::get({width}, b.getF32Type());
  forTileRows(
      kb, tid, kThreads, columns / width, validRows, [&](Value r, Value group) {
        Value col = kb.muli(group, kb.idx(width));
        Value v = mma.alignedLoad(type, tile, ValueRange{r, col});
        Value up =
            g.glu
                ? mma.alignedLoad(type, tile,
                                  ValueRange{r, kb.addi(col, kb.idx(columns))})
                : Value();
        Value wt = g.rowWeights ? mma.lds(rowWeights, {r}) : Value();
        epi.store(r, col, epi.values({r, col, v, up, wt}));
      });
}

scf::ForOp GroupedKernel::stepLoop(int64_t steps, int64_t halves, int64_t n) {
  Value init = nvgpu::WarpgroupMmaInitAccumulatorOp::create(
      b, loc, em.accumulatorType(n));
  SmallVector<Value> inits(halves, init);
  return scf::ForOp::create(b, loc, kb.idx(0), kb.idx(steps), kb.idx(1), inits);
}

void GroupedKernel::refillAndYield(Value stage, Value kt, int64_t steps,
                                   ArrayRef<RowCopy> copies, Value first,
                                   ValueRange acc) {
  blockSync();
  Value next = kb.addi(kt, kb.idx(em.stages));
  kb.ifThen(kb.lti(next, kb.idx(steps)),
            [&] { issue(stage, next, copies, first); });
  mma.commitGroup();
  scf::YieldOp::create(b, loc, acc);
}

SmallVector<Value> GroupedKernel::mainLoop(Value first, int64_t steps,
                                           ArrayRef<RowCopy> copies,
                                           Value group, int64_t halves,
                                           int64_t rowsAsN) {
  if (paired())
    return mainLoopPaired(first, steps, copies, halves);
  scf::ForOp loop = stepLoop(steps, halves, rowsAsN ? rowsAsN : kTile);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value kt = loop.getInductionVar();
  Value stage = em.remuIdx(kt, em.stages);
  // Step kt's rows landed (the later stages' groups may be pending) and
  // are visible to the async proxy that wgmma reads through (rows by TMA
  // complete on the stage's mbarrier).
  if (!rowsByTMA) {
    mma.waitGroups(group, int32_t(em.stages - 1));
    fenceForWGMMA();
    gpu::BarrierOp::create(b, loc);
  }
  em.waitStage(bars, kt, stage);
  Value rowsTile = em.tile(smem, stageOffset(stage, 0));
  Value weightsTile = em.tile(smem, stageOffset(stage, 1));
  SmallVector<Value> acc =
      rowsAsN
          ? em.multiplyStage(weightsTile, rowsTile, swizzle, swizzle,
                             loop.getRegionIterArgs(), /*drain=*/true, rowsAsN)
          : em.multiplyStage(rowsTile, weightsTile, swizzle, swizzle,
                             loop.getRegionIterArgs());
  refillAndYield(stage, kt, steps, copies, first, acc);
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> GroupedKernel::mainLoopPaired(Value first, int64_t steps,
                                                 ArrayRef<RowCopy> copies,
                                                 int64_t halves) {
  scf::ForOp loop = stepLoop(steps, halves);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    em.waitStage(bars, kt, em.remuIdx(kt, em.stages));
    SmallVector<Value> acc = em.multiplyStage(
        em.tile(smem, stageOffset(em.remuIdx(kt, em.stages), 0)),
        em.tile(smem, stageOffset(em.remuIdx(kt, em.stages), 1)), swizzle,
        swizzle, loop.getRegionIterArgs(), /*drain=*/false);
    // At most step kt's 4 x halves groups pending: step kt - 1's are done
    // (each mma's own wait of 8 may have drained them already at two
    // halves; this wait is the one the release relies on). Its stage is
    // free here, and once the peer's is too (the cluster barrier, which
    // step kt's products overlap) it takes step kt - 1 + stages. The
    // condition is the same in both blocks (same steps), so their
    // barriers pair up; the last stages - 1 steps free nothing.
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, int32_t(4 * halves));
    Value done = kb.subi(kt, kb.idx(1));
    Value next = kb.addi(done, kb.idx(em.stages));
    kb.ifThen(kb.andi(kb.gei(kt, kb.idx(1)), kb.lti(next, kb.idx(steps))), [&] {
      blockSync();
      issue(em.remuIdx(done, em.stages), next, copies, first);
    });
    scf::YieldOp::create(b, loc, acc);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  return SmallVector<Value>(loop.getResults());
}

void GroupedKernel::fenceForWGMMA() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

void GroupedKernel::decodeLanded(Value kt, Value group, int32_t pending) {
  mma.waitGroups(group, pending);
  Value stage = em.remuIdx(kt, em.stages);
  mxfp4Rows.decode(stagingOf(stage), tid, weightRow, kt,
                   em.tile(smem, stageOffset(stage, 1)));
  fenceForWGMMA();
}

SmallVector<Value> GroupedKernel::mainLoopMXFP4(Value first, int64_t steps,
                                                ArrayRef<RowCopy> copies,
                                                Value group) {
  int32_t pending = int32_t(em.stages - 1);
  decodeLanded(kb.idx(0), group, pending);
  gpu::BarrierOp::create(b, loc);
  scf::ForOp loop = stepLoop(steps);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value kt = loop.getInductionVar();
  Value stage = em.remuIdx(kt, em.stages);
  SmallVector<Value> acc =
      em.multiplyStage(em.tile(smem, stageOffset(stage, 0)),
                       em.tile(smem, stageOffset(stage, 1)), swizzle, swizzle,
                       loop.getRegionIterArgs(), /*drain=*/false);
  // Groups committed: stages + kt; step kt + 1's is done when at most
  // stages - 2 are pending.
  Value after = kb.addi(kt, kb.idx(1));
  kb.ifThen(kb.lti(after, kb.idx(steps)),
            [&] { decodeLanded(after, group, pending - 1); });
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  // The barrier also publishes step kt + 1's decoded tile.
  refillAndYield(stage, kt, steps, copies, first, acc);
  return SmallVector<Value>(loop.getResults());
}

} // namespace mlir::k3::grouped_wgmma

namespace {
using namespace mlir::k3::grouped_wgmma;

/// The GLU epilogue (gate in the tile's first half of columns, up in the
/// second): act(gate, up) of the tile's channels as bf16 rows of h [rows,
/// inter]. Each thread writes 2 channels per row.
LogicalResult emitGLUKernel(const GroupedGEMM &g, KernelEmission &e,
                            Operation *op, GLUActivation act, FloatAttr beta,
                            FloatAttr linearBeta, int64_t inter) {
  GroupedKernel k(g, e, op);
  KernelBuilder &kb = e.kb;
  OpBuilder &b = kb.builder();
  Location loc = op->getLoc();
  KernelOperand h = e.outputs[0];
  int64_t channels = k.tileN / 2;
  MMAEmitter mma{b, loc, kb};
  Value hRows = mma.contiguousView(
      h.base,
      {kb.numElements(ArrayRef<int64_t>(h.shape).drop_back()), kb.idx(inter)});
  Epilogue epi;
  epi.values = [&](const EpilogueValues &x) -> Value {
    int64_t width = cast<VectorType>(x.v.getType()).getNumElements();
    SmallVector<Value> out;
    for (int64_t i = 0; i < width; ++i)
      out.push_back(mma.bf16(emitGLUActivation(
          kb, act, optionalDouble(beta), optionalDouble(linearBeta),
          mma.extract(x.v, {i}), mma.extract(x.up, {i}),
          [&](Value v) { return mma.sigmoidApprox(v); })));
    return vector::FromElementsOp::create(
        b, loc, VectorType::get({width}, b.getBF16Type()), out);
  };
  // Even columns of the tile and of h.
  epi.store = [&](Value r, Value col, Value v) {
    Value channel = kb.addi(kb.muli(k.nTileIndex(), kb.idx(channels)), col);
    mma.alignedStore(v, hRows, ValueRange{kb.addi(k.rowStart, r), channel});
  };
  LogicalResult r = k.emit(epi);
  if (failed(r))
    return failure();
  e.finishSinglePhase(loc);
  return success();
}

/// Output columns of the config's tile (128, or 256 for the
/// warp-specialised schedule).
int64_t tileColumns(const KernelEmission &e) { return e.config.getTile()[1]; }

struct GroupedGLUPattern : OpKernelPattern<MoEGroupedGLUOp> {
  GroupedGLUPattern() : OpKernelPattern(KernelKind::moe_grouped_wgmma) {}
  LogicalResult emit(MoEGroupedGLUOp op, Adaptor a,
                     KernelEmission &e) const override {
    GroupedGEMM g{true,
                  false,
                  a.getInput(),
                  RoutingTables::of(a),
                  {5, 6},
                  a.getInput().shape[1],
                  a.getW1().shape[1] / (tileColumns(e) / 2),
                  tileColumns(e) / 2,
                  KernelOperand(),
                  {a.getW1(), a.getW3()}};
    return emitGLUKernel(g, e, op, op.getActivation(), op.getBetaAttr(),
                         op.getLinearBetaAttr(), a.getW1().shape[1]);
  }
};

/// k3.glu_gate_up: the same kernel over all rows with 2-D weights.
struct DenseGLUPattern : OpKernelPattern<GLUGateUpOp> {
  DenseGLUPattern() : OpKernelPattern(KernelKind::glu_wgmma) {}
  LogicalResult emit(GLUGateUpOp op, Adaptor a,
                     KernelEmission &e) const override {
    int64_t inter = a.getWGate().shape[0];
    GroupedGEMM g{true,
                  true,
                  a.getInput(),
                  RoutingTables(),
                  {1, 2},
                  a.getInput().shape[1],
                  inter / (tileColumns(e) / 2),
                  tileColumns(e) / 2,
                  KernelOperand(),
                  {a.getWGate(), a.getWUp()}};
    return emitGLUKernel(g, e, op, op.getActivation(), op.getBetaAttr(),
                         op.getLinearBetaAttr(), inter);
  }
};

struct GroupedDownPattern : OpKernelPattern<MoEGroupedDownOp> {
  GroupedDownPattern() : OpKernelPattern(KernelKind::moe_grouped_wgmma) {}
  LogicalResult emit(MoEGroupedDownOp op, Adaptor a,
                     KernelEmission &e) const override {
    int64_t width = a.getW2().shape[1];
    GroupedGEMM g{false,
                  false,
                  a.getInput(),
                  RoutingTables::of(a),
                  {6},
                  a.getInput().shape[2],
                  width / tileColumns(e),
                  tileColumns(e),
                  a.getWeights(),
                  {a.getW2()}};
    GroupedKernel k(g, e, op);
    KernelBuilder &kb = e.kb;
    OpBuilder &b = kb.builder();
    Location loc = op.getLoc();
    KernelOperand y = e.outputs[0];
    MMAEmitter mma{b, loc, kb};
    Value pairs = kb.numElements(ArrayRef<int64_t>(y.shape).take_front(2));
    Value yRows = mma.contiguousView(y.base, {pairs, kb.idx(width)});
    // The rows' type: f32, or bf16 under the bf16 policy (rounded once
    // here, summed in f32 by the combine).
    Type rowType = cast<MemRefType>(yRows.getType()).getElementType();
    Epilogue epi;
    epi.values = [&](const EpilogueValues &x) -> Value {
      auto type = cast<VectorType>(x.v.getType());
      Value scaled = arith::MulFOp::create(
          b, loc, x.v, vector::BroadcastOp::create(b, loc, type, x.rowWeight));
      if (rowType.isF32())
        return scaled;
      return arith::TruncFOp::create(
          b, loc, VectorType::get(type.getShape(), rowType), scaled);
    };
    epi.store = [&](Value r, Value col, Value v) {
      Value column = kb.addi(kb.muli(k.nTileIndex(), kb.idx(k.tileN)), col);
      mma.alignedStore(v, yRows, ValueRange{kb.addi(k.rowStart, r), column});
    };
    LogicalResult r = k.emit(epi);
    if (failed(r))
      return failure();
    e.finishSinglePhase(loc);
    return success();
  }
};

} // namespace

void mlir::k3::populateMoEGroupedWGMMAPatterns(KernelPatternSet &patterns) {
  patterns.add<GroupedGLUPattern, GroupedDownPattern, DenseGLUPattern>();
}

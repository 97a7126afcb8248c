//===- MoEGroupedKernel.cpp - shared operands and loads ---------*- C++ -*-===//
//
// The grouped MoE wgmma kernel's parts that both schedules share
// (MoEGroupedKernel.h): its launch choice, tensor maps, the rows' copies,
// the TMA loads of a stage, the routing weights and one stage's products.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/MoEGroupedKernel.h"

using namespace mlir;
using namespace mlir::k3;

namespace mlir::k3::grouped_wgmma {

LogicalResult GroupedKernel::emit(const Epilogue &epi) {
  auto tokens = kb.linearForm(kb.dim(g.rows.shape[0]));
  if (!tokens)
    return op->emitOpError() << "the grouped wgmma kernel needs a token "
                                "count linear in one runtime size";
  if (mxfp4 && (specialised || g.dense))
    return op->emitOpError() << "MXFP4 weights run the grouped wgmma "
                                "kernel's one-warpgroup schedule only";
  // A pair's config (cluster 2: the down GEMM, rows by TMA, an even count
  // of column tiles) was checked by verifyKernelConfig, in
  // k3-select-kernel-config and again in k3-outline-kernels.
  if (!mxfp4)
    addTensorMapParameters();
  if (specialised)
    return emitPersistent(epi);
  int64_t nb = g.columnTiles;
  if (g.dense)
    return emitDense(*tokens, epi);
  // Row tiles: ceil(T K / 128) + E at most (each expert's last tile may be
  // partial), times the column tiles (paired: their pairs, times 2 in y).
  int64_t perRowTile = nb / clusterBlocks;
  e.setLaunch(*tokens, topK * perRowTile,
              (kTile - 1 + kTile * experts) * perRowTile, kTile,
              {threads(), 1, 1},
              groupedWGMMASharedBytes(em.stages, tileN, mxfp4));
  if (paired()) {
    e.setClusterY(clusterBlocks);
    rank = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  }
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  setTile(bid);
  Value t = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  BlockSegmentTile s = locateSegmentTileInBlock(
      kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts, mTile,
      kTile, t, threads(), mma.workgroupArray(e.fn, b.getI32Type(), 4));
  kb.ifThen(s.live, [&] {
    expert = s.expert;
    rowStart = s.rowStart;
    validRows = s.validRows;
    body(epi);
  });
  return success();
}

void GroupedKernel::addTensorMapParameters() {
  auto fn = e.fn;
  auto ptr = LLVM::LLVMPointerType::get(b.getContext());
  SmallVector<Attribute> attrs;
  auto addMap = [&](int64_t operand, ArrayRef<int64_t> box) {
    unsigned n = fn.getNumArguments();
    (void)fn.insertArgument(n, ptr, DictionaryAttr(), loc);
    SmallVector<int64_t> inner(llvm::reverse(box)); // innermost first
    attrs.push_back(TensorMapAttr::get(b.getContext(), operand, inner,
                                       TensorMapSwizzle::swizzle_128b));
    return fn.getFunctionBody().front().getArgument(n);
  };
  for (int64_t operand : g.maps)
    mapArgs.push_back(addMap(operand, weightBox()));
  // The rows: operand 0 (h), its leading [T, K] read as one dimension.
  if (rowsByTMA)
    rowsMapArg = addMap(0, rowBox());
  // The result (the operand after the inputs): 64 rows of [T K] (or T) by
  // 64 columns.
  if (sharedColumns)
    resultMapArg = addMap(op->getNumOperands(), {64, 64});
  K3Dialect::TensorMapsAttrHelper(b.getContext())
      .setAttr(fn, b.getArrayAttr(attrs));
}

GroupedKernel::RowCopy GroupedKernel::rowCopy(Value q) {
  Value chunk = em.remuIdx(tid, 8), row0 = em.divuIdx(tid, 8);
  Value r = kb.addi(row0, kb.muli(q, kb.idx(kThreads / 8)));
  Value valid = kb.lti(r, validRows);
  Value sorted = kb.select(valid, kb.addi(rowStart, r), rowStart);
  Value source = sorted;
  if (g.glu && !g.dense)
    source = em.divuIdx(kb.loadIndex(sourcePairs, {sorted}), topK);
  return {r, em.swizzledColumn(r, chunk), source, valid};
}

SmallVector<GroupedKernel::RowCopy> GroupedKernel::rowCopies() {
  SmallVector<RowCopy> out;
  if (rowsByTMA)
    return out;
  for (int64_t q = 0; q < rowsPerThread(); ++q)
    out.push_back(rowCopy(kb.idx(q)));
  return out;
}

void GroupedKernel::copyRowsInLoop(Value stage, Value kt) {
  // Whole groups: a group's chunk past the tile would land in the weights.
  assert(rowsPerThread() % kRowCopyGroup == 0 && "whole copy groups");
  // Only the chunks of rows in the segment, in groups of kRowCopyGroup: a
  // group's row sources are loaded together (one latency a group, not a
  // chunk: a rolled loop of single chunks ran the gate/up GEMM 47 % slower
  // than the default at T = 8192), a few registers each. A group's chunks
  // past the segment are zero-filled without a read. A trip count known
  // at run time keeps the loop rolled.
  Value row0 = em.divuIdx(tid, 8);
  Value left = kb.maxsi(kb.subi(validRows, row0), kb.idx(0));
  int64_t rowsPerGroup = kRowCopyGroup * (kThreads / 8);
  Value groups =
      em.divuIdx(kb.addi(left, kb.idx(rowsPerGroup - 1)), rowsPerGroup);
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), groups, kb.idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value q0 = kb.muli(loop.getInductionVar(), kb.idx(kRowCopyGroup));
  SmallVector<RowCopy> copies;
  for (int64_t i = 0; i < kRowCopyGroup; ++i)
    copies.push_back(rowCopy(kb.addi(q0, kb.idx(i))));
  copyRows(stage, kt, copies);
}

Value GroupedKernel::stageOffset(Value stage, int64_t which) {
  return kb.addi(base, kb.addi(kb.muli(stage, kb.idx(stageBytes())),
                               kb.idx(which * tileM * kTileK * 2)));
}

void GroupedKernel::copyRows(Value stage, Value kt, ArrayRef<RowCopy> copies) {
  Value aTile = rowsTile(stage);
  Value k0 = kb.muli(kt, kb.idx(kTileK));
  Value chunkCol = kb.muli(em.remuIdx(tid, 8), kb.idx(8));
  for (const RowCopy &c : copies)
    mma.asyncCopy(aTile, {c.tileRow, c.column}, rowsView,
                  {c.sourceRow, kb.addi(k0, chunkCol)}, 8, c.valid);
}

SmallVector<Value> GroupedKernel::weightCoordinates(Value k0) {
  SmallVector<Value> at = {k0, kb.muli(nTile, kb.idx(g.weightRowsPerMap))};
  if (!g.dense)
    at.push_back(expert);
  return at;
}

void GroupedKernel::prefetchTMATiles(Value kt) {
  Value k0 = kb.muli(kt, kb.idx(kTileK));
  SmallVector<Value> at = weightCoordinates(k0);
  for (Value map : weightMaps)
    k3gpu::TmaPrefetchTileOp::create(b, loc, map, at);
  if (!rowsByTMA)
    return;
  // A cluster pair's blocks load one half of the rows each (rowBox).
  Value first =
      paired() ? kb.addi(rowStart, kb.muli(rank, kb.idx(tileM / 2))) : rowStart;
  k3gpu::TmaPrefetchTileOp::create(b, loc, rowsMap, ValueRange{k0, first});
}

void GroupedKernel::prefetchAhead(Value kt, Value steps) {
  if (prefetch == 0)
    return;
  Value ahead = kb.addi(kt, kb.idx(prefetch));
  kb.ifThen(kb.lti(ahead, steps), [&] { prefetchTMATiles(ahead); });
}

void GroupedKernel::loadTMATiles(Value stage, Value kt, Value barriers) {
  Value k0 = kb.muli(kt, kb.idx(kTileK));
  int64_t rowsPerMap = g.weightRowsPerMap;
  auto loadWeights = [&](int64_t i, Value mask) {
    Value dst = em.view(
        smem,
        kb.addi(stageOffset(stage, 1), kb.idx(i * rowsPerMap * kTileK * 2)),
        em.tileType(weightBox(), b.getBF16Type()));
    nvgpu::TmaAsyncLoadOp::create(b, loc, dst, barriers, weightMaps[i],
                                  weightCoordinates(k0), stage, mask, Value());
  };
  int64_t maps = weightMaps.size();
  if (pairedWeights()) {
    // A shared tile: rank r loads map r (W1 or W3, half the tile) into
    // both blocks; else each block its own tile, both maps.
    Value both = arith::ConstantIntOp::create(b, loc, 0b11, 16);
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, sharedWeights,
                                    /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    for (int64_t i = 0; i < maps; ++i)
      kb.ifThen(kb.eqi(rank, kb.idx(i)), [&] { loadWeights(i, both); });
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    for (int64_t i = 0; i < maps; ++i)
      loadWeights(i, Value());
    return;
  }
  for (int64_t i = 0; i < maps; ++i)
    loadWeights(i, Value());
  if (!rowsByTMA)
    return;
  if (tall()) {
    // The boxes of 128 rows that hold segment rows (tallStageBytes).
    for (int64_t j = 0; j < tileM / kTile; ++j)
      kb.ifThen(kb.lti(kb.idx(j * kTile), validRows), [&] {
        Value box = em.view(
            smem,
            kb.addi(stageOffset(stage, 0), kb.idx(j * kTile * kTileK * 2)),
            em.tileType({kTile, kTileK}, b.getBF16Type()));
        nvgpu::TmaAsyncLoadOp::create(
            b, loc, box, barriers, rowsMap,
            ValueRange{k0, kb.addi(rowStart, kb.idx(j * kTile))}, stage,
            Value(), Value());
      });
    return;
  }
  if (!paired())
    return (void)nvgpu::TmaAsyncLoadOp::create(
        b, loc, rowsTile(stage), barriers, rowsMap, ValueRange{k0, rowStart},
        stage, Value(), Value());
  // This block's half of the rows, into both blocks of the pair.
  em.loadHalfMulticast(smem, stageOffset(stage, 0), tileM, rank, barriers,
                       rowsMap, k0, rowStart, stage);
}

Value GroupedKernel::tallStageBytes() {
  Value boxes = em.divuIdx(kb.addi(validRows, kb.idx(kTile - 1)), kTile);
  return kb.addi(kb.idx(tileN * kTileK * 2),
                 kb.muli(boxes, kb.idx(kTile * kTileK * 2)));
}

void GroupedKernel::blockSync() {
  if (!paired())
    return (void)gpu::BarrierOp::create(b, loc);
  em.clusterSync(/*relaxed=*/true, /*aligned=*/true);
}

void GroupedKernel::issue(Value stage, Value kt, ArrayRef<RowCopy> copies,
                          Value first) {
  if (!rowsByTMA)
    copyRows(stage, kt, copies);
  if (mxfp4)
    return mxfp4Rows.stage(stagingOf(stage), tid, weightRow, kt);
  kb.ifThen(first, [&] {
    nvgpu::MBarrierArriveExpectTxOp::create(
        b, loc, bars, kb.idx(tmaStageBytes()), stage, Value());
    loadTMATiles(stage, kt, bars);
    prefetchAhead(kt, kb.idx(g.reduction / kTileK));
  });
}

Value GroupedKernel::stagingOf(Value stage) {
  Value at = kb.addi(kb.addi(base, kb.idx(em.stages * stageBytes())),
                     kb.muli(stage, kb.idx(mxfp4Rows.stagingBytes())));
  return mma.sharedView(smem, b.getI8Type(), at, {mxfp4Rows.stagingBytes()});
}

MXFP4WeightRow GroupedKernel::mxfp4WeightRow() {
  int64_t rowsPerMap = g.weightRowsPerMap;
  Value map = em.divuIdx(tid, rowsPerMap);
  Value n =
      kb.addi(kb.muli(nTile, kb.idx(rowsPerMap)), em.remuIdx(tid, rowsPerMap));
  const KernelOperand &w0 = g.weights[0];
  int64_t outs = w0.shape[1], numel = weightElements(w0);
  Value row = kb.addi(kb.muli(expert, kb.idx(outs)), n);
  Value bytes = weightBytes[0];
  if (weightBytes.size() == 2)
    bytes = arith::SelectOp::create(b, loc, kb.eqi(map, kb.idx(0)),
                                    weightBytes[0], weightBytes[1]);
  return {bytes, kb.muli(row, kb.idx(g.reduction / 2)),
          kb.addi(kb.idx(numel / 2), kb.muli(row, kb.idx(g.reduction / 32)))};
}

void GroupedKernel::setUpOperands() {
  smem = mma.dynamicSharedMemory();
  base = em.alignedBase(smem);
  if (!g.dense)
    sourcePairs = kb.view(g.tables.rowSource.base, {pairs});
  // cp.async needs a unit inner stride in the source's type.
  Value rowCount = g.glu ? kb.dim(g.rows.shape[0]) : pairs;
  rowsView = mma.contiguousView(g.rows.base, {rowCount, kb.idx(g.reduction)});
  for (Value arg : mapArgs)
    weightMaps.push_back(em.tensorMap(arg, weightBox()));
  if (rowsByTMA)
    rowsMap = em.tensorMap(rowsMapArg, rowBox());
  if (sharedColumns)
    resultMap = em.tensorMap(resultMapArg, {64, 64});
  swizzle = weightMaps.empty() ? em.swizzleTag(weightBox()) : weightMaps[0];
  if (!mxfp4)
    return;
  for (const KernelOperand &w : g.weights)
    weightBytes.push_back(
        mma.contiguousView(w.base, {kb.idx(mxfp4WeightBytes(w))}));
  weightRow = mxfp4WeightRow();
}

Value GroupedKernel::rowPair(Value r) {
  if (!g.rowWeights)
    return Value();
  r = kb.minsi(r, kb.subi(validRows, kb.idx(1)));
  return kb.loadIndex(sourcePairs, {kb.addi(rowStart, r)});
}

Value GroupedKernel::weightOfPair(Value pair) {
  if (!pair)
    return Value();
  return kb.load(kb.view(g.rowWeights.base, {pairs}), {pair});
}

Value GroupedKernel::multiplyRows(Value stage, Value first, Value acc,
                                  int64_t pending) {
  Value rows = em.view(
      smem, kb.addi(stageOffset(stage, 0), kb.muli(first, kb.idx(kTileK * 2))),
      em.tileType({64, kTileK}, b.getBF16Type()));
  Value weights = em.view(smem, stageOffset(stage, 1),
                          em.tileType({tileN, kTileK}, b.getBF16Type()));
  return em.multiplyRowsStage(rows, weights, swizzle, tileN, acc, pending);
}

} // namespace mlir::k3::grouped_wgmma

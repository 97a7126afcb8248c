//===- GPUDistribute.cpp - loop nests to GPU threads ------------*- C++ -*-===//
#include "lowering/GPUDistribute.h"
#include "lowering/KernelBuilder.h"
#include "lowering/SymbolicShape.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::k3;

static SmallVector<scf::ParallelOp> topLevelLoops(gpu::GPUFuncOp fn) {
  SmallVector<scf::ParallelOp> loops;
  for (Operation &op : fn.getBody().front())
    if (auto p = dyn_cast<scf::ParallelOp>(op))
      loops.push_back(p);
  return loops;
}

/// for (i = global thread id / lanes; i < prod(ubs); i += grid size / lanes)
/// body(delin(i)): an iteration per thread, or per `lanes` consecutive
/// threads (a warp, whose lanes split the iteration's sums).
static void gridStride(scf::ParallelOp loop, int64_t lanes) {
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value bdim = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
  Value gdim = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  Value start = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, bid, bdim), tid);
  Value stride = arith::MulIOp::create(b, loc, gdim, bdim);
  if (lanes > 1) {
    Value l = arith::ConstantIndexOp::create(b, loc, lanes);
    start = arith::DivUIOp::create(b, loc, start, l);
    stride = arith::DivUIOp::create(b, loc, stride, l);
  }
  Value total = arith::ConstantIndexOp::create(b, loc, 1);
  for (Value ub : loop.getUpperBound())
    total = arith::MulIOp::create(b, loc, total, ub);
  auto flat = scf::ForOp::create(b, loc, start, total, stride);
  b.setInsertionPointToStart(flat.getBody());
  IRMapping map;
  Value rest = flat.getInductionVar();
  auto ubs = loop.getUpperBound();
  SmallVector<Value> ivs(ubs.size());
  for (int64_t d = ubs.size() - 1; d >= 0; --d) {
    ivs[d] = arith::RemUIOp::create(b, loc, rest, ubs[d]);
    rest = arith::DivUIOp::create(b, loc, rest, ubs[d]);
  }
  map.map(loop.getInductionVars(), ivs);
  for (Operation &op : loop.getBody()->without_terminator())
    b.clone(op, map);
  loop.erase();
}

/// The launch of a phase whose loop has `extent` iterations ([symbol, a, b]:
/// a * symbol + b), or an unknown count (null), of `lanes` threads each.
static LaunchShapeAttr phaseLaunch(MLIRContext *ctx, DenseI64ArrayAttr extent,
                                   int64_t threads, int64_t lanes) {
  SmallVector<int64_t> block = {threads, 1, 1};
  if (!extent)
    return LaunchShapeAttr::get(ctx, GridSymbol::device_sm_count,
                                kGridStrideBlocksPerSM, 0, 1, block, 0, 1);
  int64_t sym = extent[0], a = extent[1] * lanes, b = extent[2] * lanes;
  if (sym == 0 || a == 0)
    return LaunchShapeAttr::get(ctx, GridSymbol::none, 0,
                                std::max<int64_t>(1, b), threads, block, 0, 1);
  return LaunchShapeAttr::get(
      ctx, sym == kNumTokens ? GridSymbol::num_tokens : GridSymbol::num_seqs, a,
      b, threads, block, 0, 1);
}

SmallVector<gpu::GPUFuncOp>
mlir::k3::distributeOverThreads(gpu::GPUFuncOp fn, int64_t blockThreads) {
  SmallVector<gpu::GPUFuncOp> phases = {fn};
  size_t numLoops = topLevelLoops(fn).size();
  OpBuilder b(fn);
  b.setInsertionPointAfter(fn);
  for (size_t p = 1; p < numLoops; ++p) {
    auto copy = cast<gpu::GPUFuncOp>(b.clone(*fn));
    copy.setName((fn.getName() + "__" + Twine(p)).str());
    phases.push_back(copy);
    b.setInsertionPointAfter(copy);
  }
  for (auto [p, phase] : llvm::enumerate(phases)) {
    SmallVector<scf::ParallelOp> loops = topLevelLoops(phase);
    for (auto [i, loop] : llvm::enumerate(loops))
      if (i != p)
        loop.erase();
    MLIRContext *ctx = fn.getContext();
    K3Dialect::LaunchShapeAttrHelper launch(ctx);
    if (loops.empty()) {
      launch.setAttr(phase, phaseLaunch(ctx, {}, blockThreads, 1));
      continue;
    }
    scf::ParallelOp mine = loops[p];
    int64_t lanes = 1;
    if (IntegerAttr l = K3Dialect::LanesAttrHelper(ctx).getAttr(mine))
      lanes = l.getInt();
    launch.setAttr(
        phase, phaseLaunch(ctx, K3Dialect::ExtentAttrHelper(ctx).getAttr(mine),
                           blockThreads, lanes));
    gridStride(mine, lanes);
  }
  return phases;
}

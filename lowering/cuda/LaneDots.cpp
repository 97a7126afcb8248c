//===- LaneDots.cpp - a warp's dot products over K, at bandwidth -*- C++ -*-=//
#include "lowering/cuda/LaneDots.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

SmallVector<Value> at(const ViewRow &row, Value column) {
  SmallVector<Value> idx(row.at);
  idx.push_back(column);
  return idx;
}

/// The products of one warp's rows over the lane's columns, by weight
/// storage; laneDotLoop walks the columns.
class ColumnProducts {
public:
  virtual ~ColumnProducts() = default;
  /// Adds the products of the lane's columns `cols` (one weight vector
  /// each) to `acc`.
  virtual void multiplyColumns(ArrayRef<Value> cols,
                               SmallVectorImpl<Value> &acc) = 0;
  /// Columns of one iteration (loads in flight together).
  virtual int64_t maxUnroll() const { return 4; }
};

/// Float weights: 16-byte vectors of `vec` elements.
class LaneDots : public ColumnProducts {
public:
  LaneDots(MMAEmitter &em, ArrayRef<ViewRow> weights, ArrayRef<ViewRow> xs,
           int64_t vec)
      : em(em), weights(weights), xs(xs), vec(vec) {}

  /// Every load first, then the products, so that the loads of all the
  /// vectors are in flight together.
  void multiplyColumns(ArrayRef<Value> cols,
                       SmallVectorImpl<Value> &acc) override {
    SmallVector<SmallVector<SmallVector<Value>>> wv(cols.size()),
        xv(cols.size());
    for (auto [u, c] : llvm::enumerate(cols)) {
      for (const ViewRow &w : weights)
        wv[u].push_back(em.loadVector(w.mem, at(w, c), vec));
      for (const ViewRow &x : xs)
        xv[u].push_back(em.loadVector(x.mem, at(x, c), vec));
    }
    for (size_t u = 0; u < cols.size(); ++u)
      for (size_t r = 0; r < weights.size(); ++r)
        for (size_t t = 0; t < xs.size(); ++t) {
          Value &a = acc[r * xs.size() + t];
          for (int64_t i = 0; i < vec; ++i)
            a = em.fmaContract(wv[u][r][i], xv[u][t][i], a);
        }
  }

private:
  MMAEmitter &em;
  ArrayRef<ViewRow> weights, xs;
  int64_t vec;
};

/// Steps of the warp's 32 vectors per loop iteration: 4, 3 or 2 when they
/// divide the step count (a constant trip count) and `most` allows, else 1.
int64_t unrollOf(int64_t steps, int64_t most) {
  for (int64_t u : {4, 3, 2})
    if (u <= most && steps % u == 0)
      return u;
  return 1;
}

/// The lane's sums over its columns of K (see laneDotProducts).
SmallVector<Value> laneDotLoop(MMAEmitter &em, ColumnProducts &dots,
                               size_t sums, int64_t k, int64_t vec, Value lane,
                               const LaneDotSlice &slice);

} // namespace

SmallVector<Value> mlir::k3::laneDotProducts(MMAEmitter &em,
                                             ArrayRef<ViewRow> weights,
                                             ArrayRef<ViewRow> xs, int64_t k,
                                             int64_t vec, Value lane) {
  return laneDotProducts(em, weights, xs, k, vec, lane,
                         {em.kb.idx(0), k / (32 * vec), Value()});
}

SmallVector<Value> mlir::k3::laneDotProducts(MMAEmitter &em,
                                             ArrayRef<ViewRow> weights,
                                             ArrayRef<ViewRow> xs, int64_t k,
                                             int64_t vec, Value lane,
                                             const LaneDotSlice &slice) {
  LaneDots dots(em, weights, xs, vec);
  return laneDotLoop(em, dots, weights.size() * xs.size(), k, vec, lane, slice);
}

namespace {

SmallVector<Value> laneDotLoop(MMAEmitter &em, ColumnProducts &dots,
                               size_t sums, int64_t k, int64_t vec, Value lane,
                               const LaneDotSlice &slice) {
  KernelBuilder &kb = em.kb;
  OpBuilder &b = em.b;
  Location loc = em.loc;
  const int64_t step = 32 * vec, steps = slice.steps,
                unroll = unrollOf(steps, dots.maxUnroll());
  Value laneCol = kb.muli(lane, kb.idx(vec));
  SmallVector<Value> acc(sums, kb.f32(0.0));
  if (steps > 0) {
    Value first = kb.muli(slice.first, kb.idx(step));
    auto loop =
        scf::ForOp::create(b, loc, first, kb.addi(first, kb.idx(steps * step)),
                           kb.idx(unroll * step), acc);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> cols, it(loop.getRegionIterArgs());
    for (int64_t u = 0; u < unroll; ++u)
      cols.push_back(
          kb.addi(loop.getInductionVar(), kb.addi(laneCol, kb.idx(u * step))));
    dots.multiplyColumns(cols, it);
    scf::YieldOp::create(b, loc, it);
    acc.assign(loop.getResults().begin(), loop.getResults().end());
  }
  if (k % step == 0)
    return acc;
  // The partial last step: lanes past K keep their sums.
  Value c = kb.addi(kb.idx(k / step * step), laneCol);
  Value takes = kb.lti(c, kb.idx(k));
  if (slice.takesTail)
    takes = kb.andi(slice.takesTail, takes);
  SmallVector<Type> types(acc.size(), b.getF32Type());
  auto tail = scf::IfOp::create(b, loc, types, takes,
                                /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tail.thenBlock());
    SmallVector<Value> it(acc);
    dots.multiplyColumns({c}, it);
    scf::YieldOp::create(b, loc, it);
    b.setInsertionPointToStart(tail.elseBlock());
    scf::YieldOp::create(b, loc, acc);
  }
  return SmallVector<Value>(tail.getResults());
}

} // namespace

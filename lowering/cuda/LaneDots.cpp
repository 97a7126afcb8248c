//===- LaneDots.cpp - a warp's dot products over K, at bandwidth -*- C++ -*-=//
#include "lowering/cuda/LaneDots.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The products of one warp's rows over the lane's columns.
class LaneDots {
public:
  LaneDots(MMAEmitter &em, ArrayRef<ViewRow> weights, ArrayRef<ViewRow> xs,
           int64_t vec)
      : em(em), kb(em.kb), weights(weights), xs(xs), vec(vec) {}

  /// Adds the products of the lane's columns `cols` (one 16-byte vector
  /// each) to `acc`: every load first, then the products, so that the
  /// loads of all the vectors are in flight together.
  void multiplyColumns(ArrayRef<Value> cols, SmallVectorImpl<Value> &acc) {
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
  static SmallVector<Value> at(const ViewRow &row, Value column) {
    SmallVector<Value> idx(row.at);
    idx.push_back(column);
    return idx;
  }

  MMAEmitter &em;
  KernelBuilder &kb;
  ArrayRef<ViewRow> weights, xs;
  int64_t vec;
};

/// Steps of the warp's 32 vectors per loop iteration: 4, 3 or 2 when they
/// divide the step count (a constant trip count), else 1.
int64_t unrollOf(int64_t steps) {
  for (int64_t u : {4, 3, 2})
    if (steps % u == 0)
      return u;
  return 1;
}

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
  KernelBuilder &kb = em.kb;
  OpBuilder &b = em.b;
  Location loc = em.loc;
  LaneDots dots(em, weights, xs, vec);
  const int64_t step = 32 * vec, steps = slice.steps, unroll = unrollOf(steps);
  Value laneCol = kb.muli(lane, kb.idx(vec));
  SmallVector<Value> acc(weights.size() * xs.size(), kb.f32(0.0));
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

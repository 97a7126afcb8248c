//===- LastTokenRows.cpp - moving a last-token selection up -----*- C++ -*-===//
#include "passes/LastTokenRows.h"
#include "passes/RowWise.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::k3 {

RankedTensorType withDynamicRows(Type t) {
  auto type = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = ShapedType::kDynamic;
  return type.clone(shape);
}

bool selectableRows(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getRank() == 2 && isa<FloatType>(t.getElementType());
}

namespace {

/// The reassociation [[0], [1, 2]]: heads and head dims as one row.
bool headsAsRow(ArrayRef<ReassociationIndices> r) {
  return r.size() == 2 && r[0] == ReassociationIndices{0} &&
         r[1] == ReassociationIndices{1, 2};
}

/// The last rows of `v` at the builder's point: a selection of them that
/// already exists in the block (the residual add's, further down) is
/// reused, moved up to the point if it lies below, so that the rows are
/// selected once.
Value selectRows(OpBuilder &b, Location loc, Value v, Value cu) {
  Block *block = b.getInsertionBlock();
  Block::iterator at = b.getInsertionPoint();
  for (Operation *user : v.getUsers()) {
    auto s = dyn_cast<LastTokensOp>(user);
    if (!s || s.getInput() != v || s.getCuSeqlens() != cu ||
        s->getBlock() != block)
      continue;
    if (at != block->end() && &*at != s.getOperation() &&
        !s->isBeforeInBlock(&*at))
      s->moveBefore(block, at);
    return s.getResult();
  }
  return LastTokensOp::create(b, loc, withDynamicRows(v.getType()), v, cu);
}

/// The last rows of `q [T, H, D]` as [N, H, D]: of the projection it was
/// reshaped from where it was (so that the projection can move too).
Value selectHeadRows(OpBuilder &b, Location loc, Value q, Value cu) {
  SmallVector<ReassociationIndices> rows = {{0}, {1, 2}};
  Value flat;
  auto expand = q.getDefiningOp<tensor::ExpandShapeOp>();
  if (expand && expand.getSrcType().getRank() == 2 &&
      headsAsRow(expand.getReassociationIndices()))
    flat = expand.getSrc();
  else
    flat = tensor::CollapseShapeOp::create(b, loc, q, rows);
  Value selected = selectRows(b, loc, flat, cu);
  auto type = cast<RankedTensorType>(q.getType());
  SmallVector<OpFoldResult> shape = {
      tensor::DimOp::create(b, loc, selected, 0).getResult(),
      b.getIndexAttr(type.getDimSize(1)), b.getIndexAttr(type.getDimSize(2))};
  return tensor::ExpandShapeOp::create(b, loc, withDynamicRows(type), selected,
                                       rows, shape);
}

/// `v` is available right before `op`.
bool availableBefore(Value v, Operation *op) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner() == op->getBlock();
  Operation *def = v.getDefiningOp();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

/// select(p(x, ...)) -> p(select(x), ...) for a row-wise `p` whose one
/// result only the selection reads.
bool sinkThroughRowWise(LastTokensOp select) {
  Value v = select.getInput();
  Operation *p = v.getDefiningOp();
  if (!p || p->getNumResults() != 1 || !v.hasOneUse())
    return false;
  SmallVector<OpOperand *> tokens = tokenOperands(p);
  Value cu = select.getCuSeqlens();
  if (tokens.empty() || !availableBefore(cu, p) ||
      !llvm::all_of(tokens,
                    [](OpOperand *o) { return selectableRows(o->get()); }))
    return false;
  OpBuilder b(p);
  IRMapping map;
  for (OpOperand *o : tokens)
    if (!map.contains(o->get()))
      map.map(o->get(), selectRows(b, p->getLoc(), o->get(), cu));
  Operation *copy = b.clone(*p, map);
  copy->getResult(0).setType(withDynamicRows(v.getType()));
  select.replaceAllUsesWith(copy->getResult(0));
  select.erase();
  p->erase();
  return true;
}

/// select(collapse(latent_attention(q, latent, cache))) -> the last tokens'
/// latent attention over the cache with every latent of the call.
bool selectThroughAttention(LastTokensOp select) {
  auto collapse = select.getInput().getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || !collapse.getResult().hasOneUse() ||
      !headsAsRow(collapse.getReassociationIndices()))
    return false;
  auto attn = collapse.getSrc().getDefiningOp<LatentAttentionOp>();
  Value cu = select.getCuSeqlens();
  // A decode step has one token a sequence already.
  if (!attn || collapse.getSrc() != attn.getResult() ||
      !attn.getResult().hasOneUse() || !attn.getLatentCache() ||
      attn.getCuSeqlens() != cu || inDecodeEntry(attn) ||
      !selectableRows(attn.getLatent()))
    return false;
  Location loc = attn.getLoc();
  OpBuilder b(attn);
  b.setInsertionPointAfter(attn);
  Value cache = attn.getLatentCache(), lens = attn.getCacheLens();
  Value all = LatentCacheAppendOp::create(b, loc, cache.getType(), cache, lens,
                                          attn.getLatent(), cu);
  auto last = LastTokenContextOp::create(b, loc, lens.getType(), cu.getType(),
                                         cu, lens);
  IRMapping map;
  map.map(attn.getQ(), selectHeadRows(b, loc, attn.getQ(), cu));
  map.map(attn.getLatent(), selectRows(b, loc, attn.getLatent(), cu));
  map.map(cache, all);
  map.map(lens, last.getLastContextLens());
  map.map(cu, last.getLastCuSeqlens());
  auto lastAttn = cast<LatentAttentionOp>(b.clone(*attn, map));
  lastAttn.getResult().setType(withDynamicRows(attn.getResult().getType()));
  Value rows = tensor::CollapseShapeOp::create(
      b, loc, lastAttn.getResult(), collapse.getReassociationIndices());
  // The updated cache is the append's: the last tokens' attention writes
  // each last latent again where the append put it, so its own cache
  // result (left unused) equals `all`. The state then takes `all` in place
  // (StateInPlace.h) and the attention only reads it.
  attn.getLatentCacheOut().replaceAllUsesWith(all);
  select.replaceAllUsesWith(rows);
  select.erase();
  collapse.erase();
  Value q = attn.getQ();
  attn.erase();
  // The reshape of every query row, which nothing reads now (so that the
  // query projection's selection moves up too).
  if (auto expand = q.getDefiningOp<tensor::ExpandShapeOp>();
      expand && expand->use_empty())
    expand.erase();
  return true;
}

} // namespace

bool moveSelectionUp(LastTokensOp select) {
  return selectThroughAttention(select) || sinkThroughRowWise(select);
}

} // namespace mlir::k3

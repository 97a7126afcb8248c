//===- KernelBuilder.cpp - building kernel bodies as loop nests -*- C++ -*-===//
#include "lowering/KernelBuilder.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

Value KernelBuilder::idx(int64_t v) {
  Value c = arith::ConstantIndexOp::create(b, loc, v);
  track(c, Linear{0, 0, v});
  return c;
}

void KernelBuilder::track(Value v, std::optional<Linear> form) {
  if (form)
    forms[v] = *form;
}

std::optional<KernelBuilder::Linear> KernelBuilder::linearForm(Value v) const {
  if (v == numTokens)
    return Linear{kNumTokens, 1, 0};
  if (v == numSeqs)
    return Linear{kNumSeqs, 1, 0};
  auto it = forms.find(v);
  if (it == forms.end())
    return std::nullopt;
  return it->second;
}

Value KernelBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

Value KernelBuilder::boolean(bool v) {
  return arith::ConstantOp::create(b, loc, b.getBoolAttr(v));
}

Value KernelBuilder::dim(int64_t d) {
  switch (d) {
  case kNumTokens:
    return numTokens;
  case kNumSeqs:
    return numSeqs;
  case kNumSeqsPlus1:
    return addi(numSeqs, idx(1));
  default:
    return idx(d);
  }
}

Value KernelBuilder::view(Value base, ArrayRef<Value> sizes) {
  auto baseType = cast<MemRefType>(base.getType());
  int64_t rank = sizes.size();
  SmallVector<int64_t> shape(rank, ShapedType::kDynamic);
  SmallVector<int64_t> staticStrides(rank, ShapedType::kDynamic);
  SmallVector<OpFoldResult> sizeOfr, strideOfr;
  Value stride = idx(1);
  SmallVector<Value> strides(rank);
  for (int64_t i = rank - 1; i >= 0; --i) {
    strides[i] = stride;
    stride = muli(stride, sizes[i]);
  }
  for (int64_t i = 0; i < rank; ++i) {
    sizeOfr.push_back(sizes[i]);
    strideOfr.push_back(strides[i]);
  }
  auto layout = StridedLayoutAttr::get(b.getContext(), 0, staticStrides);
  auto type = MemRefType::get(shape, baseType.getElementType(), layout);
  Value v = memref::ReinterpretCastOp::create(
      b, loc, type, base, b.getIndexAttr(0), sizeOfr, strideOfr);
  return v;
}

Value KernelBuilder::view(Value base, ArrayRef<int64_t> symShape) {
  SmallVector<Value> sizes;
  for (int64_t d : symShape)
    sizes.push_back(dim(d));
  return view(base, sizes);
}

Value KernelBuilder::load(Value mem, ValueRange ivs) {
  Value v = memref::LoadOp::create(b, loc, mem, ivs);
  if (!v.getType().isF32())
    v = arith::ExtFOp::create(b, loc, b.getF32Type(), v);
  return v;
}

Value KernelBuilder::loadIndex(Value mem, ValueRange ivs) {
  Value v = memref::LoadOp::create(b, loc, mem, ivs);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

Value KernelBuilder::numElements(ArrayRef<int64_t> symShape) {
  Value n = idx(1);
  for (int64_t d : symShape)
    n = muli(n, dim(d));
  return n;
}

void KernelBuilder::store(Value v, Value mem, ValueRange ivs) {
  Type elt = cast<MemRefType>(mem.getType()).getElementType();
  if (elt != v.getType())
    v = arith::TruncFOp::create(b, loc, elt, v);
  memref::StoreOp::create(b, loc, v, mem, ivs);
}

void KernelBuilder::storeIndex(Value v, Value mem, ValueRange ivs) {
  Type elt = cast<MemRefType>(mem.getType()).getElementType();
  v = arith::IndexCastOp::create(b, loc, elt, v);
  memref::StoreOp::create(b, loc, v, mem, ivs);
}

Value KernelBuilder::scratch(int64_t n) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  auto type = MemRefType::get({n}, b.getF32Type());
  return memref::AllocaOp::create(b, loc, type);
}

void KernelBuilder::forRange(Value lb, Value ub,
                             const std::function<void(Value)> &body) {
  scf::ForOp::create(b, loc, lb, ub, idx(1), ValueRange{},
                     [&](OpBuilder &nb, Location, Value iv, ValueRange) {
                       OpBuilder::InsertionGuard guard(b);
                       b.setInsertionPoint(nb.getInsertionBlock(),
                                           nb.getInsertionPoint());
                       body(iv);
                       scf::YieldOp::create(b, loc);
                     });
}

Value KernelBuilder::reduce(Value lb, Value ub, Value init,
                            const std::function<Value(Value, Value)> &body) {
  return reduceN(lb, ub, ValueRange{init},
                 [&](Value iv, ValueRange acc) -> SmallVector<Value> {
                   return {body(iv, acc[0])};
                 })[0];
}

SmallVector<Value> KernelBuilder::reduceN(
    Value lb, Value ub, ValueRange inits,
    const std::function<SmallVector<Value>(Value, ValueRange)> &body) {
  return reduceStrided(lb, ub, idx(1), inits, body);
}

SmallVector<Value> KernelBuilder::reduceStrided(
    Value lb, Value ub, Value step, ValueRange inits,
    const std::function<SmallVector<Value>(Value, ValueRange)> &body) {
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, step, inits,
      [&](OpBuilder &nb, Location, Value iv, ValueRange acc) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        SmallVector<Value> next = body(iv, acc);
        scf::YieldOp::create(b, loc, next);
      });
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> KernelBuilder::reduceSumN(
    Value ub, ValueRange inits,
    const std::function<SmallVector<Value>(Value, ValueRange)> &body) {
  if (!inWarpLoop)
    return reduceN(idx(0), ub, inits, body);
  Value lane = gpu::LaneIdOp::create(b, loc, nullptr);
  SmallVector<Value> zeros(inits.size(), f32(0.0));
  SmallVector<Value> parts =
      reduceStrided(lane, ub, idx(warpLanes), zeros, body);
  SmallVector<Value> sums;
  for (auto [init, part] : llvm::zip(inits, parts)) {
    Value v = part;
    for (int64_t off = warpLanes / 2; off >= 1; off /= 2)
      v = add(v, gpu::ShuffleOp::create(b, loc, v, off, warpLanes,
                                        gpu::ShuffleMode::XOR)
                     .getShuffleResult());
    sums.push_back(add(init, v));
  }
  return sums;
}

SmallVector<Value> KernelBuilder::reduceLanesN(
    Value ub, ValueRange inits,
    const std::function<SmallVector<Value>(Value, ValueRange)> &body,
    const std::function<SmallVector<Value>(ValueRange, ValueRange)> &combine) {
  if (!inWarpLoop)
    return reduceN(idx(0), ub, inits, body);
  Value lane = gpu::LaneIdOp::create(b, loc, nullptr);
  SmallVector<Value> acc = reduceStrided(lane, ub, idx(warpLanes), inits, body);
  for (int64_t off = warpLanes / 2; off >= 1; off /= 2) {
    SmallVector<Value> other;
    for (Value v : acc) {
      bool isIndex = v.getType().isIndex();
      Value x = isIndex ? arith::IndexCastOp::create(b, loc, b.getI32Type(), v)
                              .getResult()
                        : v;
      Value y = gpu::ShuffleOp::create(b, loc, x, off, warpLanes,
                                       gpu::ShuffleMode::XOR)
                    .getShuffleResult();
      other.push_back(
          isIndex ? arith::IndexCastOp::create(b, loc, b.getIndexType(), y)
                        .getResult()
                  : y);
    }
    acc = combine(acc, other);
  }
  return acc;
}

Value KernelBuilder::reduceSum(Value ub, Value init,
                               const std::function<Value(Value, Value)> &body) {
  return reduceSumN(ub, ValueRange{init},
                    [&](Value iv, ValueRange acc) -> SmallVector<Value> {
                      return {body(iv, acc[0])};
                    })[0];
}

void KernelBuilder::parallelWarps(ArrayRef<Value> ubs,
                                  const std::function<void(ValueRange)> &body) {
  if (warpLanes == 1)
    return parallel(ubs, body);
  inWarpLoop = true;
  scf::ParallelOp par = parallelLoop(ubs, body);
  inWarpLoop = false;
  K3Dialect::LanesAttrHelper(b.getContext())
      .setAttr(par, b.getI64IntegerAttr(warpLanes));
}

void KernelBuilder::parallel(ArrayRef<Value> ubs,
                             const std::function<void(ValueRange)> &body) {
  parallelLoop(ubs, body);
}

scf::ParallelOp
KernelBuilder::parallelLoop(ArrayRef<Value> ubs,
                            const std::function<void(ValueRange)> &body) {
  SmallVector<Value> lbs(ubs.size(), idx(0)), steps(ubs.size(), idx(1));
  // The iteration count, when it is linear in one runtime size.
  std::optional<Linear> extent = Linear{0, 0, 1};
  for (Value ub : ubs) {
    auto f = linearForm(ub);
    if (!f || !extent) {
      extent = std::nullopt;
    } else if (f->symbol == 0) {
      extent = Linear{extent->symbol, extent->a * f->b, extent->b * f->b};
    } else if (extent->symbol == 0) {
      extent = Linear{f->symbol, f->a * extent->b, f->b * extent->b};
    } else {
      extent = std::nullopt;
    }
  }
  auto par = scf::ParallelOp::create(
      b, loc, lbs, ubs, steps, [&](OpBuilder &nb, Location, ValueRange ivs) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        body(ivs);
      });
  if (extent)
    K3Dialect::ExtentAttrHelper(b.getContext())
        .setAttr(par, b.getDenseI64ArrayAttr(
                          {extent->symbol, extent->a, extent->b}));
  return par;
}

void KernelBuilder::ifThen(Value cond, const std::function<void()> &body) {
  auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&op.getThenRegion().front());
  body();
}

Value KernelBuilder::ifElse(Value cond, Type type,
                            const std::function<Value()> &thenFn,
                            const std::function<Value()> &elseFn) {
  auto op = scf::IfOp::create(b, loc, TypeRange{type}, cond,
                              /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&op.getThenRegion().front());
  scf::YieldOp::create(b, loc, thenFn());
  b.setInsertionPointToStart(&op.getElseRegion().front());
  scf::YieldOp::create(b, loc, elseFn());
  return op.getResult(0);
}

Value KernelBuilder::add(Value x, Value y) {
  return arith::AddFOp::create(b, loc, x, y);
}
Value KernelBuilder::sub(Value x, Value y) {
  return arith::SubFOp::create(b, loc, x, y);
}
Value KernelBuilder::mul(Value x, Value y) {
  return arith::MulFOp::create(b, loc, x, y);
}
Value KernelBuilder::div(Value x, Value y) {
  return arith::DivFOp::create(b, loc, x, y);
}
Value KernelBuilder::neg(Value x) { return arith::NegFOp::create(b, loc, x); }
Value KernelBuilder::exp(Value x) { return math::ExpOp::create(b, loc, x); }
Value KernelBuilder::log1p(Value x) { return math::Log1pOp::create(b, loc, x); }
Value KernelBuilder::tanh(Value x) { return math::TanhOp::create(b, loc, x); }
Value KernelBuilder::sqrt(Value x) { return math::SqrtOp::create(b, loc, x); }
Value KernelBuilder::rsqrt(Value x) { return div(f32(1.0), sqrt(x)); }

Value KernelBuilder::sigmoid(Value x) {
  return div(f32(1.0), add(f32(1.0), exp(neg(x))));
}

Value KernelBuilder::softplus(Value x) {
  // log(1 + e^x), with the identity above 20 where e^x would dominate.
  Value big = gtf(x, f32(20.0));
  Value safe = select(big, f32(0.0), x);
  return select(big, x, log1p(exp(safe)));
}

Value KernelBuilder::maxf(Value x, Value y) {
  return arith::MaximumFOp::create(b, loc, x, y);
}
Value KernelBuilder::gtf(Value x, Value y) {
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x, y);
}
Value KernelBuilder::eqf(Value x, Value y) {
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, y);
}
Value KernelBuilder::select(Value c, Value x, Value y) {
  return arith::SelectOp::create(b, loc, c, x, y);
}

Value KernelBuilder::addi(Value x, Value y) {
  Value r = arith::AddIOp::create(b, loc, x, y);
  auto fx = linearForm(x), fy = linearForm(y);
  if (fx && fy &&
      (fx->symbol == 0 || fy->symbol == 0 || fx->symbol == fy->symbol))
    track(r, Linear{fx->symbol ? fx->symbol : fy->symbol, fx->a + fy->a,
                    fx->b + fy->b});
  return r;
}
Value KernelBuilder::subi(Value x, Value y) {
  return arith::SubIOp::create(b, loc, x, y);
}
Value KernelBuilder::muli(Value x, Value y) {
  Value r = arith::MulIOp::create(b, loc, x, y);
  auto fx = linearForm(x), fy = linearForm(y);
  if (fx && fy && fy->symbol == 0)
    track(r, Linear{fx->symbol, fx->a * fy->b, fx->b * fy->b});
  else if (fx && fy && fx->symbol == 0)
    track(r, Linear{fy->symbol, fy->a * fx->b, fy->b * fx->b});
  return r;
}
Value KernelBuilder::minsi(Value x, Value y) {
  return arith::MinSIOp::create(b, loc, x, y);
}
Value KernelBuilder::maxsi(Value x, Value y) {
  return arith::MaxSIOp::create(b, loc, x, y);
}
Value KernelBuilder::lti(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
}
Value KernelBuilder::gei(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, x, y);
}
Value KernelBuilder::eqi(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
}
Value KernelBuilder::andi(Value x, Value y) {
  return arith::AndIOp::create(b, loc, x, y);
}
Value KernelBuilder::ori(Value x, Value y) {
  return arith::OrIOp::create(b, loc, x, y);
}
Value KernelBuilder::notb(Value x) {
  Value t = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  return arith::XOrIOp::create(b, loc, x, t);
}
Value KernelBuilder::divui(Value a, int64_t d) {
  return arith::DivUIOp::create(b, loc, a, idx(d));
}
Value KernelBuilder::remui(Value a, int64_t d) {
  return arith::RemUIOp::create(b, loc, a, idx(d));
}

Value KernelBuilder::roundTo(Value v, Type elem) {
  if (elem.isF32())
    return v;
  Value narrow = arith::TruncFOp::create(b, loc, elem, v);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), narrow);
}

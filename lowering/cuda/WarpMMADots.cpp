//===- WarpMMADots.cpp - 16 bf16 weight rows times a few tokens, mma.sync -===//
#include "lowering/cuda/WarpMMADots.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// Columns of K per step: 4 lanes x 8 bf16.
constexpr int64_t kStep = 32;
/// Weight loads a lane issues per loop iteration before the products:
/// enough bytes in flight per warp (16 x 16 bytes a lane) at a register
/// cost that leaves room for several blocks per SM.
constexpr int64_t kWeightLoadsInFlight = 16;

/// One step's loads: rows g and g + 8 of each weight, token g of each tile.
struct StepLoads {
  SmallVector<Value> w, x;
};

class WarpDots {
public:
  WarpDots(MMAEmitter &em, ArrayRef<MMALaneRows> weights,
           ArrayRef<MMALaneToken> tokens, int64_t k, Value lane)
      : em(em), kb(em.kb), b(em.b), loc(em.loc), weights(weights),
        tokens(tokens), k(k) {
    laneCol = kb.muli(em.remu(lane, 4), kb.idx(8));
    auto ty = VectorType::get({8}, b.getBF16Type());
    zeros = arith::ConstantOp::create(b, loc, ty, b.getZeroAttr(ty));
  }

  SmallVector<Acc> run(const MMASlice &slice) {
    SmallVector<Acc> acc(weights.size() * tokens.size(), em.zero());
    const int64_t unroll = unrollOf(slice.steps);
    const int64_t looped = slice.steps / unroll * unroll;
    if (looped > 0)
      acc = loop(slice.first, looped, unroll, acc);
    // The remainder of the slice, straight-line.
    for (int64_t s = looped; s < slice.steps; ++s)
      multiply(load(columnOf(kb.addi(slice.first, kb.idx(s))), Value()), acc);
    if (k % kStep == 0)
      return acc;
    return tail(slice.takesTail, acc);
  }

private:
  /// Steps per iteration: 8, 4, 2 or 1, at most kWeightLoadsInFlight
  /// weight loads a lane.
  int64_t unrollOf(int64_t steps) const {
    int64_t perStep = 2 * int64_t(weights.size());
    for (int64_t u : {8, 4, 2})
      if (u * perStep <= kWeightLoadsInFlight && u <= steps)
        return u;
    return 1;
  }

  Value columnOf(Value step) {
    return kb.addi(kb.muli(step, kb.idx(kStep)), laneCol);
  }

  /// An scf.for over `n` steps from `first`, `unroll` a trip, the
  /// fragments loop-carried as scalars.
  SmallVector<Acc> loop(Value first, int64_t n, int64_t unroll,
                        ArrayRef<Acc> init) {
    SmallVector<Value> flat;
    for (const Acc &a : init)
      flat.append(a.begin(), a.end());
    auto loop = scf::ForOp::create(b, loc, first, kb.addi(first, kb.idx(n)),
                                   kb.idx(unroll), flat);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Acc> acc = unflatten(loop.getRegionIterArgs());
      // Every load of the trip first, then the products.
      SmallVector<StepLoads> steps;
      for (int64_t u = 0; u < unroll; ++u)
        steps.push_back(load(
            columnOf(kb.addi(loop.getInductionVar(), kb.idx(u))), Value()));
      for (const StepLoads &s : steps)
        multiply(s, acc);
      SmallVector<Value> out;
      for (const Acc &a : acc)
        out.append(a.begin(), a.end());
      scf::YieldOp::create(b, loc, out);
    }
    return unflatten(loop.getResults());
  }

  static SmallVector<Acc> unflatten(ValueRange v) {
    SmallVector<Acc> acc;
    for (size_t i = 0; i < v.size(); i += 4)
      acc.push_back({v[i], v[i + 1], v[i + 2], v[i + 3]});
    return acc;
  }

  /// K's partial last step: columns past K read zeros (their loads are
  /// clamped into the row).
  SmallVector<Acc> tail(Value takesTail, ArrayRef<Acc> acc) {
    Value col = kb.addi(kb.idx(k / kStep * kStep), laneCol);
    Value real = kb.lti(col, kb.idx(k));
    SmallVector<Value> flat;
    for (const Acc &a : acc)
      flat.append(a.begin(), a.end());
    auto run = [&]() {
      SmallVector<Acc> d(acc);
      multiply(load(kb.minsi(col, kb.idx(k - 8)), real), d);
      SmallVector<Value> out;
      for (const Acc &a : d)
        out.append(a.begin(), a.end());
      return out;
    };
    if (!takesTail)
      return unflatten(run());
    SmallVector<Type> types(flat.size(), b.getF32Type());
    auto ifOp = scf::IfOp::create(b, loc, types, takesTail,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      scf::YieldOp::create(b, loc, run());
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, loc, flat);
    }
    return unflatten(ifOp.getResults());
  }

  /// 8 bf16 at `col` of `row`; zeros unless `real` (null: always).
  Value load8(const ViewRow &row, Value col, Value real) {
    SmallVector<Value> at(row.at);
    at.push_back(col);
    auto ld = vector::LoadOp::create(b, loc, zeros.getType(), row.mem, at);
    ld.setAlignment(16);
    return real ? kb.select(real, ld, zeros) : ld.getResult();
  }

  StepLoads load(Value col, Value real) {
    StepLoads s;
    for (const MMALaneRows &w : weights)
      for (const ViewRow &r : w.rows)
        s.w.push_back(load8(r, col, real));
    for (const MMALaneToken &t : tokens) {
      Value valid = real ? kb.andi(real, t.valid) : t.valid;
      s.x.push_back(load8(t.x, col, valid));
    }
    return s;
  }

  /// Elements (p, p + 1) of a loaded vector: one row of a fragment.
  Value pairOf(Value v, int64_t p) {
    return vector::ShuffleOp::create(b, loc, v, v, ArrayRef<int64_t>{p, p + 1});
  }

  void multiply(const StepLoads &s, SmallVectorImpl<Acc> &acc) {
    for (int64_t h = 0; h < 2; ++h) {
      int64_t lo = 4 * h, hi = 4 * h + 2;
      for (size_t w = 0; w < weights.size(); ++w) {
        Value r0 = s.w[2 * w], r1 = s.w[2 * w + 1];
        FragA a = em.stack(
            {pairOf(r0, lo), pairOf(r1, lo), pairOf(r0, hi), pairOf(r1, hi)});
        for (size_t j = 0; j < tokens.size(); ++j) {
          FragB bf = em.stack({pairOf(s.x[j], lo), pairOf(s.x[j], hi)});
          Acc &d = acc[w * tokens.size() + j];
          d = em.mma(a, bf, d);
        }
      }
    }
  }

  MMAEmitter &em;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  ArrayRef<MMALaneRows> weights;
  ArrayRef<MMALaneToken> tokens;
  int64_t k;
  Value laneCol, zeros;
};

} // namespace

SmallVector<Acc> mlir::k3::warpMMAProducts(MMAEmitter &em,
                                           ArrayRef<MMALaneRows> weights,
                                           ArrayRef<MMALaneToken> tokens,
                                           int64_t k, Value lane,
                                           const MMASlice &slice) {
  return WarpDots(em, weights, tokens, k, lane).run(slice);
}

SmallVector<Acc> mlir::k3::warpMMAProducts(MMAEmitter &em,
                                           ArrayRef<MMALaneRows> weights,
                                           ArrayRef<MMALaneToken> tokens,
                                           int64_t k, Value lane) {
  return warpMMAProducts(em, weights, tokens, k, lane,
                         {em.kb.idx(0), mmaWholeSteps(k), Value()});
}

FragmentPartials::FragmentPartials(MMAEmitter &em, FunctionOpInterface fn,
                                   int64_t warps, int64_t accs)
    : em(em), accs(accs) {
  mem = em.workgroupArray(fn, em.b.getF32Type(), warps * accs * 4 * 32);
}

/// [warp][fragment][element][lane]: a warp's 32 lanes write 32
/// consecutive words (no bank conflict).
Value FragmentPartials::at(Value warp, int64_t i, int64_t e, Value lane) {
  KernelBuilder &kb = em.kb;
  Value base = kb.muli(warp, kb.idx(accs * 4 * 32));
  return kb.addi(kb.addi(base, kb.idx((i * 4 + e) * 32)), lane);
}

void FragmentPartials::keep(Value warp, Value lane, ArrayRef<Acc> d) {
  for (auto [i, a] : llvm::enumerate(d))
    for (int64_t e = 0; e < 4; ++e)
      em.sts(a[e], mem, {at(warp, i, e, lane)});
}

SmallVector<Acc> FragmentPartials::gather(Value group, int64_t slices,
                                          Value lane, int64_t count) {
  KernelBuilder &kb = em.kb;
  Value first = kb.muli(group, kb.idx(slices));
  SmallVector<Acc> d;
  for (int64_t i = 0; i < (count ? count : accs); ++i) {
    Acc a;
    for (int64_t e = 0; e < 4; ++e) {
      a[e] = em.lds(mem, {at(first, i, e, lane)});
      for (int64_t s = 1; s < slices; ++s)
        a[e] = kb.add(a[e],
                      em.lds(mem, {at(kb.addi(first, kb.idx(s)), i, e, lane)}));
    }
    d.push_back(a);
  }
  return d;
}

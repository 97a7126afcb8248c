//===- MoEGrouped.cpp - loop nests of the grouped MoE ops -------*- C++ -*-===//
//
// The reference lowering of k3.moe_dispatch, k3.moe_grouped_glu,
// k3.moe_grouped_down, k3.moe_combine and k3.moe_combine_add_rms_norm
// (K3MoEOps.td): the CPU target's
// kernels, and the GPU's where no dedicated kernel applies. Each sum runs
// in the order of the fused k3.moe_experts loop nest (MoE.cpp), so with f32
// activations both forms give the same bits. A shared expert in the same
// launch (k3-fuse-shared-expert) has rows T K + t after the routed ones.
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// A [T, K, ...] operand read flat: T K rows of its last dimension (or, for
/// [T, K], one flat vector of T K entries).
Value flatRows(KernelBuilder &kb, const KernelOperand &o) {
  Value rows = kb.numElements(ArrayRef<int64_t>(o.shape).take_front(2));
  if (o.shape.size() == 2)
    return kb.view(o.base, {rows});
  return kb.view(o.base, {rows, kb.idx(o.shape.back())});
}

Value ceilDiv(KernelBuilder &kb, Value a, int64_t d) {
  OpBuilder &b = kb.builder();
  return arith::DivUIOp::create(b, kb.getLoc(), kb.addi(a, kb.idx(d - 1)),
                                kb.idx(d));
}

/// The routed pair of sorted row `r`, its token and its expert.
struct SortedRow {
  Value pair, token, expert;
};
SortedRow sortedRow(KernelBuilder &kb, Value rowSource, Value indices,
                    int64_t topK, Value r) {
  OpBuilder &b = kb.builder();
  Value p = kb.loadIndex(rowSource, {r});
  Value t = arith::DivUIOp::create(b, kb.getLoc(), p, kb.idx(topK));
  return {p, t, kb.loadIndex(indices, {p})};
}

/// The sorted rows of every expert, offsets[E]: all T K pairs unless some
/// ids lie outside [0, E).
Value sortedRows(KernelBuilder &kb, const KernelOperand &offsets) {
  return kb.loadIndex(offsets.full, {kb.idx(offsets.shape[0] - 1)});
}

} // namespace

LogicalResult k3::emitMoEDispatch(MoEDispatchOp op, KernelBuilder &kb, In in,
                                  Out out) {
  auto ops = operandsOf(op, in);
  Value idx = flatRows(kb, ops.getIndices());
  Value src = flatRows(kb, resultOf(out, op.getRowSource())),
        pos = flatRows(kb, resultOf(out, op.getPositions())),
        offsets = resultOf(out, op.getOffsets()).full,
        tiles = resultOf(out, op.getTileOffsets()).full;
  Value pairs = kb.numElements(ArrayRef<int64_t>(ops.getIndices().shape));
  int64_t experts = op.getNumExperts(), tileRows = op.getTileRows();
  // Counts and their prefix sums, one expert after another: a short serial
  // phase (E counts of T K entries each).
  kb.parallel({kb.idx(1)}, [&](ValueRange) {
    Value zero = kb.idx(0);
    SmallVector<Value> end =
        kb.reduceN(zero, kb.idx(experts), {zero, zero},
                   [&](Value e, ValueRange acc) -> SmallVector<Value> {
                     kb.storeIndex(acc[0], offsets, {e});
                     kb.storeIndex(acc[1], tiles, {e});
                     Value count =
                         kb.reduce(pairs, zero, [&](Value p, Value c) {
                           Value mine = kb.eqi(kb.loadIndex(idx, {p}), e);
                           return kb.select(mine, kb.addi(c, kb.idx(1)), c);
                         });
                     return {kb.addi(acc[0], count),
                             kb.addi(acc[1], ceilDiv(kb, count, tileRows))};
                   });
    kb.storeIndex(end[0], offsets, {kb.idx(experts)});
    kb.storeIndex(end[1], tiles, {kb.idx(experts)});
  });
  // A pair whose id is outside [0, E) (another rank's expert,
  // k3.moe_local_ids) is in no segment: position -1, which the combine
  // skips; the grouped GEMMs run the offsets[E] sorted rows only.
  kb.parallel({pairs},
              [&](ValueRange iv) { kb.storeIndex(kb.idx(-1), pos, {iv[0]}); });
  // Each expert's pairs in increasing order from its offset.
  kb.parallel({kb.idx(experts)}, [&](ValueRange iv) {
    Value e = iv[0];
    kb.reduce(pairs, kb.loadIndex(offsets, {e}), [&](Value p, Value cursor) {
      Value mine = kb.eqi(kb.loadIndex(idx, {p}), e);
      kb.ifThen(mine, [&] {
        kb.storeIndex(p, src, {cursor});
        kb.storeIndex(cursor, pos, {p});
      });
      return kb.select(mine, kb.addi(cursor, kb.idx(1)), cursor);
    });
  });
  return success();
}

LogicalResult k3::emitMoEGroupedGLU(MoEGroupedGLUOp op, KernelBuilder &kb,
                                    In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand x = ops.getInput(), w1 = ops.getW1();
  int64_t topK = ops.getIndices().shape[1], inter = w1.shape[1],
          hidden = x.shape[1];
  Value idx = flatRows(kb, ops.getIndices()),
        src = flatRows(kb, ops.getRowSource()), h = flatRows(kb, out[0]);
  Value pairs = kb.numElements(ArrayRef<int64_t>(ops.getIndices().shape));
  GLUActivation act = op.getActivation();
  std::optional<double> beta = optionalDouble(op.getBetaAttr()),
                        lbeta = optionalDouble(op.getLinearBetaAttr());
  WeightElements gate(kb, w1), up(kb, ops.getW3());
  Value sorted = sortedRows(kb, ops.getOffsets());
  kb.parallelWarps({pairs, kb.idx(inter)}, [&](ValueRange iv) {
    kb.ifThen(kb.lti(iv[0], sorted), [&] {
      SortedRow row = sortedRow(kb, src, idx, topK, iv[0]);
      kb.store(emitGLUChannel(kb, act, beta, lbeta, x.full, row.token, gate, up,
                              row.expert, iv[1], hidden),
               h, iv);
    });
  });
  if (!op.hasSharedExpert())
    return success();
  // The shared expert: rows T K + t, every token, one expert.
  WeightElements sharedGate(kb, ops.getSharedW1()),
      sharedUp(kb, ops.getSharedW3());
  kb.parallelWarps({kb.dim(x.shape[0]), kb.idx(inter)}, [&](ValueRange iv) {
    kb.store(emitGLUChannel(kb, act, beta, lbeta, x.full, iv[0], sharedGate,
                            sharedUp, /*expert=*/Value(), iv[1], hidden),
             h, {kb.addi(pairs, iv[0]), iv[1]});
  });
  return success();
}

LogicalResult k3::emitMoEGroupedDown(MoEGroupedDownOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand w2 = ops.getW2();
  int64_t topK = ops.getIndices().shape[1], inter = w2.shape[2],
          width = w2.shape[1];
  Value idx = flatRows(kb, ops.getIndices()),
        src = flatRows(kb, ops.getRowSource()),
        wts = flatRows(kb, ops.getWeights()), h = flatRows(kb, ops.getInput()),
        y = flatRows(kb, out[0]);
  Value pairs = kb.numElements(ArrayRef<int64_t>(ops.getIndices().shape));
  WeightElements down(kb, w2);
  Value sorted = sortedRows(kb, ops.getOffsets());
  kb.parallelWarps({pairs, kb.idx(width)}, [&](ValueRange iv) {
    kb.ifThen(kb.lti(iv[0], sorted), [&] {
      SortedRow row = sortedRow(kb, src, idx, topK, iv[0]);
      Value dot = emitDownRow(kb, down, row.expert, iv[1], h, {iv[0]}, inter);
      kb.store(kb.mul(dot, kb.load(wts, {row.pair})), y, iv);
    });
  });
  if (!op.hasSharedExpert())
    return success();
  // The shared expert's rows T K + t, weight one.
  WeightElements sharedDown(kb, ops.getSharedW2());
  kb.parallelWarps({kb.dim(ops.getIndices().shape[0]), kb.idx(width)},
                   [&](ValueRange iv) {
                     Value r = kb.addi(pairs, iv[0]);
                     kb.store(emitDownRow(kb, sharedDown, /*expert=*/Value(),
                                          iv[1], h, {r}, inter),
                              y, {r, iv[1]});
                   });
  return success();
}

namespace {

/// One token's combine: its rows summed in slot order (positions -1 add 0;
/// the shared expert's row T K + t last), then, as the k3.add it replaced
/// read the sum, rounded to `rounded` and the addend.
struct CombineNest {
  CombineNest(KernelBuilder &kb, const KernelOperand &rowsOp,
              const KernelOperand &positions, const KernelOperand &addend,
              Type rounded)
      : kb(kb), topK(positions.shape[1]), rows(flatRows(kb, rowsOp)),
        pos(positions.full), addend(addend ? addend.full : Value()),
        rounded(rounded) {
    shared = rowsOp.shape[1] == topK + 1;
    pairs = kb.numElements(ArrayRef<int64_t>(positions.shape));
  }

  Value at(Value t, Value d) {
    Value acc;
    for (int64_t j = 0; j < topK; ++j) {
      Value p = kb.loadIndex(pos, {t, kb.idx(j)});
      Value valid = kb.gei(p, kb.idx(0));
      Value a = kb.load(rows, {kb.select(valid, p, kb.idx(0)), d});
      a = kb.select(valid, a, kb.f32(0.0));
      acc = j == 0 ? a : kb.add(a, acc);
    }
    if (shared)
      acc = kb.add(kb.load(rows, {kb.addi(pairs, t), d}), acc);
    if (addend) {
      acc = kb.roundTo(acc, rounded);
      acc = kb.add(acc, kb.load(addend, {t, d}));
    }
    return acc;
  }

  KernelBuilder &kb;
  int64_t topK;
  bool shared = false;
  Value rows, pos, addend, pairs;
  Type rounded;
};

} // namespace

LogicalResult k3::emitMoECombine(MoECombineOp op, KernelBuilder &kb, In in,
                                 Out out) {
  auto ops = operandsOf(op, in);
  Value y = out[0].full;
  CombineNest combine(kb, ops.getRows(), ops.getPositions(), ops.getAddend(),
                      cast<MemRefType>(y.getType()).getElementType());
  kb.parallel({kb.dim(ops.getPositions().shape[0]), kb.idx(out[0].shape[1])},
              [&](ValueRange iv) {
                kb.store(combine.at(iv[0], iv[1]), y, {iv[0], iv[1]});
              });
  return success();
}

LogicalResult k3::emitMoECombineAddRMSNorm(MoECombineAddRMSNormOp op,
                                           KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand sumOut = resultOf(out, op.getSum()),
                resOut = resultOf(out, op.getResult());
  Value s = sumOut.full, y = resOut.full, x = ops.getInput().full,
        w = ops.getWeight().full;
  Type sumType = cast<MemRefType>(s.getType()).getElementType();
  CombineNest combine(kb, ops.getRows(), ops.getPositions(), ops.getAddend(),
                      sumType);
  int64_t n = sumOut.shape[1];
  Value cols = kb.idx(n);
  double eps = op.getEpsilon().convertToDouble();
  // k3.add_rms_norm's loop nest (Fused.cpp) with the combine's value, as
  // its kernel stored it, in place of the load of its operand.
  kb.parallel({kb.dim(sumOut.shape[0])}, [&](ValueRange iv) {
    Value t = iv[0];
    Value ss = kb.reduce(cols, kb.f32(0.0), [&](Value i, Value acc) {
      Value c = kb.roundTo(combine.at(t, i), sumType);
      kb.store(kb.add(kb.load(x, {t, i}), c), s, {t, i});
      Value v = kb.load(s, {t, i});
      return kb.fma(v, v, acc);
    });
    Value inv = kb.rsqrt(kb.add(kb.div(ss, kb.f32(n)), kb.f32(eps)));
    kb.forRange(cols, [&](Value i) {
      Value v = kb.mul(kb.mul(kb.load(s, {t, i}), inv), kb.load(w, {i}));
      kb.store(v, y, {t, i});
    });
  });
  return success();
}

//===- Dense.cpp - kernels of the dense building blocks ---------*- C++ -*-===//
//
// Embedding, linear projections, norms, elementwise ops, greedy sampling
// and the data movement of slices, concatenation and copies.
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

/// Views `t` as [rows, last] with rows the product of the leading dims.
static Value as2D(KernelBuilder &kb, const KernelOperand &t) {
  Value rows = kb.numElements(ArrayRef<int64_t>(t.shape).drop_back());
  return kb.view(t.base, {rows, kb.dim(t.shape.back())});
}

static Value flat(KernelBuilder &kb, const KernelOperand &t) {
  return kb.view(t.base, {kb.numElements(t.shape)});
}

LogicalResult k3::emitEmbedding(EmbeddingOp op, KernelBuilder &kb,
                                ArrayRef<KernelOperand> in,
                                ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  Value ids = ops.getIds().full, table = ops.getTable().full, res = out[0].full;
  kb.parallel({kb.dim(out[0].shape[0]), kb.dim(out[0].shape[1])},
              [&](ValueRange iv) {
                Value row = kb.loadIndex(ids, {iv[0]});
                kb.store(kb.load(table, {row, iv[1]}), res, {iv[0], iv[1]});
              });
  return success();
}

/// y = x w^T over x's rows: one parallel loop nest.
static void linearRows(KernelBuilder &kb, const KernelOperand &input,
                       const KernelOperand &weight,
                       const KernelOperand &result) {
  Value x = as2D(kb, input), w = weight.full, y = as2D(kb, result);
  Value rows = kb.numElements(ArrayRef<int64_t>(input.shape).drop_back());
  Value nIn = kb.dim(weight.shape[1]), nOut = kb.dim(weight.shape[0]);
  kb.parallel({rows, nOut}, [&](ValueRange iv) {
    Value acc = kb.reduce(nIn, kb.f32(0.0), [&](Value i, Value acc) {
      return kb.fma(kb.load(x, {iv[0], i}), kb.load(w, {iv[1], i}), acc);
    });
    kb.store(acc, y, {iv[0], iv[1]});
  });
}

LogicalResult k3::emitLinear(LinearOp op, KernelBuilder &kb,
                             ArrayRef<KernelOperand> in,
                             ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  linearRows(kb, ops.getInput(), ops.getWeight(), out[0]);
  return success();
}

LogicalResult k3::emitLinearGroup(LinearGroupOp op, KernelBuilder &kb,
                                  ArrayRef<KernelOperand> in,
                                  ArrayRef<KernelOperand> out) {
  // Operands: the input, then the weights in result order.
  for (size_t i = 0; i < out.size(); ++i)
    linearRows(kb, in[0], in[1 + i], out[i]);
  return success();
}

/// y[r, :n] = w * x[r, :n] / sqrt(mean(x[r, :n]^2) + eps) [* sigmoid(gate)],
/// and y[r, n:width] = x[r, n:width] (k3.partial_rms_norm's copied
/// columns; none where width is n).
static void rmsNormRows(KernelBuilder &kb, Value x, Value gate, Value w,
                        Value y, Value rows, int64_t n, double eps,
                        int64_t width = 0) {
  kb.parallel({rows}, [&](ValueRange iv) {
    Value ss = kb.reduce(kb.idx(n), kb.f32(0.0), [&](Value i, Value acc) {
      Value v = kb.load(x, {iv[0], i});
      return kb.fma(v, v, acc);
    });
    Value r = kb.rsqrt(kb.add(kb.div(ss, kb.f32(n)), kb.f32(eps)));
    kb.forRange(kb.idx(n), [&](Value i) {
      Value v = kb.mul(kb.mul(kb.load(x, {iv[0], i}), r), kb.load(w, {i}));
      if (gate)
        v = kb.mul(v, kb.sigmoid(kb.load(gate, {iv[0], i})));
      kb.store(v, y, {iv[0], i});
    });
    if (width > n)
      kb.forRange(kb.idx(n), kb.idx(width), [&](Value i) {
        kb.store(kb.load(x, {iv[0], i}), y, {iv[0], i});
      });
  });
}

LogicalResult k3::emitRMSNorm(RMSNormOp op, KernelBuilder &kb,
                              ArrayRef<KernelOperand> in,
                              ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput();
  Value rows = kb.numElements(ArrayRef<int64_t>(input.shape).drop_back());
  rmsNormRows(kb, as2D(kb, input), Value(), ops.getWeight().full,
              as2D(kb, out[0]), rows, input.shape.back(),
              op.getEpsilon().convertToDouble());
  return success();
}

LogicalResult k3::emitPartialRMSNorm(PartialRMSNormOp op, KernelBuilder &kb,
                                     ArrayRef<KernelOperand> in,
                                     ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput();
  Value rows = kb.numElements(ArrayRef<int64_t>(input.shape).drop_back());
  int64_t normalized =
      cast<RankedTensorType>(op.getWeight().getType()).getDimSize(0);
  rmsNormRows(kb, as2D(kb, input), Value(), ops.getWeight().full,
              as2D(kb, out[0]), rows, normalized,
              op.getEpsilon().convertToDouble(), input.shape.back());
  return success();
}

LogicalResult k3::emitGatedRMSNorm(GatedRMSNormOp op, KernelBuilder &kb,
                                   ArrayRef<KernelOperand> in,
                                   ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput();
  Value rows = kb.numElements(ArrayRef<int64_t>(input.shape).drop_back());
  rmsNormRows(kb, as2D(kb, input), as2D(kb, ops.getGate()),
              ops.getWeight().full, as2D(kb, out[0]), rows, input.shape.back(),
              op.getEpsilon().convertToDouble());
  return success();
}

LogicalResult k3::emitAdd(AddOp op, KernelBuilder &kb,
                          ArrayRef<KernelOperand> in,
                          ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  Value a = flat(kb, ops.getLhs()), b = flat(kb, ops.getRhs()),
        y = flat(kb, out[0]);
  kb.parallel({kb.numElements(out[0].shape)}, [&](ValueRange iv) {
    kb.store(kb.add(kb.load(a, iv), kb.load(b, iv)), y, iv);
  });
  return success();
}

LogicalResult k3::emitSigmoidGate(SigmoidGateOp op, KernelBuilder &kb,
                                  ArrayRef<KernelOperand> in,
                                  ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  Value a = flat(kb, ops.getInput()), g = flat(kb, ops.getGate()),
        y = flat(kb, out[0]);
  kb.parallel({kb.numElements(out[0].shape)}, [&](ValueRange iv) {
    kb.store(kb.mul(kb.load(a, iv), kb.sigmoid(kb.load(g, iv))), y, iv);
  });
  return success();
}

LogicalResult k3::emitArgmax(ArgmaxOp op, KernelBuilder &kb,
                             ArrayRef<KernelOperand> in,
                             ArrayRef<KernelOperand> out) {
  KernelOperand input = operandsOf(op, in).getLogits();
  Value logits = input.full, res = out[0].full;
  Value vocab = kb.dim(input.shape[1]);
  kb.parallel({kb.dim(input.shape[0])}, [&](ValueRange iv) {
    // The first maximum wins, as numpy.argmax.
    Value first = kb.load(logits, {iv[0], kb.idx(0)});
    SmallVector<Value> best = kb.reduceN(
        kb.idx(1), vocab, {first, kb.idx(0)},
        [&](Value v, ValueRange acc) -> SmallVector<Value> {
          Value x = kb.load(logits, {iv[0], v});
          Value better = kb.gtf(x, acc[0]);
          return {kb.select(better, x, acc[0]), kb.select(better, v, acc[1])};
        });
    kb.storeIndex(best[1], res, {iv[0]});
  });
  return success();
}

LogicalResult k3::emitCopy(KernelBuilder &kb, const KernelOperand &src,
                           const KernelOperand &dst) {
  Value a = flat(kb, src), y = flat(kb, dst);
  kb.parallel({kb.numElements(dst.shape)},
              [&](ValueRange iv) { kb.store(kb.load(a, iv), y, iv); });
  return success();
}

LogicalResult k3::emitAttnResPush(AttnResPushOp op, KernelBuilder &kb,
                                  ArrayRef<KernelOperand> in,
                                  ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  KernelOperand blocksIn = ops.getBlocks(), partialIn = ops.getPartial();
  // Closed blocks first, then the partial sum, in one flat copy each.
  Value blocks = flat(kb, blocksIn), partial = flat(kb, partialIn),
        y = flat(kb, out[0]);
  Value nb = kb.numElements(blocksIn.shape),
        np = kb.numElements(partialIn.shape);
  kb.parallel({nb},
              [&](ValueRange iv) { kb.store(kb.load(blocks, iv), y, iv); });
  kb.parallel({np}, [&](ValueRange iv) {
    kb.store(kb.load(partial, iv), y, {kb.addi(iv[0], nb)});
  });
  return success();
}

LogicalResult k3::emitExtractSlice(tensor::ExtractSliceOp op, KernelBuilder &kb,
                                   ArrayRef<KernelOperand> in,
                                   ArrayRef<KernelOperand> out) {
  // An upstream op, outside the K3 adaptors: `in` holds its one tensor
  // operand, the source (index operands are folded into the shapes).
  const KernelOperand &source = in[0];
  if (!op.hasUnitStride())
    return op.emitOpError() << "strided slices are not supported by the "
                               "kernel generator";
  SmallVector<Value> offsets;
  for (OpFoldResult ofr : op.getMixedOffsets()) {
    auto a = dyn_cast<Attribute>(ofr);
    if (!a)
      return op.emitOpError() << "needs constant slice offsets";
    offsets.push_back(kb.idx(cast<IntegerAttr>(a).getInt()));
  }
  SmallVector<Value> ubs;
  for (int64_t d : out[0].shape)
    ubs.push_back(kb.dim(d));
  kb.parallel(ubs, [&](ValueRange iv) {
    SmallVector<Value> src;
    for (auto [i, o] : llvm::zip(iv, offsets))
      src.push_back(kb.addi(i, o));
    kb.store(kb.load(source.full, src), out[0].full, iv);
  });
  return success();
}

LogicalResult k3::emitConcat(tensor::ConcatOp op, KernelBuilder &kb,
                             ArrayRef<KernelOperand> in,
                             ArrayRef<KernelOperand> out) {
  // An upstream op: `in` holds the concatenated tensors, in order.
  int64_t dim = op.getDim(), offset = 0;
  for (const KernelOperand &src : in) {
    SmallVector<Value> ubs;
    for (int64_t d : src.shape)
      ubs.push_back(kb.dim(d));
    kb.parallel(ubs, [&](ValueRange iv) {
      SmallVector<Value> dst(iv.begin(), iv.end());
      dst[dim] = kb.addi(dst[dim], kb.idx(offset));
      kb.store(kb.load(src.full, iv), out[0].full, dst);
    });
    offset += src.shape[dim];
  }
  return success();
}

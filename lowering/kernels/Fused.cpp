//===- Fused.cpp - kernels of the graph-level fusions -----------*- C++ -*-===//
//
// k3.last_tokens (the rows the LM head needs), k3.last_token_context (the
// last tokens' cache positions, k3-last-token-logits) and k3.add_rms_norm (the
// residual add and the RMSNorm of its sum in one pass over each row).
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult k3::emitLastTokens(LastTokensOp op, KernelBuilder &kb,
                                 ArrayRef<KernelOperand> in,
                                 ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  Value x = ops.getInput().full, cu = ops.getCuSeqlens().full, y = out[0].full;
  kb.parallel({kb.dim(out[0].shape[0]), kb.dim(out[0].shape[1])},
              [&](ValueRange iv) {
                Value start = kb.loadIndex(cu, {iv[0]});
                Value end = kb.loadIndex(cu, {kb.addi(iv[0], kb.idx(1))});
                // An empty sequence has no last token: a row of zeros (the
                // clamped load stays in bounds).
                Value row = kb.maxsi(kb.subi(end, kb.idx(1)), kb.idx(0));
                Value v = kb.load(x, {row, iv[1]});
                Value nonEmpty = kb.lti(start, end);
                kb.store(kb.select(nonEmpty, v, kb.f32(0.0)), y, iv);
              });
  return success();
}

// Per offset n of the result's N + 1: n itself, and below N the cache
// position of sequence n's last token.
LogicalResult k3::emitLastTokenContext(LastTokenContextOp op, KernelBuilder &kb,
                                       ArrayRef<KernelOperand> in,
                                       ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  Value cu = ops.getCuSeqlens().full, ctx = ops.getContextLens().full;
  KernelOperand lens = resultOf(out, op.getLastContextLens()),
                lastCu = resultOf(out, op.getLastCuSeqlens());
  Value seqs = kb.dim(lens.shape[0]);
  kb.parallel({kb.addi(seqs, kb.idx(1))}, [&](ValueRange iv) {
    Value n = iv[0];
    kb.storeIndex(n, lastCu.full, {n});
    kb.ifThen(kb.lti(n, seqs), [&] {
      Value len = kb.subi(kb.loadIndex(cu, {kb.addi(n, kb.idx(1))}),
                          kb.loadIndex(cu, {n}));
      Value before = kb.maxsi(kb.subi(len, kb.idx(1)), kb.idx(0));
      kb.storeIndex(kb.addi(kb.loadIndex(ctx, {n}), before), lens.full, {n});
    });
  });
  return success();
}

LogicalResult k3::emitAddRMSNorm(AddRMSNormOp op, KernelBuilder &kb,
                                 ArrayRef<KernelOperand> in,
                                 ArrayRef<KernelOperand> out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput();
  KernelOperand sumOut = resultOf(out, op.getSum()),
                resOut = resultOf(out, op.getResult());
  int64_t n = input.shape.back();
  Value rows = kb.numElements(ArrayRef<int64_t>(input.shape).drop_back());
  Value cols = kb.dim(n);
  Value x = kb.view(input.base, {rows, cols}),
        r = kb.view(ops.getResidual().base, {rows, cols}),
        s = kb.view(sumOut.base, {rows, cols}),
        y = kb.view(resOut.base, {rows, cols}), w = ops.getWeight().full;
  double eps = op.getEpsilon().convertToDouble();
  kb.parallel({rows}, [&](ValueRange iv) {
    // The sum is stored in its own type and normalised as stored, so the
    // fused kernel computes what k3.add then k3.rms_norm compute.
    Value ss = kb.reduce(cols, kb.f32(0.0), [&](Value i, Value acc) {
      kb.store(kb.add(kb.load(x, {iv[0], i}), kb.load(r, {iv[0], i})), s,
               {iv[0], i});
      Value v = kb.load(s, {iv[0], i});
      return kb.fma(v, v, acc);
    });
    Value inv = kb.rsqrt(kb.add(kb.div(ss, kb.f32(n)), kb.f32(eps)));
    kb.forRange(cols, [&](Value i) {
      Value v = kb.mul(kb.mul(kb.load(s, {iv[0], i}), inv), kb.load(w, {i}));
      kb.store(v, y, {iv[0], i});
    });
  });
  return success();
}

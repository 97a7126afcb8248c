//===- KDA.cpp - kernels of the KDA token mixer -----------------*- C++ -*-===//
//
// The short convolution, the decay gate and the token-by-token gated delta
// rule. The recurrence is the reference form (K3-SPEC.md §2 step 5): each
// value column j of the state evolves independently,
//
//   S[:, j] <- exp(g_t) * S[:, j];  u = beta_t (v_t[j] - S[:, j] . k_t)
//   S[:, j] <- S[:, j] + u k_t;     o_t[j] = scale * S[:, j] . q_t
//
// so the kernel is parallel over (sequence, head, value column) and keeps
// its column in the final-state output while it walks the tokens. The
// chunkwise form replaces it where tensor cores pay (k3-kda-chunkwise).
//
//===----------------------------------------------------------------------===//
#include "lowering/DecayGate.h"
#include "lowering/kernels/Kernels.h"

#include "lowering/kernels/Operands.h"
#include <tuple>

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The loop nest of one convolution (its state and sequences optional).
void emitShortConvLoops(KernelBuilder &kb, int64_t ks,
                        const KernelOperand &input, Value w,
                        const KernelOperand &state, const KernelOperand &cu,
                        Value y, const KernelOperand &finalState) {
  Value x = input.full, fs = finalState.full;
  Value numTokens = kb.dim(input.shape[0]);
  Value channels = kb.dim(input.shape[1]);
  Value seqs = kb.dim(finalState.shape[0]);
  Value history = kb.idx(ks - 1);
  // Pre-convolution input at token s of sequence n (from `start`); before
  // the sequence's first token it is the carried state (or zero).
  auto inputAt = [&](Value s, Value n, Value c, Value start) {
    return kb.ifElse(
        kb.gei(s, start), kb.builder().getF32Type(),
        [&] { return kb.load(x, {s, c}); },
        [&] {
          if (!state)
            return kb.f32(0.0);
          Value j = kb.addi(history, kb.subi(s, start));
          return kb.load(state.full, {n, c, j});
        });
  };
  kb.parallel({numTokens, channels}, [&](ValueRange iv) {
    Value t = iv[0], c = iv[1], n = kb.idx(0), start = kb.idx(0);
    if (cu)
      std::tie(start, n) = emitSequenceOf(kb, cu.full, t);
    Value acc = kb.f32(0.0);
    for (int64_t j = 0; j < ks; ++j) {
      Value s = kb.addi(t, kb.idx(j - (ks - 1)));
      acc = kb.fma(kb.load(w, {c, kb.idx(0), kb.idx(j)}),
                   inputAt(s, n, c, start), acc);
    }
    kb.store(kb.silu(acc), y, {t, c});
  });
  kb.parallel({seqs, channels}, [&](ValueRange iv) {
    Value n = iv[0], c = iv[1];
    Value start = cu ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
    Value end = cu ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))}) : numTokens;
    // Increasing j reads slots >= j of an aliased state: never one written.
    for (int64_t j = 0; j < ks - 1; ++j)
      kb.store(inputAt(kb.addi(end, kb.idx(j - (ks - 1))), n, c, start), fs,
               {n, c, kb.idx(j)});
  });
}

} // namespace

// Two phases, each parallel over all its outputs: every (token, channel)
// output (its sequence found from cu_seqlens), then every (sequence,
// channel) final state. One thread per (sequence, channel) walking the
// tokens, as before, gave a 2048-token prefill 16 blocks and 1 ms per layer
// (bench/results/profile-gpu/real4-bf16-T2048.txt).
LogicalResult k3::emitShortConv(ShortConvOp op, KernelBuilder &kb, In in,
                                Out out) {
  auto ops = operandsOf(op, in);
  emitShortConvLoops(kb, op.getKernelSize(), ops.getInput(),
                     ops.getWeight().full, ops.getConvState(),
                     ops.getCuSeqlens(), resultOf(out, op.getResult()).full,
                     resultOf(out, op.getFinalState()));
  return success();
}

LogicalResult k3::emitShortConvGroup(ShortConvGroupOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  for (size_t i = 0; i < op.getInputs().size(); ++i)
    emitShortConvLoops(kb, op.getKernelSize(), ops.getInputs()[i],
                       ops.getWeights()[i].full, ops.getConvStates()[i],
                       ops.getCuSeqlens(),
                       resultOf(out, op.getResults()[i]).full,
                       resultOf(out, op.getFinalStates()[i]));
  return success();
}

Value mlir::k3::emitDecayGate(KernelBuilder &kb, DecayGateKind kind,
                              std::optional<double> lowerBound, Value aLog,
                              Value dtBias, Value h, Value i, Value headDim,
                              Value z) {
  Value a = kb.exp(kb.load(aLog, {h}));
  Value u = kb.add(z, kb.load(dtBias, {kb.addi(kb.muli(h, headDim), i)}));
  return emitGateLogDecay(kb, kind, lowerBound, a, u);
}

Value mlir::k3::emitInvL2Norm(KernelBuilder &kb, Value x, Value b, Value t,
                              Value h, Value headDim) {
  Value ss = kb.reduce(headDim, kb.f32(0.0), [&](Value i, Value acc) {
    Value e = kb.load(x, {b, t, h, i});
    return kb.fma(e, e, acc);
  });
  return kb.rsqrt(kb.add(ss, kb.f32(1e-6)));
}

LogicalResult k3::emitKDAGate(KDAGateOp op, KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput();
  Value z = input.full, aLog = ops.getALog().full,
        dtBias = ops.getDtBias().full, g = out[0].full;
  int64_t headDim = input.shape[2];
  kb.parallel({kb.dim(input.shape[0]), kb.dim(input.shape[1]), kb.idx(headDim)},
              [&](ValueRange iv) {
                Value v = emitDecayGate(kb, op.getKind(),
                                        optionalDouble(op.getLowerBoundAttr()),
                                        aLog, dtBias, iv[1], iv[2],
                                        kb.idx(headDim), kb.load(z, iv));
                kb.store(v, g, iv);
              });
  return success();
}

LogicalResult k3::emitKDARecurrent(KDAOp op, KernelBuilder &kb, In in,
                                   Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand qIn = ops.getQ(), vIn = ops.getV();
  Value q = qIn.full, k = ops.getK().full, v = vIn.full, g = ops.getG().full,
        beta = ops.getBeta().full;
  KernelOperand init = ops.getInitialState(), cu = ops.getCuSeqlens(),
                aLog = ops.getALog(), dtBias = ops.getDtBias();
  KernelOperand finalState = resultOf(out, op.getFinalState());
  Value o = resultOf(out, op.getOutput()).full, fs = finalState.full;

  int64_t headDim = qIn.shape[3], valueDim = vIn.shape[3];
  Value numTokens = kb.dim(qIn.shape[1]);
  Value kDim = kb.idx(headDim);
  double scale = op.getScale().convertToDouble();
  bool l2 = op.getUseQkL2norm(), sigmoidBeta = op.getUseBetaSigmoid();
  auto gateKind = op.getGateKind();
  std::optional<double> lowerBound = optionalDouble(op.getLowerBoundAttr());

  // Column j of this head's state, in f32 for the whole call: the state
  // is rounded to its storage type (bf16 under kda-state-dtype=bf16) once,
  // when the call stores it.
  Value col = kb.scratch(headDim);
  kb.parallel(
      {kb.dim(finalState.shape[0]), kb.dim(finalState.shape[1]),
       kb.idx(valueDim)},
      [&](ValueRange iv) {
        Value n = iv[0], h = iv[1], j = iv[2];
        Value b = cu ? kb.idx(0) : n;
        Value start = cu ? kb.loadIndex(cu.full, {n}) : kb.idx(0);
        Value end =
            cu ? kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))}) : numTokens;
        kb.forRange(kDim, [&](Value i) {
          Value s0 = init ? kb.load(init.full, {n, h, i, j}) : kb.f32(0.0);
          kb.store(s0, col, {i});
        });
        kb.forRange(start, end, [&](Value t) {
          auto invNorm = [&](Value x) {
            return l2 ? emitInvL2Norm(kb, x, b, t, h, kDim) : kb.f32(1.0);
          };
          Value rq = invNorm(q), rk = invNorm(k);
          Value bt = kb.load(beta, {b, t, h});
          if (sigmoidBeta)
            bt = kb.sigmoid(bt);
          // Decay the column, and read what the state predicts for k.
          Value pred = kb.reduce(kDim, kb.f32(0.0), [&](Value i, Value acc) {
            Value gi = kb.load(g, {b, t, h, i});
            if (gateKind)
              gi = emitDecayGate(kb, *gateKind, lowerBound, aLog.full,
                                 dtBias.full, h, i, kDim, gi);
            Value s = kb.mul(kb.exp(gi), kb.load(col, {i}));
            kb.store(s, col, {i});
            return kb.fma(s, kb.mul(kb.load(k, {b, t, h, i}), rk), acc);
          });
          Value u = kb.mul(bt, kb.sub(kb.load(v, {b, t, h, j}), pred));
          // Write the correction and read the output with q.
          Value acc = kb.reduce(kDim, kb.f32(0.0), [&](Value i, Value acc) {
            Value ki = kb.mul(kb.load(k, {b, t, h, i}), rk);
            Value s = kb.fma(ki, u, kb.load(col, {i}));
            kb.store(s, col, {i});
            return kb.fma(s, kb.mul(kb.load(q, {b, t, h, i}), rq), acc);
          });
          kb.store(kb.mul(acc, kb.f32(scale)), o, {b, t, h, j});
        });
        kb.forRange(kDim, [&](Value i) {
          kb.store(kb.load(col, {i}), fs, {n, h, i, j});
        });
      });
  return success();
}

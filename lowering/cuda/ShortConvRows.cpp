//===- ShortConvRows.cpp - k3.short_conv by channel ------------*- C++ -*-===//
//
// KDA's causal depthwise convolution (config kernel `short_conv_rows`, tile
// [TT] or [TT, V]): a block of 32 W threads per (TT consecutive tokens,
// 32 W V channels); a thread's V consecutive channels walk its tile's
// tokens in order with the last kernel_size - 1 inputs of each channel in
// registers, so each input is read once and the taps come from registers.
// V channels a thread make each token's load and store one vector of V
// elements (a warp moved 64 bytes an instruction with one bf16 channel a
// thread). That was not what held the kernel at 2.5x its bytes' time:
// V = 4 took 0.0897 ms a call against 0.0945 at T = 8192 and 4096 channels
// (bench/results/e2e-checks/short-conv-vec-ab-nvidia-h200-20261204T0110Z.txt);
// the cause is not found yet. A straight-line copy of the walk for the
// tiles inside one sequence (past its first kernel_size - 1 tokens, before
// its last: no bounds, window state or final state per token; about 540
// SASS instructions for a thread's 32 outputs) did not cut the time by
// itself: 0.0554-0.0559 ms a call against 0.0547-0.0550 on an H100, at 125
// registers; capped at 96 (five blocks an SM, the default) 0.0523-0.0526
// (bench/results/e2e-checks/
// short-conv-inside-profile-cut4-nvidia-h100-20261206T1740Z.txt). On the
// H100 that is 2.5 TB/s of its 3.35.
// The loop nest gave every output its own thread, which searched cu_seqlens,
// loaded kernel_size inputs and kernel_size weights, and ran a second launch
// for the final state (0.26 ms per call at T = 8192 and 4096 channels on the
// H200: bench/results/profile-gpu/real4-bf16-T8192.txt).
//
// Per thread: the channel's weights in registers, the tile's inputs loaded
// up front; the sequence of the tile's first token by the loop nest's scan,
// then advanced as the tokens pass sequence ends (a while loop: empty
// sequences too). At a sequence's
// first token the window is its carried state (or zeros); the output is
// silu of the taps summed in the loop nest's order, the silu by the
// special-function unit (MMAEmitter::siluApprox, within a few ulp of the
// loop nest's: Nsight Compute found the kernel issue-bound, 72 % of issue
// slots busy and DRAM 38 % at T = 8192 and 4096 channels, bench/results/
// ncu/ncu-short-conv-cut4-T8192-20261204T1838Z.txt); at a sequence's last
// token the window is its final state.
// Empty sequences have no token: the blocks of the first token tile copy
// their state (or zeros) through.
//
// In prefill final_state is its own buffer (k3.state_write's copy moves it
// back), so reading conv_state and writing final_state from different
// blocks does not race. In the decode entry a sequence has one token, so
// one thread reads and then writes each (sequence, channel) window, and
// final_state is conv_state's buffer (lowering/StateInPlace.h).
//
// In the decode entry (a sequence has at most one token) the kernel takes
// a thread per (sequence, channel) instead: the sequence's bounds, the
// weights and the carried window are independent loads, and only the
// token's input waits for the bounds, two memory round trips. The token
// form searched cu_seqlens, then loaded the bounds, then the window, and
// walked every sequence for empty ones: 7.7 us per call, 60 calls per
// decode step of Kimi-Linear-48B (bench/results/profile-gpu/
// ncu-kl48b-decode-B1-20261203T1242Z-f9d92c8.txt). k3.short_conv_group (a
// KDA layer's q, k and v convolutions, k3-group-short-convs) lays its
// members' channel blocks end to end in one grid of that form.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// One convolution's operands in the kernel.
struct ConvOperands {
  Value x, w, state, y, fs, cuSeqlens;
  KernelOperand input, result, weight; // for the vector views of x, y, w
  int64_t tokensDim = 0, channels = 0, seqsDim = 0;
};

ConvOperands
convOperands(const KernelOperand &input, const KernelOperand &weight,
             const KernelOperand &state, const KernelOperand &result,
             const KernelOperand &finalState, const KernelOperand &cuSeqlens) {
  ConvOperands m;
  m.x = input.full;
  m.input = input;
  m.w = weight.full;
  m.weight = weight;
  m.y = result.full;
  m.result = result;
  m.fs = finalState.full;
  if (state)
    m.state = state.full;
  if (cuSeqlens)
    m.cuSeqlens = cuSeqlens.full;
  m.tokensDim = input.shape[0];
  m.channels = input.shape[1];
  m.seqsDim = finalState.shape[0];
  return m;
}

class ShortConvKernel {
public:
  ShortConvKernel(const ConvOperands &m, KernelBuilder &kb, int64_t threads,
                  int64_t kernelSize, int64_t tokensPerTile,
                  int64_t channelsPerThread = 1)
      : kb(kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        tile(tokensPerTile), threads(threads), vec(channelsPerThread),
        ks(kernelSize), tokensDim(m.tokensDim), channels(m.channels),
        seqsDim(m.seqsDim), m(m), x(m.x), w(m.w), y(m.y), fs(m.fs),
        state(m.state), cuSeqlens(m.cuSeqlens) {}

  /// Channel blocks of the token form (`vec` channels a thread).
  int64_t channelBlocks() const {
    return (channels + threads * vec - 1) / (threads * vec);
  }

  /// The decode form: sequence n, channel block `cb`; thread c.
  void emitPerSequence(Value n, Value cb) {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    c = kb.addi(kb.muli(cb, kb.idx(threads)), tid);
    numTokens = kb.dim(tokensDim);
    numSeqs = kb.dim(seqsDim);
    kb.ifThen(kb.andi(kb.lti(c, kb.idx(channels)), kb.lti(n, numSeqs)), [&] {
      Value start = seqStart(n), end = seqEnd(n);
      SmallVector<Value> wt = weights(c);
      SmallVector<Value> win;
      for (int64_t j = 0; j < ks - 1; ++j)
        win.push_back(carried(n, kb.idx(j), c));
      kb.ifThen(kb.lti(start, end), [&] {
        Value xt = kb.load(x, {start, c});
        Value acc = kb.f32(0.0);
        for (int64_t k = 0; k < ks; ++k)
          acc = kb.fma(wt[k], k + 1 < ks ? win[k] : xt, acc);
        kb.store(em.siluApprox(acc), y, {start, c});
        for (int64_t k = 0; k + 1 < ks; ++k)
          kb.store(k + 2 < ks ? win[k + 1] : xt, fs, {n, c, kb.idx(k)});
      });
      // A sequence without a token keeps its window (where final_state is
      // conv_state's buffer, a store of the values just read).
      kb.ifThen(kb.gei(start, end), [&] {
        for (int64_t k = 0; k + 1 < ks; ++k)
          kb.store(win[k], fs, {n, c, kb.idx(k)});
      });
    });
  }

  /// The token form: the token tile from `t0`, channel block `cb`; the
  /// thread's channels c .. c + vec - 1.
  void emitTokens(Value tileIndex, Value cb) {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value t0 = kb.muli(tileIndex, kb.idx(tile));
    c = kb.muli(kb.addi(kb.muli(cb, kb.idx(threads)), tid), kb.idx(vec));
    numTokens = kb.dim(tokensDim);
    numSeqs = kb.dim(seqsDim);
    if (vec > 1) {
      xRows = em.contiguousView(m.input);
      yRows = em.contiguousView(m.result);
    }
    kb.ifThen(kb.lti(c, kb.idx(channels)), [&] {
      if (vec > 1) {
        vectorWeights();
      } else {
        wt.push_back(weights(c));
      }
      kb.ifThen(kb.lti(t0, numTokens), [&] { tokens(t0); });
      kb.ifThen(kb.eqi(t0, kb.idx(0)), [&] { emptySequences(); });
    });
  }

private:
  Value channel(int64_t v) { return v ? kb.addi(c, kb.idx(v)) : c; }
  /// The thread's vec channels' taps, vec * ks consecutive elements of w
  /// from c ks, as aligned vectors of up to 16 bytes (c is a multiple of
  /// vec). Per-tap scalar loads had lanes 64 bytes apart (4 f32 taps x 4
  /// channels), 32 sectors per load instruction: 70 % of the kernel's
  /// sectors were excess (bench/results/e2e-checks/
  /// ncu-prefill-after-nvidia-h200-20261204T0813Z.txt).
  void vectorWeights() {
    Value flat = em.contiguousView(m.weight.base, {kb.idx(channels * ks)});
    Type elem = cast<MemRefType>(flat.getType()).getElementType();
    int64_t n = vec * ks, per = 16 / (elem.getIntOrFloatBitWidth() / 8);
    while (per > 1 && n % per != 0)
      per /= 2;
    SmallVector<Value> all;
    Value first = kb.muli(c, kb.idx(ks));
    for (int64_t i = 0; i < n; i += per)
      llvm::append_range(all,
                         em.loadVector(flat, kb.addi(first, kb.idx(i)), per));
    for (int64_t v = 0; v < vec; ++v)
      wt.push_back(SmallVector<Value>(ArrayRef(all).slice(v * ks, ks)));
  }
  SmallVector<Value> weights(Value ch) {
    SmallVector<Value> taps;
    for (int64_t j = 0; j < ks; ++j)
      taps.push_back(kb.load(w, {ch, kb.idx(0), kb.idx(j)}));
    return taps;
  }
  Value seqStart(Value n) {
    return cuSeqlens ? kb.loadIndex(cuSeqlens, {n}) : kb.idx(0);
  }
  Value seqEnd(Value n) {
    return cuSeqlens ? kb.loadIndex(cuSeqlens, {kb.addi(n, kb.idx(1))})
                     : numTokens;
  }
  /// Carried input j (0 oldest) of sequence n, channel ch: the state, or
  /// zero.
  Value carried(Value n, Value j, Value ch) {
    return state ? kb.load(state, {n, ch, j}) : kb.f32(0.0);
  }
  /// Token t's inputs of the thread's channels: one vector load.
  SmallVector<Value> loadInputs(Value t) {
    if (vec == 1)
      return {kb.load(x, {t, c})};
    return em.loadVector(xRows, {t, c}, vec);
  }
  /// Token t's outputs of the thread's channels: one vector store, rounded
  /// to y's type as KernelBuilder::store rounds.
  void storeOutputs(ArrayRef<Value> out, Value t) {
    if (vec == 1) {
      kb.store(out[0], y, {t, c});
      return;
    }
    Type elem = cast<MemRefType>(yRows.getType()).getElementType();
    auto f32s = VectorType::get({vec}, b.getF32Type());
    Value v = vector::FromElementsOp::create(b, loc, f32s, out);
    if (!elem.isF32())
      v = arith::TruncFOp::create(b, loc, VectorType::get({vec}, elem), v);
    auto st = vector::StoreOp::create(b, loc, v, yRows, ValueRange{t, c});
    st.setAlignment(vec * elem.getIntOrFloatBitWidth() / 8);
  }

  /// The first sequence n >= `from` that has not ended by token t.
  Value advance(Value from, Value t) {
    Type idx = b.getIndexType();
    auto loop = scf::WhileOp::create(b, loc, TypeRange{idx}, ValueRange{from});
    {
      OpBuilder::InsertionGuard g(b);
      Block *before = b.createBlock(&loop.getBefore(), {}, {idx}, {loc});
      b.setInsertionPointToStart(before);
      Value n = before->getArgument(0);
      Value more = kb.lti(kb.addi(n, kb.idx(1)), numSeqs);
      // cu[n + 1] <= t: sequence n ended before t (clamped index: read
      // only while `more`).
      Value next = kb.minsi(kb.addi(n, kb.idx(1)), kb.subi(numSeqs, kb.idx(1)));
      Value ended = kb.notb(kb.lti(t, seqStart(next)));
      scf::ConditionOp::create(b, loc, kb.andi(more, ended), ValueRange{n});
      Block *after = b.createBlock(&loop.getAfter(), {}, {idx}, {loc});
      b.setInsertionPointToStart(after);
      scf::YieldOp::create(
          b, loc, ValueRange{kb.addi(after->getArgument(0), kb.idx(1))});
    }
    return loop.getResult(0);
  }

  /// `cond` ? then() : otherwise(), both giving `n` f32 values: one scf.if
  /// for all the thread's channels.
  SmallVector<Value> select(Value cond, int64_t n,
                            function_ref<SmallVector<Value>()> then,
                            function_ref<SmallVector<Value>()> otherwise) {
    SmallVector<Type> types(n, b.getF32Type());
    auto op = scf::IfOp::create(b, loc, types, cond, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&op.getThenRegion().front());
    scf::YieldOp::create(b, loc, then());
    b.setInsertionPointToStart(&op.getElseRegion().front());
    scf::YieldOp::create(b, loc, otherwise());
    return SmallVector<Value>(op.getResults().begin(), op.getResults().end());
  }

  /// The tile's tokens [t0, min(t0 + TT, T)) in order, unrolled: the TT
  /// inputs and the kernel_size - 1 before t0 are loaded first (clamped to
  /// the tokens, independent of each other), and the sequence's bounds are
  /// reloaded only when a token passes its end, so the common token issues
  /// no dependent load. The inputs before t0 are the first token's window
  /// unless its sequence starts later than they do (then the carried
  /// state): loaded with the tile's, they no longer wait for the sequence
  /// search. Measured: 0.0778 -> 0.0761 ms a call at T = 8192 and 4096
  /// channels (bench/results/e2e-checks/
  /// short-conv-window-ab-nvidia-h200-20261204T1833Z.txt): the kernel's
  /// time is mostly elsewhere.
  void tokens(Value t0) {
    Value last = kb.subi(numTokens, kb.idx(1));
    SmallVector<SmallVector<Value>> xs;
    for (int64_t j = 0; j < tile; ++j)
      xs.push_back(loadInputs(kb.minsi(kb.addi(t0, kb.idx(j)), last)));
    SmallVector<SmallVector<Value>> before; // before[k][v]: x[t0 - span + k]
    for (int64_t k = 0; k + 1 < ks; ++k)
      before.push_back(
          loadInputs(kb.maxsi(kb.addi(t0, kb.idx(k - (ks - 1))), kb.idx(0))));
    Value n = cuSeqlens ? emitSequenceOf(kb, cuSeqlens, t0).second : kb.idx(0);
    Value start = seqStart(n), end = seqEnd(n);
    const int64_t span = ks - 1;
    // A tile inside one sequence, past its first kernel_size - 1 tokens and
    // before its last (all of a long prefill's tiles but each sequence's
    // first and last) needs no bounds, window state or final state per
    // token: its own straight-line copy of the loop. (A tile that ends
    // with its sequence writes the final state: the general walk.)
    Value inside = kb.andi(kb.gei(kb.subi(t0, kb.idx(span)), start),
                           kb.lti(kb.addi(t0, kb.idx(tile)), end));
    auto paths = scf::IfOp::create(b, loc, TypeRange{}, inside,
                                   /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&paths.getThenRegion().front());
    tokensInside(t0, xs, before);
    b.setInsertionPointToStart(&paths.getElseRegion().front());
    // win[v * (ks - 1) + k]: channel v's input k of the window (0 oldest).
    SmallVector<Value> win(vec * span, kb.f32(0.0));
    Type idx = b.getIndexType();
    for (int64_t j = 0; j < tile; ++j) {
      Value t = kb.addi(t0, kb.idx(j));
      if (cuSeqlens && j > 0) {
        auto next = scf::IfOp::create(b, loc, TypeRange{idx, idx, idx},
                                      kb.gei(t, end), /*withElse=*/true);
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(&next.getThenRegion().front());
          Value m = advance(n, t);
          scf::YieldOp::create(b, loc, ValueRange{m, seqStart(m), seqEnd(m)});
          b.setInsertionPointToStart(&next.getElseRegion().front());
          scf::YieldOp::create(b, loc, ValueRange{n, start, end});
        }
        n = next.getResult(0);
        start = next.getResult(1);
        end = next.getResult(2);
      }
      // The window: at the tile's first token the inputs before it (from
      // x, or the carried state), at a sequence's first token its carried
      // state, else the registers.
      auto fresh = [&]() -> SmallVector<Value> {
        SmallVector<Value> out;
        for (int64_t v = 0; v < vec; ++v)
          for (int64_t k = 0; k < span; ++k) {
            Value s = kb.addi(t, kb.idx(k - span)), ch = channel(v);
            out.push_back(kb.ifElse(
                kb.gei(s, start), b.getF32Type(),
                [&] {
                  // At the tile's first token s is t0 - span + k (loaded
                  // up front); past it a sequence starts at t, so s < start.
                  return j == 0 ? before[k][v] : kb.load(x, {s, ch});
                },
                [&] {
                  return carried(n, kb.addi(kb.idx(span), kb.subi(s, start)),
                                 ch);
                }));
          }
        return out;
      };
      if (span > 0) {
        if (j == 0)
          win = fresh();
        else
          win =
              select(kb.eqi(t, start), vec * span, fresh, [&] { return win; });
      }
      SmallVector<Value> out = convolve(win, xs[j]);
      Value valid = kb.lti(t, numTokens);
      Value outN = n;
      SmallVector<Value> done(win);
      kb.ifThen(valid, [&] {
        storeOutputs(out, t);
        kb.ifThen(kb.eqi(t, kb.subi(end, kb.idx(1))), [&] {
          for (int64_t v = 0; v < vec; ++v)
            for (int64_t k = 0; k < span; ++k)
              kb.store(done[v * span + k], fs, {outN, channel(v), kb.idx(k)});
        });
      });
    }
  }

  /// The outputs of the thread's channels at a token whose inputs are
  /// `in`, from the window `win` (the taps summed in the loop nest's
  /// order), and the window moved on past the token.
  SmallVector<Value> convolve(SmallVector<Value> &win, ArrayRef<Value> in) {
    const int64_t span = ks - 1;
    SmallVector<Value> out;
    for (int64_t v = 0; v < vec; ++v) {
      Value acc = kb.f32(0.0);
      for (int64_t k = 0; k < ks; ++k)
        acc = kb.fma(wt[v][k], k < span ? win[v * span + k] : in[v], acc);
      out.push_back(em.siluApprox(acc));
      if (span == 0)
        continue;
      win.erase(win.begin() + v * span);
      win.insert(win.begin() + v * span + span - 1, in[v]);
    }
    return out;
  }

  /// A tile inside one sequence, past its first kernel_size - 1 tokens
  /// (tokens(): every token exists, none starts or ends the sequence): the
  /// window starts as the inputs before t0.
  void tokensInside(Value t0, ArrayRef<SmallVector<Value>> xs,
                    ArrayRef<SmallVector<Value>> before) {
    const int64_t span = ks - 1;
    SmallVector<Value> win;
    for (int64_t v = 0; v < vec; ++v)
      for (int64_t k = 0; k < span; ++k)
        win.push_back(before[k][v]);
    for (int64_t j = 0; j < tile; ++j)
      storeOutputs(convolve(win, xs[j]), kb.addi(t0, kb.idx(j)));
  }

  /// Sequences without tokens keep their state (or zeros).
  void emptySequences() {
    kb.forRange(numSeqs, [&](Value n) {
      kb.ifThen(kb.eqi(seqStart(n), seqEnd(n)), [&] {
        for (int64_t v = 0; v < vec; ++v)
          for (int64_t j = 0; j < ks - 1; ++j)
            kb.store(carried(n, kb.idx(j), channel(v)), fs,
                     {n, channel(v), kb.idx(j)});
      });
    });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t tile, threads, vec, ks, tokensDim, channels, seqsDim;
  const ConvOperands &m;
  Value x, w, y, fs, state, cuSeqlens, c, numTokens, numSeqs;
  Value xRows, yRows; // x and y as contiguous [T, C] views (vec > 1)
  SmallVector<SmallVector<Value>> wt; // wt[v][k]: channel v's tap k
};

Value blockId(KernelBuilder &kb) {
  return gpu::BlockIdOp::create(kb.builder(), kb.getLoc(), gpu::Dimension::x);
}
struct ShortConvRowsPattern : OpKernelPattern<ShortConvOp> {
  ShortConvRowsPattern() : OpKernelPattern(KernelKind::short_conv_rows) {}
  LogicalResult emit(ShortConvOp op, Adaptor a,
                     KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    KernelOperand finalState = resultOf(e.outputs, op.getFinalState());
    ConvOperands m = convOperands(
        ops.getInput(), ops.getWeight(), ops.getConvState(),
        resultOf(e.outputs, op.getResult()), finalState, ops.getCuSeqlens());
    ArrayRef<int64_t> tileParams = e.config.getTile();
    int64_t tile = tileParams[0], threads = 32 * e.config.getWarps();
    // The decode form keeps a channel a thread (one token a sequence).
    int64_t vec =
        tileParams.size() > 1 && !(inDecodeEntry(op) && op.getCuSeqlens())
            ? tileParams[1]
            : 1;
    ShortConvKernel kernel(m, e.kb, threads, op.getKernelSize(), tile, vec);
    int64_t cb = kernel.channelBlocks();
    KernelBuilder &kb = e.kb;
    if (inDecodeEntry(op) && op.getCuSeqlens()) {
      auto seqs = e.tokenForm(op, m.seqsDim);
      if (failed(seqs))
        return failure();
      e.setLaunch(*seqs, cb, 0, 1, {threads, 1, 1});
      Value bid = blockId(kb);
      kernel.emitPerSequence(kb.divui(bid, cb), kb.remui(bid, cb));
      e.finishSinglePhase(op.getLoc());
      return success();
    }
    auto tokens = e.tokenForm(op, a.getInput().shape[0]);
    if (failed(tokens))
      return failure();
    // ceil(T / TT) token tiles times the channel blocks, at least one tile
    // (the empty sequences' copy); blocks past the last tile stay idle.
    e.setLaunch(*tokens, cb, tile * cb - 1, tile, {threads, 1, 1});
    Value bid = blockId(kb);
    kernel.emitTokens(kb.divui(bid, cb), kb.remui(bid, cb));
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

/// k3.short_conv_group in a decode entry: block (n, g) for the members'
/// channel blocks g laid end to end, each member's in its decode form.
struct ShortConvGroupRowsPattern : OpKernelPattern<ShortConvGroupOp> {
  ShortConvGroupRowsPattern() : OpKernelPattern(KernelKind::short_conv_rows) {}
  LogicalResult emit(ShortConvGroupOp op, Adaptor a,
                     KernelEmission &e) const override {
    KernelBuilder &kb = e.kb;
    int64_t threads = 32 * e.config.getWarps(), tile = e.config.getTile()[0];
    auto ops = operandsOf(op, e.inputs);
    SmallVector<ConvOperands, 3> members;
    SmallVector<int64_t> firstBlock{0};
    for (size_t i = 0; i < op.getInputs().size(); ++i) {
      ConvOperands m = convOperands(
          ops.getInputs()[i], ops.getWeights()[i], ops.getConvStates()[i],
          resultOf(e.outputs, op.getResults()[i]),
          resultOf(e.outputs, op.getFinalStates()[i]), ops.getCuSeqlens());
      members.push_back(m);
      firstBlock.push_back(firstBlock.back() +
                           (m.channels + threads - 1) / threads);
    }
    int64_t blocks = firstBlock.back();
    auto seqs = e.tokenForm(op, members.front().seqsDim);
    if (failed(seqs))
      return failure();
    e.setLaunch(*seqs, blocks, 0, 1, {threads, 1, 1});
    Value bid = blockId(kb);
    Value n = kb.divui(bid, blocks), g = kb.remui(bid, blocks);
    for (auto [i, m] : llvm::enumerate(members)) {
      Value lo = kb.idx(firstBlock[i]);
      kb.ifThen(kb.andi(kb.gei(g, lo), kb.lti(g, kb.idx(firstBlock[i + 1]))),
                [&, i = i] {
                  ShortConvKernel(members[i], kb, threads, op.getKernelSize(),
                                  tile)
                      .emitPerSequence(n, kb.subi(g, lo));
                });
    }
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateShortConvRowsPattern(KernelPatternSet &patterns) {
  patterns.add<ShortConvRowsPattern, ShortConvGroupRowsPattern>();
}

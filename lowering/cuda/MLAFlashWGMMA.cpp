//===- MLAFlashWGMMA.cpp - MLA prefill as flash attention -------*- C++ -*-===//
//
// k3.mla_prefill_attention on Hopper (config kernel `mla_flash_wgmma`, tile
// [64 or 128 queries, 64 or 128 keys], a warpgroup per 64 queries): a block
// per (query tile, head), 64 query rows per warpgroup; the warpgroups share
// the key and value stages, so a key tile is read once per 128 queries.
// Key tiles of 128 run the scores as wgmma m64n128 (half the operand reads
// per product of m64n64) and halve the softmax's per-tile reductions, for
// twice the score and P registers.
//
// - Operands by TMA in the 128-byte swizzle, as boxes of 64 bf16 columns
//   (q's of 64 rows, the keys' and values' of a key tile's rows): the
//   queries once (q [T, H, Dn + Dr]: coordinates (d, h, t)); per key tile
//   the keys' nope part and the values from kv [T, H, Dn + Dv] and the
//   shared k_pe from latent [T, R + Dr] (coordinates (R + d, t)), into
//   `stages` buffers; a stage's keys and its values complete mbarriers of
//   their own and are refilled apart (the next keys as soon as this
//   tile's scores are done, the next values after its P V).
// - S = Q K^T by wgmma m64n64k16 (both operands K-major), its registers
//   read through k3gpu.warpgroup_fragment: the online softmax in f32 and in
//   log2 units (one fma and one ex2 per score, the row maxima in raw
//   units), masked by sequence and causality only on the key tiles that
//   need it (a block-uniform branch: the tiles before the last row's
//   sequence start and from the diagonal on); each quad of lanes shares a
//   row (shuffles for its max).
// - P, rounded to bf16, stays in registers: a k-step's four bf16 pairs of
//   the score registers are wgmma's register A operand (k3gpu
//   warpgroup_mma_chain with registers, FlashAttention-3's layout
//   identity), so P needs no shared memory, fence or barrier; O += P V by
//   wgmma m64n{Dv}k16 with V MN-major (transposed B: keys are V's rows,
//   the values' columns are contiguous), the two 64-column boxes LBO apart.
//   The output accumulator is rescaled in registers between the products
//   (its multiplies fill the softmax's ex2 latency: skipping them by a
//   warp vote, FlashAttention-4's lazy rescale, was slower; docs/mla.md).
// - Schedules: with one stage (the default: three blocks per SM hide each
//   other's waits) each product is waited for before the next step. With
//   two or more, FlashAttention-3's intra-warpgroup pipeline: tile j's
//   scores are issued, then tile j - 1's P V behind them (k3gpu async
//   chains), the softmax of tile j runs between the wait for the scores
//   and the wait for P V (pipelinedLoop; measured slower than the default,
//   so a config to opt into, as is the two-warpgroup tile).
// - Warp specialisation (FlashAttention-3's; the config's warps one
//   warpgroup more than the query rows need): warpgroup 0 produces, its
//   thread 0 loading q and then every key tile's keys and values by TMA
//   into the stages as the consumers free them (per stage a free mbarrier
//   for the keys and one for the values, every consumer thread's arrive
//   once the products that read them completed), so the consumer
//   warpgroups (128 or 192 queries) never meet at a block barrier. The
//   roles resize their registers with setmaxnreg. With two consumer
//   warpgroups each runs the intra-warpgroup pipeline and they take turns
//   to issue their products (ping-pong through named barriers: one
//   warpgroup's softmax while the next one's products hold the tensor
//   cores); three (192 queries) keep the serial loop.
// - Varlen without padding: a query tile is 64 (or 128) consecutive packed
//   tokens, which may span sequences; its key tiles run from the first
//   row's sequence start to its last row, and the mask keeps each row to
//   its own sequence. Key tiles past the diagonal are never loaded. Tiles
//   are numbered last first, so that the longest rows start first; from
//   headMajorFromTokens(H) tokens on, head by head (L2 keeps the few heads'
//   keys and values in flight).
// - The output: l summed over the quad, O / l times sigmoid(gate) when the
//   op has a gate (ex2 and rcp of the special-function unit), written from
//   registers as pairs.
//
// Numerics: scores and softmax in f32, P rounded to bf16 before P V (as
// FlashAttention does), f32 accumulators.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/WGMMA.h"
#include "lowering/cuda/WGMMAPipeline.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "dialects/K3GPU/K3GPUDialect.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kRows = 64, kBox = 64, kThreads = 128;
/// From T tokens on, where T x H reaches kHeadMajorFromTokenHeads (T at
/// most kHeadMajorFromTokens), blocks go head by head (a head's query
/// tiles side by side), so that the few heads in flight keep their keys
/// and values in L2 while every tile streams them; below it all heads of
/// the longest tiles go first (docs/mla.md, "Block order"). The keys and
/// values of all heads scale with T x H: K3's 96 heads overflow L2 at a
/// third of the tokens that Kimi's 32 do.
constexpr int64_t kHeadMajorFromTokens = 16384;
constexpr int64_t kHeadMajorFromTokenHeads = 16384 * 32;

/// The token count from which `heads` heads go head by head.
int64_t headMajorFromTokens(int64_t heads) {
  return std::min(kHeadMajorFromTokens,
                  (kHeadMajorFromTokenHeads + heads - 1) / heads);
}
/// Bytes of one 64 x 64 bf16 box (q's: 64 rows).
constexpr int64_t kBoxBytes = kRows * kBox * 2;

/// The softmax state of this thread's two rows (16 w + g and + 8).
struct RowState {
  Value m[2], l[2];
};

class MLAFlashKernel {
public:
  MLAFlashKernel(MLAPrefillAttentionOp op,
                 KernelOperands<MLAPrefillAttentionOp> ops, KernelEmission &e)
      : op(op), ops(ops), e(e), b(e.kb.builder()), loc(op.getLoc()), kb(e.kb),
        em{b, loc, kb, e.config.getStages()}, mma{b, loc, kb} {
    dn = op.getQkNopeHeadDim();
    dr = op.getQkRopeHeadDim();
    dv = op.getVHeadDim();
    heads = ops.getQ().shape[1];
    rank = ops.getLatent().shape[1] - dr;
    qBoxes = (dn + dr) / kBox;
    vBoxes = dv / kBox;
    // 64 query rows per warpgroup; the warpgroups share the key and value
    // stages, so each key tile comes from L2 once per queryRows queries.
    queryRows = e.config.getTile()[0];
    warpgroups = queryRows / kRows;
    // A warpgroup more than the query rows take: warpgroup 0 produces
    // (FlashAttention-3's warp specialisation, below).
    producer = e.config.getWarps() == 4 * (warpgroups + 1);
    // 64 or 128 keys a tile: wgmma m64n128 for the scores reads its
    // operands from shared memory half as often per product as m64n64,
    // and the softmax's per-tile reductions halve.
    keys = e.config.getTile()[1];
    keyBoxBytes = keys * kBox * 2;
    // The softmax in log2 units: exp(s scale) = 2^(s scale log2 e).
    scaleLog2 = op.getScale().convertToDouble() * M_LOG2E;
  }

  LogicalResult emit() {
    tokens = kb.dim(ops.getQ().shape[0]);
    auto form = e.tokenForm(op, ops.getQ().shape[0]);
    if (failed(form))
      return failure();
    addTensorMapParameters();
    // ceil(T / 64) query tiles per head, a few idle blocks past them.
    e.setLaunch(*form, heads, (queryRows - 1) * heads, queryRows,
                {kThreads * (warpgroups + (producer ? 1 : 0)), 1, 1},
                mlaFlashSharedBytes(op, em.stages, queryRows, keys));
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value tiles = em.divuIdx(kb.addi(tokens, kb.idx(queryRows - 1)), queryRows);
    Value headMajor = kb.gei(tokens, kb.idx(headMajorFromTokens(heads)));
    // Both orders are computed and one selected; the divisor is kept
    // non-zero for a call without tokens (no tiles, every block spare).
    Value perHead = kb.maxsi(tiles, kb.idx(1));
    head = kb.select(headMajor, arith::DivUIOp::create(b, loc, bid, perHead),
                     em.remuIdx(bid, heads));
    Value fromLast =
        kb.select(headMajor, arith::RemUIOp::create(b, loc, bid, perHead),
                  em.divuIdx(bid, heads));
    // The grid's spare blocks (it is sized for ceil(T / 64) tiles from a
    // symbolic T) find no tile: past the tiles, or head-major past the
    // heads.
    Value inside =
        kb.andi(kb.lti(fromLast, tiles), kb.lti(head, kb.idx(heads)));
    kb.ifThen(inside, [&] {
      qStart = kb.muli(kb.subi(kb.subi(tiles, kb.idx(1)), fromLast),
                       kb.idx(queryRows));
      body();
    });
    return success();
  }

private:
  /// Tensor maps of q, kv and (with k_pe) latent after the sizes: boxes of
  /// 64 columns x one head x 64 tokens.
  void addTensorMapParameters() {
    auto fn = e.fn;
    auto ptr = LLVM::LLVMPointerType::get(b.getContext());
    SmallVector<Attribute> attrs;
    auto add = [&](int64_t operand, ArrayRef<int64_t> box) {
      unsigned n = fn.getNumArguments();
      (void)fn.insertArgument(n, ptr, DictionaryAttr(), loc);
      mapArgs.push_back(fn.getFunctionBody().front().getArgument(n));
      attrs.push_back(TensorMapAttr::get(b.getContext(), operand, box,
                                         TensorMapSwizzle::swizzle_128b));
    };
    add(0, {kBox, 1, kRows}); // q: (d, h, t), innermost first
    add(1, {kBox, 1, keys});  // kv
    if (dr > 0)
      add(2, {kBox, keys}); // latent: (c, t)
    K3Dialect::TensorMapsAttrHelper(b.getContext())
        .setAttr(fn, b.getArrayAttr(attrs));
  }

  // Shared memory, from the aligned base: q's boxes, then per stage the
  // keys' boxes and the values'.
  /// q's boxes: warpgroup g's at g qBoxes .. (g + 1) qBoxes - 1.
  Value qOffset(int64_t box) { return at(box * kBoxBytes); }
  /// This thread's warpgroup's q box `box`.
  Value ownQOffset(int64_t box) {
    return kb.addi(qOffset(box),
                   kb.muli(warpgroup, kb.idx(qBoxes * kBoxBytes)));
  }
  /// Per stage after q's: the keys' qBoxes boxes of `keys` rows, then the
  /// values' vBoxes.
  Value keyOffset(Value stage, int64_t box) {
    return kb.addi(at(warpgroups * qBoxes * kBoxBytes + box * keyBoxBytes),
                   kb.muli(stage, kb.idx((qBoxes + vBoxes) * keyBoxBytes)));
  }
  Value valueOffset(Value stage, int64_t box) {
    return keyOffset(stage, qBoxes + box);
  }
  Value at(int64_t bytes) { return kb.addi(base, kb.idx(bytes)); }

  /// A TMA box destination: [rows tokens, 1 head, 64] or [rows tokens, 64].
  Value boxAt(Value offset, bool rank3, int64_t rows) {
    SmallVector<int64_t> shape = rank3 ? SmallVector<int64_t>{rows, 1, kBox}
                                       : SmallVector<int64_t>{rows, kBox};
    return em.view(smem, offset, em.tileType(shape, b.getBF16Type()));
  }

  /// Thread 0's loads of key tile `j` into `stage`: the keys' nope and
  /// k_pe boxes on the stage's key barrier, the value boxes on its value
  /// barrier (released and refilled apart: see mainLoop).
  void issueKeys(Value stage, Value j) {
    Value t0 = tileStart(j);
    nvgpu::MBarrierArriveExpectTxOp::create(
        b, loc, keyBars, kb.idx(qBoxes * keyBoxBytes), stage, Value());
    for (int64_t i = 0; i < dn / kBox; ++i)
      tmaLoad(boxAt(keyOffset(stage, i), true, keys), keyBars, stage, tmKV,
              {kb.idx(i * kBox), head, t0});
    for (int64_t i = 0; i < dr / kBox; ++i)
      tmaLoad(boxAt(keyOffset(stage, dn / kBox + i), false, keys), keyBars,
              stage, tmLatent, {kb.idx(rank + i * kBox), t0});
  }
  void issueValues(Value stage, Value j) {
    Value t0 = tileStart(j);
    nvgpu::MBarrierArriveExpectTxOp::create(
        b, loc, valueBars, kb.idx(vBoxes * keyBoxBytes), stage, Value());
    for (int64_t i = 0; i < vBoxes; ++i)
      tmaLoad(boxAt(valueOffset(stage, i), true, keys), valueBars, stage, tmKV,
              {kb.idx(dn + i * kBox), head, t0});
  }
  Value tileStart(Value j) {
    return kb.addi(kvBegin, kb.muli(j, kb.idx(keys)));
  }
  void tmaLoad(Value dst, Value barriers, Value stage, Value map,
               SmallVector<Value> coords) {
    nvgpu::TmaAsyncLoadOp::create(b, loc, dst, barriers, map, coords, stage,
                                  Value(), Value());
  }

  void body() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value first = kb.eqi(tid, kb.idx(0));
    // The consumers' own thread index: with a producer (warpgroup 0) they
    // are the warpgroups after it. The producer's threads take consumer 0's
    // rows, so that every index they compute stays in range.
    Value ctid = tid;
    if (producer)
      ctid = kb.select(kb.gei(tid, kb.idx(kThreads)),
                       kb.subi(tid, kb.idx(kThreads)), tid);
    Value lane = em.remuIdx(ctid, 32);
    group = em.divuIdx(lane, 4);
    quad = em.remuIdx(lane, 4);
    warpgroup = em.divuIdx(ctid, kThreads);
    // Warp w of the consumers holds rows 16 w + group (+ 8): warpgroup g's
    // warps hold 64 g .. 64 g + 63.
    rowBase = kb.addi(kb.muli(em.divuIdx(ctid, 32), kb.idx(16)), group);
    locateKeys();
    smem = mma.dynamicSharedMemory();
    base = em.alignedBase(smem);
    // A map's type gives the descriptors' leading byte offset: V's two
    // 64-column boxes (transposed B) lie one `keys`-row box apart.
    tmQ = em.tensorMap(mapArgs[0], {kRows, 1, kBox});
    tmKV = em.tensorMap(mapArgs[1], {keys, 1, kBox});
    if (dr > 0)
      tmLatent = em.tensorMap(mapArgs[2], {keys, kBox});
    createBarriers(first);
    for (Value arg : {tmQ, tmKV, tmLatent})
      if (arg)
        nvgpu::TmaPrefetchOp::create(b, loc, arg, first);
    gpu::BarrierOp::create(b, loc);
    if (!producer) {
      kb.ifThen(first, [&] {
        loadQueries();
        for (int64_t s = 0; s < em.stages; ++s)
          kb.ifThen(kb.lti(kb.idx(s), keyTiles), [&] {
            issueKeys(kb.idx(s), kb.idx(s));
            issueValues(kb.idx(s), kb.idx(s));
          });
      });
      consume(first);
      return;
    }
    // Warp-specialised: no block barrier from here on (the producer's
    // warps leave once they issued the last tile's loads).
    auto roles = scf::IfOp::create(b, loc, TypeRange{},
                                   kb.lti(tid, kb.idx(kThreads)), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(roles.thenBlock());
    NVVM::SetMaxRegisterOp::create(b, loc, producerRegisters(),
                                   NVVM::SetMaxRegisterAction::decrease);
    kb.ifThen(first, [&] {
      loadQueries();
      produceTiles();
    });
    b.setInsertionPointToStart(roles.elseBlock());
    NVVM::SetMaxRegisterOp::create(b, loc, consumerRegisters(),
                                   NVVM::SetMaxRegisterAction::increase);
    consume(first);
  }

  /// The barriers (thread 0 initialises them): q's, and per stage the
  /// keys' and the values' (full: the producing thread's arrive with the
  /// bytes; with a producer warpgroup also free: every consumer thread's
  /// arrive once its products read the stage).
  void createBarriers(Value first) {
    auto oneBarrier =
        nvgpu::MBarrierGroupType::get(b.getContext(), em.workgroup(), 1);
    qBar = nvgpu::MBarrierCreateOp::create(b, loc, oneBarrier);
    keyBars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    valueBars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    nvgpu::MBarrierInitOp::create(b, loc, qBar, kb.idx(1), kb.idx(0), first);
    for (int64_t s = 0; s < em.stages; ++s)
      for (Value bars : {keyBars, valueBars})
        nvgpu::MBarrierInitOp::create(b, loc, bars, kb.idx(1), kb.idx(s),
                                      first);
    if (!producer)
      return;
    keysFree = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    valuesFree = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    for (int64_t s = 0; s < em.stages; ++s)
      for (Value bars : {keysFree, valuesFree})
        nvgpu::MBarrierInitOp::create(
            b, loc, bars, kb.idx(kThreads * warpgroups), kb.idx(s), first);
  }

  /// Thread 0's loads of every consumer warpgroup's 64 query rows.
  void loadQueries() {
    nvgpu::MBarrierArriveExpectTxOp::create(
        b, loc, qBar, kb.idx(warpgroups * qBoxes * kBoxBytes), kb.idx(0),
        Value());
    for (int64_t g = 0; g < warpgroups; ++g)
      for (int64_t i = 0; i < qBoxes; ++i)
        nvgpu::TmaAsyncLoadOp::create(
            b, loc, boxAt(qOffset(g * qBoxes + i), true, kRows), qBar, tmQ,
            ValueRange{kb.idx(i * kBox), head,
                       kb.addi(qStart, kb.idx(g * kRows))},
            kb.idx(0), Value(), Value());
  }

  /// The producer's thread 0: every key tile's keys, then its values, each
  /// into its stage once the consumers freed that stage's previous tile.
  void produceTiles() {
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), keyTiles, kb.idx(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    Value stage = em.remuIdx(j, em.stages);
    Value refill = kb.gei(j, kb.idx(em.stages));
    Value previous = kb.subi(j, kb.idx(em.stages));
    kb.ifThen(refill, [&] { em.waitStage(keysFree, previous, stage); });
    issueKeys(stage, j);
    kb.ifThen(refill, [&] { em.waitStage(valuesFree, previous, stage); });
    issueValues(stage, j);
  }

  /// Registers per thread after `setmaxnreg`: the producer's few (24 with
  /// three consumer warpgroups, whose 160 leave no more), and the
  /// consumers' share of what the launch holds: 40 and 232 with two
  /// consumer warpgroups, 24 and 160 with three.
  int32_t producerRegisters() const {
    return warpgroups >= 3 ? 24 : kProducerRegisters;
  }
  int32_t consumerRegisters() const {
    return consumerRegistersAfter(producerRegisters(), warpgroups,
                                  e.config.getBlocksPerSm());
  }

  /// The consumers: wait for q, the key tiles, the output.
  void consume(Value first) {
    nvgpu::MBarrierTryWaitParityOp::create(b, loc, qBar, kb.boolean(false),
                                           kb.idx(10000000), kb.idx(0));
    // With two or more stages the next tile's keys are resident while this
    // tile's softmax runs: the pipelined schedule. One stage keeps the
    // serial one (three blocks per SM overlap each other instead). The
    // keys and the values are freed apart, so two stages suffice with a
    // producer too. Three consumer warpgroups keep the serial loop: at 160
    // registers the pipeline's second accumulator and P spill.
    bool pipelined = em.stages >= 2 && !(producer && warpgroups >= 3);
    pingPong = producer && pipelined && warpgroups >= 2;
    auto [acc, state] = pipelined ? pipelinedLoop(first) : serialLoop(first);
    epilogue(acc, state);
  }

  /// This thread's rows (token, its sequence's first token), the first
  /// key of the tile's key range and how many key tiles it has.
  void locateKeys() {
    KernelOperand cu = ops.getCuSeqlens();
    auto sequenceStart = [&](Value t) {
      return cu ? emitSequenceOf(kb, cu.full, t).first : kb.idx(0);
    };
    Value lastToken = kb.subi(tokens, kb.idx(1));
    for (int64_t r = 0; r < 2; ++r) {
      rowToken[r] = kb.addi(qStart, kb.addi(rowBase, kb.idx(8 * r)));
      rowFirstKey[r] = sequenceStart(kb.minsi(rowToken[r], lastToken));
    }
    kvBegin = sequenceStart(qStart);
    Value last = kb.minsi(kb.addi(qStart, kb.idx(queryRows - 1)), lastToken);
    keyTiles = em.divuIdx(kb.addi(kb.subi(last, kvBegin), kb.idx(keys)), keys);
    // The key tiles that no row of the block masks: past the last row's
    // sequence start (the first fullFrom tiles may hold an earlier
    // sequence's keys) and wholly before the first row (tiles from
    // fullTo on reach the diagonal).
    Value lastStart = sequenceStart(last);
    Value fullFrom = em.divuIdx(
        kb.addi(kb.subi(lastStart, kvBegin), kb.idx(keys - 1)), keys);
    Value fullTo =
        em.divuIdx(kb.addi(kb.subi(qStart, kvBegin), kb.idx(1)), keys);
    unmaskedFrom = kb.minsi(fullFrom, keyTiles);
    unmaskedTo = kb.maxsi(kb.minsi(fullTo, keyTiles), unmaskedFrom);
  }

  /// The descriptor of the operand in a box of `rows` rows at byte `offset`
  /// (advanced by 32 bytes per k-step of 16 inside a swizzled row), typed
  /// `shape`.
  Value descriptor(Value offset, Value map, ArrayRef<int64_t> shape,
                   int64_t rows = kRows) {
    Value tile =
        em.view(smem, offset, em.tileType({rows, kBox}, b.getBF16Type()));
    auto type = nvgpu::WarpgroupMatrixDescriptorType::get(
        b.getContext(), em.tileType(shape, b.getBF16Type()));
    return nvgpu::WarpgroupGenerateDescriptorOp::create(b, loc, type, tile,
                                                        map);
  }

  /// S = Q K^T over the head dims for the landed key tile of `stage`: one
  /// chain of (Dn + Dr) / 16 wgmma m64n64k16 into a fresh accumulator
  /// (`async`: left in flight, see waitFor).
  Value scores(Value stage, Value previous, bool async = false) {
    SmallVector<Value> as, bs;
    for (int64_t k = 0; k < (dn + dr) / kWGMMAK; ++k) {
      int64_t box = k / 4, within = 32 * (k % 4);
      as.push_back(descriptor(kb.addi(ownQOffset(box), kb.idx(within)), tmQ,
                              {kRows, kWGMMAK}));
      bs.push_back(descriptor(kb.addi(keyOffset(stage, box), kb.idx(within)),
                              tmQ, {kWGMMAK, keys}, keys));
    }
    auto chain = k3gpu::WarpgroupMmaChainOp::create(
        b, loc, em.accumulatorType(keys), as, bs, previous);
    chain.setOverwrite(true);
    chain.setAsync(async);
    return chain.getResult();
  }

  /// The accumulator of an async chain, readable once at most `pending` of
  /// the warpgroup's groups are still in flight.
  Value waitFor(Value accumulator, int64_t pending) {
    return k3gpu::WarpgroupMmaWaitOp::create(
               b, loc, TypeRange{accumulator.getType()},
               ValueRange{accumulator}, b.getI64IntegerAttr(pending))
        .getResult(0);
  }

  /// P, rounded to bf16, as wgmma's register A operand: per k-step of 16
  /// keys, the four words of bf16 pairs of the score registers that hold
  /// the same rows and those keys (the layout wgmma's register A takes).
  SmallVector<Value> packP(ArrayRef<Value> p) {
    SmallVector<Value> regs;
    auto fragA = VectorType::get({4}, b.getI32Type());
    for (int64_t k = 0; k < keys / kWGMMAK; ++k) {
      SmallVector<Value> words;
      for (int64_t w = 0; w < 4; ++w)
        words.push_back(mma.packWord(p[8 * k + 2 * w], p[8 * k + 2 * w + 1]));
      regs.push_back(vector::FromElementsOp::create(b, loc, fragA, words));
    }
    return regs;
  }

  /// O += P V: P from registers (packP), V MN-major (transposed B), keys
  /// 16 k .. 16 k + 15 in rows of 128 bytes (`async`: left in flight).
  Value accumulate(Value stage, Value o, ValueRange regs, bool async = false) {
    SmallVector<Value> bs;
    for (int64_t k = 0; k < keys / kWGMMAK; ++k)
      bs.push_back(descriptor(kb.addi(valueOffset(stage, 0), kb.idx(2048 * k)),
                              tmKV, {kWGMMAK, dv}, keys));
    auto chain = k3gpu::WarpgroupMmaChainOp::create(
        b, loc, em.accumulatorType(dv), ValueRange(), regs, bs, o);
    chain.setTransposeB(true);
    chain.setAsync(async);
    return chain.getResult();
  }

  /// A zero 64 x n accumulator, from a constant vector.
  Value zeroAccumulator(int64_t n) {
    auto type = VectorType::get({n / 2}, b.getF32Type());
    Value zeros = arith::ConstantOp::create(b, loc, type, b.getZeroAttr(type));
    return k3gpu::WarpgroupAccumulatorOp::create(b, loc, em.accumulatorType(n),
                                                 zeros);
  }
  Value negInf() { return kb.f32(-INFINITY); }
  Value exp2(Value x) { return math::Exp2Op::create(b, loc, x); }
  Value quadMax(Value v) {
    v = kb.maxf(v, mma.shuffleXor(v, 1));
    return kb.maxf(v, mma.shuffleXor(v, 2));
  }
  Value quadSum(Value v) {
    v = kb.add(v, mma.shuffleXor(v, 1));
    return kb.add(v, mma.shuffleXor(v, 2));
  }

  /// Register i of a 64 x N fragment: row 8 ((i / 2) % 2) of the thread's
  /// two, column 8 (i / 4) + 2 (lane % 4) + i % 2.
  static int64_t rowOf(int64_t i) { return (i / 2) % 2; }
  Value columnOf(int64_t i) {
    return kb.addi(kb.muli(quad, kb.idx(2)), kb.idx(8 * (i / 4) + i % 2));
  }

  /// Scores of key tile `j` outside a row's sequence or past its token
  /// set to -inf.
  SmallVector<Value> masked(ArrayRef<Value> raw, Value j) {
    Value t0 = tileStart(j);
    SmallVector<Value> x(raw.size());
    for (int64_t i = 0; i < int64_t(raw.size()); ++i) {
      int64_t r = rowOf(i);
      Value key = kb.addi(t0, columnOf(i));
      Value valid = kb.andi(kb.gei(key, rowFirstKey[r]),
                            kb.notb(kb.lti(rowToken[r], key)));
      x[i] = kb.select(valid, raw[i], negInf());
    }
    return x;
  }

  /// The softmax of key tile `j`'s scores in log2 units: the row maxima m
  /// are kept in raw score units and each exponent is one fma,
  /// 2^(s c - m c) with c = scale log2(e). Tiles outside [unmaskedFrom,
  /// unmaskedTo) may hold keys of another sequence or past a row (sequence
  /// starts, the diagonal) and are masked; the others skip the mask.
  /// Returns P (f32 registers) and each row's factor for the old
  /// accumulators.
  std::pair<SmallVector<Value>, std::array<Value, 2>> softmax(Value s, Value j,
                                                              RowState &st) {
    auto fragType = VectorType::get({keys / 2}, b.getF32Type());
    Value frag = k3gpu::WarpgroupFragmentOp::create(b, loc, fragType, s);
    SmallVector<Value> raw(keys / 2);
    for (int64_t i = 0; i < keys / 2; ++i)
      raw[i] = mma.extract(frag, {i});
    // One branch, uniform over the block: three loops over the ranges
    // instead kept more values live and spilled at 168 registers.
    Value unmasked = kb.andi(kb.gei(j, unmaskedFrom), kb.lti(j, unmaskedTo));
    SmallVector<Type> types(keys / 2, b.getF32Type());
    auto branch = scf::IfOp::create(b, loc, types, unmasked, true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      scf::YieldOp::create(b, loc, raw);
      b.setInsertionPointToStart(branch.elseBlock());
      scf::YieldOp::create(b, loc, masked(raw, j));
    }
    SmallVector<Value> x(branch.getResults());
    Value rowMax[2] = {negInf(), negInf()};
    for (int64_t i = 0; i < keys / 2; ++i)
      rowMax[rowOf(i)] = kb.maxf(rowMax[rowOf(i)], x[i]);
    std::array<Value, 2> alpha;
    Value rowSum[2] = {kb.f32(0), kb.f32(0)};
    Value negMc[2];
    for (int64_t r = 0; r < 2; ++r) {
      Value m = kb.maxf(st.m[r], quadMax(rowMax[r]));
      // A row with no key yet keeps m = -inf; exponents against 0 then
      // give 0, not NaN.
      Value use = kb.select(
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, m, negInf()),
          kb.f32(0), m);
      negMc[r] = kb.mul(use, kb.f32(-scaleLog2));
      alpha[r] = exp2(kb.mul(kb.sub(st.m[r], use), kb.f32(scaleLog2)));
      st.m[r] = m;
    }
    SmallVector<Value> p(keys / 2);
    for (int64_t i = 0; i < keys / 2; ++i) {
      int64_t r = rowOf(i);
      p[i] =
          exp2(math::FmaOp::create(b, loc, x[i], kb.f32(scaleLog2), negMc[r]));
      rowSum[r] = kb.add(rowSum[r], p[i]);
    }
    for (int64_t r = 0; r < 2; ++r)
      st.l[r] = kb.add(kb.mul(st.l[r], alpha[r]), rowSum[r]);
    return {p, alpha};
  }

  /// The output accumulators times each row's factor.
  Value rescale(Value o, std::array<Value, 2> alpha) {
    auto fragType = VectorType::get({dv / 2}, b.getF32Type());
    Value frag = k3gpu::WarpgroupFragmentOp::create(b, loc, fragType, o);
    SmallVector<Value> regs;
    for (int64_t i = 0; i < dv / 2; ++i)
      regs.push_back(kb.mul(mma.extract(frag, {i}), alpha[rowOf(i)]));
    Value scaled = vector::FromElementsOp::create(b, loc, fragType, regs);
    return k3gpu::WarpgroupAccumulatorOp::create(b, loc, em.accumulatorType(dv),
                                                 scaled);
  }

  /// Tile `tile`'s keys (or values) in `stage` are read by every warp
  /// (a block barrier); thread 0 (`first`) refills the stage with tile
  /// tile + stages's, if there is one. With a producer warpgroup, the
  /// consumer's arrive on the stage's free barrier instead.
  void release(Value first, Value tile, Value stage, bool keys) {
    if (producer) {
      // The products that read the stage have completed (their wait came
      // first): each consumer thread's arrive frees it for the producer.
      (void)nvgpu::MBarrierArriveOp::create(
          b, loc, keys ? keysFree : valuesFree, stage);
      return;
    }
    Value next = kb.addi(tile, kb.idx(em.stages));
    gpu::BarrierOp::create(b, loc);
    kb.ifThen(kb.andi(first, kb.lti(next, keyTiles)), [&] {
      if (keys)
        issueKeys(stage, next);
      else
        issueValues(stage, next);
    });
  }

  /// One key tile after another: scores, softmax, P V, each product
  /// waited for before the next step.
  std::pair<Value, RowState> serialLoop(Value first) {
    Value init = zeroAccumulator(dv);
    // Never read (the chain overwrites it), only typed.
    sInit = zeroAccumulator(keys);
    SmallVector<Value> inits = {init, negInf(), negInf(), kb.f32(0), kb.f32(0)};
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(0), keyTiles, kb.idx(1), inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value j = loop.getInductionVar();
      ValueRange args = loop.getRegionIterArgs();
      RowState st{{args[1], args[2]}, {args[3], args[4]}};
      Value stage = em.remuIdx(j, em.stages);
      // The keys and the values of a stage are released apart: the next
      // keys load while this tile's softmax and P V run, the next values
      // while the next scores do (with one stage, the whole tile's load
      // would otherwise wait for the tile's end).
      em.waitStage(keyBars, j, stage);
      Value s = scores(stage, sInit);
      release(first, j, stage, /*keys=*/true);
      auto [p, alpha] = softmax(s, j, st);
      Value o = rescale(args[0], alpha);
      em.waitStage(valueBars, j, stage);
      o = accumulate(stage, o, packP(p));
      release(first, j, stage, /*keys=*/false);
      scf::YieldOp::create(b, loc,
                           ValueRange{o, st.m[0], st.m[1], st.l[0], st.l[1]});
    }
    RowState st{{loop.getResult(1), loop.getResult(2)},
                {loop.getResult(3), loop.getResult(4)}};
    return {loop.getResult(0), st};
  }

  /// FlashAttention-3's intra-warpgroup pipeline: tile j's scores run on
  /// the tensor cores while tile j - 1's P V is issued behind them, and
  /// tile j's softmax runs while that P V does. Per tile j >= 1:
  ///
  ///   issue S_j = Q K_j^T (async); O *= alpha_{j-1};
  ///   issue O += P_{j-1} V_{j-1} (async); wait until one group is left
  ///   (S_j done); release K_j; softmax(S_j) -> P_j, alpha_j; wait for all
  ///   (P V done); release V_{j-1}; P_j to bf16 registers.
  ///
  /// P_j is packed only after the wait for the P V that reads P_{j-1}'s
  /// registers. Tile 0's scores and softmax come before the loop, the
  /// last tile's P V after it. A stage's keys are refilled once its
  /// scores are done, its values once its P V is.
  std::pair<Value, RowState> pipelinedLoop(Value first) {
    Value zero = kb.idx(0);
    if (pingPong)
      kb.ifThen(kb.eqi(warpgroup, kb.idx(warpgroups - 1)),
                [&] { turnBarrier(/*wait=*/false, kb.idx(0)); });
    sInit = zeroAccumulator(keys);
    em.waitStage(keyBars, zero, zero);
    Value s0 = scores(zero, sInit);
    release(first, zero, zero, /*keys=*/true);
    RowState st{{negInf(), negInf()}, {kb.f32(0), kb.f32(0)}};
    auto [p0, alpha0] = softmax(s0, zero, st);
    SmallVector<Value> inits = {zeroAccumulator(dv)};
    llvm::append_range(inits, packP(p0));
    inits.append({alpha0[0], alpha0[1], st.m[0], st.m[1], st.l[0], st.l[1]});
    const int64_t kRegs = keys / kWGMMAK, kAlpha = 1 + kRegs;
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(1), keyTiles, kb.idx(1), inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value j = loop.getInductionVar();
      ValueRange args = loop.getRegionIterArgs();
      RowState st{{args[kAlpha + 2], args[kAlpha + 3]},
                  {args[kAlpha + 4], args[kAlpha + 5]}};
      Value stage = em.remuIdx(j, em.stages);
      Value prev = kb.subi(j, kb.idx(1));
      Value prevStage = em.remuIdx(prev, em.stages);
      em.waitStage(keyBars, j, stage);
      if (pingPong)
        waitTurn();
      Value sPending = scores(stage, sInit, /*async=*/true);
      Value o = rescale(args[0], {args[kAlpha], args[kAlpha + 1]});
      em.waitStage(valueBars, prev, prevStage);
      Value oPending =
          accumulate(prevStage, o, args.slice(1, kRegs), /*async=*/true);
      if (pingPong)
        passTurn();
      Value s = waitFor(sPending, 1);
      release(first, j, stage, /*keys=*/true);
      auto [p, alpha] = softmax(s, j, st);
      o = waitFor(oPending, 0);
      release(first, prev, prevStage, /*keys=*/false);
      SmallVector<Value> yields = {o};
      llvm::append_range(yields, packP(p));
      yields.append({alpha[0], alpha[1], st.m[0], st.m[1], st.l[0], st.l[1]});
      scf::YieldOp::create(b, loc, yields);
    }
    ValueRange res = loop.getResults();
    Value last = kb.subi(keyTiles, kb.idx(1));
    Value lastStage = em.remuIdx(last, em.stages);
    Value o = rescale(res[0], {res[kAlpha], res[kAlpha + 1]});
    em.waitStage(valueBars, last, lastStage);
    o = accumulate(lastStage, o, res.slice(1, kRegs));
    return {o, RowState{{res[kAlpha + 2], res[kAlpha + 3]},
                        {res[kAlpha + 4], res[kAlpha + 5]}}};
  }

  /// FlashAttention-3's ping-pong between the consumer warpgroups: each
  /// issues a tile's products only on its turn, so that one warpgroup's
  /// softmax runs while the next one's products hold the tensor cores.
  /// Turn g is named barrier 1 + g over 256 threads: warpgroup g's wait
  /// and warpgroup g - 1's arrive once it issued its own (the last
  /// warpgroup's first arrive opens turn 0).
  void waitTurn() { turnBarrier(/*wait=*/true, warpgroup); }
  void passTurn() {
    turnBarrier(/*wait=*/false,
                em.remuIdx(kb.addi(warpgroup, kb.idx(1)), warpgroups));
  }
  void turnBarrier(bool wait, Value turn) {
    Value id = arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                          kb.addi(turn, kb.idx(1)));
    em.namedBarrier(id, 2 * kThreads, wait);
  }

  /// O / l (l summed over the quad), times sigmoid(gate), as pairs of the
  /// result's type for the rows inside the tokens.
  void epilogue(Value o, const RowState &st) {
    KernelOperand out = e.outputs[0], gate = ops.getGate();
    Value width = kb.idx(heads * dv);
    Value y = mma.contiguousView(out.base, {tokens, width});
    Type outElem = cast<MemRefType>(y.getType()).getElementType();
    Value gates;
    if (gate)
      gates = mma.contiguousView(gate.base, {tokens, width});
    auto fragType = VectorType::get({dv / 2}, b.getF32Type());
    Value frag = k3gpu::WarpgroupFragmentOp::create(b, loc, fragType, o);
    Value headCol = kb.muli(head, kb.idx(dv));
    for (int64_t r = 0; r < 2; ++r) {
      Value inv = mma.rcpApprox(quadSum(st.l[r]));
      kb.ifThen(kb.lti(rowToken[r], tokens), [&] {
        for (int64_t i = 2 * r; i < dv / 2; i += 4) {
          Value col = kb.addi(headCol, columnOf(i));
          Value lo = kb.mul(mma.extract(frag, {i}), inv);
          Value hi = kb.mul(mma.extract(frag, {i + 1}), inv);
          if (gates) {
            SmallVector<Value> g =
                mma.loadVector(gates, ValueRange{rowToken[r], col}, 2);
            lo = kb.mul(lo, mma.sigmoidApprox(g[0]));
            hi = kb.mul(hi, mma.sigmoidApprox(g[1]));
          }
          Value pairValue =
              outElem.isBF16()
                  ? mma.pair(lo, hi)
                  : vector::FromElementsOp::create(
                        b, loc, VectorType::get({2}, b.getF32Type()),
                        ValueRange{lo, hi});
          mma.alignedStore(pairValue, y, ValueRange{rowToken[r], col});
        }
      });
    }
  }

  MLAPrefillAttentionOp op;
  KernelOperands<MLAPrefillAttentionOp> ops;
  KernelEmission &e;
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  WGMMAEmitter em;
  MMAEmitter mma;
  int64_t dn = 0, dr = 0, dv = 0, heads = 0, rank = 0, qBoxes = 0, vBoxes = 0;
  double scaleLog2 = 0;
  int64_t queryRows = 0, warpgroups = 0, keys = 0, keyBoxBytes = 0;
  Value tokens, head, qStart, tid, group, quad, warpgroup, rowBase, kvBegin,
      keyTiles;
  Value unmaskedFrom, unmaskedTo;
  Value rowToken[2], rowFirstKey[2];
  Value smem, base, tmQ, tmKV, tmLatent, qBar, keyBars, valueBars, sInit;
  Value keysFree, valuesFree;
  bool producer = false, pingPong = false;
  SmallVector<Value> mapArgs;
};

struct MLAFlashPattern : OpKernelPattern<MLAPrefillAttentionOp> {
  MLAFlashPattern() : OpKernelPattern(KernelKind::mla_flash_wgmma) {}
  LogicalResult emit(MLAPrefillAttentionOp op, Adaptor operands,
                     KernelEmission &e) const override {
    if (failed(MLAFlashKernel(op, operands, e).emit()))
      return failure();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateMLAFlashWGMMAPattern(KernelPatternSet &patterns) {
  patterns.add<MLAFlashPattern>();
}

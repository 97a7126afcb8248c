//===- KDAMMARecurrence.cpp - the KDA chain on the tensor cores -*- C++ -*-===//
//
// The serial half of the tensor-core KDA (k3.kda_mma_recurrence). One block
// per (sequence n, head h, slice of BV = 16 W value columns); warp w owns 16
// value columns and keeps its slice of the state transposed, S^T (16 x K,
// f32), in mma accumulator fragments for the whole sequence. Per chunk of
// 16 tokens, everything it reads was prepared by k3.kda_mma_operands, so
// the chain is only products:
//
//   r^T     = v^T - S0^T (k e^G)^T          mma, k = K       (A = S0^T)
//   o^T     = S0^T (q e^G)^T                mma, k = K       (A = S0^T)
//   delta^T = r^T P^T                       mma, k = 16      (A = r^T)
//   o^T    += delta^T Aqk^T                 mma, k = 16      (A = delta^T)
//   S^T     = S0^T e^{G_C} + delta^T (k e^{G_C - G})   mma, k = 16
//
// An accumulator of S^T, r^T or delta^T (rows = value columns) is already
// the A fragment of the next product (tiles n, n + 1 -> one 16 x 16 block),
// so the chain never leaves registers. The chunk's operands (16 packed
// rows, e^{G_C}, v's slice) move into shared memory with cp.async, three
// stages by default: chunks c + 1 and c + 2 are in flight while chunk c
// multiplies, one barrier per chunk. B fragments come by ldmatrix (.trans
// where a pair runs along tokens: k e^{G_C - G} and v). Rows past the
// sequence's end are zero-filled (cp.async with source size 0), which makes
// their delta zero.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/LegacyMMA.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::legacy;

namespace {
constexpr int64_t kChunk = 16;

/// cp.async of 16 bytes global -> shared; `valid` false: zero-filled
/// (source size 0).
void copy16(OpBuilder &b, Location loc, Value dstShared, Value srcGlobal,
            Value valid) {
  Value size = arith::SelectOp::create(
      b, loc, valid, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(16)),
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
  NVVM::CpAsyncOp::create(b, loc, dstShared, srcGlobal, b.getI32IntegerAttr(16),
                          NVVM::LoadCacheModifierKindAttr::get(
                              b.getContext(), NVVM::LoadCacheModifierKind::CG),
                          size);
}
} // namespace

FailureOr<bool> mlir::k3::emitKDAMMARecurrenceCUDA(
    KDAMMARecurrenceOp op, gpu::GPUFuncOp fn, KernelBuilder &kb,
    ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out,
    const CUDAKernelOptions &options) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  unsigned next = 2;
  const KernelOperand *init = op.getInitialState() ? &in[next++] : nullptr;
  const KernelOperand *cu = op.getCuSeqlens() ? &in[next++] : nullptr;
  const int64_t words = in[0].shape[3], heads = in[0].shape[2];
  const int64_t vDim = in[1].shape[3], kDim = out[1].shape[2];
  if (heads <= 0 || vDim <= 0 || kDim <= 0)
    return op.emitOpError() << "needs static heads, key and value dimensions";
  const int64_t R = 3 * kDim / 2;  // word of P in a packed row
  const int64_t rowWords = R + 16; // words staged per row
  const int64_t RS = rowWords + 4; // staged row stride: conflict-free
  const int64_t NT = kDim / 8, KS = kDim / 16;

  // Warps per block (16 value columns each): cuda-kda-mma-warps, fewer
  // where the value dimension has fewer 16-column tiles. From the shape
  // (0): the fewest warps whose blocks for one sequence, H V / (16 W), fit
  // the GPU's SMs in one wave, else 8. A block per SM: two chain blocks on
  // one SM share its tensor cores and that SM sets the time (B1 T8192
  // H96: W = 4, 192 blocks, 1.45 ms; W = 8, 96 blocks, 1.30 ms; H64: W = 4,
  // 128 blocks, 0.84 ms against 1.14 with W = 8; docs/kda-cuda.md).
  auto fits = [&](int64_t w) { return (vDim / 16) % w == 0; };
  int64_t warps = options.kdaMMAWarps;
  if (warps == 0) {
    warps = 8;
    for (int64_t w : {1, 2, 4, 8})
      if (fits(w) && heads * (vDim / 16) / w <= options.smCount) {
        warps = w;
        break;
      }
  }
  while (warps > 1 && !fits(warps))
    warps /= 2;
  const int64_t BV = 16 * warps, threads = 32 * warps, nvb = vDim / BV;
  // Shared-memory stages: chunks c+1 .. c+stages-1 are in flight while
  // chunk c multiplies (cuda-kda-mma-stages, 2..4).
  const int64_t stages = options.kdaMMAStages;

  const int64_t rowsBytes = kChunk * RS * 4, egcBytes = kDim * 4;
  // v's rows padded by 16 bytes: ldmatrix reads 8 rows of a column block
  // without bank conflicts.
  const int64_t vStride = BV * 2 + 16;
  const int64_t vBytes = kChunk * vStride;
  const int64_t stageBytes = rowsBytes + egcBytes + vBytes;
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(stages * stageBytes));
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return op.emitOpError() << "needs a sequence count linear in N";
  int64_t per = heads * nvb;
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr(
                  {nForm->symbol, nForm->a * per, nForm->b * per, 1}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({threads, 1, 1}));

  MMAEmitter em{b, loc, kb};
  Value smem = em.dynamicSharedMemory();
  Value o = out[0].full;
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value vb = em.remu(bid, nvb), hn = em.divu(bid, nvb);
  Value h = em.remu(hn, heads), n = em.divu(hn, heads);
  Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
  Value gq = em.divu(lane, 4), tig = em.remu(lane, 4);
  Value tig2 = kb.muli(tig, kb.idx(2));
  Value vcol0 = kb.addi(kb.muli(vb, kb.idx(BV)), kb.muli(warp, kb.idx(16)));
  Value vRow[2] = {kb.addi(vcol0, gq), kb.addi(vcol0, kb.addi(gq, kb.idx(8)))};

  Value bIdx = cu ? kb.idx(0) : n;
  Value start = cu ? kb.loadIndex(cu->full, {n}) : kb.idx(0);
  Value end = cu ? kb.loadIndex(cu->full, {kb.addi(n, kb.idx(1))})
                 : kb.dim(in[0].shape[1]);
  Value numChunks =
      em.divu(kb.addi(kb.subi(end, start), kb.idx(kChunk - 1)), kChunk);

  auto kCol = [&](int64_t nt, int64_t c) {
    return kb.addi(kb.idx(8 * nt + c % 2), tig2);
  };
  SmallVector<Value> acc0;
  for (int64_t nt = 0; nt < NT; ++nt)
    for (int64_t c = 0; c < 4; ++c)
      acc0.push_back(init
                         ? kb.load(init->full, {n, h, kCol(nt, c), vRow[c / 2]})
                         : kb.f32(0.0));

  // Issues chunk c's copies into stage c % stages (every thread a share).
  // Each thread's pieces (row, 16-byte column) do not depend on the chunk:
  // their offsets are computed once, here, so that a chunk's issue is an
  // add and a select per piece.
  Value packedPtr = em.pointer(em.addressOf(in[0].base), 1);
  Value vPtr = em.pointer(em.addressOf(in[1].base), 1);
  Value smemPtr = em.pointer(em.addressOf(smem), 3);
  const int64_t rowBytes = heads * words * 4; // token to token, packed
  const int64_t vRowBytes = heads * vDim * 2;
  auto tokenIndex = [&](Value t, Value tokens) { // (bIdx, t, h)
    return kb.addi(kb.muli(kb.addi(kb.muli(bIdx, tokens), t), kb.idx(heads)),
                   h);
  };
  struct Piece {
    Value row, src, dst; // row of the chunk, byte offsets
    int64_t p0;          // first piece index of this slot
  };
  auto slots = [&](int64_t total, int64_t perRow, int64_t srcRowBytes,
                   int64_t dstRowBytes) {
    SmallVector<Piece> out;
    for (int64_t p0 = 0; p0 < total; p0 += threads) {
      Value p = kb.addi(kb.idx(p0), tid);
      Value r = em.divu(p, perRow), q = em.remu(p, perRow);
      out.push_back(
          {r, kb.addi(kb.muli(r, kb.idx(srcRowBytes)), kb.muli(q, kb.idx(16))),
           kb.addi(kb.muli(r, kb.idx(dstRowBytes)), kb.muli(q, kb.idx(16))),
           p0});
    }
    return out;
  };
  const int64_t rowPieces = rowWords / 4, vPieces = BV / 8;
  SmallVector<Piece> rowSlots =
      slots(kChunk * rowPieces, rowPieces, rowBytes, RS * 4);
  SmallVector<Piece> egcSlots = slots(kDim / 4, kDim / 4, 0, 0);
  SmallVector<Piece> vSlots =
      slots(kChunk * vPieces, vPieces, vRowBytes, vStride);
  Value vCol0Bytes = kb.muli(vb, kb.idx(BV * 2));
  auto issue = [&](Value c) {
    Value t0 = kb.addi(start, kb.muli(c, kb.idx(kChunk)));
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value stage = kb.muli(em.remu(c, stages), kb.idx(stageBytes));
    auto each = [&](ArrayRef<Piece> ps, int64_t total,
                    const std::function<void(const Piece &)> &body) {
      for (const Piece &pc : ps) {
        if (pc.p0 + threads > total)
          kb.ifThen(kb.lti(kb.addi(kb.idx(pc.p0), tid), kb.idx(total)),
                    [&] { body(pc); });
        else
          body(pc);
      }
    };
    // Rows past the sequence read row t0 (in bounds) with source size 0.
    Value rowsAt =
        kb.muli(tokenIndex(t0, kb.dim(in[0].shape[1])), kb.idx(words * 4));
    each(rowSlots, kChunk * rowPieces, [&](const Piece &pc) {
      Value ok = kb.lti(pc.row, count);
      Value src = kb.addi(rowsAt, kb.select(ok, pc.src, kb.idx(0)));
      copy16(b, loc, em.offsetPointer(smemPtr, kb.addi(stage, pc.dst)),
             em.offsetPointer(packedPtr, src), ok);
    });
    Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
    Value egcAt = kb.addi(
        kb.muli(tokenIndex(lastRow, kb.dim(in[0].shape[1])), kb.idx(words * 4)),
        kb.idx((R + 16) * 4));
    each(egcSlots, kDim / 4, [&](const Piece &pc) {
      copy16(b, loc,
             em.offsetPointer(
                 smemPtr, kb.addi(stage, kb.addi(kb.idx(rowsBytes), pc.src))),
             em.offsetPointer(packedPtr, kb.addi(egcAt, pc.src)),
             kb.boolean(true));
    });
    Value vAt = kb.addi(
        kb.muli(kb.muli(tokenIndex(t0, kb.dim(in[1].shape[1])), kb.idx(vDim)),
                kb.idx(2)),
        vCol0Bytes);
    each(vSlots, kChunk * vPieces, [&](const Piece &pc) {
      Value ok = kb.lti(pc.row, count);
      Value src = kb.addi(vAt, kb.select(ok, pc.src, kb.idx(0)));
      copy16(b, loc,
             em.offsetPointer(
                 smemPtr,
                 kb.addi(stage, kb.addi(kb.idx(rowsBytes + egcBytes), pc.dst))),
             em.offsetPointer(vPtr, src), ok);
    });
  };
  auto commit = [&] { NVVM::CpAsyncCommitGroupOp::create(b, loc); };

  for (int64_t c0 = 0; c0 < stages - 1; ++c0) {
    kb.ifThen(kb.lti(kb.idx(c0), numChunks), [&] { issue(kb.idx(c0)); });
    commit();
  }

  // Lane byte offsets of the ldmatrix reads inside a stage.
  Value laneRowsB = em.ldmatrixOffsetB(lane, RS * 4);
  Value laneRowsA = em.ldmatrixOffsetA(lane, RS * 4);
  Value laneV = kb.addi(
      kb.idx(rowsBytes + egcBytes),
      kb.addi(em.ldmatrixOffsetB(lane, vStride), kb.muli(warp, kb.idx(32))));
  auto chunks =
      scf::ForOp::create(b, loc, kb.idx(0), numChunks, kb.idx(1), acc0);
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value c = chunks.getInductionVar();
    ValueRange it = chunks.getRegionIterArgs();
    // Chunk c has landed (only chunk c + 1's group may be pending), and
    // after the barrier every warp is done with chunk c - 1, whose stage
    // then takes chunk c + stages - 1: one barrier per chunk.
    NVVM::CpAsyncWaitGroupOp::create(b, loc,
                                     b.getI32IntegerAttr(int32_t(stages - 2)));
    gpu::BarrierOp::create(b, loc);
    Value cNext = kb.addi(c, kb.idx(stages - 1));
    kb.ifThen(kb.lti(cNext, numChunks), [&] { issue(cNext); });
    commit();

    Value t0 = kb.addi(start, kb.muli(c, kb.idx(kChunk)));
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value stageOff = kb.muli(em.remu(c, stages), kb.idx(stageBytes));
    // Fragments by ldmatrix: lane pointers into this stage's rows
    // ([token][word], B operands of N = tokens), v's tile ([token][column])
    // and kg ([token = K][channel = N], transposed).
    Value rowsB = em.offsetPointer(smemPtr, kb.addi(stageOff, laneRowsB));
    auto rowsAt = [&](int64_t word) {
      return em.offsetPointer(rowsB, kb.idx(4 * word));
    };
    Value rowsA = em.offsetPointer(smemPtr, kb.addi(stageOff, laneRowsA));
    Value egc = em.offsetPointer(smemPtr, kb.addi(stageOff, kb.idx(rowsBytes)));

    SmallVector<FragA> aS(KS);
    for (int64_t ks = 0; ks < KS; ++ks)
      aS[ks] = em.accToA(
          {it[8 * ks + 0], it[8 * ks + 1], it[8 * ks + 2], it[8 * ks + 3]},
          {it[8 * ks + 4], it[8 * ks + 5], it[8 * ks + 6], it[8 * ks + 7]});
    Acc pS[2] = {em.zero(), em.zero()}, oT[2] = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < KS; ++ks) {
      auto bKe = em.loadB2(rowsAt(kDim / 2 + 8 * ks), /*fromKN=*/false);
      auto bQg = em.loadB2(rowsAt(8 * ks), /*fromKN=*/false);
      for (int64_t nt = 0; nt < 2; ++nt) {
        pS[nt] = em.mma(aS[ks], bKe[nt], pS[nt]);
        oT[nt] = em.mma(aS[ks], bQg[nt], oT[nt]);
      }
    }

    // v^T's tile in accumulator layout (rows = value columns, cols =
    // tokens): ldmatrix.trans of [token][column] gives register j the bf16
    // pair (tokens 2 tig, +1 of block j / 2; column g + 8 (j % 2)).
    auto vPairs =
        em.ldmatrix4(em.offsetPointer(smemPtr, kb.addi(stageOff, laneV)),
                     /*transpose=*/true);
    Acc r[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        Value vv = em.unpackBF16(vPairs[2 * nt + e / 2], e % 2);
        r[nt][e] = kb.sub(vv, pS[nt][e]);
      }
    FragA aR = em.accToA(r[0], r[1]);
    auto bP = em.loadB2(rowsAt(R), /*fromKN=*/false);
    auto bAqk = em.loadB2(rowsAt(R + 8), /*fromKN=*/false);
    Acc dT[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      dT[nt] = em.mma(aR, bP[nt], em.zero());
    FragA aD = em.accToA(dT[0], dT[1]);
    for (int64_t nt = 0; nt < 2; ++nt) {
      oT[nt] = em.mma(aD, bAqk[nt], oT[nt]);
      for (int64_t e = 0; e < 4; ++e) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + e % 2));
        kb.ifThen(kb.lti(t, count), [&] {
          kb.store(oT[nt][e], o, {bIdx, kb.addi(t0, t), h, vRow[e / 2]});
        });
      }
    }

    // S^T = S0^T e^{G_C} + delta^T kg: B = kg (k = token, n = K) from
    // [token][channel] rows, two N tiles per ldmatrix.trans.
    SmallVector<Value> nextAcc;
    for (int64_t nt = 0; nt < NT; nt += 2) {
      auto bK = em.loadB2(em.offsetPointer(rowsA, kb.idx(4 * (kDim + 4 * nt))),
                          /*fromKN=*/true);
      for (int64_t x = 0; x < 2; ++x) {
        int64_t n8 = nt + x;
        SmallVector<Value> d = em.loadVector(
            em.offsetPointer(
                egc, kb.addi(kb.idx(4 * 8 * n8), kb.muli(tig2, kb.idx(4)))),
            b.getF32Type(), 2);
        Acc acc{kb.mul(it[4 * n8 + 0], d[0]), kb.mul(it[4 * n8 + 1], d[1]),
                kb.mul(it[4 * n8 + 2], d[0]), kb.mul(it[4 * n8 + 3], d[1])};
        acc = em.mma(aD, bK[x], acc);
        nextAcc.append(acc.begin(), acc.end());
      }
    }
    scf::YieldOp::create(b, loc, nextAcc);
  }
  NVVM::CpAsyncWaitGroupOp::create(b, loc, b.getI32IntegerAttr(0));

  for (int64_t nt = 0; nt < NT; ++nt)
    for (int64_t c = 0; c < 4; ++c)
      kb.store(chunks.getResult(4 * nt + c), out[1].full,
               {n, h, kCol(nt, c), vRow[c / 2]});
  return true;
}

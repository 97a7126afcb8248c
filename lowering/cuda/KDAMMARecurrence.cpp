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
// multiplies, one barrier per chunk. Rows past the
// sequence's end are zero-filled (cp.async with source size 0), which makes
// their delta zero.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/SCF/IR/SCF.h"


using namespace mlir;
using namespace mlir::k3;

namespace {
constexpr int64_t kChunk = 16;

struct AsyncCopier {
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;

  Value addressOf(Value mem) {
    return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
  }
  Value ptr(Value addrIndex, unsigned space) {
    Value i = arith::IndexCastOp::create(b, loc, b.getI64Type(), addrIndex);
    auto gen = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::IntToPtrOp::create(b, loc, gen, i);
    return LLVM::AddrSpaceCastOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext(), space), p);
  }
  /// 16 bytes global -> shared; `valid` false: zero-filled (source size 0).
  void copy16(Value dstSharedAddr, Value srcGlobalAddr, Value valid) {
    Value size = arith::SelectOp::create(
        b, loc, valid,
        arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(16)),
        arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
    NVVM::CpAsyncOp::create(
        b, loc, ptr(dstSharedAddr, 3), ptr(srcGlobalAddr, 1),
        b.getI32IntegerAttr(16),
        NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                             NVVM::LoadCacheModifierKind::CG),
        size);
  }
};
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
  const int64_t R = 3 * kDim / 2;     // word of P in a packed row
  const int64_t rowWords = R + 16;    // words staged per row
  const int64_t RS = rowWords + 4;    // staged row stride: conflict-free
  const int64_t NT = kDim / 8, KS = kDim / 16;

  // Warps per block (16 value columns each): cuda-kda-mma-warps, fewer
  // where the value dimension has fewer 16-column tiles.
  int64_t warps = options.kdaMMAWarps;
  while (warps > 1 && (vDim / 16) % warps != 0)
    warps /= 2;
  const int64_t BV = 16 * warps, threads = 32 * warps, nvb = vDim / BV;
  // Shared-memory stages: chunks c+1 .. c+stages-1 are in flight while
  // chunk c multiplies (cuda-kda-mma-stages, 2..4).
  const int64_t stages = options.kdaMMAStages;

  const int64_t rowsBytes = kChunk * RS * 4, egcBytes = kDim * 4;
  const int64_t vBytes = kChunk * BV * 2;
  const int64_t stageBytes = rowsBytes + egcBytes + vBytes;
  fn->setAttr(kLaunchSmemAttr, b.getI64IntegerAttr(stages * stageBytes));
  Value numSeqs = kb.dim(out[1].shape[0]);
  auto nForm = kb.linearForm(numSeqs);
  if (!nForm)
    return op.emitOpError() << "needs a sequence count linear in N";
  int64_t per = heads * nvb;
  fn->setAttr(kLaunchGridAttr,
              b.getDenseI64ArrayAttr({nForm->symbol, nForm->a * per,
                                      nForm->b * per, 1}));
  fn->setAttr(kLaunchBlockAttr, b.getDenseI64ArrayAttr({threads, 1, 1}));

  MMAEmitter em{b, loc, kb};
  Value smem = em.dynamicSharedMemory();
  auto viewAt = [&](Type elem, Value off, int64_t count) {
    return em.sharedView(smem, elem, off, count);
  };
  AsyncCopier cp{b, loc, kb};
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
      acc0.push_back(init ? kb.load(init->full, {n, h, kCol(nt, c), vRow[c / 2]})
                          : kb.f32(0.0));

  // Issues chunk c's copies into stage c % stages (every thread a share).
  Value packedBase = cp.addressOf(in[0].base), vBase = cp.addressOf(in[1].base);
  Value smemBase = cp.addressOf(smem);
  auto rowAddr = [&](Value t) { // byte address of packed row (bIdx, t, h)
    Value row = kb.addi(kb.muli(kb.addi(kb.muli(bIdx, kb.dim(in[0].shape[1])),
                                        t),
                                kb.idx(heads)),
                        h);
    return kb.addi(packedBase, kb.muli(row, kb.idx(words * 4)));
  };
  auto issue = [&](Value c) {
    Value t0 = kb.addi(start, kb.muli(c, kb.idx(kChunk)));
    Value count = kb.minsi(kb.subi(end, t0), kb.idx(kChunk));
    Value stage =
        kb.addi(smemBase, kb.muli(em.remu(c, stages), kb.idx(stageBytes)));
    auto pieces = [&](int64_t total,
                      const std::function<void(Value)> &body) {
      for (int64_t p0 = 0; p0 < total; p0 += threads) {
        Value p = kb.addi(kb.idx(p0), tid);
        if (p0 + threads > total)
          kb.ifThen(kb.lti(p, kb.idx(total)), [&] { body(p); });
        else
          body(p);
      }
    };
    const int64_t rowPieces = rowWords / 4;
    pieces(kChunk * rowPieces, [&](Value p) {
      Value r = em.divu(p, rowPieces), q = em.remu(p, rowPieces);
      Value ok = kb.lti(r, count);
      Value src = kb.addi(rowAddr(kb.addi(t0, kb.select(ok, r, kb.idx(0)))),
                          kb.muli(q, kb.idx(16)));
      Value dst = kb.addi(stage, kb.addi(kb.muli(r, kb.idx(RS * 4)),
                                         kb.muli(q, kb.idx(16))));
      cp.copy16(dst, src, ok);
    });
    pieces(kDim / 4, [&](Value p) {
      Value lastRow = kb.addi(t0, kb.subi(count, kb.idx(1)));
      Value src = kb.addi(rowAddr(lastRow),
                          kb.addi(kb.idx((R + 16) * 4), kb.muli(p, kb.idx(16))));
      Value dst = kb.addi(stage, kb.addi(kb.idx(rowsBytes), kb.muli(p, kb.idx(16))));
      cp.copy16(dst, src, kb.boolean(true));
    });
    const int64_t vPieces = BV / 8;
    pieces(kChunk * vPieces, [&](Value p) {
      Value r = em.divu(p, vPieces), q = em.remu(p, vPieces);
      Value ok = kb.lti(r, count);
      Value t = kb.addi(t0, kb.select(ok, r, kb.idx(0)));
      Value elem = kb.addi(
          kb.muli(kb.addi(kb.muli(kb.addi(kb.muli(bIdx, kb.dim(in[1].shape[1])),
                                          t),
                                  kb.idx(heads)),
                          h),
                  kb.idx(vDim)),
          kb.addi(kb.muli(vb, kb.idx(BV)), kb.muli(q, kb.idx(8))));
      Value src = kb.addi(vBase, kb.muli(elem, kb.idx(2)));
      Value dst = kb.addi(stage, kb.addi(kb.idx(rowsBytes + egcBytes),
                                         kb.addi(kb.muli(r, kb.idx(BV * 2)),
                                                 kb.muli(q, kb.idx(16)))));
      cp.copy16(dst, src, ok);
    });
  };
  auto commit = [&] { NVVM::CpAsyncCommitGroupOp::create(b, loc); };

  for (int64_t c0 = 0; c0 < stages - 1; ++c0) {
    kb.ifThen(kb.lti(kb.idx(c0), numChunks), [&] { issue(kb.idx(c0)); });
    commit();
  }

  auto chunks = scf::ForOp::create(b, loc, kb.idx(0), numChunks, kb.idx(1),
                                   acc0);
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
    Value sRows = viewAt(b.getI32Type(), stageOff, kChunk * RS);
    Value sRows16 = viewAt(b.getBF16Type(), stageOff, kChunk * RS * 2);
    Value sEgc = viewAt(b.getF32Type(), kb.addi(stageOff, kb.idx(rowsBytes)),
                        kDim);
    Value sV = viewAt(b.getBF16Type(),
                      kb.addi(stageOff, kb.idx(rowsBytes + egcBytes)),
                      kChunk * BV);

    // B operand (k x 8) from rows [n][k] at word column wc.
    auto loadB = [&](int64_t n0, int64_t wc) -> FragB {
      Value r = kb.addi(kb.muli(kb.addi(gq, kb.idx(n0)), kb.idx(RS)),
                        kb.addi(tig, kb.idx(wc)));
      return {em.lds(sRows, r), em.lds(sRows, kb.addi(r, kb.idx(4)))};
    };

    SmallVector<FragA> aS(KS);
    for (int64_t ks = 0; ks < KS; ++ks)
      aS[ks] = em.accToA(
          {it[8 * ks + 0], it[8 * ks + 1], it[8 * ks + 2], it[8 * ks + 3]},
          {it[8 * ks + 4], it[8 * ks + 5], it[8 * ks + 6], it[8 * ks + 7]});
    Acc pS[2] = {em.zero(), em.zero()}, oT[2] = {em.zero(), em.zero()};
    for (int64_t ks = 0; ks < KS; ++ks)
      for (int64_t nt = 0; nt < 2; ++nt) {
        pS[nt] = em.mma(aS[ks], loadB(8 * nt, kDim / 2 + 8 * ks), pS[nt]);
        oT[nt] = em.mma(aS[ks], loadB(8 * nt, 8 * ks), oT[nt]);
      }

    Acc r[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + e % 2));
        Value col = kb.addi(kb.muli(warp, kb.idx(16)),
                            kb.addi(gq, kb.idx(8 * (e / 2))));
        Value vv = arith::ExtFOp::create(
            b, loc, b.getF32Type(),
            em.lds(sV, kb.addi(kb.muli(t, kb.idx(BV)), col)));
        r[nt][e] = kb.sub(vv, pS[nt][e]);
      }
    FragA aR = em.accToA(r[0], r[1]);
    Acc dT[2];
    for (int64_t nt = 0; nt < 2; ++nt)
      dT[nt] = em.mma(aR, loadB(8 * nt, R), em.zero());
    FragA aD = em.accToA(dT[0], dT[1]);
    for (int64_t nt = 0; nt < 2; ++nt) {
      oT[nt] = em.mma(aD, loadB(8 * nt, R + 8), oT[nt]);
      for (int64_t e = 0; e < 4; ++e) {
        Value t = kb.addi(tig2, kb.idx(8 * nt + e % 2));
        kb.ifThen(kb.lti(t, count), [&] {
          kb.store(oT[nt][e], o, {bIdx, kb.addi(t0, t), h, vRow[e / 2]});
        });
      }
    }

    // S^T = S0^T e^{G_C} + delta^T kg: B = kg (k = token, n = K), the
    // two tokens of a pair from consecutive rows.
    SmallVector<Value> nextAcc;
    Value kgBase = kb.idx(2 * kDim);
    auto kgAt = [&](Value t, Value kc) {
      return em.lds(sRows16, kb.addi(kb.muli(t, kb.idx(2 * RS)),
                                     kb.addi(kgBase, kc)));
    };
    for (int64_t nt = 0; nt < NT; ++nt) {
      Value d0 = em.lds(sEgc, kCol(nt, 0)), d1 = em.lds(sEgc, kCol(nt, 1));
      Acc acc{kb.mul(it[4 * nt + 0], d0), kb.mul(it[4 * nt + 1], d1),
              kb.mul(it[4 * nt + 2], d0), kb.mul(it[4 * nt + 3], d1)};
      Value kc = kb.addi(gq, kb.idx(8 * nt));
      FragB bK;
      for (int64_t x = 0; x < 2; ++x) {
        Value t = kb.addi(tig2, kb.idx(8 * x));
        bK[x] = em.packBF16(kgAt(t, kc), kgAt(kb.addi(t, kb.idx(1)), kc));
      }
      acc = em.mma(aD, bK, acc);
      nextAcc.append(acc.begin(), acc.end());
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

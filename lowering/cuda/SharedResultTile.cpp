//===- SharedResultTile.cpp - a consumer's result tile ----------*- C++ -*-===//
//
// SharedResultTile (SharedResultTile.h): write, publish, TMA-store and
// drain a consumer warpgroup's bf16 result tile in shared memory.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/SharedResultTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

using namespace mlir;
using namespace mlir::k3;

SharedResultTile::SharedResultTile(WGMMAEmitter &em, Value smem, Value first,
                                   Value consumer, Value t, int64_t columns)
    : em(em), mma{em.b, em.loc, em.kb}, smem(smem), consumer(consumer),
      columns(columns) {
  offset = em.kb.addi(first, em.kb.muli(consumer, em.idx(bytes(columns))));
  lead = em.kb.eqi(t, em.idx(0));
  tile = mma.sharedView(smem, em.b.getBF16Type(), offset, {bytes(columns) / 2});
}

void SharedResultTile::barrier() {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  Value id = arith::IndexCastOp::create(
      b, loc, b.getI32Type(), em.kb.addi(consumer, em.idx(kSharedTileBarrier)));
  NVVM::BarrierOp::create(b, loc, Type(), id,
                          arith::ConstantIntOp::create(b, loc, 128, 32),
                          NVVM::BarrierReductionAttr(), Value());
}

void SharedResultTile::acquire() {
  em.kb.ifThen(lead, [&] {
    NVVM::CpAsyncBulkWaitGroupOp::create(
        em.b, em.loc, em.b.getI32IntegerAttr(0), em.b.getUnitAttr());
  });
  barrier();
}

Value SharedResultTile::at(Value row, Value col) {
  KernelBuilder &kb = em.kb;
  Value box = em.divuIdx(col, 64), within = em.remuIdx(col, 64);
  Value chunk = arith::XOrIOp::create(em.b, em.loc, em.divuIdx(within, 8),
                                      em.remuIdx(row, 8));
  return kb.addi(
      kb.addi(kb.muli(box, em.idx(64 * 64)), kb.muli(row, em.idx(64))),
      kb.addi(kb.muli(chunk, em.idx(8)), em.remuIdx(within, 8)));
}

void SharedResultTile::write(Value row, Value col, Value v) {
  mma.alignedStore(v, tile, ValueRange{at(row, col)});
}

Value SharedResultTile::read(VectorType type, Value row, Value col) {
  return mma.alignedLoad(type, tile, ValueRange{at(row, col)});
}

void SharedResultTile::publish() {
  NVVM::FenceProxyOp::create(
      em.b, em.loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(em.b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
  barrier();
}

void SharedResultTile::store(Value map, Value column, Value row) {
  KernelBuilder &kb = em.kb;
  kb.ifThen(lead, [&] {
    for (int64_t q = 0; q < columns / 64; ++q) {
      Value src = em.view(smem, kb.addi(offset, em.idx(q * 64 * 64 * 2)),
                          em.tileType({64, 64}, em.b.getBF16Type()));
      nvgpu::TmaAsyncStoreOp::create(
          em.b, em.loc, src, map,
          ValueRange{kb.addi(column, em.idx(q * 64)), row}, Value());
    }
    NVVM::CpAsyncBulkCommitGroupOp::create(em.b, em.loc);
  });
}

void SharedResultTile::drain(WGMMAEmitter &em, Value t) {
  em.kb.ifThen(em.kb.eqi(t, em.idx(0)), [&] {
    NVVM::CpAsyncBulkWaitGroupOp::create(em.b, em.loc,
                                         em.b.getI32IntegerAttr(0), UnitAttr());
  });
}

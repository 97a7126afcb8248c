//===- TileCounter.cpp - a persistent kernel's claimed tiles ----*- C++ -*-===//
#include "lowering/cuda/TileCounter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::k3;

namespace {
/// The counter's type: two i32 in global memory (address space 1, where
/// the NVVM lowering places a module's globals).
MemRefType counterType(MLIRContext *ctx) {
  return MemRefType::get({2}, IntegerType::get(ctx, 32),
                         MemRefLayoutAttrInterface{},
                         IntegerAttr::get(IntegerType::get(ctx, 64), 1));
}
} // namespace

TileCounter::TileCounter(KernelBuilder &kb, FunctionOpInterface fn) : kb(kb) {
  Operation *module = SymbolTable::getNearestSymbolTable(fn->getParentOp());
  OpBuilder b(fn->getContext());
  b.setInsertionPoint(fn);
  MemRefType type = counterType(fn->getContext());
  auto zeros = DenseElementsAttr::get(
      RankedTensorType::get({2}, b.getI32Type()), b.getI32IntegerAttr(0));
  global = memref::GlobalOp::create(
      b, fn->getLoc(), (fn.getName() + "_tile_counter").str(),
      b.getStringAttr("private"), type, zeros, /*constant=*/false,
      /*alignment=*/b.getI64IntegerAttr(8));
  SymbolTable(module).insert(global);
}

Value TileCounter::word(int64_t i, Value operand, arith::AtomicRMWKind kind) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value counter =
      memref::GetGlobalOp::create(b, loc, global.getType(), global.getName());
  return memref::AtomicRMWOp::create(b, loc, kind, operand, counter,
                                     ValueRange{kb.idx(i)});
}

Value TileCounter::claim() {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value one = arith::ConstantIntOp::create(b, loc, 1, 32);
  Value tile = word(0, one, arith::AtomicRMWKind::addi);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), tile);
}

void TileCounter::finish() {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value one = arith::ConstantIntOp::create(b, loc, 1, 32);
  Value zero = arith::ConstantIntOp::create(b, loc, 0, 32);
  // The block's last claim performed before its count (and, in the last
  // block, every count before the reset): NVPTX emits the atomics relaxed.
  auto fence = [&] { NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU); };
  fence();
  Value done = arith::IndexCastOp::create(
      b, loc, b.getIndexType(), word(1, one, arith::AtomicRMWKind::addi));
  Value grid = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  kb.ifThen(kb.eqi(done, kb.subi(grid, kb.idx(1))), [&] {
    fence();
    word(0, zero, arith::AtomicRMWKind::assign);
    word(1, zero, arith::AtomicRMWKind::assign);
  });
}

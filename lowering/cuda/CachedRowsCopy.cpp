//===- CachedRowsCopy.cpp - a cache's old rows into another buffer --------===//
#include "lowering/cuda/CachedRowsCopy.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::k3;

void mlir::k3::emitCopyCachedRows(KernelBuilder &kb, const KernelOperand &in,
                                  const KernelOperand &out, Value lens,
                                  Value first, Value stride) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto address = [&](Value m) {
    return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, m);
  };
  kb.ifThen(kb.notb(kb.eqi(address(in.full), address(out.full))), [&] {
    int64_t width = in.shape[2];
    Value len = kb.dim(in.shape[1]);
    Value total = kb.muli(kb.muli(kb.dim(in.shape[0]), len), kb.idx(width));
    scf::ForOp::create(b, loc, first, total, stride, ValueRange{},
                       [&](OpBuilder &, Location, Value i, ValueRange) {
                         Value c = kb.remui(i, width), row = kb.divui(i, width);
                         Value s = arith::RemUIOp::create(b, loc, row, len);
                         Value n = arith::DivUIOp::create(b, loc, row, len);
                         kb.ifThen(kb.lti(s, kb.loadIndex(lens, {n})), [&] {
                           kb.store(kb.load(in.full, {n, s, c}), out.full,
                                    {n, s, c});
                         });
                         scf::YieldOp::create(b, loc);
                       });
  });
}

//===- K3GPUDialect.cpp - k3gpu ops and verifiers ---------------*- C++ -*-===//
#include "dialects/K3GPU/K3GPUDialect.h"
#include "dialects/K3/K3Dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::k3gpu;

#include "dialects/K3GPU/K3GPUOpsDialect.cpp.inc"

void K3GPUDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/K3GPU/K3GPUOps.cpp.inc"
      >();
}

LogicalResult MmaSyncOp::verify() {
  VectorType a = getMatrixA().getType(), b = getMatrixB().getType();
  if (a.getElementType() != b.getElementType())
    return emitOpError("A and B need the same element type");
  auto shape = [](VectorType t) {
    return std::pair(t.getDimSize(0), t.getDimSize(1));
  };
  Type elem = a.getElementType();
  const int64_t per = elem.isBF16() ? 2 : 1;
  auto wantA = VectorType::get({4, per}, elem);
  auto wantB = VectorType::get({2, per}, elem);
  if (a != wantA || b != wantB)
    return emitOpError("needs A ") << wantA << " and B " << wantB;
  if (shape(getMatrixC().getType()) != std::pair<int64_t, int64_t>(2, 2))
    return emitOpError("needs C vector<2x2xf32>");
  return success();
}

/// A 64 x N f32 accumulator and the N / 2 registers a thread holds of it.
static LogicalResult verifyFragment(Operation *op,
                                    nvgpu::WarpgroupAccumulatorType acc,
                                    VectorType fragment) {
  VectorType full = acc.getFragmented();
  if (full.getRank() != 2 || full.getDimSize(0) != 64 ||
      !full.getElementType().isF32())
    return op->emitOpError("needs a 64 x N f32 accumulator, got ") << acc;
  if (fragment.getDimSize(0) != full.getDimSize(1) / 2)
    return op->emitOpError("a thread holds ")
           << full.getDimSize(1) / 2 << " registers of " << acc << ", not "
           << fragment.getDimSize(0);
  return success();
}

LogicalResult WarpgroupFragmentOp::verify() {
  return verifyFragment(*this, getAccumulator().getType(),
                        getFragment().getType());
}

LogicalResult WarpgroupAccumulatorOp::verify() {
  return verifyFragment(*this, getAccumulator().getType(),
                        getFragment().getType());
}

void k3gpu::registerK3GPUDialect(DialectRegistry &registry) {
  registry.insert<K3GPUDialect>();
  registry.addExtension(+[](MLIRContext *ctx, k3::K3Dialect *) {
    ctx->getOrLoadDialect<K3GPUDialect>();
  });
}

#define GET_OP_CLASSES
#include "dialects/K3GPU/K3GPUOps.cpp.inc"

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

LogicalResult ClusterLoadOp::verify() {
  auto base = cast<MemRefType>(getBase().getType());
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(base.getMemorySpace());
  if (!space || space.getValue() != gpu::AddressSpace::Workgroup)
    return emitOpError("reads a workgroup memref, got ") << base;
  if (static_cast<int64_t>(getIndices().size()) != base.getRank())
    return emitOpError("needs ")
           << base.getRank() << " indices, got " << getIndices().size();
  auto result = cast<VectorType>(getResult().getType());
  if (result.getRank() != 1 || result.getElementType() != base.getElementType())
    return emitOpError("loads a 1-D vector of the memref's element type, got ")
           << result;
  return success();
}

/// `[t0, t1, ...]`, possibly empty (the generated parser of a bracketed
/// type list needs at least one type).
static ParseResult parseBracketedTypes(OpAsmParser &parser,
                                       SmallVectorImpl<Type> &types) {
  if (parser.parseLSquare())
    return failure();
  if (succeeded(parser.parseOptionalRSquare()))
    return success();
  if (parser.parseTypeList(types) || parser.parseRSquare())
    return failure();
  return success();
}
static void printBracketedTypes(OpAsmPrinter &printer, Operation *,
                                TypeRange types) {
  printer << "[" << types << "]";
}

LogicalResult TmaPrefetchTileOp::verify() {
  // PTX's tensor prefetch takes 1 to 5 coordinates; the box may be of lower
  // rank than the map (its leading dimensions of size one).
  int64_t rank = getTensorMap().getType().getTensor().getRank();
  int64_t n = getCoordinates().size();
  if (n < 1 || n > 5 || n < rank)
    return emitOpError("needs 1 to 5 coordinates, at least the box's ")
           << rank << ", got " << n;
  return success();
}

LogicalResult WarpgroupMmaChainOp::verify() {
  size_t steps = getDescriptorsB().size();
  if (steps == 0 || getDescriptorsA().empty() == getRegistersA().empty() ||
      steps != getDescriptorsA().size() + getRegistersA().size())
    return emitOpError("needs one A source (descriptors or registers) and "
                       "one B descriptor per step, at least one step");
  if (getMatrixC().getType() != getMatrixD().getType())
    return emitOpError("needs the same accumulator type in and out");
  VectorType acc = getMatrixC().getType().getFragmented();
  if (acc.getRank() != 2 || acc.getDimSize(0) != 64 ||
      !acc.getElementType().isF32())
    return emitOpError("needs a 64 x N f32 accumulator");
  auto shapeOf = [](Value d) {
    return cast<nvgpu::WarpgroupMatrixDescriptorType>(d.getType()).getTensor();
  };
  for (Value a : getDescriptorsA())
    if (shapeOf(a).getShape() != ArrayRef<int64_t>{64, 16} ||
        !shapeOf(a).getElementType().isBF16())
      return emitOpError("each step needs bf16 A [64, 16]");
  for (Value b : getDescriptorsB())
    if (shapeOf(b).getShape() != ArrayRef<int64_t>{16, acc.getDimSize(1)} ||
        !shapeOf(b).getElementType().isBF16())
      return emitOpError("each step needs bf16 B [16, ")
             << acc.getDimSize(1) << "]";
  if (getAsync())
    for (Operation *user : getMatrixD().getUsers())
      if (!isa<WarpgroupMmaWaitOp>(user))
        return emitOpError("is async: its result is read only through "
                           "k3gpu.warpgroup_mma_wait, not '")
               << user->getName() << "'";
  return success();
}

LogicalResult WarpgroupMmaWaitOp::verify() {
  // wgmma.wait_group takes an immediate in [0, 7].
  if (getPending() > 7)
    return emitOpError("pending must be in [0, 7], got ") << getPending();
  if (getAccumulators().empty())
    return emitOpError("needs the accumulators of the groups it retires");
  return success();
}

void k3gpu::registerK3GPUDialect(DialectRegistry &registry) {
  registry.insert<K3GPUDialect>();
  registry.addExtension(+[](MLIRContext *ctx, k3::K3Dialect *) {
    ctx->getOrLoadDialect<K3GPUDialect>();
  });
}

#define GET_OP_CLASSES
#include "dialects/K3GPU/K3GPUOps.cpp.inc"

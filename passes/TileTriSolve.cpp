//===- TileTriSolve.cpp - tiled triangular solves ---------------*- C++ -*-===//
//
// The UT transform solves, per chunk, a C x C unit-lower-triangular system.
// This pass chooses how (seed §8): blocked forward substitution (diagonal
// tiles token by token, off-diagonal blocks as products with the solved
// tiles) or the blockwise inverse followed by one lower-triangular product
// (the tensor-core form).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/Support/MathExtras.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3TILETRISOLVE
#include "passes/Passes.h.inc"

namespace {

struct K3TileTriSolvePass : impl::K3TileTriSolveBase<K3TileTriSolvePass> {
  using Base::Base;

  void runOnOperation() override {
    if (tileSize <= 0 || !llvm::isPowerOf2_64(tileSize)) {
      getOperation()->emitError()
          << "k3-tile-tri-solve: tile-size must be a power of two, got "
          << static_cast<int64_t>(tileSize.getValue());
      return signalPassFailure();
    }
    if (mode != "forward" && mode != "block-inverse") {
      getOperation()->emitError()
          << "k3-tile-tri-solve: mode must be forward or block-inverse, got '"
          << mode << "'";
      return signalPassFailure();
    }
    SmallVector<TriSolveOp> ops;
    getOperation()->walk([&](TriSolveOp op) {
      if (op.getMode() == "forward")
        ops.push_back(op);
    });
    for (TriSolveOp op : ops) {
      if (op.getChunkSize() % tileSize != 0) {
        op.emitOpError() << "chunk_size " << op.getChunkSize()
                         << " is not a multiple of the tile size "
                         << static_cast<int64_t>(tileSize.getValue());
        return signalPassFailure();
      }
      OpBuilder b(op);
      auto tile = b.getI64IntegerAttr(tileSize);
      if (mode == "forward") {
        op.setModeAttr(b.getStringAttr("blocked"));
        op.setTileSizeAttr(tile);
        continue;
      }
      auto inv =
          TriInverseOp::create(b, op.getLoc(), op.getA().getType(), op.getA(),
                               op.getCuSeqlens(), op.getChunkSizeAttr(), tile);
      auto mm = ChunkTrilMatmulOp::create(
          b, op.getLoc(), op.getType(), inv, op.getRhs(), op.getRowScale(),
          op.getCuSeqlens(), op.getChunkSizeAttr());
      op.replaceAllUsesWith(mm.getResult());
      op.erase();
    }
  }
};

} // namespace
} // namespace mlir::k3

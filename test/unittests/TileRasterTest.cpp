//===- TileRasterTest.cpp - the order of a GEMM's output tiles ------------===//
//
// rasterTile (lowering/cuda/TileRaster.h) as the kernels emit it, folded to
// constants: for every grid size and band, the tiles below rowTiles x
// columnTiles cover each (row tile, column tile) exactly once, consecutive
// tiles of a band walk its row tiles first, and the tiles past the end get
// a row tile past the last (the idle blocks of the one-warpgroup grid).
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/TileRaster.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlir;
using namespace mlir::k3;

namespace {

struct Grid {
  int64_t rowTiles, columnTiles, group, extra;
};

/// (row tile, column tile) of tiles 0 .. rowTiles x columnTiles + extra - 1,
/// from the emitted arithmetic folded to constants.
std::vector<std::pair<int64_t, int64_t>> coordinates(const Grid &g) {
  MLIRContext ctx;
  ctx.loadDialect<arith::ArithDialect, func::FuncDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  int64_t tiles = g.rowTiles * g.columnTiles + g.extra;
  SmallVector<Type> results(2 * tiles, b.getIndexType());
  auto fn =
      func::FuncOp::create(b, loc, "raster", b.getFunctionType({}, results));
  b.setInsertionPointToStart(fn.addEntryBlock());
  Value tokens = arith::ConstantIndexOp::create(b, loc, 1);
  KernelBuilder kb(b, loc, tokens, tokens);
  WGMMAEmitter em{b, loc, kb, 2};
  SmallVector<Value> out;
  for (int64_t t = 0; t < tiles; ++t) {
    TileCoordinates at =
        rasterTile(em, kb.idx(t), kb.idx(g.rowTiles), g.columnTiles, g.group);
    out.push_back(at.rowTile);
    out.push_back(at.columnTile);
  }
  auto ret = func::ReturnOp::create(b, loc, out);
  RewritePatternSet none(&ctx);
  EXPECT_TRUE(succeeded(applyPatternsGreedily(fn, std::move(none))));
  std::vector<std::pair<int64_t, int64_t>> coords;
  for (int64_t t = 0; t < tiles; ++t) {
    APInt row, column;
    EXPECT_TRUE(matchPattern(ret.getOperand(2 * t), m_ConstantInt(&row)) &&
                matchPattern(ret.getOperand(2 * t + 1), m_ConstantInt(&column)))
        << "tile " << t << " did not fold";
    coords.push_back({row.getSExtValue(), column.getSExtValue()});
  }
  module->erase();
  return coords;
}

TEST(TileRaster, EveryTileOnceBandsRowsFirstIdlePastTheEnd) {
  for (int64_t rowTiles : {1, 2, 3, 5, 16, 17, 33})
    for (int64_t columnTiles : {1, 2, 3, 7})
      for (int64_t group : {0, 1, 2, 3, 4, 16}) {
        Grid g{rowTiles, columnTiles, group, 2 * columnTiles + 1};
        SCOPED_TRACE(testing::Message()
                     << "rowTiles " << rowTiles << " columnTiles "
                     << columnTiles << " group " << group);
        auto coords = coordinates(g);
        int64_t total = rowTiles * columnTiles;
        std::set<std::pair<int64_t, int64_t>> seen;
        for (int64_t t = 0; t < total; ++t) {
          auto [row, column] = coords[t];
          ASSERT_GE(row, 0);
          ASSERT_LT(row, rowTiles);
          ASSERT_GE(column, 0);
          ASSERT_LT(column, columnTiles);
          ASSERT_TRUE(seen.insert(coords[t]).second) << "tile " << t;
          // Within a band the next tile is the next row tile, or the
          // band's first row tile of the next column tile.
          int64_t band = std::max<int64_t>(group, 1);
          if (t + 1 < total && (t + 1) % (band * columnTiles) != 0) {
            auto [nextRow, nextColumn] = coords[t + 1];
            bool down = nextRow == row + 1 && nextColumn == column;
            bool across = nextColumn == column + 1 && nextRow <= row;
            bool rowMajor =
                band == 1 && ((nextRow == row && nextColumn == column + 1) ||
                              (nextRow == row + 1 && nextColumn == 0));
            EXPECT_TRUE(down || across || rowMajor) << "tile " << t;
          }
        }
        for (int64_t t = total; t < int64_t(coords.size()); ++t)
          EXPECT_GE(coords[t].first, rowTiles) << "tile " << t;
      }
}

} // namespace

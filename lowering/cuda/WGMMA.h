//===- WGMMA.h - Hopper warpgroup tiles for the CUDA emitters ---*- C++ -*-===//
//
// The building blocks of the kernels that multiply with wgmma, on typed
// values and upstream nvgpu ops: shared-memory tiles in the 128-byte swizzle
// (TMA writes it; cp.async writers place each 16-byte chunk at
// `chunk ^ (row % 8)`, swizzledChunk), tensor-map descriptor types,
// mbarrier groups, warpgroup descriptors and accumulators, and the product
// of one landed 128 x 64 stage. Used by LinearWGMMA.cpp and
// the grouped MoE kernel (MoEGroupedKernel.h).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_WGMMA_H
#define K3_LOWERING_CUDA_WGMMA_H

#include "lowering/KernelBuilder.h"
#include "lowering/KernelConfigRules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

namespace mlir::k3 {

/// Rows of a wgmma operand tile, its k-width (one 128-byte swizzled row of
/// bf16) and the k of one wgmma.
constexpr int64_t kWGMMATileRows = 128, kWGMMATileK = 64, kWGMMAK = 16;
/// Bytes of one 128 x 64 bf16 tile.
constexpr int64_t kWGMMATileBytes = kWGMMATileRows * kWGMMATileK * 2;

struct WGMMAEmitter {
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  int64_t stages;

  MLIRContext *ctx() { return b.getContext(); }
  Attribute workgroup() {
    return gpu::AddressSpaceAttr::get(ctx(), gpu::AddressSpace::Workgroup);
  }
  Value idx(int64_t v) { return kb.idx(v); }
  Value divuIdx(Value a, int64_t c) {
    return arith::DivUIOp::create(b, loc, a, idx(c));
  }
  Value remuIdx(Value a, int64_t c) {
    return arith::RemUIOp::create(b, loc, a, idx(c));
  }
  /// Named barrier `id` (an i32) over `threads` threads of the block:
  /// `bar.sync` when `wait`, else `bar.arrive` (a producer or a
  /// warpgroup that hands a turn on without waiting for it).
  void namedBarrier(Value id, int64_t threads, bool wait = true) {
    Value count = arith::ConstantIntOp::create(b, loc, threads, 32);
    if (wait)
      NVVM::BarrierOp::create(b, loc, Type(), id, count,
                              NVVM::BarrierReductionAttr(), Value());
    else
      NVVM::BarrierArriveOp::create(b, loc, id, count);
  }

  MemRefType tileType(ArrayRef<int64_t> shape, Type elem) {
    return MemRefType::get(shape, elem, MemRefLayoutAttrInterface{},
                           workgroup());
  }
  /// The tensor map type of a bf16 box of `shape` (outermost first), with
  /// the 128-byte swizzle.
  nvgpu::TensorMapDescriptorType tensorMapType(ArrayRef<int64_t> shape) {
    return nvgpu::TensorMapDescriptorType::get(
        ctx(), tileType(shape, b.getBF16Type()),
        nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
        nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
        nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  }
  nvgpu::MBarrierGroupType barrierType() {
    return nvgpu::MBarrierGroupType::get(ctx(), workgroup(), stages);
  }
  /// f32 accumulators of a 64 x n warpgroup product.
  nvgpu::WarpgroupAccumulatorType accumulatorType(int64_t n) {
    return nvgpu::WarpgroupAccumulatorType::get(
        ctx(), VectorType::get({64, n}, b.getF32Type()));
  }

  /// A kernel parameter (an !llvm.ptr to a CUtensorMap) as a descriptor of
  /// `shape`.
  Value tensorMap(Value pointer, ArrayRef<int64_t> shape) {
    return UnrealizedConversionCastOp::create(b, loc, tensorMapType(shape),
                                              pointer)
        .getResult(0);
  }

  /// A value of the tensor-map type of a `shape` box with no map behind
  /// it, for tiles that the threads write in the swizzle themselves
  /// (MXFP4Tile.h): a wgmma descriptor reads only its type's swizzle.
  Value swizzleTag(ArrayRef<int64_t> shape) {
    Value null =
        LLVM::ZeroOp::create(b, loc, LLVM::LLVMPointerType::get(ctx()));
    return tensorMap(null, shape);
  }

  /// The first 1024-byte boundary of dynamic shared memory, as a byte
  /// offset (the 128-byte swizzle repeats every 1024 bytes and TMA and
  /// wgmma address it from an aligned base).
  Value alignedBase(Value smem) {
    Value addr = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, smem);
    Value rem = arith::RemUIOp::create(b, loc, addr, idx(1024));
    return arith::RemUIOp::create(
        b, loc, arith::SubIOp::create(b, loc, idx(1024), rem), idx(1024));
  }
  /// A typed view of shared memory at byte `offset`.
  Value view(Value smem, Value offset, MemRefType type) {
    return memref::ViewOp::create(b, loc, type, smem, offset, ValueRange{});
  }
  /// The 128 x 64 bf16 tile at byte `offset`.
  Value tile(Value smem, Value offset) {
    return view(smem, offset,
                tileType({kWGMMATileRows, kWGMMATileK}, b.getBF16Type()));
  }
  /// A cluster pair's shared tile of `rows` x 64 bf16 at byte `tileOffset`:
  /// block `rank` loads rows [rank rows / 2, (rank + 1) rows / 2) from
  /// coordinates (k0, row0 + rank rows / 2) by TMA multicast into both
  /// blocks, completing on `barriers`[stage] in each. The 128-byte swizzle
  /// repeats every 8 rows, so the two half boxes, rows / 2 x 128 bytes
  /// apart, lay out as one box of `rows`. `tm` is the half box's map.
  void loadHalfMulticast(Value smem, Value tileOffset, int64_t rows, Value rank,
                         Value barriers, Value tm, Value k0, Value row0,
                         Value stage) {
    int64_t half = rows / 2;
    Value dst = view(smem, kb.addi(tileOffset, kb.muli(rank, idx(half * 128))),
                     tileType({half, kWGMMATileK}, b.getBF16Type()));
    Value both = arith::ConstantIntOp::create(b, loc, 0b11, 16);
    nvgpu::TmaAsyncLoadOp::create(
        b, loc, dst, barriers, tm,
        ValueRange{k0, kb.addi(row0, kb.muli(rank, idx(half)))}, stage, both,
        Value());
  }

  /// Every thread of the cluster at one point: barrier.cluster's arrive
  /// (release semantics, or `relaxed`: no memory ordering, for a barrier
  /// that only paces) and its wait (acquire). `aligned` (.aligned) where
  /// every thread of each warp reaches it together; callers that reach it
  /// from a branch one thread took leave it off.
  void clusterSync(bool relaxed = false, bool aligned = false) {
    UnitAttr a = aligned ? b.getUnitAttr() : UnitAttr();
    if (relaxed)
      NVVM::ClusterArriveRelaxedOp::create(b, loc, a);
    else
      NVVM::ClusterArriveOp::create(b, loc, a);
    NVVM::ClusterWaitOp::create(b, loc, a);
  }

  /// Column (in elements) of 16-byte chunk `chunk` of swizzled row `row`.
  Value swizzledColumn(Value row, Value chunk) {
    Value x = arith::XOrIOp::create(b, loc, chunk, remuIdx(row, 8));
    return kb.muli(x, idx(8));
  }

  /// The wgmma descriptor of rows [r0, r0 + rows) and k-columns [k0, k0 +
  /// 16) of a 128 x 64 tile, as the operand type `asType`. `tm` gives the
  /// swizzle (only its type is read).
  Value descriptor(Value tile, Value tm, int64_t r0, int64_t rows, int64_t k0,
                   MemRefType asType) {
    auto strided = MemRefType::get(
        {rows, kWGMMAK}, b.getBF16Type(),
        StridedLayoutAttr::get(ctx(), r0 * kWGMMATileK + k0, {kWGMMATileK, 1}),
        workgroup());
    Value sub = memref::SubViewOp::create(
        b, loc, strided, tile, ValueRange{}, ValueRange{}, ValueRange{},
        b.getDenseI64ArrayAttr({r0, k0}),
        b.getDenseI64ArrayAttr({rows, kWGMMAK}),
        b.getDenseI64ArrayAttr({1, 1}));
    auto type = nvgpu::WarpgroupMatrixDescriptorType::get(ctx(), asType);
    return nvgpu::WarpgroupGenerateDescriptorOp::create(b, loc, type, sub, tm);
  }

  /// acc[h] += a_tile[64 h .. 64 h + 64, :] b_tile[0 .. n, :]^T for one
  /// landed stage (both tiles 128 x 64, K-major): four k-steps of 16, the
  /// halves of `acc` (both, or the first alone for a tile of at most 64
  /// rows), each 64 x n (n a multiple of 8: fewer rows of b_tile, as where
  /// the rows are wgmma's N); no waits between the products (one drain at
  /// the end of the stage, unless `drain` is false: then the caller waits
  /// with wgmma.wait_group).
  SmallVector<Value> multiplyStage(Value aTile, Value bTile, Value tmA,
                                   Value tmB, ValueRange acc, bool drain = true,
                                   int64_t n = kWGMMATileRows) {
    SmallVector<Value> out(acc);
    const int64_t halves = out.size();
    MemRefType aType = tileType({64, kWGMMAK}, b.getBF16Type());
    MemRefType bType = tileType({kWGMMAK, n}, b.getBF16Type());
    auto noWait = b.getI64IntegerAttr(2 * kWGMMATileK / kWGMMAK);
    for (int64_t k = 0; k < kWGMMATileK; k += kWGMMAK) {
      Value dB = descriptor(bTile, tmB, 0, n, k, bType);
      for (int64_t h = 0; h < halves; ++h) {
        Value dA = descriptor(aTile, tmA, 64 * h, 64, k, aType);
        out[h] = nvgpu::WarpgroupMmaOp::create(b, loc, accumulatorType(n), dA,
                                               dB, noWait, UnitAttr(),
                                               UnitAttr(), out[h]);
      }
    }
    if (drain)
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    return out;
  }

  /// acc += rows (a 64 x 64 tile) times weights (an n x 64 tile)^T for one
  /// landed stage: four k-steps of m64nNk16, issued without waiting (the
  /// caller bounds the pending groups with wgmma.wait_group). `tm` gives
  /// the swizzle.
  Value multiplyRowsStage(Value rows, Value weights, Value tm, int64_t n,
                          Value acc,
                          int64_t pending = 2 * kWGMMATileK / kWGMMAK) {
    MemRefType aType = tileType({64, kWGMMAK}, b.getBF16Type());
    MemRefType bType = tileType({kWGMMAK, n}, b.getBF16Type());
    // Room for `pending` groups (two stages' of all of a consumer's
    // accumulators): the wait that bounds them comes after.
    auto noWait = b.getI64IntegerAttr(pending);
    for (int64_t k = 0; k < kWGMMATileK; k += kWGMMAK) {
      Value dA = descriptor(rows, tm, 0, 64, k, aType);
      Value dB = descriptor(weights, tm, 0, n, k, bType);
      acc = nvgpu::WarpgroupMmaOp::create(b, loc, accumulatorType(n), dA, dB,
                                          noWait, UnitAttr(), UnitAttr(), acc);
    }
    return acc;
  }

  /// The epilogue's `rows` x `cols` f32 tile at byte `offset`, rows
  /// kEpilogueRowPad elements apart past `cols` (wgmmaEpilogueRowStride).
  Value epilogueTile(Value smem, Value offset, int64_t rows, int64_t cols) {
    int64_t stride = wgmmaEpilogueRowStride(cols);
    Value padded = view(smem, offset, tileType({rows, stride}, b.getF32Type()));
    auto type = MemRefType::get({rows, cols}, b.getF32Type(),
                                StridedLayoutAttr::get(ctx(), 0, {stride, 1}),
                                workgroup());
    return memref::SubViewOp::create(
        b, loc, type, padded, ValueRange{}, ValueRange{}, ValueRange{},
        b.getDenseI64ArrayAttr({0, 0}), b.getDenseI64ArrayAttr({rows, cols}),
        b.getDenseI64ArrayAttr({1, 1}));
  }

  /// The 64 x 128 accumulators (two, or the first half alone) into a 128 x
  /// 128 f32 epilogue tile of shared memory at byte `offset` (callers put
  /// barriers around it).
  Value storeAccumulators(Value smem, Value offset, ArrayRef<Value> acc) {
    const int64_t n = kWGMMATileRows, stride = wgmmaEpilogueRowStride(n);
    Value tile = epilogueTile(smem, offset, 128, n);
    for (int64_t h = 0; h < int64_t(acc.size()); ++h) {
      auto half = MemRefType::get(
          {64, n}, b.getF32Type(),
          StridedLayoutAttr::get(ctx(), 64 * h * stride, {stride, 1}),
          workgroup());
      Value sub = memref::SubViewOp::create(
          b, loc, half, tile, ValueRange{}, ValueRange{}, ValueRange{},
          b.getDenseI64ArrayAttr({64 * h, 0}), b.getDenseI64ArrayAttr({64, n}),
          b.getDenseI64ArrayAttr({1, 1}));
      nvgpu::WarpgroupMmaStoreOp::create(b, loc, acc[h], sub);
    }
    return tile;
  }

  /// The 64 x n accumulators of a product whose rows were wgmma's N
  /// (multiplyStage with the weights as A): acc[h][i][j] into the 128 x 128
  /// f32 epilogue tile at byte `offset` as tile[j][64 h + i], from thread
  /// `t`'s registers (of the warpgroup; callers put barriers around it).
  Value storeAccumulatorsTransposed(Value smem, Value offset,
                                    ArrayRef<Value> acc, int64_t n, Value t);

  /// Waits for stage `stage` of loop step `kt` (parity of its round).
  void waitStage(Value bars, Value kt, Value stage) {
    Value round = divuIdx(kt, stages);
    Value parity = arith::TruncIOp::create(
        b, loc, b.getI1Type(),
        arith::IndexCastOp::create(b, loc, b.getI32Type(), remuIdx(round, 2)));
    nvgpu::MBarrierTryWaitParityOp::create(b, loc, bars, parity, idx(10000000),
                                           stage);
  }
};

/// A consumer warpgroup's 64 x n f32 accumulator as this thread's
/// registers (`k3gpu.warpgroup_fragment`), for epilogues that write from
/// registers: thread t (of the warpgroup) holds rows 16 (t / 32) + (t % 32)
/// / 4 + 8 h (h = 0, 1) and, of each group j of 8 columns, the adjacent
/// columns 8 j + 2 (t % 4) and the next.
class AccumulatorFragment {
public:
  AccumulatorFragment(WGMMAEmitter &em, Value acc, int64_t n, Value t);

  /// Row of half h (of the warpgroup's 64).
  Value row(int64_t h) const { return rows[h]; }
  /// The same without an accumulator (thread t of the warpgroup).
  static Value rowOf(WGMMAEmitter &em, Value t, int64_t h);
  /// First column of group j's pair.
  Value column(int64_t j) const;
  /// Group j's two columns of row half h, as a vector<2xf32>.
  Value pair(int64_t h, int64_t j) const;

  /// Four adjacent columns of one row, after a lane pair traded halves.
  struct RowQuad {
    Value row, column, values;
  };
  /// Lanes t and t ^ 1 trade group j's row halves: the even lane ends
  /// with row half 0's columns 8 j + 2 (t % 4) .. + 3, the odd lane with
  /// row half 1's from 8 j + 2 (t % 4 - 1). `pair0` and `pair1` are this
  /// lane's two columns of each half as vectors of 2 16-bit elements (one
  /// shuffle of a 32-bit word); a 16-bit store of two columns writes half
  /// of a 32-byte sector a row, of four a whole one across the quad.
  RowQuad exchangeRows(int64_t j, Value pair0, Value pair1) const;

private:
  WGMMAEmitter &em;
  Value fragment, firstColumn, oddLane;
  Value rows[2];
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_WGMMA_H

//===- LegacyMMA.h - raw NVVM fragments of unported kernels -----*- C++ -*-===//
//
// The emitters' raw NVVM/LLVM building blocks before the port onto typed
// tiles (MMA.h); removed when the last kernel is ported.
//
// Building blocks of the dedicated kernels that multiply on the tensor cores
// with `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (nvvm.mma.sync:
// MLIR 22's nvgpu.mma.sync cannot lower bf16 operands, "failed to deduce
// operand PTX types"). Fragments are per-lane register values in PTX's
// layout; g = lane / 4 and tig = lane % 4 below.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_LEGACYMMA_H
#define K3_LOWERING_CUDA_LEGACYMMA_H

#include "lowering/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <array>

namespace mlir::k3::legacy {

/// A 16 x 8 f32 accumulator fragment: c0, c1 at (row g, cols 2 tig, +1),
/// c2, c3 at (row g + 8, same cols), g = lane / 4, tig = lane % 4.
using Acc = std::array<Value, 4>;
/// A 16 x 16 bf16 A fragment (four bf16 pairs packed in i32): a0 (row g,
/// cols 2 tig, +1), a1 (row g + 8), a2 (row g, cols + 8), a3 (row g + 8,
/// cols + 8).
using FragA = std::array<Value, 4>;
/// A 16 x 8 bf16 B fragment: b0 (k rows 2 tig, +1; col g), b1 (k rows + 8).
using FragB = std::array<Value, 2>;

struct MMAEmitter {
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;

  Value divu(Value a, int64_t c) {
    return arith::DivUIOp::create(b, loc, a, kb.idx(c));
  }
  Value remu(Value a, int64_t c) {
    return arith::RemUIOp::create(b, loc, a, kb.idx(c));
  }
  Value shuffleXor(Value v, int64_t offset) {
    return gpu::ShuffleOp::create(b, loc, v, offset, 32, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }
  Value warpSum(Value v) {
    for (int64_t off = 16; off >= 1; off /= 2)
      v = kb.add(v, shuffleXor(v, off));
    return v;
  }
  void syncWarp() {
    Value all = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
    NVVM::SyncWarpOp::create(b, loc, all);
  }

  Value lds(Value mem, Value i) {
    return memref::LoadOp::create(b, loc, mem, ValueRange{i});
  }
  void sts(Value v, Value mem, Value i) {
    memref::StoreOp::create(b, loc, v, mem, ValueRange{i});
  }
  Value bf16(Value f) {
    return arith::TruncFOp::create(b, loc, b.getBF16Type(), f);
  }
  /// Two f32 rounded to bf16 and packed little-endian (lo first) in an i32.
  Value pack(Value lo, Value hi) {
    auto vt = VectorType::get({2}, b.getBF16Type());
    Value v = LLVM::PoisonOp::create(b, loc, vt);
    Value parts[2] = {bf16(lo), bf16(hi)};
    for (int i = 0; i < 2; ++i)
      v = LLVM::InsertElementOp::create(
          b, loc, v, parts[i],
          arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(i)));
    return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
  }
  /// Two bf16 values packed little-endian (lo first) in an i32.
  Value packBF16(Value lo, Value hi) {
    auto vt = VectorType::get({2}, b.getBF16Type());
    Value v = LLVM::PoisonOp::create(b, loc, vt);
    Value parts[2] = {lo, hi};
    for (int i = 0; i < 2; ++i)
      v = LLVM::InsertElementOp::create(
          b, loc, v, parts[i],
          arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(i)));
    return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
  }
  /// The A fragment of a 16 x 16 block held as two accumulators (cols
  /// 0..7, 8..15).
  FragA accToA(const Acc &lo, const Acc &hi) {
    return {pack(lo[0], lo[1]), pack(lo[2], lo[3]), pack(hi[0], hi[1]),
            pack(hi[2], hi[3])};
  }
  Acc zero() { return {kb.f32(0), kb.f32(0), kb.f32(0), kb.f32(0)}; }

  /// D = A B + C on the tensor cores.
  Acc mma(const FragA &a, const FragB &bf, const Acc &c) {
    return mmaSync(a, bf, c, 16, NVVM::MMATypes::bf16);
  }
  /// D = A B + C for m16n8k`k` with `type` operands (A: 4 and B: 2 32-bit
  /// registers for bf16 k = 16 and tf32 k = 8), f32 accumulators.
  Acc mmaSync(ArrayRef<Value> a, ArrayRef<Value> bf, const Acc &c, int64_t k,
              NVVM::MMATypes type) {
    MLIRContext *ctx = b.getContext();
    Type f32 = b.getF32Type();
    auto resTy = LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
    auto op = NVVM::MmaOp::create(
        b, loc, resTy, ValueRange(a), ValueRange(bf), ValueRange(c), {16, 8, k},
        std::nullopt, std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    Acc d;
    for (int64_t i = 0; i < 4; ++i)
      d[i] = LLVM::ExtractValueOp::create(b, loc, op.getResult(), i);
    return d;
  }

  /// The byte address of a memref's first element, as an index (for
  /// address arithmetic the memref views cannot express: vector loads,
  /// ldmatrix, cp.async).
  Value addressOf(Value mem) {
    return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
  }
  /// An LLVM pointer in address space `space` (1 global, 3 shared) to the
  /// byte address `addr` (an index).
  Value pointer(Value addr, unsigned space) {
    Value i = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
    auto gen = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::IntToPtrOp::create(b, loc, gen, i);
    return LLVM::AddrSpaceCastOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext(), space), p);
  }
  /// `ptr` + `bytes` (an index). Shared-memory offsets are 32-bit, so that
  /// constant parts fold into the instructions' immediate offsets instead
  /// of each taking a 64-bit register pair.
  Value offsetPointer(Value ptr, Value bytes) {
    auto pt = cast<LLVM::LLVMPointerType>(ptr.getType());
    Type it = pt.getAddressSpace() == 3 ? b.getI32Type() : b.getI64Type();
    Value off = arith::IndexCastOp::create(b, loc, it, bytes);
    return LLVM::GEPOp::create(b, loc, pt, b.getI8Type(), ptr,
                               ArrayRef<LLVM::GEPArg>{off});
  }
  /// `n` consecutive elements of `elem` at `ptr`, in one vector load
  /// aligned to its size (the caller guarantees the alignment), each
  /// widened to f32 unless it is an integer.
  SmallVector<Value> loadVector(Value ptr, Type elem, int64_t n) {
    auto vt = VectorType::get({n}, elem);
    unsigned bytes = n * elem.getIntOrFloatBitWidth() / 8;
    Value v = LLVM::LoadOp::create(b, loc, vt, ptr, bytes);
    SmallVector<Value> out;
    for (int64_t i = 0; i < n; ++i) {
      Value e = LLVM::ExtractElementOp::create(
          b, loc, v, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(i)));
      if (isa<FloatType>(elem) && !elem.isF32())
        e = arith::ExtFOp::create(b, loc, b.getF32Type(), e);
      out.push_back(e);
    }
    return out;
  }
  /// ldmatrix.sync.aligned.m8n8.x4(.trans).b16: four 8 x 8 bf16 matrices;
  /// lane l gives the shared-memory pointer of row l % 8 of matrix l / 8 and
  /// receives, in register j, matrix j's pair at (row l / 4, cols
  /// 2 (l % 4), +1) (transposed: (rows 2 (l % 4), +1, col l / 4)).
  std::array<Value, 4> ldmatrix4(Value sharedPtr, bool transpose) {
    MLIRContext *ctx = b.getContext();
    Type i32 = b.getI32Type();
    auto resTy = LLVM::LLVMStructType::getLiteral(ctx, {i32, i32, i32, i32});
    auto op = NVVM::LdMatrixOp::create(
        b, loc, resTy, sharedPtr, b.getI32IntegerAttr(4),
        NVVM::MMALayoutAttr::get(ctx, transpose ? NVVM::MMALayout::col
                                                : NVVM::MMALayout::row),
        NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8),
        NVVM::LdStMatrixEltTypeAttr::get(ctx, NVVM::LdStMatrixEltType::B16));
    std::array<Value, 4> r;
    for (int64_t i = 0; i < 4; ++i)
      r[i] = LLVM::ExtractValueOp::create(b, loc, op.getResult(), i);
    return r;
  }
  /// Lane's byte offset in a 16 x 16 tile of 16-bit elements (rows
  /// `strideBytes` apart) for ldmatrix4 of an A fragment (rows = M, cols =
  /// K) or of two B fragments from a [K][N] tile (transpose): matrix j of
  /// lane l / 8 is (rows 8 (j % 2), cols 8 (j / 2)).
  Value ldmatrixOffsetA(Value lane, int64_t strideBytes) {
    Value row =
        kb.addi(remu(lane, 8), kb.muli(remu(divu(lane, 8), 2), kb.idx(8)));
    return kb.addi(kb.muli(row, kb.idx(strideBytes)),
                   kb.muli(divu(lane, 16), kb.idx(16)));
  }
  /// The same for two B fragments (N tiles 0-7, 8-15) from a [N][K] tile:
  /// matrix j is (rows 8 (j / 2), cols 8 (j % 2)).
  Value ldmatrixOffsetB(Value lane, int64_t strideBytes) {
    Value row = kb.addi(remu(lane, 8), kb.muli(divu(lane, 16), kb.idx(8)));
    return kb.addi(kb.muli(row, kb.idx(strideBytes)),
                   kb.muli(remu(divu(lane, 8), 2), kb.idx(16)));
  }
  /// A fragment of the 16 x 16 tile whose lane pointer is `ptr` (tile
  /// start + ldmatrixOffsetA).
  FragA loadA(Value ptr) {
    auto r = ldmatrix4(ptr, /*transpose=*/false);
    return {r[0], r[1], r[2], r[3]};
  }
  /// B fragments of N tiles 0-7 and 8-15: from a [N][K] tile (lane pointer
  /// from ldmatrixOffsetB) or, transposed, a [K][N] tile (ldmatrixOffsetA).
  std::array<FragB, 2> loadB2(Value ptr, bool fromKN) {
    auto r = ldmatrix4(ptr, /*transpose=*/fromKN);
    return {FragB{r[0], r[1]}, FragB{r[2], r[3]}};
  }
  /// Half `half` (0: low) of a packed bf16 pair, as f32 (bf16 is f32's
  /// upper 16 bits).
  Value unpackBF16(Value pair, int half) {
    Value bits =
        half == 0 ? arith::ShLIOp::create(b, loc, pair,
                                          arith::ConstantOp::create(
                                              b, loc, b.getI32IntegerAttr(16)))
                        .getResult()
                  : arith::AndIOp::create(
                        b, loc, pair,
                        arith::ConstantOp::create(
                            b, loc, b.getI32IntegerAttr(int32_t(0xffff0000u))))
                        .getResult();
    return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
  }
  /// 1 / x by the special-function unit (rcp.approx.ftz.f32, ~1 ulp):
  /// the IEEE division's slow path is a call per element.
  Value rcpApprox(Value x) {
    return NVVM::RcpApproxFtzF32Op::create(b, loc, b.getF32Type(), x);
  }

  /// The kernel's dynamic shared memory as bytes (the launch states its
  /// size, k3.launch_smem).
  Value dynamicSharedMemory() {
    auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                         gpu::AddressSpace::Workgroup);
    return gpu::DynamicSharedMemoryOp::create(
        b, loc,
        MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                        MemRefLayoutAttrInterface{}, wg));
  }
  /// `count` elements of `elem` at byte `offset` of the shared memory.
  Value sharedView(Value smem, Type elem, Value offset, int64_t count) {
    auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                         gpu::AddressSpace::Workgroup);
    auto ty = MemRefType::get({count}, elem, MemRefLayoutAttrInterface{}, wg);
    return memref::ViewOp::create(b, loc, ty, smem, offset, ValueRange{})
        .getResult();
  }
};

} // namespace mlir::k3::legacy

#endif // K3_LOWERING_CUDA_LEGACYMMA_H

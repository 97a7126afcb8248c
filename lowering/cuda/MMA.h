//===- MMA.h - warp-level tensor-core tiles for the CUDA emitters -*- C++
//-*-===//
//
// Building blocks of the dedicated kernels that multiply on the tensor
// cores, on typed values: shared memory as memrefs in the workgroup address
// space (views of the dynamic shared memory), fragments as vectors in
// nvgpu's convention (A vector<4x2xbf16>, B vector<2x2xbf16>, accumulator
// vector<2x2xf32>; tf32: A vector<4x1xf32>, B vector<2x1xf32>), loaded by
// nvgpu.ldmatrix and multiplied by k3gpu.mma_sync (MLIR 22's nvgpu.mma.sync
// cannot lower bf16 operands, "failed to deduce operand PTX types"). No
// NVVM or LLVM ops here: those come from the conversions
// (convert-nvgpu-to-nvvm, convert-k3gpu-to-nvvm). g = lane / 4 and
// tig = lane % 4 below.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MMA_H
#define K3_LOWERING_CUDA_MMA_H

#include "dialects/K3/K3Dialect.h"
#include "dialects/K3GPU/K3GPUDialect.h"
#include "lowering/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <array>
#include <functional>

namespace mlir::k3 {

/// The four f32 elements of a 16 x 8 accumulator fragment: c0, c1 at (row
/// g, cols 2 tig, +1), c2, c3 at (row g + 8, same cols). Kept as scalars
/// between products (loop-carried values stay scalar registers); each
/// k3gpu.mma_sync sees them as its vector<2x2xf32>.
using Acc = std::array<Value, 4>;
/// A 16 x 16 bf16 A fragment, vector<4x2xbf16>: rows a0 (row g, cols
/// 2 tig, +1), a1 (row g + 8), a2 (row g, cols + 8), a3 (row g + 8, cols
/// + 8).
using FragA = Value;
/// A 16 x 8 bf16 B fragment, vector<2x2xbf16>: b0 (k rows 2 tig, +1; col
/// g), b1 (k rows + 8).
using FragB = Value;

struct MMAEmitter {
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;

  Value divu(Value a, int64_t c) { return kb.divui(a, c); }
  Value remu(Value a, int64_t c) { return kb.remui(a, c); }
  /// x * y + a with contraction allowed (one fma.rn.f32), unlike
  /// KernelBuilder::fma's rounded mul and add (kept there so that loop
  /// nests match the oracle step by step).
  Value fmaContract(Value x, Value y, Value a) {
    auto contract = arith::FastMathFlags::contract;
    return arith::AddFOp::create(
        b, loc, arith::MulFOp::create(b, loc, x, y, contract), a, contract);
  }
  /// A static shared-memory array of `n` elements of the kernel `fn`
  /// (a workgroup attribution of the gpu.func).
  /// A shared-memory array of `n` elements, 16-byte aligned: LLVM merges
  /// four i32 loads of it into one 16-byte ld.shared.v4 as if it were, and
  /// after an array of 6 i32 (an MoE of 6 experts) it was not: a
  /// misaligned-address fault in moe_dispatch (bench/results/e2e-checks/
  /// tiny-kimi-linear-cuda-sanitizer-nvidia-h200-20261203T2245Z.txt).
  Value workgroupArray(FunctionOpInterface fn, Type elem, int64_t n) {
    auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                         gpu::AddressSpace::Workgroup);
    auto gpuFn = cast<gpu::GPUFuncOp>(fn.getOperation());
    Value array = gpuFn.addWorkgroupAttribution(
        MemRefType::get({n}, elem, MemRefLayoutAttrInterface{}, wg), loc);
    gpuFn.setWorkgroupAttributionAttr(gpuFn.getNumWorkgroupAttributions() - 1,
                                      "llvm.align", b.getI64IntegerAttr(16));
    return array;
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
  /// The block's reduction of one value a thread, in every thread: a
  /// butterfly of shuffles with `combine` over the warp, then the `warps`
  /// warps' values through `scratch` at [slot, slot + warps), combined in
  /// warp order after one barrier (the caller orders any reuse of the
  /// slots).
  Value blockReduce(Value v, Value tid, int64_t warps, Value scratch,
                    int64_t slot,
                    const std::function<Value(Value, Value)> &combine) {
    for (int64_t off = 16; off >= 1; off /= 2)
      v = combine(v, shuffleXor(v, off));
    Value lane = kb.remui(tid, 32), warp = kb.divui(tid, 32);
    kb.ifThen(kb.eqi(lane, kb.idx(0)),
              [&] { sts(v, scratch, {kb.addi(kb.idx(slot), warp)}); });
    gpu::BarrierOp::create(b, loc);
    Value r = lds(scratch, {kb.idx(slot)});
    for (int64_t w = 1; w < warps; ++w)
      r = combine(r, lds(scratch, {kb.idx(slot + w)}));
    return r;
  }

  Value lds(Value mem, ValueRange i) {
    return memref::LoadOp::create(b, loc, mem, i);
  }
  void sts(Value v, Value mem, ValueRange i) {
    memref::StoreOp::create(b, loc, v, mem, i);
  }
  Value bf16(Value f) {
    return arith::TruncFOp::create(b, loc, b.getBF16Type(), f);
  }
  /// Element i of a 1-D vector, or (i, j) of a 2-D one.
  Value extract(Value v, ArrayRef<int64_t> pos) {
    return vector::ExtractOp::create(b, loc, v, pos);
  }
  /// Rows (1-D vectors of one type) stacked into a 2-D vector.
  Value stack(ArrayRef<Value> rows) {
    auto row = cast<VectorType>(rows[0].getType());
    auto ty = VectorType::get({int64_t(rows.size()), row.getDimSize(0)},
                              row.getElementType());
    Value v = arith::ConstantOp::create(b, loc, ty, b.getZeroAttr(ty));
    for (auto [i, r] : llvm::enumerate(rows))
      v = vector::InsertOp::create(b, loc, r, v, int64_t(i));
    return v;
  }
  /// Rows [first, first + n) of a 2-D vector.
  Value rows(Value v, int64_t first, int64_t n) {
    SmallVector<Value> rs;
    for (int64_t i = 0; i < n; ++i)
      rs.push_back(extract(v, {first + i}));
    return stack(rs);
  }
  /// Two f32 rounded to bf16, lo first: a row of a bf16 fragment.
  Value pair(Value lo, Value hi) {
    return vector::FromElementsOp::create(b, loc,
                                          VectorType::get({2}, b.getBF16Type()),
                                          ValueRange{bf16(lo), bf16(hi)});
  }
  /// The same pair as the 32-bit word packed storage holds (lo in the low
  /// half).
  Value packWord(Value lo, Value hi) {
    Value w = vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), pair(lo, hi));
    return extract(w, {0});
  }
  /// The A fragment of a 16 x 16 block held as two accumulators (cols
  /// 0..7, 8..15).
  FragA accToA(const Acc &lo, const Acc &hi) {
    return stack({pair(lo[0], lo[1]), pair(lo[2], lo[3]), pair(hi[0], hi[1]),
                  pair(hi[2], hi[3])});
  }
  Acc zero() { return {kb.f32(0), kb.f32(0), kb.f32(0), kb.f32(0)}; }

  /// D = A B + C on the tensor cores (k3gpu.mma_sync: bf16 m16n8k16 or
  /// tf32 m16n8k8, from A's type).
  Acc mma(Value a, Value bf, const Acc &c) {
    auto row = [&](Value x, Value y) {
      return vector::FromElementsOp::create(
          b, loc, VectorType::get({2}, b.getF32Type()), ValueRange{x, y});
    };
    Value cv = stack({row(c[0], c[1]), row(c[2], c[3])});
    Value d = k3gpu::MmaSyncOp::create(b, loc, cv.getType(), a, bf, cv);
    return {extract(d, {0, 0}), extract(d, {0, 1}), extract(d, {1, 0}),
            extract(d, {1, 1})};
  }

  /// nvgpu.ldmatrix x4 (m8n8, b16) of a bf16 tile view: lane l gives the
  /// (row, col) of row l % 8 of matrix l / 8 and receives, in row j of the
  /// result, matrix j's pair at (row l / 4, cols 2 (l % 4), +1)
  /// (transposed: (rows 2 (l % 4), +1, col l / 4)).
  Value ldmatrix4(Value tile, ValueRange at, bool transpose) {
    auto ty = VectorType::get({4, 2}, b.getBF16Type());
    return nvgpu::LdMatrixOp::create(b, loc, ty, tile, at, transpose, 4);
  }
  /// The lane's (row, col) in a 16 x 16 tile for ldmatrix4 of an A
  /// fragment (rows = M, cols = K) or of two B fragments from a [K][N]
  /// tile (transposed): matrix j is (rows 8 (j % 2), cols 8 (j / 2)).
  std::array<Value, 2> ldmatrixLaneA(Value lane) {
    return {kb.addi(remu(lane, 8), kb.muli(remu(divu(lane, 8), 2), kb.idx(8))),
            kb.muli(divu(lane, 16), kb.idx(8))};
  }
  /// The same for two B fragments (N tiles 0-7, 8-15) from a [N][K] tile:
  /// matrix j is (rows 8 (j / 2), cols 8 (j % 2)).
  std::array<Value, 2> ldmatrixLaneB(Value lane) {
    return {kb.addi(remu(lane, 8), kb.muli(divu(lane, 16), kb.idx(8))),
            kb.muli(remu(divu(lane, 8), 2), kb.idx(8))};
  }
  /// B fragments of N tiles 0-7 and 8-15: from a [N][K] tile (lane
  /// position from ldmatrixLaneB) or, transposed, a [K][N] tile
  /// (ldmatrixLaneA).
  std::array<FragB, 2> loadB2(Value tile, ValueRange at, bool fromKN) {
    Value r = ldmatrix4(tile, at, /*transpose=*/fromKN);
    return {rows(r, 0, 2), rows(r, 2, 2)};
  }
  /// Element `half` (0: the low one) of a bf16 pair (a fragment row), as
  /// f32: bf16 is f32's upper 16 bits, so a shift or a mask of the pair's
  /// 32-bit word.
  Value unpackBF16(Value pair, int half) {
    Value word =
        extract(vector::BitCastOp::create(
                    b, loc, VectorType::get({1}, b.getI32Type()), pair),
                {0});
    Value bits =
        half == 0 ? arith::ShLIOp::create(b, loc, word,
                                          arith::ConstantOp::create(
                                              b, loc, b.getI32IntegerAttr(16)))
                        .getResult()
                  : arith::AndIOp::create(
                        b, loc, word,
                        arith::ConstantOp::create(
                            b, loc, b.getI32IntegerAttr(int32_t(0xffff0000u))))
                        .getResult();
    return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
  }
  /// 1 / x by the special-function unit (k3gpu.rcp_approx, ~1 ulp): the
  /// IEEE division's slow path is a call per element.
  Value rcpApprox(Value x) {
    return k3gpu::RcpApproxOp::create(b, loc, x.getType(), x);
  }
  /// sigmoid(x) = 1 / (1 + e^-x) by the special-function unit: one ex2 of
  /// -x log2(e) and one rcp (a few ulp), where expf and the IEEE division
  /// take about 20 instructions; e^-x = inf for very negative x gives 0.
  Value sigmoidApprox(Value x) {
    Value e =
        math::Exp2Op::create(b, loc, kb.mul(x, kb.f32(-1.4426950408889634)));
    return rcpApprox(kb.add(kb.f32(1.0), e));
  }
  /// silu(x) = x sigmoid(x), as sigmoidApprox.
  Value siluApprox(Value x) { return kb.mul(x, sigmoidApprox(x)); }
  Value lg2Approx(Value x) {
    return k3gpu::Lg2ApproxOp::create(b, loc, x.getType(), x);
  }

  /// `n` consecutive elements at `at` of `mem` (the innermost dimension),
  /// in one vector load aligned to its size (the caller guarantees the
  /// alignment), each widened to f32 unless it is an integer.
  SmallVector<Value> loadVector(Value mem, ValueRange at, int64_t n) {
    Type elem = cast<MemRefType>(mem.getType()).getElementType();
    auto vt = VectorType::get({n}, elem);
    auto ld = vector::LoadOp::create(b, loc, vt, mem, at);
    ld.setAlignment(n * elem.getIntOrFloatBitWidth() / 8);
    SmallVector<Value> out;
    for (int64_t i = 0; i < n; ++i) {
      Value e = extract(ld, {i});
      if (isa<FloatType>(elem) && !elem.isF32())
        e = arith::ExtFOp::create(b, loc, b.getF32Type(), e);
      out.push_back(e);
    }
    return out;
  }
  /// A vector load (store) of `mem` at `at` aligned to the vector's size,
  /// which the caller guarantees: without the alignment the NVPTX backend
  /// splits it into element accesses (a bf16 pair became two st.global.b16,
  /// four times the sectors a warp's stores touch: bench/results/e2e-checks/
  /// ncu-kda-operands-banks-nvidia-h200-20261204T0727Z.txt).
  Value alignedLoad(VectorType type, Value mem, ValueRange at) {
    auto ld = vector::LoadOp::create(b, loc, type, mem, at);
    ld.setAlignment(vectorBytes(type));
    return ld;
  }
  void alignedStore(Value v, Value mem, ValueRange at) {
    auto st = vector::StoreOp::create(b, loc, v, mem, at);
    st.setAlignment(vectorBytes(cast<VectorType>(v.getType())));
  }
  static int64_t vectorBytes(VectorType t) {
    return t.getNumElements() * t.getElementType().getIntOrFloatBitWidth() / 8;
  }
  /// Stores f32 `vals` to consecutive elements at `at` of `mem` in one
  /// vector store aligned to its size, each rounded to `mem`'s element type
  /// (a bf16 KDA state: kda-state-dtype=bf16).
  void storeVector(ArrayRef<Value> vals, Value mem, ValueRange at) {
    Type elem = cast<MemRefType>(mem.getType()).getElementType();
    SmallVector<Value> stored(vals);
    if (elem != b.getF32Type())
      for (Value &x : stored)
        x = arith::TruncFOp::create(b, loc, elem, x);
    auto vt = VectorType::get({int64_t(vals.size())}, elem);
    Value v = vector::FromElementsOp::create(b, loc, vt, stored);
    auto st = vector::StoreOp::create(b, loc, v, mem, at);
    st.setAlignment(vectorBytes(vt));
  }

  /// The bare pointer `base` viewed row-major at `sizes` with its static
  /// sizes and strides in the type (KernelBuilder::view's are dynamic):
  /// vector loads and nvgpu copies need a unit innermost stride.
  Value contiguousView(Value base, ArrayRef<Value> sizes) {
    const int64_t rank = sizes.size();
    SmallVector<int64_t> shape(rank), strides(rank);
    SmallVector<OpFoldResult> sizeOfr(rank), strideOfr(rank);
    int64_t stride = 1;
    Value strideV = kb.idx(1);
    for (int64_t i = rank - 1; i >= 0; --i) {
      std::optional<int64_t> c = getConstantIntValue(sizes[i]);
      shape[i] = c ? *c : ShapedType::kDynamic;
      strides[i] = stride;
      sizeOfr[i] = c ? OpFoldResult(b.getIndexAttr(*c)) : sizes[i];
      strideOfr[i] = stride != ShapedType::kDynamic
                         ? OpFoldResult(b.getIndexAttr(stride))
                         : OpFoldResult(strideV);
      strideV = kb.muli(strideV, sizes[i]);
      stride = c && stride != ShapedType::kDynamic ? stride * *c
                                                   : ShapedType::kDynamic;
    }
    auto baseType = cast<MemRefType>(base.getType());
    // Static strides are the row-major ones: the identity layout.
    MemRefLayoutAttrInterface layout;
    if (llvm::is_contained(strides, ShapedType::kDynamic))
      layout = StridedLayoutAttr::get(b.getContext(), 0, strides);
    auto type = MemRefType::get(shape, baseType.getElementType(), layout);
    return memref::ReinterpretCastOp::create(
        b, loc, type, base, b.getIndexAttr(0), sizeOfr, strideOfr);
  }
  Value contiguousView(const KernelOperand &x) {
    SmallVector<Value> sizes;
    for (int64_t d : x.shape)
      sizes.push_back(kb.dim(d));
    return contiguousView(x.base, sizes);
  }

  /// `i` (a shared-memory offset) through 32 bits, as the pre-port
  /// kernels' i32 offsets on one shared pointer: LLVM may then compute it,
  /// and what it is made of, in 32-bit registers.
  Value narrow(Value i) {
    Value i32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), i);
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), i32);
  }

  /// cp.async of `elems` elements (16 bytes) from src[srcAt] to
  /// dst[dstAt], zero-filled unless `valid` (source size 0; null: always
  /// valid).
  void asyncCopy(Value dst, ValueRange dstAt, Value src, ValueRange srcAt,
                 int64_t elems, Value valid) {
    Value srcElems =
        valid ? kb.select(valid, kb.idx(elems), kb.idx(0)) : kb.idx(elems);
    nvgpu::DeviceAsyncCopyOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), dst, dstAt,
        src, srcAt, b.getIndexAttr(elems), srcElems, b.getUnitAttr());
  }
  /// Closes the group of the copies issued since the last one. The copies
  /// may sit in scf.if regions, so the group names no tokens: groups are
  /// counted, not named, by cp.async. (MLIR 22 prints a token-less
  /// create_group so that the next line's result is read back as its
  /// token; k3.all_issued ends the operand list.)
  Value commitGroup() {
    auto tokTy = nvgpu::DeviceAsyncTokenType::get(b.getContext());
    auto group =
        nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokTy, ValueRange{});
    K3Dialect::AllIssuedAttrHelper(b.getContext())
        .setAttr(group, b.getUnitAttr());
    return group;
  }
  /// Waits until at most `pending` groups are in flight. The count is what
  /// waits (cp.async.wait_group); the token, a group committed before,
  /// only orders the wait after it in the IR.
  void waitGroups(Value after, int32_t pending) {
    nvgpu::DeviceAsyncWaitOp::create(b, loc, after,
                                     b.getI32IntegerAttr(pending));
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
  /// A [shape] array of `elem` at byte `offset` of the shared memory.
  Value sharedView(Value smem, Type elem, Value offset,
                   ArrayRef<int64_t> shape) {
    auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                         gpu::AddressSpace::Workgroup);
    auto ty = MemRefType::get(shape, elem, MemRefLayoutAttrInterface{}, wg);
    return memref::ViewOp::create(b, loc, ty, smem, offset, ValueRange{})
        .getResult();
  }
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_MMA_H

//===- LinearWGMMA.cpp - k3.linear with TMA and wgmma -----------*- C++ -*-===//
//
// y = x W^T for bf16 x [T, K] and W [N, K] on Hopper (config kernel
// `linear_tma_wgmma`): a block of one warpgroup per 128 x 128 output tile.
// Thread 0 streams 128 x 64 tiles of x and W into `stages` shared-memory
// buffers with TMA (128-byte swizzle, zero fill past the last token and
// past the last weight row of a partial last column tile), each
// stage completing an mbarrier; the warpgroup multiplies every landed stage
// with wgmma (m64n128k16, both operands K-major from shared memory, f32
// accumulators in registers: two m64 halves), then thread 0 refills that
// stage with the tile `stages` steps ahead. The accumulators go through
// shared memory so that the rows past the last token are not written.
//
// Everything is built from upstream nvgpu ops on typed values
// (tensormap descriptors, mbarrier groups, warpgroup descriptors and
// accumulators); the runtime encodes the two tensor maps per call
// (#k3.tensor_map on the kernel, ArtifactPlan.cpp).
//
// Not yet measured on a GPU (docs/gemm.md): it is opt-in,
// kernel-config=linear.kernel=linear_tma_wgmma.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/WGMMA.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kTileM = kWGMMATileRows, kTileN = 128, kTileK = kWGMMATileK;
constexpr int64_t kThreads = 128;
/// Bytes of one stage (x and W tiles).
constexpr int64_t kTileBytes = kWGMMATileBytes, kStageBytes = 2 * kTileBytes;

/// The 128 x 64 tiles of x and W as TMA boxes.
const int64_t kBox[] = {kTileM, kTileK};

/// The x or W tile (`which` 0 or 1) of stage `stage`.
Value stageTile(WGMMAEmitter &em, Value smem, Value base, Value stage,
                int64_t which) {
  KernelBuilder &kb = em.kb;
  Value off = kb.addi(base, kb.addi(kb.muli(stage, em.idx(kStageBytes)),
                                    em.idx(which * kTileBytes)));
  return em.tile(smem, off);
}

/// Thread 0's loads of k-step `kt` into `stage`: both tiles, one barrier
/// expecting their bytes.
void issueLoads(WGMMAEmitter &em, Value bars, Value tmX, Value tmW, Value smem,
                Value base, Value stage, Value kt, Value row0, Value col0) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  nvgpu::MBarrierArriveExpectTxOp::create(b, loc, bars, em.idx(kStageBytes),
                                          stage, Value());
  Value k0 = em.kb.muli(kt, em.idx(kTileK));
  nvgpu::TmaAsyncLoadOp::create(b, loc, stageTile(em, smem, base, stage, 0),
                                bars, tmX, ValueRange{k0, row0}, stage, Value(),
                                Value());
  nvgpu::TmaAsyncLoadOp::create(b, loc, stageTile(em, smem, base, stage, 1),
                                bars, tmW, ValueRange{k0, col0}, stage, Value(),
                                Value());
}

/// The whole kernel for one op; its steps are the methods.
class LinearWGMMAKernel {
public:
  LinearWGMMAKernel(LinearOp op, KernelOperands<LinearOp> ops,
                    KernelEmission &e)
      : op(op), ops(ops), e(e), b(e.kb.builder()), loc(op.getLoc()), kb(e.kb),
        em{b, loc, kb, e.config.getStages()} {}

  LogicalResult emit() {
    KernelOperand x = ops.getInput(), w = ops.getWeight();
    nOut = w.shape[0];
    nIn = w.shape[1];
    rows = kb.dim(x.shape[0]);
    auto form = kb.linearForm(rows);
    if (!form)
      return op.emitOpError() << "linear_tma_wgmma needs a row count linear "
                                 "in one runtime size";
    addTensorMapParameters();
    // The last column tile may be partial (N = 576: 4.5 tiles): TMA fills
    // W's rows past N with zeros and the epilogue stores columns < N only.
    int64_t nb = (nOut + kTileN - 1) / kTileN;
    // Blocks: ceil(rows / 128) row tiles x nb column tiles (a few past the
    // last row tile stay idle).
    e.setLaunch(*form, nb, (kTileM - 1) * nb, kTileM, {kThreads, 1, 1},
                linearWGMMASharedBytes(em.stages));
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    mTile = kb.muli(em.divuIdx(bid, nb), em.idx(kTileM));
    nTile = kb.muli(em.remuIdx(bid, nb), em.idx(kTileN));
    kb.ifThen(kb.lti(mTile, rows), [&] { body(); });
    return success();
  }

private:
  /// The tensor maps of x and W, after the sizes: parameters the runtime
  /// fills with each call's CUtensorMap addresses.
  void addTensorMapParameters() {
    auto fn = e.fn;
    auto ptr = LLVM::LLVMPointerType::get(b.getContext());
    unsigned n = fn.getNumArguments();
    // Appending to a kernel's own signature cannot fail.
    (void)fn.insertArgument(n, ptr, DictionaryAttr(), loc);
    (void)fn.insertArgument(n + 1, ptr, DictionaryAttr(), loc);
    Block &entry = fn.getFunctionBody().front();
    xMapArg = entry.getArgument(n);
    wMapArg = entry.getArgument(n + 1);
    SmallVector<int64_t> box = {kTileK, kTileM};
    auto map = [&](int64_t operand) -> Attribute {
      return TensorMapAttr::get(b.getContext(), operand, box,
                                TensorMapSwizzle::swizzle_128b);
    };
    K3Dialect::TensorMapsAttrHelper(b.getContext())
        .setAttr(fn, b.getArrayAttr({map(0), map(1)}));
  }

  void body() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value first = kb.eqi(tid, em.idx(0));
    smem = dynamicSharedMemory();
    base = em.alignedBase(smem);
    tmX = em.tensorMap(xMapArg, kBox);
    tmW = em.tensorMap(wMapArg, kBox);
    bars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    for (int64_t s = 0; s < em.stages; ++s)
      nvgpu::MBarrierInitOp::create(b, loc, bars, em.idx(1), em.idx(s), first);
    nvgpu::TmaPrefetchOp::create(b, loc, tmX, first);
    nvgpu::TmaPrefetchOp::create(b, loc, tmW, first);
    gpu::BarrierOp::create(b, loc);
    int64_t steps = nIn / kTileK;
    kb.ifThen(first, [&] {
      for (int64_t s = 0; s < std::min(em.stages, steps); ++s)
        issueLoads(em, bars, tmX, tmW, smem, base, em.idx(s), em.idx(s), mTile,
                   nTile);
    });
    SmallVector<Value> acc = mainLoop(first, steps);
    epilogue(tid, acc);
  }

  /// k-steps: wait for the stage, multiply it, refill it `stages` ahead.
  SmallVector<Value> mainLoop(Value first, int64_t steps) {
    Value init = nvgpu::WarpgroupMmaInitAccumulatorOp::create(
        b, loc, em.accumulatorType(kTileN));
    auto loop = scf::ForOp::create(b, loc, em.idx(0), em.idx(steps), em.idx(1),
                                   ValueRange{init, init});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = em.remuIdx(kt, em.stages);
    em.waitStage(bars, kt, stage);
    SmallVector<Value> acc =
        em.multiplyStage(stageTile(em, smem, base, stage, 0),
                         stageTile(em, smem, base, stage, 1), tmX, tmW,
                         loop.getRegionIterArgs());
    // Every warp is done with the stage before thread 0 overwrites it.
    gpu::BarrierOp::create(b, loc);
    Value next = kb.addi(kt, em.idx(em.stages));
    kb.ifThen(kb.andi(first, kb.lti(next, em.idx(steps))), [&] {
      issueLoads(em, bars, tmX, tmW, smem, base, stage, next, mTile, nTile);
    });
    scf::YieldOp::create(b, loc, acc);
    return SmallVector<Value>(loop.getResults());
  }

  /// Accumulators to a 128 x 128 f32 tile in shared memory (reusing the
  /// stages), then each in-range row to y, 4 columns per lane.
  void epilogue(Value tid, ArrayRef<Value> acc) {
    gpu::BarrierOp::create(b, loc);
    Value tile = em.storeAccumulators(smem, base, acc);
    gpu::BarrierOp::create(b, loc);
    MMAEmitter mma{b, loc, kb};
    Value y = mma.contiguousView(e.outputs[0].base, {rows, em.idx(nOut)});
    Type outElem = cast<MemRefType>(y.getType()).getElementType();
    Value warp = em.divuIdx(tid, 32),
          col = kb.muli(em.remuIdx(tid, 32), em.idx(4));
    auto loop = scf::ForOp::create(b, loc, warp, em.idx(kTileM), em.idx(4));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value r = loop.getInductionVar(), row = kb.addi(mTile, r);
    Value inside =
        kb.andi(kb.lti(row, rows), kb.lti(kb.addi(nTile, col), em.idx(nOut)));
    kb.ifThen(inside, [&] {
      auto v4 = VectorType::get({4}, b.getF32Type());
      Value v = vector::LoadOp::create(b, loc, v4, tile, ValueRange{r, col});
      if (!outElem.isF32())
        v = arith::TruncFOp::create(b, loc, VectorType::get({4}, outElem), v);
      vector::StoreOp::create(b, loc, v, y,
                              ValueRange{row, kb.addi(nTile, col)});
    });
  }

  Value dynamicSharedMemory() {
    return gpu::DynamicSharedMemoryOp::create(
        b, loc,
        MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                        MemRefLayoutAttrInterface{}, em.workgroup()));
  }

  LinearOp op;
  KernelOperands<LinearOp> ops;
  KernelEmission &e;
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  WGMMAEmitter em;
  int64_t nOut = 0, nIn = 0;
  Value rows, mTile, nTile, xMapArg, wMapArg, smem, base, tmX, tmW, bars;
};

struct LinearWGMMAPattern : OpKernelPattern<LinearOp> {
  LinearWGMMAPattern() : OpKernelPattern(KernelKind::linear_tma_wgmma) {}
  LogicalResult emit(LinearOp op, Adaptor operands,
                     KernelEmission &e) const override {
    if (failed(LinearWGMMAKernel(op, operands, e).emit()))
      return failure();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateLinearWGMMAPattern(KernelPatternSet &patterns) {
  patterns.add<LinearWGMMAPattern>();
}

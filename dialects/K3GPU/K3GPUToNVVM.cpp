//===- K3GPUToNVVM.cpp - k3gpu ops to NVVM ----------------------*- C++ -*-===//
//
// One ConvertOpToLLVMPattern per k3gpu op, in the style of MLIR's
// NVGPUToNVVM.cpp: fragments arrive as LLVM arrays of vectors (a
// vector<4x2xbf16> is !llvm.array<4 x vector<2xbf16>>), each row is one
// 32-bit register of the instruction.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3GPU/K3GPUDialect.h"

#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace mlir::k3gpu;

namespace {

/// The rows of a converted 2-D fragment, each bitcast to `rowType`.
SmallVector<Value> fragmentRows(OpBuilder &b, Location loc, Value array,
                                int64_t rows, Type rowType) {
  SmallVector<Value> out;
  for (int64_t i = 0; i < rows; ++i) {
    Value r = LLVM::ExtractValueOp::create(b, loc, array, i);
    if (r.getType() != rowType)
      r = LLVM::BitcastOp::create(b, loc, rowType, r);
    out.push_back(r);
  }
  return out;
}

struct MmaSyncOpLowering : ConvertOpToLLVMPattern<MmaSyncOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(MmaSyncOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type i32 = rewriter.getI32Type(), f32 = rewriter.getF32Type();
    const bool bf16 = op.getMatrixA().getType().getElementType().isBF16();
    NVVM::MMATypes type = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::tf32;
    // Operand registers: a bf16 pair or a tf32 as one i32.
    SmallVector<Value> a =
        fragmentRows(rewriter, loc, adaptor.getMatrixA(), 4, i32);
    SmallVector<Value> b =
        fragmentRows(rewriter, loc, adaptor.getMatrixB(), 2, i32);
    SmallVector<Value> c;
    for (Value row : fragmentRows(rewriter, loc, adaptor.getMatrixC(), 2,
                                  VectorType::get({2}, f32)))
      for (int64_t j = 0; j < 2; ++j)
        c.push_back(LLVM::ExtractElementOp::create(
            rewriter, loc, row,
            LLVM::ConstantOp::create(rewriter, loc, i32,
                                     rewriter.getI32IntegerAttr(j))));
    auto resTy =
        LLVM::LLVMStructType::getLiteral(op.getContext(), {f32, f32, f32, f32});
    auto mma = NVVM::MmaOp::create(
        rewriter, loc, resTy, a, b, c, {16, 8, op.getK()}, std::nullopt,
        std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    // The four f32 results back into the accumulator's two rows.
    Type resultType = getTypeConverter()->convertType(op.getType());
    Value result = LLVM::PoisonOp::create(rewriter, loc, resultType);
    auto rowTy = VectorType::get({2}, f32);
    for (int64_t i = 0; i < 2; ++i) {
      Value row = LLVM::PoisonOp::create(rewriter, loc, rowTy);
      for (int64_t j = 0; j < 2; ++j)
        row = LLVM::InsertElementOp::create(
            rewriter, loc, row,
            LLVM::ExtractValueOp::create(rewriter, loc, mma.getResult(),
                                         2 * i + j),
            LLVM::ConstantOp::create(rewriter, loc, i32,
                                     rewriter.getI32IntegerAttr(j)));
      result = LLVM::InsertValueOp::create(rewriter, loc, result, row, i);
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct BallotCountOpLowering : ConvertOpToLLVMPattern<BallotCountOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(BallotCountOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type i32 = rewriter.getI32Type();
    Value all = LLVM::ConstantOp::create(rewriter, loc, i32,
                                         rewriter.getI32IntegerAttr(-1));
    Value mask = NVVM::VoteSyncOp::create(
        rewriter, loc, i32, all, adaptor.getPred(), NVVM::VoteSyncKind::ballot);
    rewriter.replaceOpWithNewOp<LLVM::CtPopOp>(op, i32, mask);
    return success();
  }
};

struct BarrierSyncOpLowering : ConvertOpToLLVMPattern<BarrierSyncOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(BarrierSyncOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // barrier.sync 0 (llvm.nvvm.barrier.cta.sync.aligned.all is bar.sync).
    Value id =
        LLVM::ConstantOp::create(rewriter, op.getLoc(), rewriter.getI32Type(),
                                 rewriter.getI32IntegerAttr(0));
    LLVM::CallIntrinsicOp::create(
        rewriter, op.getLoc(),
        rewriter.getStringAttr("llvm.nvvm.barrier.cta.sync.all"),
        ValueRange{id});
    rewriter.eraseOp(op);
    return success();
  }
};

struct RcpApproxOpLowering : ConvertOpToLLVMPattern<RcpApproxOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(RcpApproxOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<NVVM::RcpApproxFtzF32Op>(
        op, rewriter.getF32Type(), adaptor.getIn());
    return success();
  }
};

struct Lg2ApproxOpLowering : ConvertOpToLLVMPattern<Lg2ApproxOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(Lg2ApproxOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<LLVM::CallIntrinsicOp>(
        op, rewriter.getF32Type(),
        rewriter.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"),
        ValueRange{adaptor.getIn()});
    return success();
  }
};

/// The LLVM type nvgpu-to-nvvm gives a 64 x N f32 warpgroup accumulator:
/// a struct holding one struct of the thread's N / 2 registers.
Type accumulatorStruct(nvgpu::WarpgroupAccumulatorType type) {
  MLIRContext *ctx = type.getContext();
  int64_t n = type.getFragmented().getDimSize(1);
  SmallVector<Type> regs(n / 2, Float32Type::get(ctx));
  return LLVM::LLVMStructType::getLiteral(
      ctx, {LLVM::LLVMStructType::getLiteral(ctx, regs)});
}

Value i32Constant(OpBuilder &b, Location loc, int64_t v) {
  return LLVM::ConstantOp::create(b, loc, b.getI32Type(),
                                  b.getI32IntegerAttr(int32_t(v)));
}

struct WarpgroupFragmentOpLowering
    : ConvertOpToLLVMPattern<WarpgroupFragmentOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(WarpgroupFragmentOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type vecType = getTypeConverter()->convertType(op.getType());
    Value v = LLVM::PoisonOp::create(rewriter, loc, vecType);
    for (int64_t i = 0; i < op.getType().getDimSize(0); ++i) {
      Value r = LLVM::ExtractValueOp::create(
          rewriter, loc, adaptor.getAccumulator(), ArrayRef<int64_t>{0, i});
      v = LLVM::InsertElementOp::create(rewriter, loc, v, r,
                                        i32Constant(rewriter, loc, i));
    }
    rewriter.replaceOp(op, v);
    return success();
  }
};

struct WarpgroupAccumulatorOpLowering
    : ConvertOpToLLVMPattern<WarpgroupAccumulatorOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(WarpgroupAccumulatorOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value acc =
        LLVM::PoisonOp::create(rewriter, loc, accumulatorStruct(op.getType()));
    for (int64_t i = 0; i < op.getFragment().getType().getDimSize(0); ++i) {
      Value r = LLVM::ExtractElementOp::create(
          rewriter, loc, adaptor.getFragment(), i32Constant(rewriter, loc, i));
      acc = LLVM::InsertValueOp::create(rewriter, loc, acc, r,
                                        ArrayRef<int64_t>{0, i});
    }
    rewriter.replaceOp(op, acc);
    return success();
  }
};

/// An inline PTX statement that the compiler keeps in order with the other
/// side-effecting ones (the wgmma issues, commits and waits).
Value sideEffectingAsm(ConversionPatternRewriter &rewriter, Location loc,
                       Type result, ValueRange operands, StringRef ptx,
                       StringRef constraints) {
  auto asmOp = LLVM::InlineAsmOp::create(
      rewriter, loc, result, operands, ptx, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::TailCallKind::None,
      LLVM::AsmDialectAttr::get(rewriter.getContext(),
                                LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
  return asmOp.getResult(0);
}

/// One wgmma m64nNk16 with A from registers (`regs`, vector<4xi32> of
/// bf16 pairs) and B by descriptor, accumulating into `acc` (an LLVM struct
/// of N / 2 f32): NVVM's wgmma op takes descriptors only, so the PTX is
/// written here, each accumulator tied to its result ("=f" / "0"...).
Value registerAProduct(ConversionPatternRewriter &rewriter, Location loc,
                       Type accStruct, Value acc, Value regs, Value descB,
                       int64_t n, bool zeroD, bool transposeB) {
  const int64_t r = n / 2;
  std::string ptx;
  llvm::raw_string_ostream os(ptx);
  os << "{\n.reg .pred p;\nsetp.ne.b32 p, " << (zeroD ? 0 : 1)
     << ", 0;\nwgmma.mma_async.sync.aligned.m64n" << n << "k16.f32.bf16.bf16 {";
  for (int64_t i = 0; i < r; ++i)
    os << (i ? ", $" : "$") << i;
  // Operands: the r results, the r tied inputs, then A's four registers
  // and B's descriptor.
  const int64_t a = 2 * r;
  os << "}, {$" << a << ", $" << a + 1 << ", $" << a + 2 << ", $" << a + 3
     << "}, $" << a + 4 << ", p, 1, 1, " << (transposeB ? 1 : 0) << ";\n}";
  std::string constraints;
  for (int64_t i = 0; i < r; ++i)
    constraints += "=f,";
  for (int64_t i = 0; i < r; ++i)
    constraints += std::to_string(i) + ",";
  constraints += "r,r,r,r,l";
  SmallVector<Value> operands;
  for (int64_t i = 0; i < r; ++i)
    operands.push_back(LLVM::ExtractValueOp::create(rewriter, loc, acc, i));
  for (int64_t i = 0; i < 4; ++i)
    operands.push_back(LLVM::ExtractElementOp::create(
        rewriter, loc, regs, i32Constant(rewriter, loc, i)));
  operands.push_back(descB);
  return sideEffectingAsm(rewriter, loc, accStruct, operands, ptx, constraints);
}

struct WarpgroupMmaChainOpLowering
    : ConvertOpToLLVMPattern<WarpgroupMmaChainOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(WarpgroupMmaChainOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    auto accType = op.getMatrixC().getType();
    int64_t n = accType.getFragmented().getDimSize(1);
    auto outer = cast<LLVM::LLVMStructType>(accumulatorStruct(accType));
    Type inner = outer.getBody()[0];
    // With `overwrite` the first product ignores C: no registers to zero.
    Value acc = op.getOverwrite()
                    ? LLVM::PoisonOp::create(rewriter, loc, inner).getResult()
                    : LLVM::ExtractValueOp::create(rewriter, loc,
                                                   adaptor.getMatrixC(), 0)
                          .getResult();
    auto bf16 = NVVM::WGMMATypes::bf16;
    // NVVM's layouts are BLAS's: a K-major B ([N][K] in memory) is
    // column-major, an MN-major one row-major (imm-trans-b = 1).
    auto layoutB =
        op.getTransposeB() ? NVVM::MMALayout::row : NVVM::MMALayout::col;
    NVVM::WgmmaFenceAlignedOp::create(rewriter, loc);
    for (auto [i, descB] : llvm::enumerate(adaptor.getDescriptorsB())) {
      bool zeroD = i == 0 && op.getOverwrite();
      if (!adaptor.getRegistersA().empty()) {
        acc = registerAProduct(rewriter, loc, inner, acc,
                               adaptor.getRegistersA()[i], descB, n, zeroD,
                               op.getTransposeB());
        continue;
      }
      auto scaleD =
          zeroD ? NVVM::WGMMAScaleOut::zero : NVVM::WGMMAScaleOut::one;
      acc = NVVM::WgmmaMmaAsyncOp::create(
          rewriter, loc, inner, acc, adaptor.getDescriptorsA()[i], descB,
          NVVM::MMAShapeAttr::get(ctx, 64, n, 16), bf16, bf16,
          NVVM::WGMMATypes::f32, scaleD, NVVM::WGMMAScaleIn::one,
          NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row, layoutB,
          NVVM::MMAIntOverflowAttr::get(ctx, NVVM::MMAIntOverflow::wrapped));
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(rewriter, loc);
    // An async chain's group is retired by its k3gpu.warpgroup_mma_wait.
    if (!op.getAsync())
      NVVM::WgmmaWaitGroupSyncOp::create(rewriter, loc, 0);
    Value result = LLVM::PoisonOp::create(rewriter, loc, outer);
    result = LLVM::InsertValueOp::create(rewriter, loc, result, acc,
                                         ArrayRef<int64_t>{0});
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// The registers of `acc` (an LLVM struct of f32) through an empty asm
/// statement that ties each to itself: emitted after a wgmma wait, it keeps
/// every read of them after the wait (a side-effecting asm is not moved
/// across another, and the reads depend on its results).
Value pinRegisters(ConversionPatternRewriter &rewriter, Location loc,
                   Value acc) {
  auto type = cast<LLVM::LLVMStructType>(acc.getType());
  int64_t r = type.getBody().size();
  std::string constraints;
  for (int64_t i = 0; i < r; ++i)
    constraints += "=f,";
  for (int64_t i = 0; i < r; ++i)
    constraints += std::to_string(i) + (i + 1 < r ? "," : "");
  SmallVector<Value> operands;
  for (int64_t i = 0; i < r; ++i)
    operands.push_back(LLVM::ExtractValueOp::create(rewriter, loc, acc, i));
  return sideEffectingAsm(rewriter, loc, type, operands, "", constraints);
}

struct WarpgroupMmaWaitOpLowering : ConvertOpToLLVMPattern<WarpgroupMmaWaitOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(WarpgroupMmaWaitOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    NVVM::WgmmaWaitGroupSyncOp::create(rewriter, loc, op.getPending());
    SmallVector<Value> results;
    for (Value acc : adaptor.getAccumulators()) {
      Value inner = LLVM::ExtractValueOp::create(rewriter, loc, acc, 0);
      Value pinned = pinRegisters(rewriter, loc, inner);
      results.push_back(LLVM::InsertValueOp::create(
          rewriter, loc, LLVM::PoisonOp::create(rewriter, loc, acc.getType()),
          pinned, ArrayRef<int64_t>{0}));
    }
    rewriter.replaceOp(op, results);
    return success();
  }
};

/// The shared address `local` of this block as it lies in the shared
/// memory of the cluster's block `rank` (mapa: a shared::cluster pointer).
Value peerAddress(OpBuilder &b, Location loc, Value local, Value rank) {
  auto clusterPtr = LLVM::LLVMPointerType::get(
      b.getContext(), unsigned(NVVM::NVVMMemorySpace::SharedCluster));
  return NVVM::MapaOp::create(b, loc, clusterPtr, local, rank);
}

/// The shared address of barrier `index` of an mbarrier group, as nvgpu's
/// mbarrier ops find it (`group`: the converted group's memref).
Value barrierAddress(OpBuilder &b, Location loc,
                     const LLVMTypeConverter &converter,
                     nvgpu::MBarrierGroupType type, Value group, Value index) {
  MemRefType memref = nvgpu::getMBarrierMemrefType(b.getContext(), type);
  return LLVM::getStridedElementPtr(b, loc, converter, memref, group,
                                    ValueRange{index});
}

struct MBarrierArriveClusterOpLowering
    : ConvertOpToLLVMPattern<MBarrierArriveClusterOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(MBarrierArriveClusterOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // The barrier's shared address (as nvgpu's mbarrier ops find it), the
    // same offset in block `rank`'s shared memory (mapa), and an arrive
    // there with the default semantics, release at CTA scope, as CUTLASS's
    // ClusterBarrier::arrive(cta_id) issues it: a release at cluster scope
    // fences every earlier memory operation of the thread at each arrive
    // (the pipelines that release a stage per k-step ran 30 % slower).
    Location loc = op.getLoc();
    Value local = barrierAddress(rewriter, loc, *getTypeConverter(),
                                 op.getBarriers().getType(),
                                 adaptor.getBarriers(), adaptor.getIndex());
    Value remote = peerAddress(rewriter, loc, local, adaptor.getRank());
    NVVM::MBarrierArriveOp::create(rewriter, loc, Type(), remote, Value(),
                                   NVVM::MemScopeKind::CTA,
                                   /*relaxed=*/false);
    rewriter.eraseOp(op);
    return success();
  }
};

struct MBarrierArriveCopiesOpLowering
    : ConvertOpToLLVMPattern<MBarrierArriveCopiesOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(MBarrierArriveCopiesOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // The barrier's shared address (as nvgpu's mbarrier ops find it) and
    // the asynchronous arrive that fires when this thread's earlier
    // cp.async copies have landed. `noinc`: the arrive is one of the
    // phase's expected arrivals, not an extra one that it cancels.
    Value barrier = barrierAddress(rewriter, op.getLoc(), *getTypeConverter(),
                                   op.getBarriers().getType(),
                                   adaptor.getBarriers(), adaptor.getIndex());
    rewriter.replaceOpWithNewOp<NVVM::CpAsyncMBarrierArriveOp>(
        op, barrier, rewriter.getBoolAttr(true));
    return success();
  }
};

struct ClusterLoadOpLowering : ConvertOpToLLVMPattern<ClusterLoadOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(ClusterLoadOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // The element's shared address, the same offset in block `rank`'s
    // shared memory (mapa), and one vector load there
    // (ld.shared::cluster), aligned to the vector's bytes.
    Location loc = op.getLoc();
    auto type = cast<MemRefType>(op.getBase().getType());
    Value local = getStridedElementPtr(rewriter, loc, type, adaptor.getBase(),
                                       adaptor.getIndices());
    Value remote = peerAddress(rewriter, loc, local, adaptor.getRank());
    auto result = cast<VectorType>(op.getResult().getType());
    int64_t bytes =
        result.getNumElements() * result.getElementTypeBitWidth() / 8;
    rewriter.replaceOpWithNewOp<LLVM::LoadOp>(op, result, remote, bytes);
    return success();
  }
};

struct TmaPrefetchTileOpLowering : ConvertOpToLLVMPattern<TmaPrefetchTileOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult
  matchAndRewrite(TmaPrefetchTileOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    // The descriptor's generic address (as convert-nvgpu-to-nvvm passes it
    // to the loads) and the coordinates as the i32s PTX takes: a tile-mode
    // cp.async.bulk.prefetch.tensor to L2, with no cache hint.
    Location loc = op.getLoc();
    SmallVector<Value> coordinates;
    for (Value c : adaptor.getCoordinates())
      coordinates.push_back(
          LLVM::TruncOp::create(rewriter, loc, rewriter.getI32Type(), c));
    rewriter.replaceOpWithNewOp<NVVM::CpAsyncBulkTensorPrefetchOp>(
        op, adaptor.getTensorMap(), coordinates, ValueRange{},
        NVVM::TMALoadMode::TILE, Value());
    return success();
  }
};

struct ConvertK3GPUToNVVMPass
    : PassWrapper<ConvertK3GPUToNVVMPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConvertK3GPUToNVVMPass)
  StringRef getArgument() const override { return "convert-k3gpu-to-nvvm"; }
  StringRef getDescription() const override {
    return "Lower the k3gpu dialect's ops to NVVM";
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<NVVM::NVVMDialect, LLVM::LLVMDialect>();
  }
  void runOnOperation() override {
    LLVMTypeConverter converter(&getContext());
    // As convert-nvgpu-to-nvvm converts them (it runs first; its casts
    // meet ours in reconcile-unrealized-casts).
    converter.addConversion(
        [](nvgpu::WarpgroupAccumulatorType t) { return accumulatorStruct(t); });
    converter.addConversion([](nvgpu::WarpgroupMatrixDescriptorType t) -> Type {
      return IntegerType::get(t.getContext(), 64);
    });
    nvgpu::populateCommonGPUTypeAndAttributeConversions(converter);
    converter.addConversion([](nvgpu::TensorMapDescriptorType t) -> Type {
      return LLVM::LLVMPointerType::get(t.getContext());
    });
    converter.addConversion([&converter](nvgpu::MBarrierGroupType t) -> Type {
      return converter.convertType(
          nvgpu::getMBarrierMemrefType(t.getContext(), t));
    });
    RewritePatternSet patterns(&getContext());
    populateK3GPUToNVVMConversionPatterns(converter, patterns);
    LLVMConversionTarget target(getContext());
    target.addLegalDialect<NVVM::NVVMDialect>();
    target.addIllegalDialect<K3GPUDialect>();
    target.addLegalOp<UnrealizedConversionCastOp>();
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void k3gpu::populateK3GPUToNVVMConversionPatterns(
    const LLVMTypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<MmaSyncOpLowering, BallotCountOpLowering, BarrierSyncOpLowering,
               RcpApproxOpLowering, Lg2ApproxOpLowering,
               WarpgroupFragmentOpLowering, WarpgroupAccumulatorOpLowering,
               WarpgroupMmaChainOpLowering, WarpgroupMmaWaitOpLowering,
               MBarrierArriveClusterOpLowering, MBarrierArriveCopiesOpLowering,
               ClusterLoadOpLowering, TmaPrefetchTileOpLowering>(converter);
}

std::unique_ptr<Pass> k3gpu::createConvertK3GPUToNVVMPass() {
  return std::make_unique<ConvertK3GPUToNVVMPass>();
}

void k3gpu::registerConvertK3GPUToNVVMPass() {
  PassRegistration<ConvertK3GPUToNVVMPass>();
}

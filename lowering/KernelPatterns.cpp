//===- KernelPatterns.cpp - pattern lookup and launch shapes ---*- C++ -*-===//
#include "lowering/KernelPatterns.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

const KernelPattern *KernelPatternSet::lookup(Operation *op,
                                              KernelKind kind) const {
  const KernelPattern *any = nullptr;
  for (const auto &p : patterns) {
    if (p->getKind() != kind)
      continue;
    if (p->getRootName() == op->getName().getStringRef())
      return p.get();
    if (p->getRootName().empty() && !any)
      any = p.get();
  }
  return any;
}

void KernelEmission::setLaunch(GridSymbol sym, int64_t scale, int64_t offset,
                               int64_t divisor, ArrayRef<int64_t> block,
                               int64_t smem) const {
  FunctionOpInterface f = fn;
  auto shape = LaunchShapeAttr::get(f.getContext(), sym, scale, offset, divisor,
                                    block, smem, 1);
  K3Dialect::LaunchShapeAttrHelper(f.getContext()).setAttr(f, shape);
  setLaunchBounds(block);
}

/// nvvm.maxntid and nvvm.minctasm on kernel `f` where `config` caps the
/// resident blocks.
static void applyLaunchBounds(Operation *f, KernelConfigAttr config,
                              ArrayRef<int64_t> block) {
  if (!config || config.getBlocksPerSm() <= 0)
    return;
  // ptxas sizes the register budget from these: without them it guesses,
  // and at 4 warps it picked 168 registers and a schedule that waits on
  // each ldmatrix (the H64 chain ran 38% slower than with 188 and the
  // loads hoisted; bench/results/2026-12-01-chain-launch-bounds.md).
  Builder b(f->getContext());
  SmallVector<int32_t, 3> threads;
  for (int64_t d : block)
    threads.push_back(int32_t(d));
  threads.resize(3, 1);
  f->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
             b.getDenseI32ArrayAttr(threads));
  f->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
             b.getI32IntegerAttr(int32_t(config.getBlocksPerSm())));
}

void KernelEmission::setLaunchBounds(ArrayRef<int64_t> block) const {
  FunctionOpInterface fnOp = fn;
  applyLaunchBounds(fnOp.getOperation(), config, block);
}

void KernelEmission::setClusterY(int64_t blocks) const {
  FunctionOpInterface f = fn;
  MLIRContext *ctx = f.getContext();
  K3Dialect::LaunchShapeAttrHelper helper(ctx);
  LaunchShapeAttr s = helper.getAttr(f);
  assert(s && "setClusterY after setLaunch");
  helper.setAttr(f, LaunchShapeAttr::get(ctx, s.getGridSymbol(),
                                         s.getGridScale(), s.getGridOffset(),
                                         s.getGridDivisor(), s.getBlock(),
                                         s.getDynamicSmem(), blocks));
  if (blocks > 1)
    f->setAttr(NVVM::NVVMDialect::getClusterDimAttrName(),
               Builder(ctx).getDenseI32ArrayAttr({1, int32_t(blocks), 1}));
}

LaunchShapeAttr KernelEmission::launchShape(const KernelBuilder::Linear &form,
                                            int64_t perUnit, int64_t extra,
                                            int64_t divisor,
                                            ArrayRef<int64_t> block,
                                            int64_t smem) const {
  GridSymbol sym = form.symbol == kNumTokens ? GridSymbol::num_tokens
                   : form.symbol == kNumSeqs ? GridSymbol::num_seqs
                                             : GridSymbol::none;
  int64_t scale = sym == GridSymbol::none ? 0 : form.a * perUnit;
  if (scale == 0)
    sym = GridSymbol::none;
  int64_t offset = form.b * perUnit + extra;
  FunctionOpInterface f = fn;
  return LaunchShapeAttr::get(f.getContext(), sym, scale,
                              std::max<int64_t>(offset, 0), divisor, block,
                              smem, 1);
}

void KernelEmission::setLaunch(const KernelBuilder::Linear &form,
                               int64_t perUnit, int64_t extra, int64_t divisor,
                               ArrayRef<int64_t> block, int64_t smem) const {
  LaunchShapeAttr s = launchShape(form, perUnit, extra, divisor, block, smem);
  setLaunch(s.getGridSymbol(), s.getGridScale(), s.getGridOffset(),
            s.getGridDivisor(), block, smem);
}

FailureOr<KernelBuilder::Linear>
KernelEmission::tokenForm(Operation *op, int64_t symDim) const {
  if (auto form = kb.linearForm(kb.dim(symDim)))
    return *form;
  return op->emitOpError() << stringifyKernelKind(config.getKernel())
                           << " needs a token count linear in one runtime size";
}

void KernelEmission::finishSinglePhase(Location loc) const {
  FunctionOpInterface f = fn;
  auto gpuFn = cast<gpu::GPUFuncOp>(f.getOperation());
  gpu::ReturnOp::create(kb.builder(), loc);
  MLIRContext *ctx = f.getContext();
  K3Dialect::PhasesAttrHelper(ctx).setAttr(
      gpuFn,
      ArrayAttr::get(ctx, {FlatSymbolRefAttr::get(gpuFn.getNameAttr())}));
}

static constexpr llvm::StringLiteral kPhaseAttr = "k3.phase";

void KernelEmission::emitPhase(int64_t index,
                               const std::function<void()> &body) const {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto region = scf::ExecuteRegionOp::create(b, loc, TypeRange{});
  region->setAttr(kPhaseAttr, b.getI64IntegerAttr(index));
  Block *block = b.createBlock(&region.getRegion());
  b.setInsertionPointToStart(block);
  body();
  scf::YieldOp::create(b, loc);
  b.setInsertionPointAfter(region);
}

/// Keeps phase `index`'s region of `f` (inlined where it stands) and erases
/// the other phases'.
static void keepPhase(gpu::GPUFuncOp f, int64_t index) {
  SmallVector<scf::ExecuteRegionOp> regions;
  f.walk([&](scf::ExecuteRegionOp r) {
    if (r->hasAttr(kPhaseAttr))
      regions.push_back(r);
  });
  for (scf::ExecuteRegionOp r : regions) {
    if (r->getAttrOfType<IntegerAttr>(kPhaseAttr).getInt() != index) {
      r.erase();
      continue;
    }
    // emitPhase's bodies are structured (scf) code: one block.
    assert(r.getRegion().hasOneBlock() && "a phase region of one block");
    Block &body = r.getRegion().front();
    body.getTerminator()->erase();
    r->getBlock()->getOperations().splice(Block::iterator(r),
                                          body.getOperations());
    r.erase();
  }
}

void KernelEmission::finishPhases(Location loc,
                                  ArrayRef<LaunchShapeAttr> launches) const {
  FunctionOpInterface f = fn;
  auto gpuFn = cast<gpu::GPUFuncOp>(f.getOperation());
  gpu::ReturnOp::create(kb.builder(), loc);
  MLIRContext *ctx = f.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointAfter(gpuFn);
  SmallVector<gpu::GPUFuncOp> phases = {gpuFn};
  for (size_t p = 1; p < launches.size(); ++p) {
    auto copy = cast<gpu::GPUFuncOp>(b.clone(*gpuFn));
    copy.setName((gpuFn.getName() + "__" + Twine(p)).str());
    phases.push_back(copy);
    b.setInsertionPointAfter(copy);
  }
  SmallVector<Attribute> names;
  K3Dialect::LaunchShapeAttrHelper shape(ctx);
  for (auto [p, phase] : llvm::enumerate(phases)) {
    keepPhase(phase, int64_t(p));
    shape.setAttr(phase, launches[p]);
    applyLaunchBounds(phase, config, launches[p].getBlock());
    names.push_back(FlatSymbolRefAttr::get(phase.getNameAttr()));
  }
  K3Dialect::PhasesAttrHelper(ctx).setAttr(gpuFn, ArrayAttr::get(ctx, names));
}

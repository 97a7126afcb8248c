//===- WeightInitKernels.cpp - seeded random weights as kernels -*- C++ -*-===//
//
// The k3-weight-init-kernels pass. `--random-weights SEED` fills every
// weight with values that depend only on the seed, the weight's name and the
// element's index (runtime/lib/dtype.cpp, randomInit): element j of a weight
// is a function of splitmix64(base + 2j) and splitmix64(base + 2j + 1), base
// = splitmix64(seed ^ fnv1a64(name)). On one host thread that took minutes
// for the 13 GB of a 4-layer Kimi-Linear cut, and the full 98 GB model
// would spend most of a benchmark's time there. Since the values are a
// counter-based hash of the index, a kernel computes them where they are
// stored: one per weight dtype, `k3_weight_init_<dtype>(out, numel, base,
// kind, param_bits)`, which the runtime launches per weight (docs/
// runtime.md, "Random weights").
//
// The arithmetic is the host's, operation for operation, in f64: integer
// hashing, Box-Muller (normal), an affine map (uniform) or the constant,
// then f64 -> f32 -> dtype with round-to-nearest-even. On the CPU target
// the same IR calls the same libm, so the values are bit-identical to the
// host's (an e2e test); on the GPU log and cos are libdevice's, within an
// ulp of libm in f64, which rounding to f32 and bf16 hides except in rare
// ties (bench/e2e.py reports the logits of both fills).
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "lowering/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/ADT/SetVector.h"

#include <functional>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3WEIGHTINITKERNELS
#include "lowering/Passes.h.inc"

namespace {

constexpr StringLiteral kKernelsModule = "k3_kernels";

/// What the runtime passes in `kind` (artifact::InitKind; Unspecified is
/// resolved on the host).
enum InitKindValue : int64_t { kNormal = 1, kUniform = 2, kConstant = 3 };

/// The element arithmetic of one kernel, on i64/f64 values.
class WeightValueEmitter {
public:
  WeightValueEmitter(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  /// Element `j`'s value in f64.
  Value value(Value base, Value kind, Value param, Value j) {
    Value two = i64(2);
    Value j2 = arith::MulIOp::create(b, loc, j, two);
    Value u0 = uniform01(base, j2);
    Value u1 = uniform01(base, arith::AddIOp::create(b, loc, j2, i64(1)));
    // Normal: param * sqrt(-2 log(1 - u0)) * cos(2 pi u1).
    Value radius = math::SqrtOp::create(
        b, loc,
        arith::MulFOp::create(
            b, loc, f64(-2.0),
            math::LogOp::create(b, loc,
                                arith::SubFOp::create(b, loc, f64(1.0), u0))));
    Value angle = arith::MulFOp::create(
        b, loc, f64(6.283185307179586476925286766559), u1);
    Value normal = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, param, radius),
        math::CosOp::create(b, loc, angle));
    // Uniform: param * (2 u(j) - 1), with its own draw at index j.
    Value uj = uniform01(base, j);
    Value uniform = arith::MulFOp::create(
        b, loc, param,
        arith::SubFOp::create(
            b, loc, arith::MulFOp::create(b, loc, f64(2.0), uj), f64(1.0)));
    Value isNormal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                           kind, i64(kNormal));
    Value isUniform = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                            kind, i64(kUniform));
    Value other = arith::SelectOp::create(b, loc, isUniform, uniform, param);
    return arith::SelectOp::create(b, loc, isNormal, normal, other);
  }

private:
  Value i64(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  }
  Value u64(uint64_t v) { return i64(int64_t(v)); }
  Value f64(double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  }
  Value xorShift(Value z, int64_t s, uint64_t mul) {
    Value x = arith::XOrIOp::create(b, loc, z,
                                    arith::ShRUIOp::create(b, loc, z, i64(s)));
    return mul ? arith::MulIOp::create(b, loc, x, u64(mul)) : x;
  }
  /// splitmix64 (runtime/lib/dtype.cpp): wrapping u64 arithmetic.
  Value splitmix64(Value z) {
    z = arith::AddIOp::create(b, loc, z, u64(0x9e3779b97f4a7c15ull));
    z = xorShift(z, 30, 0xbf58476d1ce4e5b9ull);
    z = xorShift(z, 27, 0x94d049bb133111ebull);
    return xorShift(z, 31, 0);
  }
  /// double(splitmix64(base + k) >> 11) * 2^-53, in [0, 1): exact.
  Value uniform01(Value base, Value k) {
    Value bits = arith::ShRUIOp::create(
        b, loc, splitmix64(arith::AddIOp::create(b, loc, base, k)), i64(11));
    Value d = arith::UIToFPOp::create(b, loc, b.getF64Type(), bits);
    return arith::MulFOp::create(b, loc, d, f64(0x1.0p-53));
  }

  OpBuilder &b;
  Location loc;
};

/// Rounds the f64 value to the weight's dtype as the host does: to f32,
/// then to the dtype (round to nearest even).
Value toDType(OpBuilder &b, Location loc, Value v, Type dtype) {
  Value f = arith::TruncFOp::create(b, loc, b.getF32Type(), v);
  return dtype.isF32() ? f : arith::TruncFOp::create(b, loc, dtype, f);
}

std::string dtypeSuffix(Type t) {
  if (t.isBF16())
    return "bf16";
  if (t.isF16())
    return "f16";
  return "f32";
}

struct K3WeightInitKernelsPass
    : impl::K3WeightInitKernelsBase<K3WeightInitKernelsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Operation *kernels = SymbolTable::lookupSymbolIn(module, kKernelsModule);
    if (!kernels) {
      module.emitError() << "expects outlined kernels (@" << kKernelsModule
                         << "; run --k3-outline-kernels first)";
      return signalPassFailure();
    }
    llvm::SetVector<Type> dtypes;
    // MXFP4 weights are random bytes, not values through a dtype: the
    // runtime fills them on host threads (dtype.cpp, randomInit).
    module.walk([&](WeightOp w) {
      Type t = cast<RankedTensorType>(w.getType()).getElementType();
      if (!isa<Float4E2M1FNType>(t))
        dtypes.insert(t);
    });
    for (Type t : dtypes)
      addKernel(kernels, t);
  }

  void addKernel(Operation *kernels, Type dtype) {
    MLIRContext *ctx = kernels->getContext();
    OpBuilder b(ctx);
    Location loc = kernels->getLoc();
    std::string name = "k3_weight_init_" + dtypeSuffix(dtype);
    if (SymbolTable::lookupSymbolIn(kernels, name))
      return;
    b.setInsertionPointToEnd(&kernels->getRegion(0).front());
    Type i64 = b.getI64Type();
    FunctionType fnType =
        b.getFunctionType({MemRefType::get({}, dtype), i64, i64, i64, i64}, {});
    bool gpu = isa<gpu::GPUModuleOp>(kernels);
    Block *body;
    if (gpu) {
      auto fn = gpu::GPUFuncOp::create(b, loc, name, fnType);
      fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
      body = &fn.getBody().front();
    } else {
      body = func::FuncOp::create(b, loc, name, fnType).addEntryBlock();
    }
    b.setInsertionPointToStart(body);
    Value out = body->getArgument(0), numel = body->getArgument(1);
    Value base = body->getArgument(2), kind = body->getArgument(3);
    Value param =
        arith::BitcastOp::create(b, loc, b.getF64Type(), body->getArgument(4));
    Type index = b.getIndexType();
    Value n = arith::IndexCastOp::create(b, loc, index, numel);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    auto flat = MemRefType::get({ShapedType::kDynamic}, dtype,
                                StridedLayoutAttr::get(ctx, 0, {1}));
    Value view = memref::ReinterpretCastOp::create(
        b, loc, flat, out, b.getIndexAttr(0), ArrayRef<OpFoldResult>{n},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    // A GPU walks the elements grid-stride; the CPU in one loop.
    Value start = zero, step = one;
    if (gpu) {
      Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
      Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
      Value bdim = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
      Value gdim = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
      start = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, bid, bdim), tid);
      step = arith::MulIOp::create(b, loc, gdim, bdim);
    }
    scf::ForOp::create(
        b, loc, start, n, step, ValueRange{},
        [&](OpBuilder &lb, Location l, Value j, ValueRange) {
          Value j64 = arith::IndexCastOp::create(lb, l, i64, j);
          Value v = WeightValueEmitter(lb, l).value(base, kind, param, j64);
          memref::StoreOp::create(lb, l, toDType(lb, l, v, dtype), view, j);
          scf::YieldOp::create(lb, l);
        });
    if (gpu)
      gpu::ReturnOp::create(b, loc);
    else
      func::ReturnOp::create(b, loc);
  }
};

} // namespace
} // namespace mlir::k3

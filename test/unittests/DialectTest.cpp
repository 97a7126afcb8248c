//===- DialectTest.cpp - C++ unit tests of the K3 dialect -------*- C++ -*-===//
#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class K3DialectTest : public ::testing::Test {
protected:
  K3DialectTest() {
    context
        .loadDialect<k3::K3Dialect, func::FuncDialect, tensor::TensorDialect>();
    // Keep diagnostics out of the test log; failures are checked by value.
    context.getDiagEngine().registerHandler([](Diagnostic &) {});
  }
  OwningOpRef<ModuleOp> parse(StringRef text) {
    return parseSourceString<ModuleOp>(text, &context);
  }
  MLIRContext context;
};

TEST_F(K3DialectTest, BuildsAndVerifiesLinear) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  auto xTy = RankedTensorType::get({ShapedType::kDynamic, 16}, b.getF32Type());
  auto wTy = RankedTensorType::get({8, 16}, b.getBF16Type());
  auto rTy = RankedTensorType::get({ShapedType::kDynamic, 8}, b.getF32Type());
  auto fn = func::FuncOp::create(b, loc, "f", b.getFunctionType({xTy}, {rTy}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value w = k3::WeightOp::create(b, loc, wTy, "w").getResult();
  Value y = k3::LinearOp::create(b, loc, rTy, entry->getArgument(0), w);
  func::ReturnOp::create(b, loc, y);
  EXPECT_TRUE(succeeded(verify(module)));
  module->erase();
}

TEST_F(K3DialectTest, RejectsMismatchedLinear) {
  auto m = parse(R"mlir(
    func.func @f(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
      %w = k3.weight "w" : tensor<8x15xbf16>
      %y = k3.linear %x, %w : (tensor<?x16xf32>, tensor<8x15xbf16>) -> tensor<?x8xf32>
      return %y : tensor<?x8xf32>
    })mlir");
  EXPECT_FALSE(m);
}

TEST_F(K3DialectTest, ExpertStackPlaceholder) {
  auto m = parse(R"mlir(
    func.func @f() -> tensor<4x8x16xbf16> {
      %w = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<4x8x16xbf16>
      return %w : tensor<4x8x16xbf16>
    })mlir");
  ASSERT_TRUE(m);
  int stacks = 0;
  m->walk([&](k3::WeightOp op) { stacks += op.isExpertStack(); });
  EXPECT_EQ(stacks, 1);
}

TEST_F(K3DialectTest, GateLowerBoundRange) {
  const char *tmpl = R"mlir(
    func.func @f(%z: tensor<?x2x4xf32>, %a: tensor<2xf32>, %b: tensor<8xf32>) -> tensor<?x2x4xf32> {
      %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = %s : f64}
        : (tensor<?x2x4xf32>, tensor<2xf32>, tensor<8xf32>) -> tensor<?x2x4xf32>
      return %g : tensor<?x2x4xf32>
    })mlir";
  auto with = [&](const char *bound) {
    std::string s = tmpl;
    s.replace(s.find("%s"), 2, bound);
    return bool(parse(s));
  };
  EXPECT_TRUE(with("-5.0"));
  EXPECT_TRUE(with("-0.5"));
  EXPECT_FALSE(with("-5.5"));
  EXPECT_FALSE(with("0.0"));
}

} // namespace

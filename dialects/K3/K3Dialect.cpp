//===- K3Dialect.cpp - K3 dialect registration ------------------*- C++ -*-===//
#include "dialects/K3/K3Dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3;

#include "dialects/K3/K3Dialect.cpp.inc"
#include "dialects/K3/K3Enums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/K3/K3Attrs.cpp.inc"

void K3Dialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/K3/K3Attrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/K3/K3Ops.cpp.inc"
      >();
}

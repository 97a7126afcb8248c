//===- WeightElements.h - a weight operand read as f32 ----------*- C++ -*-===//
//
// Loop nests read weights one element at a time. A float weight is a
// memref load; an MXFP4 weight (`f4E2M1FN`, docs/mxfp4.md) is stored as
// bytes, codes then scales, and each element is decoded where it is read:
// the E2M1 code from its byte's nibble times its block's E8M0 scale. Both
// forms behind one `load` keep the MoE emitters blind to the storage.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELS_WEIGHTELEMENTS_H
#define K3_LOWERING_KERNELS_WEIGHTELEMENTS_H

#include "lowering/KernelBuilder.h"

namespace mlir::k3 {

class WeightElements {
public:
  /// `w` must have a static shape when it is MXFP4 (weights always do).
  WeightElements(KernelBuilder &kb, const KernelOperand &w);

  /// Element `ivs` (one index per dimension) as f32.
  Value load(ValueRange ivs) const;

private:
  /// The row-major element index of `ivs`.
  Value flatIndex(ValueRange ivs) const;
  /// E2M1 code (i32, 0..15) to f32: 0, 0.5, 1, 1.5, 2, 3, 4, 6, signed.
  Value decodeE2M1(Value code) const;
  /// E8M0 byte (i32, 0..254) to f32 2^(s - 127).
  Value decodeE8M0(Value s) const;

  KernelBuilder &kb;
  Value full;                 // float weights: the view
  Value bytes;                // MXFP4: all its bytes, flat
  SmallVector<int64_t> shape; // MXFP4: the logical shape
  int64_t numel = 0;
};

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELS_WEIGHTELEMENTS_H

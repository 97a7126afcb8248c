// RUN: not k3-opt --k3-fuse-kda-gate=bogus=1 %s 2>&1 | FileCheck %s --check-prefix=FLAG
// RUN: not k3-opt --pass-pipeline='builtin.module(func.func(k3-fuse-kda-gate{bogus=1}))' %s 2>&1 | FileCheck %s --check-prefix=PIPELINE
// RUN: not k3-opt --pass-pipeline='builtin.module(k3-inline-layers{max-depth=3})' %s 2>&1 | FileCheck %s --check-prefix=INLINE
// RUN: not k3-opt --k3-no-such-pass %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: k3-opt --k3-fuse-kda-gate --k3-inline-layers %s | FileCheck %s --check-prefix=OK

// Neither K3 pass takes options: an option is refused by name, nothing is
// printed and the exit status is non-zero. The input itself is valid (the
// last RUN line).

// FLAG: error: <Pass-Options-Parser>: no such option bogus
// FLAG-NOT: func.func @f

// PIPELINE: error: <Pass-Options-Parser>: no such option bogus
// PIPELINE: failed to add `k3-fuse-kda-gate` with options `bogus=1`
// PIPELINE-NOT: func.func @f

// INLINE: error: <Pass-Options-Parser>: no such option max-depth
// INLINE: failed to add `k3-inline-layers` with options `max-depth=3`

// UNKNOWN: Unknown command line argument '--k3-no-such-pass'

// OK-LABEL: func.func @f
// OK: k3.weight "model.norm.weight"
func.func @f() -> tensor<4xf32> {
  %w = k3.weight "model.norm.weight" : tensor<4xf32>
  return %w : tensor<4xf32>
}

// RUN: k3-opt %s -split-input-file --k3-fuse-partial-rms-norm | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-fuse-partial-rms-norm --k3-fuse-partial-rms-norm | FileCheck %s

// MLA's latent as k3-import writes it (after k3-inline-layers): the
// down-projection [c_kv | k_pe], c_kv normalised, the two joined again. The
// slices' row count is tensor.dim of the projection's input, from which
// the projection keeps the rows. One k3.partial_rms_norm replaces the
// concat; the slices and the norm go with it. The second RUN line checks
// that the rewrite is idempotent.

// CHECK-LABEL: func.func @latent
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x48xbf16>
// CHECK:         %[[KV:.*]] = k3.linear %[[X]]
// CHECK-NEXT:    %[[L:.*]] = k3.partial_rms_norm %[[KV]], %{{.*}} {epsilon = 9.9999999999999995E-7 : f64} : (tensor<?x20xbf16>, tensor<16xbf16>) -> tensor<?x20xbf16>
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     tensor.concat
// CHECK:         return %[[L]]
func.func @latent(%x: tensor<?x48xbf16>, %wkv: tensor<20x48xbf16>, %wn: tensor<16xbf16>) -> tensor<?x20xbf16> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x48xbf16>
  %kv = k3.linear %x, %wkv : (tensor<?x48xbf16>, tensor<20x48xbf16>) -> tensor<?x20xbf16>
  %ckv = tensor.extract_slice %kv[0, 0] [%t, 16] [1, 1] : tensor<?x20xbf16> to tensor<?x16xbf16>
  %n = k3.rms_norm %ckv, %wn {epsilon = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %kpe = tensor.extract_slice %kv[0, 16] [%t, 4] [1, 1] : tensor<?x20xbf16> to tensor<?x4xbf16>
  %l = tensor.concat dim(1) %n, %kpe : (tensor<?x16xbf16>, tensor<?x4xbf16>) -> tensor<?x20xbf16>
  return %l : tensor<?x20xbf16>
}

// -----

// Another use of the normalised part keeps its norm; static rows too.
// CHECK-LABEL: func.func @norm_used_twice
// CHECK:         k3.rms_norm
// CHECK:         %[[L:.*]] = k3.partial_rms_norm %arg0
// CHECK-NOT:     tensor.concat
// CHECK:         return %[[L]], %{{.*}} :
func.func @norm_used_twice(%kv: tensor<8x20xf32>, %wn: tensor<16xbf16>) -> (tensor<8x20xf32>, tensor<8x16xf32>) {
  %ckv = tensor.extract_slice %kv[0, 0] [8, 16] [1, 1] : tensor<8x20xf32> to tensor<8x16xf32>
  %n = k3.rms_norm %ckv, %wn {epsilon = 1.0e-6 : f64} : (tensor<8x16xf32>, tensor<16xbf16>) -> tensor<8x16xf32>
  %kpe = tensor.extract_slice %kv[0, 16] [8, 4] [1, 1] : tensor<8x20xf32> to tensor<8x4xf32>
  %l = tensor.concat dim(1) %n, %kpe : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x20xf32>
  return %l, %n : tensor<8x20xf32>, tensor<8x16xf32>
}

// -----

// The slices take the first %m rows only, a size the pass cannot relate to
// the projection's: nothing changes.
// CHECK-LABEL: func.func @some_rows
// CHECK-NOT:     k3.partial_rms_norm
// CHECK:         tensor.concat
func.func @some_rows(%kv: tensor<?x20xf32>, %wn: tensor<16xbf16>, %m: index) -> tensor<?x20xf32> {
  %ckv = tensor.extract_slice %kv[0, 0] [%m, 16] [1, 1] : tensor<?x20xf32> to tensor<?x16xf32>
  %n = k3.rms_norm %ckv, %wn {epsilon = 1.0e-6 : f64} : (tensor<?x16xf32>, tensor<16xbf16>) -> tensor<?x16xf32>
  %kpe = tensor.extract_slice %kv[0, 16] [%m, 4] [1, 1] : tensor<?x20xf32> to tensor<?x4xf32>
  %l = tensor.concat dim(1) %n, %kpe : (tensor<?x16xf32>, tensor<?x4xf32>) -> tensor<?x20xf32>
  return %l : tensor<?x20xf32>
}

// -----

// The tail skips a column (16..19 of 21): the concat is not the source's
// row, nothing changes. Nor does a norm of the tail instead of the head.
// CHECK-LABEL: func.func @gap
// CHECK-NOT:     k3.partial_rms_norm
// CHECK:         tensor.concat
// CHECK-LABEL: func.func @norm_second
// CHECK-NOT:     k3.partial_rms_norm
// CHECK:         tensor.concat
func.func @gap(%kv: tensor<8x21xf32>, %wn: tensor<16xbf16>) -> tensor<8x20xf32> {
  %ckv = tensor.extract_slice %kv[0, 0] [8, 16] [1, 1] : tensor<8x21xf32> to tensor<8x16xf32>
  %n = k3.rms_norm %ckv, %wn {epsilon = 1.0e-6 : f64} : (tensor<8x16xf32>, tensor<16xbf16>) -> tensor<8x16xf32>
  %kpe = tensor.extract_slice %kv[0, 17] [8, 4] [1, 1] : tensor<8x21xf32> to tensor<8x4xf32>
  %l = tensor.concat dim(1) %n, %kpe : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x20xf32>
  return %l : tensor<8x20xf32>
}
func.func @norm_second(%kv: tensor<8x20xf32>, %wn: tensor<4xbf16>) -> tensor<8x20xf32> {
  %ckv = tensor.extract_slice %kv[0, 0] [8, 16] [1, 1] : tensor<8x20xf32> to tensor<8x16xf32>
  %kpe = tensor.extract_slice %kv[0, 16] [8, 4] [1, 1] : tensor<8x20xf32> to tensor<8x4xf32>
  %n = k3.rms_norm %kpe, %wn {epsilon = 1.0e-6 : f64} : (tensor<8x4xf32>, tensor<4xbf16>) -> tensor<8x4xf32>
  %l = tensor.concat dim(1) %ckv, %n : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<8x20xf32>
  return %l : tensor<8x20xf32>
}

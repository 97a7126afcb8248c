// RUN: k3-opt %s -split-input-file --k3-tile-tri-solve | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-tile-tri-solve="mode=block-inverse tile-size=32" | FileCheck %s --check-prefix=INV
// RUN: not k3-opt %s -split-input-file --k3-tile-tri-solve="tile-size=12" 2>&1 | FileCheck %s --check-prefix=POW2
// RUN: not k3-opt %s -split-input-file --k3-tile-tri-solve="tile-size=128" 2>&1 | FileCheck %s --check-prefix=DIV
// RUN: not k3-opt %s -split-input-file --k3-tile-tri-solve="mode=lu" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: sed -n 's|^// BAD: ||p' %s | not k3-opt -split-input-file 2>&1 | FileCheck %s --check-prefix=VERIFY

// Verifier diagnostics of the chunk ops (the BAD: lines, fed by sed).
// VERIFY: error: 'k3.tri_solve' op expects chunk_size to be a positive multiple of 16 (the tile size), got 24
// BAD: func.func @f(%a: tensor<1x4x1x24xf32>, %r: tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32> {
// BAD:   %x = k3.tri_solve %a, %r {chunk_size = 24 : i64, mode = "forward"} : (tensor<1x4x1x24xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32>
// BAD:   return %x : tensor<1x4x1x4xf32>
// BAD: }
// BAD: // -----
// VERIFY: error: 'k3.tri_solve' op expects tile_size to be a power of two, got 12
// BAD: func.func @f(%a: tensor<1x4x1x48xf32>, %r: tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32> {
// BAD:   %x = k3.tri_solve %a, %r {chunk_size = 48 : i64, mode = "blocked", tile_size = 12 : i64} : (tensor<1x4x1x48xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32>
// BAD:   return %x : tensor<1x4x1x4xf32>
// BAD: }
// BAD: // -----
// VERIFY: error: 'k3.tri_solve' op expects 'A' to hold chunk_size = 64 columns, got 32
// BAD: func.func @f(%a: tensor<1x4x1x32xf32>, %r: tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32> {
// BAD:   %x = k3.tri_solve %a, %r {chunk_size = 64 : i64, mode = "forward"} : (tensor<1x4x1x32xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32>
// BAD:   return %x : tensor<1x4x1x4xf32>
// BAD: }
// BAD: // -----
// VERIFY: error: 'k3.kda_chunk_gram' op tile-factored decay form needs |gate_lower_bound| * (tile_size - 1) <= 88 for exp to stay finite in f32, got 5.000000e+00 * 31
// BAD: func.func @f(%x: tensor<1x4x1x16xf32>) -> tensor<1x4x1x64xf32> {
// BAD:   %a = k3.kda_chunk_gram %x, %x, %x {chunk_size = 64 : i64, tile_size = 32 : i64, gate_lower_bound = -5.0 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x1x64xf32>
// BAD:   return %a : tensor<1x4x1x64xf32>
// BAD: }
// BAD: // -----
// VERIFY: error: 'k3.kda_chunk_gram' op unit_diagonal requires strict
// BAD: func.func @f(%x: tensor<1x4x1x16xf32>) -> tensor<1x4x1x64xf32> {
// BAD:   %a = k3.kda_chunk_gram %x, %x, %x {chunk_size = 64 : i64, tile_size = 16 : i64, unit_diagonal} : (tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x1x64xf32>
// BAD:   return %a : tensor<1x4x1x64xf32>
// BAD: }

// POW2: tile-size must be a power of two, got 12
// DIV: 'k3.tri_solve' op chunk_size 64 is not a multiple of the tile size 128
// MODE: mode must be forward or block-inverse, got 'lu'

// CHECK-LABEL: func.func @solve
// CHECK:         k3.tri_solve %{{.*}}, %{{.*}} row_scale(%{{.*}}) cu_seqlens(%{{.*}}) {chunk_size = 64 : i64, mode = "blocked", tile_size = 16 : i64}
// INV-LABEL:   func.func @solve
// INV-NOT:       k3.tri_solve
// INV:           %[[AI:.*]] = k3.tri_inverse %[[A:[^ ]*]] cu_seqlens(%[[CU:.*]]) {chunk_size = 64 : i64, tile_size = 32 : i64} : (tensor<1x?x2x64xf32>, tensor<?xi32>) -> tensor<1x?x2x64xf32>
// INV:           %[[X:.*]] = k3.chunk_tril_matmul %[[AI]], %{{.*}} row_scale(%{{.*}}) cu_seqlens(%[[CU]]) {chunk_size = 64 : i64}
// INV:           return %[[X]]
func.func @solve(%a: tensor<1x?x2x64xf32>, %r: tensor<1x?x2x32xbf16>, %b: tensor<1x?x2xf32>,
    %cu: tensor<?xi32>) -> tensor<1x?x2x32xf32> {
  %x = k3.tri_solve %a, %r row_scale(%b) cu_seqlens(%cu) {chunk_size = 64 : i64, mode = "forward"}
      : (tensor<1x?x2x64xf32>, tensor<1x?x2x32xbf16>, tensor<1x?x2xf32>, tensor<?xi32>) -> tensor<1x?x2x32xf32>
  return %x : tensor<1x?x2x32xf32>
}

// -----

// Already blocked solves are left alone.
// CHECK-LABEL: func.func @blocked
// CHECK:         k3.tri_solve {{.*}}{chunk_size = 32 : i64, mode = "blocked", tile_size = 8 : i64}
func.func @blocked(%a: tensor<2x7x1x32xf32>, %r: tensor<2x7x1x4xf32>) -> tensor<2x7x1x4xf32> {
  %x = k3.tri_solve %a, %r {chunk_size = 32 : i64, mode = "blocked", tile_size = 8 : i64}
      : (tensor<2x7x1x32xf32>, tensor<2x7x1x4xf32>) -> tensor<2x7x1x4xf32>
  return %x : tensor<2x7x1x4xf32>
}

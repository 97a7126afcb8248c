// k3.moe_dispatch with kernel = moe_dispatch_rows (lowering/cuda/
// MoEDispatchRows.cpp) at top-8: T K is a multiple of 4, so each lane reads
// its 4 ids of a warp step as one 16-byte vector (cuda-moe-grouped.mlir
// has top-2, scalar ids), in both passes (the counts and the ranks).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels | FileCheck %s

// CHECK-LABEL: gpu.func @moe_dispatch_0(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = none, grid_scale = 0, grid_offset = 256, grid_divisor = 1, block = [512, 1, 1]>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xi32>, vector<4xi32>
// CHECK: memref.atomic_rmw addi
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xi32>, vector<4xi32>
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  idx

func.func @forward(%idx: tensor<?x8xi32> {k3.name = "idx", k3.dims = array<i64: -1, 8>})
    -> (tensor<?x8xi32> {k3.name = "rs"}, tensor<?x8xi32> {k3.name = "pos"}, tensor<257xi32> {k3.name = "off"}, tensor<257xi32> {k3.name = "toff"}) {
  %rs, %pos, %off, %toff = k3.moe_dispatch %idx {num_experts = 256 : i64, tile_rows = 128 : i64} : (tensor<?x8xi32>) -> (tensor<?x8xi32>, tensor<?x8xi32>, tensor<257xi32>, tensor<257xi32>)
  return %rs, %pos, %off, %toff : tensor<?x8xi32>, tensor<?x8xi32>, tensor<257xi32>, tensor<257xi32>
}

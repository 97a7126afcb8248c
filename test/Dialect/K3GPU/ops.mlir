// RUN: k3-opt %s | k3-opt | FileCheck %s
// RUN: k3-opt %s --mlir-print-op-generic | k3-opt | FileCheck %s

// CHECK-LABEL: func @mma_bf16
// CHECK: k3gpu.mma_sync %{{.*}}, %{{.*}}, %{{.*}} : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
func.func @mma_bf16(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>,
                    %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// CHECK-LABEL: func @mma_tf32
// CHECK: k3gpu.mma_sync %{{.*}}, %{{.*}}, %{{.*}} : vector<4x1xf32>, vector<2x1xf32> -> vector<2x2xf32>
func.func @mma_tf32(%a: vector<4x1xf32>, %b: vector<2x1xf32>,
                    %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x1xf32>, vector<2x1xf32> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// CHECK-LABEL: func @ballot
// CHECK: k3gpu.ballot_count %{{.*}} : i32
func.func @ballot(%p: i1) -> i32 {
  %m = k3gpu.ballot_count %p : i32
  return %m : i32
}

// CHECK-LABEL: func @lg2
// CHECK: k3gpu.lg2_approx %{{.*}} : f32
func.func @lg2(%x: f32) -> f32 {
  %r = k3gpu.lg2_approx %x : f32
  return %r : f32
}

// CHECK-LABEL: func @barrier_sync
// CHECK: k3gpu.barrier_sync
func.func @barrier_sync() {
  k3gpu.barrier_sync
  return
}

// CHECK-LABEL: func @rcp
// CHECK: k3gpu.rcp_approx %{{.*}} : f32
func.func @rcp(%x: f32) -> f32 {
  %r = k3gpu.rcp_approx %x : f32
  return %r : f32
}

// CHECK-LABEL: func @fragment_roundtrip
// CHECK: k3gpu.warpgroup_fragment %{{.*}} : <fragmented = vector<64x16xf32>> -> vector<8xf32>
// CHECK: k3gpu.warpgroup_accumulator %{{.*}} : vector<8xf32> -> <fragmented = vector<64x16xf32>>
func.func @fragment_roundtrip(%acc: !nvgpu.warpgroup.accumulator<fragmented = vector<64x16xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x16xf32>> {
  %v = k3gpu.warpgroup_fragment %acc : !nvgpu.warpgroup.accumulator<fragmented = vector<64x16xf32>> -> vector<8xf32>
  %a = k3gpu.warpgroup_accumulator %v : vector<8xf32> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x16xf32>>
  return %a : !nvgpu.warpgroup.accumulator<fragmented = vector<64x16xf32>>
}

// CHECK-LABEL: func @async_chain_and_wait
// CHECK: %[[D:.*]] = k3gpu.warpgroup_mma_chain{{ ?}}[%{{.*}}], [%{{.*}}], %{{.*}} {async, overwrite}
// CHECK: k3gpu.warpgroup_mma_wait %[[D]] {pending = 0 : i64} : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
func.func @async_chain_and_wait(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                                %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                                %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> {
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c {overwrite, async}
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  %e = k3gpu.warpgroup_mma_wait %d {pending = 0}
      : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return %e : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
}

// CHECK-LABEL: func @cluster_load
// CHECK: k3gpu.cluster_load %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} : memref<128x128xf32, #gpu.address_space<workgroup>> -> vector<4xf32>
func.func @cluster_load(%tile: memref<128x128xf32, #gpu.address_space<workgroup>>,
                        %r: index, %rank: i32) -> vector<4xf32> {
  %v = k3gpu.cluster_load %tile[%r, %r], %rank
      : memref<128x128xf32, #gpu.address_space<workgroup>> -> vector<4xf32>
  return %v : vector<4xf32>
}

// CHECK-LABEL: func @tma_prefetch_tile
// CHECK: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : <tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
func.func @tma_prefetch_tile(
    %map: !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>,
    %k: index, %n: index, %e: index) {
  k3gpu.tma_prefetch_tile %map[%k, %n, %e]
      : !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
  return
}

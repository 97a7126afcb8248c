// REQUIRES: ptxas
// The MoE GEMMs of a decode step on the tensor cores (lowering/cuda/
// MoEGroupedGEMV.cpp with tile R = 16, WarpMMADots.h), the default for
// bf16 rows and weights: a warp multiplies 16 rows of each weight (gate/up:
// 16 channels of W1 and the same of W3) by the tile's rows with mma.sync
// m16n8k16; lane (g, c) stores rows g and g + 8 of tile rows 2 c and
// 2 c + 1. K is split over S warps of a block, added in shared memory
// after a barrier that the block-uniform tile branch lets every thread
// reach. 8 bf16 experts, top-2, D 256, I 128; the shared expert's
// k3.glu_gate_up takes the dense form (glu_gemv).
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=16x4x3" 2>&1 | FileCheck %s --check-prefix=BADSLICE
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=4x4x2" 2>&1 | FileCheck %s --check-prefix=CORESPLIT
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=glu_gate_up.tile=16x9" 2>&1 | FileCheck %s --check-prefix=BADTT
// RUN: sed -e 's/bf16/f32/g' %s | not k3-opt --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=16x4" 2>&1 | FileCheck %s --check-prefix=BADTYPE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// Gate/up: K's 8 steps of 32 columns split over 8 warps, one row group of
// 16 per block; down's 4 over 4; the dense gate/up's over 8. 16 warps per
// SM resident.
// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 8], warps = 8, blocks_per_sm = 2>
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 4], warps = 4, blocks_per_sm = 4>
// CONFIG: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_gemv, tile = [16, 8, 8], warps = 8, blocks_per_sm = 2>
// BADSLICE: error: 'k3.moe_grouped_down' op moe_grouped_gemv tile S = 3 must divide warps = 4 and the 4 whole steps of K (32 columns)
// CORESPLIT: error: 'k3.moe_grouped_down' op moe_grouped_gemv needs tile = [R, TT] (or [16, TT, S] with bf16 operands), got 3 sizes
// BADTT: error: 'k3.glu_gate_up' op glu_gemv on the tensor cores needs TT in [1, 8], got 9
// BADTYPE: error: 'k3.moe_grouped_down' op moe_grouped_gemv tile R = 16 multiplies on the tensor cores: it needs bf16 rows and weights

// Gate/up: T K row tiles x 128 / 16 row groups; two fragments (W1, W3)
// per warp in shared memory (8 warps x 2 x 4 x 32).
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: workgroup(%{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<4xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: grid_scale = 16, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<8x128x256xbf16>, vector<8xbf16>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?x256xbf16>, vector<8xbf16>
// CHECK: k3gpu.mma_sync
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.barrier
// CHECK: memref.load {{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>
// CHECK: memref.store {{.*}} : memref<?x128xbf16>
// Down: one fragment per warp (4 x 4 x 32); the routing weight times the
// sum, stored in the rows' type (bf16).
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: workgroup(%{{.*}} : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<4xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: grid_scale = 32, grid_offset = 0, grid_divisor = 1, block = [128, 1, 1]
// CHECK: vector.load {{.*}} : memref<8x256x128xbf16>, vector<8xbf16>
// CHECK: k3gpu.mma_sync
// CHECK: gpu.barrier
// CHECK: arith.mulf
// CHECK: memref.store {{.*}} : memref<?x256xbf16>
// The shared expert: ceil(T / 8) token tiles x 128 / 16 row groups.
// CHECK-LABEL: gpu.func @glu_gate_up_4(
// CHECK-SAME: grid_scale = 8, grid_offset = 56, grid_divisor = 8, block = [256, 1, 1]
// CHECK: vector.load {{.*}} : memref<128x256xbf16>, vector<8xbf16>
// CHECK: k3gpu.mma_sync

// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: bar.sync

// PTXAS: Function properties for glu_gate_up_4
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}, tensor<?x128xbf16> {k3.name = "h"}) attributes {k3.decode} {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  %sg = k3.weight "shared_gate" : tensor<128x256xbf16>
  %su = k3.weight "shared_up" : tensor<128x256xbf16>
  %h = k3.glu_gate_up silu %x, %sg, %su
      : (tensor<?x256xbf16>, tensor<128x256xbf16>, tensor<128x256xbf16>) -> tensor<?x128xbf16>
  return %y, %h : tensor<?x256xbf16>, tensor<?x128xbf16>
}

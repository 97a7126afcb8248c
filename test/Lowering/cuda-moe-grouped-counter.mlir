// REQUIRES: ptxas
// The counter scheduler of the grouped MoE GEMMs' persistent schedule
// (scheduler = counter; lowering/cuda/TileCounter.cpp,
// MoEGroupedPersistent.cpp, WGMMAPipeline.cpp): each kernel gets two i32 of
// global memory in its module; the producer's thread 0 claims each tile
// with an atomic add and hands it to the producer's threads through a
// shared word (a named barrier); the tile goes to the consumers in its
// slot's fourth field. A claim past the end publishes a slot holding the
// tile count by an empty step (arrivals alone), which ends the consumers'
// loop; the block then counts itself done and the last block resets the
// counter for the next launch.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.tile=128x256x64,moe_grouped_wgmma.warps=12,moe_grouped_wgmma.blocks_per_sm=1,moe_grouped_wgmma.stages=3,moe_grouped_wgmma.scheduler=counter" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The counter belongs to the persistent schedule alone.
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.scheduler=counter" 2>&1 | FileCheck %s --check-prefix=NARROW
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.scheduler=dynamic" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// NARROW: error: 'k3.moe_grouped_glu' op scheduler counter applies to the persistent schedules of moe_grouped_wgmma and glu_wgmma (tile [128, 256, 64] or [384, 128, 64]; cluster 2 only on k3.moe_grouped_glu), got moe_grouped_wgmma with tile [128, 128, 64]
// NAME: error: override moe_grouped_wgmma.scheduler needs strided or counter, got 'dynamic'

// CHECK: memref.global "private" @moe_grouped_glu_1_tile_counter : memref<2xi32, 1> = dense<0>
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: grid_symbol = device_sm_count
// CHECK: nvvm.setmaxregister {{ *}}decrease 56
// CHECK: scf.while
// CHECK: memref.get_global @moe_grouped_glu_1_tile_counter
// CHECK: memref.atomic_rmw addi
// CHECK: memref.store %{{.*}} : memref<2xi32, #gpu.address_space<workgroup>>
// CHECK: nvvm.barrier id = %c2_i32 number_of_threads = %c128_i32
// CHECK: scf.condition
// CHECK: nvgpu.mbarrier.arrive.expect_tx
// The end: the slot past the end by arrivals alone, then the count of
// blocks done and the last block's reset.
// CHECK: vector.store %{{.*}} : memref<12xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: nvgpu.mbarrier.arrive
// CHECK: nvvm.memory.barrier <gpu>
// CHECK: memref.atomic_rmw addi
// CHECK: gpu.grid_dim  x
// CHECK: nvvm.memory.barrier <gpu>
// CHECK: memref.atomic_rmw assign
// CHECK: memref.atomic_rmw assign
// CHECK: nvvm.setmaxregister {{ *}}increase 224
// CHECK: scf.while
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: vector.load %{{.*}} : memref<12xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: vector.extract %{{.*}}[3]
// CHECK: scf.condition
// CHECK: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x256xf32>>
// CHECK: memref.global "private" @moe_grouped_down_2_tile_counter : memref<2xi32, 1> = dense<0>
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK: memref.atomic_rmw addi

// PTX-DAG: .global .align 8 .b8 moe_grouped_glu_1_tile_counter[8];
// PTX-DAG: atom.global.add.u32 {{.*}}[moe_grouped_glu_1_tile_counter], 1;
// PTX-DAG: membar.gl;
// PTX-DAG: atom.global.exch.b32 {{.*}}[moe_grouped_glu_1_tile_counter+4], 0;

// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

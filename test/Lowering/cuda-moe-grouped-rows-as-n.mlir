// REQUIRES: ptxas
// The grouped MoE GEMMs' one-warpgroup tile with its rows as wgmma's N
// (tile [128, 128, 64, S]; lowering/cuda/MoEGroupedKernel.h, "Rows as
// wgmma's N"): 8 bf16 experts, top-2, D 256, I 128. A block branches on
// its rows rounded up to S = 8 (scf.index_switch over 15 cases and the
// default, all 128 rows): rows rounded to 64 or 128 keep the 64-row
// halves' products (one or two m64n128 accumulators), the others multiply
// the weight tile's two 64-row halves as A by the first N rows as B (two
// 64 x N accumulators) and store them transposed into the epilogue tile.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.tile=128x128x64x8,moe_grouped_wgmma.warps=4,moe_grouped_wgmma.stages=2,moe_grouped_wgmma.blocks_per_sm=3,moe_grouped_wgmma.scheduler=strided,moe_grouped_wgmma.cluster=0" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The step is 8, 16 or 32; not with a cluster pair or the dense GLU.
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=128x128x64x64" 2>&1 | FileCheck %s --check-prefix=STEP
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=128x128x64x8,moe_grouped_down.cluster=2,moe_grouped_down.stages=3" 2>&1 | FileCheck %s --check-prefix=PAIRS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// STEP: error: 'k3.moe_grouped_down' op moe_grouped_wgmma tile [128, 128, 64, S] takes the rows as wgmma's N in steps of S = 8, 16 or 32, got 64
// PAIRS: error: 'k3.moe_grouped_down' op cluster 2 needs the [128, 128, 64] tile and bf16 weights (rows by TMA)

// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// The branch: the rows rounded up to 8, less one.
// CHECK: arith.addi %{{.*}}, %c7
// CHECK: arith.divui %{{.*}}, %c8
// CHECK: scf.index_switch
// Rows 1-8: two 64 x 8 accumulators (gate and up), 4 k-steps each.
// CHECK-NEXT: case 0 {
// CHECK: scf.for
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x8xf32>>
// The transposed store: a thread's 4 registers of each accumulator.
// CHECK: k3gpu.warpgroup_fragment {{.*}} -> vector<4xf32>
// CHECK-COUNT-4: memref.store
// CHECK: k3gpu.warpgroup_fragment {{.*}} -> vector<4xf32>
// CHECK-COUNT-4: memref.store
// Rows 57-64: the first 64-row half alone, by 128 weight rows.
// CHECK: case 7 {
// CHECK: scf.for
// CHECK-COUNT-4: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x128xf32>>
// CHECK: nvgpu.warpgroup.mma.store
// Rows 113-120 as N.
// CHECK: case 14 {
// CHECK: scf.for
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x120xf32>>
// All 128 rows: both halves.
// CHECK: default {
// CHECK: scf.for
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x128xf32>>
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK: scf.index_switch
// CHECK: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x8xf32>>

// PTX-DAG: wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n120k16.f32.bf16.bf16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

// PTXAS: Function properties for moe_grouped_{{glu_1|down_2}}
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_{{glu_1|down_2}}
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

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

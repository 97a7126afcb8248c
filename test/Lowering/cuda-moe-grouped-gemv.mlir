// REQUIRES: ptxas
// The MoE GEMMs of a decode step (lowering/cuda/MoEGroupedGEMV.cpp): after
// k3-moe-grouped's tiles of 4 rows, k3.moe_grouped_glu and
// k3.moe_grouped_down take the `moe_grouped_gemv` kernel, and the shared
// expert's k3.glu_gate_up the same kernel's dense form (`glu_gemv`). 8
// bf16 experts, top-2, D 256, I 128.
// - A block per (row tile, group of 4 warps x R rows); at most T K row
//   tiles (grid T K x row groups, linear in T), blocks past the last tile
//   return at once; a binary search over the tile offsets finds the
//   tile's expert.
// - Lane l loads 16-byte vectors (8 bf16) of the warp's weight rows and of
//   the tile's 4 rows (x gathered by token for gate/up, h's sorted rows
//   for down); a butterfly of shuffles sums over the warp; lane 0 stores
//   act(gate, up) in bf16, or the routing weight times the sum in the
//   rows' type.
// That is the CUDA-core form (tile R <= 8), checked here through
// overrides; bf16 operands default to the tensor-core form (R = 16),
// cuda-moe-grouped-gemv-mma.mlir.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_gemv.tile=4x4,moe_grouped_gemv.warps=4,glu_gemv.tile=2x4,glu_gemv.warps=4" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The config rule and its limits.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=8x4" | FileCheck %s --check-prefix=TUNED
// An override scoped by the kernel kind reaches the ops of that kind only.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_gemv.warps=8,glu_gemv.tile=1x4" | FileCheck %s --check-prefix=KIND
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=1x8" 2>&1 | FileCheck %s --check-prefix=BADTT
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.tile=3x4" 2>&1 | FileCheck %s --check-prefix=BADROWS
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=glu_gate_up.tile=1x17" 2>&1 | FileCheck %s --check-prefix=BADTOKENS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// A decode step: the dispatch block has 4 warps (a few hundred pairs at most).
// CONFIG: k3.moe_dispatch {{.*}}#k3.kernel_config<kernel = moe_dispatch_rows, warps = 4>, num_experts = 8 : i64, tile_rows = 4 : i64
// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 8], warps = 8, blocks_per_sm = 2>
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 4], warps = 4, blocks_per_sm = 4>
// CONFIG: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_gemv, tile = [16, 8, 8], warps = 8, blocks_per_sm = 2>
// TUNED: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [8, 4], warps = 4, blocks_per_sm = 4>
// KIND: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 8], warps = 8, blocks_per_sm = 2>
// KIND: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 4], warps = 8, blocks_per_sm = 4>
// KIND: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_gemv, tile = [1, 4], warps = 8, blocks_per_sm = 2>
// BADTT: error: 'k3.moe_grouped_glu' op moe_grouped_gemv tile TT = 8 must be k3.moe_dispatch's tile_rows = 4
// BADROWS: error: 'k3.moe_grouped_down' op moe_grouped_gemv tile R = 3 must divide N = 256
// BADTOKENS: error: 'k3.glu_gate_up' op glu_gemv tile R must be in [1, 8] and TT in [1, 16], got [1, 17]

// Gate/up: T K row tiles x 128 / (4 warps x 4 rows) row groups.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 16, grid_offset = 0, grid_divisor = 1, block = [128, 1, 1]>
// CHECK: scf.if
// CHECK: scf.for {{.*}} iter_args
// CHECK-COUNT-2: vector.load {{.*}} {alignment = 16 : i64} : memref<8x128x256xbf16>, vector<8xbf16>
// CHECK: vector.load {{.*}} : memref<?x256xbf16>, vector<8xbf16>
// CHECK: gpu.shuffle  xor
// Down: 256 / (4 x 4) row groups; h's sorted rows, bf16 out.
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 32, grid_offset = 0, grid_divisor = 1, block = [128, 1, 1]>
// CHECK: vector.load {{.*}} : memref<8x256x128xbf16>, vector<8xbf16>
// CHECK: memref.store {{.*}} : memref<?x256xbf16>
// The shared expert (R = 2): ceil(T / 4) row tiles x 128 / 8 row groups.
// CHECK-LABEL: gpu.func @glu_gate_up_4(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 16, grid_offset = 48, grid_divisor = 4, block = [128, 1, 1]>
// CHECK: vector.load {{.*}} : memref<128x256xbf16>, vector<8xbf16>

// PTX: ld.global.v4.b32
// PTX: shfl.sync.bfly.b32

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

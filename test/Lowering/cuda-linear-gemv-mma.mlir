// REQUIRES: ptxas
// k3.linear with kernel = linear_gemv and tile R = 16 (lowering/cuda/
// LinearGEMVMMA.cpp, WarpMMADots.h), the default of a decode entry on bf16
// operands: a warp's 16 output rows times the tile's tokens in 8-token mma
// tiles (mma.sync m16n8k16, f32 accumulators). Lane (g, c) loads 16 bytes
// of rows g and g + 8 and of its token g per 32-column step; no warp
// reduction. K is split over S warps of a block, which add their fragments
// in shared memory in slice order.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The config rule: S until the grid has about 1024 warps (here 256 rows:
// 16 warps, so S = 8 divides K's 16 steps), 16 warps per SM resident.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// 16 tokens a tile where a call may have more than 8 rows: a decode
// entry's bound is max-seqs, another entry's max-tokens (k3-compile passes
// both); 8 or less (or unknown, above) keeps 8.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-seqs=9 max-tokens=8" | FileCheck %s --check-prefix=CONFIG16
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-seqs=8 max-tokens=4096" | FileCheck %s --check-prefix=CONFIG
// RUN: sed -e 's/ attributes {k3.decode}//' %s | k3-opt --k3-select-kernel-config="target=cuda max-seqs=64 max-tokens=8 override=linear.kernel=linear_gemv" | FileCheck %s --check-prefix=CONFIG
// RUN: sed -e 's/ attributes {k3.decode}//' %s | k3-opt --k3-select-kernel-config="target=cuda max-seqs=8 max-tokens=4096 override=linear.kernel=linear_gemv" | FileCheck %s --check-prefix=CONFIG16
// Up to two mma tiles (TT = 16) and no split; the limits.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear_gemv.tile=16x16" --k3-outline-kernels | FileCheck %s --check-prefix=TT16
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear_gemv.tile=16x17" 2>&1 | FileCheck %s --check-prefix=BADTT
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear_gemv.tile=16x8x3" 2>&1 | FileCheck %s --check-prefix=BADSLICE
// RUN: sed -e 's/bf16/f32/g' %s | not k3-opt --k3-select-kernel-config="target=cuda override=linear_gemv.tile=16x8" 2>&1 | FileCheck %s --check-prefix=BADTYPE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [16, 8, 8], warps = 8, blocks_per_sm = 2>{{.*}}tensor<256x512xbf16>
// CONFIG16: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [16, 16, 8], warps = 8, blocks_per_sm = 2>{{.*}}tensor<256x512xbf16>
// (f32 operands, or N not a multiple of 16, stay on the CUDA cores:
// cuda-linear-gemv.mlir.)
// BADTT: error: 'k3.linear' op linear_gemv tile TT must be in [1, 16], got 17
// BADSLICE: error: 'k3.linear' op linear_gemv tile S = 3 must divide warps = 8 and the 16 whole steps of K (32 columns)
// BADTYPE: error: 'k3.linear' op linear_gemv tile R = 16 multiplies on the tensor cores: it needs bf16 inputs and weights, each N a multiple of 16

// One row group of 16 per block (8 warps = 8 slices): 256 / 16 row tiles
// per 8-token tile; shared memory for 8 warps' fragments (8 x 4 x 32).
// CHECK-LABEL: gpu.func @linear_0(
// CHECK-SAME: workgroup(%{{.*}} : memref<1024xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 16, grid_offset = 112, grid_divisor = 8, block = [256, 1, 1]>
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32
// A slice of 2 steps, straight-line: rows g and g + 8, then token g.
// CHECK-COUNT-2: vector.load {{.*}} {alignment = 16 : i64} : memref<256x512xbf16>, vector<8xbf16>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?x512xbf16>, vector<8xbf16>
// CHECK: k3gpu.mma_sync
// CHECK-NOT: gpu.shuffle
// CHECK: memref.store {{.*}} : memref<1024xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
// CHECK: memref.load {{.*}} : memref<1024xf32, #gpu.address_space<workgroup>>
// CHECK: memref.store {{.*}} : memref<?x256xf32>
// CHECK: gpu.return

// TT16-LABEL: gpu.func @linear_0(
// TT16-NOT: workgroup
// TT16-SAME: grid_scale = 2, grid_offset = 30, grid_divisor = 16
// A block of at most 8 tokens multiplies one mma tile (the TT = 8 kernel's
// work); 9-16 tokens take the else branch, where two token tiles share
// each weight load: four mmas per step.
// TT16: arith.cmpi slt, %{{.*}}, %c9
// TT16: scf.if
// TT16: } else {
// TT16: scf.for {{.*}} iter_args
// TT16-COUNT-2: vector.load {{.*}} : memref<?x512xbf16>, vector<8xbf16>
// TT16-COUNT-4: k3gpu.mma_sync

// PTX: ld.global.v4.b32
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: bar.sync

// PTXAS: Function properties for linear_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x512xbf16> {k3.name = "x", k3.dims = array<i64: -1, 512>})
    -> (tensor<?x256xf32> {k3.name = "y"}) attributes {k3.decode} {
  %w = k3.weight "w" : tensor<256x512xbf16>
  %y = k3.linear %x, %w : (tensor<?x512xbf16>, tensor<256x512xbf16>) -> tensor<?x256xf32>
  return %y : tensor<?x256xf32>
}

// REQUIRES: ptxas
// k3.linear with kernel = linear_gemv (lowering/cuda/LinearGEMV.cpp), the
// default of a decode entry: on the CUDA cores (f32 or f16 operands; bf16
// ones take the tensor-core form, tile R = 16, cuda-linear-gemv-mma.mlir)
// a warp owns R = 2 output rows and TT = 4 tokens, each lane loads 16-byte
// weight vectors (4 f32) and the same columns of its tokens, and a
// butterfly of shuffles sums over the warp.
// With tile [R, TT, S] (tuning) S warps share a row group, each over a
// slice of K, and the group's first warp adds the slices' sums from
// shared memory (SPLIT).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The config rule: the GEMV in the decode entry; in prefill the tensor
// cores where they cover the shape (bf16 input: wgmma; f32: 3xTF32), else
// the GEMV (here N = 36 is not a multiple of 8).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// Tuning and its limits.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.tile=4x8" | FileCheck %s --check-prefix=TUNED
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.tile=3x4" 2>&1 | FileCheck %s --check-prefix=BADROWS
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.tile=2x4x1x1" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.tile=2x4x3" 2>&1 | FileCheck %s --check-prefix=BADSLICE
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.tile=1x4x2,linear.warps=4" --k3-outline-kernels | FileCheck %s --check-prefix=SPLIT
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG-LABEL: func.func @forward(
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, {{.*}}tensor<256x512xbf16>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_mma_3xtf32, {{.*}}tensor<256x512xf32>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>{{.*}}tensor<36x512xbf16>
// CONFIG-LABEL: func.func @forward_decode(
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [16, 8, 8], warps = 8, blocks_per_sm = 2>{{.*}}tensor<256x512xbf16>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>{{.*}}tensor<256x512xf32>
// TUNED: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [4, 8], warps = 8, blocks_per_sm = 2>{{.*}}tensor<256x512xbf16>
// BADROWS: error: 'k3.linear' op linear_gemv tile R = 3 must divide N = 256
// BADTILE: error: 'k3.linear' op linear_gemv needs tile = [R, TT] or [R, TT, S], got 4 sizes
// BADSLICE: error: 'k3.linear' op linear_gemv tile S = 3 must divide warps = 8 and the 2 whole steps of K (32 lanes x 16 bytes)

// The decode entry's f32 linear: 2 x 4 warps of rows per block, token
// tiles of 4 in the grid (ceil(T / 4) x 256 / 8 blocks, linear in T).
// CHECK-LABEL: gpu.func @linear_4(
// CHECK-NOT: workgroup
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 32, grid_offset = 96, grid_divisor = 4, block = [128, 1, 1]>
// CHECK: scf.if
// CHECK: scf.for {{.*}} iter_args
// 16-byte weight vectors, one per row of the warp, and the tokens' columns.
// CHECK-COUNT-2: vector.load {{.*}} {alignment = 16 : i64} : memref<256x512xf32>, vector<4xf32>
// CHECK: vector.load {{.*}} : memref<?x512xf32>, vector<4xf32>
// CHECK: scf.yield
// The warp's sums: five xor shuffles each.
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// Split K (tile [1, 4, 2]): 4 warps = 2 row groups of one row per block
// (ceil(T / 4) x 256 / 2 blocks); lane 0 of each warp keeps its sums in
// shared memory and, after the barrier, the group's first warp adds the
// two slices.
// SPLIT-LABEL: gpu.func @linear_0(
// SPLIT-SAME: workgroup(%{{.*}} : memref<16xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// SPLIT-SAME: grid_scale = 128, grid_offset = 384, grid_divisor = 4
// SPLIT: scf.for {{.*}} iter_args
// SPLIT: vector.load {{.*}} {alignment = 16 : i64} : memref<256x512xbf16>, vector<8xbf16>
// SPLIT-COUNT-5: gpu.shuffle  xor
// SPLIT: memref.store {{.*}} : memref<16xf32, #gpu.address_space<workgroup>>
// SPLIT: gpu.barrier
// SPLIT: memref.load {{.*}} : memref<16xf32, #gpu.address_space<workgroup>>

// PTX: ld.global.v4.b32
// PTX: shfl.sync.bfly.b32

// PTXAS: Function properties for linear_4
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x512xbf16> {k3.name = "x", k3.dims = array<i64: -1, 512>},
    %xf: tensor<?x512xf32> {k3.name = "xf", k3.dims = array<i64: -1, 512>})
    -> (tensor<?x256xf32> {k3.name = "y"}, tensor<?x256xf32> {k3.name = "yf"},
        tensor<?x36xf32> {k3.name = "yn"}) {
  %w = k3.weight "w" : tensor<256x512xbf16>
  %y = k3.linear %x, %w : (tensor<?x512xbf16>, tensor<256x512xbf16>) -> tensor<?x256xf32>
  %wf = k3.weight "wf" : tensor<256x512xf32>
  %yf = k3.linear %xf, %wf : (tensor<?x512xf32>, tensor<256x512xf32>) -> tensor<?x256xf32>
  %wn = k3.weight "wn" : tensor<36x512xbf16>
  %yn = k3.linear %x, %wn : (tensor<?x512xbf16>, tensor<36x512xbf16>) -> tensor<?x36xf32>
  return %y, %yf, %yn : tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x36xf32>
}

// A decode entry (k3-decode-entry marks it k3.decode): a few tokens.
func.func @forward_decode(
    %x: tensor<?x512xbf16> {k3.name = "x", k3.dims = array<i64: -1, 512>},
    %xf: tensor<?x512xf32> {k3.name = "xf", k3.dims = array<i64: -1, 512>})
    -> (tensor<?x256xf32> {k3.name = "y"}, tensor<?x256xf32> {k3.name = "yf"}) attributes {k3.decode} {
  %w = k3.weight "w" : tensor<256x512xbf16>
  %y = k3.linear %x, %w : (tensor<?x512xbf16>, tensor<256x512xbf16>) -> tensor<?x256xf32>
  %wf = k3.weight "wf" : tensor<256x512xf32>
  %yf = k3.linear %xf, %wf : (tensor<?x512xf32>, tensor<256x512xf32>) -> tensor<?x256xf32>
  return %y, %yf : tensor<?x256xf32>, tensor<?x256xf32>
}

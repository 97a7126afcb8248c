// REQUIRES: ptxas
// k3.rms_norm, k3.add_rms_norm, k3.gated_rms_norm and k3.partial_rms_norm
// with kernel = rms_norm_rows
// (lowering/cuda/RMSNormRows.cpp): a block of 8 warps per row; each thread
// holds its columns (hidden 2304: 9) in registers, the sum of squares is a
// warp sum then a shared-memory sum over the warps; add_rms_norm stores
// the sum in its own type (bf16 here) and normalises the stored value.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=rms_norm.warps=33" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=add_rms_norm.warps=1" 2>&1 | FileCheck %s --check-prefix=PERTHREAD
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=gated_rms_norm.tile=4" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// BADWARPS: error: 'k3.rms_norm' op rms_norm_rows warps must be in [1, 32], got 33
// BADTILE: error: 'k3.gated_rms_norm' op rms_norm_rows tile is [R], R rows per block, a warp each (R = warps = 8)
// PERTHREAD: error: 'k3.add_rms_norm' op rms_norm_rows with 1 warps keeps more than 64 values per thread of 2304

// CHECK-LABEL: gpu.func @rms_norm_0(
// CHECK-SAME: workgroup(%{{.*}} : memref<8xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = rms_norm_rows, warps = 8>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: gpu.barrier
// CHECK: math.sqrt
// The fused add: the row's 9 x 3 loads (input, residual, weight) all before
// the first store of the sum, which may alias them; the sum rounded to
// bf16, stored, then normalised.
// CHECK-LABEL: gpu.func @add_rms_norm_1(
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-COUNT-3: memref.load {{.*}} : memref<{{(\?x)?}}?xbf16
// CHECK-NOT: memref.store
// CHECK-NOT: memref.load {{.*}} : memref<?x?xbf16
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: memref.store {{.*}} : memref<?x?xbf16
// CHECK: gpu.barrier

// KDA's output norm: rows of one head (128 channels), a warp per row and 8
// rows per block (T x 32 rows: grid ceil(32 T / 8)); 4 values per lane,
// the sum a warp sum (no barrier), the output times sigmoid(gate) (ex2
// and rcp of the special-function unit).
// CHECK-LABEL: gpu.func @gated_rms_norm_2(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = rms_norm_rows, tile = [8], warps = 8>
// CHECK-SAME: grid_scale = 32, grid_offset = 7, grid_divisor = 8, block = [256, 1, 1]
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK-NOT: gpu.barrier
// CHECK: math.sqrt
// CHECK: math.exp2
// CHECK: k3gpu.rcp_approx
// CHECK: gpu.return

// MLA's latent [c_kv 512 | k_pe 64] (k3.partial_rms_norm): a warp per row
// of 576, 18 columns a lane, each loaded with its weight (the k_pe
// columns' load clamped to the last of 512) before the sum; the mean over
// 512; a k_pe column stored as loaded (the select).
// CHECK-LABEL: gpu.func @partial_rms_norm_3(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = rms_norm_rows, tile = [8], warps = 8>
// CHECK-COUNT-36: memref.load
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: arith.constant 5.120000e+02 : f32
// CHECK: arith.divf
// CHECK: arith.select
// CHECK: memref.store
// CHECK: gpu.return

// PTXAS: Function properties for add_rms_norm_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x2304xf32> {k3.name = "x", k3.dims = array<i64: -1, 2304>},
    %h: tensor<?x2304xbf16> {k3.name = "h", k3.dims = array<i64: -1, 2304>},
    %r: tensor<?x2304xbf16> {k3.name = "r", k3.dims = array<i64: -1, 2304>},
    %o: tensor<?x32x128xbf16> {k3.name = "o", k3.dims = array<i64: -1, 32, 128>},
    %gt: tensor<?x32x128xbf16> {k3.name = "gt", k3.dims = array<i64: -1, 32, 128>},
    %kv: tensor<?x576xbf16> {k3.name = "kv", k3.dims = array<i64: -1, 576>})
    -> (tensor<?x2304xf32> {k3.name = "y"}, tensor<?x2304xbf16> {k3.name = "s"},
        tensor<?x2304xf32> {k3.name = "z"}, tensor<?x32x128xbf16> {k3.name = "go"},
        tensor<?x576xbf16> {k3.name = "latent"}) {
  %w = k3.weight "w" : tensor<2304xbf16>
  %y = k3.rms_norm %x, %w {epsilon = 1.0e-6 : f64} : (tensor<?x2304xf32>, tensor<2304xbf16>) -> tensor<?x2304xf32>
  %s, %z = k3.add_rms_norm %h, %r, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x2304xbf16>, tensor<?x2304xbf16>, tensor<2304xbf16>) -> (tensor<?x2304xbf16>, tensor<?x2304xf32>)
  %wo = k3.weight "wo" : tensor<128xf32>
  %go = k3.gated_rms_norm %o, %gt, %wo {epsilon = 1.0e-5 : f64}
      : (tensor<?x32x128xbf16>, tensor<?x32x128xbf16>, tensor<128xf32>) -> tensor<?x32x128xbf16>
  %wn = k3.weight "wn" : tensor<512xbf16>
  %latent = k3.partial_rms_norm %kv, %wn {epsilon = 1.0e-6 : f64}
      : (tensor<?x576xbf16>, tensor<512xbf16>) -> tensor<?x576xbf16>
  return %y, %s, %z, %go, %latent : tensor<?x2304xf32>, tensor<?x2304xbf16>, tensor<?x2304xf32>, tensor<?x32x128xbf16>, tensor<?x576xbf16>
}

// REQUIRES: ptxas
// k3.linear_group with kernel = linear_gemv (lowering/cuda/LinearGEMV.cpp):
// one grid over the weights' rows one after another (here 256 + 32 + 6 =
// 294 rows, R = 2: 37 row tiles of 4 warps); a warp-uniform branch picks
// the weight of its rows and stores into that weight's result, in the
// result's own element type.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// R must divide every weight's rows.
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear_group.tile=4x4" 2>&1 | FileCheck %s --check-prefix=BADROWS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.linear_group {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>
// BADROWS: error: 'k3.linear_group' op linear_gemv tile R = 4 must divide N = 6

// ceil(T / 4) x 37 blocks of 128 threads.
// CHECK-LABEL: gpu.func @linear_group_0(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 37, grid_offset = 111, grid_divisor = 4, block = [128, 1, 1]>
// One branch per weight, each with its loads, shuffles and stores.
// CHECK: vector.load {{.*}} : memref<256x512xbf16>, vector<8xbf16>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: memref.store {{.*}} : memref<?x256xbf16>
// CHECK: vector.load {{.*}} : memref<32x512xbf16>, vector<8xbf16>
// CHECK: memref.store {{.*}} : memref<?x32xf32>
// CHECK: vector.load {{.*}} : memref<6x512xbf16>, vector<8xbf16>
// CHECK: memref.store {{.*}} : memref<?x6xbf16>

// PTXAS: Function properties for linear_group_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x512xbf16> {k3.name = "x", k3.dims = array<i64: -1, 512>})
    -> (tensor<?x256xbf16> {k3.name = "a"}, tensor<?x32xf32> {k3.name = "b"},
        tensor<?x6xbf16> {k3.name = "c"}) {
  %wa = k3.weight "wa" : tensor<256x512xbf16>
  %wb = k3.weight "wb" : tensor<32x512xbf16>
  %wc = k3.weight "wc" : tensor<6x512xbf16>
  %a, %b, %c = k3.linear_group %x, %wa, %wb, %wc
      : (tensor<?x512xbf16>, tensor<256x512xbf16>, tensor<32x512xbf16>, tensor<6x512xbf16>)
      -> (tensor<?x256xbf16>, tensor<?x32xf32>, tensor<?x6xbf16>)
  return %a, %b, %c : tensor<?x256xbf16>, tensor<?x32xf32>, tensor<?x6xbf16>
}

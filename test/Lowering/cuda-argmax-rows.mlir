// REQUIRES: ptxas
// k3.argmax with kernel = argmax_rows (lowering/cuda/ArgmaxRows.cpp): a
// block of 32 warps per row; each thread keeps the first maximum of its
// columns (4 loads per step in flight), shuffles combine the lanes, shared
// memory the warps; ties go to the lower column.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=argmax.warps=8" | FileCheck %s --check-prefix=TUNED
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=argmax.warps=33" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// TUNED: k3.argmax {{.*}}#k3.kernel_config<kernel = argmax_rows, warps = 8>
// BADWARPS: error: 'k3.argmax' op argmax_rows warps must be in [1, 32], got 33

// The Kimi vocabulary: 163840 = 40 whole steps of 4 x 1024 columns.
// CHECK-LABEL: gpu.func @argmax_0(
// CHECK-SAME: workgroup(%{{.*}} : memref<32xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<32xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = argmax_rows, warps = 32>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [1024, 1, 1]>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c163840{{.*}} step %c4096
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle  xor
// A vocabulary smaller than one step (1000 < 4096): guarded columns only.
// CHECK-LABEL: gpu.func @argmax_1(
// CHECK-NOT: scf.for
// CHECK: gpu.barrier

// PTX: shfl.sync.bfly.b32
// PTX: bar.sync

// PTXAS: Function properties for argmax_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %l: tensor<?x163840xf32> {k3.name = "l", k3.dims = array<i64: -1, 163840>},
    %s: tensor<?x1000xf32> {k3.name = "s", k3.dims = array<i64: -1, 1000>})
    -> (tensor<?xi32> {k3.name = "a"}, tensor<?xi32> {k3.name = "b"}) {
  %a = k3.argmax %l : (tensor<?x163840xf32>) -> tensor<?xi32>
  %b = k3.argmax %s : (tensor<?x1000xf32>) -> tensor<?xi32>
  return %a, %b : tensor<?xi32>, tensor<?xi32>
}

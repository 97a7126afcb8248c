// REQUIRES: ptxas
// k3.linear with cuda-linear=mma-3xtf32 (lowering/cuda/LinearMMA.cpp): f32
// activations on the tensor cores at f32 accuracy, each f32 operand split
// into tf32 high and low parts (3 mma.sync.m16n8k8.tf32 per product with an
// f32 weight, 2 with a bf16 weight, exact in tf32). Blocks of 4 warps own
// 64 rows x 32 outputs; shapes it does not cover keep the loop nest.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_mma_3xtf32" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=wmma" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// bf16 weight [64, 96]: grid ceil(2 (T + 63) / 64); per 32-wide K step 4 k8
// steps x 2 x 2 tiles x 2 products.
// CHECK-LABEL: gpu.func @linear_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = linear_mma_3xtf32, tile = [64, 32, 32], warps = 4>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 2, grid_offset = 126, grid_divisor = 64, block = [128, 1, 1]
// CHECK: gpu.dynamic_shared_memory
// CHECK: scf.for
// CHECK-COUNT-32: k3gpu.mma_sync {{.*}} : vector<4x1xf32>, vector<2x1xf32> -> vector<2x2xf32>
// CHECK-NOT: k3gpu.mma_sync
// CHECK: scf.yield
// f32 weight [32, 64]: three products (48 per K step).
// CHECK-LABEL: gpu.func @linear_1(
// CHECK: scf.for
// CHECK-COUNT-48: k3gpu.mma_sync {{.*}} : vector<4x1xf32>, vector<2x1xf32> -> vector<2x2xf32>
// CHECK: scf.yield
// 40 outputs (not a multiple of 32): the default for what the tensor
// cores do not cover, the GEMV (test/Lowering/cuda-linear-gemv.mlir).
// CHECK-LABEL: gpu.func @linear_2(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>
// CHECK-NOT: k3gpu.mma_sync
// CHECK: gpu.return

// BAD: error: unknown kernel 'wmma'

// PTX: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// PTX-NOT: ld.local
// PTX-NOT: st.local

// (ptxas reports the entries in reverse order.)
// PTXAS: Function properties for linear_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for linear_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x96xf32> {k3.name = "x", k3.dims = array<i64: -1, 96>},
    %w0: tensor<64x96xbf16> {k3.name = "w0"},
    %w1: tensor<32x64xf32> {k3.name = "w1"},
    %w2: tensor<40x32xf32> {k3.name = "w2"})
    -> (tensor<?x40xf32> {k3.name = "y"}) {
  %h = k3.linear %x, %w0 : (tensor<?x96xf32>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  %g = k3.linear %h, %w1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %y = k3.linear %g, %w2 : (tensor<?x32xf32>, tensor<40x32xf32>) -> tensor<?x40xf32>
  return %y : tensor<?x40xf32>
}

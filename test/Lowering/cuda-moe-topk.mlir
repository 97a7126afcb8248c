// REQUIRES: ptxas
// k3.moe_topk on CUDA (kernel moe_topk_rows, lowering/cuda/MoERouterRows.cpp
// and RouterTopK.cpp): a warp per token, 8 tokens per block; each lane
// reads its experts' logits (l, l + 32, ...) from global memory, scores
// them, and k rounds of shuffles pick the warp's best untaken expert.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=moe_topk.warps=33" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// K3's router: 896 experts (28 a lane) top-16, through ptxas without spills.
// RUN: sed -e 's/256/896/g; s/x8x/x16x/g; s/top_k = 8/top_k = 16/' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.k3.mlir
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.k3.mlir > %t.k3.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.k3.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.k3.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.k3.bin.mlir > %t.k3.ptx
// RUN: %ptxas -v -arch=sm_90a %t.k3.ptx -o %t.k3.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// Group-limited routing (DeepSeek-V3's 8 groups, topk_group 4): before the
// k rounds (3 x 5 shuffles a round: 120), each group's score is a
// butterfly of the lanes' best two (2 x 5 shuffles a group: 80 more);
// through ptxas without spills.
// RUN: grep -c "gpu.shuffle  xor" %t.mlir | FileCheck %s --check-prefix=PLAIN
// RUN: sed -e 's/top_k = 8 : i64/top_k = 8 : i64, n_group = 8 : i64, topk_group = 4 : i64/' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.g.mlir
// RUN: grep -c "gpu.shuffle  xor" %t.g.mlir | FileCheck %s --check-prefix=GROUPED
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.g.mlir > %t.g.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.g.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.g.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.g.bin.mlir > %t.g.ptx
// RUN: %ptxas -v -arch=sm_90a %t.g.ptx -o %t.g.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// PLAIN: {{^}}120{{$}}
// GROUPED: {{^}}200{{$}}
// BADWARPS: error: 'k3.moe_topk' op moe_topk_rows warps must be in [1, 32], got 33

// CHECK-LABEL: gpu.func @moe_topk_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_topk_rows, warps = 8>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 7, grid_divisor = 8, block = [256, 1, 1]>
// CHECK: gpu.shuffle xor
// CHECK-NOT: gpu.barrier

// PTX: shfl.sync.bfly.b32
// PTXAS: Function properties for moe_topk_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %l: tensor<?x256xf32> {k3.name = "logits", k3.dims = array<i64: -1, 256>})
    -> (tensor<?x8xi32> {k3.name = "idx"}, tensor<?x8xf32> {k3.name = "wts"}) {
  %b = k3.weight "b" : tensor<256xf32>
  %i, %p = k3.moe_topk sigmoid %l bias(%b) {top_k = 8 : i64, renormalize, routed_scaling_factor = 2.446 : f64}
      : (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
  return %i, %p : tensor<?x8xi32>, tensor<?x8xf32>
}

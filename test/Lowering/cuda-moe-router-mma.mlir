// REQUIRES: ptxas
// k3.moe_router with kernel = moe_router_mma (lowering/cuda/MoERouterRows.cpp),
// the CUDA default in prefill where x and W are bf16: a block per 32 tokens
// (two 16-row tiles), the scores by mma.sync m16n8k16 (bf16, f32
// accumulators) over chunks of 128 channels of x staged in shared memory
// and read by ldmatrix, W's fragments from global memory; the logits to
// shared memory (32 x 256 f32 + the chunk: 41472 bytes), then each warp
// takes the top-k of tokens w, w + 8, ... The f32 softmax router keeps
// moe_router_rows (test/Lowering/cuda-moe-router-rows.mlir).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=moe_router.tile=32x100" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// BADTILE: error: 'k3.moe_router' op moe_router_mma tile is [G, C]: G = 16 or 32 tokens per block, C channels per chunk (a multiple of 16 dividing 2304)

// CHECK-LABEL: gpu.func @moe_router_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_router_mma, tile = [32, 128], warps = 8>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 31, grid_divisor = 32, block = [256, 1, 1], dynamic_smem = 41472>
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK: nvgpu.ldmatrix
// CHECK: k3gpu.mma_sync
// CHECK-LABEL: gpu.func @moe_router_1(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_router_rows, tile = [8], warps = 8>

// PTX: .entry moe_router_0
// PTX: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// Group-limited routing (the sigmoid router in 8 groups, topk_group 4):
// the group scores' shuffles (10 a group: 260 + 80) before the top-k, through ptxas
// without spills beside the tensor-core fragments.
// RUN: sed -e 's/top_k = 8 : i64, renormalize/top_k = 8 : i64, renormalize, n_group = 8 : i64, topk_group = 4 : i64/' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.g.mlir
// RUN: grep -c "gpu.shuffle  xor" %t.mlir | FileCheck %s --check-prefix=PLAIN
// RUN: grep -c "gpu.shuffle  xor" %t.g.mlir | FileCheck %s --check-prefix=GROUPED
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.g.mlir > %t.g.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.g.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.g.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.g.bin.mlir > %t.g.ptx
// RUN: %ptxas -v -arch=sm_90a %t.g.ptx -o %t.g.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// PLAIN: {{^}}260{{$}}
// GROUPED: {{^}}340{{$}}
// PTXAS: Function properties for moe_router_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(%x: tensor<?x2304xbf16> {k3.name = "x", k3.dims = array<i64: -1, 2304>},
    %xs: tensor<?x200xf32> {k3.name = "xs", k3.dims = array<i64: -1, 200>})
    -> (tensor<?x8xi32> {k3.name = "i"}, tensor<?x8xf32> {k3.name = "w"},
        tensor<?x6xi32> {k3.name = "is"}, tensor<?x6xf32> {k3.name = "ws"}) {
  %wr = k3.weight "wr" : tensor<256x2304xbf16>
  %bias = k3.weight "bias" : tensor<256xf32>
  %i, %w = k3.moe_router sigmoid %x, %wr bias(%bias) {top_k = 8 : i64, renormalize, routed_scaling_factor = 2.446 : f64}
      : (tensor<?x2304xbf16>, tensor<256x2304xbf16>, tensor<256xf32>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
  %wrs = k3.weight "wrs" : tensor<40x200xf32>
  %is, %ws = k3.moe_router softmax %xs, %wrs {top_k = 6 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x200xf32>, tensor<40x200xf32>) -> (tensor<?x6xi32>, tensor<?x6xf32>)
  return %i, %w, %is, %ws : tensor<?x8xi32>, tensor<?x8xf32>, tensor<?x6xi32>, tensor<?x6xf32>
}

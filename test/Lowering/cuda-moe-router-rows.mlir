// REQUIRES: ptxas
// k3.moe_router with kernel = moe_router_rows (lowering/cuda/MoERouterRows.cpp):
// a block per G = 8 tokens (tile [8]: their bf16 rows and f32 logits, 45056
// bytes of dynamic shared memory); the warps' dot products with 16-byte
// loads of W (8 channels, bf16; 4 for the f32 model), each used for the 8
// tokens, into shared memory, then warp g holds token g's scores in
// registers (256 experts: 8 per lane) and takes the top-k by shuffles.
// Sigmoid with a correction bias, and softmax. (The CUDA default for bf16 x
// and W is moe_router_mma: test/Lowering/cuda-moe-router-mma.mlir.)
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=moe_router.kernel=moe_router_rows" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=moe_router.kernel=moe_router_rows,moe_router.warps=33" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=moe_router.kernel=moe_router_rows,moe_router.tile=16" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=moe_router.kernel=moe_router_rows,moe_router.tile=1" --k3-outline-kernels | FileCheck %s --check-prefix=ONE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// BADWARPS: error: 'k3.moe_router' op moe_router_rows warps must be in [1, 32], got 33
// BADTILE: error: 'k3.moe_router' op moe_router_rows tile is [G], G tokens per block in [1, warps], got [16]
// ONE: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1], dynamic_smem = 5632>

// Group-limited routing (the sigmoid router in 8 groups, topk_group 4;
// the softmax one in 4 groups of 10, topk_group 2): each group's score is
// a butterfly of the lanes' best two, 10 shuffles a group (300 + 120);
// through ptxas without spills.
// RUN: grep -c "gpu.shuffle  xor" %t.mlir | FileCheck %s --check-prefix=PLAIN
// RUN: sed -e 's/top_k = 8 : i64, renormalize/top_k = 8 : i64, renormalize, n_group = 8 : i64, topk_group = 4 : i64/; s/top_k = 6 : i64, routed_scaling_factor = 1.0 : f64/top_k = 6 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 2 : i64/' %s | k3-opt --k3-select-kernel-config="target=cuda override=moe_router.kernel=moe_router_rows" --k3-outline-kernels -o %t.g.mlir
// RUN: grep -c "gpu.shuffle  xor" %t.g.mlir | FileCheck %s --check-prefix=GROUPED
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.g.mlir > %t.g.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.g.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.g.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.g.bin.mlir > %t.g.ptx
// RUN: %ptxas -v -arch=sm_90a %t.g.ptx -o %t.g.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// PLAIN: {{^}}300{{$}}
// GROUPED: {{^}}420{{$}}
// CHECK-LABEL: gpu.func @moe_router_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_router_rows, tile = [8], warps = 8>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 7, grid_divisor = 8, block = [256, 1, 1], dynamic_smem = 45056>
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<589824xbf16>, vector<8xbf16>
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<18432xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK-COUNT-40: gpu.shuffle  xor
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: math.exp
// CHECK-COUNT-15: gpu.shuffle  xor
// CHECK-LABEL: gpu.func @moe_router_1(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_router_rows, tile = [8], warps = 8>
// CHECK-SAME: dynamic_smem = 7680

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

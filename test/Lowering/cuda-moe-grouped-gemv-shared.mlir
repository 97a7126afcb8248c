// REQUIRES: ptxas
// The shared expert in the grouped decode launches (k3-fuse-shared-expert,
// lowering/cuda/MoEGroupedGEMV.cpp): a Kimi-Linear-style MoE layer, 8 bf16
// experts top-2 plus one shared expert of the same width (D 256, I 128),
// its output added to the combine.
// - The pass leaves one k3.moe_grouped_glu and one k3.moe_grouped_down
//   with `shared(...)` weights and [T, 3, ...] rows; no k3.glu_gate_up,
//   k3.linear or k3.add remains: three launches fewer per layer.
// - Each grid grows from T K to T (K + 1) row tiles: ceil(T / 4) shared
//   tiles of 4 tokens first (blocks start in index order), then the
//   routed tiles. The branch between them is
//   block-uniform: a routed tile finds its expert by the binary search,
//   a shared one reads the 2-D shared weight.
// The CUDA-core form (tile [4, 4], an override: bf16 operands default to
// the tensor-core form, cuda-moe-grouped-gemv-mma.mlir).
// RUN: k3-opt %s --k3-moe-grouped --k3-split-glu-mlp --k3-fuse-shared-expert --k3-select-kernel-config="target=cuda override=moe_grouped_gemv.tile=4x4,moe_grouped_gemv.warps=4" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-moe-grouped --k3-split-glu-mlp --k3-fuse-shared-expert --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.moe_grouped_glu {{.*}} shared({{.*}}) {k3.kernel_config = #k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 8], warps = 8, blocks_per_sm = 2>}
// CONFIG-SAME: -> tensor<?x3x128xbf16>
// CONFIG: k3.moe_grouped_down {{.*}} shared({{.*}}) {k3.kernel_config = #k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4, 4], warps = 4, blocks_per_sm = 4>}
// CONFIG-SAME: -> tensor<?x3x256xbf16>
// CONFIG: k3.moe_combine {{.*}} : (tensor<?x3x256xbf16>, tensor<?x2xi32>) -> tensor<?x256xbf16>
// CONFIG-NOT: k3.glu_gate_up
// CONFIG-NOT: k3.add

// Gate/up: T (K + 1) = 3 T row tiles x 128 / (4 warps x 4 rows) groups;
// the shared branch reads the 2-D weight, the routed one the stacked
// weights; both gather 16-byte vectors of x.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 24, grid_offset = 0, grid_divisor = 1, block = [128, 1, 1]>
// CHECK: scf.if
// CHECK: vector.load {{.*}} : memref<128x256xbf16>, vector<8xbf16>
// CHECK: scf.if
// CHECK: vector.load {{.*}} : memref<8x128x256xbf16>, vector<8xbf16>
// Down: 3 T row tiles x 256 / 16 groups; bf16 rows T K + t, weight one.
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 48, grid_offset = 0, grid_divisor = 1, block = [128, 1, 1]>
// CHECK: vector.load {{.*}} : memref<256x128xbf16>, vector<8xbf16>
// CHECK: vector.load {{.*}} : memref<8x256x128xbf16>, vector<8xbf16>
// CHECK: memref.store {{.*}} : memref<?x256xbf16>

// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) attributes {k3.decode} {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %r = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  %sg = k3.weight "shared_gate" : tensor<128x256xbf16>
  %su = k3.weight "shared_up" : tensor<128x256xbf16>
  %sd = k3.weight "shared_down" : tensor<256x128xbf16>
  %s = k3.glu_mlp silu %x, %sg, %su, %sd
      : (tensor<?x256xbf16>, tensor<128x256xbf16>, tensor<128x256xbf16>, tensor<256x128xbf16>) -> tensor<?x256xbf16>
  %y = k3.add %r, %s : tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

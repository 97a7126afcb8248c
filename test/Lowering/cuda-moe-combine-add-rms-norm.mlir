// REQUIRES: ptxas
// k3.moe_combine_add_rms_norm on CUDA (kernel moe_combine_rows,
// lowering/cuda/MoECombineRows.cpp): the combine's block per token, one
// 16-byte vector of the row a thread, then the residual add stored as the
// sum, a block sum of squares (warp shuffles, then the warps' sums in
// shared memory behind one barrier) and the normalised row from registers.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=moe_combine_add_rms_norm.tile=16" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx

// BADTILE: error: 'k3.moe_combine_add_rms_norm' op moe_combine_rows tile is [V], V channels a thread dividing 8

// bf16 rows of 2304 channels, the shared expert's rows and an addend: 9
// warps, one vector a thread; the loads (8 rows, the addend, the residual
// stream, the weight) before the sum's store, the block sum, then the
// normalised row's store.
// CHECK-LABEL: gpu.func @moe_combine_add_rms_norm_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_combine_rows, tile = [8], warps = 9>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [288, 1, 1]>
// CHECK-COUNT-12: vector.load {{.*}} vector<8xbf16>
// CHECK: vector.store {{.*}} vector<8xbf16>
// CHECK: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK: math.sqrt
// CHECK: vector.store {{.*}} vector<8xbf16>
// f32 rows of 1000 channels: 250 vectors of 4 on 8 warps; the idle
// threads' clamped chunk adds 0 to the sum and is not stored.
// CHECK-LABEL: gpu.func @moe_combine_add_rms_norm_1(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = moe_combine_rows, tile = [4], warps = 8>
// CHECK: arith.select
// CHECK: scf.if
// CHECK: vector.store {{.*}} vector<4xf32>
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: vector.store {{.*}} vector<4xf32>

// PTX: bar.sync
// PTX: st.global.v4.b32

func.func @forward(
    %rows: tensor<?x9x2304xbf16> {k3.name = "rows", k3.dims = array<i64: -1, 9, 2304>},
    %pos: tensor<?x8xi32> {k3.name = "pos", k3.dims = array<i64: -1, 8>},
    %add: tensor<?x2304xbf16> {k3.name = "add", k3.dims = array<i64: -1, 2304>},
    %x: tensor<?x2304xbf16> {k3.name = "x", k3.dims = array<i64: -1, 2304>},
    %rowsf: tensor<?x2x1000xf32> {k3.name = "rowsf", k3.dims = array<i64: -1, 2, 1000>},
    %posf: tensor<?x2xi32> {k3.name = "posf", k3.dims = array<i64: -1, 2>},
    %xf: tensor<?x1000xf32> {k3.name = "xf", k3.dims = array<i64: -1, 1000>})
    -> (tensor<?x2304xbf16> {k3.name = "h"}, tensor<?x2304xbf16> {k3.name = "y"},
        tensor<?x1000xf32> {k3.name = "hf"}, tensor<?x1000xf32> {k3.name = "yf"}) {
  %w = k3.weight "w" : tensor<2304xbf16>
  %wf = k3.weight "wf" : tensor<1000xf32>
  %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w addend(%add) {epsilon = 1.0e-5 : f64}
      : (tensor<?x9x2304xbf16>, tensor<?x8xi32>, tensor<?x2304xbf16>, tensor<2304xbf16>, tensor<?x2304xbf16>) -> (tensor<?x2304xbf16>, tensor<?x2304xbf16>)
  %hf, %yf = k3.moe_combine_add_rms_norm %rowsf, %posf, %xf, %wf {epsilon = 1.0e-6 : f64}
      : (tensor<?x2x1000xf32>, tensor<?x2xi32>, tensor<?x1000xf32>, tensor<1000xf32>) -> (tensor<?x1000xf32>, tensor<?x1000xf32>)
  return %h, %y, %hf, %yf : tensor<?x2304xbf16>, tensor<?x2304xbf16>, tensor<?x1000xf32>, tensor<?x1000xf32>
}

// REQUIRES: ptxas
// The recurrent k3.kda at one staged token (tile S = 1, a decode entry's
// choice) takes the form without staging (lowering/cuda/KDARecurrentTokens.cpp):
// each lane loads its own contiguous rows of q, k and g in 16-byte vectors;
// the lanes of a warp are column-major (8 groups of 4 columns side by side,
// 4 row lanes), so the rows' sums go over the warp by shuffles and, with
// 8 row lanes in two warps, through one shared-memory exchange and one
// barrier a token.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=kda.tile=32x8x1x4" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// With 16 columns (4 groups, 8 row lanes: one warp) nothing is shared and
// nothing waits.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=kda.tile=16x8x1x4" --k3-outline-kernels | FileCheck %s --check-prefix=ONE-WARP
// Its PTX (the device pipeline of CompileCUDA.cpp, format=isa) keeps the
// column in registers: ptxas reports no spills.
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// (lit drops CUDA_HOME, which gpu-module-to-binary needs for libdevice: it
// is set from ptxas's place.)
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// A bf16 state (kda-state-dtype=bf16): the same kernel, each lane's four
// columns of a row in one 8-byte load and store, widened to f32 and
// rounded once, at the end.
// RUN: sed -e 's/128x128xf32/128x128xbf16/g' %s | k3-opt --k3-select-kernel-config="target=cuda override=kda.tile=32x8x1x4" --k3-outline-kernels | FileCheck %s --check-prefix=BF16STATE
// BF16STATE-LABEL: gpu.func @kda_0(
// BF16STATE: vector.load {{.*}} {alignment = 8 : i64} : memref<?x4x128x128xbf16>, vector<4xbf16>
// BF16STATE: arith.extf
// BF16STATE: scf.for
// BF16STATE: arith.truncf {{.*}} : f32 to bf16
// BF16STATE: vector.store {{.*}} {alignment = 8 : i64} : memref<?x4x128x128xbf16>, vector<4xbf16>


// CHECK-LABEL: gpu.func @kda_0(
// CHECK-SAME: workgroup(%{{.*}} : memref<352xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 1, 4], warps = 2>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 16, grid_offset = 0, grid_divisor = 1, block = [64, 1, 1]
// CHECK: gpu.thread_id x
// CHECK: gpu.block_id x
// The state first, then the token loop: the lane's 16 rows of q (bf16) in
// two 16-byte vectors.
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?x4x128x128xf32>, vector<4xf32>
// CHECK: scf.for
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<1x?x4x128xbf16{{.*}}>, vector<8xbf16>
// CHECK: gpu.shuffle xor {{.*}}, %c8_i32, %c32_i32
// CHECK: gpu.shuffle xor {{.*}}, %c16_i32, %c32_i32
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: vector.store {{.*}} {alignment = 8 : i64} : memref<1x?x4x128xbf16{{.*}}>, vector<4xbf16>
// CHECK: scf.yield
// CHECK: vector.store {{.*}} {alignment = 16 : i64} : memref<?x4x128x128xf32>, vector<4xf32>
// CHECK-NOT: gpu.func @kda_0__1

// ONE-WARP-LABEL: gpu.func @kda_0(
// ONE-WARP-NOT: workgroup(
// ONE-WARP-SAME: block = [32, 1, 1]
// ONE-WARP-NOT: gpu.barrier
// ONE-WARP: gpu.shuffle xor {{.*}}, %c4_i32, %c32_i32
// ONE-WARP-NOT: gpu.barrier
// ONE-WARP: gpu.return

// PTX: .shared .align 16 .b8 __wg_kda_0
// PTX: ld.global.v4.{{[bf]}}32
// PTX: shfl.sync.bfly.b32
// PTX: bar.sync
// PTX: st.global.v4.{{[bf]}}32
// PTX-NOT: ld.local
// PTX-NOT: st.local

// PTXAS: Compiling entry function 'kda_0' for 'sm_90a'
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %q: tensor<1x?x4x128xbf16> {k3.name = "q", k3.dims = array<i64: 1, -1, 4, 128>},
    %k: tensor<1x?x4x128xbf16> {k3.name = "k", k3.dims = array<i64: 1, -1, 4, 128>},
    %v: tensor<1x?x4x128xbf16> {k3.name = "v", k3.dims = array<i64: 1, -1, 4, 128>},
    %g: tensor<1x?x4x128xbf16> {k3.name = "g", k3.dims = array<i64: 1, -1, 4, 128>},
    %beta: tensor<1x?x4xbf16> {k3.name = "beta", k3.dims = array<i64: 1, -1, 4>},
    %s0: tensor<?x4x128x128xf32> {k3.name = "initial_state", k3.dims = array<i64: -2, 4, 128, 128>},
    %alog: tensor<4xf32> {k3.name = "A_log"},
    %dtb: tensor<512xf32> {k3.name = "dt_bias"},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<1x?x4x128xbf16> {k3.name = "o"}, tensor<?x4x128x128xf32> {k3.name = "final_state"}) {
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, use_qk_l2norm, use_beta_sigmoid,
       gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>,
         tensor<1x?x4xbf16>, tensor<?x4x128x128xf32>, tensor<?xi32>, tensor<4xf32>, tensor<512xf32>)
      -> (tensor<1x?x4x128xbf16>, tensor<?x4x128x128xf32>)
  return %o, %s : tensor<1x?x4x128xbf16>, tensor<?x4x128x128xf32>
}

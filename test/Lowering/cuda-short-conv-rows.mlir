// REQUIRES: ptxas
// k3.short_conv with kernel = short_conv_rows (lowering/cuda/ShortConvRows.cpp):
// a block of 4 warps per (8 tokens, 512 channels), 4 channels a thread
// (tile [8, 4]), so 8 channel blocks at 4096 channels: grid
// ceil((8 T + 63) / 8); each thread walks its tile's tokens (unrolled: the
// 8 inputs and the 3 before the tile loaded first, one 8-byte vector
// each) with the last 3 inputs of each channel in registers, the sequence
// advanced by a while loop when a token passes its end, silu at the store
// (one ex2 and one rcp of the special-function unit; one vector a token),
// and the final state at a sequence's last token. tile [16] keeps a
// channel a thread (ONE).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: FileCheck %s --check-prefix=LAUNCH --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=short_conv.tile=2000" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=short_conv.tile=16x3" 2>&1 | FileCheck %s --check-prefix=BADVEC
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=short_conv.tile=16,short_conv.warps=8" --k3-outline-kernels | FileCheck %s --check-prefix=ONE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// BADTILE: error: 'k3.short_conv' op short_conv_rows tile is [TT] or [TT, V], TT tokens per block in [1, 1024]
// BADVEC: error: 'k3.short_conv' op short_conv_rows V (channels a thread) must be 1, 2, 4 or 8 and divide the channels, got 3

// CHECK-LABEL: gpu.func @short_conv_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = short_conv_rows, tile = [8, 4], warps = 4, blocks_per_sm = 5>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 8, grid_offset = 63, grid_divisor = 8, block = [128, 1, 1]>
// CHECK-COUNT-4: vector.load {{.*}} {alignment = 16 : i64} : memref<16384xf32>, vector<4xf32>
// CHECK-COUNT-11: vector.load {{.*}} {alignment = 8 : i64} : memref<?x4096xbf16>, vector<4xbf16>
// A tile inside one sequence and past its first 3 tokens runs a
// straight-line copy of the walk (8 stores, no bounds or state); the
// others the general walk.
// CHECK: arith.subi %{{.*}}, %c3{{.*}} : index
// CHECK-NEXT: arith.cmpi sge
// CHECK-NEXT: %[[INSIDE:.*]] = arith.andi
// CHECK-NEXT: scf.if %[[INSIDE]] {
// CHECK-NOT: scf.if
// CHECK-COUNT-8: vector.store {{.*}} {alignment = 8 : i64} : memref<?x4096xbf16>, vector<4xbf16>
// CHECK-NEXT: } else {
// CHECK: scf.while
// CHECK: math.exp2
// CHECK: k3gpu.rcp_approx
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xbf16>
// CHECK: vector.store {{.*}} {alignment = 8 : i64} : memref<?x4096xbf16>, vector<4xbf16>
// CHECK: scf.yield
// ONE-LABEL: gpu.func @short_conv_0(
// ONE-SAME: tile = [16], warps = 8
// ONE-SAME: grid_scale = 16, grid_offset = 255, grid_divisor = 16, block = [256, 1, 1]
// ONE-COUNT-4: memref.load {{.*}} : memref<?x?x?xf32
// ONE-COUNT-16: memref.load {{.*}} : memref<?x?xbf16
// ONE-NOT: vector.load
// ONE: gpu.return

// ptxas reports the kernels last first.
// PTXAS: Function properties for short_conv_group_
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for short_conv_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for short_conv_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(%x: tensor<?x4096xbf16> {k3.name = "x", k3.dims = array<i64: -1, 4096>},
    %s: tensor<?x4096x3xf32> {k3.name = "s", k3.dims = array<i64: -2, 4096, 3>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x4096xbf16> {k3.name = "y"}, tensor<?x4096x3xf32> {k3.name = "fs"}) {
  %w = k3.weight "w" : tensor<4096x1x4xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x4096xbf16>, tensor<4096x1x4xf32>, tensor<?x4096x3xf32>, tensor<?xi32>)
      -> (tensor<?x4096xbf16>, tensor<?x4096x3xf32>)
  return %y, %fs : tensor<?x4096xbf16>, tensor<?x4096x3xf32>
}

// The decode entry, where the state is updated in place: a thread per
// (sequence, channel), grid max-seqs x 16 channel blocks; the bounds, the 4
// weights and the 3 carried inputs load independently, then the token's
// input, and no search of cu_seqlens.
// CHECK-LABEL: gpu.func @short_conv_1(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 16, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]>
// CHECK-NOT: scf.while
// CHECK-COUNT-2: memref.load {{.*}} : memref<?xi32
// CHECK-COUNT-4: memref.load {{.*}} : memref<?x?x?xf32
// CHECK-COUNT-3: memref.load {{.*}} : memref<?x?x?xf32
// CHECK: scf.if
// CHECK-NEXT: memref.load {{.*}} : memref<?x?xbf16
// CHECK: math.exp2
// CHECK-COUNT-3: memref.store {{.*}} : memref<?x?x?xf32
// CHECK: gpu.return

// k3.short_conv_group in the decode entry (k3-group-short-convs): the
// members' channel blocks end to end (16 + 2 at 4096 and 512 channels),
// each member's decode form under its block range; the final states in
// place (no copy launch).
// LAUNCH: k3.launch @k3_kernels::@short_conv_group_3(
// LAUNCH-NOT: @copy
// LAUNCH: return
// CHECK-LABEL: gpu.func @short_conv_group_3(
// CHECK-SAME: k3.state_in_place
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 18, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]>
// CHECK: arith.divui %{{.*}}, %c18
// CHECK: arith.cmpi slt, %{{.*}}, %c16
// CHECK: math.exp2
// CHECK: arith.cmpi slt, %{{.*}}, %c18
// CHECK: math.exp2
// CHECK: gpu.return

func.func @forward_decode(%x: tensor<?x4096xbf16> {k3.name = "x", k3.dims = array<i64: -1, 4096>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x4096xbf16> {k3.name = "y"}, tensor<?x512xbf16> {k3.name = "yv"}) attributes {k3.decode} {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x4096xbf16>
  %w = k3.weight "w" : tensor<4096x1x4xf32>
  %s = k3.state.read "conv_state" : tensor<?x4096x3xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x4096xbf16>, tensor<4096x1x4xf32>, tensor<?x4096x3xf32>, tensor<?xi32>)
      -> (tensor<?x4096xbf16>, tensor<?x4096x3xf32>)
  k3.state.write "conv_state", %fs : tensor<?x4096x3xf32>
  %wk = k3.weight "wk" : tensor<4096x1x4xf32>
  %wv = k3.weight "wv" : tensor<512x1x4xf32>
  %sk = k3.state.read "k_state" : tensor<?x4096x3xf32>
  %sv = k3.state.read "v_state" : tensor<?x512x3xf32>
  %xv = tensor.extract_slice %x[0, 0] [%n, 512] [1, 1] : tensor<?x4096xbf16> to tensor<?x512xbf16>
  %r:2, %f:2 = k3.short_conv_group(%y, %xv) weights(%wk, %wv) state(%sk, %sv) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x4096xbf16>, tensor<?x512xbf16>, tensor<4096x1x4xf32>, tensor<512x1x4xf32>, tensor<?x4096x3xf32>, tensor<?x512x3xf32>, tensor<?xi32>)
      -> (tensor<?x4096xbf16>, tensor<?x512xbf16>, tensor<?x4096x3xf32>, tensor<?x512x3xf32>)
  k3.state.write "k_state", %f#0 : tensor<?x4096x3xf32>
  k3.state.write "v_state", %f#1 : tensor<?x512x3xf32>
  return %r#0, %r#1 : tensor<?x4096xbf16>, tensor<?x512xbf16>
}

// Kernel workspace (lowering/KernelPatterns.h): the loop nests of the MLP,
// the MoE experts and the router run in two phases parallel over all their
// outputs, passing the activated channels (scores) through a workspace
// that is an extra result of the launch, planned like an activation.
// RUN: k3-opt %s --k3-outline-kernels | FileCheck %s
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels | FileCheck %s --check-prefix=GPU
// RUN: k3-opt %s --k3-outline-kernels --k3-plan-memory | FileCheck %s --check-prefix=PLAN

// The launches yield the op's results, then the workspace.
// CHECK-LABEL: func.func @forward
// CHECK: %[[IDX:.*]]:3 = k3.launch @k3_kernels::@moe_router_0({{.*}}) {{.*}} -> (tensor<?x2xi32>, tensor<?x2xf32>, tensor<?x8xf32>)
// CHECK: %[[E:.*]]:2 = k3.launch @k3_kernels::@moe_experts_1(%{{.*}}, %[[IDX]]#0, %[[IDX]]#1, {{.*}}) {{.*}} -> (tensor<?x64xf32>, tensor<?x2x16xf32>)
// CHECK: %[[S:.*]]:2 = k3.launch @k3_kernels::@glu_mlp_2({{.*}}) {{.*}} -> (tensor<?x64xf32>, tensor<?x96xf32>)
// CHECK: return %[[E]]#0, %[[S]]#0
// Phase 1 over (token, expert slot, channel), phase 2 over (token, output).
// CHECK-LABEL: func.func @moe_experts_1(
// CHECK-SAME: %{{.*}}: memref<f32> {k3.dims = array<i64: -1, 2, 16>}
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) =
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) =

// On the GPU each phase is a kernel with its own grid; an iteration (one
// output's dot product) takes a warp, whose lanes split the sum: 32 threads
// per (token, slot, channel) and per (token, hidden channel).
// GPU-LABEL: gpu.func @moe_experts_1(
// GPU-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1024, grid_offset = 0, grid_divisor = 256, block = [256, 1, 1]>
// GPU-SAME: k3.phases = [@moe_experts_1, @moe_experts_1__1]
// GPU-LABEL: gpu.func @moe_experts_1__1(
// GPU-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 2048, grid_offset = 0, grid_divisor = 256, block = [256, 1, 1]>
// GPU: gpu.lane_id
// GPU: scf.for {{.*}} step %c32
// GPU-COUNT-5: gpu.shuffle  xor

// PLAN: k3.launch @k3_kernels::@moe_router_0{{.*}}k3.buffer = [{{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}]

func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %x: tensor<?x64xf32> {k3.name = "x", k3.dims = array<i64: -1, 64>})
    -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %wr = k3.weight "router" : tensor<8x64xbf16>
  %idx, %w = k3.moe_router sigmoid %x, %wr {routed_scaling_factor = 1.0 : f64, top_k = 2 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %w1 = k3.weight "w1" : tensor<8x16x64xbf16>
  %w2 = k3.weight "w2" : tensor<8x64x16xbf16>
  %r = k3.moe_experts silu %x, %idx, %w, %w1, %w1, %w2
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x64xbf16>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>) -> tensor<?x64xf32>
  %wg = k3.weight "wg" : tensor<96x64xbf16>
  %wd = k3.weight "wd" : tensor<64x96xbf16>
  %s = k3.glu_mlp silu %x, %wg, %wg, %wd : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return %r, %s : tensor<?x64xf32>, tensor<?x64xf32>
}

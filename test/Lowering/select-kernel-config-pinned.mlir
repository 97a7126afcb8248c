// k3-select-kernel-config keeps a config written on an op (pinned) but
// checks it like any other.
// RUN: k3-opt %s --split-input-file --verify-diagnostics --k3-select-kernel-config

func.func @pinned_kept(%x: tensor<?x96xf32>) -> tensor<?x96xf32> {
  %wn = k3.weight "norm" : tensor<96xf32>
  %y = k3.rms_norm %x, %wn {epsilon = 1.0e-6 : f64, k3.kernel_config = #k3.kernel_config<kernel = loop_nest, warps = 2>} : (tensor<?x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  return %y : tensor<?x96xf32>
}

// -----

func.func @gpu_kernel_on_cpu(%x: tensor<?x96xf32>) -> tensor<?x96xf32> {
  %wn = k3.weight "norm" : tensor<96xf32>
  // expected-error @below {{kernel kda_mma_chain exists only for GPU targets}}
  %y = k3.rms_norm %x, %wn {epsilon = 1.0e-6 : f64, k3.kernel_config = #k3.kernel_config<kernel = kda_mma_chain, warps = 2>} : (tensor<?x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  return %y : tensor<?x96xf32>
}

// -----

module attributes {k3.target = #k3.gpu_target<chip = "sm_90a">} {
func.func @wrong_op(%x: tensor<?x96xf32>) -> tensor<?x96xf32> {
  %wn = k3.weight "norm" : tensor<96xf32>
  // expected-error @below {{cannot be lowered by kernel kda_recurrent}}
  %y = k3.rms_norm %x, %wn {epsilon = 1.0e-6 : f64, k3.kernel_config = #k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2>} : (tensor<?x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  return %y : tensor<?x96xf32>
}
}

// -----

// A target written in the module keeps its limits: the chain's block of 8
// warps (128 value columns) needs, in 3 stages, more shared memory than
// this target has.
module attributes {k3.target = #k3.gpu_target<chip = "sm_90a", sm_count = 8, smem_per_block = 20000>} {
func.func @small_smem(%p: tensor<1x?x2x336xi32>, %v: tensor<1x?x2x128xbf16>, %cu: tensor<?xi32>)
    -> (tensor<1x?x2x128xbf16>, tensor<?x2x128x128xf32>) {
  // expected-error @below {{kda_mma_chain needs 55296 bytes of shared memory, the target has 20000}}
  %o, %s = k3.kda_mma_recurrence %p, %v cu_seqlens(%cu)
      : (tensor<1x?x2x336xi32>, tensor<1x?x2x128xbf16>, tensor<?xi32>)
      -> (tensor<1x?x2x128xbf16>, tensor<?x2x128x128xf32>)
  return %o, %s : tensor<1x?x2x128xbf16>, tensor<?x2x128x128xf32>
}
}

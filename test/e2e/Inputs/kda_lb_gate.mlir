// KDA core with the in-op lower-bounded sigmoid gate (-5): tile-factored form.
// Kernel-level model for test_kda_chunkwise.py: the KDA core alone, all
// operands inputs (k3.dims gives their symbolic shapes: -1 = T, -2 = N).
// H = 2, K = 16, V = 32; q, k L2-normalised in-op, beta a logit.
func.func @forward(
    %q: tensor<1x?x2x16xf32> {k3.name = "q", k3.dims = array<i64: 1, -1, 2, 16>},
    %k: tensor<1x?x2x16xf32> {k3.name = "k", k3.dims = array<i64: 1, -1, 2, 16>},
    %v: tensor<1x?x2x32xf32> {k3.name = "v", k3.dims = array<i64: 1, -1, 2, 32>},
    %g: tensor<1x?x2x16xf32> {k3.name = "g", k3.dims = array<i64: 1, -1, 2, 16>},
    %beta: tensor<1x?x2xf32> {k3.name = "beta", k3.dims = array<i64: 1, -1, 2>},
    %s0: tensor<?x2x16x32xf32> {k3.name = "initial_state", k3.dims = array<i64: -2, 2, 16, 32>},
    %alog: tensor<2xf32> {k3.name = "A_log"},
    %dtb: tensor<32xf32> {k3.name = "dt_bias"},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<1x?x2x32xf32> {k3.name = "o"}, tensor<?x2x16x32xf32> {k3.name = "final_state"}) {
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.25 : f64, use_qk_l2norm, use_beta_sigmoid, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x32xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2xf32>, tensor<?x2x16x32xf32>, tensor<?xi32>, tensor<2xf32>, tensor<32xf32>) -> (tensor<1x?x2x32xf32>, tensor<?x2x16x32xf32>)
  return %o, %s : tensor<1x?x2x32xf32>, tensor<?x2x16x32xf32>
}

// The seed's worked example (§7.4): one head, K = V = 1, no decay, no
// normalisation, beta given directly. Kernel-level model for
// test_seed_examples.py.
func.func @forward(
    %q: tensor<1x?x1x1xf32> {k3.name = "q", k3.dims = array<i64: 1, -1, 1, 1>},
    %k: tensor<1x?x1x1xf32> {k3.name = "k", k3.dims = array<i64: 1, -1, 1, 1>},
    %v: tensor<1x?x1x1xf32> {k3.name = "v", k3.dims = array<i64: 1, -1, 1, 1>},
    %g: tensor<1x?x1x1xf32> {k3.name = "g", k3.dims = array<i64: 1, -1, 1, 1>},
    %beta: tensor<1x?x1xf32> {k3.name = "beta", k3.dims = array<i64: 1, -1, 1>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<1x?x1x1xf32> {k3.name = "o"}, tensor<?x1x1x1xf32> {k3.name = "final_state"}) {
  %o, %s = k3.kda %q, %k, %v, %g, %beta cu_seqlens(%cu) {scale = 1.0 : f64}
      : (tensor<1x?x1x1xf32>, tensor<1x?x1x1xf32>, tensor<1x?x1x1xf32>, tensor<1x?x1x1xf32>, tensor<1x?x1xf32>, tensor<?xi32>)
      -> (tensor<1x?x1x1xf32>, tensor<?x1x1x1xf32>)
  return %o, %s : tensor<1x?x1x1xf32>, tensor<?x1x1x1xf32>
}

// RUN: k3-opt %s -split-input-file --k3-mla-expand | FileCheck %s

// A prefill's latent attention becomes the kv_b expansion GEMM over c_kv
// (the latent's first R columns), the expanded attention with the output
// gate fused, and the cache append; the context lengths (an entry input)
// are bounded to zero, with the reason.

// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[CTX:[^:]*]]: tensor<?xi32> {k3.max_value = 0 : i64, k3.max_value_reason = "{{.*}}decode entry", k3.name = "context_lens"}
// CHECK-NOT:     k3.latent_attention
// CHECK:         %[[CKV:.*]] = tensor.extract_slice %[[LAT:[a-z0-9]+]][0, 0] [%{{.*}}, 16] [1, 1] : tensor<?x24xbf16> to tensor<?x16xbf16>
// CHECK:         %[[FLAT:.*]] = k3.linear %[[CKV]], %[[KVB:[^ ]*]] : (tensor<?x16xbf16>, tensor<64x16xbf16>) -> tensor<?x64xbf16>
// CHECK:         %[[KV:.*]] = tensor.expand_shape %[[FLAT]] {{\[}}[0], [1, 2]] output_shape [%{{.*}}, 2, 32] : tensor<?x64xbf16> into tensor<?x2x32xbf16>
// CHECK:         %[[C1:.*]] = k3.latent_cache_append %[[C:[^,]*]], %[[CTX]], %[[LAT]] cu_seqlens(%[[CU:[^)]*]])
// CHECK:         k3.state.write "latent_cache", %[[C1]]
// CHECK:         %[[O:.*]] = k3.mla_prefill_attention %[[Q:[^,]*]], %[[KV]], %[[LAT]] gate(%[[G:[^)]*]]) cu_seqlens(%[[CU]]) {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, scale = 2.500000e-01 : f64, v_head_dim = 16 : i64}
// CHECK:         %[[Y:.*]] = tensor.collapse_shape %[[O]] {{\[}}[0], [1, 2]] : tensor<?x2x16xbf16> into tensor<?x32xbf16>
// CHECK-NOT:     k3.sigmoid_gate
// CHECK:         return %[[Y]]
func.func @forward(%q: tensor<?x2x24xbf16> {k3.name = "q"}, %lat: tensor<?x24xbf16> {k3.name = "latent"},
                   %g: tensor<?x32xbf16> {k3.name = "gate"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens"}) -> tensor<?x32xbf16> {
  %kvb = k3.weight "kv_b" : tensor<64x16xbf16>
  %c = k3.state.read "latent_cache" : tensor<?x128x24xbf16>
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %ctx) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xbf16>, tensor<?x24xbf16>, tensor<64x16xbf16>, tensor<?x128x24xbf16>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x2x16xbf16>, tensor<?x128x24xbf16>)
  k3.state.write "latent_cache", %c1 : tensor<?x128x24xbf16>
  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x16xbf16> into tensor<?x32xbf16>
  %y = k3.sigmoid_gate %o2, %g : (tensor<?x32xbf16>, tensor<?x32xbf16>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// A decode step keeps the latent form (one query per sequence reads each
// cached latent once), and its context lengths stay unbounded.

// CHECK-LABEL: func.func @forward_decode(
// CHECK-NOT:     k3.max_value
// CHECK:         k3.latent_attention
// CHECK-NOT:     k3.mla_prefill_attention
func.func @forward_decode(%q: tensor<?x2x24xbf16>, %lat: tensor<?x24xbf16>, %cu: tensor<?xi32>,
                          %ctx: tensor<?xi32> {k3.name = "context_lens"}) -> tensor<?x2x16xbf16> attributes {k3.decode} {
  %kvb = k3.weight "kv_b" : tensor<64x16xbf16>
  %c = k3.state.read "latent_cache" : tensor<?x128x24xbf16>
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %ctx) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xbf16>, tensor<?x24xbf16>, tensor<64x16xbf16>, tensor<?x128x24xbf16>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x2x16xbf16>, tensor<?x128x24xbf16>)
  k3.state.write "latent_cache", %c1 : tensor<?x128x24xbf16>
  return %o : tensor<?x2x16xbf16>
}

// -----

// Without a cache nothing needs a bound; an unfusable gate (the attention
// result has another use) stays a k3.sigmoid_gate.

// CHECK-LABEL: func.func @no_cache(
// CHECK:         %[[O:.*]] = k3.mla_prefill_attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {
// CHECK:         k3.sigmoid_gate
func.func @no_cache(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %g: tensor<?x32xf32>)
    -> (tensor<?x32xf32>, tensor<?x2x16xf32>) {
  %kvb = k3.weight "kv_b" : tensor<64x16xbf16>
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %y = k3.sigmoid_gate %o2, %g : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  return %y, %o : tensor<?x32xf32>, tensor<?x2x16xf32>
}

// -----

// Context lengths computed in the graph cannot be bounded at the entry:
// the latent form stays.

// CHECK-LABEL: func.func @computed_lens(
// CHECK:         k3.latent_attention
func.func @computed_lens(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %cu: tensor<?xi32>) -> tensor<?x2x16xf32> {
  %kvb = k3.weight "kv_b" : tensor<64x16xbf16>
  %c = k3.state.read "latent_cache" : tensor<?x128x24xf32>
  %ctx = tensor.extract_slice %cu[0] [1] [1] : tensor<?xi32> to tensor<1xi32>
  %ctxd = tensor.cast %ctx : tensor<1xi32> to tensor<?xi32>
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %ctxd) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  k3.state.write "latent_cache", %c1 : tensor<?x128x24xf32>
  return %o : tensor<?x2x16xf32>
}

// -----

// The gate's projection comes after the attention (as k3-import orders
// them): the fused attention moves down to the gate.

// CHECK-LABEL: func.func @gate_after(
// CHECK:         k3.linear
// CHECK:         %[[G:.*]] = k3.linear %{{.*}}, %{{.*}} : (tensor<?x8xf32>, tensor<32x8xbf16>)
// CHECK:         k3.mla_prefill_attention {{.*}} gate(%[[G]])
func.func @gate_after(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %x: tensor<?x8xf32>) -> tensor<?x32xf32> {
  %kvb = k3.weight "kv_b" : tensor<64x16xbf16>
  %wg = k3.weight "g" : tensor<32x8xbf16>
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %g = k3.linear %x, %wg : (tensor<?x8xf32>, tensor<32x8xbf16>) -> tensor<?x32xf32>
  %y = k3.sigmoid_gate %o2, %g : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// RUN: k3-opt %s --k3-activation-precision 2>&1 | FileCheck %s
// RUN: k3-opt %s --k3-activation-precision=activation-dtype=f32 2>&1 | FileCheck %s --check-prefix=F32
// RUN: not k3-opt %s --k3-activation-precision=activation-dtype=f16 2>&1 | FileCheck %s --check-prefix=BAD

// With k3.activation_dtype = bf16 the activations between kernels become
// bf16; decode state, the router's weights and the logits stay f32.
// CHECK-LABEL: func.func @layer
// CHECK-SAME:    -> tensor<?x16xf32>
// CHECK:         k3.embedding {{.*}} -> tensor<?x8xbf16>
// CHECK:         k3.add_rms_norm {{.*}} -> (tensor<?x8xbf16>, tensor<?x8xbf16>)
// CHECK:         k3.short_conv {{.*}} -> (tensor<?x8xbf16>, tensor<?x8x3xf32>)
// CHECK:         k3.state.write "conv", %{{.*}} : tensor<?x8x3xf32>
// CHECK:         tensor.expand_shape {{.*}} into tensor<?x2x4xbf16>
// A collective keeps its operand's type: TP's partial sums travel in bf16.
// CHECK:         k3.all_reduce sum {{.*}} : (tensor<?x2x4xbf16>) -> tensor<?x2x4xbf16>
// CHECK:         k3.moe_router {{.*}} -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK:         k3.linear {{.*}} -> tensor<?x16xf32>
// activation-dtype=f32 overrides the module's policy: activations stay f32
// (weights keep their own types).
// F32: module attributes {k3.activation_dtype = #k3<activation_dtype f32>}
// F32-LABEL: func.func @layer
// F32-NOT:     -> tensor<?x8xbf16>
// F32:         return
// BAD: error: k3-activation-precision: activation-dtype must be f32 or bf16, got 'f16'
module attributes {k3.activation_dtype = #k3<activation_dtype bf16>} {
func.func @layer(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> tensor<?x16xf32> {
  %c0 = arith.constant 0 : index
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "norm" : tensor<8xbf16>
  %h, %y = k3.add_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8xbf16>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  %cw = k3.weight "conv.weight" : tensor<8x1x4xf32>
  %s = k3.state.read "conv" : tensor<?x8x3xf32>
  %c, %s1 = k3.short_conv %y, %cw state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<?x8x3xf32>, tensor<?xi32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  k3.state.write "conv", %s1 : tensor<?x8x3xf32>
  %T = tensor.dim %c, %c0 : tensor<?x8xf32>
  %c3 = tensor.expand_shape %c [[0], [1, 2]] output_shape [%T, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
  %r3 = k3.all_reduce sum %c3 {group = "tp", group_size = 2 : i64} : (tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
  %rw = k3.weight "router" : tensor<4x8xbf16>
  %idx, %wts = k3.moe_router sigmoid %h, %rw {top_k = 2 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x8xf32>, tensor<4x8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %hw = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %h, %hw : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}

// The MLA latent cache stores bf16 latents: it becomes bf16, read and
// written back (the f32 cache held the same values in twice the bytes).
// CHECK-LABEL: func.func @mla
// CHECK:         k3.state.read "latent_cache" : tensor<?x4x12xbf16>
// CHECK:         k3.latent_attention {{.*}} -> (tensor<?x2x4xf32>, tensor<?x4x12xbf16>)
// CHECK:         k3.state.write "latent_cache", %{{.*}} : tensor<?x4x12xbf16>
// The last tokens' attention (k3-last-token-logits) reads the cache with
// the call's latents appended, which the state takes: both become bf16.
// CHECK-LABEL: func.func @mla_last_tokens
// CHECK:         k3.state.read "last_cache" : tensor<?x4x12xbf16>
// CHECK:         k3.latent_cache_append {{.*}} -> tensor<?x4x12xbf16>
// CHECK:         k3.latent_attention {{.*}} -> (tensor<?x2x4xf32>, tensor<?x4x12xbf16>)
// CHECK:         k3.state.write "last_cache", %{{.*}} : tensor<?x4x12xbf16>
// A cache state also written from an f32 input keeps f32 everywhere.
// CHECK-LABEL: func.func @mla_from_input
// CHECK:         k3.state.write "input_cache", %{{.*}} : tensor<?x4x12xf32>
// CHECK-LABEL: func.func @mla_reads_input_cache
// CHECK:         k3.state.read "input_cache" : tensor<?x4x12xf32>
// CHECK:         k3.latent_attention {{.*}} -> (tensor<?x2x4xf32>, tensor<?x4x12xf32>)
func.func @mla(%q: tensor<?x2x12xf32>, %lat: tensor<?x12xf32>, %lens: tensor<?xi32>,
               %cu: tensor<?xi32> {k3.name = "cu_seqlens"}) -> tensor<?x2x4xf32> {
  %kvb = k3.weight "kv_b" : tensor<24x8xbf16>
  %kvn = k3.weight "kv_norm" : tensor<12xbf16>
  %n = k3.rms_norm %lat, %kvn {epsilon = 1.0e-6 : f64} : (tensor<?x12xf32>, tensor<12xbf16>) -> tensor<?x12xf32>
  %cache = k3.state.read "latent_cache" : tensor<?x4x12xf32>
  %o, %c = k3.latent_attention %q, %n, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 4 : i64, kv_lora_rank = 8 : i64, scale = 0.25 : f64}
      : (tensor<?x2x12xf32>, tensor<?x12xf32>, tensor<24x8xbf16>, tensor<?x4x12xf32>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x4xf32>, tensor<?x4x12xf32>)
  k3.state.write "latent_cache", %c : tensor<?x4x12xf32>
  return %o : tensor<?x2x4xf32>
}
func.func @mla_last_tokens(%q: tensor<?x2x12xf32>, %lat: tensor<?x12xf32>, %lens: tensor<?xi32>,
                           %cu: tensor<?xi32> {k3.name = "cu_seqlens"}) -> tensor<?x2x4xf32> {
  %kvb = k3.weight "kv_b" : tensor<24x8xbf16>
  %kvn = k3.weight "kv_norm" : tensor<12xbf16>
  %n = k3.rms_norm %lat, %kvn {epsilon = 1.0e-6 : f64} : (tensor<?x12xf32>, tensor<12xbf16>) -> tensor<?x12xf32>
  %cache = k3.state.read "last_cache" : tensor<?x4x12xf32>
  %all = k3.latent_cache_append %cache, %lens, %n cu_seqlens(%cu)
      : (tensor<?x4x12xf32>, tensor<?xi32>, tensor<?x12xf32>, tensor<?xi32>) -> tensor<?x4x12xf32>
  %l, %c1 = k3.last_token_context %cu, %lens : (tensor<?xi32>, tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>)
  %nl = k3.last_tokens %n, %cu : (tensor<?x12xf32>, tensor<?xi32>) -> tensor<?x12xf32>
  %o, %c = k3.latent_attention %q, %nl, %kvb cache(%all, %l) cu_seqlens(%c1)
      {num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 4 : i64, kv_lora_rank = 8 : i64, scale = 0.25 : f64}
      : (tensor<?x2x12xf32>, tensor<?x12xf32>, tensor<24x8xbf16>, tensor<?x4x12xf32>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x4xf32>, tensor<?x4x12xf32>)
  k3.state.write "last_cache", %all : tensor<?x4x12xf32>
  return %o : tensor<?x2x4xf32>
}
func.func @mla_from_input(%c: tensor<?x4x12xf32>) {
  k3.state.write "input_cache", %c : tensor<?x4x12xf32>
  return
}
func.func @mla_reads_input_cache(%q: tensor<?x2x12xf32>, %lat: tensor<?x12xf32>, %lens: tensor<?xi32>,
               %cu: tensor<?xi32> {k3.name = "cu_seqlens"}) -> tensor<?x2x4xf32> {
  %kvb = k3.weight "kv_b" : tensor<24x8xbf16>
  %kvn = k3.weight "kv_norm" : tensor<12xbf16>
  %n = k3.rms_norm %lat, %kvn {epsilon = 1.0e-6 : f64} : (tensor<?x12xf32>, tensor<12xbf16>) -> tensor<?x12xf32>
  %cache = k3.state.read "input_cache" : tensor<?x4x12xf32>
  %o, %c = k3.latent_attention %q, %n, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 4 : i64, kv_lora_rank = 8 : i64, scale = 0.25 : f64}
      : (tensor<?x2x12xf32>, tensor<?x12xf32>, tensor<24x8xbf16>, tensor<?x4x12xf32>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x4xf32>, tensor<?x4x12xf32>)
  k3.state.write "input_cache", %c : tensor<?x4x12xf32>
  return %o : tensor<?x2x4xf32>
}
// Context-parallel (k3-partition-context): the rank's share of the cache,
// the all-reduce of the shares and the attention's cache all narrow.
// CHECK-LABEL: func.func @mla_context_parallel
// CHECK:         k3.state.read "cp_cache" : tensor<?x4x12xbf16>
// CHECK:         k3.latent_cache_segment {{.*}} -> tensor<?x4x12xbf16>
// CHECK:         k3.all_reduce sum {{.*}} -> tensor<?x4x12xbf16>
// CHECK:         k3.latent_attention {{.*}} -> (tensor<?x2x4xf32>, tensor<?x4x12xbf16>)
// CHECK:         k3.state.write "cp_cache", %{{.*}} : tensor<?x4x12xbf16>
func.func @mla_context_parallel(%q: tensor<?x2x12xf32>, %lat: tensor<?x12xf32>, %lens: tensor<?xi32>,
               %cu: tensor<?xi32> {k3.name = "cu_seqlens"}, %cus: tensor<2x?xi32>,
               %rank: tensor<1xi32>) -> tensor<?x2x4xf32> {
  %kvb = k3.weight "kv_b" : tensor<24x8xbf16>
  %kvn = k3.weight "kv_norm" : tensor<12xbf16>
  %n = k3.rms_norm %lat, %kvn {epsilon = 1.0e-6 : f64} : (tensor<?x12xf32>, tensor<12xbf16>) -> tensor<?x12xf32>
  %cache = k3.state.read "cp_cache" : tensor<?x4x12xf32>
  %at = k3.context_offsets %cus, %rank, %lens {group_size = 2 : i64}
      : (tensor<2x?xi32>, tensor<1xi32>, tensor<?xi32>) -> tensor<?xi32>
  %share = k3.latent_cache_segment %n, %cache, %cus, %rank, %lens {group_size = 2 : i64}
      : (tensor<?x12xf32>, tensor<?x4x12xf32>, tensor<2x?xi32>, tensor<1xi32>, tensor<?xi32>) -> tensor<?x4x12xf32>
  %full = k3.all_reduce sum %share {group = "cp", group_size = 2 : i64} : (tensor<?x4x12xf32>) -> tensor<?x4x12xf32>
  %o, %c = k3.latent_attention %q, %n, %kvb cache(%full, %at) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 4 : i64, kv_lora_rank = 8 : i64, scale = 0.25 : f64}
      : (tensor<?x2x12xf32>, tensor<?x12xf32>, tensor<24x8xbf16>, tensor<?x4x12xf32>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x4xf32>, tensor<?x4x12xf32>)
  k3.state.write "cp_cache", %c : tensor<?x4x12xf32>
  return %o : tensor<?x2x4xf32>
}
}

// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition-context=cp=2 | FileCheck %s
// RUN: not k3-opt %s -split-input-file --k3-partition-context=cp=65 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition-context="cp=2 experts=1 max-tokens=8 max-seqs=4" | FileCheck %s --check-prefix=EXP
// RUN: not k3-opt %s -split-input-file --k3-partition-context="cp=2 experts=1" 2>&1 | FileCheck %s --check-prefix=CAP
// RANGE: k3-partition-context: cp must be in [1, 64], got 65
// CAP: k3-partition-context: experts needs max-tokens

// The prefill entry over segments: the convolution runs from the folded
// incoming state (its segment's tail, gathered over cp with every rank's
// cu_seqlens), the KDA runs on [v | 0] from [0 | I], its
// final states are gathered and folded; the states written are the folds'
// finals. MLA attends from the rank's positions over the cache that the
// ranks' shares, summed, fill. The decode entry (another function) is left
// whole.

// CHECK-LABEL: func.func @forward
// CHECK-SAME:    %[[CU:[a-z0-9]+]]: tensor<?xi32> {k3.name = "cu_seqlens"}
// CHECK-SAME:    %[[RANK:[a-z0-9]+]]: tensor<1xi32> {k3.name = "k3.rank.cp"}
// CHECK:         %[[CU1:.*]] = tensor.expand_shape %[[CU]] {{\[\[}}0, 1]]
// CHECK:         %[[CUS:.*]] = k3.all_gather %[[CU1]] {dim = 0 : i64, group = "cp", group_size = 2 : i64} : (tensor<1x?xi32>) -> tensor<2x?xi32>
// CHECK:         %[[S0:.*]] = k3.state.read "conv"
// CHECK:         %[[TAIL:.*]] = k3.short_conv_tail %[[X:[a-z0-9_]+]] cu_seqlens(%[[CU]]) {kernel_size = 4 : i64}
// CHECK:         %[[TAIL1:.*]] = tensor.expand_shape %[[TAIL]]
// CHECK:         %[[TAILS:.*]] = k3.all_gather %[[TAIL1]] {dim = 0 : i64, group = "cp", group_size = 2 : i64} : (tensor<1x?x8x3xf32>) -> tensor<2x?x8x3xf32>
// CHECK:         %[[IN:.*]], %[[FIN:.*]] = k3.short_conv_context_fold %[[TAILS]], %[[CUS]], %[[RANK]] state(%[[S0]]) {group_size = 2 : i64}
// CHECK:         %[[Y:.*]], %{{.*}} = k3.short_conv %[[X]], %{{.*}} state(%[[IN]]) cu_seqlens(%[[CU]])
// CHECK:         k3.state.write "conv", %[[FIN]]
// CHECK:         %[[VX:.*]], %[[S0X:.*]] = k3.kda_context_inputs %{{.*}}, %[[CU]] {key_dim = 4 : i64}
// CHECK:         %[[SO:.*]], %[[SS:.*]] = k3.kda %{{.*}}, %{{.*}}, %[[VX]], %{{.*}}, %{{.*}} initial_state(%[[S0X]]) cu_seqlens(%[[CU]]) {scale = 2.500000e-01 : f64, use_qk_l2norm}
// CHECK-SAME:      -> (tensor<1x?x2x8xf32>, tensor<?x2x4x8xf32>)
// CHECK:         %[[SS1:.*]] = tensor.expand_shape %[[SS]]
// CHECK:         %[[ALL:.*]] = k3.all_gather %[[SS1]] {dim = 0 : i64, group = "cp", group_size = 2 : i64} : (tensor<1x?x2x4x8xf32>) -> tensor<2x?x2x4x8xf32>
// CHECK:         %[[O:.*]], %[[KF:.*]] = k3.kda_context_fold %[[SO]], %[[ALL]], %[[RANK]] initial_state(%{{.*}}) cu_seqlens(%[[CU]]) {group_size = 2 : i64}
// CHECK-SAME:      -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
// CHECK:         k3.state.write "kda", %[[KF]]
// CHECK:         %[[C:.*]] = k3.state.read "cache"
// CHECK:         %[[AT:.*]] = k3.context_offsets %[[CUS]], %[[RANK]], %[[CTX:[a-z0-9]+]] {group_size = 2 : i64}
// CHECK:         %[[SHARE:.*]] = k3.latent_cache_segment %[[LAT:[a-z0-9]+]], %[[C]], %[[CUS]], %[[RANK]], %[[CTX]] {group_size = 2 : i64}
// CHECK:         %[[FULL:.*]] = k3.all_reduce sum %[[SHARE]] {group = "cp", group_size = 2 : i64}
// CHECK:         k3.latent_attention %{{.*}}, %[[LAT]], %{{.*}} cache(%[[FULL]], %[[AT]]) cu_seqlens(%[[CU]])
// CHECK:         return
// CHECK-LABEL: func.func @other
// CHECK-NOT:     k3.all_gather
// CHECK:         k3.kda %

func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>,
                   %q: tensor<1x?x2x4xf32>, %k: tensor<1x?x2x4xf32>, %v: tensor<1x?x2x4xf32>,
                   %g: tensor<1x?x2x4xf32>, %b: tensor<1x?x2xf32>, %mq: tensor<?x2x12xf32>,
                   %lat: tensor<?x20xf32>, %kvb: tensor<32x16xbf16>,
                   %ctx: tensor<?xi32> {k3.name = "context_lens"}) -> (tensor<?x8xf32>, tensor<1x?x2x4xf32>, tensor<?x2x8xf32>) {
  %s = k3.state.read "conv" : tensor<?x8x3xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<?x8x3xf32>, tensor<?xi32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  k3.state.write "conv", %fs : tensor<?x8x3xf32>
  %h = k3.state.read "kda" : tensor<?x2x4x4xf32>
  %o, %hf = k3.kda %q, %k, %v, %g, %b initial_state(%h) cu_seqlens(%cu) {scale = 0.25 : f64, use_qk_l2norm}
      : (tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2xf32>,
         tensor<?x2x4x4xf32>, tensor<?xi32>) -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  k3.state.write "kda", %hf : tensor<?x2x4x4xf32>
  %c = k3.state.read "cache" : tensor<?x96x20xf32>
  %r, %co = k3.latent_attention %mq, %lat, %kvb cache(%c, %ctx) cu_seqlens(%cu) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64, scale = 0.25 : f64, v_head_dim = 8 : i64}
      : (tensor<?x2x12xf32>, tensor<?x20xf32>, tensor<32x16xbf16>, tensor<?x96x20xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x8xf32>, tensor<?x96x20xf32>)
  k3.state.write "cache", %co : tensor<?x96x20xf32>
  return %y, %o, %r : tensor<?x8xf32>, tensor<1x?x2x4xf32>, tensor<?x2x8xf32>
}
func.func @other(%cu: tensor<?xi32> {k3.name = "cu_seqlens"}, %q: tensor<1x?x2x4xf32>, %g: tensor<1x?x2x4xf32>,
                 %b: tensor<1x?x2xf32>) -> tensor<1x?x2x4xf32> {
  %o, %hf = k3.kda %q, %q, %q, %g, %b cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2xf32>,
         tensor<?xi32>) -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  return %o : tensor<1x?x2x4xf32>
}

// -----

// A token mixer with no context-parallel rule is refused by name.
func.func @forward(%cu: tensor<?xi32> {k3.name = "cu_seqlens"}, %q: tensor<?x2x8xf32>) -> tensor<?x2x8xf32> {
  // expected-error @+1 {{'k3.causal_attention' op mixes the tokens of a sequence and has no context-parallel form yet}}
  %r = k3.causal_attention %q, %q, %q cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi32>) -> tensor<?x2x8xf32>
  return %r : tensor<?x2x8xf32>
}
func.func @other() {
  return
}

// -----

// Without cu_seqlens there are no sequences to cut.
func.func @forward(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'k3.short_conv' op has no cu_seqlens: context parallelism (k3-partition-context) cuts sequences}}
  %y, %fs = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<1x8x3xf32>)
  return %y : tensor<?x8xf32>
}
func.func @other() {
  return
}

// -----

// With experts=1 the routed experts are split over the cp ranks too: the
// prefill buckets its routed rows by the rank holding their expert (a
// rank's part has at most 8 / 2 + 4 sequences = 8 tokens, x min(top-k 2, 2
// experts a rank) = 16 rows a bucket), exchanges rows, ids and weights,
// runs the rank's experts on what it received, and sends the outputs back;
// the decode entry (replicated tokens) keeps its rank's pairs and
// all-reduces.

// EXP-LABEL: func.func @forward
// EXP-SAME:    %[[RANK:[a-z0-9]+]]: tensor<1xi32> {k3.name = "k3.rank.cp"}
// EXP:         k3.weight "e.{expert}.w1.weight" {k3.shard = #k3.weight_shard<group = "cp", parts = 2, dim = 0>} : tensor<2x16x32xbf16>
// EXP:         %[[ROWS:.*]], %[[IDS:.*]], %[[W:.*]], %[[SLOTS:.*]] = k3.moe_bucket %{{.*}} {experts_per_rank = 2 : i64}
// EXP-SAME:      -> (tensor<2x16x32xf32>, tensor<2x16x1xi32>, tensor<2x16x1xf32>, tensor<?x2xi32>)
// EXP:         %[[R:.*]] = k3.all_to_all %[[ROWS]] {concat_dim = 0 : i64, group = "cp", group_size = 2 : i64, split_dim = 0 : i64}
// EXP:         %[[RF:.*]] = tensor.collapse_shape %[[R]] {{\[\[}}0, 1], [2]] : tensor<2x16x32xf32> into tensor<32x32xf32>
// EXP:         k3.all_to_all %[[IDS]]
// EXP:         k3.all_to_all %[[W]]
// EXP:         %[[Y:.*]] = k3.moe_experts silu %[[RF]], %{{.*}} -> tensor<32x32xf32>
// EXP:         %[[YB:.*]] = tensor.expand_shape %[[Y]]
// EXP:         %[[BACK:.*]] = k3.all_to_all %[[YB]]
// EXP:         k3.moe_unbucket %[[BACK]], %[[SLOTS]] : (tensor<2x16x32xf32>, tensor<?x2xi32>) -> tensor<?x32xf32>
// EXP-LABEL: func.func @forward_decode
// EXP-SAME:    %[[DRANK:[a-z0-9]+]]: tensor<1xi32> {k3.name = "k3.rank.cp"}
// EXP:         %[[LOCAL:.*]] = k3.moe_local_ids %{{.*}}, %[[DRANK]] {experts_per_rank = 2 : i64}
// EXP:         k3.moe_experts silu %{{.*}}, %[[LOCAL]]
// EXP-NEXT:    k3.all_reduce sum %{{.*}} {group = "cp", group_size = 2 : i64}
func.func @forward(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %w1 = k3.weight "e.{expert}.w1.weight" : tensor<4x16x32xbf16>
  %w3 = k3.weight "e.{expert}.w3.weight" : tensor<4x16x32xbf16>
  %w2 = k3.weight "e.{expert}.w2.weight" : tensor<4x32x16xbf16>
  %r = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>,
         tensor<4x32x16xbf16>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}
func.func @forward_decode(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %w1 = k3.weight "e.{expert}.w1.weight" : tensor<4x16x32xbf16>
  %w3 = k3.weight "e.{expert}.w3.weight" : tensor<4x16x32xbf16>
  %w2 = k3.weight "e.{expert}.w2.weight" : tensor<4x32x16xbf16>
  %r = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>,
         tensor<4x32x16xbf16>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// RUN: not k3-opt %s -split-input-file --k3-last-token-logits 2>/dev/null | FileCheck %s
// RUN: not k3-opt %s -split-input-file --k3-last-token-logits 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR
// RUN: not k3-opt %s -split-input-file --k3-last-token-logits=entry=missing 2>&1 >/dev/null | FileCheck %s --check-prefix=MISSING
// RUN: k3-opt %s -split-input-file --k3-last-token-logits="entry=missing require-entry=0" 2>&1 | FileCheck %s --check-prefix=OPTIONAL

// The final norm and the head move after k3.last_tokens; next_tokens follows
// the new logits; the other output (a hidden state) keeps its T rows.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[IDS:[a-z0-9]+]]: tensor<?xi32> {k3.name = "token_ids"}, %[[CU:[a-z0-9]+]]: tensor<?xi32> {k3.name = "cu_seqlens"}
// CHECK:         %[[H:.*]] = k3.embedding
// CHECK:         %[[LAST:.*]] = k3.last_tokens %[[H]], %[[CU]] : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
// CHECK:         %[[N:.*]] = k3.rms_norm %[[LAST]]
// CHECK:         %[[L:.*]] = k3.linear %[[N]]
// CHECK:         %[[A:.*]] = k3.argmax %[[L]]
// CHECK:         return %[[L]], %[[A]], %[[H]]
// CHECK-NOT:     k3.rms_norm
// MISSING: error: k3-last-token-logits: no model function 'missing'
// A model without the function (k3-compile on a model without a decode entry):
// left alone.
// OPTIONAL-NOT: error
// OPTIONAL-NOT: k3.last_tokens
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}, tensor<?xi32> {k3.name = "next_tokens"},
        tensor<?x8xf32> {k3.name = "hidden"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %nw = k3.weight "norm" : tensor<8xbf16>
  %n = k3.rms_norm %h, %nw {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %n, %w : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  %a = k3.argmax %l : (tensor<?x16xf32>) -> tensor<?xi32>
  return %l, %a, %h : tensor<?x16xf32>, tensor<?xi32>, tensor<?x8xf32>
}

// -----

// A model without outputs named logits is left alone.
// CHECK-LABEL: func.func @forward(
// CHECK-NOT:     k3.last_tokens
func.func @forward(%x: tensor<?x8xf32> {k3.name = "token_ids"}) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}

// -----

// Without cu_seqlens the last tokens are unknown: a clear error.
// ERR: error: 'func.func' op k3-last-token-logits: the model function has no 'cu_seqlens' argument to find each sequence's last token (compile with logits=all)
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x16xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x16xbf16>) -> tensor<?x16xf32>
  return %h : tensor<?x16xf32>
}

// -----

// A vocabulary-split head (k3-partition vocab-split=1): the all-gather of
// the logits is row-wise too, and moves after the selection with the head.
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[LAST:.*]] = k3.last_tokens
// CHECK:         %[[L:.*]] = k3.linear %[[LAST]]
// CHECK:         %[[G:.*]] = k3.all_gather %[[L]] {dim = 1 : i64, group = "tp", group_size = 2 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
// CHECK:         return %[[G]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "head" : tensor<8x8xbf16>
  %l = k3.linear %h, %w : (tensor<?x8xf32>, tensor<8x8xbf16>) -> tensor<?x8xf32>
  %g = k3.all_gather %l {group = "tp", group_size = 2 : i64, dim = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
  return %g : tensor<?x16xf32>
}

// -----

// The last layer's tail after its attention is row-wise: the output
// projection, the residual adds, the norms, the router, the routed and
// shared experts all move after the selection, which takes the attention
// output and the residual stream. Here a returned output that needs every
// row stands for the attention: a linear that the selection stops at.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[CU:[a-z0-9]+]]: tensor<?xi32> {k3.name = "cu_seqlens"}
// CHECK:         %[[RES:.*]] = k3.add
// CHECK:         %[[ATT:.*]] = k3.rms_norm %[[RES]]
// CHECK:         %[[KEEP:.*]] = k3.linear %[[ATT]]
// CHECK-NOT:     k3.moe_router
// CHECK:         %[[LA:.*]] = k3.last_tokens %[[KEEP]], %[[CU]] : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
// CHECK:         %[[O:.*]] = k3.linear %[[LA]]
// CHECK:         %[[LR:.*]] = k3.last_tokens %[[RES]], %[[CU]]
// CHECK:         %[[H:.*]] = k3.add %[[LR]], %[[O]]
// CHECK:         %[[N:.*]] = k3.rms_norm %[[H]]
// CHECK:         %[[IDX:.*]], %[[W:.*]] = k3.moe_router sigmoid %[[N]]
// CHECK:         %[[E:.*]] = k3.moe_experts silu %[[N]], %[[IDX]], %[[W]]
// CHECK:         %[[S:.*]] = k3.glu_mlp silu %[[N]]
// CHECK:         %[[M:.*]] = k3.add %[[E]], %[[S]]
// CHECK:         %[[Y:.*]] = k3.add %[[H]], %[[M]]
// CHECK:         %[[F:.*]] = k3.rms_norm %[[Y]]
// CHECK:         %[[L:.*]] = k3.linear %[[F]]
// CHECK:         return %[[L]], %[[KEEP]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}, tensor<?x8xf32> {k3.name = "hidden"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %res = k3.add %x, %x : tensor<?x8xf32>
  %nw = k3.weight "attn_norm" : tensor<8xbf16>
  %a = k3.rms_norm %res, %nw {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  // Stands for the attention: returned on every row.
  %qw = k3.weight "mix" : tensor<8x8xbf16>
  %att = k3.linear %a, %qw : (tensor<?x8xf32>, tensor<8x8xbf16>) -> tensor<?x8xf32>
  %ow = k3.weight "o_proj" : tensor<8x8xbf16>
  %o = k3.linear %att, %ow : (tensor<?x8xf32>, tensor<8x8xbf16>) -> tensor<?x8xf32>
  %h = k3.add %res, %o : tensor<?x8xf32>
  %pw = k3.weight "post_norm" : tensor<8xbf16>
  %n = k3.rms_norm %h, %pw {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %gw = k3.weight "gate" : tensor<4x8xbf16>
  %idx, %w = k3.moe_router sigmoid %n, %gw {renormalize, routed_scaling_factor = 1.0 : f64, top_k = 2 : i64} : (tensor<?x8xf32>, tensor<4x8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %w1 = k3.weight "w1" : tensor<4x6x8xbf16>
  %w3 = k3.weight "w3" : tensor<4x6x8xbf16>
  %w2 = k3.weight "w2" : tensor<4x8x6xbf16>
  %ex = k3.moe_experts silu %n, %idx, %w, %w1, %w3, %w2 : (tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<4x6x8xbf16>, tensor<4x6x8xbf16>, tensor<4x8x6xbf16>) -> tensor<?x8xf32>
  %sg = k3.weight "shared_gate" : tensor<6x8xbf16>
  %su = k3.weight "shared_up" : tensor<6x8xbf16>
  %sd = k3.weight "shared_down" : tensor<8x6xbf16>
  %sh = k3.glu_mlp silu %n, %sg, %su, %sd : (tensor<?x8xf32>, tensor<6x8xbf16>, tensor<6x8xbf16>, tensor<8x6xbf16>) -> tensor<?x8xf32>
  %m = k3.add %ex, %sh : tensor<?x8xf32>
  %y = k3.add %h, %m : tensor<?x8xf32>
  %fw = k3.weight "norm" : tensor<8xbf16>
  %f = k3.rms_norm %y, %fw {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %hw = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %f, %hw : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l, %att : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// The last layer's MLA attention, whose output only the selection reads:
// the call's latents go to the cache first, and the last tokens alone
// attend over it (one query a sequence from k3.last_token_context), their
// query projection on the selected rows. The latent projection, which the
// cache needs on every row, stays. The state takes the append's cache (the
// attention's own cache result holds the same rows and goes unused), so
// that the append updates it in place.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[CU:[a-z0-9]+]]: tensor<?xi32> {k3.name = "cu_seqlens"}, %[[CTX:[a-z0-9]+]]: tensor<?xi32> {k3.name = "context_lens"}
// CHECK:         %[[X:.*]] = k3.embedding
// CHECK:         %[[LX:.*]] = k3.last_tokens %[[X]], %[[CU]]
// CHECK:         %[[QF:.*]] = k3.linear %[[LX]]
// CHECK:         %[[LAT:.*]] = k3.linear %[[X]]
// CHECK:         %[[C:.*]] = k3.state.read "cache"
// CHECK:         %[[ALL:.*]] = k3.latent_cache_append %[[C]], %[[CTX]], %[[LAT]] cu_seqlens(%[[CU]])
// CHECK:         %[[LENS:.*]], %[[LCU:.*]] = k3.last_token_context %[[CU]], %[[CTX]] : (tensor<?xi32>, tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>)
// CHECK:         %[[Q:.*]] = tensor.expand_shape %[[QF]] {{\[\[}}0], [1, 2]]
// CHECK:         %[[LL:.*]] = k3.last_tokens %[[LAT]], %[[CU]]
// CHECK:         %[[O:.*]], %{{.*}} = k3.latent_attention %[[Q]], %[[LL]], %{{.*}} cache(%[[ALL]], %[[LENS]]) cu_seqlens(%[[LCU]])
// CHECK-SAME:      -> (tensor<?x2x8xf32>, tensor<?x96x20xf32>)
// CHECK:         %[[OF:.*]] = tensor.collapse_shape %[[O]]
// CHECK:         k3.state.write "cache", %[[ALL]]
// CHECK-NOT:     k3.latent_attention
// The residual's selection is the one the query projection took (moved up
// there): the embedding's rows are selected once.
// CHECK:         %[[P:.*]] = k3.linear %[[OF]]
// CHECK-NOT:     k3.last_tokens %[[X]]
// CHECK:         k3.add %[[LX]], %[[P]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"}, %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %c0 = arith.constant 0 : index
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %t = tensor.dim %x, %c0 : tensor<?x8xf32>
  %qw = k3.weight "q_proj" : tensor<24x8xbf16>
  %qf = k3.linear %x, %qw : (tensor<?x8xf32>, tensor<24x8xbf16>) -> tensor<?x24xf32>
  %q = tensor.expand_shape %qf [[0], [1, 2]] output_shape [%t, 2, 12] : tensor<?x24xf32> into tensor<?x2x12xf32>
  %lw = k3.weight "kv_a" : tensor<20x8xbf16>
  %lat = k3.linear %x, %lw : (tensor<?x8xf32>, tensor<20x8xbf16>) -> tensor<?x20xf32>
  %kvb = k3.weight "kv_b" : tensor<32x16xbf16>
  %c = k3.state.read "cache" : tensor<?x96x20xf32>
  %o, %co = k3.latent_attention %q, %lat, %kvb cache(%c, %ctx) cu_seqlens(%cu) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64, scale = 0.2887 : f64, v_head_dim = 8 : i64} : (tensor<?x2x12xf32>, tensor<?x20xf32>, tensor<32x16xbf16>, tensor<?x96x20xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x8xf32>, tensor<?x96x20xf32>)
  k3.state.write "cache", %co : tensor<?x96x20xf32>
  %of = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x8xf32> into tensor<?x16xf32>
  %ow = k3.weight "o_proj" : tensor<8x16xbf16>
  %p = k3.linear %of, %ow : (tensor<?x16xf32>, tensor<8x16xbf16>) -> tensor<?x8xf32>
  %h = k3.add %x, %p : tensor<?x8xf32>
  %hw = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %h, %hw : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}

// -----

// An attention output that another output reads on every row stays; the
// selection takes its rows.
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[O:.*]], %{{.*}} = k3.latent_attention %{{.*}} cache(%{{.*}}, %{{.*}}) cu_seqlens(%{{.*}}) {{.*}} -> (tensor<?x2x8xf32>, tensor<?x96x20xf32>)
// CHECK:         %[[OF:.*]] = tensor.collapse_shape %[[O]]
// CHECK:         k3.last_tokens %[[OF]]
// CHECK-NOT:     k3.last_token_context
// CHECK:         return
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"}, %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}, tensor<?x16xf32> {k3.name = "attention"}) {
  %c0 = arith.constant 0 : index
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %t = tensor.dim %x, %c0 : tensor<?x8xf32>
  %qw = k3.weight "q_proj" : tensor<24x8xbf16>
  %qf = k3.linear %x, %qw : (tensor<?x8xf32>, tensor<24x8xbf16>) -> tensor<?x24xf32>
  %q = tensor.expand_shape %qf [[0], [1, 2]] output_shape [%t, 2, 12] : tensor<?x24xf32> into tensor<?x2x12xf32>
  %lw = k3.weight "kv_a" : tensor<20x8xbf16>
  %lat = k3.linear %x, %lw : (tensor<?x8xf32>, tensor<20x8xbf16>) -> tensor<?x20xf32>
  %kvb = k3.weight "kv_b" : tensor<32x16xbf16>
  %c = k3.state.read "cache" : tensor<?x96x20xf32>
  %o, %co = k3.latent_attention %q, %lat, %kvb cache(%c, %ctx) cu_seqlens(%cu) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64, scale = 0.2887 : f64, v_head_dim = 8 : i64} : (tensor<?x2x12xf32>, tensor<?x20xf32>, tensor<32x16xbf16>, tensor<?x96x20xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x8xf32>, tensor<?x96x20xf32>)
  k3.state.write "cache", %co : tensor<?x96x20xf32>
  %of = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x8xf32> into tensor<?x16xf32>
  %hw = k3.weight "head" : tensor<16x16xbf16>
  %l = k3.linear %of, %hw : (tensor<?x16xf32>, tensor<16x16xbf16>) -> tensor<?x16xf32>
  return %l, %of : tensor<?x16xf32>, tensor<?x16xf32>
}

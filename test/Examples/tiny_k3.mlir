// The example model parses and verifies, and printing is a fixed point in
// both the custom and the generic form.
// RUN: k3-opt %k3_src_root/examples/tiny_k3.mlir -verify-diagnostics -o %t.custom
// RUN: k3-opt %t.custom -o %t.custom2
// RUN: diff %t.custom %t.custom2
// RUN: k3-opt %k3_src_root/examples/tiny_k3.mlir --mlir-print-op-generic | k3-opt -o %t.generic
// RUN: diff %t.custom %t.generic
// RUN: FileCheck %s --check-prefix=PARSE < %t.custom
//
// Expanding the layers gives one function with absolute resource names.
// RUN: k3-opt %k3_src_root/examples/tiny_k3.mlir --k3-inline-layers -o %t.inlined
// RUN: FileCheck %s --check-prefix=INLINE --implicit-check-not=k3.layer < %t.inlined
// RUN: grep -c 'k3.weight' %t.inlined | FileCheck %s --check-prefix=WEIGHTS
// RUN: grep -c 'k3.state.read' %t.inlined | FileCheck %s --check-prefix=STATES
// RUN: grep -c 'k3.state.write' %t.inlined | FileCheck %s --check-prefix=STATES
// No relative (template) name survives: every name starts with model. or lm_head.
// RUN: grep -E 'k3\.(weight|state\.read|state\.write) "' %t.inlined | not grep -vE '"(model|lm_head)\.'
//
// Both K3 passes together: the six KDA layers compute their gate in-op.
// RUN: k3-opt %k3_src_root/examples/tiny_k3.mlir --k3-inline-layers --k3-fuse-kda-gate -o %t.fused
// RUN: FileCheck %s --check-prefix=FUSED --implicit-check-not=k3.kda_gate < %t.fused
// RUN: grep -c 'gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.000000e+00' %t.fused | FileCheck %s --check-prefix=SIX

// PARSE-LABEL: module attributes {k3.hidden_size = 64 : i64, k3.max_context = 128 : i64, k3.model = "tiny-k3", k3.vocab_size = 256 : i64}
// PARSE:       func.func @forward
// PARSE-COUNT-2: k3.layer @kda_moe_layer(
// PARSE:         k3.layer @mla_moe_layer("model.layers.3.")
// PARSE:         k3.layer @kda_moe_layer_open("model.layers.4.")
// PARSE:       func.func private @kda_dense_layer_open
// PARSE:       func.func private @kda_mixer
// PARSE:       func.func private @mla_mixer
// PARSE:       func.func private @latent_moe

// The templates are gone: @forward is the only function left.
// INLINE-LABEL: func.func @forward
// INLINE-NOT:   func.func
// INLINE:       k3.weight "model.embed_tokens.weight" : tensor<256x64xbf16>
// INLINE:       k3.weight "model.layers.0.self_attn.q_proj.weight" : tensor<32x64xbf16>
// INLINE:       k3.state.read "model.layers.0.self_attn.q_conv_state" : tensor<?x32x3xf32>
// INLINE:       k3.state.write "model.layers.0.self_attn.recurrent_state"
// INLINE:       k3.weight "model.layers.0.mlp.gate_proj.weight" : tensor<96x64xbf16>
// INLINE:       k3.weight "model.layers.3.self_attn.kv_b_proj.weight" : tensor<64x16xbf16>
// INLINE:       k3.state.read "model.layers.3.self_attn.latent_cache" : tensor<?x128x24xf32>
// INLINE:       k3.state.write "model.layers.3.self_attn.latent_cache"
// INLINE:       k3.weight "model.layers.4.block_sparse_moe.experts.{expert}.w1.weight" : tensor<8x16x32xbf16>
// INLINE:       k3.weight "model.layers.7.block_sparse_moe.shared_experts.down_proj.weight"
// INLINE:       k3.weight "model.output_attn_res_norm.weight"
// INLINE:       k3.weight "lm_head.weight"
// INLINE:       k3.argmax
// INLINE-NOT:   func.func

// 5 model-level weights, 6 per layer for norms and AttnRes, 14 per KDA
// mixer, 8 per MLA mixer, 3 for the dense MLP and 11 per latent MoE:
// 5 + 8 * 6 + 6 * 14 + 2 * 8 + 3 + 7 * 11 = 233.
// WEIGHTS: {{^}}233{{$}}
// 4 states per KDA layer (3 conv + recurrent), 1 latent cache per MLA layer.
// STATES: {{^}}26{{$}}

// FUSED-LABEL: func.func @forward
// FUSED:       k3.kda {{.*}} gate_params(
// SIX: {{^}}6{{$}}

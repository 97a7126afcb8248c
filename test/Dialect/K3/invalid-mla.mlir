// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.causal_attention and k3.latent_attention.

func.func @causal_q_rank(%q: tensor<?x48xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'q' to have rank 3, got 2}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x48xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @causal_k_rank(%q: tensor<?x2x24xf32>, %k: tensor<1x?x2x24xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'k' to have rank 3, got 4}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<1x?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @causal_v_rank(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x32xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'v' to have rank 3, got 2}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @causal_result_rank(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'result' to have rank 3, got 2}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @causal_qk_shape(%q: tensor<?x2x24xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op shape mismatch: 'q' dimension 2 is 24 but 'k' dimension 2 is 16}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @causal_tokens(%q: tensor<4x2x24xf32>, %k: tensor<4x2x24xf32>, %v: tensor<5x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op token count mismatch: 'q' dimension 0 is 4 but 'v' dimension 0 is 5}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<4x2x24xf32>, tensor<4x2x24xf32>, tensor<5x2x16xf32>) -> tensor<5x2x16xf32>
  return
}

// -----

func.func @causal_heads(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x1x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op head count mismatch: 'q' dimension 1 is 2 but 'v' dimension 1 is 1}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x1x16xf32>) -> tensor<?x1x16xf32>
  return
}

// -----

func.func @causal_result_shape(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op shape mismatch: 'v' dimension 2 is 16 but 'result' dimension 2 is 24}}
  %o = k3.causal_attention %q, %k, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x24xf32>
  return
}

// -----

func.func @causal_scale(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'scale' to be positive, got -1.250000e-01}}
  %o = k3.causal_attention %q, %k, %v {scale = -0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @causal_cu_seqlens_rank(%q: tensor<?x2x24xf32>, %k: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>, %cu: tensor<i32>) {
  // expected-error @+1 {{'k3.causal_attention' op expects 'cu_seqlens' to have rank 1, got 0}}
  %o = k3.causal_attention %q, %k, %v cu_seqlens(%cu) {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>, tensor<i32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_num_heads(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'num_heads' to be positive, got 0}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 0 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_nope_dim(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'qk_nope_head_dim' to be positive, got -1}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = -1 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_v_head_dim(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'v_head_dim' to be positive, got 0}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 0 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_kv_lora_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'kv_lora_rank' to be positive, got 0}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 0 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_rope_dim(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'qk_rope_head_dim' >= 0, got -8}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = -8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_q_rank(%q: tensor<?x48xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'q' to have rank 3, got 2}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x48xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_latent_rank(%q: tensor<?x2x24xf32>, %lat: tensor<1x?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'latent' to have rank 2, got 3}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<1x?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_kv_b_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<2x32x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'kv_b' to have rank 2, got 3}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<2x32x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_result_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'result' to have rank 3, got 2}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @mla_q_heads(%q: tensor<?x4x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'q' dimension 1 (num_heads) to be 2, got 4}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x4x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_q_head_dim(%q: tensor<?x2x16xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'q' dimension 2 (qk_nope_head_dim + qk_rope_head_dim) to be 24, got 16}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x16xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_latent_width(%q: tensor<?x2x24xf32>, %lat: tensor<?x16xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'latent' dimension 1 (kv_lora_rank + qk_rope_head_dim) to be 24, got 16}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x16xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_kv_b_rows(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<32x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'kv_b' dimension 0 (num_heads * (qk_nope_head_dim + v_head_dim)) to be 64, got 32}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<32x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_kv_b_cols(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x24xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'kv_b' dimension 1 (kv_lora_rank) to be 16, got 24}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x24xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_latent_tokens(%q: tensor<4x2x24xf32>, %lat: tensor<3x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op token count mismatch: 'q' dimension 0 is 4 but 'latent' dimension 0 is 3}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<4x2x24xf32>, tensor<3x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_result_tokens(%q: tensor<4x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op token count mismatch: 'q' dimension 0 is 4 but 'result' dimension 0 is 5}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<4x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<5x2x16xf32>
  return
}

// -----

func.func @mla_result_heads(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'result' dimension 1 (num_heads) to be 2, got 1}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x1x16xf32>
  return
}

// -----

func.func @mla_result_head_dim(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'result' dimension 2 (v_head_dim) to be 16, got 24}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x24xf32>
  return
}

// -----

func.func @mla_scale(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'scale' to be positive, got 0}}
  %o = k3.latent_attention %q, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.0 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_cache_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'latent_cache' to have rank 3, got 2}}
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x24xf32>, tensor<?xi32>) -> (tensor<?x2x16xf32>, tensor<?x24xf32>)
  return
}

// -----

func.func @mla_cache_width(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x16xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'latent_cache' dimension 2 (kv_lora_rank + qk_rope_head_dim) to be 24, got 16}}
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x16xf32>, tensor<?xi32>) -> (tensor<?x2x16xf32>, tensor<?x128x16xf32>)
  return
}

// -----

func.func @mla_cache_out_shape(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op shape mismatch: 'latent_cache' dimension 1 is 128 but 'latent_cache_out' dimension 1 is 64}}
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>) -> (tensor<?x2x16xf32>, tensor<?x64x24xf32>)
  return
}

// -----

func.func @mla_cache_lens_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?x1xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'cache_lens' to have rank 1, got 2}}
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?x1xi32>) -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  return
}

// -----

func.func @mla_cache_lens_count(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<4x128x24xf32>, %lens: tensor<3xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op sequence count mismatch: 'latent_cache' dimension 0 is 4 but 'cache_lens' dimension 0 is 3}}
  %o, %c1 = k3.latent_attention %q, %lat, %kvb cache(%c, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<4x128x24xf32>, tensor<3xi32>) -> (tensor<?x2x16xf32>, tensor<4x128x24xf32>)
  return
}

// -----

func.func @mla_cu_seqlens_rank(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %cu: tensor<?x1xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'cu_seqlens' to have rank 1, got 2}}
  %o = k3.latent_attention %q, %lat, %kvb cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x1xi32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_cache_without_lens(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'cache_lens' exactly when a 'latent_cache' operand is given}}
  %o:2 = "k3.latent_attention"(%q, %lat, %kvb, %c)
      <{num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64,
        kv_lora_rank = 16 : i64, scale = 2.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}>
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>) -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  return
}

// -----

func.func @mla_lens_without_cache(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects 'cache_lens' exactly when a 'latent_cache' operand is given}}
  %o = "k3.latent_attention"(%q, %lat, %kvb, %lens)
      <{num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64,
        kv_lora_rank = 16 : i64, scale = 2.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>}>
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?xi32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_cache_without_result(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects a 'latent_cache' result exactly when a latent cache operand is given}}
  %o = "k3.latent_attention"(%q, %lat, %kvb, %c, %lens)
      <{num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64,
        kv_lora_rank = 16 : i64, scale = 2.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>}>
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @mla_result_without_cache(%q: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>, %kvb: tensor<64x16xbf16>, %c: tensor<?x128x24xf32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'k3.latent_attention' op expects a 'latent_cache' result exactly when a latent cache operand is given}}
  %o:2 = "k3.latent_attention"(%q, %lat, %kvb)
      <{num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64,
        kv_lora_rank = 16 : i64, scale = 2.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>}>
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  return
}

// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.mla_prefill_attention and
// k3.latent_cache_append.

func.func @q_width(%q: tensor<?x2x20xf32>, %kv: tensor<?x2x32xf32>, %l: tensor<?x24xf32>) {
  // expected-error @+1 {{'k3.mla_prefill_attention' op expects 'q' dimension 2 (qk_nope_head_dim + qk_rope_head_dim) to be 24, got 20}}
  %o = k3.mla_prefill_attention %q, %kv, %l {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x20xf32>, tensor<?x2x32xf32>, tensor<?x24xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @kv_heads(%q: tensor<?x2x24xf32>, %kv: tensor<?x4x32xf32>, %l: tensor<?x24xf32>) {
  // expected-error @+1 {{'k3.mla_prefill_attention' op head count mismatch: 'q' dimension 1 is 2 but 'kv' dimension 1 is 4}}
  %o = k3.mla_prefill_attention %q, %kv, %l {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x4x32xf32>, tensor<?x24xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @latent_narrow(%q: tensor<?x2x24xf32>, %kv: tensor<?x2x32xf32>, %l: tensor<?x4xf32>) {
  // expected-error @+1 {{'k3.mla_prefill_attention' op expects 'latent' at least qk_rope_head_dim (8) wide, got 4}}
  %o = k3.mla_prefill_attention %q, %kv, %l {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x32xf32>, tensor<?x4xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_width(%q: tensor<?x2x24xf32>, %kv: tensor<?x2x32xf32>, %l: tensor<?x24xf32>, %g: tensor<?x16xf32>) {
  // expected-error @+1 {{'k3.mla_prefill_attention' op expects 'gate' dimension 1 (num_heads * v_head_dim) to be 32, got 16}}
  %o = k3.mla_prefill_attention %q, %kv, %l gate(%g) {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, scale = 0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x32xf32>, tensor<?x24xf32>, tensor<?x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @negative_scale(%q: tensor<?x2x24xf32>, %kv: tensor<?x2x32xf32>, %l: tensor<?x24xf32>) {
  // expected-error @+1 {{'k3.mla_prefill_attention' op expects 'scale' to be positive, got -2.500000e-01}}
  %o = k3.mla_prefill_attention %q, %kv, %l {qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, v_head_dim = 16 : i64, scale = -0.25 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x32xf32>, tensor<?x24xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @append_width(%c: tensor<?x128x24xf32>, %n: tensor<?xi32>, %l: tensor<?x16xf32>) {
  // expected-error @+1 {{'k3.latent_cache_append' op latent width mismatch: 'cache' dimension 2 is 24 but 'latent' dimension 1 is 16}}
  %c1 = k3.latent_cache_append %c, %n, %l : (tensor<?x128x24xf32>, tensor<?xi32>, tensor<?x16xf32>) -> tensor<?x128x24xf32>
  return
}

// -----

func.func @append_result(%c: tensor<?x128x24xf32>, %n: tensor<?xi32>, %l: tensor<?x24xf32>) {
  // expected-error @+1 {{'k3.latent_cache_append' op shape mismatch}}
  %c1 = k3.latent_cache_append %c, %n, %l : (tensor<?x128x24xf32>, tensor<?xi32>, tensor<?x24xf32>) -> tensor<?x64x24xf32>
  return
}

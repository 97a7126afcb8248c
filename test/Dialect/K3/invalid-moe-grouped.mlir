// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.moe_dispatch, k3.moe_grouped_glu,
// k3.moe_grouped_down, k3.moe_combine and k3.moe_combine_add_rms_norm.

func.func @dispatch_offsets_size(%i: tensor<?x2xi32>) {
  // expected-error @+1 {{'k3.moe_dispatch' op expects 'offsets result' dimension 0 (num_experts + 1) to be 9, got 8}}
  %s, %p, %o, %t = k3.moe_dispatch %i {num_experts = 8 : i64, tile_rows = 128 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<8xi32>, tensor<8xi32>)
  return
}

// -----

func.func @dispatch_tile_rows(%i: tensor<?x2xi32>) {
  // expected-error @+1 {{'k3.moe_dispatch' op expects 'tile_rows' to be positive, got 0}}
  %s, %p, %o, %t = k3.moe_dispatch %i {num_experts = 8 : i64, tile_rows = 0 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>)
  return
}

// -----

func.func @dispatch_row_source_shape(%i: tensor<?x2xi32>) {
  // expected-error @+1 {{'k3.moe_dispatch' op shape mismatch}}
  %s, %p, %o, %t = k3.moe_dispatch %i {num_experts = 8 : i64, tile_rows = 128 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x4xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>)
  return
}

// -----

func.func @glu_offsets_experts(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<5xi32>,
    %w1: tensor<8x16x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op expects 'offsets' dimension 0 (expert count + 1) to be 9, got 5}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<?x2x16xbf16>
  return
}

// -----

func.func @glu_result_width(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op expert intermediate size mismatch: 'result' dimension 2 is 32 but 'w1' dimension 1 is 16}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<?x2x32xbf16>
  return
}

// -----

func.func @glu_situ_beta(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op situ activation requires 'beta'}}
  %h = k3.moe_grouped_glu situ %x, %i, %i, %o, %o, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<?x2x16xbf16>
  return
}

// -----

func.func @down_input_width(%h: tensor<?x2x8xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %p: tensor<?x2xf32>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_down' op expert intermediate size mismatch: 'w2' dimension 2 is 16 but 'input' dimension 2 is 8}}
  %y = k3.moe_grouped_down %h, %i, %i, %o, %o, %p, %w2
      : (tensor<?x2x8xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<?x2xf32>, tensor<8x32x16xbf16>) -> tensor<?x2x32xf32>
  return
}

// -----

func.func @combine_slots(%r: tensor<?x2x32xf32>, %pos: tensor<?x4xi32>) {
  // expected-error @+1 {{'k3.moe_combine' op expects 'rows' dimension 1 (experts per token) to be 4, got 2}}
  %y = k3.moe_combine %r, %pos : (tensor<?x2x32xf32>, tensor<?x4xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Shared expert operands (k3-fuse-shared-expert): one slot more, the
// routed experts' widths and element type.

func.func @glu_shared_slots(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>, %s: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op expects 'result' dimension 1 (experts per token + 1, the shared expert) to be 3, got 2}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1 shared(%s, %s)
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) -> tensor<?x2x16xbf16>
  return
}

// -----

func.func @glu_slots_without_shared(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op expects 'result' dimension 1 (experts per token) to be 2, got 3}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<?x3x16xbf16>
  return
}

// -----

func.func @glu_shared_rows(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>, %s: tensor<8x32xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op rows mismatch: 'shared_w1' dimension 0 is 8 but 'w1' dimension 1 is 16}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1 shared(%s, %s)
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32xbf16>, tensor<8x32xbf16>) -> tensor<?x3x16xbf16>
  return
}

// -----

func.func @glu_shared_type(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %w1: tensor<8x16x32xbf16>, %s: tensor<16x32xf32>) {
  // expected-error @+1 {{'k3.moe_grouped_glu' op expects the shared expert's 'shared_w1' to have the routed experts' element type 'bf16', got 'f32'}}
  %h = k3.moe_grouped_glu silu %x, %i, %i, %o, %o, %w1, %w1 shared(%s, %s)
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<?x3x16xbf16>
  return
}

// -----

func.func @down_shared_width(%h: tensor<?x3x16xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %p: tensor<?x2xf32>, %w2: tensor<8x32x16xbf16>, %s: tensor<32x8xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_down' op reduction width mismatch: 'shared_w2' dimension 1 is 8 but 'w2' dimension 2 is 16}}
  %y = k3.moe_grouped_down %h, %i, %i, %o, %o, %p, %w2 shared(%s)
      : (tensor<?x3x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<?x2xf32>, tensor<8x32x16xbf16>, tensor<32x8xbf16>) -> tensor<?x3x32xf32>
  return
}

// -----

func.func @down_shared_slots(%h: tensor<?x2x16xbf16>, %i: tensor<?x2xi32>, %o: tensor<9xi32>,
    %p: tensor<?x2xf32>, %w2: tensor<8x32x16xbf16>, %s: tensor<32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_grouped_down' op expects 'input' dimension 1 (experts per token + 1, the shared expert) to be 3, got 2}}
  %y = k3.moe_grouped_down %h, %i, %i, %o, %o, %p, %w2 shared(%s)
      : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>, tensor<?x2xf32>, tensor<8x32x16xbf16>, tensor<32x16xbf16>) -> tensor<?x3x32xf32>
  return
}

// -----

func.func @combine_addend_shape(%rows: tensor<?x2x16xf32>, %pos: tensor<?x2xi32>, %s: tensor<?x8xbf16>) {
  // expected-error @+1 {{'k3.moe_combine' op shape mismatch: 'addend' dimension 1 is 8 but 'result' dimension 1 is 16}}
  %c = k3.moe_combine %rows, %pos addend(%s) : (tensor<?x2x16xf32>, tensor<?x2xi32>, tensor<?x8xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @local_ids_rank_shape(%idx: tensor<?x2xi32>, %rank: tensor<2xi32>) -> tensor<?x2xi32> {
  // expected-error @below {{expects 'rank' dimension 0 (1) to be 1, got 2}}
  %l = k3.moe_local_ids %idx, %rank {experts_per_rank = 4 : i64} : (tensor<?x2xi32>, tensor<2xi32>) -> tensor<?x2xi32>
  return %l : tensor<?x2xi32>
}

// -----

func.func @local_ids_count(%idx: tensor<?x2xi32>, %rank: tensor<1xi32>) -> tensor<?x2xi32> {
  // expected-error @below {{expects 'experts_per_rank' to be positive, got 0}}
  %l = k3.moe_local_ids %idx, %rank {experts_per_rank = 0 : i64} : (tensor<?x2xi32>, tensor<1xi32>) -> tensor<?x2xi32>
  return %l : tensor<?x2xi32>
}

// -----

func.func @combine_norm_slots(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x4xi32>, %x: tensor<?x16xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.moe_combine_add_rms_norm' op expects 'rows' dimension 1 (experts per token) to be 4, got 2}}
  %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x2x16xbf16>, tensor<?x4xi32>, tensor<?x16xbf16>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return
}

// -----

func.func @combine_norm_weight(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x2xi32>, %x: tensor<?x16xbf16>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.moe_combine_add_rms_norm' op normalised size mismatch: 'weight' dimension 0 is 8 but 'sum' dimension 1 is 16}}
  %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x16xbf16>, tensor<8xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return
}

// -----

func.func @combine_norm_input(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x2xi32>, %x: tensor<?x8xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.moe_combine_add_rms_norm' op shape mismatch: 'input' dimension 1 is 8 but 'sum' dimension 1 is 16}}
  %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x8xbf16>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return
}

// -----

func.func @combine_norm_epsilon(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x2xi32>, %x: tensor<?x16xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.moe_combine_add_rms_norm' op expects 'epsilon' to be positive, got 0}}
  %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w {epsilon = 0.0 : f64} : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x16xbf16>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return
}

// RUN: k3-opt %s -split-input-file -verify-diagnostics
// The tensor-core KDA pair (k3.kda_mma_operands / k3.kda_mma_recurrence):
// what their verifiers reject. (Round trip: test/Passes/kda-mma-split.mlir.)

func.func @words(%q: tensor<1x?x2x128xbf16>, %b: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %a: tensor<2xf32>, %d: tensor<256xf32>) {
  // expected-error @+1 {{expects 5K/2 + 16 = 336 words per token in 'packed', got 320}}
  %p = k3.kda_mma_operands %q, %q, %q, %b cu_seqlens(%cu) gate_params(%a, %d)
      {scale = 0.1 : f64, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2xbf16>,
         tensor<?xi32>, tensor<2xf32>, tensor<256xf32>) -> tensor<1x?x2x320xi32>
  return
}

// -----

func.func @bound(%q: tensor<1x?x2x128xbf16>, %b: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %a: tensor<2xf32>, %d: tensor<256xf32>) {
  // expected-error @+1 {{expects lower_bound in [-5, 0) (the gate's range; the in-chunk decay products stay in the f32 range for |lb| <= 5.5), got -6}}
  %p = k3.kda_mma_operands %q, %q, %q, %b cu_seqlens(%cu) gate_params(%a, %d)
      {scale = 0.1 : f64, lower_bound = -6.0 : f64}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2xbf16>,
         tensor<?xi32>, tensor<2xf32>, tensor<256xf32>) -> tensor<1x?x2x336xi32>
  return
}

// -----

func.func @softplus_with_bound(%q: tensor<1x?x2x128xbf16>, %b: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %a: tensor<2xf32>, %d: tensor<256xf32>) {
  // expected-error @+1 {{expects no lower_bound with the neg_softplus gate}}
  %p = k3.kda_mma_operands %q, %q, %q, %b cu_seqlens(%cu) gate_params(%a, %d)
      {scale = 0.1 : f64, gate_kind = #k3<decay_gate neg_softplus>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2xbf16>,
         tensor<?xi32>, tensor<2xf32>, tensor<256xf32>) -> tensor<1x?x2x336xi32>
  return
}

// -----

func.func @sigmoid_without_bound(%q: tensor<1x?x2x128xbf16>, %b: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %a: tensor<2xf32>, %d: tensor<256xf32>) {
  // expected-error @+1 {{expects a lower_bound with the lower_bounded_sigmoid gate}}
  %p = k3.kda_mma_operands %q, %q, %q, %b cu_seqlens(%cu) gate_params(%a, %d)
      {scale = 0.1 : f64}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2xbf16>,
         tensor<?xi32>, tensor<2xf32>, tensor<256xf32>) -> tensor<1x?x2x336xi32>
  return
}

// -----

func.func @key_dim(%q: tensor<1x?x2x96xbf16>, %b: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %a: tensor<2xf32>, %d: tensor<192xf32>) {
  // expected-error @+1 {{expects a static key dimension that is a multiple of 64 up to 256, got 96}}
  %p = k3.kda_mma_operands %q, %q, %q, %b cu_seqlens(%cu) gate_params(%a, %d)
      {scale = 0.1 : f64, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x96xbf16>, tensor<1x?x2x96xbf16>, tensor<1x?x2x96xbf16>, tensor<1x?x2xbf16>,
         tensor<?xi32>, tensor<2xf32>, tensor<192xf32>) -> tensor<1x?x2x256xi32>
  return
}

// -----

func.func @state_key_dim(%p: tensor<1x?x2x336xi32>, %v: tensor<1x?x2x64xbf16>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 5K/2 + 16 words per token for the state's key dimension K}}
  %o, %s = k3.kda_mma_recurrence %p, %v cu_seqlens(%cu)
      : (tensor<1x?x2x336xi32>, tensor<1x?x2x64xbf16>, tensor<?xi32>)
      -> (tensor<1x?x2x64xbf16>, tensor<?x2x64x64xf32>)
  return
}

// -----

func.func @value_dim(%p: tensor<1x?x2x336xi32>, %v: tensor<1x?x2x40xbf16>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects a static value dimension that is a multiple of 16}}
  %o, %s = k3.kda_mma_recurrence %p, %v cu_seqlens(%cu)
      : (tensor<1x?x2x336xi32>, tensor<1x?x2x40xbf16>, tensor<?xi32>)
      -> (tensor<1x?x2x40xbf16>, tensor<?x2x128x40xf32>)
  return
}

// RUN: k3-opt %s -split-input-file --k3-select-kernel-config=target=cuda --k3-outline-kernels '--k3-plan-memory=max-tokens=64 max-seqs=4' | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-outline-kernels | FileCheck %s --check-prefix=CPU

// k3-outline-kernels: a result written back to the state its op read
// takes the state's buffer (lowering/StateInPlace.h); the op is marked
// k3.state_in_place and the write needs no copy launch.

// Prefill: the short convolution's sequences span blocks, so its final
// state goes through a copy; the latent cache append writes new rows only
// and updates the cache in place (no copy of the old rows).
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[S:.*]] = k3.state.read "conv_state"
// CHECK:         %[[CONV:.*]]:2 = k3.launch @k3_kernels::@short_conv_{{[0-9]+}}(%{{.*}}, %{{.*}}, %[[S]], %{{.*}})
// CHECK:         %[[COPY:.*]] = k3.launch @k3_kernels::@copy_{{[0-9]+}}(%[[CONV]]#1)
// CHECK:         k3.state.write "conv_state", %[[COPY]]
// CHECK:         %[[C:.*]] = k3.state.read "latent_cache"
// CHECK:         %[[APP:.*]] = k3.launch @k3_kernels::@latent_cache_append_{{[0-9]+}}(%[[C]],
// CHECK-NEXT:    k3.state.write "latent_cache", %[[APP]]

// Decode (one token per sequence): one thread reads and writes each
// window, so the convolution's state is updated in place too.
// CHECK-LABEL: func.func @forward_decode(
// CHECK:         %[[S:.*]] = k3.state.read "conv_state"
// CHECK:         %[[CONV:.*]]:2 = k3.launch @k3_kernels::@short_conv_{{[0-9]+}}(%{{.*}}, %{{.*}}, %[[S]], %{{.*}})
// CHECK-NEXT:    k3.state.write "conv_state", %[[CONV]]#1
// CHECK-NOT:     @copy_
// CHECK:         return

// The in-place append has one phase (the new rows), the other two.
// CHECK:         gpu.func @latent_cache_append_{{[0-9]+}}
// CHECK-SAME:      k3.phases = [@latent_cache_append_{{[0-9]+}}]

// On the CPU the same rule: the convolution's loop nest is not
// short_conv_rows, so only the cache is updated in place.
// CPU-LABEL: func.func @forward_decode(
// CPU:         k3.launch @k3_kernels::@copy_
// CPU:         k3.state.write "conv_state"

func.func @forward(%x: tensor<?x64xbf16> {k3.name = "x", k3.dims = array<i64: -1, 64>},
    %lat: tensor<?x24xf32> {k3.name = "lat", k3.dims = array<i64: -1, 24>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
    %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x64xbf16> {k3.name = "y"}) {
  %w = k3.weight "w" : tensor<64x1x4xf32>
  %s = k3.state.read "conv_state" : tensor<?x64x3xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>)
      -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  k3.state.write "conv_state", %fs : tensor<?x64x3xf32>
  %c = k3.state.read "latent_cache" : tensor<?x128x24xf32>
  %c1 = k3.latent_cache_append %c, %ctx, %lat cu_seqlens(%cu)
      : (tensor<?x128x24xf32>, tensor<?xi32>, tensor<?x24xf32>, tensor<?xi32>) -> tensor<?x128x24xf32>
  k3.state.write "latent_cache", %c1 : tensor<?x128x24xf32>
  return %y : tensor<?x64xbf16>
}

func.func @forward_decode(%x: tensor<?x64xbf16> {k3.name = "x", k3.dims = array<i64: -1, 64>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x64xbf16> {k3.name = "y"}) attributes {k3.decode} {
  %w = k3.weight "w" : tensor<64x1x4xf32>
  %s = k3.state.read "conv_state" : tensor<?x64x3xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>)
      -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  k3.state.write "conv_state", %fs : tensor<?x64x3xf32>
  return %y : tensor<?x64xbf16>
}

// -----

// The last tokens' attention (k3-last-token-logits): the state takes the
// append's cache, which the attention also reads; the append updates the
// state in place, and no copy launch runs.
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[C:.*]] = k3.state.read "last_cache"
// CHECK:         %[[ALL:.*]] = k3.launch @k3_kernels::@latent_cache_append_{{[0-9]+}}(%[[C]],
// CHECK-NOT:     @copy_
// CHECK:         k3.launch @k3_kernels::@latent_attention{{.*}}(%{{.*}}, %{{.*}}, %{{.*}}, %[[ALL]],
// CHECK-NOT:     @copy_
// CHECK:         k3.state.write "last_cache", %[[ALL]]
// CHECK:         return
// The attention's own cache result goes unread: the op is marked
// k3.unread_state, and its kernel writes none of that result (no copy of
// the cache's old rows into a buffer nothing reads).
// CHECK:         gpu.func @latent_attention_{{[0-9]+}}({{.*}}k3.unread_state

// CPU-LABEL: func.func @forward(
// CPU-NOT:     @copy_
// CPU:         k3.state.write "last_cache"

func.func @forward(%q: tensor<?x2x12xbf16> {k3.name = "q", k3.dims = array<i64: -2, 2, 12>},
    %lat: tensor<?x12xbf16> {k3.name = "lat", k3.dims = array<i64: -1, 12>},
    %lastlat: tensor<?x12xbf16> {k3.name = "last_lat", k3.dims = array<i64: -2, 12>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
    %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x2x4xf32> {k3.name = "o"}) {
  %kvb = k3.weight "kv_b" : tensor<24x8xbf16>
  %c = k3.state.read "last_cache" : tensor<?x96x12xbf16>
  %all = k3.latent_cache_append %c, %ctx, %lat cu_seqlens(%cu)
      : (tensor<?x96x12xbf16>, tensor<?xi32>, tensor<?x12xbf16>, tensor<?xi32>) -> tensor<?x96x12xbf16>
  %l, %c1 = k3.last_token_context %cu, %ctx : (tensor<?xi32>, tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>)
  %o, %co = k3.latent_attention %q, %lastlat, %kvb cache(%all, %l) cu_seqlens(%c1)
      {num_heads = 2 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 4 : i64, kv_lora_rank = 8 : i64, scale = 0.25 : f64}
      : (tensor<?x2x12xbf16>, tensor<?x12xbf16>, tensor<24x8xbf16>, tensor<?x96x12xbf16>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x4xf32>, tensor<?x96x12xbf16>)
  k3.state.write "last_cache", %all : tensor<?x96x12xbf16>
  return %o : tensor<?x2x4xf32>
}

// -----

// A result that is also returned takes the output's buffer: the state
// gets it through a copy, and the append copies the old rows itself.
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[APP:.*]] = k3.launch @k3_kernels::@latent_cache_append_{{[0-9]+}}(
// CHECK:         %[[COPY:.*]] = k3.launch @k3_kernels::@copy_{{[0-9]+}}(%[[APP]])
// CHECK:         k3.state.write "ret_cache", %[[COPY]]
// CHECK:         return %[[APP]]
// CPU-LABEL: func.func @forward(
// CPU:         k3.launch @k3_kernels::@copy_
// CPU:         k3.state.write "ret_cache"
func.func @forward(%lat: tensor<?x12xbf16> {k3.name = "lat", k3.dims = array<i64: -1, 12>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
    %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x96x12xbf16> {k3.name = "cache_out"}) {
  %c = k3.state.read "ret_cache" : tensor<?x96x12xbf16>
  %all = k3.latent_cache_append %c, %ctx, %lat cu_seqlens(%cu)
      : (tensor<?x96x12xbf16>, tensor<?xi32>, tensor<?x12xbf16>, tensor<?xi32>) -> tensor<?x96x12xbf16>
  k3.state.write "ret_cache", %all : tensor<?x96x12xbf16>
  return %all : tensor<?x96x12xbf16>
}

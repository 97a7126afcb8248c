//===- K3MLAOps.td - MLA prefill in the expanded form -------*- tablegen -*-===//
//
// `k3-mla-expand` rewrites a prefill's `k3.latent_attention` (every
// sequence starting empty) into the form prefill engines run: keys and
// values expanded once per token through kv_b (a GEMM), then flash
// attention with head dims Dn + Dr and Dv, and the latent cache written
// beside it. Per query and key the latent form spends 2 (R + Dr) + 2 R
// flops (1088 for Kimi), the expanded form 2 (Dn + Dr) + 2 Dv (320); the
// expansion costs 2 R H (Dn + Dv) per token, once (docs/mla.md). Decode
// keeps the latent form: one query per sequence reads each latent once.
// Verifiers in K3MLAOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef K3_MLA_OPS_TD
#define K3_MLA_OPS_TD

def K3_MLAPrefillAttentionOp : K3_Op<"mla_prefill_attention",
                                     [Pure, AttrSizedOperandSegments]> {
  let summary = "causal MLA attention on expanded keys and values";
  let description = [{
    `q [T, H, Dn + Dr]` holds each head's `[q_nope | q_pe]`; `kv [T, H,
    Dn + Dv]` each head's `kv_b(c_kv)` rows, `[k_nope | v]`; `latent [T, R +
    Dr]` the token's latent, whose last `Dr` columns are the un-rotated
    `k_pe` shared by all heads. Key `s` of head `h` is `[kv[s, h, :Dn] |
    latent[s, R:]]`, its value `kv[s, h, Dn:]`. Each token attends to the
    tokens of its own sequence (`cu_seqlens`) up to itself, with scale
    `scale`; the softmax is computed in f32. With `gate [T, H * Dv]` the
    output is multiplied by `sigmoid(gate)` (MLA's output gate, fused into
    the write).

    The result is `k3.latent_attention`'s for sequences that start empty
    (no cached latents).

    ```mlir
    %o = k3.mla_prefill_attention %q, %kv, %latent cu_seqlens(%cu)
        {qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64,
         v_head_dim = 128 : i64, scale = 0.0722 : f64}
        : (tensor<?x32x192xbf16>, tensor<?x32x256xbf16>, tensor<?x576xbf16>,
           tensor<?xi32>) -> tensor<?x32x128xbf16>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$kv,
                       K3_FloatTensor:$latent,
                       Optional<K3_FloatTensor>:$gate,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$qk_nope_head_dim, I64Attr:$qk_rope_head_dim,
                       I64Attr:$v_head_dim, F64Attr:$scale);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $kv `,` $latent (`gate` `(` $gate^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumHeads() {
      return cast<ShapedType>(getQ().getType()).getDimSize(1);
    }
  }];
}

def K3_LatentCacheAppendOp : K3_Op<"latent_cache_append", [Pure]> {
  let summary = "the latent cache with this call's latents appended";
  let description = [{
    `cache [N, L, W]` holds each sequence's earlier latents, `cache_lens
    [N]` how many; `latent [T, W]` the new tokens' latents, sequence `n`'s
    being rows `[cu_seqlens[n], cu_seqlens[n + 1])`. The result is the
    cache with those rows written from position `cache_lens[n]` on (rows
    past `L` are dropped: the runtime refuses contexts past the cache).

    ```mlir
    %c1 = k3.latent_cache_append %c, %lens, %latent cu_seqlens(%cu)
        : (tensor<?x128x24xf32>, tensor<?xi32>, tensor<?x24xf32>,
           tensor<?xi32>) -> tensor<?x128x24xf32>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$cache, K3_IndexTensor:$cache_lens,
                       K3_FloatTensor:$latent,
                       Optional<K3_IndexTensor>:$cu_seqlens);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $cache `,` $cache_lens `,` $latent (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_MLA_OPS_TD

//===- K3ContextOps.td - context parallelism's folds -------*- tablegen -*-===//
//
// Context parallelism (issue 19, docs/scaling.md, seed §7.5): every sequence
// of a prefill is cut into consecutive segments, one per rank of the `cp`
// group, and each rank runs the model on its segments. Per-token ops need
// nothing; the token mixers carry a state from one segment to the next, and
// both of Kimi's are affine in it. So each rank runs its segment from a
// known state, the ranks all-gather what their segments do to a state, and
// each folds the earlier ranks' effects into its incoming state. These ops
// are that fold, and the inputs that make a k3.kda give what it folds; k3-partition-context
// emits them around a k3.all_gather. MLA's attention reads the latents of
// every earlier token: each rank's share of the cache, summed over the
// group, gives every rank all of them. Verifiers in K3ContextOps.cpp, the
// reference in python/k3ref/kda_cp.py and k3ref.ops.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CONTEXT_OPS_TD
#define K3_CONTEXT_OPS_TD

def K3_KDAContextInputsOp : K3_Op<"kda_context_inputs", [Pure]> {
  let summary = "a KDA segment's values [v | 0] and initial state [0 | I]";
  let description = [{
    With these as its values and initial state, a `k3.kda` over a rank's
    segments (same q, k, g, beta, gate and cu_seqlens) runs with `K =
    key_dim` extra value columns, and because the recurrence is affine in
    its state one pass gives a segment everything context parallelism
    needs (seed §7.5): in the final state's first `V` columns the
    segment's final state from zero, `h`; in the last `K` its transition
    `M = T_n ⋯ T_1`, `T_t = (I − β k kᵀ) Diag(exp g)`; in the output's first
    `V` columns the outputs from a zero state `o⁰_t`, and in its last `K`
    the correction's factor `P_tᵀ q_t · scale`, `P_t = T_t ⋯ T_1`. It is an
    ordinary `k3.kda`, so every KDA lowering (the CPU's chunkwise form, the
    tensor-core kernels) runs it. `values [1, T, H, V + K]` has `v`'s
    element type; `initial_state [N, H, K, V + K]` is f32.
    `k3.kda_context_fold` turns the results into the outputs and final
    state.

    ```mlir
    %vx, %s0 = k3.kda_context_inputs %v, %cu {key_dim = 16 : i64}
        : (tensor<1x?x2x16xf32>, tensor<?xi32>)
        -> (tensor<1x?x2x32xf32>, tensor<?x2x16x32xf32>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$v, K3_IndexTensor:$cu_seqlens,
                       I64Attr:$key_dim);
  let results = (outs K3_FloatTensor:$values, K3_F32Tensor:$initial_state);
  let assemblyFormat = [{
    $v `,` $cu_seqlens attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAContextFoldOp : K3_Op<"kda_context_fold", [Pure]> {
  let summary = "a KDA segment's outputs and the sequence's final state, "
                "from every rank's segment";
  let description = [{
    `segment_output [1, T, H, V + K]` is the output of this rank's
    `k3.kda` over `k3.kda_context_inputs`; `segments [G, N, H, K, V + K]`
    every rank's final state of it, gathered over the `cp` group in rank
    order (`G = group_size`); `rank` (`tensor<1xi32>`) this rank's coordinate in it.
    Per sequence and head, with `(h_r, M_r)` the two parts of rank `r`'s
    entry, the state entering rank `r`'s segment is the fold

    ```
    S_0 = initial_state (or zero),   S_{r+1} = M_r S_r + h_r,
    ```

    and the results are `output[t] = o⁰_t + S_rankᵀ (P_tᵀ q_t · scale)`
    (`[1, T, H, V]`, the type of the `k3.kda` it replaces) and the final
    state `S_G` (`[N, H, K, V]`, f32): every rank holds the whole
    sequence's state afterwards. `cu_seqlens` are this rank's.

    ```mlir
    %o, %s = k3.kda_context_fold %so, %all, %rank initial_state(%s0)
        cu_seqlens(%cu) {group_size = 2 : i64}
        : (tensor<1x?x2x32xf32>, tensor<2x?x2x16x32xf32>, tensor<1xi32>,
           tensor<?x2x16x16xf32>, tensor<?xi32>)
        -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$segment_output, K3_F32Tensor:$segments,
                       K3_IndexTensor:$rank,
                       Optional<K3_F32Tensor>:$initial_state,
                       K3_IndexTensor:$cu_seqlens, I64Attr:$group_size);
  let results = (outs K3_FloatTensor:$output, K3_F32Tensor:$final_state);
  let assemblyFormat = [{
    $segment_output `,` $segments `,` $rank
    (`initial_state` `(` $initial_state^ `)`)?
    `cu_seqlens` `(` $cu_seqlens `)`
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_ShortConvTailOp : K3_Op<"short_conv_tail", [Pure]> {
  let summary = "the state a short convolution ends at from a zero state";
  let description = [{
    `result[n, c, i]` is input row `end_n − (W − 1) + i` of sequence `n`
    (`x [T, C]`, `cu_seqlens [N + 1]`) where that row is in the sequence,
    else zero: the final state of a `k3.short_conv` of kernel size `W` run
    from a zero state, without computing its outputs. Each rank's tails,
    all-gathered over `cp`, are what `k3.short_conv_context_fold` folds.

    ```mlir
    %tail = k3.short_conv_tail %x cu_seqlens(%cu) {kernel_size = 4 : i64}
        : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32x3xf32>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$cu_seqlens,
                       I64Attr:$kernel_size);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `cu_seqlens` `(` $cu_seqlens `)` attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_ShortConvContextFoldOp : K3_Op<"short_conv_context_fold", [Pure]> {
  let summary = "the short convolution's state entering this rank's segment, "
                "and after the last";
  let description = [{
    `tails [G, N, C, W − 1]` is every rank's `k3.short_conv_tail` (its
    convolution's final state from a zero state), gathered over the `cp`
    group in rank order;
    `cu_seqlens [G, N + 1]` every rank's cu_seqlens, gathered the same way;
    `rank` this rank's coordinate. A segment of `L` tokens takes the state
    `S` to the last `W − 1` rows of `[S; x]`: row `i` is `S[i + L]` where
    `i + L < W − 1`, else the segment's own row, which is the zero-state
    tail's. Folding from `conv_state` (or zero) gives `incoming`, the state
    before this rank's segment, and `final_state`, after the last rank's
    (`[N, C, W − 1]` each). A segment shorter than `W − 1` tokens keeps
    rows of the ranks before it, so every length is exact.

    ```mlir
    %in, %fs = k3.short_conv_context_fold %tails, %cus, %rank state(%s0)
        {group_size = 2 : i64}
        : (tensor<2x?x32x3xf32>, tensor<2x?xi32>, tensor<1xi32>,
           tensor<?x32x3xf32>) -> (tensor<?x32x3xf32>, tensor<?x32x3xf32>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$tails, K3_IndexTensor:$cu_seqlens,
                       K3_IndexTensor:$rank,
                       Optional<K3_FloatTensor>:$conv_state,
                       I64Attr:$group_size);
  let results = (outs K3_FloatTensor:$incoming, K3_FloatTensor:$final_state);
  let assemblyFormat = [{
    $tails `,` $cu_seqlens `,` $rank (`state` `(` $conv_state^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_ContextOffsetsOp : K3_Op<"context_offsets", [Pure]> {
  let summary = "where this rank's segment of each sequence starts";
  let description = [{
    `cu_seqlens [G, N + 1]` is every rank's cu_seqlens, gathered over the
    `cp` group in rank order, `rank` this rank's coordinate and
    `context_lens [N]` each sequence's cached tokens before the call.
    `result[n] = context_lens[n] + Σ_{r < rank} (cu[r, n + 1] − cu[r, n])`:
    the position of this rank's first token of sequence `n`, which MLA
    attends from (its cache lengths, k3-partition-context).

    ```mlir
    %at = k3.context_offsets %cus, %rank, %ctx {group_size = 2 : i64}
        : (tensor<2x?xi32>, tensor<1xi32>, tensor<?xi32>) -> tensor<?xi32>
    ```
  }];
  let arguments = (ins K3_IndexTensor:$cu_seqlens, K3_IndexTensor:$rank,
                       K3_IndexTensor:$context_lens, I64Attr:$group_size);
  let results = (outs K3_IndexTensor:$result);
  let assemblyFormat = [{
    $cu_seqlens `,` $rank `,` $context_lens attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LatentCacheSegmentOp : K3_Op<"latent_cache_segment", [Pure]> {
  let summary = "this rank's share of the MLA latent cache after the call";
  let description = [{
    `latent [T, R + Dr]` is this rank's tokens' latent rows, `latent_cache
    [N, L, R + Dr]` the cache before the call (the same on every rank),
    `cu_seqlens [G, N + 1]` every rank's cu_seqlens gathered over `cp`,
    `context_lens [N]` the cached tokens before the call. Row `p` of
    sequence `n` of the result is the cache's where `p < context_lens[n]`
    on rank 0 (zero on the others), this rank's latent row where `p` is
    one of its segment's positions (k3.context_offsets), and zero
    elsewhere. Summed over the group (`k3.all_reduce sum` over `cp`), the
    ranks' shares are the cache holding every segment's rows, which MLA's
    attention then reads on every rank: each rank's tokens attend to the
    rows of the segments before its own.

    ```mlir
    %share = k3.latent_cache_segment %latent, %cache, %cus, %rank, %ctx
        {group_size = 2 : i64}
        : (tensor<?x20xf32>, tensor<?x96x20xf32>, tensor<2x?xi32>,
           tensor<1xi32>, tensor<?xi32>) -> tensor<?x96x20xf32>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$latent, K3_FloatTensor:$latent_cache,
                       K3_IndexTensor:$cu_seqlens, K3_IndexTensor:$rank,
                       K3_IndexTensor:$context_lens, I64Attr:$group_size);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $latent `,` $latent_cache `,` $cu_seqlens `,` $rank `,` $context_lens
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_CONTEXT_OPS_TD

//===- K3MoEOps.td - MoE as dispatch, grouped GEMMs, combine -*- tablegen -*-===//
//
// `k3-moe-grouped` rewrites each prefill `k3.moe_experts` into these four
// ops, the form engines run MoE in: the routed (token, slot) pairs sorted by
// expert on the device, two GEMMs grouped over the experts' contiguous row
// segments, and a combine back to token order (docs/moe.md). Verifiers in
// K3MoEOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef K3_MOE_OPS_TD
#define K3_MOE_OPS_TD

def K3_MoEDispatchOp : K3_Op<"moe_dispatch", [Pure]> {
  let summary = "routed (token, slot) pairs in expert order, with offsets";
  let description = [{
    For the router's choice `indices [T, K]` (expert ids in `[0, E)`), the
    `T * K` pairs are numbered `p = t * K + j` and stably sorted by expert:
    expert `e`'s rows are `[offsets[e], offsets[e + 1])` of the sorted
    order, in increasing `p` (so the result does not depend on thread
    timing), and
    - `row_source [T, K]`, read flat: the pair `p` of each sorted row;
    - `positions [T, K]`: the sorted row of each pair (the inverse);
    - `offsets [E + 1]`: where each expert's rows start; `offsets[E] = T K`;
    - `tile_offsets [E + 1]`: where each expert's tiles of `tile_rows` rows
      start when each expert's segment is cut into tiles on its own:
      `tile_offsets[e + 1] - tile_offsets[e] = ceil(count_e / tile_rows)`.
      A grouped GEMM's block finds its expert from its tile index with a
      binary search over them.

    Every buffer is sized by `T K` rows (and `E + 1` offsets), whatever
    the routing: nothing can overflow.

    ```mlir
    %src, %pos, %off, %tiles = k3.moe_dispatch %idx {num_experts = 8 : i64,
        tile_rows = 128 : i64} : (tensor<?x2xi32>) -> (tensor<?x2xi32>,
        tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>)
    ```
  }];
  let arguments = (ins K3_IndexTensor:$indices, I64Attr:$num_experts,
                       I64Attr:$tile_rows);
  let results = (outs K3_IndexTensor:$row_source, K3_IndexTensor:$positions,
                      K3_IndexTensor:$offsets, K3_IndexTensor:$tile_offsets);
  let assemblyFormat = [{
    $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoELocalIdsOp : K3_Op<"moe_local_ids", [Pure]> {
  let summary = "the router's expert ids, relative to this rank's experts";
  let description = [{
    Expert parallelism over replicated tokens (docs/scaling.md): rank `r`
    of the `ep` group holds experts `[r n, (r + 1) n)` with `n =
    experts_per_rank`. `result[t, j] = indices[t, j] - r n` where that lies
    in `[0, n)`, else `-1`: a pair of another rank's expert, which every
    MoE kernel skips (it counts in no expert's segment and adds nothing).
    `rank` is the entry input that the runtime fills with the rank's
    coordinate in the group (`k3.rank.ep`), so one artifact serves every
    rank.

    ```mlir
    %local = k3.moe_local_ids %idx, %rank {experts_per_rank = 4 : i64}
        : (tensor<?x2xi32>, tensor<1xi32>) -> tensor<?x2xi32>
    ```
  }];
  let arguments = (ins K3_IndexTensor:$indices, K3_IndexTensor:$rank,
                       I64Attr:$experts_per_rank);
  let results = (outs K3_IndexTensor:$result);
  let assemblyFormat = [{
    $indices `,` $rank attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoEBucketOp : K3_Op<"moe_bucket", [Pure]> {
  let summary = "each routed pair's row in the bucket of the rank holding "
                "its expert";
  let description = [{
    Expert parallelism over ranks that own different tokens (the `cp`
    ranks; docs/scaling.md): rank `g` of `G` holds experts `[g n, (g + 1)
    n)`, `n = experts_per_rank`. Pairs `(t, j)` in token-then-choice order,
    with expert `e = indices[t, j]`, fill rank `e / n`'s bucket in that
    order: `rows[e / n, s] = input[t]`, `ids[e / n, s, 0] = e mod n` (the
    expert on that rank), `row_weights[e / n, s, 0] = weights[t, j]`, and
    `slots[t, j] = (e / n) C + s`. Slots past a bucket's pairs hold zero
    rows, id `-1` (which the MoE kernels skip) and weight 0. `C`, the
    bucket's capacity, is static: the pass sizes it so that no routing
    overflows (a rank's most tokens × min(top-k, n)). A `k3.all_to_all` along the
    bucket dimension sends each bucket to its rank; `k3.moe_unbucket`
    adds the rows that come back.

    ```mlir
    %rows, %ids, %w, %slots = k3.moe_bucket %x, %idx, %wts
        {experts_per_rank = 4 : i64}
        : (tensor<?x48xf32>, tensor<?x2xi32>, tensor<?x2xf32>)
        -> (tensor<2x320x48xf32>, tensor<2x320x1xi32>, tensor<2x320x1xf32>,
            tensor<?x2xi32>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$indices,
                       K3_FloatTensor:$weights, I64Attr:$experts_per_rank);
  let results = (outs K3_FloatTensor:$rows, K3_IndexTensor:$ids,
                      K3_F32Tensor:$row_weights, K3_IndexTensor:$slots);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoEUnbucketOp : K3_Op<"moe_unbucket", [Pure]> {
  let summary = "each token's routed rows back from the ranks' buckets";
  let description = [{
    `returned [G, C, D]` holds, after the `k3.all_to_all` back, the rows
    this rank's `k3.moe_bucket` sent out, each now its expert's weighted
    output. `result[t] = Σ_j returned[slots[t, j]]` (slots read flat as
    `G C` rows), summed in `j` order, so the combine is the same on every
    run.

    ```mlir
    %y = k3.moe_unbucket %back, %slots
        : (tensor<2x320x48xf32>, tensor<?x2xi32>) -> tensor<?x48xf32>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$returned, K3_IndexTensor:$slots);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $returned `,` $slots attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoEGroupedGLUOp : K3_Op<"moe_grouped_glu",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "gate and up projections of each sorted row by its expert";
  let description = [{
    For sorted row `r` (pair `p = row_source[r]`, token `t = p / K`,
    expert `e = indices[t, p % K]`): `h[r, i] = act(W1[e, i] . x[t],
    W3[e, i] . x[t])`, with `act` the GLU of `k3.moe_experts`. `h [T, K,
    I]` is read flat as `T K` rows. Accumulation in f32; `h` has the
    input's element type.

    With `shared(W1s, W3s)` (`k3-fuse-shared-expert`), the shared expert of
    the same input and width runs in the same launch: `h` is `[T, K + 1,
    I]`, and its rows `T K + t` are `act(W1s[i] . x[t], W3s[i] . x[t])`.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$indices,
                       K3_IndexTensor:$row_source, K3_IndexTensor:$offsets,
                       K3_IndexTensor:$tile_offsets, K3_WeightTensor:$w1,
                       K3_WeightTensor:$w3,
                       Optional<K3_WeightTensor>:$shared_w1,
                       Optional<K3_WeightTensor>:$shared_w3,
                       K3_GLUActivationAttr:$activation,
                       OptionalAttr<F64Attr>:$beta,
                       OptionalAttr<F64Attr>:$linear_beta);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $input `,` $indices `,` $row_source `,` $offsets `,`
    $tile_offsets `,` $w1 `,` $w3
    (`shared` `(` $shared_w1^ `,` $shared_w3 `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Whether the shared expert runs in this launch (rows T K + t).
    bool hasSharedExpert() { return static_cast<bool>(getSharedW1()); }
  }];
  let hasVerifier = 1;
}

def K3_MoEGroupedDownOp : K3_Op<"moe_grouped_down", [Pure]> {
  let summary = "down projection of each sorted row, times its routing weight";
  let description = [{
    `y[r, d] = weights[p] * (W2[e, d] . h[r])` for sorted row `r` (pair
    `p = row_source[r]`, expert `e = indices[p]`, both read flat). `y [T,
    K, D]` is read flat as `T K` rows. Accumulation in f32.

    With `shared(W2s)`, `h` and `y` are `[T, K + 1, ...]` and the shared
    expert's rows `T K + t` are `y[T K + t, d] = W2s[d] . h[T K + t]`
    (weight one).
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$indices,
                       K3_IndexTensor:$row_source, K3_IndexTensor:$offsets,
                       K3_IndexTensor:$tile_offsets, K3_F32Tensor:$weights,
                       K3_WeightTensor:$w2,
                       Optional<K3_WeightTensor>:$shared_w2);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $row_source `,` $offsets `,` $tile_offsets `,`
    $weights `,` $w2 (`shared` `(` $shared_w2^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Whether the shared expert runs in this launch (rows T K + t).
    bool hasSharedExpert() { return static_cast<bool>(getSharedW2()); }
  }];
  let hasVerifier = 1;
}

def K3_MoECombineOp : K3_Op<"moe_combine", [Pure]> {
  let summary = "each token's expert outputs summed in slot order";
  let description = [{
    `result[t, d] = sum_j rows[positions[t, j], d]` over `j = 0 .. K - 1`
    in that order (rows `[T, K, D]` read flat): a gather, not a scatter
    with atomics, so every run adds in the same order and gives the same
    bits. Rows `[T, K + 1, D]` carry the shared expert's output in rows
    `T K + t` (`k3-fuse-shared-expert`); it is added last. An `addend`
    `[T, D]` (`k3-fuse-combine-add`: the prefill's shared expert, added to
    the routed sum by a `k3.add` before) is added to that sum rounded to
    the result's type, as the `k3.add` saw it: the same values, one launch
    and one write and read of `[T, D]` fewer.
  }];
  let arguments = (ins K3_FloatTensor:$rows, K3_IndexTensor:$positions,
                       Optional<K3_FloatTensor>:$addend);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $rows `,` $positions (`addend` `(` $addend^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoECombineAddRMSNormOp
    : K3_Op<"moe_combine_add_rms_norm", [Pure]> {
  let summary = "an MoE combine, the residual add after it and the RMSNorm "
                "of the sum";
  let description = [{
    `c = k3.moe_combine(rows, positions) addend(addend)` rounded to the
    type of `sum`, then `sum = input + c` and `result = weight * sum /
    sqrt(mean(sum^2) + epsilon)` over the last dimension, as
    `k3.add_rms_norm(input, c, weight)` computes them. The CPU loop nest
    gives the two ops' bits; the CUDA kernel's `sum` is theirs too, and its
    `result` agrees to rounding (its sum of squares adds in another order
    than the norm kernel's).

    `k3-fuse-combine-rms-norm` forms it where an MoE layer's combine feeds
    the next layer's pre-norm residual add alone: one launch per MoE layer
    fewer, and the combine's [T, D] output is neither written nor read
    back (the combine's block already holds the token's whole row).

    ```mlir
    %h, %y = k3.moe_combine_add_rms_norm %rows, %pos, %x, %w
        addend(%shared) {epsilon = 1.0e-5 : f64}
        : (tensor<?x8x64xbf16>, tensor<?x8xi32>, tensor<?x64xbf16>,
           tensor<64xbf16>, tensor<?x64xbf16>)
        -> (tensor<?x64xbf16>, tensor<?x64xbf16>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$rows, K3_IndexTensor:$positions,
                       K3_FloatTensor:$input, K3_FloatTensor:$weight,
                       Optional<K3_FloatTensor>:$addend, F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$sum, K3_FloatTensor:$result);
  let assemblyFormat = [{
    $rows `,` $positions `,` $input `,` $weight
    (`addend` `(` $addend^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoETopKOp : K3_Op<"moe_topk", [Pure]> {
  let summary = "the router's selection from its logits";
  let description = [{
    `k3.moe_router` after its product: for `logits [T, E]` (f32, `x W^T`),
    `s = score(logits)`; the `top_k` experts are chosen on `s +
    correction_bias` (the bias only affects the choice; ties go to the lower
    expert id), their weights are the unbiased `s`, renormalised to sum to
    one when `renormalize`, then multiplied by `routed_scaling_factor`.
    Results: expert ids `[T, top_k]` (i32) and weights `[T, top_k]` (f32).
    With `n_group` > 1 the choice is group-limited as in `k3.moe_router`:
    the `E / n_group` contiguous experts of a group score the sum of their
    two best biased scores (with a bias) or their best score (without);
    the `topk_group` best groups stay eligible (ties: the lower group id),
    the others' experts are out of the choice (docs/moe.md).
    `k3-split-router` writes `k3.moe_router` as a `k3.linear` and this op,
    so that the product runs on the GEMM kernels.

    ```mlir
    %idx, %wts = k3.moe_topk sigmoid %logits bias(%b) {top_k = 8 : i64,
        renormalize, routed_scaling_factor = 2.446 : f64}
        : (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x8xi32>,
        tensor<?x8xf32>)
    ```
  }];
  let arguments = (ins K3_F32Tensor:$logits,
                       Optional<K3_F32Tensor>:$correction_bias,
                       I64Attr:$top_k, K3_RouterScoreAttr:$score,
                       UnitAttr:$renormalize,
                       F64Attr:$routed_scaling_factor,
                       DefaultValuedAttr<I64Attr, "1">:$n_group,
                       DefaultValuedAttr<I64Attr, "1">:$topk_group);
  let results = (outs K3_IndexTensor:$indices, K3_F32Tensor:$weights);
  let assemblyFormat = [{
    $score $logits (`bias` `(` $correction_bias^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_MOE_OPS_TD

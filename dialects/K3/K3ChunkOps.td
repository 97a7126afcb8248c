//===- K3ChunkOps.td - chunkwise KDA ops -------------------*- tablegen -*-===//
//
// The chunk-level form of the KDA core (docs/kda-chunkwise.md), produced by
// --k3-kda-chunkwise from k3.kda. Every intermediate is token-indexed
// ([B, T, H, ...]: chunk c of a sequence is its rows [cC, cC + C), a chunk
// matrix is stored as C columns per row) or per sequence ([N, ...]), so no
// dynamic "number of chunks" dimension exists: the memory planner sees only
// T, N and N + 1. With cu_seqlens (then B = 1) chunks restart at every
// sequence start and the last chunk of a sequence is masked at its end.
//
// Parallelism (what a GPU lowering maps to blocks): prepare, gram, output
// are token-parallel; tri_solve / tri_inverse / chunk_tril_matmul are
// chunk-parallel (one block per chunk and head); kda_chunk_state is the only
// serial chain: over the chunks of a sequence, parallel over (sequence,
// head, value column). The segment ops split that chain for sequence
// parallelism.
//
//===----------------------------------------------------------------------===//

#ifndef K3_CHUNK_OPS_TD
#define K3_CHUNK_OPS_TD

def K3_KDAChunkPrepareOp : K3_Op<"kda_chunk_prepare",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "KDA chunk prologue: L2 norm, beta, cumulative in-chunk log-decay";
  let description = [{
    Token-parallel. From the operands of `k3.kda` computes, all f32:

    * `q_scaled = scale * l2norm(q)` and `k_norm = l2norm(k)` (without
      `use_qk_l2norm`: no normalisation);
    * `G_cum [B, T, H, K]`: the cumulative log-decay *inside the chunk* of the
      token, `G_i = sum_{chunk start <= j <= i} g_j` (the gate computed
      in-op with `gate_kind`, as k3.kda does);
    * `k_gamma = k_norm * exp(G)` (the right-hand side `K ⊙ Γ` of the UT
      transform; it only underflows, never overflows, since G <= 0);
    * `beta_out` (sigmoid applied with `use_beta_sigmoid`).

    Chunks start at every sequence start (cu_seqlens) and every
    `chunk_size` tokens after it.
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$k,
                       K3_FloatTensor:$g, K3_FloatTensor:$beta,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       Optional<K3_FloatTensor>:$A_log,
                       Optional<K3_FloatTensor>:$dt_bias,
                       I64Attr:$chunk_size, F64Attr:$scale,
                       UnitAttr:$use_qk_l2norm, UnitAttr:$use_beta_sigmoid,
                       OptionalAttr<K3_DecayGateKindAttr>:$gate_kind,
                       OptionalAttr<F64Attr>:$lower_bound);
  let results = (outs K3_F32Tensor:$q_scaled, K3_F32Tensor:$k_norm,
                      K3_F32Tensor:$G_cum, K3_F32Tensor:$k_gamma,
                      K3_F32Tensor:$beta_out);
  let assemblyFormat = [{
    $q `,` $k `,` $g `,` $beta
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    (`gate_params` `(` $A_log^ `,` $dt_bias `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAChunkGramOp : K3_Op<"kda_chunk_gram",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "decayed in-chunk Gram matrix (L of the UT transform, or M)";
  let description = [{
    Token-parallel. For token `t` at row `i` of its chunk, column `c` of the
    result is chunk column `j = c`:

    ```
    A[t, c] = row_scale_i * sum_d x_id y_jd exp(G_id - G_jd)   j < i (strict)
                                                             or j <= i
            + 1 if unit_diagonal and j == i;  0 elsewhere (and past the
              end of the chunk / sequence).
    ```

    With `k3.kda_chunk_gram %k, %k, %G row_scale(%beta) {strict,
    unit_diagonal}` this is `I + diag(beta) L`; with `%q_scaled, %k` it is
    the output mask `M`.

    **Numerical range.** Without `gate_lower_bound` the exponent is formed
    pairwise, `exp(G_i - G_j)` with `G_i - G_j <= 0` (always finite; what an
    unbounded softplus gate needs). With `gate_lower_bound = lb` the op uses
    the *tile-factored* form that a tensor-core kernel needs, where the
    exponent is split through the last token `r` of `j`'s tile:
    `exp(G_i - G_r) * exp(G_r - G_j)` so that the block is a product of
    `x ⊙ e^{G - G_r}` and `y ⊙ e^{G_r - G}`. Both factors stay within
    `e^{|lb| (tile_size - 1)}` *only because* every log-decay is `>= lb`;
    the verifier requires `|lb| * (tile_size - 1) <= 88` (f32 exp range).
    Never `γ_i / γ_j` over a whole chunk (e^320 at lb = -5 over 64 tokens).
  }];
  let arguments = (ins K3_F32Tensor:$x, K3_F32Tensor:$y, K3_F32Tensor:$G,
                       Optional<K3_F32Tensor>:$row_scale,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size, I64Attr:$tile_size,
                       UnitAttr:$strict, UnitAttr:$unit_diagonal,
                       OptionalAttr<F64Attr>:$gate_lower_bound);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = [{
    $x `,` $y `,` $G (`row_scale` `(` $row_scale^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_TriSolveOp : K3_Op<"tri_solve", [Pure, AttrSizedOperandSegments]> {
  let summary = "per-chunk unit-lower-triangular solve A X = diag(s) R";
  let description = [{
    Chunk-parallel. `A [B, T, H, C]` holds, per chunk, a unit lower
    triangular C x C matrix (token-indexed rows; only the strictly lower
    part is read), `rhs [B, T, H, D]`, optional `row_scale [B, T, H]`.
    `mode = "forward"`: token-by-token forward substitution over the whole
    chunk; `mode = "blocked"` (from --k3-tile-tri-solve, with `tile_size`):
    per tile a, `R_a -= sum_{b<a} A_ab X_b` (block products) then forward
    substitution inside the diagonal tile.
  }];
  let arguments = (ins K3_F32Tensor:$A, K3_FloatTensor:$rhs,
                       Optional<K3_F32Tensor>:$row_scale,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size, StrAttr:$mode,
                       OptionalAttr<I64Attr>:$tile_size);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = [{
    $A `,` $rhs (`row_scale` `(` $row_scale^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_TriInverseOp : K3_Op<"tri_inverse", [Pure]> {
  let summary = "per-chunk blockwise inverse of a unit-lower-triangular matrix";
  let description = [{
    Chunk-parallel. Inverts each diagonal `tile_size` tile by forward
    substitution on the identity, then combines off-diagonal blocks with
    products: `Ai_ab = -Ai_aa sum_{b<=m<a} A_am Ai_mb`. Result has A's
    layout (`[B, T, H, C]`, lower triangular incl. the diagonal).
  }];
  let arguments = (ins K3_F32Tensor:$A, Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size, I64Attr:$tile_size);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = [{
    $A (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_ChunkTrilMatmulOp : K3_Op<"chunk_tril_matmul",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "per-chunk lower-triangular product Y = A diag(s) X";
  let description = [{
    `Y_i = sum_{j <= i in the chunk} A_ij s_j X_j` (the block-inverse solve
    `X = A^{-1} diag(beta) R` is `tri_inverse` followed by this op).
  }];
  let arguments = (ins K3_F32Tensor:$A, K3_FloatTensor:$x,
                       Optional<K3_F32Tensor>:$row_scale,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = [{
    $A `,` $x (`row_scale` `(` $row_scale^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAChunkStateOp : K3_Op<"kda_chunk_state",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "KDA state passing: the serial chain over chunks";
  let description = [{
    Serial over the chunks of a sequence, parallel over (sequence, head,
    value column j). With the running state column S_0 per chunk:

    ```
    v_new    = U - W S_0                          (Ṽ, token-indexed)
    o_inter  = (q_scaled ⊙ e^G) S_0               (inter-chunk output)
    S_0     <- Diag(e^{G_last}) S_0 + (k_norm ⊙ e^{G_last - G})^T v_new
    ```

    and the final state [N, H, K, V]. The exponents are all <= 0.
    With `segment_starts [N, S, H, K, V]` (from k3.kda_segment_scan) each
    of the `num_segments` segments of a sequence starts from its own state
    and the walks are independent (sequence parallelism); otherwise one
    walk per sequence starts from `initial_state` (or zero).
  }];
  let arguments = (ins K3_F32Tensor:$U, K3_F32Tensor:$W,
                       K3_F32Tensor:$k_norm, K3_F32Tensor:$q_scaled,
                       K3_F32Tensor:$G,
                       Optional<K3_StateTensor>:$initial_state,
                       Optional<K3_F32Tensor>:$segment_starts,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size,
                       OptionalAttr<I64Attr>:$num_segments);
  let results = (outs K3_F32Tensor:$v_new, K3_F32Tensor:$o_inter,
                      K3_StateTensor:$final_state);
  let assemblyFormat = [{
    $U `,` $W `,` $k_norm `,` $q_scaled `,` $G
    (`initial_state` `(` $initial_state^ `)`)?
    (`segment_starts` `(` $segment_starts^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAChunkOutputOp : K3_Op<"kda_chunk_output", [Pure]> {
  let summary = "KDA chunk epilogue: O = o_inter + M Ṽ";
  let description = [{
    Token-parallel: `O_i = o_inter_i + sum_{j <= i in the chunk} M_ij
    v_new_j`, stored in the element type of k3.kda's output.
  }];
  let arguments = (ins K3_F32Tensor:$M, K3_F32Tensor:$v_new,
                       K3_F32Tensor:$o_inter,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size);
  let results = (outs K3_FloatTensor:$output);
  let assemblyFormat = [{
    $M `,` $v_new `,` $o_inter (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDASegmentSummaryOp : K3_Op<"kda_segment_summary", [Pure]> {
  let summary = "per-segment K x K transition and K x V contribution";
  let description = [{
    Splits each sequence's chunks into `num_segments` contiguous segments
    (segment s holds chunks [floor(s nc / S), floor((s+1) nc / S))) and,
    independently per (sequence, segment, head, column), composes the chunk
    maps `S -> A_c S + b_c`, `A_c = Diag(e^{G_last}) - (k ⊙ e^{G_last-G})^T W`,
    `b_c = (k ⊙ e^{G_last-G})^T U`: results `transition [N, S, H, K, K]` and
    `contribution [N, S, H, K, V]` (the zero-start end state).
  }];
  let arguments = (ins K3_F32Tensor:$U, K3_F32Tensor:$W,
                       K3_F32Tensor:$k_norm, K3_F32Tensor:$G,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$chunk_size, I64Attr:$num_segments);
  let results = (outs K3_F32Tensor:$transition, K3_F32Tensor:$contribution);
  let assemblyFormat = [{
    $U `,` $W `,` $k_norm `,` $G (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDASegmentScanOp : K3_Op<"kda_segment_scan", [Pure]> {
  let summary = "short scan of segment states: S_{s+1} = A_s S_s + b_s";
  let description = [{
    Serial over the `S` segments, parallel over (sequence, head, value
    column). Result: the start state of every segment `[N, S, H, K, V]`
    (segment 0 starts from `initial_state` or zero).
  }];
  let arguments = (ins K3_F32Tensor:$transition, K3_F32Tensor:$contribution,
                       Optional<K3_StateTensor>:$initial_state);
  let results = (outs K3_F32Tensor:$starts);
  let assemblyFormat = [{
    $transition `,` $contribution (`initial_state` `(` $initial_state^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------===//
// The tensor-core form (CUDA): per-token packed bf16 operands, then the
// serial chain. Produced by --k3-kda-mma-split; docs/kda-cuda.md.
//===----------------------------------------------------------------------===//

def K3_KDAMMAOperandsOp : K3_Op<"kda_mma_operands", [Pure]> {
  let summary = "KDA chunk operands for the tensor-core chain (16-token chunks)";
  let description = [{
    Token-parallel (one block per 16-token window). Computes what the chain
    `k3.kda_mma_recurrence` needs of every chunk of 16 tokens, independent
    of the state, and packs it per token in `packed [B, T, H, 5K/2 + 16]`
    of i32 words (bf16 pairs unless noted), with the chunk's cumulative
    log-decay G (gate in-op), q = scale * l2norm(q), k = l2norm(k):

    | words                  | content of the row of token t              |
    | ---------------------- | ------------------------------------------ |
    | [0, K/2)               | q_t e^{G_t}                                |
    | [K/2, K)               | k_t e^{G_t}                                |
    | [K, 3K/2)              | k_t e^{G_C - G_t} (C: the chunk's last token)|
    | [3K/2, 3K/2 + 8)       | row t of P = (I + L)^-1 Diag(beta), 16 bf16 |
    | [3K/2 + 8, 3K/2 + 16)  | row t of Aqk (q_t . e^{G_t - G_s} k_s, s <= t) |
    | [3K/2 + 16, 5K/2 + 16) | e^{G_C} as f32, on the chunk's last row only |

    with `L[t][s] = beta_t k_t . (e^{G_t - G_s} k_s)` for s < t. The gate
    is `gate_kind`'s (k3.kda's formulas):
    * `lower_bounded_sigmoid` (default) with `lower_bound` in the gate's
      range [-5, 0) (dialects/K3/DecayGate.h): L and Aqk on the tensor
      cores, factored about the chunk's middle token (each factor stays
      inside the f32 range up to |lb| = 5.5);
    * `neg_softplus` (Kimi Linear; no `lower_bound`): the per-token decay
      is unbounded, so no factorisation stays in range; L and Aqk are
      exact f32 sums over the channels of `e^{G_t - G_s}`, formed as
      products of the per-token decays (every factor <= 1).
    K a multiple of 64 up to 256, and cu_seqlens or B = 1.
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$k,
                       K3_FloatTensor:$g, K3_FloatTensor:$beta,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       K3_FloatTensor:$A_log, K3_FloatTensor:$dt_bias,
                       F64Attr:$scale, UnitAttr:$use_qk_l2norm,
                       UnitAttr:$use_beta_sigmoid,
                       DefaultValuedAttr<K3_DecayGateKindAttr,
                           "::mlir::k3::DecayGateKind::lower_bounded_sigmoid">:$gate_kind,
                       OptionalAttr<F64Attr>:$lower_bound);
  let results = (outs TensorOf<[I32]>:$packed);
  let assemblyFormat = [{
    $q `,` $k `,` $g `,` $beta
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    `gate_params` `(` $A_log `,` $dt_bias `)`
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAMMARecurrenceOp : K3_Op<"kda_mma_recurrence",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "KDA chain over 16-token chunks on the tensor cores";
  let description = [{
    Serial over the chunks of a sequence, parallel over (sequence, head,
    16-column value slices). With the `packed` operands of
    `k3.kda_mma_operands`
    and the state S_0 at a chunk's start (transposed per warp: S^T rows are
    value columns):

    ```
    delta = P (v - (k e^G) S_0)
    o     = (q e^G) S_0 + Aqk delta
    S_0  <- Diag(e^{G_C}) S_0 + (k e^{G_C - G})^T delta
    ```

    every product an `mma.sync` (bf16 operands, f32 accumulation); the
    state stays in f32 registers for the whole sequence.
  }];
  let arguments = (ins TensorOf<[I32]>:$packed, K3_FloatTensor:$v,
                       Optional<K3_StateTensor>:$initial_state,
                       Optional<K3_IndexTensor>:$cu_seqlens);
  let results = (outs K3_FloatTensor:$output, K3_StateTensor:$final_state);
  let assemblyFormat = [{
    $packed `,` $v
    (`initial_state` `(` $initial_state^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_CHUNK_OPS_TD

//===- K3FusedOps.td - graph-level fusions -----------------*- tablegen -*-===//
//
// Ops that graph passes create, not model descriptions: the selection of
// each sequence's last token before the LM head (k3-last-token-logits),
// the linears of one input as one op (k3-group-linears), RMSNorm fused
// with the residual add before it (k3-fuse-add-rms-norm) and with the
// slices around it (k3-fuse-partial-rms-norm).
// Verifiers in K3FusedOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef K3_FUSED_OPS_TD
#define K3_FUSED_OPS_TD

def K3_LastTokensOp : K3_Op<"last_tokens", [Pure]> {
  let summary = "the row of each sequence's last token";
  let description = [{
    For packed activations `input [T, D]` and `cu_seqlens [N + 1]`:
    `result[n, :] = input[cu_seqlens[n + 1] - 1, :]`, one row per sequence
    (`[N, D]`); an empty sequence gives a row of zeros.

    `k3-last-token-logits` puts it before the final norm and the LM head:
    in prefill only the last token of each sequence needs logits (the
    runtime samples from them), so the head runs on N rows instead of T.

    ```mlir
    %last = k3.last_tokens %h, %cu_seqlens
        : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$cu_seqlens);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $cu_seqlens attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LastTokenContextOp : K3_Op<"last_token_context", [Pure]> {
  let summary = "each sequence's context before its last token, one row each";
  let description = [{
    For `cu_seqlens [N + 1]` and `context_lens [N]` (each sequence's cached
    tokens before the call): `last_context_lens[n] = context_lens[n] +
    max(cu_seqlens[n + 1] - cu_seqlens[n] - 1, 0)`, the cache position of
    sequence `n`'s last token of the call, and `last_cu_seqlens = [0, 1,
    ..., N]`, one row per sequence.

    `k3-last-token-logits` uses them to run the last layer's MLA
    attention for each sequence's last token alone, in the latent form of
    a decode step: the call's latents are appended to the cache first, and
    the last token attends to the `last_context_lens[n]` rows before it
    (an empty sequence's zero row attends from its context length).

    ```mlir
    %lens, %cu = k3.last_token_context %cu_seqlens, %context_lens
        : (tensor<?xi32>, tensor<?xi32>) -> (tensor<?xi32>, tensor<?xi32>)
    ```
  }];
  let arguments = (ins K3_IndexTensor:$cu_seqlens,
                       K3_IndexTensor:$context_lens);
  let results = (outs K3_IndexTensor:$last_context_lens,
                      K3_IndexTensor:$last_cu_seqlens);
  let assemblyFormat = [{
    $cu_seqlens `,` $context_lens attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LinearGroupOp : K3_Op<"linear_group", [Pure]> {
  let summary = "linear projections of one input, in one kernel";
  let description = [{
    `results[i][..., o] = sum_k input[..., k] * weights[i][o, k]`: the
    `k3.linear` of each weight (`nn.Linear` layout `[out, in]`, f32
    accumulation), all reading the same input. Results may differ in
    element type (each is stored in its own).

    `k3-group-linears` forms it in the decode entry from the `k3.linear`
    ops that share an input (a KDA layer's q, k, v, f_a, b and g_a
    projections): a decode step's time there is weight bytes and launches,
    and one launch over all the weights' rows reads the input once and
    fills the GPU with rows instead of six short kernels.

    ```mlir
    %q, %k = k3.linear_group %x, %wq, %wk
        : (tensor<?x64xbf16>, tensor<128x64xbf16>, tensor<32x64xbf16>)
        -> (tensor<?x128xbf16>, tensor<?x32xbf16>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input,
                       Variadic<K3_FloatTensor>:$weights);
  let results = (outs Variadic<K3_FloatTensor>:$results);
  let assemblyFormat = [{
    $input `,` $weights attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_ShortConvGroupOp : K3_Op<"short_conv_group",
    [SameVariadicOperandSize, SameVariadicResultSize]> {
  let summary = "short convolutions of several inputs, in one kernel";
  let description = [{
    `results[i], final_states[i]` are the `k3.short_conv` of `inputs[i]`
    with `weights[i]` and `conv_states[i]` (each its own channel count; the
    same tokens, sequences and kernel size for all).

    `k3-group-short-convs` forms it in the decode entry from a KDA layer's
    q, k and v convolutions: there each is a launch of a few microseconds
    whose time is its latency, and one launch covers the three.

    ```mlir
    %q, %k, %sq, %sk = k3.short_conv_group (%xq, %xk) weights(%wq, %wk)
        state(%cq, %ck) cu_seqlens(%cu) {kernel_size = 4 : i64}
        : (...) -> (...)
    ```
  }];
  let arguments = (ins Variadic<K3_FloatTensor>:$inputs,
                       Variadic<K3_FloatTensor>:$weights,
                       Variadic<K3_FloatTensor>:$conv_states,
                       K3_IndexTensor:$cu_seqlens,
                       I64Attr:$kernel_size);
  let results = (outs Variadic<K3_FloatTensor>:$results,
                      Variadic<K3_FloatTensor>:$final_states);
  let assemblyFormat = [{
    `(` $inputs `)` `weights` `(` $weights `)` `state` `(` $conv_states `)`
    `cu_seqlens` `(` $cu_seqlens `)` attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_AddRMSNormOp : K3_Op<"add_rms_norm", [Pure]> {
  let summary = "residual add fused with the RMSNorm of its sum";
  let description = [{
    `sum = input + residual` and `result = weight * sum / sqrt(mean(sum^2)
    + epsilon)` over the last dimension, in one pass over the row: the sum
    is stored once (the residual stream's next value) and normalised from
    registers (f32 statistics, as `k3.rms_norm`).

    `k3-fuse-add-rms-norm` forms it from `k3.add` followed by `k3.rms_norm`
    of the sum, the pre-norm residual of every decoder layer.

    ```mlir
    %h, %y = k3.add_rms_norm %x, %r, %w {epsilon = 1.0e-5 : f64}
        : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>)
        -> (tensor<?x64xf32>, tensor<?x64xf32>)
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$residual,
                       K3_FloatTensor:$weight, F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$sum, K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $residual `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_PartialRMSNormOp : K3_Op<"partial_rms_norm", [Pure]> {
  let summary = "RMSNorm of each row's leading columns, the others copied";
  let description = [{
    For `input [..., N]` and `weight [R]` (0 < R < N): `result[..., :R] =
    weight * x / sqrt(mean(x^2) + epsilon)` with `x = input[..., :R]` (the
    mean over the R columns, f32 statistics as `k3.rms_norm`), and
    `result[..., R:] = input[..., R:]`.

    MLA's down-projection output is `[c_kv (R) | k_pe]`: only `c_kv` is
    normalised, and the latent cache and attention take both side by side.
    `k3-fuse-partial-rms-norm` forms this op from
    `concat(rms_norm(input[..., :R]), input[..., R:])`: one kernel where
    the graph had a norm, two slices and a concatenation.

    ```mlir
    %latent = k3.partial_rms_norm %kv, %w {epsilon = 1.0e-6 : f64}
        : (tensor<?x576xbf16>, tensor<512xbf16>) -> tensor<?x576xbf16>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$weight,
                       F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_GLUGateUpOp : K3_Op<"glu_gate_up", [Pure]> {
  let summary = "the gate and up projections of a GLU MLP, activated";
  let description = [{
    `h[t, i] = act(W_gate[i] . x[t], W_up[i] . x[t])` for `x [T, D]` and
    `w_gate, w_up [I, D]`, with `act` as in `k3.glu_mlp`; accumulation in
    f32, `h [T, I]` in the input's element type. `k3-split-glu-mlp` makes
    `k3.glu_mlp` this op and a `k3.linear` (the down projection), so that
    both run as GEMMs (docs/moe.md).
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$w_gate,
                       K3_FloatTensor:$w_up, K3_GLUActivationAttr:$activation,
                       OptionalAttr<F64Attr>:$beta,
                       OptionalAttr<F64Attr>:$linear_beta);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $input `,` $w_gate `,` $w_up attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_FUSED_OPS_TD

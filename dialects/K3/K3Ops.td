//===- K3Ops.td - K3 dialect operations --------------------*- tablegen -*-===//
//
// Every op has value semantics and a C++ verifier (K3Ops.cpp) that checks
// ranks, shapes, element types and attribute ranges. Shapes may be dynamic
// (`?`) in the token and sequence dimensions; verifiers compare only the
// dimensions that are static on both sides.
//
//===----------------------------------------------------------------------===//

#ifndef K3_OPS_TD
#define K3_OPS_TD

include "dialects/K3/K3Dialect.td"
include "dialects/K3/K3KernelAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def K3_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
// A weight as stored: a float tensor, or MXFP4 (`f4E2M1FN`: OCP MX E2M1
// values, one E8M0 scale per 32 consecutive elements of the last dimension;
// docs/mxfp4.md). Only the ops that read MXFP4 weights take this type.
def K3_WeightTensor : RankedTensorOf<[F32, BF16, F16, F4E2M1FN]>;
def K3_F32Tensor : RankedTensorOf<[F32]>;
// A recurrent state carried between calls (the KDA state): f32, or bf16
// where `kda-state-dtype=bf16` halves a decode step's state bytes
// (docs/precision.md). Kernels compute in f32 either way.
def K3_StateTensor : RankedTensorOf<[F32, BF16]>;
def K3_IndexTensor : RankedTensorOf<[I32]>;

//===----------------------------------------------------------------------===//
// Resources: weights and decode state
//===----------------------------------------------------------------------===//

def K3_WeightOp : K3_Op<"weight", [Pure]> {
  let summary = "a named model weight";
  let description = [{
    Refers to a tensor of the checkpoint by its own name (K3-SPEC.md names,
    e.g. `model.layers.0.self_attn.q_proj.weight`). The runtime binds it to
    the loaded (or deterministically random) weight of that name.

    A name containing `{expert}` denotes a stack: the leading dimension of
    the result enumerates experts and the placeholder is replaced by the
    expert index, so 896 experts are one op rather than 896.

    An `f4E2M1FN` weight is MXFP4 (routed experts of K3's checkpoint):
    logically the shape shown; stored as the checkpoint's `<name>_packed`
    (u8, two E2M1 codes a byte) followed by `<name>_scale` (u8, one E8M0
    scale per 32 elements of the last dimension); see docs/mxfp4.md.

    ```mlir
    %wq = k3.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xbf16>
    %w1 = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<8x32x16xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs K3_WeightTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when the name holds the `{expert}` placeholder.
    bool isExpertStack();
  }];
}

def K3_StateReadOp : K3_Op<"state.read", [MemoryEffects<[MemRead]>]> {
  let summary = "read per-sequence decode state";
  let description = [{
    Reads the persistent decode state called `name` for the sequences of
    the current batch (leading dimension: one entry per sequence). The
    runtime keeps one slot per sequence, sized by the compiled `max-seqs`
    bound; a fresh sequence reads zeros.
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def K3_StateWriteOp : K3_Op<"state.write", [MemoryEffects<[MemWrite]>]> {
  let summary = "write per-sequence decode state";
  let arguments = (ins StrAttr:$name, K3_FloatTensor:$value);
  let assemblyFormat = "$name `,` $value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dense building blocks
//===----------------------------------------------------------------------===//

def K3_EmbeddingOp : K3_Op<"embedding", [Pure]> {
  let summary = "token embedding lookup";
  let description = [{
    `result[t, :] = table[ids[t], :]` for token ids `[T]` and a table
    `[vocab, hidden]`. Ids outside the vocabulary are rejected by the
    runtime before any kernel runs.
  }];
  let arguments = (ins K3_IndexTensor:$ids, K3_FloatTensor:$table);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$ids `,` $table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_RMSNormOp : K3_Op<"rms_norm", [Pure]> {
  let summary = "RMSNorm over the last dimension";
  let description = [{
    `w * x / sqrt(mean(x^2) + epsilon)` over the last dimension; the mean
    is taken in f32 whatever the storage type (K3-SPEC.md preamble).
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$weight,
                       F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_GatedRMSNormOp : K3_Op<"gated_rms_norm", [Pure]> {
  let summary = "per-head RMSNorm multiplied by a sigmoid gate (KDA output)";
  let description = [{
    For `o` and `gate` of shape `[T, H, D]` and `weight` of shape `[D]`:
    `RMSNorm(o[t, h, :]; weight) * sigmoid(gate[t, h, :])` (K3-SPEC.md §2
    step 6).
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$gate,
                       K3_FloatTensor:$weight, F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gate `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LinearOp : K3_Op<"linear", [Pure]> {
  let summary = "linear projection without bias";
  let description = [{
    `result[..., o] = sum_i input[..., i] * weight[o, i]` with the weight in
    `nn.Linear` layout `[out, in]`; accumulation is in f32.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$weight);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_AddOp : K3_Op<"add", [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise sum (residual connections)";
  let arguments = (ins K3_FloatTensor:$lhs, K3_FloatTensor:$rhs);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def K3_SigmoidGateOp : K3_Op<"sigmoid_gate", [Pure]> {
  let summary = "input * sigmoid(gate), elementwise (MLA output gate)";
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$gate);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gate attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_ShortConvOp : K3_Op<"short_conv", [AttrSizedOperandSegments]> {
  let summary = "causal depthwise convolution followed by SiLU";
  let description = [{
    For `input [T, C]` and `weight [C, 1, kernel_size]`:
    `y[t, c] = SiLU(sum_j weight[c, 0, j] * x[t - kernel_size + 1 + j, c])`
    within each sequence, where the history before a sequence's first token
    is `conv_state` (the last `kernel_size - 1` pre-convolution inputs,
    `[N, C, kernel_size - 1]`) or zeros. The second result is the new
    state for each sequence, for decoding.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$weight,
                       Optional<K3_FloatTensor>:$conv_state,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$kernel_size);
  let results = (outs K3_FloatTensor:$result, K3_FloatTensor:$final_state);
  let assemblyFormat = [{
    $input `,` $weight (`state` `(` $conv_state^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kimi Delta Attention
//===----------------------------------------------------------------------===//

def K3_KDAGateOp : K3_Op<"kda_gate", [Pure]> {
  let summary = "KDA per-channel log-decay gate";
  let description = [{
    Computes the log-decay `g [T, H, K]` (f32) from the raw gate
    projection `z [T, H, K]`, per head `h`:

    * `lower_bounded_sigmoid` (Kimi K3):
      `g = lower_bound * sigmoid(exp(A_log[h]) * (z + dt_bias))`, with
      `lower_bound` in `[-5, 0)`;
    * `neg_softplus` (Kimi Linear):
      `g = -exp(A_log[h]) * softplus(z + dt_bias)`, unbounded below.

    `A_log` may be longer than `H` (the K3 checkpoint pads it to 128);
    `dt_bias` is `[H * K]`.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$A_log,
                       K3_FloatTensor:$dt_bias,
                       K3_DecayGateKindAttr:$kind,
                       OptionalAttr<F64Attr>:$lower_bound);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = [{
    $kind $input `,` $A_log `,` $dt_bias attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_KDAOp : K3_Op<"kda", [Pure, AttrSizedOperandSegments]> {
  let summary = "Kimi Delta Attention core (gated delta rule)";
  let description = [{
    Per sequence and head, with `S` a `[K, V]` f32 state:

    ```
    S' = Diag(exp(g_t)) S_{t-1}
    u  = beta_t (v_t - S'^T k_t)
    S_t = S' + k_t u^T
    o_t = S_t^T (scale * q_t)
    ```

    Operands: `q, k [B, T, H, K]`, `v [B, T, H, V]`, `g [B, T, H, K]` (the
    log-decay, or with `gate_kind` the raw gate projection that the op
    turns into a log-decay itself with `A_log` and `dt_bias`), `beta
    [B, T, H]` (raw logits when `use_beta_sigmoid`), an optional f32
    `initial_state [N, H, K, V]` and optional `cu_seqlens [N + 1]` for
    packed variable-length batches (then `B = 1`). With `use_qk_l2norm`
    the op normalises q and k per head: `x / sqrt(|x|^2 + 1e-6)`.
    Results: the output `[B, T, H, V]` and the final state `[N, H, K, V]`
    (f32).

    The in-op gate, L2 normalisation and sigmoid are there so that kernels
    can fuse them, as the anchors (fla `chunk_kda`, FlashKDA) do.
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$k,
                       K3_FloatTensor:$v, K3_FloatTensor:$g,
                       K3_FloatTensor:$beta,
                       Optional<K3_StateTensor>:$initial_state,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       Optional<K3_FloatTensor>:$A_log,
                       Optional<K3_FloatTensor>:$dt_bias,
                       F64Attr:$scale,
                       UnitAttr:$use_qk_l2norm,
                       UnitAttr:$use_beta_sigmoid,
                       OptionalAttr<K3_DecayGateKindAttr>:$gate_kind,
                       OptionalAttr<F64Attr>:$lower_bound);
  let results = (outs K3_FloatTensor:$output, K3_StateTensor:$final_state);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $g `,` $beta
    (`initial_state` `(` $initial_state^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    (`gate_params` `(` $A_log^ `,` $dt_bias `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gated multi-head latent attention
//===----------------------------------------------------------------------===//

def K3_CausalAttentionOp : K3_Op<"causal_attention", [Pure]> {
  let summary = "causal softmax attention (decompressed MLA, no positions)";
  let description = [{
    `q, k [T, H, Dqk]`, `v [T, H, Dv]`; each token attends to the tokens of
    its own sequence up to itself. The softmax is computed in f32.
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$k,
                       K3_FloatTensor:$v,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       F64Attr:$scale);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LatentAttentionOp : K3_Op<"latent_attention",
                                 [Pure, AttrSizedOperandSegments]> {
  let summary = "multi-head latent attention over a per-token latent";
  let description = [{
    The attention part of Gated MLA (K3-SPEC.md §3). `q [T, H, Dn + Dr]`
    holds each head's `[q_nope | q_pe]`; `latent [T, R + Dr]` holds each
    token's normalised `c_kv` (R = kv_lora_rank) followed by the raw,
    un-rotated `k_pe` shared by all heads; `kv_b [H * (Dn + Dv), R]` is
    `kv_b_proj`. Keys are `[kv_b(c_kv)_nope | k_pe]`, values
    `kv_b(c_kv)_v`; attention is causal within each sequence, with scale
    `scale` (normally `(Dn + Dr)^-1/2`).

    For decoding, `latent_cache [N, L, R + Dr]` with `cache_lens [N]` holds
    each sequence's earlier latents; the new tokens attend to them too and
    the updated cache is the second result. Caching the 576-wide latent
    rather than expanded keys and values is what makes MLA's cache small.
  }];
  let arguments = (ins K3_FloatTensor:$q, K3_FloatTensor:$latent,
                       K3_FloatTensor:$kv_b,
                       Optional<K3_FloatTensor>:$latent_cache,
                       Optional<K3_IndexTensor>:$cache_lens,
                       Optional<K3_IndexTensor>:$cu_seqlens,
                       I64Attr:$num_heads, I64Attr:$qk_nope_head_dim,
                       I64Attr:$qk_rope_head_dim, I64Attr:$v_head_dim,
                       I64Attr:$kv_lora_rank, F64Attr:$scale);
  let results = (outs K3_FloatTensor:$result,
                      Optional<K3_FloatTensor>:$latent_cache_out);
  let assemblyFormat = [{
    $q `,` $latent `,` $kv_b
    (`cache` `(` $latent_cache^ `,` $cache_lens `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// MLPs and mixture of experts
//===----------------------------------------------------------------------===//

def K3_GLUMLPOp : K3_Op<"glu_mlp", [Pure]> {
  let summary = "gated MLP: down(act(gate(x)) * up(x))";
  let description = [{
    `x [T, D]`, `w_gate, w_up [I, D]`, `w_down [D, I]`. With `silu`:
    `act(a) * b = SiLU(a) * b`. With `situ` (K3-SPEC.md §4, in f32):
    `beta * tanh(a / beta) * sigmoid(a) * linear_beta * tanh(b / linear_beta)`;
    a missing `linear_beta` leaves `b` unclamped.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$w_gate,
                       K3_FloatTensor:$w_up, K3_FloatTensor:$w_down,
                       K3_GLUActivationAttr:$activation,
                       OptionalAttr<F64Attr>:$beta,
                       OptionalAttr<F64Attr>:$linear_beta);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $input `,` $w_gate `,` $w_up `,` $w_down attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoERouterOp : K3_Op<"moe_router", [Pure]> {
  let summary = "MoE router: scores, biased top-k selection, renormalisation";
  let description = [{
    `logits = x W^T` in f32 (`x [T, D]`, `W [E, D]`); `s = score(logits)`;
    the `top_k` experts are chosen on `s + correction_bias` (the bias only
    affects the choice), their weights are the unbiased `s`, renormalised
    to sum to one when `renormalize`, then multiplied by
    `routed_scaling_factor`. Results: expert ids `[T, top_k]` (i32) and
    weights `[T, top_k]` (f32). With `n_group` > 1 the choice is
    group-limited (DeepSeek-V3's `grouped_topk`, docs/moe.md): the experts
    form `n_group` contiguous groups, only the `topk_group` best groups
    stay eligible; the default 1 / 1 is the plain top-k.
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_FloatTensor:$weight,
                       Optional<K3_F32Tensor>:$correction_bias,
                       I64Attr:$top_k, K3_RouterScoreAttr:$score,
                       UnitAttr:$renormalize,
                       F64Attr:$routed_scaling_factor,
                       DefaultValuedAttr<I64Attr, "1">:$n_group,
                       DefaultValuedAttr<I64Attr, "1">:$topk_group);
  let results = (outs K3_IndexTensor:$indices, K3_F32Tensor:$weights);
  let assemblyFormat = [{
    $score $input `,` $weight (`bias` `(` $correction_bias^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoEExpertsOp : K3_Op<"moe_experts", [Pure]> {
  let summary = "weighted sum of the chosen routed GLU experts";
  let description = [{
    `result[t] = sum_j weights[t, j] * E_{indices[t, j]}(x[t])` with each
    expert a GLU MLP: `w1` (gate) and `w3` (up) stacked `[E, I, D]`, `w2`
    (down) stacked `[E, D, I]`. Accumulation is in f32. `D` is the hidden
    width for Kimi Linear and the latent width for K3's latent MoE (the
    surrounding down-projection, norm and up-projection are ordinary
    `k3.linear` and `k3.rms_norm` ops).
  }];
  let arguments = (ins K3_FloatTensor:$input, K3_IndexTensor:$indices,
                       K3_F32Tensor:$weights, K3_WeightTensor:$w1,
                       K3_WeightTensor:$w3, K3_WeightTensor:$w2,
                       K3_GLUActivationAttr:$activation,
                       OptionalAttr<F64Attr>:$beta,
                       OptionalAttr<F64Attr>:$linear_beta);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $input `,` $indices `,` $weights `,` $w1 `,` $w3 `,` $w2 attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Block attention residuals
//===----------------------------------------------------------------------===//

def K3_AttnResMixOp : K3_Op<"attn_res_mix", [Pure]> {
  let summary = "AttnRes depth mix over completed blocks and the partial sum";
  let description = [{
    Sources are `blocks [NB, T, D]` followed by `partial [T, D]`. Per token:
    `l_i = <v_i / sqrt(mean(v_i^2) + epsilon), norm_weight * proj_weight>`,
    `p = softmax_i(l)`, `result = sum_i p_i v_i` (f32). With `NB = 0` it is
    the identity on `partial` (K3-SPEC.md §6).
  }];
  let arguments = (ins K3_FloatTensor:$blocks, K3_FloatTensor:$partial,
                       K3_FloatTensor:$norm_weight,
                       K3_FloatTensor:$proj_weight, F64Attr:$epsilon);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $blocks `,` $partial `,` $norm_weight `,` $proj_weight attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_AttnResPushOp : K3_Op<"attn_res_push", [Pure]> {
  let summary = "close an AttnRes block: append the partial sum to the blocks";
  let description = [{
    `result = concat(blocks [NB, T, D], partial [T, D]) : [NB + 1, T, D]`.
    The layer that closes a block then starts its partial sum afresh
    (K3-SPEC.md §7 step 2).
  }];
  let arguments = (ins K3_FloatTensor:$blocks, K3_FloatTensor:$partial);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = [{
    $blocks `,` $partial attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

def K3_LayerOp : K3_Op<"layer",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "instantiate a layer template under a weight-name prefix";
  let description = [{
    Calls the `func.func` `callee`, a layer template, whose `k3.weight`,
    `k3.state.read` and `k3.state.write` names are relative: this
    instance's names are `prefix` followed by the template's name. A model
    is then one template per layer kind plus one `k3.layer` line per layer:

    ```mlir
    %p1, %b1 = k3.layer @kda_moe_layer("model.layers.1.")(%p0, %b0, %cu)
        : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>)
        -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
    ```

    Templates may instantiate templates; prefixes compose. The
    `k3-inline-layers` pass expands every instance, giving absolute names.
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, StrAttr:$prefix,
                       Variadic<AnyType>:$args);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = [{
    $callee `(` $prefix `)` `(` $args `)` attr-dict `:` functional-type($args, results)
  }];
}

def K3_LaunchOp : K3_Op<"launch",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "run a compiled kernel on tensors (host orchestration)";
  let description = [{
    Produced by `k3-outline-kernels`: runs the kernel `kernel` (a function
    of the kernels module of one target) on `inputs` and yields its
    outputs. The kernel's calling convention is the artifact's: one bare
    pointer per input, then one per output, then the runtime sizes
    `num_tokens` and `num_seqs` as i64. Each pointer argument of the kernel
    carries `k3.dims`, its shape in which -1 stands for `num_tokens`, -2
    for `num_seqs` and -3 for `num_seqs + 1`; the memory planner sizes
    buffers from it.
  }];
  let arguments = (ins SymbolRefAttr:$kernel, Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $kernel `(` $inputs `)` attr-dict `:` functional-type($inputs, results)
  }];
}

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

def K3_ArgmaxOp : K3_Op<"argmax", [Pure]> {
  let summary = "greedy sampling: index of the largest logit per token";
  let arguments = (ins K3_FloatTensor:$logits);
  let results = (outs K3_IndexTensor:$result);
  let assemblyFormat = "$logits attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

include "dialects/K3/K3ChunkOps.td"
include "dialects/K3/K3FusedOps.td"
include "dialects/K3/K3MoEOps.td"
include "dialects/K3/K3MLAOps.td"
include "dialects/K3/K3CollectiveOps.td"
include "dialects/K3/K3ContextOps.td"

#endif // K3_OPS_TD

//===- Passes.td - K3 graph-level passes -------------------*- tablegen -*-===//
//
// Passes that rewrite the K3 dialect into K3 (fusions, the chunkwise KDA
// form). Lowerings out of the dialect live in lowering/.
//
//===----------------------------------------------------------------------===//

#ifndef K3_PASSES_TD
#define K3_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3FuseKDAGate : Pass<"k3-fuse-kda-gate"> {
  let summary = "Fold k3.kda_gate into the in-op gate of k3.kda";
  let description = [{
    Rewrites `k3.kda(..., g = k3.kda_gate(z, A_log, dt_bias), ...)` into a
    `k3.kda` that takes the raw `z` with `gate_params(A_log, dt_bias)` and
    computes the log-decay itself. Kernels can then compute the gate in registers
    instead of reading and writing an f32 `[T, H, K]` tensor: the anchors
    (fla `chunk_kda`, FlashKDA) fuse the gate the same way.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::tensor::TensorDialect"];
}

def K3InlineLayers : Pass<"k3-inline-layers", "::mlir::ModuleOp"> {
  let summary = "Expand k3.layer instances into their templates";
  let description = [{
    Replaces every `k3.layer @template("prefix")(...)` by a copy of the
    template's body in which each `k3.weight`, `k3.state.read` and
    `k3.state.write` name is prefixed (nested instances compose their
    prefixes), then erases the templates nothing refers to any more. After
    it every resource name is absolute: the weight manifest and the decode
    state of the artifact are read off the IR.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::func::FuncDialect"];
}

def K3KDAChunkwise : Pass<"k3-kda-chunkwise"> {
  let summary = "Rewrite k3.kda into the chunkwise (UT transform) form";
  let description = [{
    Replaces every `k3.kda` by the chunk-level ops of K3ChunkOps.td
    (docs/kda-chunkwise.md): `k3.kda_chunk_prepare` (L2 norm, beta, the
    in-chunk cumulative log-decay G), two `k3.kda_chunk_gram` (I + diag(beta)
    L and the output mask M), two `k3.tri_solve` (the UT transform
    (I + BL) U = BV, (I + BL) W = B (K ⊙ Γ)), `k3.kda_chunk_state` (the
    serial state passing over chunks) and `k3.kda_chunk_output`. With
    `num-segments=S` (S >= 1) the state passing is in the sequence-parallel
    form: `k3.kda_segment_summary` (per-segment K x K transition and
    contribution), `k3.kda_segment_scan`, then independent per-segment walks.

    The decay form of the Gram matrices: `auto` uses the tile-factored form
    (records `gate_lower_bound` on the op) when the gate is the lower-bounded
    sigmoid (in-op, or a `k3.kda_gate` producing g) and the bound keeps
    exp finite over a tile, else the pairwise form; `tile-factored` insists
    and diagnoses an unbounded gate; `pairwise` never factors.
  }];
  let options = [
    Option<"chunkSize", "chunk-size", "int64_t", "64",
           "tokens per chunk (a multiple of tile-size)">,
    Option<"tileSize", "tile-size", "int64_t", "16",
           "tile of the factored decay form (a power of two)">,
    Option<"decayForm", "decay-form", "std::string", "\"auto\"",
           "auto | tile-factored | pairwise">,
    Option<"numSegments", "num-segments", "int64_t", "0",
           "0: one serial walk per sequence; S >= 1: state-passing form "
           "over S segments">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3TileTriSolve : Pass<"k3-tile-tri-solve"> {
  let summary = "Tile the per-chunk triangular solves of the UT transform";
  let description = [{
    Rewrites `k3.tri_solve {mode = "forward"}` (token-by-token forward
    substitution over the whole chunk). `mode=forward`: blocked forward
    substitution, `mode = "blocked"` with `tile_size`: diagonal tiles token
    by token, off-diagonal blocks as products with the solved tiles.
    `mode=block-inverse`: `k3.tri_inverse` (invert the diagonal tiles,
    combine off-diagonal blocks with products) followed by
    `k3.chunk_tril_matmul`, the form tensor cores like.
  }];
  let options = [
    Option<"tileSize", "tile-size", "int64_t", "16",
           "tile size (a power of two dividing the chunk size)">,
    Option<"mode", "mode", "std::string", "\"forward\"",
           "forward (blocked forward substitution) | block-inverse">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3DecodeEntry : Pass<"k3-decode-entry", "::mlir::ModuleOp"> {
  let summary = "Add a decode entry: the model function for one token per sequence";
  let description = [{
    Clones the model function `entry` as `<entry>_decode` (marked
    `k3.decode`) when it contains `k3.kda`: the chunk forms that make prefill
    fast (k3-kda-chunkwise, k3-kda-mma-split) pad a one-token sequence to a
    whole chunk, so the decode entry keeps the token-by-token KDA (on CUDA,
    the recurrent kernel with one-token staging). Both entries share
    weights, decode state and kernels; `k3-run` and the Python bindings call
    the decode entry for the steps after the prompt.
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function">,
  ];
}

def K3KDAMMASplit : Pass<"k3-kda-mma-split"> {
  let summary = "Split k3.kda into tensor-core operands and chain (CUDA)";
  let description = [{
    Rewrites each `k3.kda` that the tensor-core kernels cover into
    `k3.kda_mma_operands` (token-parallel: gates, norms, decayed operands,
    the 16 x 16 products and solves of every 16-token chunk, packed per
    token) and `k3.kda_mma_recurrence` (the serial chain over chunks, all
    products on `mma.sync`). Covered: bf16 q, k, v; the in-op gates: the
    lower-bounded sigmoid (every valid lower_bound, [-5, 0)) and the
    unbounded softplus of Kimi Linear; K a multiple of 64 up to
    256; V a multiple of 16; f32 state; cu_seqlens or batch 1. Other
    k3.kda ops are left alone (the recurrent kernel runs them). bf16
    operands are what the tensor cores multiply, so the result matches the
    f64 oracle to bf16 accuracy (1e-2 normwise), not f32's.
  }];
}

def K3ExposeRouting : Pass<"k3-expose-routing", "::mlir::ModuleOp"> {
  let summary = "Return each MoE router's expert choice from the model function";
  let description = [{
    Appends the expert ids chosen by every `k3.moe_router` of the model
    function `entry` to its results, named after the router's weight
    (`model.layers.3.block_sparse_moe.gate.weight` gives
    `model.layers.3.block_sparse_moe.router_indices`). The runtime then
    returns and dumps them like any output. Near ties between experts can
    flip between f32 and f64: a checker replays the oracle with the choice
    the compiled model made and checks the choice on its own, with a margin.
    Run after `k3-inline-layers`.
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::func::FuncDialect"];
}

def K3LastTokenLogits : Pass<"k3-last-token-logits", "::mlir::ModuleOp"> {
  let summary = "Compute the LM head only for each sequence's last token";
  let description = [{
    In prefill only the last token of each sequence needs logits: the
    runtime samples from them. In the model function `entry` this pass
    finds the `logits` result (result attribute `k3.name = "logits"`),
    walks back through the row-wise ops that produce it (`k3.linear`, the
    LM head; `k3.rms_norm`, the final norm), inserts `k3.last_tokens`
    (with the function's `cu_seqlens` argument) before them and recomputes
    them on the `[N, D]` rows. A returned `k3.argmax` of the logits
    (`next_tokens`) follows. The entry's outputs become `logits [N, V]` and
    `next_tokens [N]`; other outputs keep their T rows.

    k3-compile runs it on the prefill entry with `logits=last` (the
    default; `logits=all` keeps `[T, V]` for checks against the oracle on
    every token), and always on the decode entry, whose one token per
    sequence makes it the same values, with buffers sized by max-seqs
    instead of max-tokens (`require-entry=0`: a model without a decode
    entry is left alone).
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function">,
    Option<"requireEntry", "require-entry", "bool", "true",
           "Fail when the model function does not exist (else do nothing)">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::func::FuncDialect"];
}

def K3FusePartialRMSNorm : Pass<"k3-fuse-partial-rms-norm"> {
  let summary = "Fuse an RMSNorm of a row's leading columns with the slices "
                "and the concat around it";
  let description = [{
    Rewrites `tensor.concat(k3.rms_norm(x[..., :R], w), x[..., R:])` along
    the last dimension into `k3.partial_rms_norm(x, w)`: MLA's
    down-projection output `[c_kv | k_pe]`, of which only `c_kv` is
    normalised, becomes the latent `[norm(c_kv) | k_pe]` in one kernel
    instead of four (two slices, the norm, the concat). It fires where the
    slices take every row of `x` (their row count is `x`'s, or `tensor.dim`
    of a value that `x` comes from through projections and norms) and the
    concat has `x`'s type; other uses of the norm keep it.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect",
                           "::mlir::tensor::TensorDialect"];
}

def K3FuseAddRMSNorm : Pass<"k3-fuse-add-rms-norm"> {
  let summary = "Fuse a residual add with the RMSNorm of its sum";
  let description = [{
    Rewrites `h = k3.add(x, r)` followed by `y = k3.rms_norm(h, w)` into
    `h, y = k3.add_rms_norm(x, r, w)`: one kernel reads x and r once,
    stores h (the residual stream's next value) and normalises it from the
    same row. Every other use of the add takes `h` from the fused op. It
    fires only where the norm reads the add's result directly (the
    pre-norm residual of plain decoder layers, e.g. Kimi Linear); with
    Block AttnRes the norm reads `k3.attn_res_mix` and nothing changes.
    The norm's weight must be a `k3.weight` or an argument, so that the
    fused op can take the add's place. When an add feeds several norms,
    the first one in the block is fused.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3ActivationPrecision : Pass<"k3-activation-precision", "::mlir::ModuleOp"> {
  let summary = "Apply the precision policy: bf16 activations between kernels";
  let description = [{
    Reads the module's `k3.activation_dtype` (`activation-dtype=f32|bf16`
    overrides it and records the choice on the module; neither: f32). With
    bf16 it retypes, in every model function, the activations that pass
    between kernels to bf16: the results of embedding, norms (plain, gated,
    fused with the residual add), linear projections, residual adds, gates,
    the short convolutions' outputs, the KDA and attention outputs, MLPs and
    experts, AttnRes mixes and block lists, last-token selections, and the
    reshapes, slices and concatenations of those. Kernels widen on load and
    compute in f32, so RMSNorm and softmax statistics and every
    accumulation stay f32. What must stay f32 keeps its type: decode state
    (convolution and KDA states, the latent cache), the router's scores and
    weights, an unfused KDA log-decay (`k3.kda_gate`), values returned from
    the model function (the logits) and what `k3.argmax` reads. Run after
    the graph fusions and before the KDA rewrites (docs/precision.md).
  }];
  let options = [
    Option<"activationDType", "activation-dtype", "std::string", "\"\"",
           "f32 | bf16; empty: the module's k3.activation_dtype, else f32">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::tensor::TensorDialect"];
}

def K3KDAStatePrecision : Pass<"k3-kda-state-precision", "::mlir::ModuleOp"> {
  let summary = "Store the KDA recurrent state in bf16 between calls";
  let description = [{
    With `kda-state-dtype=bf16` (default f32: nothing changes), retypes
    each KDA state that the model keeps between calls (`k3.state_read` /
    `k3.state_write` of one name) to bf16, with the `k3.kda` ops that read
    and write it: a decode step then reads and writes half the bytes of its
    largest operand. Kernels widen the state on load and compute in f32;
    the state is rounded to bf16 once per call, when it is stored (the
    error this adds is bounded in docs/precision.md). A state is narrowed
    when every read of it feeds only `k3.kda` ops as their initial state
    and every write stores a `k3.kda` op's final state; a state read or
    written by anything else (a context-parallel KDA segment, a model
    input) is an error naming it, not silently kept f32. Run after the
    precision policy and before the KDA rewrites.
  }];
  let options = [
    Option<"stateDType", "kda-state-dtype", "std::string", "\"f32\"",
           "f32 | bf16">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3SplitRouter : Pass<"k3-split-router"> {
  let summary = "the MoE router as a linear and a top-k";
  let description = [{
    Rewrites each `k3.moe_router` into `k3.linear` (the logits `x W^T`, f32)
    and `k3.moe_topk` (scores, biased choice, weights). The product then
    runs on the linear's kernels, spread over the GPU (the GEMV in a decode
    step, wgmma in prefill), and the selection on a warp per token; the
    fused router's block per token group read all of W per block and
    serialised a decode step's scores on a few blocks (docs/moe.md). The
    result is the same logits and the same selection rule.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3GroupShortConvs : Pass<"k3-group-short-convs"> {
  let summary = "In the decode entry, the short convs of one layer as one op";
  let description = [{
    In each function marked `k3.decode` (k3-decode-entry), replaces the
    `k3.short_conv` ops whose inputs are results of one op (a KDA layer's
    q, k and v convolutions, after `k3-group-linears` one
    `k3.linear_group`) and which share the sequences and kernel size by one
    `k3.short_conv_group`. In a decode step each is a few microseconds of
    latency; one launch pays it once. Convolutions without carried state
    are left alone (the decode entry always carries it).
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3GroupLinears : Pass<"k3-group-linears"> {
  let summary = "The linears of one input as one op";
  let description = [{
    In each function marked `k3.decode` (k3-decode-entry), replaces the
    `k3.linear` ops that read the same input by one `k3.linear_group`: a
    KDA layer's q, k, v, f_a, b and g_a projections, MLA's q and kv_a. A
    decode step reads each weight once, so its time is weight bytes plus a
    fixed cost per launch; one launch over all the weights' rows pays that
    cost once and keeps more rows in flight (docs/architecture.md).

    With `prefill`, the other functions' linears of one input are grouped
    too where every one has tensor-core tiles (bf16 2-D input and weights,
    K a multiple of 64, N of 8: the wgmma GEMM's shapes), for that GEMM:
    one grid of all their column tiles, so that the narrow projections
    (f_a, g_a: 128 columns, b: 32) no longer run their long K loops on 65
    of the GPU's 132 SMs at T = 8192.
  }];
  let options = [
    Option<"prefill", "prefill", "bool", "false",
           "Also group the other functions' linears that the wgmma GEMM takes">
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3FuseCombineAdd : Pass<"k3-fuse-combine-add"> {
  let summary = "A k3.add of an MoE combine as the combine's addend";
  let description = [{
    Rewrites `k3.add(k3.moe_combine(rows, positions), x)` (either operand
    order; the combine read by the add alone, of the add's type, without an
    addend yet) into `k3.moe_combine(rows, positions) addend(x)`: the
    prefill's shared expert joins the routed sum in the combine's launch
    instead of a separate elementwise kernel that wrote and read the sum
    again (0.09 ms per MoE layer at T = 8192 on Kimi-Linear-48B, docs/moe.md).
    The values are the add's (the routed sum rounded to the result's type,
    then the addend). After `k3-fuse-shared-expert`, which takes the decode
    entry's adds into the grouped launches.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3FuseCombineRMSNorm : Pass<"k3-fuse-combine-rms-norm"> {
  let summary = "An MoE combine and the residual add + RMSNorm after it as "
                "one op";
  let description = [{
    Rewrites `k3.add_rms_norm(x, k3.moe_combine(rows, positions) addend(a),
    w)` (the combine in either operand, read by the norm alone, of the
    sum's type) into `k3.moe_combine_add_rms_norm(rows, positions, x, w)
    addend(a)`: the combine's block per token adds the residual and
    normalises the sum, as the two ops computed them. One launch per MoE
    layer fewer, and the combine's [T, D] output is neither written nor
    read back. After `k3-fuse-add-rms-norm` and `k3-fuse-combine-add`.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3FuseSharedExpert : Pass<"k3-fuse-shared-expert"> {
  let summary = "In the decode entry, the shared expert in the grouped MoE launches";
  let description = [{
    In each function marked `k3.decode`, rewrites
    `k3.add(k3.moe_combine(k3.moe_grouped_down(k3.moe_grouped_glu(x))),
    k3.linear(k3.glu_gate_up(x)))` (the routed experts after
    `k3-moe-grouped`, the shared expert after `k3-split-glu-mlp`) into the
    grouped ops with `shared(...)` weights: the shared expert's rows follow
    the routed ones (`[T, K + 1, ...]`) and the combine adds them last. A
    decode step's time is weight bytes plus a fixed cost per launch, and
    the shared expert's GEMVs were too small to fill the GPU on their own
    (docs/moe.md); now they run beside the routed experts' blocks, and
    three launches per MoE layer go. It fires where the shared expert reads
    the routed experts' input, with their width, GLU and weight element
    type, and each intermediate value has no other use. `k3-compile` runs
    it by default (`fuse-shared-expert=0` turns it off): with the
    tensor-core GEMVs Kimi-Linear-48B's decode step is 4-7 % faster at one
    sequence, 3 % at 8 and 0.6 % at 64 (docs/moe.md).
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3MoEGrouped : Pass<"k3-moe-grouped"> {
  let summary = "MoE as dispatch, two grouped GEMMs and a combine";
  let description = [{
    Rewrites each `k3.moe_experts` into
    `k3.moe_dispatch` (the routed pairs sorted by expert on the device, with
    per-expert row and tile offsets), `k3.moe_grouped_glu` (gate and up of
    every sorted row by its expert, the GLU applied), `k3.moe_grouped_down`
    (down, times the routing weight) and `k3.moe_combine` (each token's rows
    summed in slot order: deterministic). The GEMMs then run over the
    experts' contiguous segments (on CUDA the `moe_grouped_wgmma` kernel),
    each expert's weights read once per 128-row tile instead of once per
    token. The result is the same sum in the same order as the fused op's
    loop nest. `tile-rows` is the row tile of the grouped kernels in
    prefill (128, the tensor cores' tile); in the decode entry (a few
    tokens) `decode-tile-rows` (on CUDA the `moe_grouped_gemv` kernel,
    which reads each touched expert's weights once per tile), or 0 to keep
    the fused op there (docs/moe.md).
  }];
  let options = [
    Option<"tileRows", "tile-rows", "int64_t", "128",
           "rows per tile of the grouped GEMMs (dispatch's tile_offsets)">,
    Option<"decodeTileRows", "decode-tile-rows", "int64_t", "4",
           "rows per tile in the decode entry; 0: the fused op there">,
  ];
}

def K3SplitGLUMLP : Pass<"k3-split-glu-mlp"> {
  let summary = "A GLU MLP as its activated gate/up GEMM and a down linear";
  let description = [{
    Rewrites each `k3.glu_mlp` (the dense MLPs and the shared experts) into
    `k3.glu_gate_up` (gate and up, activated: on CUDA the wgmma kernel
    with the GLU in its epilogue) and a `k3.linear` for the down projection
    (wgmma in prefill, the GEMV in a decode step). The activated h between
    them is an activation: bf16 under the bf16 policy, as the fused op's
    workspace (docs/precision.md).
  }];
}

def K3MLAExpand : Pass<"k3-mla-expand"> {
  let summary = "Prefill MLA as a kv_b expansion GEMM and flash attention";
  let description = [{
    Rewrites each `k3.latent_attention` outside the decode entry into a
    `k3.linear` that expands every token's `c_kv` through `kv_b` (keys'
    nope part and values, `[T, H, Dn + Dv]`), `k3.mla_prefill_attention`
    (causal attention with head dims `Dn + Dr` and `Dv`; on CUDA the
    `mla_flash_wgmma` kernel; a `k3.sigmoid_gate` on its flattened result
    is fused into it) and `k3.latent_cache_append`. Per query-key pair this
    costs 2 (Dn + Dr + Dv) flops instead of the latent form's
    2 (2 R + Dr) (K3MLAOps.td). The expanded attention reads only this
    call's tokens, so the entry's context-lengths input is bounded to zero
    (`k3.max_value`, checked by the runtime before any launch); the decode
    entry keeps the latent form. Attentions whose context lengths are not
    an entry input are left alone.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::tensor::TensorDialect"];
}

def K3Partition : Pass<"k3-partition", "ModuleOp"> {
  let summary = "The model as one SPMD program over tensor-parallel ranks";
  let description = [{
    Rewrites the model (after `k3-inline-layers`) into the program that
    every rank of a tensor-parallel group of `tp` (and of an
    expert-parallel group of `ep`) runs on its own shard
    (docs/scaling.md), as Megatron and vLLM split it:
    - attention heads: each rank keeps `1/tp` of the heads of every
      `k3.kda` and `k3.latent_attention`, found by propagation from them
      through whatever feeds them per head (the projections into the heads
      split by rows, short convolutions and their states by channels, the
      decay gate with A_log and dt_bias, the recurrent state, the output
      gate and its gated norm) to the output projection, split by columns,
      whose partial sum one `k3.all_reduce sum` completes; MLA's latent and
      its cache stay whole on every rank;
    - MLP blocks: each `k3.glu_mlp` (dense MLPs, shared experts) and
      `k3.moe_experts` keeps `1/tp` of its intermediate width (gate and up
      rows, down columns) and one all-reduce sums the block's output.
    - with `ep` > 1, the routed experts of each `k3.moe_experts` by expert
      instead (stacks sliced along E over `ep`): the router's ids become
      this rank's (`k3.moe_local_ids`, reading the entry input
      `k3.rank.ep` that the runtime fills; other ranks' pairs are
      skipped) and a `k3.all_reduce sum` over `ep` sums the layer. Tokens
      stay replicated, so no all-to-all is needed (docs/scaling.md).
    Weights carry `k3.shard` (sliced by the runtime at load); the router,
    norms of the hidden state and embedding stay replicated, and so does
    the LM head unless `vocab-split` (then the k3.linear that makes the
    result named `logits` keeps 1/tp of its weight's rows, where tp
    divides the vocabulary and nothing else reads the weight — a tied
    embedding keeps it whole — and a `k3.all_gather` along the last
    dimension completes the logits). Runs
    before the MoE, MLA and MLP rewrites, which then see the split weights.

    A weight read by anything the pass does not split the same way, a
    width or head count that `tp` does not divide, or an op that a
    per-head value reaches and no rule covers, is an error that names it.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "tensor-parallel ranks (1: no change)">,
    Option<"spmd", "spmd", "bool", /*default=*/"false",
           "at tp = 1 too: the SPMD program of one rank (shards of one part, "
           "collectives of one rank), which checks a communicator on one "
           "device">,
    Option<"vocabSplit", "vocab-split", "bool", /*default=*/"false",
           "with tp > 1: each rank keeps 1/tp of the LM head's vocabulary "
           "rows and one all-gather along the vocabulary completes the "
           "logits (off by default until its NCCL gathers of several rows "
           "have run on GPUs)">,
    Option<"ep", "ep", "int64_t", /*default=*/"1",
           "expert-parallel ranks: each keeps 1/ep of every k3.moe_experts' "
           "routed experts, runs the pairs routed to them and one all-reduce "
           "over `ep` sums the layer (1: no change)">
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3PartitionContext : Pass<"k3-partition-context", "ModuleOp"> {
  let summary = "Context parallelism: each rank runs its segment of every "
                "sequence of the prefill entry";
  let description = [{
    Rewrites the entry `entry` (the prefill) into the program that each rank
    of a context-parallel group of `cp` runs on its segments: the runtime
    cuts every sequence of a call into `cp` consecutive segments and gives
    rank `r` the `r`-th of each (its token_ids and cu_seqlens;
    docs/scaling.md). Per-token ops need nothing. The token mixers carry a
    state from segment to segment, and both are affine in it (seed §7.5):
    - each `k3.kda` runs on the segment from the state `[0 | I]` with
      values `[v | 0]` (`k3.kda_context_inputs`: its zero-state outputs and
      final state, its transition and the correction's factor in one pass,
      on whichever KDA kernels the target has), a `k3.all_gather` over
      `cp` shares its final states, and a `k3.kda_context_fold` folds them
      (the incoming state, the outputs corrected by it, the sequence's
      final state);
    - each `k3.short_conv`'s segment tail (`k3.short_conv_tail`: the state
      a convolution from zero ends at) and the ranks' cu_seqlens are
      all-gathered, and a
      `k3.short_conv_context_fold` gives the state entering the segment
      (the convolution then runs from it) and the final state;
    - each `k3.latent_attention` (MLA, in its cache form) reads a cache that
      a `k3.all_reduce sum` over `cp` of the ranks' shares
      (`k3.latent_cache_segment`: the prefix, and each rank its segment's
      latent rows) fills with every segment's rows, from this rank's
      positions in its sequences (`k3.context_offsets`); k3-mla-expand then
      leaves it in that form.
    With `experts`, the routed experts are split over the same ranks
    (expert parallelism over owned tokens, docs/scaling.md): each
    `k3.moe_experts` of the prefill buckets its routed rows by the rank
    that holds their expert (`k3.moe_bucket`), one `k3.all_to_all` over
    `cp` each sends the rows, their experts and weights, the rank's experts
    run on what it received, an all-to-all returns the outputs and
    `k3.moe_unbucket` sums each token's; the decode entries, whose tokens
    every rank holds, keep their rank's pairs (`k3.moe_local_ids`) and
    all-reduce over `cp`.
    Every rank ends holding every sequence's whole state, so the decode
    entry (cloned before this pass) runs replicated on the group's ranks.
    The rank comes from the entry input `k3.rank.cp`, which the runtime
    fills. Runs after `k3-decode-entry` and before the KDA rewrites.

    An op that mixes tokens across a sequence and has no rule here is an
    error that names it, as is a token mixer without cu_seqlens.
  }];
  let options = [
    Option<"cp", "cp", "int64_t", /*default=*/"1",
           "context-parallel ranks (1: no change)">,
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "the prefill entry to split (the decode entry stays whole)">,
    Option<"experts", "experts", "bool", /*default=*/"false",
           "also split every k3.moe_experts' routed experts over the cp "
           "ranks: the prefill sends each routed row to the rank holding "
           "its expert and back (k3.moe_bucket, k3.all_to_all, "
           "k3.moe_unbucket); the replicated decode entries keep their "
           "rank's pairs and all-reduce">,
    Option<"maxTokens", "max-tokens", "int64_t", /*default=*/"0",
           "with experts: the most tokens of a call (k3-compile's "
           "max-tokens)">,
    Option<"maxSeqs", "max-seqs", "int64_t", /*default=*/"1",
           "with experts: the most sequences of a call. A rank's part has "
           "at most ceil(max-tokens / cp) + max-seqs tokens, and its "
           "buckets that many times min(top-k, experts per rank) rows, so "
           "no routing overflows them">
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // K3_PASSES_TD

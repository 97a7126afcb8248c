//===- K3Dialect.td - The K3 model dialect -----------------*- tablegen -*-===//
//
// The K3 dialect describes a Kimi-K3-style hybrid decoder (KDA linear
// attention, gated latent attention, latent MoE, block attention residuals)
// with value (tensor) semantics. See docs/dialects/K3Rationale.md.
//
//===----------------------------------------------------------------------===//

#ifndef K3_DIALECT_TD
#define K3_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def K3_Dialect : Dialect {
  let name = "k3";
  let summary = "Kimi-K3-style hybrid decoder models";
  let description = [{
    The `k3` dialect is the entry point of the K3 compiler. A model is an
    ordinary `func.func` whose body is built from `k3` ops with tensor
    semantics: weights are named by `k3.weight` (the checkpoint's own tensor
    names), per-sequence decoding state by `k3.state.read`/`k3.state.write`,
    and layers are `k3.layer` instances of per-layer-kind template
    functions, so a 93-layer model is a readable list of 93 lines rather
    than 93 copies of inline IR (docs/dialects/K3Rationale.md).

    Tokens are packed: activations are `[T, D]` with a dynamic token count `T`
    shared by all sequences of a batch, whose boundaries are given by an i32
    `cu_seqlens` tensor of `N + 1` offsets (the convention of vLLM and fla).
  }];
  let cppNamespace = "::mlir::k3";
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;

  // Every `k3.*` attribute that sits on an op not of this dialect (or on an
  // argument) and that a pass reads. Code reaches them through the
  // generated helpers (K3Dialect::<Name>AttrHelper), never by string.
  let discardableAttrs = (ins
    // Model description (examples/, k3-import): artifact metadata.
    "::mlir::StringAttr":$model,
    "::mlir::IntegerAttr":$vocab_size,
    "::mlir::IntegerAttr":$hidden_size,
    "::mlir::IntegerAttr":$max_context,
    // The precision policy (k3-import --activation-dtype, k3-compile
    // activation-dtype; applied by k3-activation-precision): the storage
    // type of activations between kernels. On the module.
    "::mlir::k3::ActivationDTypeAttr":$activation_dtype,
    // Names of a model function's inputs and outputs (argument and result
    // attributes).
    "::mlir::StringAttr":$name,
    // k3-decode-entry: the function is the one-token-per-sequence entry.
    "::mlir::UnitAttr":$decode,
    // An upper bound on an integer entry input's values, and why (argument
    // attributes; k3-mla-expand bounds a prefill's context lengths to 0).
    // The artifact carries them; the runtime checks each call's values
    // before any launch.
    "::mlir::IntegerAttr":$max_value,
    "::mlir::StringAttr":$max_value_reason,
    // The compilation target of a module (k3-select-kernel-config) and of
    // the kernels module (k3-outline-kernels).
    "::mlir::Attribute":$target,
    // How an op becomes a kernel (k3-select-kernel-config).
    "::mlir::k3::KernelConfigAttr":$kernel_config,
    // k3-outline-kernels: kernels, the key identical ops share them by,
    // each GPU kernel's launches in order, symbolic shapes of values
    // (`shapes`, per result) and of arguments (`dims`, argument attribute).
    "::mlir::UnitAttr":$kernel,
    "::mlir::StringAttr":$key,
    "::mlir::ArrayAttr":$phases,
    "::mlir::ArrayAttr":$shapes,
    "::mlir::DenseI64ArrayAttr":$dims,
    // k3-outline-kernels: an op whose result is written back to the state
    // it reads takes that state's buffer for it (no copy launch); its
    // kernel updates the state in place (skips copying the old contents).
    "::mlir::UnitAttr":$state_in_place,
    // k3-outline-kernels: an op whose updated state nothing reads (the last
    // tokens' latent attention, whose cache the append before it updates,
    // passes/LastTokenRows.cpp); its GPU kernel writes none of that result.
    "::mlir::UnitAttr":$unread_state,
    // The launch of a GPU kernel (kernel patterns, GPU distribution).
    "::mlir::k3::LaunchShapeAttr":$launch_shape,
    // The TMA tensor maps a GPU kernel takes after its sizes
    // (#k3.tensor_map each, in parameter order).
    "::mlir::ArrayAttr":$tensor_maps,
    // On an nvgpu.device_async_create_group that names no tokens (its copies
    // sit in branches): the group holds every copy issued since the last.
    // (MLIR 22 prints a token-less group in a form that does not parse
    // back; an attribute ends the operand list.)
    "::mlir::UnitAttr":$all_issued,
    // A loop nest's extent in one dimension (KernelBuilder views).
    "::mlir::DenseI64ArrayAttr":$extent,
    // A loop-nest phase whose iterations each take this many GPU lanes (a
    // warp), which split the iteration's sums (KernelBuilder::reduceSumN).
    "::mlir::IntegerAttr":$lanes,
    // k3-plan-memory: arena offsets per result, the arena's size, and the
    // bounds it was planned for.
    "::mlir::ArrayAttr":$buffer,
    "::mlir::IntegerAttr":$arena_bytes,
    "::mlir::IntegerAttr":$max_tokens,
    "::mlir::IntegerAttr":$max_seqs,
    // A k3.weight of an SPMD program that is each rank's slice of its
    // checkpoint tensor (k3-partition; the runtime slices at load).
    "::mlir::k3::WeightShardAttr":$shard
  );
}

class K3_Op<string mnemonic, list<Trait> traits = []>
    : Op<K3_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def K3_DecayGate_LowerBoundedSigmoid
    : I32EnumAttrCase<"lower_bounded_sigmoid", 0>;
def K3_DecayGate_NegSoftplus : I32EnumAttrCase<"neg_softplus", 1>;
def K3_DecayGateKind : I32EnumAttr<"DecayGateKind",
    "parametrisation of the KDA log-decay gate",
    [K3_DecayGate_LowerBoundedSigmoid, K3_DecayGate_NegSoftplus]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_DecayGateKindAttr : EnumAttr<K3_Dialect, K3_DecayGateKind, "decay_gate">;

def K3_GLU_SiLU : I32EnumAttrCase<"silu", 0>;
def K3_GLU_SiTU : I32EnumAttrCase<"situ", 1>;
def K3_GLUActivation : I32EnumAttr<"GLUActivation",
    "activation of a gated linear unit", [K3_GLU_SiLU, K3_GLU_SiTU]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_GLUActivationAttr
    : EnumAttr<K3_Dialect, K3_GLUActivation, "glu_activation">;

def K3_Score_Sigmoid : I32EnumAttrCase<"sigmoid", 0>;
def K3_Score_Softmax : I32EnumAttrCase<"softmax", 1>;
def K3_RouterScore : I32EnumAttr<"RouterScore",
    "router score function", [K3_Score_Sigmoid, K3_Score_Softmax]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_RouterScoreAttr : EnumAttr<K3_Dialect, K3_RouterScore, "router_score">;

def K3_Reduce_Sum : I32EnumAttrCase<"sum", 0>;
def K3_Reduce_Max : I32EnumAttrCase<"max", 1>;
def K3_ReductionKind : I32EnumAttr<"ReductionKind",
    "how a collective combines the ranks' elements", [K3_Reduce_Sum,
    K3_Reduce_Max]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_ReductionKindAttr : EnumAttr<K3_Dialect, K3_ReductionKind, "reduction">;

def K3_ActivationDType_F32 : I32EnumAttrCase<"f32", 0>;
def K3_ActivationDType_BF16 : I32EnumAttrCase<"bf16", 1>;
def K3_ActivationDType : I32EnumAttr<"ActivationDType",
    "storage type of activations between kernels (the precision policy)",
    [K3_ActivationDType_F32, K3_ActivationDType_BF16]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_ActivationDTypeAttr
    : EnumAttr<K3_Dialect, K3_ActivationDType, "activation_dtype"> {
  let summary = "the precision policy of a model: f32 or bf16 activations";
  let description = [{
    On the model's module as `k3.activation_dtype =
    #k3<activation_dtype bf16>`: activations are stored in bf16 between
    kernels (kernels widen on load, compute in f32, narrow on store), while
    what must stay f32 stays f32: decode state (KDA recurrent and
    convolution states, the MLA latent cache), router scores and weights,
    an unfused KDA log-decay, and the logits. `k3-activation-precision`
    applies it (docs/precision.md).
  }];
}

#endif // K3_DIALECT_TD

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

#endif // K3_DIALECT_TD

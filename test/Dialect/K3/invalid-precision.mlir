// RUN: k3-opt %s -split-input-file -verify-diagnostics

// The precision policy (k3.activation_dtype) is a typed attribute of the
// model's module.

// expected-error @+1 {{"k3.activation_dtype" belongs on the model's module}}
func.func @misplaced() attributes {k3.activation_dtype = #k3<activation_dtype bf16>} {
  return
}

// -----

// expected-error @+1 {{"k3.activation_dtype" must be #k3<activation_dtype f32> or #k3<activation_dtype bf16>, got "bf16"}}
module attributes {k3.activation_dtype = "bf16"} {
}

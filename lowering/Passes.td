//===- Passes.td - lowerings out of the K3 dialect ---------*- tablegen -*-===//
//
// The path from a model function to an artifact:
//   k3-outline-kernels  ops -> kernels (loop nests) + k3.launch host steps
//   k3-plan-memory      buffers, liveness, arena offsets
//   k3-emit-artifact    kernels -> native code / cubins; plan -> .k3bin
//
//===----------------------------------------------------------------------===//

#ifndef K3_LOWERING_PASSES_TD
#define K3_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3OutlineKernels : Pass<"k3-outline-kernels", "::mlir::ModuleOp"> {
  let summary = "Turn each K3 op of the model function into a kernel launch";
  let description = [{
    Analyses the symbolic shapes of the model function `entry` (every
    dynamic size is num_tokens, num_seqs or num_seqs + 1), then replaces
    each computing op by a `k3.launch` of a kernel generated into the
    nested module `@k3_kernels`: a `func.func` whose body is a loop nest
    over bare-pointer views (lowering/KernelBuilder.h). Identical ops
    (same kind, attributes, types and symbolic shapes) share one kernel.
    Each `k3.state.write` gets a copy launch into the persistent state, so
    the memory planner can place every other value in the arena. Every
    tensor value is annotated with its symbolic shape (`k3.shapes`).
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function to compile">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "cpu (func.func loop nests) or cuda (gpu.func kernels for sm_90a, "
           "one per parallel phase, iterations spread over threads)">,
    Option<"cudaKdaMMAWarps", "cuda-kda-mma-warps", "int64_t", "0",
           "target=cuda: warps per block of the tensor-core KDA chain "
           "(16 value columns each; 1, 2, 4, 8; 0: from the shape)">,
    Option<"cudaSMCount", "cuda-sm-count", "int64_t", "132",
           "target=cuda: SMs of the target GPU, for shape-dependent "
           "defaults (132: H100 SXM, H200)">,
    Option<"cudaKdaMMAStages", "cuda-kda-mma-stages", "int64_t", "3",
           "target=cuda: cp.async shared-memory stages of the tensor-core "
           "KDA chain (2..4)">,
    Option<"cudaKdaOperandsBlocksPerSM", "cuda-kda-operands-blocks-per-sm",
           "int64_t", "5",
           "target=cuda: resident blocks per SM the KDA operand kernel's "
           "registers are capped for (1..16)">,
    Option<"cudaKdaRecurrentTile", "cuda-kda-recurrent-tile", "std::string",
           "\"\"",
           "target=cuda: tile \"BV,P[,S[,C]]\" of the recurrent KDA kernel "
           "(empty: chosen from K and V)">,
    Option<"cudaLinear", "cuda-linear", "std::string", "\"generic\"",
           "target=cuda: k3.linear kernel, generic (loop nest) or mma-3xtf32 "
           "(tensor cores, f32-accurate split)">,
  ];
  let dependentDialects = [
    "::mlir::k3::K3Dialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
  ];
}

def K3PlanMemory : Pass<"k3-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Static memory plan: buffers, lifetimes and arena offsets";
  let description = [{
    Sizes every tensor of the outlined model function at the compiled
    bounds (`max-tokens`, `max-seqs`) and classifies it: an input or
    output of the entry, a weight, persistent decode state (what
    `k3.state.read` reads and `k3.state.write` writes), or an activation.
    Activations share one arena: reshapes alias their source, lifetimes run
    from the producing launch to the last use, and offsets are assigned
    largest-first at the lowest address free for the whole lifetime.
    Annotates each value with `k3.buffer` and the module with the arena
    size; `report` prints the plan's peak against the sum of all buffers.
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function">,
    Option<"maxTokens", "max-tokens", "int64_t", "4096",
           "Most tokens one call may carry">,
    Option<"maxSeqs", "max-seqs", "int64_t", "16",
           "Most sequences one call may carry (and decode-state slots)">,
    Option<"report", "report", "bool", "false",
           "Emit a remark with the plan's sizes">,
  ];
}

def K3EmitArtifact : Pass<"k3-emit-artifact", "::mlir::ModuleOp"> {
  let summary = "Compile the kernels and write the .k3bin artifact";
  let description = [{
    Lowers the `@k3_kernels` module to LLVM IR, compiles it for the host
    (CPU target: an object, linked into a shared object by the system
    linker, with a packed-parameter entry per kernel), and writes the
    artifact: metadata, the weight manifest read off `k3.weight`, the
    buffers of the memory plan, and the `forward` entry whose launches
    follow the model function's `k3.launch` order.
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function">,
    Option<"output", "output", "std::string", "\"model.k3bin\"",
           "Path of the artifact to write">,
    Option<"linker", "linker", "std::string", "\"cc\"",
           "Command that links the kernel object into a shared object">,
    Option<"ptxOutput", "ptx-output", "std::string", "\"\"",
           "CUDA target: also write the kernels' PTX to this path (to read "
           "registers and spills with ptxas -v)">,
  ];
}

#endif // K3_LOWERING_PASSES_TD

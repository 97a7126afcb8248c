//===- Passes.td - lowerings out of the K3 dialect ---------*- tablegen -*-===//
//
// The path from a model function to an artifact:
//   k3-select-kernel-config  target + a typed kernel config on every op
//   k3-outline-kernels  ops -> kernels (loop nests) + k3.launch host steps
//   k3-weight-init-kernels  the kernels behind --random-weights
//   k3-plan-memory      buffers, liveness, arena offsets
//   k3-emit-artifact    kernels -> native code / cubins; plan -> .k3bin
//   k3-grid-dependency-control  (in the cubin pipeline) kernels that
//                       overlap their start with the previous one's end
//
//===----------------------------------------------------------------------===//

#ifndef K3_LOWERING_PASSES_TD
#define K3_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3SelectKernelConfig : Pass<"k3-select-kernel-config",
                                 "::mlir::ModuleOp"> {
  let summary = "Attach the target and a kernel configuration to every op";
  let description = [{
    Sets the module's `k3.target` (`#k3.cpu_target`, or `#k3.gpu_target`
    with the chip's limits) and attaches `k3.kernel_config =
    #k3.kernel_config<...>` to every op of the model functions that becomes
    a kernel: which generator lowers it (the generic loop nest, or a
    dedicated GPU kernel) and that kernel's tile, warps, stages and blocks
    per SM, by the rules of lowering/KernelConfigRules.cpp. A config
    already on an op is kept (written by hand: pinned). `override` entries
    change a parameter of every op of a kind, for tuning:
    `<op>.<param>=<value>` with <op> an op name without `k3.`
    (`kda_mma_recurrence.warps=2`, `kda.tile=32x8x1x4`,
    `linear.kernel=linear_mma_3xtf32`) or a kernel kind, for the ops that
    have that kernel so far (`moe_grouped_gemv.tile=2x4`: the decode
    entry's grouped GEMVs, not prefill's wgmma kernels of the same ops),
    either optionally limited to one entry by `@decode` or `@prefill`
    (`moe_grouped_down@decode.tile=16x4x2`), or `target.<param>=<value>` for a
    parameter of the GPU target (`target.sm_count=16`). Every config is
    checked against its op and the target; `report` prints each one.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"\"",
           "cpu, cuda (sm_90a: an H200) or a chip name sm_XY; empty: the "
           "module's k3.target, else cpu">,
    ListOption<"overrides", "override", "std::string",
               "<op or kernel>.<param>=<value> or target.<param>=<value>, "
               "for tuning">,
    Option<"report", "report", "bool", "false",
           "Emit a remark with each op's kernel configuration">,
    Option<"maxTokens", "max-tokens", "int64_t", "0",
           "Most tokens of a call (k3-compile's max-tokens; 0: unknown), "
           "the bound of a prefill entry's row count">,
    Option<"maxSeqs", "max-seqs", "int64_t", "0",
           "Most sequences of a call (0: unknown), the bound of a decode "
           "entry's row count">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3OutlineKernels : Pass<"k3-outline-kernels", "::mlir::ModuleOp"> {
  let summary = "Turn each K3 op of the model function into a kernel launch";
  let description = [{
    Analyses the symbolic shapes of the model function `entry` (every
    dynamic size is num_tokens, num_seqs or num_seqs + 1), then replaces
    each computing op by a `k3.launch` of a kernel generated into the
    nested module `@k3_kernels` of the module's `k3.target`: on the CPU a
    `func.func`, on a GPU a `gpu.func`. The body comes from the kernel
    pattern that the op's `k3.kernel_config` names (lowering/
    KernelPatterns.h): a dedicated GPU kernel, or the generic loop nest
    over bare-pointer views (lowering/KernelBuilder.h), which a GPU runs as
    one grid-stride kernel per parallel phase. Run
    k3-select-kernel-config first (ops without a config get the loop nest;
    a module without a target is compiled for the CPU). Identical ops
    (same kind, attributes, types and symbolic shapes) share one kernel.
    Each `k3.state.write` gets a copy launch into the persistent state, so
    the memory planner can place every other value in the arena. Every
    tensor value is annotated with its symbolic shape (`k3.shapes`).
  }];
  let options = [
    Option<"entry", "entry", "std::string", "\"forward\"",
           "The model function to compile">,
  ];
  let dependentDialects = [
    "::mlir::k3::K3Dialect", "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::nvgpu::NVGPUDialect", "::mlir::vector::VectorDialect",
    "::mlir::LLVM::LLVMDialect",
  ];
}

def K3WeightInitKernels : Pass<"k3-weight-init-kernels",
                                "::mlir::ModuleOp"> {
  let summary = "Add the kernels that fill weights with seeded random values";
  let description = [{
    Adds to `@k3_kernels` one kernel per weight dtype of the module,
    `k3_weight_init_<dtype>(out, numel, base, kind, param_bits)`: element j
    of a weight gets the value of the runtime's host generator (splitmix64
    of `base + 2j` and `base + 2j + 1`, Box-Muller for kind 1 = normal;
    `base + j` for kind 2 = uniform; the parameter for kind 3 = constant;
    the parameter is an f64 passed as its bits), rounded to the dtype. A
    GPU kernel walks the elements grid-stride. The runtime launches them
    for `--random-weights` where the artifact has them, so a model's
    random weights are made where they live (docs/runtime.md).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::gpu::GPUDialect", "::mlir::func::FuncDialect",
  ];
}

def K3GridDependencyControl : Pass<"k3-grid-dependency-control",
                                    "::mlir::gpu::GPUModuleOp"> {
  let summary = "Let each GPU kernel start while the one before it drains";
  let description = [{
    Puts `nvvm.griddepcontrol wait` and then `nvvm.griddepcontrol
    launch_dependents` at the entry of every kernel of the module. Launched
    with programmatic stream serialization (the runtime does so in launch
    graphs where the artifact's metadata says `grid_dependency_control`),
    a kernel's blocks are scheduled as soon as every block of the kernel
    before it has started, and wait, before touching memory, until that
    kernel has finished and its writes are visible: the launch latency and
    the ramp of a kernel hide behind the tail of the previous one, which is
    most of the time of a decode step's short kernels. Every kernel waits,
    so a kernel never runs ahead of any earlier one (the wait of each is
    transitive); launched without the attribute both instructions are
    no-ops.
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
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

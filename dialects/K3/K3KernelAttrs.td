//===- K3KernelAttrs.td - targets, kernel configs, launches -*- tablegen -*-===//
//
// What the compiler decides about kernels is IR, not string-keyed
// annotations: the module's target (`#k3.gpu_target`, `#k3.cpu_target`),
// each op's kernel configuration (`#k3.kernel_config`, attached by
// k3-select-kernel-config) and each GPU kernel's launch shape
// (`#k3.launch_shape`, the shape of a gpu.launch_func). Every attribute a
// pass reads is declared here or as a discardable attribute of the dialect
// (K3Dialect.td); docs/architecture.md shows where each is made and read.
//
//===----------------------------------------------------------------------===//

#ifndef K3_KERNEL_ATTRS_TD
#define K3_KERNEL_ATTRS_TD

include "dialects/K3/K3Dialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

/// A list of sizes, written `[a, b, c]`.
defvar K3_SizesParser = [{ [&]() -> ::mlir::FailureOr<::llvm::SmallVector<int64_t>> {
    ::llvm::SmallVector<int64_t> sizes;
    if ($_parser.parseCommaSeparatedList(::mlir::AsmParser::Delimiter::Square,
          [&]() { return $_parser.parseInteger(sizes.emplace_back()); }))
      return ::mlir::failure();
    return sizes;
  }() }];
defvar K3_SizesPrinter = [{
    $_printer << '[';
    ::llvm::interleaveComma($_self, $_printer);
    $_printer << ']';
  }];
class K3_SizesParameter<string desc = "">
    : ArrayRefParameter<"int64_t", desc> {
  let parser = K3_SizesParser;
  let printer = K3_SizesPrinter;
}
class K3_OptionalSizesParameter<string desc = "">
    : OptionalArrayRefParameter<"int64_t", desc> {
  let parser = K3_SizesParser;
  let printer = K3_SizesPrinter;
}

class K3_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<K3_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Targets
//===----------------------------------------------------------------------===//

def K3_CPUTargetAttr : K3_Attr<"CPUTarget", "cpu_target"> {
  let summary = "the host CPU: kernels are loop nests compiled by LLVM";
  let description = [{
    Kernels become `func.func` loop nests, compiled for the host and linked
    into a shared object. The artifact's launches run on the calling thread.
  }];
  let parameters = (ins);
  let assemblyFormat = "";
}

def K3_GPUTargetAttr : K3_Attr<"GPUTarget", "gpu_target"> {
  let summary = "an NVIDIA GPU: its chip and the limits kernels are sized for";
  let description = [{
    `chip` and `features` go to NVVM (`#nvvm.target`). The limits are what
    k3-select-kernel-config sizes kernels against (warps per block, blocks
    per SM, shared memory). The defaults are an H200 (sm_90a, 132 SMs,
    227 KiB of shared memory per block, 64 Ki registers per SM). Sizes that
    must match the device the artifact runs on (the grid of grid-stride
    kernels) are not taken from here: the launch refers to the symbol
    `device_sm_count`, which the runtime reads off the device.
  }];
  let parameters = (ins
    StringRefParameter<"chip, e.g. sm_90a">:$chip,
    StringRefParameter<"PTX features", "\"+ptx80\"">:$features,
    DefaultValuedParameter<"int64_t", "132",
                           "streaming multiprocessors">:$sm_count,
    DefaultValuedParameter<"int64_t", "232448",
                           "shared memory per block, opted in">:$smem_per_block,
    DefaultValuedParameter<"int64_t", "233472",
                           "shared memory per SM">:$smem_per_sm,
    DefaultValuedParameter<"int64_t", "65536",
                           "32-bit registers per SM">:$registers_per_sm,
    DefaultValuedParameter<"int64_t", "255",
                           "registers per thread">:$registers_per_thread,
    DefaultValuedParameter<"int64_t", "1024",
                           "threads per block">:$threads_per_block
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The defaults of a chip name (sm_90a: an H200); null for an unknown
    /// chip.
    static GPUTargetAttr getDefault(::mlir::MLIRContext *ctx,
                                    ::llvm::StringRef chip);
  }];
}

//===----------------------------------------------------------------------===//
// Kernel configurations
//===----------------------------------------------------------------------===//

def K3_Kernel_LoopNest : I32EnumAttrCase<"loop_nest", 0>;
def K3_Kernel_KDARecurrent : I32EnumAttrCase<"kda_recurrent", 1>;
def K3_Kernel_KDAMMAOperands : I32EnumAttrCase<"kda_mma_operands", 2>;
def K3_Kernel_KDAMMAChain : I32EnumAttrCase<"kda_mma_chain", 3>;
def K3_Kernel_LinearMMA3xTF32 : I32EnumAttrCase<"linear_mma_3xtf32", 4>;
def K3_Kernel_LinearTMAWGMMA : I32EnumAttrCase<"linear_tma_wgmma", 5>;
def K3_Kernel_LinearGEMV : I32EnumAttrCase<"linear_gemv", 6>;
def K3_Kernel_ArgmaxRows : I32EnumAttrCase<"argmax_rows", 7>;
def K3_Kernel_LatentAttentionRows : I32EnumAttrCase<"latent_attention_rows", 8>;
def K3_Kernel_RMSNormRows : I32EnumAttrCase<"rms_norm_rows", 9>;
def K3_Kernel_MoEDispatchRows : I32EnumAttrCase<"moe_dispatch_rows", 10>;
def K3_Kernel_MoEGroupedWGMMA : I32EnumAttrCase<"moe_grouped_wgmma", 11>;
def K3_Kernel_GLUWGMMA : I32EnumAttrCase<"glu_wgmma", 12>;
def K3_Kernel_MoERouterRows : I32EnumAttrCase<"moe_router_rows", 13>;
def K3_Kernel_MLAFlashWGMMA : I32EnumAttrCase<"mla_flash_wgmma", 14>;
def K3_Kernel_ShortConvRows : I32EnumAttrCase<"short_conv_rows", 15>;
def K3_Kernel_MoERouterMMA : I32EnumAttrCase<"moe_router_mma", 16>;
def K3_Kernel_MoEGroupedGEMV : I32EnumAttrCase<"moe_grouped_gemv", 17>;
def K3_Kernel_GLUGEMV : I32EnumAttrCase<"glu_gemv", 18>;
def K3_Kernel_MoETopKRows : I32EnumAttrCase<"moe_topk_rows", 19>;
def K3_Kernel_MoECombineRows : I32EnumAttrCase<"moe_combine_rows", 20>;
def K3_Kernel_LatentAttentionSplit :
    I32EnumAttrCase<"latent_attention_split", 21>;
def K3_KernelKind : I32EnumAttr<"KernelKind",
    "which kernel generator lowers an op",
    [K3_Kernel_LoopNest, K3_Kernel_KDARecurrent, K3_Kernel_KDAMMAOperands,
     K3_Kernel_KDAMMAChain, K3_Kernel_LinearMMA3xTF32,
     K3_Kernel_LinearTMAWGMMA, K3_Kernel_LinearGEMV, K3_Kernel_ArgmaxRows,
     K3_Kernel_LatentAttentionRows, K3_Kernel_RMSNormRows,
     K3_Kernel_MoEDispatchRows, K3_Kernel_MoEGroupedWGMMA,
     K3_Kernel_GLUWGMMA, K3_Kernel_MoERouterRows, K3_Kernel_MLAFlashWGMMA,
     K3_Kernel_ShortConvRows, K3_Kernel_MoERouterMMA,
     K3_Kernel_MoEGroupedGEMV, K3_Kernel_GLUGEMV, K3_Kernel_MoETopKRows,
     K3_Kernel_MoECombineRows, K3_Kernel_LatentAttentionSplit]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_KernelKindAttr : EnumAttr<K3_Dialect, K3_KernelKind, "kernel_kind">;

def K3_TileScheduler_Strided : I32EnumAttrCase<"strided", 0>;
def K3_TileScheduler_Counter : I32EnumAttrCase<"counter", 1>;
def K3_TileScheduler : I32EnumAttr<"TileScheduler",
    "how the blocks of a persistent kernel share its tiles",
    [K3_TileScheduler_Strided, K3_TileScheduler_Counter]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_TileSchedulerAttr : EnumAttr<K3_Dialect, K3_TileScheduler,
                                    "tile_scheduler">;

def K3_KernelConfigAttr : K3_Attr<"KernelConfig", "kernel_config"> {
  let summary = "how one op is lowered to a kernel";
  let description = [{
    Attached to each computing op by `k3-select-kernel-config` (or written
    by hand, which pins it) and read by the kernel patterns:
    - `kernel`: the generator (`loop_nest`: the generic loop nest, spread
      over threads on a GPU; the others are dedicated GPU kernels);
    - `tile`: the kernel's tile, whose meaning each kernel documents
      (`kda_recurrent`: [value columns per block, state rows per lane,
      tokens per staged chunk, value columns per lane group]);
    - `warps`: warps per block;
    - `stages`: software-pipeline stages (shared-memory buffers in flight);
    - `blocks_per_sm`: the resident blocks per SM the registers are capped
      for (`nvvm.minctasm`), 0 for no cap;
    - `raster`: for GEMMs over a grid of output tiles, the row tiles of one
      group of the tile order (consecutive tiles walk a group's row tiles,
      then its next column tile, so that the blocks resident at once share
      both operands' tiles in L2); 0 or 1: a row tile's column tiles first;
    - `cluster`: blocks per thread-block cluster (0 or 1: none), for kernels
      whose blocks share operand tiles through TMA multicast, or (the
      one-warpgroup tile of `linear_tma_wgmma`) split K and sum their
      partial tiles through distributed shared memory;
    - `scheduler`: for persistent kernels (a block per SM walking the
      tiles), `strided` (block b takes tiles b, b + grid, ...) or `counter`
      (each block claims its next tile from a device counter, so that the
      tiles in flight stay a contiguous window of the tile order however
      unequal the tiles' costs);
    - `prefetch`: for the grouped and dense GLU GEMMs (`moe_grouped_wgmma`,
      `glu_wgmma`, bf16 weights), how many k-steps past the step whose
      tiles a thread loads into shared memory it prefetches that later
      step's TMA tiles into L2 (`k3gpu.tma_prefetch_tile`); 0: none.
  }];
  let parameters = (ins
    "KernelKind":$kernel,
    K3_OptionalSizesParameter<"tile sizes">:$tile,
    DefaultValuedParameter<"int64_t", "0">:$warps,
    DefaultValuedParameter<"int64_t", "0">:$stages,
    DefaultValuedParameter<"int64_t", "0">:$blocks_per_sm,
    DefaultValuedParameter<"int64_t", "0">:$raster,
    DefaultValuedParameter<"int64_t", "0">:$cluster,
    DefaultValuedParameter<"TileScheduler", "TileScheduler::strided">:$scheduler,
    DefaultValuedParameter<"int64_t", "0">:$prefetch
  );
  let assemblyFormat = "`<` struct(params) `>`";
}

//===----------------------------------------------------------------------===//
// Launch shapes
//===----------------------------------------------------------------------===//

def K3_GridSym_None : I32EnumAttrCase<"none", 0>;
def K3_GridSym_NumTokens : I32EnumAttrCase<"num_tokens", 1>;
def K3_GridSym_NumSeqs : I32EnumAttrCase<"num_seqs", 2>;
def K3_GridSym_DeviceSMCount : I32EnumAttrCase<"device_sm_count", 3>;
def K3_GridSymbol : I32EnumAttr<"GridSymbol",
    "the runtime size a grid dimension grows with",
    [K3_GridSym_None, K3_GridSym_NumTokens, K3_GridSym_NumSeqs,
     K3_GridSym_DeviceSMCount]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}

def K3_LaunchShapeAttr : K3_Attr<"LaunchShape", "launch_shape"> {
  let summary = "grid, block and dynamic shared memory of a GPU kernel";
  let description = [{
    The launch of a `gpu.func` as `gpu.launch_func` states it, with the
    grid's x size symbolic: `ceil_div(grid_scale * S + grid_offset,
    grid_divisor)` blocks, where S is `grid_symbol` (`none`: 0), a runtime
    size of the call (`num_tokens`, `num_seqs`) or of the device
    (`device_sm_count`). Grid z is 1. Grid y is `cluster_y`: with more
    than 1, the `cluster_y` blocks of one x form a thread-block cluster
    (the kernel's `nvvm.cluster_dim` is [1, cluster_y, 1]), their rank in
    it their block index in y.
  }];
  let parameters = (ins
    "GridSymbol":$grid_symbol,
    "int64_t":$grid_scale,
    "int64_t":$grid_offset,
    "int64_t":$grid_divisor,
    K3_SizesParameter<"threads per block in x, y, z">:$block,
    DefaultValuedParameter<"int64_t", "0">:$dynamic_smem,
    DefaultValuedParameter<"int64_t", "1">:$cluster_y
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// TMA tensor maps
//===----------------------------------------------------------------------===//

def K3_Swizzle_None : I32EnumAttrCase<"none", 0>;
def K3_Swizzle_32B : I32EnumAttrCase<"swizzle_32b", 1>;
def K3_Swizzle_64B : I32EnumAttrCase<"swizzle_64b", 2>;
def K3_Swizzle_128B : I32EnumAttrCase<"swizzle_128b", 3>;
def K3_TensorMapSwizzle : I32EnumAttr<"TensorMapSwizzle",
    "shared-memory swizzle of a TMA box",
    [K3_Swizzle_None, K3_Swizzle_32B, K3_Swizzle_64B, K3_Swizzle_128B]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}

def K3_TensorMapAttr : K3_Attr<"TensorMap", "tensor_map"> {
  let summary = "a TMA tensor map a GPU kernel takes as a parameter";
  let description = [{
    The kernel's extra parameter (after `num_tokens`, `num_seqs`, in the
    order of the kernel's `k3.tensor_maps`) is the device address of a
    CUtensorMap over its operand `operand` (an index into the kernel's
    tensor arguments), which the runtime encodes per call: the operand's
    symbolic shape, innermost dimension first, row-major strides, this
    `box` (elements per dimension, innermost first), `swizzle`, L2
    promotion to 256 bytes and zero fill out of bounds (a partial tile
    reads zeros). A `box` of lower rank than the operand reads the
    operand's leading dimensions as one (row-major, they are contiguous):
    a box of rank 2 over [T, K, I] maps [T K, I].
  }];
  let parameters = (ins
    "int64_t":$operand,
    K3_SizesParameter<"box sizes, innermost first">:$box,
    "TensorMapSwizzle":$swizzle
  );
  let assemblyFormat = "`<` struct(params) `>`";
}

//===----------------------------------------------------------------------===//
// Partitioning (docs/scaling.md)
//===----------------------------------------------------------------------===//

def K3_WeightShardAttr : K3_Attr<"WeightShard", "weight_shard"> {
  let summary = "a weight that is each rank's slice of a checkpoint tensor";
  let description = [{
    On a `k3.weight` of an SPMD program (`k3.shard`): the weight's type is
    one rank's slice; rank `r` of `group` (`tp`, `ep` or `cp`) holds the
    checkpoint tensor's elements `[r n, (r + 1) n)` along `dim`, `n` the
    type's size. The checkpoint tensor is `extent` long there (0: `parts`
    times `n`; longer where no rank reads its tail, as K3's A_log padded to
    128 entries of which the first H are the heads'). The artifact carries
    it (section SHRD); the runtime slices at load.

    ```mlir
    %w = k3.weight "model.layers.0.mlp.down_proj.weight"
        {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 1>}
        : tensor<64x48xbf16>
    ```
  }];
  let parameters = (ins StringRefParameter<"tp, ep or cp">:$group,
                        "int64_t":$parts, "int64_t":$dim,
                        DefaultValuedParameter<"int64_t", "0",
                          "the checkpoint's size along dim (0: parts x the type's)">:$extent);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // K3_KERNEL_ATTRS_TD

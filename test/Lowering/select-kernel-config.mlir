// k3-select-kernel-config (lowering/SelectKernelConfig.cpp, rules in
// lowering/KernelConfigRules.cpp): the module's target, one typed
// #k3.kernel_config per op that becomes a kernel, overrides, pinned configs
// and the checks. One RUN per rule.
//
// On the CPU every op is a loop nest; the target is recorded.
// RUN: k3-opt %s --k3-select-kernel-config | FileCheck %s --check-prefix=CPU
// On CUDA the defaults of each kernel (see the GPU checks below).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=GPU
// An override of the linears' kernel is taken only where it covers the op
// (3xTF32: f32 input, sizes multiples of 32): @lin_f32 but not @lin_odd,
// which keeps its default.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_mma_3xtf32" | FileCheck %s --check-prefix=MMA
// A part with more SMs: the chain takes fewer warps (the fewest whose blocks
// fit the SMs in one wave).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=target.sm_count=1024" | FileCheck %s --check-prefix=WIDE
// Tuning a parameter of every op of a kind; the recurrent tile sets warps.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=kda.tile=64x8x4x4,rms_norm.tile=4,rms_norm.warps=4" | FileCheck %s --check-prefix=TUNED
// report=1 prints each config.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda report=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// A decode entry's recurrent KDA stages one token per chunk.
// RUN: k3-opt %s --k3-decode-entry --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=DECODE
// An override scoped to one entry (`<op>@decode`): the prefill's op keeps
// its default.
// RUN: k3-opt %s --k3-decode-entry --k3-select-kernel-config="target=cuda override=kda@decode.tile=32x8x1x4" | FileCheck %s --check-prefix=SCOPED
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda@step.warps=2" 2>&1 | FileCheck %s --check-prefix=BADSCOPE
// Errors: an unknown target, parameter, kernel, a malformed override, a
// dedicated kernel on the CPU, a config its kernel cannot run.
// RUN: not k3-opt %s --k3-select-kernel-config=target=sm_75x 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda.depth=2" 2>&1 | FileCheck %s --check-prefix=BADPARAM
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=target.l2_bytes=2" 2>&1 | FileCheck %s --check-prefix=BADTPARAM
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda.warps=two" 2>&1 | FileCheck %s --check-prefix=NOTINT
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda.tile=32x8x16x3" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=rms_norm.kernel=loop_nest,rms_norm.warps=64" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=target.smem_per_block=4096" 2>&1 | FileCheck %s --check-prefix=SMEM

// CPU: module attributes {k3.target = #k3.cpu_target}
// CPU: k3.rms_norm {{.*}}k3.kernel_config = #k3.kernel_config<kernel = loop_nest>
// CPU: k3.kda {{.*}}k3.kernel_config = #k3.kernel_config<kernel = loop_nest>
// CPU-NOT: k3.weight {{.*}}kernel_config

// The H200's limits are the defaults, elided when printed.
// GPU: module attributes {k3.target = #k3.gpu_target<chip = "sm_90a">}
// RMSNorm (test/Lowering/cuda-rms-norm-rows.mlir): a warp per row of these
// 96 channels, 8 rows per block (a block per row for rows over 1024).
// GPU: k3.rms_norm {{.*}}#k3.kernel_config<kernel = rms_norm_rows, tile = [8], warps = 8>
// The recurrent KDA at K = V = 128: 64 state values per lane (P = 8 lanes
// per column group of C = 4 columns), 32 columns per block, 16 staged
// tokens.
// GPU: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2>
// GPU: k3.kda_mma_operands {{.*}}#k3.kernel_config<kernel = kda_mma_operands, tile = [16], warps = 4, blocks_per_sm = 5>
// The chain: blocks of 8 warps (16 value columns each), which a call with
// few sequences may split down to one active warp (tile[1] = 16 columns)
// at run time (test/Lowering/cuda-kda-mma.mlir).
// GPU: k3.kda_mma_recurrence {{.*}}#k3.kernel_config<kernel = kda_mma_chain, tile = [16, 16], warps = 8, stages = 3, blocks_per_sm = 1>
// Linears: the tensor cores where they cover the op (f32 input, sizes
// multiples of 32: 3xTF32), else the GEMV (test/Lowering/cuda-linear-gemv.mlir).
// GPU: k3.linear {{.*}}#k3.kernel_config<kernel = linear_mma_3xtf32, tile = [64, 32, 32], warps = 4>{{.*}}tensor<32x96xf32>
// GPU: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>{{.*}}tensor<40x96xf32>

// MMA: k3.linear {{.*}}#k3.kernel_config<kernel = linear_mma_3xtf32, tile = [64, 32, 32], warps = 4>{{.*}}tensor<32x96xf32>
// MMA: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv, tile = [2, 4], warps = 4>{{.*}}tensor<40x96xf32>

// WIDE: sm_count = 1024
// The SM count no longer sets the chain's block (the split is chosen at
// run time, against the target's SMs).
// WIDE: k3.kda_mma_recurrence {{.*}}tile = [16, 16], warps = 8, stages = 3, blocks_per_sm = 1>

// TUNED: k3.rms_norm {{.*}}#k3.kernel_config<kernel = rms_norm_rows, tile = [4], warps = 4>
// TUNED: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [64, 8, 4, 4], warps = 4>

// REPORT-DAG: remark: kernel config #k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2>
// REPORT-DAG: remark: kernel config #k3.kernel_config<kernel = kda_mma_chain, tile = [16, 16], warps = 8, stages = 3, blocks_per_sm = 1>

// DECODE: func.func @forward_decode
// DECODE: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [64, 8, 1, 4], warps = 4>

// SCOPED-LABEL: func.func @forward(
// SCOPED: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2>
// SCOPED-LABEL: func.func @forward_decode(
// SCOPED: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 1, 4], warps = 2>
// BADSCOPE: error: override 'kda@step.warps=2': the entry after '@' must be decode or prefill, got 'step'

// BADTARGET: error: unknown target 'sm_75x' (expected cpu, cuda or sm_90a)
// BADPARAM: error: unknown kernel config parameter 'depth' (kernel, tile, warps, stages, blocks_per_sm, raster, cluster, scheduler, prefetch)
// BADTPARAM: error: unknown target parameter 'l2_bytes'
// MALFORMED: error: override 'kda' must be <op>.<param>=<value> (<op> an op or kernel name, optionally @decode or @prefill) or target.<param>=<value>
// NOTINT: error: override kda.warps needs an integer, got 'two'
// BADTILE: error: 'k3.kda' op kda_recurrent tile C must be 1 or 4
// BADWARPS: error: 'k3.rms_norm' op loop_nest warps must give 32 to 1024 threads, got 64 warps
// SMEM: error: 'k3.kda_mma_recurrence' op kda_mma_chain needs {{[0-9]+}} bytes of shared memory, the target has 4096

func.func @forward(
    %x: tensor<?x96xf32> {k3.name = "x", k3.dims = array<i64: -1, 96>},
    %q: tensor<1x?x4x128xbf16> {k3.name = "q", k3.dims = array<i64: 1, -1, 4, 128>},
    %g: tensor<1x?x4x128xf32> {k3.name = "g", k3.dims = array<i64: 1, -1, 4, 128>},
    %beta: tensor<1x?x4xbf16> {k3.name = "beta", k3.dims = array<i64: 1, -1, 4>},
    %qq: tensor<1x?x96x128xbf16> {k3.name = "qq", k3.dims = array<i64: 1, -1, 96, 128>},
    %bb: tensor<1x?x96xbf16> {k3.name = "bb", k3.dims = array<i64: 1, -1, 96>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x96xf32>, tensor<1x?x4x128xbf16>, tensor<1x?x96x128xbf16>,
        tensor<?x32xf32>, tensor<?x40xf32>) {
  %wn = k3.weight "norm" : tensor<96xf32>
  %y = k3.rms_norm %x, %wn {epsilon = 1.0e-6 : f64} : (tensor<?x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  // The recurrent kernel (the log-decay given, no gate in the op).
  %o, %s = k3.kda %q, %q, %q, %g, %beta {scale = 0.088388347648318447 : f64}
      : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>,
         tensor<1x?x4x128xf32>, tensor<1x?x4xbf16>)
      -> (tensor<1x?x4x128xbf16>, tensor<1x4x128x128xf32>)
  // The tensor-core pair (k3-kda-mma-split of a bf16 KDA with its gate).
  %al = k3.weight "A_log" : tensor<96xf32>
  %dt = k3.weight "dt_bias" : tensor<12288xf32>
  %packed = k3.kda_mma_operands %qq, %qq, %qq, %bb cu_seqlens(%cu) gate_params(%al, %dt)
      {lower_bound = -5.0 : f64, scale = 0.088388347648318447 : f64, use_beta_sigmoid, use_qk_l2norm}
      : (tensor<1x?x96x128xbf16>, tensor<1x?x96x128xbf16>, tensor<1x?x96x128xbf16>,
         tensor<1x?x96xbf16>, tensor<?xi32>, tensor<96xf32>, tensor<12288xf32>)
      -> tensor<1x?x96x336xi32>
  %oo, %ss = k3.kda_mma_recurrence %packed, %qq cu_seqlens(%cu)
      : (tensor<1x?x96x336xi32>, tensor<1x?x96x128xbf16>, tensor<?xi32>)
      -> (tensor<1x?x96x128xbf16>, tensor<?x96x128x128xf32>)
  %w1 = k3.weight "lin_f32" : tensor<32x96xf32>
  %l1 = k3.linear %x, %w1 : (tensor<?x96xf32>, tensor<32x96xf32>) -> tensor<?x32xf32>
  %w2 = k3.weight "lin_odd" : tensor<40x96xf32>
  %l2 = k3.linear %x, %w2 : (tensor<?x96xf32>, tensor<40x96xf32>) -> tensor<?x40xf32>
  return %y, %o, %oo, %l1, %l2 : tensor<?x96xf32>, tensor<1x?x4x128xbf16>, tensor<1x?x96x128xbf16>, tensor<?x32xf32>, tensor<?x40xf32>
}

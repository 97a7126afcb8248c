// The default model compiles for sm_90a: every kernel through NVVM and the
// NVPTX backend to PTX, then ptxas to a cubin; launches carry symbolic grids.
// ptxas -v on the emitted PTX reports no register spills in any kernel.
// REQUIRES: ptxas
// RUN: k3-opt %k3_src_root/examples/tiny_k3.mlir --k3-compile="target=cuda output=%t.k3bin ptx-output=%t.ptx max-tokens=512 max-seqs=4" -o /dev/null
// RUN: test -s %t.k3bin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: FileCheck %s --check-prefix=SHARED --implicit-check-not=".shared .align 4 " --implicit-check-not=".shared .align 8 " < %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: not k3-run %t.k3bin --device cpu --random-weights 1 --prompt 1,2 2>&1 | FileCheck %s --check-prefix=TARGET

// One kernel per op kind (shared by identical ops), one per parallel phase
// (the router split into a linear and k3.moe_topk by k3-split-router):
// latent attention is one kernel (a block per token and head), the cache update included.
// PTX: .target sm_90a
// PTX-DAG: .visible .entry embedding_0(
// PTX-DAG: .visible .entry kda_{{[0-9]+}}(
// PTX-DAG: .visible .entry moe_topk_{{[0-9]+}}(
// PTX-DAG: .visible .entry latent_attention_{{[0-9]+}}(

// Every kernel waits for the one before it and then lets the next start
// (k3-grid-dependency-control), and the artifact says so.
// PTX: griddepcontrol.wait;
// PTX-NEXT: griddepcontrol.launch_dependents;
// RUN: k3-run %t.k3bin --describe | FileCheck %s --check-prefix=META
// META: meta grid_dependency_control = 1

// Every shared-memory array is 16-byte aligned: LLVM merges four 4-byte
// accesses into one 16-byte vector as if it were (moe_dispatch of 6
// experts faulted when the array after its histogram was not).
// SHARED: .shared .align 16

// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill
// PTXAS: Compiling entry function 'embedding_0' for 'sm_90a'
// PTXAS-NOT: {{[1-9][0-9]*}} bytes spill

// A CUDA artifact asked to run on the CPU says so.
// TARGET: cuda-sm_90a

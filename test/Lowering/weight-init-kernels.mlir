// REQUIRES: ptxas
// k3-weight-init-kernels (lowering/WeightInitKernels.cpp): one kernel per
// weight dtype that fills a weight with the runtime's seeded random values
// (splitmix64 of the element index, Box-Muller in f64, rounded to f32 and
// then to the dtype). A GPU kernel walks the elements grid-stride; the CPU
// kernel in one loop. The dtypes here: bf16 (two weights, one kernel) and
// f32.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels --k3-weight-init-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-outline-kernels --k3-weight-init-kernels | FileCheck %s --check-prefix=CPU
// RUN: not k3-opt %s --k3-weight-init-kernels 2>&1 | FileCheck %s --check-prefix=NOKERNELS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx

// NOKERNELS: error: expects outlined kernels (@k3_kernels; run --k3-outline-kernels first)

// CHECK-LABEL: gpu.func @k3_weight_init_bf16(
// CHECK-SAME: %{{.*}}: memref<bf16>, %{{.*}}: i64, %[[BASE:.*]]: i64, %[[KIND:.*]]: i64, %[[PBITS:.*]]: i64) kernel
// CHECK: %[[PARAM:.*]] = arith.bitcast %[[PBITS]] : i64 to f64
// CHECK: gpu.block_id  x
// CHECK: gpu.grid_dim  x
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// The hash: splitmix64's constants, then 53 bits to [0, 1).
// CHECK: arith.constant -7046029254386353131 : i64
// CHECK: arith.constant -4658895280553007687 : i64
// CHECK: arith.constant -7723592293110705685 : i64
// CHECK: arith.shrui %{{.*}}, %c11_i64
// CHECK: arith.uitofp %{{.*}} : i64 to f64
// Box-Muller.
// CHECK: math.log
// CHECK: math.sqrt
// CHECK: math.cos
// kind 1 normal, 2 uniform, else the parameter (constant).
// CHECK: arith.cmpi eq, %[[KIND]], %c1_i64
// CHECK: arith.cmpi eq, %[[KIND]], %c2_i64
// CHECK: arith.truncf %{{.*}} : f64 to f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[J]]] : memref<?xbf16, strided<[1]>>
// CHECK-LABEL: gpu.func @k3_weight_init_f32(
// CHECK-NOT: f32 to bf16
// CHECK: memref.store %{{.*}} : memref<?xf32, strided<[1]>>
// CHECK-NOT: gpu.func @k3_weight_init

// CPU-LABEL: func.func @k3_weight_init_bf16(
// CPU-NOT: gpu.
// CPU: scf.for %{{.*}} = %c0 to %{{.*}} step %c1 {
// CPU-LABEL: func.func @k3_weight_init_f32(

// f64 log and cos are libdevice's.
// PTX-LABEL: .entry k3_weight_init_bf16(
// PTX: cvt.rn.f32.f64
// PTX: cvt.rn.bf16.f32

module attributes {k3.vocab_size = 16 : i64} {
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %n = k3.weight "norm" : tensor<8xf32>
  %a = k3.rms_norm %x, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %a, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// RUN: k3-opt %s --pass-pipeline='builtin.module(gpu.module(k3-grid-dependency-control))' | FileCheck %s

// Every kernel of the module begins with the wait for the grid before it,
// then lets the grid after it be scheduled; device functions that are not
// kernels are left alone.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    // CHECK-LABEL: gpu.func @copy
    // CHECK-NEXT:    nvvm.griddepcontrol wait
    // CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
    // CHECK-NEXT:    gpu.thread_id x
    gpu.func @copy(%src: memref<64xf32>, %dst: memref<64xf32>) kernel {
      %t = gpu.thread_id x
      %v = memref.load %src[%t] : memref<64xf32>
      memref.store %v, %dst[%t] : memref<64xf32>
      gpu.return
    }
    // CHECK-LABEL: gpu.func @helper
    // CHECK-NOT:     griddepcontrol
    // CHECK:         gpu.return
    gpu.func @helper() {
      gpu.return
    }
  }
}

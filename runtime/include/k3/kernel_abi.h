/* k3/kernel_abi.h - what a compiled kernel sees ("bare-pointer packed params
 * v1").
 *
 * Every kernel, CPU and GPU alike, receives its arguments the way
 * cuLaunchKernel's kernelParams passes them: an array `params` where
 * params[i] points to the value of the i-th launch argument:
 *   buffer / weight  -> a pointer-sized device address (void* / CUdeviceptr)
 *   i32 immediate    -> int32_t
 *   i64 immediate    -> int64_t
 *   f32 immediate    -> float
 *   runtime symbol   -> int64_t (its value for this call)
 *
 * CPU ("cpu-x86_64" shared objects): the symbol is
 *     extern "C" void name(void **params);
 * and params[num_args] points to a k3_cpu_launch_context. The runtime calls
 * the kernel once per grid block (x fastest, then y, then z); a kernel that
 * does all the work itself is launched with grid (1,1,1). Blocks of one
 * launch are independent, so a runtime may run them concurrently.
 *
 * CUDA ("cuda-sm_90a" cubins): a __global__ function with the launch's
 * arguments as its parameters, launched with cuLaunchKernel(grid, block,
 * shared_mem_bytes, kernelParams = params); no trailing context. */
#ifndef K3_KERNEL_ABI_H
#define K3_KERNEL_ABI_H

#include <stdint.h>

#define K3_KERNEL_ABI_VERSION 1

typedef struct k3_cpu_launch_context {
  int64_t block_id[3];  /* this block's index (x, y, z) */
  int64_t grid_dim[3];  /* launch grid */
  int64_t block_dim[3]; /* launch block dims (a hint on CPU, e.g. tile size) */
  int64_t shared_mem_bytes;
  void *shared_mem; /* scratch of shared_mem_bytes, private to this block (NULL
                       if 0) */
} k3_cpu_launch_context;

typedef void (*k3_cpu_kernel_fn)(void **params);

#endif

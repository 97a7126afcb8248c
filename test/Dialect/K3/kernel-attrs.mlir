// The kernel-layer attributes (dialects/K3/K3KernelAttrs.td): they print as
// they parse, defaults elided, and their verifiers reject what no kernel or
// device could use.
// RUN: k3-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK: module attributes {k3.target = #k3.gpu_target<chip = "sm_90a", sm_count = 114>}
// CHECK: k3.kernel_config = #k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2>
// CHECK: k3.launch_shape = #k3.launch_shape<grid_symbol = device_sm_count, grid_scale = 8, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]>
module attributes {k3.target = #k3.gpu_target<chip = "sm_90a", sm_count = 114, features = "+ptx80">} {
  func.func @f() attributes {
      k3.kernel_config = #k3.kernel_config<kernel = kda_recurrent, tile = [32, 8, 16, 4], warps = 2, stages = 0>,
      k3.launch_shape = #k3.launch_shape<grid_symbol = device_sm_count, grid_scale = 8, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1], dynamic_smem = 0>} {
    return
  }
}

// -----

// CHECK: module attributes {k3.target = #k3.cpu_target}
module attributes {k3.target = #k3.cpu_target} {}

// -----

// expected-error @below {{"k3.target" must be #k3.cpu_target or #k3.gpu_target}}
module attributes {k3.target = "cuda"} {}

// -----

// expected-error @below {{chip must be an sm_XY name, got 'gfx942'}}
module attributes {k3.target = #k3.gpu_target<chip = "gfx942">} {}

// -----

// expected-error @below {{smem_per_block (300000) exceeds smem_per_sm (233472)}}
module attributes {k3.target = #k3.gpu_target<chip = "sm_90a", smem_per_block = 300000>} {}

// -----

// expected-error @below {{sm_count must be in [1, 1024], got 0}}
module attributes {k3.target = #k3.gpu_target<chip = "sm_90a", sm_count = 0>} {}

// -----

// expected-error @below {{block has more than 1024 threads}}
func.func @g() attributes {k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [64, 32, 1]>} {
  return
}

// -----

// expected-error @below {{grid_scale must be 0 without a symbol and positive with one, got 3}}
func.func @h() attributes {k3.launch_shape = #k3.launch_shape<grid_symbol = none, grid_scale = 3, grid_offset = 0, grid_divisor = 1, block = [64, 1, 1]>} {
  return
}

// -----

// expected-error @below {{grid_divisor must be positive, got 0}}
func.func @i() attributes {k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 1, grid_offset = 0, grid_divisor = 0, block = [64, 1, 1]>} {
  return
}

// -----

// Cluster pairs (grid y 2) print their cluster_y; a cluster is 1 to 8
// blocks, Hopper's portable size.
// CHECK-LABEL: func.func @pairs()
// CHECK-SAME: dynamic_smem = 99328, cluster_y = 2>
func.func @pairs() attributes {k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 2, grid_offset = 1151, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 99328, cluster_y = 2>} {
  return
}

// -----

// expected-error @below {{cluster_y must be in [1, 8], got 9}}
func.func @j() attributes {k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 0, grid_divisor = 1, block = [64, 1, 1], cluster_y = 9>} {
  return
}

// -----

// expected-error @below {{expected '['}}
// expected-error @below {{failed to parse K3_KernelConfigAttr parameter 'tile'}}
func.func @j() attributes {k3.kernel_config = #k3.kernel_config<kernel = loop_nest, tile = 4>} {
  return
}

// k3-select-kernel-config's rule for the recurrent KDA kernel
// (chooseKDARecurrentTile in lowering/KernelConfigRules.cpp) at key
// dimensions other than 128: P is a power of two dividing K, and a shape
// with no whole-warp tile falls back to the loop nest instead of failing.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s
// The decode entry takes the unstaged form (S = 1), 64 value columns a block,
// at every shape.
// RUN: k3-opt %s --k3-decode-entry --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=DECODE

// K = V = 192: P = 16 (K * C / 64 = 12 rounded up to a power of two that
// divides K), 48 values per lane, 4 warps; 8 staged tokens keep the
// staging under 40 KiB.
// CHECK-LABEL: func.func @forward
// CHECK: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [32, 16, 8, 4], warps = 4>
// K = V = 100: four columns per lane would keep 100 values per lane; one
// column, P = 2 (50 values).
// CHECK: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [32, 2, 16, 1], warps = 2>
// K = 20, V = 4: one column group of 4 threads; no whole warp.
// CHECK: k3.kda {{.*}}#k3.kernel_config<kernel = loop_nest, warps = 8>

// DECODE-LABEL: func.func @forward_decode
// DECODE: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [64, 16, 1, 4], warps = 8>
// DECODE: k3.kda {{.*}}#k3.kernel_config<kernel = kda_recurrent, tile = [64, 2, 1, 1], warps = 4>
// DECODE: k3.kda {{.*}}#k3.kernel_config<kernel = loop_nest, warps = 8>
func.func @forward(
    %q192: tensor<1x?x2x192xbf16> {k3.name = "q192", k3.dims = array<i64: 1, -1, 2, 192>},
    %g192: tensor<1x?x2x192xf32> {k3.name = "g192", k3.dims = array<i64: 1, -1, 2, 192>},
    %q100: tensor<1x?x2x100xbf16> {k3.name = "q100", k3.dims = array<i64: 1, -1, 2, 100>},
    %g100: tensor<1x?x2x100xf32> {k3.name = "g100", k3.dims = array<i64: 1, -1, 2, 100>},
    %q20: tensor<1x?x2x20xbf16> {k3.name = "q20", k3.dims = array<i64: 1, -1, 2, 20>},
    %v4: tensor<1x?x2x4xbf16> {k3.name = "v4", k3.dims = array<i64: 1, -1, 2, 4>},
    %g20: tensor<1x?x2x20xf32> {k3.name = "g20", k3.dims = array<i64: 1, -1, 2, 20>},
    %b2: tensor<1x?x2xbf16> {k3.name = "b2", k3.dims = array<i64: 1, -1, 2>})
    -> (tensor<1x?x2x192xbf16>, tensor<1x?x2x100xbf16>, tensor<1x?x2x4xbf16>) {
  %o192, %s192 = k3.kda %q192, %q192, %q192, %g192, %b2 {scale = 0.072168783648703216 : f64}
      : (tensor<1x?x2x192xbf16>, tensor<1x?x2x192xbf16>, tensor<1x?x2x192xbf16>,
         tensor<1x?x2x192xf32>, tensor<1x?x2xbf16>)
      -> (tensor<1x?x2x192xbf16>, tensor<1x2x192x192xf32>)
  %o100, %s100 = k3.kda %q100, %q100, %q100, %g100, %b2 {scale = 0.1 : f64}
      : (tensor<1x?x2x100xbf16>, tensor<1x?x2x100xbf16>, tensor<1x?x2x100xbf16>,
         tensor<1x?x2x100xf32>, tensor<1x?x2xbf16>)
      -> (tensor<1x?x2x100xbf16>, tensor<1x2x100x100xf32>)
  %o20, %s20 = k3.kda %q20, %q20, %v4, %g20, %b2 {scale = 0.22360679774997896 : f64}
      : (tensor<1x?x2x20xbf16>, tensor<1x?x2x20xbf16>, tensor<1x?x2x4xbf16>,
         tensor<1x?x2x20xf32>, tensor<1x?x2xbf16>)
      -> (tensor<1x?x2x4xbf16>, tensor<1x2x20x4xf32>)
  return %o192, %o100, %o20 : tensor<1x?x2x192xbf16>, tensor<1x?x2x100xbf16>, tensor<1x?x2x4xbf16>
}

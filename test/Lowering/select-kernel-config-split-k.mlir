// k3-select-kernel-config's split-K rule for prefill linears on the
// [128, 128] tiles (linearSplitK in lowering/KernelConfigRules.cpp): where
// max-tokens rows give at most half as many tiles as the target has SMs
// (132), K is split over a cluster of 2, 4 or 8 blocks (the least that
// gives half the SMs a block, each block at least 8 of K's 64-column
// steps), with 4 stages and one block per SM (the partial tile lies after
// the stages).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=1024" | FileCheck %s
// At 8192 rows every one of them has enough tiles.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=8192" | FileCheck %s --check-prefix=MANY
// Without max-tokens the tiles are unknown: unsplit.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda" | FileCheck %s --check-prefix=UNKNOWN

func.func @forward(%x: tensor<?x7168xbf16> {k3.name = "x", k3.dims = array<i64: -1, 7168>},
                   %xs: tensor<?x2304xbf16> {k3.name = "xs", k3.dims = array<i64: -1, 2304>})
    -> (tensor<?x576xbf16>, tensor<?x96xbf16>, tensor<?x256xbf16>, tensor<?x2304xbf16>) {
  %wkv = k3.weight "wkv" : tensor<576x7168xbf16>
  %wb = k3.weight "wb" : tensor<96x7168xbf16>
  %wr = k3.weight "wr" : tensor<256x2304xbf16>
  %wo = k3.weight "wo" : tensor<2304x2304xbf16>
  // CHECK-LABEL: func.func @forward
  // 8 x 5 = 40 tiles: 2 blocks a tile give 80.
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 4, blocks_per_sm = 1, raster = 16, cluster = 2>{{.*}}tensor<?x576xbf16>
  // MANY: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x576xbf16>
  // UNKNOWN: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x576xbf16>
  %kv = k3.linear %x, %wkv : (tensor<?x7168xbf16>, tensor<576x7168xbf16>) -> tensor<?x576xbf16>
  // 8 tiles: 8 blocks a tile (14 k-steps each).
  // CHECK: k3.linear {{.*}}cluster = 8>{{.*}}tensor<?x96xbf16>
  // MANY: k3.linear {{.*}}cluster = 2>{{.*}}tensor<?x96xbf16>
  %b = k3.linear %x, %wb : (tensor<?x7168xbf16>, tensor<96x7168xbf16>) -> tensor<?x96xbf16>
  // 16 tiles, K = 2304 (36 steps): 8 does not divide them, so 4.
  // CHECK: k3.linear {{.*}}cluster = 4>{{.*}}tensor<?x256xbf16>
  // MANY: k3.linear {{.*}}stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x256xbf16>
  %r = k3.linear %xs, %wr : (tensor<?x2304xbf16>, tensor<256x2304xbf16>) -> tensor<?x256xbf16>
  // 8 x 18 = 144 tiles: unsplit.
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x2304xbf16>
  %o = k3.linear %xs, %wo : (tensor<?x2304xbf16>, tensor<2304x2304xbf16>) -> tensor<?x2304xbf16>
  return %kv, %b, %r, %o : tensor<?x576xbf16>, tensor<?x96xbf16>, tensor<?x256xbf16>, tensor<?x2304xbf16>
}

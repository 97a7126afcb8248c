// k3-select-kernel-config's rule for a prefill's grouped gate/up GEMM
// (groupedGateUpPrefersPersistent in lowering/KernelConfigRules.cpp): where
// the experts' segments average at least 256 rows at max-tokens
// (max-tokens x top-k >= 256 x experts), it takes the persistent
// warp-specialised schedule, [128, 256, 64] tiles, 4 stages, one block
// per SM, tiles claimed from a counter, in cluster pairs where its column
// tiles pair up; shorter segments (K3's) keep the
// one-warpgroup [128, 128] tiles, as does the down GEMM.
// 8 experts top-2: 1024 x 2 = 256 x 8.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1024" | FileCheck %s
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1000" | FileCheck %s --check-prefix=SHORT
// Without max-tokens the segments are unknown.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda" | FileCheck %s --check-prefix=SHORT
// Overrides apply on top of the rule's config: the strided order back.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1024 override=moe_grouped_glu.scheduler=strided" | FileCheck %s --check-prefix=STRIDED
// An intermediate width of 256 (two 128-channel column tiles a row tile,
// which pair up) runs in cluster pairs that share the weights' tiles
// (verifyGateUpPairs); unpaired again with cluster 0, and the strided
// order needs it (pairs claim from the counter).
// RUN: sed -e '/"w[13]"/s/8x128x256/8x256x256/; /"w2"/s/8x256x128/8x256x256/; s/tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>)/tensor<8x256x256xbf16>, tensor<8x256x256xbf16>, tensor<8x256x256xbf16>)/' %s > %t.wide.mlir
// RUN: k3-opt %t.wide.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1024" | FileCheck %s --check-prefix=PAIRS
// RUN: k3-opt %t.wide.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1024 override=moe_grouped_glu.cluster=0,moe_grouped_glu.scheduler=strided" | FileCheck %s --check-prefix=STRIDED
// RUN: not k3-opt %t.wide.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda max-tokens=1024 override=moe_grouped_glu.scheduler=strided" 2>&1 | FileCheck %s --check-prefix=PAIRSTRIDED

// CHECK: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 256, 64], warps = 12, stages = 4, blocks_per_sm = 1, scheduler = counter>
// CHECK: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// SHORT: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// SHORT: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// STRIDED: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 256, 64], warps = 12, stages = 4, blocks_per_sm = 1>
// PAIRS: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 256, 64], warps = 12, stages = 4, blocks_per_sm = 1, cluster = 2, scheduler = counter>
// PAIRS: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// PAIRSTRIDED: error: 'k3.moe_grouped_glu' op cluster 2 of k3.moe_grouped_glu pairs the persistent schedule's blocks: tile [128, 256, 64] and scheduler counter

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// k3-select-kernel-config's rule for prefill linears with bf16 results and
// the dense GLU's gate/up GEMM (linearPrefersSharedEpilogue,
// gluPrefersSharedEpilogue in lowering/KernelConfigRules.cpp): the
// persistent warp-specialised schedule ([128, 256, 64], 12 warps, 3 stages,
// one block per SM, results through shared memory) where max-tokens rows
// give [128, 256] tiles that keep the last wave at least 80 % busy ([128,
// 192, 64] and 4 stages where those waves are 8 points busier); the
// [128, 128] tiles at three blocks an SM otherwise.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=8192" | FileCheck %s
// Fewer than 1024 rows: the [128, 128] tiles everywhere.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=512" | FileCheck %s --check-prefix=FEW

func.func @forward(%x: tensor<?x2304xbf16> {k3.name = "x", k3.dims = array<i64: -1, 2304>})
    -> (tensor<?x4096xbf16>, tensor<?x576xbf16>, tensor<?x896xbf16>, tensor<?x4096xf32>,
        tensor<?x1024xbf16>, tensor<?x256xbf16>, tensor<?x2304xbf16>) {
  %w = k3.weight "w" : tensor<4096x2304xbf16>
  %wkv = k3.weight "wkv" : tensor<576x2304xbf16>
  %wr = k3.weight "wr" : tensor<896x2304xbf16>
  // CHECK-LABEL: func.func @forward
  // 64 x 16 = 1024 tiles, 8 waves of 132 (97 %).
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 256, 64], warps = 12, stages = 3, blocks_per_sm = 1, raster = 16>{{.*}}tensor<?x4096xbf16>
  // FEW: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x4096xbf16>
  %y = k3.linear %x, %w : (tensor<?x2304xbf16>, tensor<4096x2304xbf16>) -> tensor<?x4096xbf16>
  // 64 x 3 = 192 tiles: the second wave 45 % busy.
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x576xbf16>
  %kv = k3.linear %x, %wkv : (tensor<?x2304xbf16>, tensor<576x2304xbf16>) -> tensor<?x576xbf16>
  // 64 x 4 = 256 tiles, 2 waves (97 %).
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 256, 64], warps = 12, stages = 3, blocks_per_sm = 1, raster = 16>{{.*}}tensor<?x896xbf16>
  %r = k3.linear %x, %wr : (tensor<?x2304xbf16>, tensor<896x2304xbf16>) -> tensor<?x896xbf16>
  // f32 results keep the register epilogue's tiles: [128, 128].
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x4096xf32>
  %f = k3.linear %x, %w : (tensor<?x2304xbf16>, tensor<4096x2304xbf16>) -> tensor<?x4096xf32>
  // The dense GLU: 1024 channels, 64 x 8 = 512 tiles (4 waves, 97 %).
  // CHECK: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_wgmma, tile = [128, 256, 64], warps = 12, stages = 3, blocks_per_sm = 1, raster = 16>{{.*}}tensor<?x1024xbf16>
  // FEW: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x1024xbf16>
  %wg = k3.weight "wg" : tensor<1024x2304xbf16>
  %wu = k3.weight "wu" : tensor<1024x2304xbf16>
  %h = k3.glu_gate_up silu %x, %wg, %wu : (tensor<?x2304xbf16>, tensor<1024x2304xbf16>, tensor<1024x2304xbf16>) -> tensor<?x1024xbf16>
  // 256 channels: 64 x 2 = 128 tiles, one wave 97 % busy.
  // CHECK: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_wgmma, tile = [128, 256, 64], warps = 12, stages = 3, blocks_per_sm = 1, raster = 16>{{.*}}tensor<?x256xbf16>
  %wg2 = k3.weight "wg2" : tensor<256x2304xbf16>
  %wu2 = k3.weight "wu2" : tensor<256x2304xbf16>
  %h2 = k3.glu_gate_up silu %x, %wg2, %wu2 : (tensor<?x2304xbf16>, tensor<256x2304xbf16>, tensor<256x2304xbf16>) -> tensor<?x256xbf16>
  // N = 2304 (an o projection's): 64 x 9 = 576 tiles of 256 columns, 4.4
  // waves (87 %), or 64 x 12 = 768 of 192, 5.8 waves (97 %): 192 columns,
  // 4 stages beside their 48 KiB of result tiles.
  // CHECK: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 192, 64], warps = 12, stages = 4, blocks_per_sm = 1, raster = 16>{{.*}}tensor<?x2304xbf16>
  // FEW: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<?x2304xbf16>
  %wo = k3.weight "wo" : tensor<2304x2304xbf16>
  %o = k3.linear %x, %wo : (tensor<?x2304xbf16>, tensor<2304x2304xbf16>) -> tensor<?x2304xbf16>
  return %y, %kv, %r, %f, %h, %h2, %o : tensor<?x4096xbf16>, tensor<?x576xbf16>, tensor<?x896xbf16>, tensor<?x4096xf32>,
      tensor<?x1024xbf16>, tensor<?x256xbf16>, tensor<?x2304xbf16>
}

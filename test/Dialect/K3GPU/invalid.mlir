// RUN: k3-opt %s -split-input-file -verify-diagnostics

func.func @mixed(%a: vector<4x2xbf16>, %b: vector<2x1xf32>,
                 %c: vector<2x2xf32>) -> vector<2x2xf32> {
  // expected-error @+1 {{A and B need the same element type}}
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xbf16>, vector<2x1xf32> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// -----

func.func @bad_a(%a: vector<2x2xbf16>, %b: vector<2x2xbf16>,
                 %c: vector<2x2xf32>) -> vector<2x2xf32> {
  // expected-error @+1 {{needs A 'vector<4x2xbf16>' and B 'vector<2x2xbf16>'}}
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<2x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// -----

func.func @bad_tf32(%a: vector<4x2xf32>, %b: vector<2x2xf32>,
                    %c: vector<2x2xf32>) -> vector<2x2xf32> {
  // expected-error @+1 {{needs A 'vector<4x1xf32>' and B 'vector<2x1xf32>'}}
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xf32>, vector<2x2xf32> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// -----

func.func @bad_c(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>,
                 %c: vector<4x1xf32>) -> vector<4x1xf32> {
  // expected-error @+1 {{needs C vector<2x2xf32>}}
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xbf16>, vector<2x2xbf16> -> vector<4x1xf32>
  return %d : vector<4x1xf32>
}

// -----

func.func @f16(%a: vector<4x2xf16>, %b: vector<2x2xf16>,
               %c: vector<2x2xf32>) -> vector<2x2xf32> {
  // expected-error @+1 {{operand #0 must be vector of bfloat16 type or 32-bit float values of ranks 2}}
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xf16>, vector<2x2xf16> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// -----

func.func @ballot_i64(%p: i1) -> i64 {
  // expected-error @+1 {{result #0 must be 32-bit signless integer}}
  %m = k3gpu.ballot_count %p : i64
  return %m : i64
}

// -----

func.func @fragment_size(%acc: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{a thread holds 32 registers of}}
  %v = k3gpu.warpgroup_fragment %acc : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> vector<64xf32>
  return
}

// -----

func.func @accumulator_rows(%v: vector<32xf32>) {
  // expected-error @+1 {{needs a 64 x N f32 accumulator}}
  %acc = k3gpu.warpgroup_accumulator %v : vector<32xf32> -> !nvgpu.warpgroup.accumulator<fragmented = vector<128x64xf32>>
  return
}

// -----

func.func @chain_counts(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                        %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                        %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{needs one A source (descriptors or registers) and one B descriptor per step}}
  %d = k3gpu.warpgroup_mma_chain [%a, %a], [%b], %c
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>, !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>],
        [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return
}

// -----

func.func @chain_n(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                   %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x128xbf16, 3>>,
                   %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{each step needs bf16 B [16, 64]}}
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x128xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return
}

// -----

func.func @chain_two_a_sources(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                               %r: vector<4xi32>,
                               %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                               %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{needs one A source (descriptors or registers)}}
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c registers(%r : vector<4xi32>)
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return
}

// -----

func.func @chain_register_steps(%r: vector<4xi32>,
                                %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                                %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{one B descriptor per step}}
  %d = k3gpu.warpgroup_mma_chain [], [%b, %b], %c registers(%r : vector<4xi32>)
      : [], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>, !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return
}

// -----

func.func @async_chain_read_directly(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                                     %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                                     %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) -> vector<32xf32> {
  // expected-error @+1 {{is async: its result is read only through k3gpu.warpgroup_mma_wait, not 'k3gpu.warpgroup_fragment'}}
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c {async}
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  %v = k3gpu.warpgroup_fragment %d : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> vector<32xf32>
  return %v : vector<32xf32>
}

// -----

func.func @wait_pending(%c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>) {
  // expected-error @+1 {{pending must be in [0, 7], got 8}}
  %d = k3gpu.warpgroup_mma_wait %c {pending = 8}
      : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return
}

// -----

func.func @wait_nothing() {
  // expected-error @+1 {{needs the accumulators of the groups it retires}}
  "k3gpu.warpgroup_mma_wait"() {pending = 0 : i64} : () -> ()
  return
}

// -----

func.func @cluster_load_global(%tile: memref<128x128xf32>, %rank: i32) -> vector<4xf32> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{reads a workgroup memref}}
  %v = k3gpu.cluster_load %tile[%c0, %c0], %rank : memref<128x128xf32> -> vector<4xf32>
  return %v : vector<4xf32>
}

// -----

func.func @cluster_load_type(%tile: memref<128x128xf32, #gpu.address_space<workgroup>>, %rank: i32) -> vector<4xbf16> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{loads a 1-D vector of the memref's element type}}
  %v = k3gpu.cluster_load %tile[%c0, %c0], %rank : memref<128x128xf32, #gpu.address_space<workgroup>> -> vector<4xbf16>
  return %v : vector<4xbf16>
}

// -----

func.func @tma_prefetch_tile_coordinates(
    %map: !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>,
    %k: index) {
  // expected-error @+1 {{needs 1 to 5 coordinates, at least the box's 2, got 1}}
  k3gpu.tma_prefetch_tile %map[%k]
      : !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
  return
}

// -----

func.func @tma_prefetch_tile_too_many(
    %map: !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>,
    %k: index) {
  // expected-error @+1 {{needs 1 to 5 coordinates, at least the box's 2, got 6}}
  k3gpu.tma_prefetch_tile %map[%k, %k, %k, %k, %k, %k]
      : !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
  return
}

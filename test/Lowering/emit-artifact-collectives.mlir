// The collectives of an SPMD program as launches of the artifact
// (lowering/ArtifactPlan.cpp, format 1.3 section COLL): each is [outer,
// chunk] of the rank's own tensor from its dimension on. An all_to_all
// split and concatenated along one dimension is run by the runtime (its
// chunk cut in group_size shards); another split is refused.
// RUN: k3-opt %s --k3-compile="output=%t.k3bin max-tokens=16 max-seqs=1 tp=2" -o /dev/null
// RUN: k3-run %t.k3bin --describe | FileCheck %s
// RUN: sed -n -e '/^\/\/ BADMODULE: /s///p' %s > %t.bad.mlir
// RUN: not k3-opt %t.bad.mlir --k3-compile="output=%t.bad.k3bin max-tokens=16 max-seqs=1 tp=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: launch 0: reduce_scatter sum over tp (2 ranks), f32 [num_tokens, 4]: buffer 'x' -> buffer
// CHECK: launch 1: all_to_all over tp (2 ranks), f32 [num_tokens, 4]:
// CHECK: launch 2: all_gather over tp (2 ranks), f32 [num_tokens, 4]: {{.*}} -> buffer 'y'
// BAD: error: 'k3.all_to_all' op is run by the runtime only with split_dim == concat_dim (got 0 and 1)

// The refused program (split along the rows, concatenated along the
// columns), extracted by the sed above:
// BADMODULE: func.func @forward(%x: tensor<?x8xf32> {k3.name = "x", k3.dims = array<i64: -1, 8>}) -> (tensor<?x16xf32> {k3.name = "y"}) {
// BADMODULE:   %y = k3.all_to_all %x {group = "tp", group_size = 2 : i64, split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
// BADMODULE:   return %y : tensor<?x16xf32>
// BADMODULE: }

func.func @forward(%x: tensor<?x8xf32> {k3.name = "x", k3.dims = array<i64: -1, 8>})
    -> (tensor<?x8xf32> {k3.name = "y"}) {
  %s = k3.reduce_scatter sum %x {group = "tp", group_size = 2 : i64, dim = 1 : i64}
      : (tensor<?x8xf32>) -> tensor<?x4xf32>
  %a = k3.all_to_all %s {group = "tp", group_size = 2 : i64, split_dim = 1 : i64, concat_dim = 1 : i64}
      : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %y = k3.all_gather %a {group = "tp", group_size = 2 : i64, dim = 1 : i64}
      : (tensor<?x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

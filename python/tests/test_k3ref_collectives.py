"""k3ref.collectives: the SPMD collectives' float64 semantics, checked
against the definitions written out element by element, and the identities
that tie them together (an all-reduce is a reduce-scatter then an
all-gather; an all-to-all twice with swapped dims is the identity)."""
import numpy as np
import pytest

from k3ref import collectives as c
from k3ref import ops


def ranks(n, shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_all_reduce_sum_and_max(n):
    xs = ranks(n, (3, 8))
    for out in c.all_reduce(xs):
        np.testing.assert_array_equal(out, sum(xs[1:], xs[0].copy()))
    for out in c.all_reduce(xs, "max"):
        want = xs[0].copy()
        for x in xs[1:]:
            want = np.maximum(want, x)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("n,dim", [(1, 0), (2, 0), (2, 1), (4, 1)])
def test_all_gather_in_rank_order(n, dim):
    xs = ranks(n, (2, 3))
    for out in c.all_gather(xs, dim):
        assert out.shape[dim] == n * xs[0].shape[dim]
        for r, x in enumerate(xs):
            np.testing.assert_array_equal(np.take(out, range(r * x.shape[dim], (r + 1) * x.shape[dim]),
                                                  axis=dim), x)


@pytest.mark.parametrize("n,dim", [(1, 1), (2, 0), (2, 1), (4, 1)])
def test_reduce_scatter_then_all_gather_is_all_reduce(n, dim):
    xs = ranks(n, (4, 8))
    shards = c.reduce_scatter(xs, dim)
    assert all(s.shape[dim] == xs[0].shape[dim] // n for s in shards)
    for out, want in zip(c.all_gather(shards, dim), c.all_reduce(xs)):
        np.testing.assert_allclose(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("n,split,concat", [(1, 0, 0), (2, 0, 0), (2, 0, 1), (4, 1, 0)])
def test_all_to_all_moves_shard_j_to_rank_j(n, split, concat):
    xs = ranks(n, (8, 4))
    outs = c.all_to_all(xs, split, concat)
    for j, out in enumerate(outs):
        want = np.concatenate([np.split(x, n, axis=split)[j] for x in xs], axis=concat)
        np.testing.assert_array_equal(out, want)
    # Back again: the received shards return to their senders.
    back = c.all_to_all(outs, concat, split)
    for x, y in zip(xs, back):
        np.testing.assert_array_equal(x, y)


def test_errors():
    with pytest.raises(ValueError, match="at least one rank"):
        c.all_reduce([])
    with pytest.raises(ValueError, match="one shape"):
        c.all_gather([np.zeros((2, 2)), np.zeros((2, 3))], 0)
    with pytest.raises(ValueError, match="not a multiple of 4"):
        c.reduce_scatter(ranks(4, (2, 6)), 1)


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_parallel_ranks_sum_to_the_whole_moe(ep):
    """Each rank's experts on its local ids, summed over the ranks by an
    all-reduce, is the MoE of all experts (issue 19's EP form over
    replicated tokens)."""
    rng = np.random.default_rng(ep)
    E, K, T, D, I = 8, 3, 5, 6, 4
    x = rng.standard_normal((T, D))
    idx = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32)
    wts = rng.random((T, K))
    w1, w3 = rng.standard_normal((E, I, D)), rng.standard_normal((E, I, D))
    w2 = rng.standard_normal((E, D, I))
    whole = ops.moe_experts(x, idx, wts, w1, w3, w2)
    n = E // ep
    parts = []
    for r in range(ep):
        local = ops.moe_local_ids(idx, r, n)
        mine = (idx >= r * n) & (idx < (r + 1) * n)
        assert np.array_equal(local >= 0, mine)
        assert np.array_equal(local[mine], idx[mine] - r * n)
        shard = slice(r * n, (r + 1) * n)
        parts.append(ops.moe_experts(x, local, wts, w1[shard], w3[shard], w2[shard]))
    for got in c.all_reduce(parts, "sum"):
        np.testing.assert_allclose(got, whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ranks", [2, 4])
def test_experts_over_owned_tokens(ranks):
    """Expert parallelism over ranks that own different tokens: each rank
    buckets its pairs by the rank of their expert, an all-to-all sends the
    buckets, each rank runs its experts on what it received (ids -1
    skipped), an all-to-all sends the outputs back and each rank sums its
    tokens' rows: every rank's tokens get the whole MoE's output."""
    rng = np.random.default_rng(ranks)
    E, K, D, I = 8, 3, 6, 4
    n = E // ranks
    w1, w3 = rng.standard_normal((E, I, D)), rng.standard_normal((E, I, D))
    w2 = rng.standard_normal((E, D, I))
    tokens = [rng.standard_normal((T, D)) for T in (5, 0, 3, 7)[:ranks]]
    idx = [np.array([rng.permutation(E)[:K] for _ in range(len(x))], dtype=np.int32).reshape(-1, K)
           for x in tokens]
    wts = [rng.random((len(x), K)) for x in tokens]
    C = 7 * min(K, n)
    buckets = [ops.moe_bucket(x, i, w, ranks, n, C) for x, i, w in zip(tokens, idx, wts)]
    rows, ids, rws = (c.all_to_all([b[k] for b in buckets], 0, 0) for k in range(3))
    outs = []
    for r in range(ranks):
        shard = slice(r * n, (r + 1) * n)
        y = ops.moe_experts(rows[r].reshape(-1, D), ids[r].reshape(-1, 1), rws[r].reshape(-1, 1),
                            w1[shard], w3[shard], w2[shard])
        outs.append(y.reshape(ranks, C, D))
    back = c.all_to_all(outs, 0, 0)
    for r in range(ranks):
        got = ops.moe_unbucket(back[r], buckets[r][3])
        want = ops.moe_experts(tokens[r], idx[r], wts[r], w1, w3, w2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

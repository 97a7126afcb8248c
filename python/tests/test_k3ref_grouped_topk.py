"""Group-limited routing (ops.group_limit, ops.moe_topk with n_group > 1)
against a brute-force formulation that shares no code with it: no
reshape, sort or argsort, only pairwise comparisons of scalars.

* a group's score is the largest sum over pairs of distinct experts of the
  group (with a bias), or the largest single score (without);
* group g is kept iff fewer than topk_group groups beat it (a larger
  score, or an equal one with a lower group id);
* expert e is chosen iff it is in a kept group and fewer than top_k kept
  experts beat it (a larger choice score, or an equal one with a lower
  id); its slot is the count of chosen experts that beat it.
"""
import itertools

import numpy as np
import pytest

from k3ref import ops


def brute_force(logits, bias, top_k, score, n_group, topk_group, renormalize, factor):
    T, E = logits.shape
    per = E // n_group
    idx = np.zeros((T, top_k), dtype=np.int64)
    wts = np.zeros((T, top_k))
    for t in range(T):
        row = [float(v) for v in logits[t]]
        if score == "sigmoid":
            s = [1.0 / (1.0 + np.exp(-v)) for v in row]
        else:
            z = sum(np.exp(v - max(row)) for v in row)
            s = [np.exp(v - max(row)) / z for v in row]
        c = [s[e] + (float(bias[e]) if bias is not None else 0.0) for e in range(E)]
        members = [range(g * per, (g + 1) * per) for g in range(n_group)]
        if bias is not None:
            gs = [max(c[a] + c[b] for a, b in itertools.combinations(m, 2)) for m in members]
        else:
            gs = [max(c[e] for e in m) for m in members]

        def beats(vals, a, b):
            return vals[a] > vals[b] or (vals[a] == vals[b] and a < b)

        kept = [g for g in range(n_group)
                if sum(beats(gs, h, g) for h in range(n_group) if h != g) < topk_group]
        eligible = [e for g in kept for e in members[g]]
        chosen = [e for e in eligible
                  if sum(beats(c, f, e) for f in eligible if f != e) < top_k]
        assert len(chosen) == top_k
        for e in chosen:
            slot = sum(beats(c, f, e) for f in chosen if f != e)
            idx[t, slot] = e
            wts[t, slot] = s[e]
    if renormalize and top_k > 1:
        wts = wts / (wts.sum(-1, keepdims=True) + 1e-20)
    return idx, wts * factor


def tied_rows(E, n_group, rng):
    """Exact ties: all-equal rows; groups whose scores tie (each group the
    same values, in another order); ties inside the kept groups across the
    k-th choice; values repeated at scattered experts."""
    per = E // n_group
    rows = [np.zeros(E), np.full(E, 2.0)]
    base = rng.standard_normal(per)
    rows.append(np.concatenate([rng.permutation(base) for _ in range(n_group)]))
    two = np.full(E, -1.0)
    two[rng.choice(E, 3, replace=False)] = 1.0
    rows.append(two)
    rows.append(rng.standard_normal(E // 4).repeat(4)[rng.permutation(E)])
    # Two groups tie on their two best (a sum tie) with different maxima.
    r = rng.standard_normal(E) - 3.0
    r[0], r[1] = 1.0, 0.0
    r[per], r[per + 1] = 0.5, 0.5
    rows.append(r)
    return np.array(rows)


CASES = [  # (E, n_group, topk_group, top_k)
    (8, 4, 2, 3), (12, 4, 2, 6), (12, 3, 1, 2), (16, 4, 3, 5), (16, 8, 2, 4), (20, 5, 4, 1),
]


@pytest.mark.parametrize("E,n_group,topk_group,top_k", CASES)
@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_grouped_topk_matches_brute_force(E, n_group, topk_group, top_k, score, with_bias):
    rng = np.random.default_rng(E * 100 + n_group * 10 + topk_group)
    random_rows = rng.standard_normal((24, E)) * 2.0
    logits = np.concatenate([random_rows, tied_rows(E, n_group, rng)])
    # A bias of few values, so that biased scores tie too.
    bias = rng.choice([-0.25, 0.0, 0.25], E) if with_bias else None
    for renormalize, factor in ((True, 2.5), (False, 1.0)):
        got = ops.moe_topk(logits, bias, top_k, score, renormalize, factor,
                           n_group=n_group, topk_group=topk_group)
        want = brute_force(logits, bias, top_k, score, n_group, topk_group, renormalize, factor)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-13, atol=1e-15)


def test_group_limit_changes_the_choice():
    """Not vacuous: the group limit changes the plain top-k's choice on
    random rows, and every token's experts lie in topk_group groups."""
    E, n_group, topk_group, top_k = 16, 4, 2, 4
    logits = np.random.default_rng(3).standard_normal((200, E))
    plain = ops.moe_topk(logits, None, top_k, "sigmoid")[0]
    grouped = ops.moe_topk(logits, None, top_k, "sigmoid", n_group=n_group, topk_group=topk_group)[0]
    assert np.any(np.sort(plain, 1) != np.sort(grouped, 1))
    assert max(len(set(r // (E // n_group))) for r in grouped) <= topk_group
    assert max(len(set(r // (E // n_group))) for r in plain) > topk_group


def test_group_score_sums_two_best_with_bias_and_takes_the_best_without():
    """Group 0 holds one high expert, group 1 two fairly high ones: the
    top-2 sum (with a bias, all zero) keeps group 1, the maximum (no bias)
    keeps group 0."""
    logits = np.array([[3.0, -4.0, 1.0, 1.0]])
    zero = np.zeros(4)
    with_bias = ops.moe_topk(logits, zero, 1, "sigmoid", n_group=2, topk_group=1)[0]
    without = ops.moe_topk(logits, None, 1, "sigmoid", n_group=2, topk_group=1)[0]
    assert with_bias.tolist() == [[2]]
    assert without.tolist() == [[0]]


def test_tied_groups_keep_the_lower_group_id():
    logits = np.array([[0.0, 1.0, 1.0, 0.0, 0.2, 0.2]])
    idx = ops.moe_topk(logits, np.zeros(6), 2, "sigmoid", n_group=3, topk_group=1)[0]
    assert idx.tolist() == [[1, 0]]


def test_masked_experts_are_minus_infinity_not_zero():
    """A negative bias makes every kept expert's choice score negative: a
    mask of 0 (transformers' DeepseekV3 at one time) would choose a masked
    expert; -inf never does."""
    logits = np.array([[5.0, 5.0, -5.0, -5.0]])
    bias = np.array([-2.0, -2.0, 0.0, 0.0])
    idx = ops.moe_topk(logits, bias, 2, "sigmoid", n_group=2, topk_group=1)[0]
    # Group scores: 2(σ(5) - 2) ≈ -2.01 against 2σ(-5) ≈ 0.013: group 1 kept.
    assert sorted(idx[0].tolist()) == [2, 3]
    idx = ops.moe_topk(logits, np.zeros(4), 2, "sigmoid", n_group=2, topk_group=1)[0]
    assert sorted(idx[0].tolist()) == [0, 1]

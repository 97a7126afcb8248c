"""The collectives of an SPMD program (``k3.all_reduce``, ``k3.all_gather``,
``k3.reduce_scatter``, ``k3.all_to_all``; dialects/K3/K3CollectiveOps.td), as
float64 NumPy over the group's ranks: each function takes the list of every
rank's operand, in rank order, and returns the list of every rank's result.
Naive and obviously right, like the rest of k3ref: the oracle that a
partitioned model's numbers (issue 19, docs/scaling.md) are checked against.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

_REDUCTIONS = {"sum": lambda xs: np.sum(xs, axis=0), "max": lambda xs: np.max(xs, axis=0)}


def _stack(inputs: Sequence[np.ndarray]) -> np.ndarray:
    if not inputs:
        raise ValueError("a group has at least one rank")
    shapes = {np.shape(x) for x in inputs}
    if len(shapes) != 1:
        raise ValueError(f"every rank's operand must have one shape, got {sorted(shapes)}")
    return np.stack([np.asarray(x, dtype=np.float64) for x in inputs])


def _shards(x: np.ndarray, n: int, dim: int) -> list[np.ndarray]:
    if x.shape[dim] % n:
        raise ValueError(f"dimension {dim} of size {x.shape[dim]} is not a multiple of {n}")
    return np.split(x, n, axis=dim)


def all_reduce(inputs: Sequence[np.ndarray], reduction: str = "sum") -> list[np.ndarray]:
    """Every rank receives the elementwise reduction of all ranks' operands."""
    r = _REDUCTIONS[reduction](_stack(inputs))
    return [r.copy() for _ in inputs]


def all_gather(inputs: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
    """Every rank receives the operands concatenated along ``dim`` in rank order."""
    xs = _stack(inputs)
    r = np.concatenate(list(xs), axis=dim)
    return [r.copy() for _ in inputs]


def reduce_scatter(inputs: Sequence[np.ndarray], dim: int,
                   reduction: str = "sum") -> list[np.ndarray]:
    """Rank r receives shard r (along ``dim``) of the reduction."""
    r = _REDUCTIONS[reduction](_stack(inputs))
    return _shards(r, len(inputs), dim)


def all_to_all(inputs: Sequence[np.ndarray], split_dim: int,
               concat_dim: int) -> list[np.ndarray]:
    """Shard j (along ``split_dim``) of rank i's operand goes to rank j, which
    concatenates what it receives along ``concat_dim`` in rank order."""
    xs = _stack(inputs)
    n = len(inputs)
    sent = [_shards(x, n, split_dim) for x in xs]
    return [np.concatenate([sent[i][j] for i in range(n)], axis=concat_dim) for j in range(n)]

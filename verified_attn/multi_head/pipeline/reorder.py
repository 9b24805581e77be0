"""The coarse (float32) polish's start: each u-group's head order chosen on the random sequences.

>>> import numpy as np
>>> from verified_attn.multi_head.sequence_fit import compress, model_values, polish_sequences
>>> rng = np.random.default_rng(0)
>>> heads = [(rng.normal(0, 0.5, (2, 2)), rng.normal(0, 1, 2)) for _ in range(2)]
>>> U = np.eye(2)
>>> seqs = polish_sequences(2, 30, seed=0)
>>> rows = compress(seqs, model_values(heads, 0.0, compress(seqs, [0.0] * 30), False))
>>> mixed = swap_row(U, heads, 1, (1, 0))  # u_2's heads swapped: a wrong start
>>> got, moved = reorder_groups(U, mixed, 0.0, rows, affine=False)
>>> moved, sorted(float(h[1][0]) for h in got) == sorted(float(h[1][0]) for h in heads)
(1, True)
>>> max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(sorted(got, key=lambda h: h[1][0]),
...     sorted(heads, key=lambda h: h[1][0]))) < 1e-12
True

A float32 box's u-groups are decoded to about 1e-3 (:mod:`.sequence_fit`), and with the
follow-up's design (one redundant column, :func:`~.budget.within_follow_up`) the halved
link ``((u_1 + u_k)/2, b_1)`` that orders group k's heads against group 1's is often
within its noise: measured (nn.MultiheadAttention in float32, E = 8, H = 4, module seeds
1 and 2) its best two orders missed by 3.2e-2 and 3.4e-2 against a noise bound of 1.2,
and the sequence polish from the best link order did not converge. Group k's head order
moves only row k of every head's ``U [W_h | c_h]`` and ``U v_h`` (group k's own pairs
see that row alone, so they fit every order equally), while an answer on a random
sequence sees every row: so each group's order is taken as the one whose heads meet the
polish's random answers best (:func:`reorder_groups`), before the Levenberg-Marquardt fit.
No query is asked; the result's figures are the fit's, so a wrong order can only fail
the fit (refused), never pass unseen.

The descent starts from the orders that put each head's rows of ``U [W_h | c_h]`` nearest
one low-dimensional subspace (:func:`low_rank_start`) where that meets the random answers
better: an nn.MultiheadAttention head has rank E / H, so its rows from every u-group lie in
one (E / H)-dimensional space, and a group whose order is wrong puts rows of another head
into it; a full-rank head yields no better start and the decoded orders stay.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from verified_attn.multi_head.sequence_fit import SequenceRows, model_values

__all__ = [
    "REORDER_MOVES",
    "low_rank_start",
    "permute_groups",
    "reorder_groups",
    "subspace_orders",
    "swap_row",
]

Head = tuple[np.ndarray, ...]

#: Moves at most (each the one group's order that lowers the residual most, over all groups).
REORDER_MOVES = 16
#: The low-rank start (:func:`low_rank_start`) from this many u-groups on: there the
#: steepest descent alone needs up to d - 1 moves of d (H! - 1) evaluations each. Below it
#: (E = 8, 12 in float32) the descent starts from the decoded orders, as measured.
LOW_RANK_START_GROUPS = 16
#: Random starts of :func:`subspace_orders` (besides the decoded orders), per rank.
SUBSPACE_RESTARTS = 24
_SUBSPACE_ITERATIONS = 30
#: Rows longer than this many times the median row are scaled down to it (a runaway score).
_ROW_CAP = 10.0


def swap_row(U: np.ndarray, heads: Sequence[Head], k: int, order: Sequence[int]) -> list[Head]:
    """The heads with u-group ``k``'s row permuted: head h takes head ``order[h]``'s row k
    of ``U W``, ``U v`` (and ``U c``); the other groups' rows are unchanged.

    >>> h = [(np.eye(2), np.array([1.0, 2.0])), (2 * np.eye(2), np.array([3.0, 4.0]))]
    >>> [x[1].tolist() for x in swap_row(np.eye(2), h, 0, (1, 0))]
    [[3.0, 2.0], [1.0, 4.0]]
    """
    orders = np.tile(np.arange(len(heads)), (U.shape[0], 1))
    orders[k] = order
    return permute_groups(U, heads, orders)


def permute_groups(U: np.ndarray, heads: Sequence[Head], orders: np.ndarray) -> list[Head]:
    """The heads with every u-group's row permuted at once: head h takes head
    ``orders[k, h]``'s row k of ``U W``, ``U v`` (and ``U c``).

    >>> h = [(np.eye(2), np.array([1.0, 2.0])), (2 * np.eye(2), np.array([3.0, 4.0]))]
    >>> [x[1].tolist() for x in permute_groups(np.eye(2), h, np.array([[1, 0], [1, 0]]))]
    [[3.0, 4.0], [1.0, 2.0]]
    """
    Uinv = np.linalg.inv(U)
    rows = [[U @ part for part in hd] for hd in heads]  # per head: U W, U v (, U c)
    groups = np.arange(U.shape[0])
    out: list[Head] = []
    for h in range(len(heads)):
        moved = [np.array([rows[orders[k, h]][i][k] for k in groups]) for i in range(len(rows[h]))]
        out.append(tuple(Uinv @ x for x in moved))
    return out


def group_rows(U: np.ndarray, heads: Sequence[Head], affine: bool) -> np.ndarray:
    """``(d, H, m)``: u-group k's row of head h's ``U [W_h | c_h]`` (``U W_h`` if not affine),
    the rows a group's head order permutes.

    >>> group_rows(np.eye(2), [(np.eye(2), np.ones(2))], False).shape
    (2, 1, 2)
    """
    parts = [np.hstack([U @ hd[0], (U @ hd[2])[:, None]]) if affine else U @ hd[0] for hd in heads]
    return np.stack(parts, axis=1)


def subspace_orders(
    A: np.ndarray, rank: int, start: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Each group's head order ``(d, H)`` that puts every head's rows nearest one subspace of
    dimension ``rank`` (k-subspaces with one row of each group per head, from ``start`` and
    :data:`SUBSPACE_RESTARTS` random orders); returns the best orders and their squared
    distance. ``A``: :func:`group_rows`.

    >>> rng = np.random.default_rng(0)
    >>> bases = [rng.normal(size=(1, 5)) for _ in range(2)]
    >>> A = np.stack([np.vstack([rng.normal() * b for b in bases]) for _ in range(6)])
    >>> A[2] = A[2][::-1]; A[4] = A[4][::-1]  # two groups' heads swapped
    >>> orders, cost = subspace_orders(A, 1, np.tile([0, 1], (6, 1)), rng)
    >>> [int(o[0]) for o in orders] in ([0, 0, 1, 0, 1, 0], [1, 1, 0, 1, 0, 1]), cost < 1e-20
    (True, True)
    """
    d, H, _ = A.shape
    perms = np.array(list(itertools.permutations(range(H))))
    best: tuple[np.ndarray, float] = (start, math.inf)
    starts = [start] + [
        np.array([rng.permutation(H) for _ in range(d)]) for _ in range(SUBSPACE_RESTARTS)
    ]
    for cur in starts:
        cost = math.inf  # no step taken: no figure for this start
        for _ in range(_SUBSPACE_ITERATIONS):
            X = A[np.arange(d)[:, None], cur]  # (d, H, m): head h's rows
            off = np.empty((d, H, H))  # group k's row i off head h's subspace
            for h in range(H):
                Q = np.linalg.svd(X[:, h], full_matrices=False)[2][:rank]
                off[:, :, h] = ((A - A @ Q.T @ Q) ** 2).sum(axis=2)
            total = off[:, perms, np.arange(H)].sum(axis=2)  # (d, H!)
            pick = total.argmin(axis=1)
            new, cost = perms[pick], float(total[np.arange(d), pick].sum())
            if np.array_equal(new, cur):
                break
            cur = new
        if cost < best[1]:
            best = (cur, cost)
    return best


def reorder_groups(
    U: np.ndarray, heads: Sequence[Head], beta: float, rows: SequenceRows, *, affine: bool
) -> tuple[list[Head], int]:
    """The heads with u-groups' head orders changed, one group a move, each move the one
    (over every group and order) that lowers the squared residual on ``rows``' answers
    most, while one does (at most :data:`REORDER_MOVES`); the decoded order is kept unless
    another is strictly better. Returns the heads and the moves made. ``beta`` is unchanged
    by any order (it depends on the sum of the v's only).

    Steepest descent, not group by group: with one group's order wrong, a pass that visits
    the right groups first would move them toward the wrong one (measured, d = 8, H = 4,
    one group scrambled: group by group 4 of 6 put back, steepest 6 of 6)."""
    H, d = len(heads), U.shape[0]

    def cost(hs: Sequence[Head]) -> float:
        return float(np.sum((model_values(hs, beta, rows, affine) - rows.answers) ** 2))

    if d >= LOW_RANK_START_GROUPS:
        best, now = low_rank_start(U, heads, affine, cost)
    else:
        best, now = list(heads), cost(heads)
    perms = [p for p in itertools.permutations(range(H)) if p != tuple(range(H))]
    for moves in range(REORDER_MOVES):
        # Every group, group 1 too: the heads' numbering is free.
        trials = [swap_row(U, best, k, p) for k in range(d) for p in perms]
        costs = [cost(t) for t in trials]
        i = int(np.argmin(costs))
        if not costs[i] < now:
            return best, moves
        best, now = trials[i], costs[i]
    return best, REORDER_MOVES


def low_rank_start(
    U: np.ndarray, heads: Sequence[Head], affine: bool, cost: Callable[[Sequence[Head]], float]
) -> tuple[list[Head], float]:
    """The start of the steepest descent: the decoded heads, or the groups' orders that
    put each head's rows nearest a subspace of one rank (:func:`subspace_orders`, every
    rank r with H r below the rows' length) when that meets ``cost`` (the random answers)
    strictly better. Returns the heads and their cost.

    A head of rank r (nn.MultiheadAttention: E / H) has its rows of ``U [W_h | c_h]`` in an
    r-dimensional space, one row a u-group, so the groups' orders that keep every head's
    rows in one such space are the true ones, up to the heads' numbering; a full-rank head
    gives no such proposal that beats the decoded order, so it is kept. With 16 groups
    the steepest descent alone needs up to 15 moves from orders that agree in few groups,
    each move 16 x 23 evaluations. Measured (nn.MultiheadAttention in float32, E = 16,
    H = 4, module seeds 3 and 5 of the float benchmark, three pilot rounds): the same
    results without it (it found no better start there); it is a start only, asks nothing
    and cannot make a result wrong.
    Rows far beyond the others (a group's score run off to a saturated sigmoid) are
    scaled down to :data:`_ROW_CAP` times the median row's norm for the subspaces.

    >>> rng = np.random.default_rng(1)
    >>> hs = [(np.outer(rng.normal(size=3), rng.normal(size=3)), rng.normal(size=3)) for _ in range(2)]
    >>> mixed = swap_row(np.eye(3), hs, 1, (1, 0))
    >>> got, _ = low_rank_start(np.eye(3), mixed, False, lambda h: float(np.abs(h[0][0] - hs[0][0]).sum() + np.abs(h[1][0] - hs[1][0]).sum()))
    >>> bool(np.allclose(got[0][0], hs[0][0]) or np.allclose(got[1][0], hs[0][0]))
    True
    """
    H, d = len(heads), U.shape[0]
    A = group_rows(U, heads, affine)
    norms = np.linalg.norm(A, axis=2)
    A = A * np.minimum(1.0, _ROW_CAP * np.median(norms) / np.maximum(norms, 1e-300))[:, :, None]
    rng = np.random.default_rng(0)
    identity = np.tile(np.arange(H), (d, 1))
    best, now = list(heads), cost(heads)
    for rank in range(1, (A.shape[2] - 1) // H + 1):
        orders, _ = subspace_orders(A, rank, identity, rng)
        trial = permute_groups(U, heads, orders)
        value = cost(trial)
        if value < now:
            best, now = trial, value
    return best, now

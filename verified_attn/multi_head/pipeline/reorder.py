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
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from verified_attn.multi_head.sequence_fit import SequenceRows, model_values

__all__ = ["REORDER_MOVES", "reorder_groups", "swap_row"]

Head = tuple[np.ndarray, ...]

#: Moves at most (each the one group's order that lowers the residual most, over all groups).
REORDER_MOVES = 16


def swap_row(U: np.ndarray, heads: Sequence[Head], k: int, order: Sequence[int]) -> list[Head]:
    """The heads with u-group ``k``'s row permuted: head h takes head ``order[h]``'s row k
    of ``U W``, ``U v`` (and ``U c``); the other groups' rows are unchanged.

    >>> h = [(np.eye(2), np.array([1.0, 2.0])), (2 * np.eye(2), np.array([3.0, 4.0]))]
    >>> [x[1].tolist() for x in swap_row(np.eye(2), h, 0, (1, 0))]
    [[3.0, 2.0], [1.0, 4.0]]
    """
    Uinv = np.linalg.inv(U)
    rows = [[U @ part for part in hd] for hd in heads]  # per head: U W, U v (, U c)
    out: list[Head] = []
    for h in range(len(heads)):
        moved = [x.copy() for x in rows[h]]
        for i, x in enumerate(moved):
            x[k] = rows[order[h]][i][k]
        out.append(tuple(Uinv @ x for x in moved))
    return out


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
    best = list(heads)

    def cost(hs: Sequence[Head]) -> float:
        return float(np.sum((model_values(hs, beta, rows, affine) - rows.answers) ** 2))

    now = cost(best)
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

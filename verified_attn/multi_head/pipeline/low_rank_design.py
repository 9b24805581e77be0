"""The float multi-head learner's low-rank (skeleton) design and its query count.

Heads whose score matrices ``[W_h | c_h]`` have rank at most p need not be asked at every
pair ``(u_k, b_j)``: the per-head score matrix ``S_h = U [W_h | c_h] M`` (d x J, J = d, affine
d + 1) has rank at most p, so its first m rows (all J columns) and its first p columns (all d
rows) fix it, ``S_h = S_h[:, :p] S_h[:m, :p]^+ S_h[:m, :]`` (a cross / skeleton completion,
:mod:`.skeleton`). The design asks

* ``F(0)`` at each of the J probe columns;
* the pilot: ``min(4, J)`` pairs ``(u_1, b_j)`` at the design scale, fitted for the u scale
  only (:func:`.skeleton._pilot`), then discarded;
* the m *full* u-groups ``(u_k, b_j)``, k < m, every j; the d - m *partial* u-groups,
  k >= m, at the first q = p columns only (:func:`skeleton_columns`);
* the d - 1 halved links ``((u_1 + u_k)/2, b_1)`` (they order each u-group's heads);
* one *rank check* pair ``(u_d, b_J)`` outside the skeleton when there is a partial group
  and a column outside it: its answers are predicted by the completed heads, never fitted;

each pair at the ``2H + [H >= 2]`` ratios of the float design. With the rank given, m = p;
with the rank found, u-groups are asked in full one by one until each head's stacked rows
have a numerical rank below their number, so m = p + 1 (or m = d: not low rank). So

    Q(d, H, p, m) = J + (m J + (d - m) q + [m < d and q < J] + d - 1 + min(4, J))
                        x (2H + [H >= 2]),

which for m = p = q = r, J = d >= 4 is ``d + (2rd - r^2 + d + 4) (2H + [H >= 2])`` (the check
pair and the links' d - 1 make the + d): about twice the parameter count
``H (2rd - r^2 + d)``, where the full design asks about ``2H d^2`` and the follow-up's count
is ``4Hd^2 - 2H + 1``.

>>> low_rank_query_count(8, 2, 2), low_rank_query_count(8, 2, 2, found=True)
(208, 238)
>>> low_rank_query_count(16, 4, 4, affine=True)
1241
"""

from __future__ import annotations

from verified_attn.errors import InvalidArgument
from verified_attn.multi_head.pipeline.budget import redundancy

#: The pilot's pairs (u_1, b_j) at the design scale that set the u scale (:mod:`.skeleton`).
PILOT_PAIRS = 4

__all__ = [
    "low_rank_parameter_count",
    "low_rank_query_count",
    "skeleton_pairs",
    "skeleton_sizes",
]


def skeleton_sizes(d: int, p: int, affine: bool, *, found: bool = False) -> tuple[int, int]:
    """``(m, J)``: the full u-groups and the probe columns of the skeleton design of size p
    (``found``: the rank was found by asking one more full u-group than it).

    >>> skeleton_sizes(8, 2, False), skeleton_sizes(8, 2, False, found=True)
    ((2, 8), (3, 8))
    >>> skeleton_sizes(4, 4, True, found=True)
    (4, 5)
    """
    J = d + (1 if affine else 0)
    if not 1 <= p <= J:
        raise InvalidArgument(f"the skeleton's size must be in 1..{J}, got {p}")
    return min(d, p + 1 if found else p), J


#: Columns the partial u-groups are asked at beyond the rank (see skeleton_columns).
OVERSAMPLE = 0


def skeleton_columns(p: int, J: int) -> int:
    """The columns q of the partial u-groups: the rank p plus :data:`OVERSAMPLE`, at most J.

    >>> skeleton_columns(4, 17) == min(17, 4 + OVERSAMPLE)
    True
    """
    return min(J, p + OVERSAMPLE)


def skeleton_pairs(d: int, p: int, m: int, J: int) -> list[tuple[int, int]]:
    """The skeleton's grid pairs ``(k, j)`` (u row, probe column): the m full u-groups,
    then the partial ones at the first p columns, then the rank check pair (if any).

    >>> skeleton_pairs(3, 1, 1, 3)
    [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 2)]
    """
    cols = skeleton_columns(p, J)
    pairs = [(k, j) for k in range(m) for j in range(J)]
    pairs += [(k, j) for k in range(m, d) for j in range(cols)]
    if m < d and cols < J:
        pairs.append((d - 1, J - 1))  # the rank check: outside the skeleton
    return pairs


def low_rank_query_count(
    d: int, H: int, p: int, *, affine: bool = False, found: bool = False
) -> int:
    """The learning queries of the skeleton design (module docstring): F(0), the pilot's
    pairs, the grid pairs of :func:`skeleton_pairs` and the d - 1 links at ``2H + [H >= 2]``
    ratios each.
    Exact: the design asks nothing adaptive (no pilot, tie link or conditioning round).

    >>> low_rank_query_count(16, 4, 4, found=False)  # 16 + (128 + 4) x 9
    1204
    """
    m, J = skeleton_sizes(d, p, affine, found=found)
    grid = len(skeleton_pairs(d, p, m, J))
    return J + (grid + d - 1 + min(PILOT_PAIRS, J)) * (2 * H + redundancy(H))


def low_rank_parameter_count(d: int, H: int, r: int) -> int:
    """The parameters of H heads with rank-r W_h and v_h: ``H (2rd - r^2 + d)``.

    >>> low_rank_parameter_count(16, 4, 4)
    512
    """
    return H * (2 * r * d - r * r + d)

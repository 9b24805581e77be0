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

import numpy as np

from verified_attn.errors import InvalidArgument
from verified_attn.multi_head.pipeline.budget import redundancy

#: The pilot's pairs (u_1, b_j) at the design scale that set the u scale (:mod:`.skeleton`).
PILOT_PAIRS = 4

__all__ = [
    "CONDITIONING_ROUNDS",
    "conditioning_query_count",
    "low_rank_parameter_count",
    "low_rank_query_count",
    "low_rank_query_limit",
    "round_columns",
    "shift_coefficients",
    "shift_query_count",
    "shifted_row",
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
    The conditioning rounds (:func:`conditioning_query_count`) come on top; a run without
    one asks exactly this many.

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


# Conditioning rounds: a u-group whose fit misses its answers (over _CONVERGED x its rounding
# floor, or over the groups' level so far) is asked again at more columns and refitted on all
# its pairs, at most CONDITIONING_ROUNDS times. A full group takes FULL_ROUND_COLUMNS
# redundant columns (the seeded design's extra b rows, float_design(extra=)), fitted on the
# probe plane s = M^T w; a partial group the next PARTIAL_ROUND_COLUMNS basis columns it was
# not asked at. Measured (nn.MultiheadAttention E = 16, H = 8, module seed 0, the group fits
# against the module's true scores): u_1 (full, 17 pairs) stalls at 2.4e4 x its floor with a
# score 6.4e-2 off, with 4 redundant columns 7.8 x and 1.8e-10; the partial u_4 and u_13 (2
# pairs) at 4.3e4 x and 1.1e5 x, with 2 more columns 5.2 x and 9.3 x.
CONDITIONING_ROUNDS = 3
FULL_ROUND_COLUMNS = 4
PARTIAL_ROUND_COLUMNS = 2


def round_columns(d: int, p: int, m: int, J: int, k: int, asked: list[int]) -> list[int]:
    """The columns the next conditioning round of u-group k asks, given the columns it was
    asked at: redundant columns ``J, J + 1, ...`` (indices past the basis) for a full
    group, else the lowest basis columns not asked (the rank check pair's column left out
    for u_d); empty when none is left.

    >>> round_columns(8, 2, 2, 9, 0, list(range(9))), round_columns(8, 2, 2, 9, 7, [0, 1])
    ([9, 10, 11, 12], [2, 3])
    """
    if k < m:
        n = sum(1 for j in asked if j >= J)
        return list(range(J + n, J + n + FULL_ROUND_COLUMNS))
    taken = set(asked)
    if k == d - 1 and m < d and skeleton_columns(p, J) < J:
        taken.add(J - 1)
    return [j for j in range(J) if j not in taken][:PARTIAL_ROUND_COLUMNS]


def redundant_rows() -> int:
    """The redundant columns the full groups' rounds may take (their b rows are drawn once).

    >>> redundant_rows()
    12
    """
    return CONDITIONING_ROUNDS * FULL_ROUND_COLUMNS


def conditioning_query_count(H: int, J: int, rounds: list[tuple[int, list[int]]]) -> int:
    """The conditioning rounds' queries: each round's pairs ``(u_k, b_j)`` at
    ``2H + [H >= 2]`` ratios, and F(0) once at each redundant column (j >= J) first asked.

    >>> conditioning_query_count(8, 17, [(0, [17, 18, 19, 20]), (3, [2, 3]), (1, [17, 18, 19, 20])])
    174
    """
    cols = [j for _, c in rounds for j in c]
    return len(cols) * (2 * H + redundancy(H)) + len({j for j in cols if j >= J})


def low_rank_query_limit(
    d: int, H: int, p: int, *, affine: bool = False, found: bool = False
) -> int:
    """The run's worst case: :func:`low_rank_query_count`, every u-group conditioned
    :data:`CONDITIONING_ROUNDS` times and shifted once at all its columns (a full group at
    its halved row, :func:`shifted_row`; with the rank found, its worst case is p = d).

    >>> low_rank_query_limit(16, 8, 2, affine=True) - low_rank_query_count(16, 8, 2, affine=True)
    4738
    """
    m, J = skeleton_sizes(d, p, affine, found=found)
    per = 2 * H + redundancy(H)
    cols = m * redundant_rows() + (d - m) * CONDITIONING_ROUNDS * PARTIAL_ROUND_COLUMNS
    # every partial group shifted once at all its columns (shift_query_count)
    rounds = CONDITIONING_ROUNDS * PARTIAL_ROUND_COLUMNS
    shifted = (d - m) * min(J, skeleton_columns(p, J) + rounds) + m * (J + redundant_rows())
    more = (cols + shifted) * per + (redundant_rows() if m else 0)
    return low_rank_query_count(d, H, p, affine=affine, found=found) + more


# A partial u-group still stalled after its rounds and the row-space refit is asked once
# more at a *shifted* row u' = u_k + sum_i c_i u_i over the full groups (c_i ~ N(0,
# SHIFT_SCALE), seeded), at all its columns: u''s scores and residues are u_k's plus the
# full groups' known ones, so u_k's are recovered by subtraction while the fit sees other
# poles and residues (:func:`.skeleton_rows.shifted_fit`). Measured (nn.MultiheadAttention
# E = 32, H = 8, module seed 0, u_14 at 10 columns, free fit 9.3e8 x its floor): u' fits at
# 4.4 x to 6.6 x for 5 of 5 draws of c at scale 0.5 (at scale 1, 2 of 4: a u' too long
# crowds its own poles), and u_14 refitted from the subtraction reaches 4.2 x.
SHIFT_SCALE = 0.5


def shift_coefficients(seed: int, k: int, m: int) -> np.ndarray:
    """The shifted row's coefficients c (m,) of u-group k: ``u' = u_k + c @ U[:m]``.

    >>> c = shift_coefficients(0, 13, 4)
    >>> c.shape, bool(np.array_equal(c, shift_coefficients(0, 13, 4)))
    ((4,), True)
    """
    return np.random.default_rng([seed, k, 40]).normal(0.0, SHIFT_SCALE, m)


# A full u-group still stalled after its rounds is asked once more at its *halved* row
# u_k / 2, at all its columns: scores and residues are linear in u, so u_k's are twice the
# halved row's, while the row's score offsets u_k^T c_h, halved, come back into the ratio
# window (log t within +-5.5 at H = 4). Measured (nn.MultiheadAttention E = 64, H = 4,
# module seed 0): u_2's offsets -9.9 and -10.8 put two heads in the sigmoid's tail, where
# only the sum of their terms r_h e^{s_h} t is seen (their scores 22 off after three rounds;
# the module's own scores meet its answers at 21 x its floor); the halved row fits at
# 5 x its floor, twice its scores 2.6e-11 off u_2's, in 0.1 CPU-s.
HALVED_ROW = 0.5


def shifted_row(U: np.ndarray, seed: int, k: int, m: int) -> np.ndarray:
    """u-group k's shifted row: ``HALVED_ROW * u_k`` for a full group (k < m), ``u_k + c @
    U[:m]`` (:func:`shift_coefficients`) for a partial one.

    >>> shifted_row(np.eye(3), 0, 1, 2).tolist()
    [0.0, 0.5, 0.0]
    """
    if k < m:
        return HALVED_ROW * U[k]
    return U[k] + shift_coefficients(seed, k, m) @ U[:m]


def shift_query_count(H: int, columns: list[list[int]]) -> int:
    """The shifted rows' queries: each shifted group's columns at ``2H + [H >= 2]`` ratios.

    >>> shift_query_count(8, [list(range(10))])
    170
    """
    return sum(len(c) for c in columns) * (2 * H + redundancy(H))

"""A partial u-group refitted with its scores in the row space of the full groups' rows.

Each head's score matrix ``S_h`` has rank at most m (the skeleton's full u-groups span its
rows), so a partial u-group k's scores at its columns C are ``S_h[k, C] = a_h^T S_h[:m, C]``
for some a_h in R^m: with more columns than m (after conditioning rounds) the group has
H (m + 1) unknowns instead of H (|C| + 1). :func:`row_space_fit` fits them, the heads
named as the full groups' (u_1's order), from starts that match the free fit's heads to the
planes ``S_h[:m, C]^T``. Measured (nn.MultiheadAttention E = 32, H = 8, module seed 0): the
partial u_10 at 10 columns, whose free fit stops at 4.4e4 x its rounding floor with four
heads' scores off by up to 0.69 (a local minimum), is refitted at 1.05e4 x in the full
groups' fitted row space (their scores are 1.4e-8 off) and freed from there, at 2.9 x.

>>> import numpy as np
>>> from verified_attn.multi_head.float_fit import group_model
>>> rng = np.random.default_rng(0)
>>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0]))
>>> A = rng.normal(size=(5, 2, 2))            # 5 columns, m = 2, H = 2: a plane per head
>>> a = rng.normal(size=(2, 2)); r = np.array([1.0, -2.0])
>>> s = np.einsum("jah,ah->jh", A, a)
>>> Y = group_model(lt, r[None], s[None])[0]
>>> got = row_space_fit(lt, Y, r[::-1] + 0.01, s[:, ::-1] + 0.05, A, 0.0)   # heads swapped
>>> bool(np.abs(got[1] - s).max() < 1e-9), bool(got[2] < 1e-12)
(True, True)
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linear_sum_assignment

from verified_attn.multi_head.float_fit import fit_groups, polish_groups
from verified_attn.multi_head.float_linear_fit import (
    consensus_start,
    fit_linear_groups,
    score_weights,
)

__all__ = [
    "CROWDED_GAP",
    "crowded",
    "plane_miss",
    "row_space_fit",
    "row_space_starts",
    "shifted_fit",
    "shifted_start",
]

# Two heads whose scores at one column are this close (a *crowded* pair) can be swapped for
# a second solution of the group's fit that meets its answers as well: r_a s_a + r_b s_b is
# seen at first order, the pair's spread about that weighted mean only at second and third.
# At the skeleton's m columns no row space checks a partial group's scores, so a crowded
# partial group is asked at more columns and held to the full groups' planes
# (Skeleton.uncrowd). Measured (nn.MultiheadAttention E = 32, H = 8, module seed 0, against
# the module's true scores): u_6 (4 columns, gap 2.1e-3 between heads of residues -0.52
# and 2.76) fits at 6.6 x its floor with the pair reflected about its weighted mean (scores
# 5.3e-3 off); u_8 (gap 7.6e-3, three heads within 3.4e-2) at 25.7 x, 1.6e-2 off, where
# the module's scores refit at 4.8 x; the next closest pairs of the u-groups fitted right
# are 1.06e-2 and 1.14e-2 apart, their reflections refit at 705 x and 832 x.
CROWDED_GAP = 0.02

# consensus_start's seed (it draws subsets only past CONSENSUS_SUBSETS of them).
_SEED = 40


def row_space_starts(
    lt: np.ndarray, r: np.ndarray, s: np.ndarray, A: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Starts ``(r0 (n, H), w0 (n, m, H))`` of the row-space fit from a free fit ``r`` (H,),
    ``s`` (C, H) in any head order: the free heads matched to the planes ``A`` (C, m, H) by
    the least total weighted miss of their scores (each free head's least-squares fit on
    each plane, weighted by :func:`score_weights`), that assignment and each of its
    transpositions; every one with the planes' coordinates by least squares and by
    consensus (:func:`consensus_start`: a plane through m of the columns, for a free head
    whose scores are off at some columns - the local minimum's wrong basin).

    >>> A = np.stack([np.eye(3)[:, :2], np.eye(3)[:, 1:]], axis=2)    # (3, 2, 2)
    >>> s = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 0.0]])             # heads swapped
    >>> r0, w0 = row_space_starts(np.zeros(1), np.ones(2), s, A)
    >>> w0.shape, np.round(w0[0], 12).T.tolist()
    ((4, 2, 2), [[1.0, 3.0], [2.0, 4.0]])
    """
    _, m, H = A.shape
    weight = score_weights(lt, r[None], s[None])[0]  # (C, H): how much each score is seen
    miss = np.empty((H, H))
    for i, h in itertools.product(range(H), range(H)):
        Aw = A[:, :, h] * weight[:, i, None]
        coef = np.linalg.lstsq(Aw, s[:, i] * weight[:, i], rcond=None)[0]
        miss[i, h] = np.linalg.norm(Aw @ coef - s[:, i] * weight[:, i])
    free, plane = linear_sum_assignment(miss)
    match = np.empty(H, dtype=np.intp)
    match[plane] = free  # match[h]: the free head put on plane h
    orders = [match]
    for a, b in itertools.combinations(range(H), 2):
        o = match.copy()
        o[[a, b]] = o[[b, a]]
        orders.append(o)
    rng = np.random.default_rng(_SEED)
    r0, w0 = [], []
    for o in orders:
        ls = np.empty((m, H))
        cons = np.empty((m, H))
        for h in range(H):
            i = o[h]
            ls[:, h] = np.linalg.lstsq(
                A[:, :, h] * weight[:, i, None], s[:, i] * weight[:, i], rcond=None
            )[0]
            cons[:, h] = consensus_start(
                A[:, :, h], s[None, :, i : i + 1], weight[None, :, i : i + 1], rng
            )[0, :, 0]
        r0 += [r[o], r[o]]
        w0 += [ls, cons]
    return np.array(r0), np.array(w0)


def row_space_fit(
    lt: np.ndarray,
    Y: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    A: np.ndarray,
    floor: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """A u-group's fit with head h's scores ``A[:, :, h] a_h`` (``A`` (C, m, H), C > m: the
    full groups' scores at the group's C columns, per head), from the free fit ``r`` (H,),
    ``s`` (C, H) (any head order; :func:`row_space_starts`), then freed (the free fit from
    the best one, kept if it lowers the residual: the planes carry the full groups' errors).
    ``Y`` (C, T): the group's answers minus F(0). Returns residues (H,), scores (C, H) in A's
    head order and the residual norm (the free fit's own measure)."""
    r0, w0 = row_space_starts(lt, r, s, A)
    return _constrained_then_free(lt, Y, r0, w0, A, floor)


def _constrained_then_free(
    lt: np.ndarray, Y: np.ndarray, r0: np.ndarray, w0: np.ndarray, A: np.ndarray, floor: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """The row-space fit from the starts ``r0`` (n, H), ``w0`` (n, m, H), then the free fit
    from its best one, whichever has the lower residual."""
    n = len(r0)
    fit = fit_linear_groups(lt, np.repeat(Y[None], n, axis=0), A, r0, w0, floor=floor)
    best = int(np.argmin(np.where(np.isfinite(fit.residual), fit.residual, np.inf)))
    # The planes are the full groups' fitted scores, off by their own error: the constrained
    # fit stops there, so it is freed from its best start (measured at E = 32, H = 8, u_10:
    # planes 1.4e-8 off, the constrained fit at 1.05e4 x its floor, freed 2.9 x).
    free = fit_groups(lt, Y[None], fit.r[best : best + 1], fit.s[best : best + 1], floor=floor)
    free = polish_groups(lt, Y[None], free.r, free.s)
    if free.residual[0] < fit.residual[best]:
        return free.r[0], free.s[0], float(free.residual[0])
    return fit.r[best], fit.s[best], float(fit.residual[best])


def shifted_start(
    r2: np.ndarray, s2: np.ndarray, c: np.ndarray, A: np.ndarray, R: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """A start for u-group k from its shifted row ``u' = u_k + sum_i c_i u_i`` (the full
    groups i < m): u''s free fit ``r2`` (H,), ``s2`` (C, H) (any head order) less the full
    groups' share, ``s_k = s' - A c`` and ``r_k = r' - c R`` (``A`` (C, m, H) their scores
    at the group's columns, ``R`` (m, H) their residues, in u_1's head order). u''s heads
    are named by the planes: head i is put on plane h when ``s2[:, i] - A[:, :, h] c`` lies
    in ``A[:, :, h]``'s column space (the least total miss; C > m makes it a test). Returns
    residues (H,), the planes' coordinates (m, H) and the matching's largest miss.

    >>> A = np.stack([np.eye(3)[:, :2], np.eye(3)[:, 1:]], axis=2)    # (3, 2, 2)
    >>> c, R = np.array([1.0, 2.0]), np.ones((2, 2))
    >>> s2 = np.array([[0.0, 1.0], [2.0, 4.0], [2.0, 0.0]])   # heads swapped
    >>> r0, w0, miss = shifted_start(np.array([5.0, 4.0]), s2, c, A, R)
    >>> r0.tolist(), np.round(w0.T, 12).tolist(), bool(miss < 1e-12)
    ([1.0, 2.0], [[0.0, 2.0], [1.0, 0.0]], True)
    """
    H = A.shape[2]
    share = np.einsum("cmh,m->ch", A, c)  # (C, H): the full groups' part of u''s scores
    miss = np.empty((H, H))
    coef = np.empty((H, H, A.shape[1]))
    for i, h in itertools.product(range(H), range(H)):
        y = s2[:, i] - share[:, h]
        coef[i, h] = np.linalg.lstsq(A[:, :, h], y, rcond=None)[0]
        miss[i, h] = np.linalg.norm(A[:, :, h] @ coef[i, h] - y)
    free, plane = linear_sum_assignment(miss)
    match = np.empty(H, dtype=np.intp)
    match[plane] = free
    w0 = np.stack([coef[match[h], h] for h in range(H)], axis=1)
    return r2[match] - c @ R, w0, float(miss[free, plane].max())


def shifted_fit(
    lt: np.ndarray,
    Y: np.ndarray,
    shifted: tuple[np.ndarray, np.ndarray],
    c: np.ndarray,
    A: np.ndarray,
    R: np.ndarray,
    floor: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """u-group k's fit (answers ``Y`` (C, T) minus F(0)) from the start its shifted row's
    fit ``shifted = (r', s')`` gives (:func:`shifted_start`): in the row space, then freed
    (as :func:`row_space_fit`). Returns residues (H,), scores (C, H) in A's head order and
    the residual norm."""
    r0, w0, _ = shifted_start(shifted[0], shifted[1], c, A, R)
    return _constrained_then_free(lt, Y, r0[None], w0[None], A, floor)


def crowded(s: np.ndarray, gap: float = CROWDED_GAP) -> bool:
    """Whether two heads' scores ``s`` (C, H) at one column are within ``gap``.

    >>> crowded(np.array([[0.0, 1.0], [0.5, 0.51]])), crowded(np.array([[0.0, 1.0]]))
    (True, False)
    """
    x = np.sort(s, axis=1)
    return bool(s.shape[1] > 1 and (np.diff(x, axis=1) < gap).any())


def plane_miss(s: np.ndarray, A: np.ndarray) -> float:
    """How far a partial group's scores ``s`` (C, H) are from the full groups' planes ``A``
    (C, m, H): the largest least-squares miss of a head's scores in its plane, over
    max(1, their norm). With C > m a wrong score at one column shows here.

    >>> A = np.stack([np.eye(3)[:, :2], np.eye(3)[:, 1:]], axis=2)
    >>> plane_miss(np.array([[1.0, 0.0], [2.0, 3.0], [0.0, 4.0]]), A)
    0.0
    >>> round(plane_miss(np.array([[1.0, 0.0], [2.0, 3.0], [0.5, 4.0]]), A), 6)
    0.218218
    """
    out = 0.0
    for h in range(s.shape[1]):
        coef = np.linalg.lstsq(A[:, :, h], s[:, h], rcond=None)[0]
        miss = float(np.linalg.norm(A[:, :, h] @ coef - s[:, h]))
        out = max(out, miss / max(1.0, float(np.linalg.norm(s[:, h]))))
    return out

"""Stage 1, design: the float design (orthogonal u and b rows at a fixed norm), the ratio grid
per pair and the box's precision.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.pipeline.state import FloatState

# Float design: |u| = _U_NORM d^(1/4), |b| = _B_NORM d^(1/4) (orthogonal bases), so that
# for heads with W ~ N(0, 1/d) the scores u^T W b have a standard deviation of
# _U_NORM _B_NORM ~ 2.9 at every d (var = |u|^2 |b|^2 / d). Measured (d = 8, H = 6, the
# u-groups' first-order error |dY| / sigma_min): half this spread loses 30x, 1.5x more
# spread loses 10x again as poles leave the window.
_U_NORM = 2.42
_B_NORM = 1.21
# The ratio grid: per pair the queries [a] * k + [b] * m at ratios t = k / m with log2 t
# evenly spaced in [-_LOG2_WINDOW, _LOG2_WINDOW] (2H points), plus t = 1 as a redundant
# sample when H >= 2 (its own phase). F is a rational function of t of degree H with
# poles -1/lam_h; the Moebius variable w = (t - 1)/(t + 1) maps the samples to [-1, 1]
# and the poles outside it, where a Chebyshev basis is well conditioned.
# The window: a head's pole is seen only while its score lies in it (a saturated sigmoid is
# flat), and W ~ N(0, 1/d) scores of std 2.9 leave [-6, 6] (log2; +-4.16 in log t) 15 % of
# the time, 6 % [-8, 8]. Measured at the true heads (the u-groups' first-order error,
# float64 rounding, the design scale; eval boxes default_rng(5000 + s)): d = 16, H = 6,
# seeds 0-3: [-6, 6] 6.2e-8, 2.6e-10, 2.8e-10, 1.7e-10 -> [-8, 8] 4.5e-10, 2.3e-10,
# 2.4e-10, 1.0e-10 (seed 0 was refused, a u-group stalled at 70x its floor); d = 16, H = 8
# 2-7x better; d = 8, H = 5-7 (8 seeds) never worse; nn.MultiheadAttention E = 16, H = 8
# 2.5-4x better. [-10, 10] gains little more at this scale and quadruples the longest query.
# The count is unchanged (2H ratios per pair): only the longest query grows, 65 -> 257.
_LOG2_WINDOW = 8.0
_MAX_LENGTH = 257  # k + m: the longest per-pair query (k, m <= 256)
# Up to two heads the grid has only 2H = 2 or 4 ratios: over [-8, 8] they sit 5.3 to 16
# log2 units apart, about a sigmoid's whole rise (5.8 log2 units from 12 % to 88 %) or
# more, so a pole is seen on its slope by one or two samples at most (4 to 12 apart at
# [-6, 6]). There the window stays [-6, 6] (k, m <= 64): at the true
# heads H = 1 loses 2.4x at [-8, 8] (random d = 8 and nn.MultiheadAttention E = 8, 4 seeds
# each), H = 2 is even, and float32 nn.MultiheadAttention E = 8, H = 2 modules (the
# independent check's seeds 0-9) were learned 4/10 with [-6, 6] against 1/10 with [-8, 8].
_NARROW_HEADS = 2
_NARROW_LOG2_WINDOW = 6.0
_NARROW_MAX_LENGTH = 65


def ratio_window(H: int, *, unit: float = 2.0**-53) -> tuple[float, int]:
    """The ratio grid's window for H heads: (w, n) with log2 t in [-w, w] and k + m <= n.
    A coarse box (float32, :func:`coarse`) keeps the narrow window at every H: its answers'
    rounding grows with the query's length (nn.MultiheadAttention E = 8, H = 4 in float32,
    the same ratio at lengths 2 to 256: 3e-7 to 5e-6 from the float64 module, the median;
    at 257 tokens up to 1e-4, more than its rtol 1e-4 allows of the heads' part), and its
    sequence polish, not the grid, gives the precision.

    >>> ratio_window(2), ratio_window(3), ratio_window(4, unit=2.0**-24)
    ((6.0, 65), (8.0, 257), (6.0, 65))
    """
    if H <= _NARROW_HEADS or coarse(unit):
        return _NARROW_LOG2_WINDOW, _NARROW_MAX_LENGTH
    return _LOG2_WINDOW, _MAX_LENGTH


# Matching in float: the order with the smallest mismatch wins only if every other order
# misses by _MATCH_MARGIN times more (noise vs a real gap between heads); otherwise the
# step is ambiguous (a tie link decides, or NotIdentifiable). Soundness comes from the
# fit's conditioning check and the fresh-query verification, not from these thresholds.
_MATCH_MARGIN = 10.0
# A returned result's first-order parameter error estimate must be at most this times
# the oracle's rtol (the tolerance the result states for its parameters).
_PARAMETER_SAFETY = 1.0
# A halved link decides its u-group's head order when the runner-up order misses it by more
# than _LINK_EXCLUDE x the noise: the larger of the first-order bound on the true order's
# miss and the best order's miss (link_decided). 3: a first-order bound with a margin for
# its second-order terms (relative 1e-3 at float32's worst group errors of 1e-3).
_LINK_EXCLUDE = 3.0
_LM_ITERATIONS = 60
# Conditioning: a u-group whose pooled fit misses its answers (a local minimum the repairs
# do not leave) is asked again with u_k scaled by _CONDITIONING_FACTOR (its scores and
# residues move together, so the pairs' pole configuration changes), at most this many
# rounds, each only while it fits in the room float_query_limit gives them (square design:
# under the follow-up's count; redundant design: every round's worst case).
CONDITIONING_ROUNDS = 3
# ... and at most this many u-groups asked again in all (each one record of the certificate;
# a round asks every failing group while the room allows: at E = 16, H = 8, 3-6 of the 16
# groups stall, and one group per round could not replace them all).
CONDITIONING_GROUPS = 8
_CONDITIONING_FACTOR = 2.0**-0.5
# The redundant design's rounds turn u_k instead, toward a row that stays, by this angle at
# the same norm: its residues u_k^T v_h change one by one (a scale moves them together, and
# moves every score with them, which helps a group only if its scores were too crowded or
# too spread). Measured: random d = 8, H = 8, benchmark seeds 1 and 2 (one u-group stalled
# each, the scaled round refused both) learned with one turned round (1830 queries); at
# nn.MultiheadAttention E = 16, H = 8 (module seed 0, u_12, 2.6e13 x its floor after every
# repair) turned toward u_1 or u_4 by pi/4 it met its floor (14 x, 13 x), by pi/8 toward u_1
# too and toward u_4 not; scaled by 2^-1/2 it met it, by 2^1/2 not; u_5 of seed 3 the other
# way (2^-1/2 not; 1.5 and 2 yes).
_CONDITIONING_ANGLE = math.pi / 4
# A pair's own fit is good when its residual is at most this times |F|; else restarts.
_PAIR_FIT = 1e-9
_RESTARTS = 8
# A box whose unit roundoff is at least COARSE_UNIT (float32: 2^-24) has answers too coarse
# for the square design from two heads on: there it takes d redundant columns, the most
# extra_columns gives, past the follow-up's count. Measured (nn.MultiheadAttention in
# float32, module seeds 0-5, H = 2, the per-entry estimate of _propagated_error in each):
# E = 8 learned 5/6 with d columns, 4/6 with d/2, 1/6 square; E = 16 5/6, 5/6, 3/6 at the
# design scale, 6/6 with d columns and the pilot's three rounds (float_pilot.pilot_rounds);
# the u-groups' sigma_min grew about 10x; predictions within 3.1e-5 of the float64 module.
COARSE_UNIT = 2.0**-30
_DOUBLE_UNIT = 2.0**-53


def coarse(unit: float) -> bool:
    """Whether answers with this unit roundoff take the coarse design (:data:`COARSE_UNIT`).

    >>> coarse(2.0**-53), coarse(2.0**-24)
    (False, True)
    """
    return unit >= COARSE_UNIT


def float_probe_matrix(B: np.ndarray, affine: bool) -> np.ndarray:
    """M = B^T (affine: B^T over a row of ones), p x J: pair j's scores are ``M[:, j]^T w``
    with p = d (d + 1). Square for the basis, wide with redundant columns.

    >>> float_probe_matrix(np.eye(2), True).tolist()
    [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    """
    return np.vstack([B.T, np.ones((1, B.shape[0]))]) if affine else B.T


def design_pairs(U: np.ndarray, ncols: int) -> list[tuple[np.ndarray, int]]:
    """The pairs of the float design: ``(u_k, b_j)`` row by row, then the halved links
    ``((u_1 + u_k)/2, b_1)``.

    >>> [j for _, j in design_pairs(np.eye(2), 2)]
    [0, 1, 0, 1, 0]
    """
    d = U.shape[0]
    pairs = [(U[k], j) for k in range(d) for j in range(ncols)]
    return pairs + [((U[0] + U[k]) / 2, 0) for k in range(1, d)]  # halved links


def float_design(
    d: int, seed: int, affine: bool, scale: float = 1.0, extra: int = 0
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, int]]]:
    """The float design: orthogonal probe bases (seeded), u rows of norm
    ``_U_NORM * d^(1/4)``, b rows of norm ``_B_NORM * d^(1/4)``; pairs as in exact mode
    with halved links ``((u_1 + u_k)/2, b_1)``. ``scale`` multiplies every u row (the
    pilot's factor, :mod:`.float_pilot`); ``extra`` redundant b rows (random directions of
    the same norm, :func:`extra_columns`) follow the basis.

    Orthogonal bases make ``U^-1`` and ``M^-1`` (which carry the score errors into W)
    as well conditioned as a basis can be; the norms put the scores of heads with
    W ~ N(0, 1/d) at a standard deviation of about 2.9 at every d, which spreads the poles
    across the ratio window (wider spread: better separated poles, until they leave it).

    >>> U, B, pairs = float_design(4, 0, False)
    >>> bool(np.allclose(U @ U.T, _U_NORM**2 * 4**0.5 * np.eye(4))), len(pairs)
    (True, 19)
    """
    rng = np.random.default_rng([seed, 12])

    def orthogonal(n: int) -> np.ndarray:
        q, r = np.linalg.qr(rng.standard_normal((n, n)))
        return q * np.sign(np.diag(r))[None, :]

    Uf = orthogonal(d) * (_U_NORM * d**0.25 * scale)
    Bf = orthogonal(d) * (_B_NORM * d**0.25)
    if affine:
        # A generic b_0 (not 0: there the scores are u^T c_h, equal for heads sharing c).
        # At d = 1 the only unit directions are +-1: the other one than b_1.
        for _ in range(100):
            b0 = -Bf[0] if d == 1 else rng.standard_normal(d)
            b0 = b0 / np.linalg.norm(b0) * (_B_NORM * d**0.25)
            M = np.vstack([np.vstack([Bf, b0]).T, np.ones((1, d + 1))])
            if np.linalg.cond(M) <= 100.0 * d:
                break
        Bf = np.vstack([Bf, b0])
    if extra:
        more = rng.standard_normal((extra, d))
        Bf = np.vstack(
            [Bf, more / np.linalg.norm(more, axis=1, keepdims=True) * (_B_NORM * d**0.25)]
        )
    return Uf, Bf, design_pairs(Uf, len(Bf))


def random_float_box(d: int, H: int, seed: int) -> MultiHeadAttention:
    """A random float-scale box: W_h ~ N(0, 1/d), v_h ~ N(0, 1) (seeded, heads in order),
    each entry rounded to a rational with denominator 2^20 (so its canonical form is exact).

    The instances of the float benchmark and of ``verified-attn learn multi-head
    --arithmetic float``.

    >>> random_float_box(3, 2, 0).H
    2
    """
    from fractions import Fraction

    rng = np.random.default_rng(seed)

    def q(x: float) -> Fraction:
        return Fraction(round(x * 2**20), 2**20)

    heads = []
    for _ in range(H):
        W = rng.normal(0, 1 / math.sqrt(d), (d, d))
        v = rng.normal(0, 1, d)
        heads.append(([[q(x) for x in row] for row in W], [q(x) for x in v]))
    return MultiHeadAttention(heads)


def box_precision(arith: Any) -> str:
    """What the box computes in, from its unit roundoff: "float64", "float32" or the figure.

    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> box_precision(FloatArithmetic()), box_precision(FloatArithmetic(1e-3, 2.0**-24))
    ('float64', 'float32')
    """
    unit = getattr(arith, "unit_roundoff", None)
    names = {2.0**-53: "float64", 2.0**-24: "float32", 2.0**-11: "float16"}
    if unit is None:
        return "float"
    return names.get(float(unit), f"float (unit roundoff {float(unit):.3g})")


def float_sequence(u: np.ndarray, b: np.ndarray, k: int, m: int = 1) -> np.ndarray:
    """``[b + u] * k + [b] * m``: each head sees the ratio t = k / m of the two tokens."""
    return np.vstack([np.tile(b + u, (k, 1)), np.tile(b, (m, 1))])


def _float_name(arith: Arithmetic) -> str:
    return box_precision(arith)


def design_stage(st: FloatState) -> None:
    """Stage 1, the design at the design scale (the pilot may rescale u later)."""
    st.U, st.B, _ = float_design(st.d, st.seed, st.affine, extra=st.wide)

"""The canonical multi-head learner in float arithmetic (float64 decoding, refined, verified).

>>> import verified_attn as va
>>> from verified_attn.multi_head.canonical_learner import learn_multi_head
>>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), heads=1)
>>> rec.exact, rec.verified, abs(float(rec.heads[0][1][0]) - 2) < 1e-12
(False, True, True)

The exact path's pair structure on an orthogonal float design (scores of std ~2.9 for
W ~ N(0, 1/d)) with a ratio grid per pair; the d (affine d + 1) pairs of one u are fitted
jointly with shared residues (:mod:`.float_fit`: Levenberg-Marquardt with a Schur
complement, then orthogonal Gauss-Newton, repairs of groups in local minima until they
reach their rounding floor, second solutions of close scores found, decided by one tie
link each or counted in the error), the u-groups ordered by predicting the halved links,
and tie links where residues tie. A float32 box's decoded heads, and a float64 box's whose
first-order estimate is above :data:`PRECISION_TARGET` (past the follow-up's count only
above :data:`PRECISION_REQUIRED`: :func:`polish_wanted`), are then refitted on every answer
and on random sequences (:mod:`.sequence_fit`, phase ``polish``). The result is
returned only if its first-order parameter error estimate is at most the box's parameter
tolerance (its rtol unless it declares a looser one), two standard deviations of its
first-order prediction error are within what the agreement rule allows on 64 sequences it
does not ask (:mod:`.prediction_bound`), and it reproduces every learning answer and every
fresh verification answer under the one agreement rule
(:func:`verified_attn.verification.agree`) at that rtol; the certificate checker re-checks
the answers and recomputes both figures, since the float fit is not cheaply reproducible.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import certificate_base
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.multi_head.canonical_learner import (
    METHOD,
    THEOREM,
    follow_up_query_bound,
    parameter_count,
)
from verified_attn.multi_head.float_fit import (
    GroupFit,
    closest_gap,
    consensus_start,
    fit_groups,
    fit_linear_groups,
    fit_scores,
    group_model,
    heads_named,
    linear_start,
    link_noise,
    link_orders,
    moved_starts,
    polish_groups,
    row_sensitivities,
    score_weights,
    sigma_min_groups,
    sigma_min_linear,
    transposition_starts,
)
from verified_attn.multi_head.float_pilot import MAX_ROUNDS, next_scale, pilot_rounds
from verified_attn.multi_head.float_rescue import head_subspaces, subspace_starts
from verified_attn.multi_head.prediction_bound import (
    PREDICTION_SEQUENCES,
    PREDICTION_SIGMAS,
    groups_prediction_bound,
    joint_prediction_bound,
)
from verified_attn.multi_head.sequence_fit import (
    POLISH_PER_PARAMETER,
    SequenceRows,
    compress,
    covariance_rows,
    fit_sequences,
    normal_equations,
    pack_parameters,
    polish_sequences,
    unpack_parameters,
)
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.serialize import dump_number
from verified_attn.verification import (
    Verification,
    agree,
    float_floor,
    fresh_sequences,
    tolerance,
    verify_model,
)

__all__ = [
    "ask_pairs",
    "float_design",
    "float_sequence",
    "learn_float",
    "learning_sequences",
    "random_float_box",
]


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
# Ambiguous residue matches are refit from at most this many candidate orders.
_REFIT_ORDERS = 24
# A pair's own fit is good when its residual is at most this times |F|; else restarts.
_PAIR_FIT = 1e-9
_RESTARTS = 8


def redundancy(H: int) -> int:
    """Redundant samples per pair beyond the 2H + 1 a square fit needs (1 if H >= 2).

    >>> redundancy(1), redundancy(6)
    (0, 1)
    """
    return 1 if H >= 2 else 0


def float_ratios(H: int, *, unit: float = 2.0**-53) -> list[tuple[int, int]]:
    """The (k, m) of the per-pair queries: 2H grid ratios, then the redundant ones, in the
    window of :func:`ratio_window` (a function of H and the box's unit roundoff).

    >>> float_ratios(1), float_ratios(3)[0]  # the window: ratio_window(H)
    ([(1, 64), (64, 1)], (1, 256))
    >>> max(k + m for k, m in float_ratios(8)) <= 257
    True
    >>> float_ratios(2)[-1], max(k + m for k, m in float_ratios(4, unit=2.0**-24))
    ((1, 1), 65)
    """
    return list(_float_ratios(H, ratio_window(H, unit=unit)))


@functools.lru_cache(maxsize=64)
def _float_ratios(H: int, window_length: tuple[float, int]) -> tuple[tuple[int, int], ...]:
    """Cached. Per target ratio the candidates are, for each m, the k next to t m (the
    nearest k for a given m is one of them, and a taken ratio has a neighbour): linear in
    the longest query, where all k + m up to the longest query would be quadratic."""
    n = 2 * H
    window, longest = window_length
    out: list[tuple[int, int]] = []
    for i in range(n):
        e = (-window + 2 * window * i / (n - 1)) * math.log(2.0)
        candidates = {
            (k, m)
            for m in range(1, longest)
            for k in range(math.floor(math.exp(e) * m) - 1, math.ceil(math.exp(e) * m) + 2)
            if k >= 1 and k + m <= longest
        }
        free = [c for c in candidates if all(c[0] * o[1] != c[1] * o[0] for o in out)]
        # the nearest ratio in log t, then the shortest query, then the smallest k
        out.append(min(free, key=lambda c: (round(abs(math.log(c[0] / c[1]) - e), 9), sum(c), c)))
    out += [(1, 1)] * redundancy(H)
    if len({k / m for k, m in out}) != len(out):  # pragma: no cover - a design invariant
        raise AssertionError(f"the ratio grid for H = {H} repeats a ratio: {out}")
    return tuple(out)


def max_length(H: int, *, unit: float = 2.0**-53) -> int:
    """The longest learning query of the float design: the largest k + m of its ratios
    (the pilot, the grid, the redundancy and the conditioning all use these ratios).

    >>> max_length(1), max_length(6) <= _MAX_LENGTH, max_length(6, unit=2.0**-24)
    (65, True, 65)
    """
    return max(k + m for k, m in float_ratios(H, unit=unit))


# Redundant probe columns (more b's than the d, affine d + 1, a square design needs) from
# this many heads on, as many as the room under the follow-up's count holds: where the
# free per-pair scores crowd (nn.MultiheadAttention E = 16, H = 8: the u-groups' sigma_min
# 1e-10 .. 1e-5) the scores' linearity in b pins a pair's close scores through the other
# pairs (float_fit.fit_linear_groups). Until this version only from six heads on; measured
# with them from two heads on (float64, the float benchmark's seeds): random d = 32, H = 4
# 2/2 learned (the square design 0/2: two scores 1.5e-5 apart, a fit at a wrong solution),
# every other cell H = 2-5 as learned as before (d = 8 60/60, d = 16 12/12, modules E = 8
# 6/6, E = 16 12/12, E = 32 2/2) with parameters 3x to 300x closer (d = 16, H = 4 5.4e-14
# against 1.5e-11), at up to 1.3x the square design's queries, under the follow-up's count.
# Where the room holds no column (d <= 4, d = 8 with H = 2) the design stays square.
REDUNDANT_FROM_HEADS = 2
# The conditioning rounds are held to the room under the follow-up's count up to five
# heads; from this many heads on they get their whole worst case (float_query_limit).
UNBOUNDED_ROUNDS_FROM_HEADS = 6
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


def _limit_at(d: int, H: int, affine: bool, extra: int) -> int:
    """The count of :func:`base_query_limit` with ``extra`` redundant probe columns: tie
    links only in the square design (``extra == 0``; see :func:`_decode_pooled`)."""
    ncols = d + (1 if affine else 0) + extra
    npairs = d * ncols + d - 1
    ties = d * (ncols - 1) if H >= 2 and not extra else 0
    return ncols + npairs * (2 * H + redundancy(H)) + ties


def extra_columns(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """Redundant probe columns of the float design: from :data:`REDUNDANT_FROM_HEADS` heads
    on, as many as the room under the follow-up's ``4Hd^2 - 2H + 1`` holds once the
    pilot's discarded rounds are reserved, each column sized at its F(0), d pairs and d
    tie links, at most d; else 0. A box of unit roundoff ``unit`` >= :data:`COARSE_UNIT`
    (float32) takes d from two heads on. A function of the sizes and the box's unit
    roundoff alone, so that a certificate's design is fixed by them. (The redundant design
    asks no tie links, see :func:`_decode_pooled`; the sizing still counts them, as the
    design was measured, and the conditioning rounds get that room.)

    The conditioning rounds get what room is left. Measured against keeping room for three
    rounds at E = 16, H = 8 (4 columns instead of 8; nn.MultiheadAttention module seeds 0
    and 3 of the independent check): 4 and 5 of the 16 u-groups stalled after the fits
    instead of 2 and 3, and seed 0 was refused all the same.

    >>> extra_columns(8, 5, False), extra_columns(8, 6, False), extra_columns(16, 8, True)
    (2, 2, 8)
    >>> extra_columns(8, 2, False), extra_columns(4, 4, False)  # no room: the square design
    (0, 0)
    >>> extra_columns(8, 2, True, unit=2.0**-24), extra_columns(8, 1, True, unit=2.0**-24)
    (8, 0)
    """
    if coarse(unit) and H >= 2:
        return d
    if H < REDUNDANT_FROM_HEADS:
        return 0
    per_pair = 2 * H + redundancy(H)
    room = follow_up_query_bound(d, H) - 1 - _limit_at(d, H, affine, 0)
    reserve = (MAX_ROUNDS - 1) * d * per_pair
    column = 1 + d * per_pair + d
    return max(0, min(d, (room - reserve) // column))


def probe_columns(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The float design's probe columns b_j: d (affine d + 1) plus :func:`extra_columns`.

    >>> probe_columns(8, 4, True), probe_columns(16, 8, True)
    (10, 25)
    """
    return d + (1 if affine else 0) + extra_columns(d, H, affine, unit=unit)


#: The sequence polish takes boxes of at most this many canonical parameters (its normal
#: equations are P x P, formed anew at each Levenberg-Marquardt step: nn.MultiheadAttention
#: E = 16, H = 8 has 2305).
POLISH_PARAMETERS = 2400


def polish_count(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The random sequences the sequence polish asks (phase ``polish``,
    :mod:`.sequence_fit`): :data:`~.sequence_fit.POLISH_PER_PARAMETER` per canonical
    parameter for a coarse box (:func:`coarse`, float32) from two heads on, up to
    :data:`POLISH_PARAMETERS` parameters; else 0 (the u-group figures stand).

    >>> polish_count(8, 4, True, unit=2.0**-24), polish_count(8, 4, True), polish_count(8, 1, True, unit=2.0**-24)
    (642, 0, 0)
    """
    P = parameter_count(d, H, affine)
    if coarse(unit) and H >= 2 and P <= POLISH_PARAMETERS:
        return POLISH_PER_PARAMETER * P
    return 0


#: A float64 result whose first-order parameter error estimate is above this takes the
#: precision polish (:func:`precision_polish_count`) when the run's bound holds it and its
#: queries keep the run under the follow-up's ``4Hd^2 - 2H + 1`` (:func:`polish_wanted`).
PRECISION_TARGET = 1e-12
#: ... and past the follow-up's count only when the estimate is above this (the precision
#: every float64 result is held to; under it the count comes first). Measured, the float
#: benchmark's modules: nn.MultiheadAttention E = 32, H = 8 seed 0 (one conditioning round)
#: 31,980 queries and parameters within 1.7e-12 unpolished, 33,069 polished, against the
#: follow-up's 32,753.
PRECISION_REQUIRED = 1e-10
#: The precision polish asks one random sequence per this many canonical parameters
#: (measured, float64 boxes at d = 8, 16, H = 1 - 8, the decoded heads refitted on every
#: answer: with P / 16 sequences parameters to 1e-12 - 2e-15, with P / 8 to 5e-13 - 4e-16,
#: from 2e-13 - 3e-9 before; the float benchmark's runs).
PRECISION_PARAMETERS_PER_SEQUENCE = 8
#: The precision polish takes float64 boxes of at most this many canonical parameters
#: (d = 32 with eight heads: 8448; nn.MultiheadAttention E = 32, H = 8: 8705). Its normal
#: equations are P x P (600 MB at this size, a few held at once) and each of its
#: Levenberg-Marquardt steps costs about (answers) x P^2: measured, random d = 32, H = 6
#: seed 1 (P = 6336) 292 s and 3.2 GB peak against 134 s and 0.7 GB unpolished, its
#: parameters from 4.8e-12 to 2.0e-15 and its predictions from 1.3e-10 to 1.3e-13. The
#: coarse (float32) polish keeps :data:`POLISH_PARAMETERS`: it asks 2 P sequences, not P / 8.
PRECISION_POLISH_PARAMETERS = 8800


def precision_polish_count(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The random sequences of the precision polish (phase ``polish``): a box that is not
    coarse (float64) whose decoded heads' first-order parameter error estimate is above
    :data:`PRECISION_TARGET` is refitted on every answer and ``ceil(P / 8)`` random
    sequences (:mod:`.sequence_fit`), when the queries the run has left under its bound
    (:func:`float_query_limit`, unchanged) hold them and :func:`polish_wanted` asks for
    it. 0 for a coarse box (always polished, :func:`polish_count`) and past
    :data:`PRECISION_POLISH_PARAMETERS`.

    >>> precision_polish_count(8, 6, False), precision_polish_count(8, 4, True, unit=2.0**-24)
    (54, 0)
    """
    P = parameter_count(d, H, affine)
    if coarse(unit) or P > PRECISION_POLISH_PARAMETERS:
        return 0
    return -(-P // PRECISION_PARAMETERS_PER_SEQUENCE)


def polish_wanted(
    estimate: float | None, count: int, asked: int, bound: int, follow_up: int
) -> bool:
    """Whether a float64 run takes the precision polish of ``count`` random sequences after
    ``asked`` learning queries: never past its ``bound``; always when the decoded heads
    were refused (``estimate`` None: the polish is their last chance) or their estimate is
    above :data:`PRECISION_REQUIRED`; above :data:`PRECISION_TARGET` only while the run
    stays under the follow-up's count ``follow_up`` (fewer queries comes first there).

    >>> polish_wanted(5e-12, 289, 7600, 13064, 8177), polish_wanted(5e-12, 289, 7900, 13064, 8177)
    (True, False)
    >>> polish_wanted(5e-10, 289, 7900, 13064, 8177), polish_wanted(None, 289, 12900, 13064, 8177)
    (True, False)
    >>> polish_wanted(5e-13, 289, 7600, 13064, 8177)  # within the target: not needed
    False
    """
    if not 0 < count <= bound - asked:
        return False
    if estimate is None or estimate > PRECISION_REQUIRED:
        return True
    return estimate > PRECISION_TARGET and asked + count < follow_up


def _within_parameter_tolerance(
    estimate: float, prtol: float, H: int, arith: Arithmetic, figure: str, gap: float
) -> None:
    """PrecisionExhausted unless the first-order parameter error estimate is within the
    parameter tolerance."""
    if not estimate <= _PARAMETER_SAFETY * prtol:
        raise PrecisionExhausted(
            f"the pooled fit of {H} heads is too ill-conditioned for a "
            f"{box_precision(arith)} box: first-order parameter error "
            f"estimate {estimate:.2e} relative > the parameter tolerance {prtol:g} "
            f"({figure}, closest score gap {gap:.2e})"
        )


def float_query_bound(d: int, H: int, *, affine: bool = False, unit: float = _DOUBLE_UNIT) -> int:
    """The float path's count without ties or a rescaling pilot: the F(0) probes, then per
    pair 2H grid ratios and ``redundancy(H)`` redundant samples (:func:`probe_columns`
    columns).

    >>> float_query_bound(8, 5), float_query_bound(3, 2, affine=True), float_query_bound(8, 6)
    (967, 74, 1141)
    """
    ncols = probe_columns(d, H, affine, unit=unit)
    npairs = d * ncols + d - 1
    return ncols + npairs * (2 * H + redundancy(H)) + polish_count(d, H, affine, unit=unit)


def base_query_limit(d: int, H: int, *, affine: bool = False, unit: float = _DOUBLE_UNIT) -> int:
    """:func:`float_query_bound` plus, in the square design, one tie link per grid pair with
    j > 1 (as in exact mode; the redundant design asks none): the worst case of a box the
    pilot keeps at the design scale.

    >>> base_query_limit(8, 5), base_query_limit(8, 6) == float_query_bound(8, 6)
    (967, True)
    >>> base_query_limit(8, 2)  # no room for a column: square, 363 and 56 tie links
    419
    """
    extra = extra_columns(d, H, affine, unit=unit)
    return _limit_at(d, H, affine, extra) + polish_count(d, H, affine, unit=unit)


def float_query_limit(d: int, H: int, *, affine: bool = False, unit: float = _DOUBLE_UNIT) -> int:
    """The float path's worst case: :func:`base_query_limit` plus the adaptive phases - the
    pilot's discarded rounds (``d (2H + redundancy(H))`` queries each, at most
    :func:`~.float_pilot.pilot_rounds` - 1) and up to :data:`CONDITIONING_GROUPS`
    u-groups asked again (each at most :func:`conditioning_cost` of u_1).

    Up to five heads (:data:`UNBOUNDED_ROUNDS_FROM_HEADS`) it gives them
    :func:`adaptive_room`: the limit stays under the follow-up's ``4Hd^2 - 2H + 1``
    wherever :func:`base_query_limit` does. From six heads on, and for a coarse box
    (float32, past that count by design), the redundant design gives them their whole
    worst case: there a u-group that stalls is learned only by asking it again, and at
    nn.MultiheadAttention E = 16, H = 8 the room under the follow-up's count holds one round
    where two to six groups stall (measured, the float benchmark's modules with E = 16 and
    32, H = 8: 4 of 4 learned with the rounds they needed, up to 1.22 x the follow-up's
    count; 0 of 4 within the room). A run asks them only where a group stalls; its note
    gives its count against the follow-up's.

    >>> float_query_limit(8, 5), float_query_limit(8, 5) < 4 * 5 * 8**2 - 2 * 5 + 1
    (1270, True)
    >>> float_query_limit(8, 6) - base_query_limit(8, 6) == 2 * 8 * 13 + 8 * conditioning_cost(8, 6, False)
    True
    """
    pilot = (pilot_rounds(d, H, affine, unit=unit) - 1) * d * (2 * H + redundancy(H))
    most = pilot + CONDITIONING_GROUPS * conditioning_cost(d, H, affine, unit=unit)
    base = base_query_limit(d, H, affine=affine, unit=unit)
    if extra_columns(d, H, affine, unit=unit) and (
        H >= UNBOUNDED_ROUNDS_FROM_HEADS or coarse(unit)
    ):
        return base + most
    return base + min(adaptive_room(d, H, affine, unit=unit), most)


def adaptive_room(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The queries the adaptive phases (pilot rounds discarded, conditioning) may add to
    :func:`base_query_limit`: what keeps the total under the follow-up's count, or 0.

    >>> adaptive_room(8, 6, False), adaptive_room(2, 2, False)
    (383, 0)
    """
    return max(
        0, follow_up_query_bound(d, H) - 1 - base_query_limit(d, H, affine=affine, unit=unit)
    )


def conditioning_cost(
    d: int, H: int, affine: bool, k: int = 0, *, unit: float = _DOUBLE_UNIT
) -> int:
    """The queries of one conditioning round that replaces u-group ``k``: its ``ncols``
    pairs and the halved links through u_k (all d - 1 of them for k = 0, else one).

    >>> conditioning_cost(8, 6, False), conditioning_cost(8, 6, False, k=3)
    (221, 143)
    """
    ncols = probe_columns(d, H, affine, unit=unit)
    links = d - 1 if k == 0 else 1
    return (ncols + links) * (2 * H + redundancy(H))


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


#: Query entries (tokens x d) built at once when the design's pairs are asked
#: (:func:`ask_pairs`): the F(t) queries of nn.MultiheadAttention E = 64, H = 4 are 3.9 GB
#: of float64 together.
_BLOCK_ENTRIES = 1 << 24


def ask_pairs(
    oracle: Oracle,
    pairs: Sequence[tuple[np.ndarray, int]],
    B: np.ndarray,
    ratios: Sequence[tuple[int, int]],
) -> np.ndarray:
    """The answers, ``(len(pairs), len(ratios))``, to :func:`float_sequence` ``(u, B[j], k,
    m)`` for every pair ``(u, j)`` and ratio ``(k, m)``, asked pair by pair in the oracle's
    current phase, in blocks of pairs of at most :data:`_BLOCK_ENTRIES` query entries (the
    same queries in the same order as one list; memory bounded at any d).

    >>> from verified_attn import MultiHeadAttention, Oracle
    >>> box = Oracle(MultiHeadAttention([([[1.0]], [2.0])]), "float")
    >>> ask_pairs(box, [(np.array([0.0]), 0)], np.ones((1, 1)), [(1, 1), (2, 1)]).tolist()
    [[2.0, 2.0]]
    >>> box.queries
    2
    """
    per_pair = max(1, sum(k + m for k, m in ratios) * B.shape[1])
    step = max(1, _BLOCK_ENTRIES // per_pair)
    out = np.empty((len(pairs), len(ratios)))
    for start in range(0, len(pairs), step):
        block = pairs[start : start + step]
        seqs = [float_sequence(u, B[j], k, m) for u, j in block for k, m in ratios]
        got = np.array(oracle.query_many(seqs), dtype=np.float64)
        out[start : start + len(block)] = got.reshape(len(block), len(ratios))
    return out


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _float_poles(t: np.ndarray, F: np.ndarray, m: int) -> list[tuple[float, float]]:
    """(score, residue) per head from the float samples F(t) (t = 0 first).

    A linearised rational fit in the Moebius variable (Chebyshev basis, the null vector of
    the column-scaled system by SVD) gives the poles; a variable-projection Gauss-Newton on
    the exact model ``F(t) = c + sum_h r_h sigmoid(s_h + log t)`` polishes them. No
    refusal here: a bad pair shows up in the matching, the joint fit's residual and
    conditioning, and the fresh queries.
    """
    from numpy.polynomial import chebyshev as C

    w = (t - 1.0) / (t + 1.0)
    V = C.chebvander(w, m)
    A = np.hstack([V, -F[:, None] * V])
    sc = np.linalg.norm(A, axis=0)
    sc[sc == 0] = 1.0
    _, _, vt = np.linalg.svd(A / sc)
    q = (vt[-1] / sc)[m + 1 :]
    if not np.all(np.isfinite(q)) or not np.any(q):
        raise PrecisionExhausted("the float interpolation system of a pair has no finite solution")
    while len(q) > 1 and abs(q[-1]) <= 1e-14 * np.abs(q).max():
        q = q[:-1]
    roots = C.chebroots(q) if len(q) > 1 else np.array([])
    s = []
    for z in roots:
        wr = float(z.real)
        lam = abs((wr - 1.0) / (wr + 1.0)) if wr != -1.0 else 1e-12
        s.append(math.log(min(max(lam, 1e-12), 1e12)))
    while len(s) < m:  # a pole lost at infinity: spread a guess over the window
        s.append(float(len(s)) - m / 2)
    s_arr = np.array(s[:m])
    with np.errstate(divide="ignore"):
        lt = np.log(t)

    def linear(sv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sig = np.where(
            np.isfinite(lt)[:, None],
            _sigmoid(sv[None, :] + np.where(np.isfinite(lt), lt, 0.0)[:, None]),
            0.0,
        )
        Bm = np.hstack([sig, np.ones((len(t), 1))])
        lin = np.linalg.lstsq(Bm, F, rcond=None)[0]
        return sig, lin, Bm @ lin - F

    scale = max(float(np.linalg.norm(F)), 1e-300)
    best = _varpro(linear, s_arr, m)
    # A pair whose fit misses its own samples is restarted (seeded, within the samples:
    # no queries): spread starts over the window, then random ones.
    rng = np.random.default_rng(m)
    for attempt in range(_RESTARTS):
        if best[0] <= _PAIR_FIT * scale:
            break
        start = np.linspace(-3.0, 3.0, m) if attempt == 0 else rng.uniform(-4.0, 4.0, m)
        trial = _varpro(linear, start, m)
        if trial[0] < best[0]:
            best = trial
    _, s_arr, lin = best
    return [(float(s_arr[h]), float(lin[h])) for h in range(m)]


def _varpro(linear: Any, s_arr: np.ndarray, m: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Variable projection Gauss-Newton on the scores (the residues and c linear)."""
    sig, lin, res = linear(s_arr)
    best = (float(np.linalg.norm(res)), s_arr, lin)
    stalls = 0
    for _ in range(30):
        J = sig * (1.0 - sig) * lin[None, :m]
        Bm = np.hstack([sig, np.ones((len(sig), 1))])
        Q, _ = np.linalg.qr(Bm)
        Jp = J - Q @ (Q.T @ J)
        step = np.linalg.lstsq(Jp, -res, rcond=None)[0]
        step = np.clip(step, -2.0, 2.0)
        s_arr = np.clip(s_arr + step, -30.0, 30.0)
        sig, lin, res = linear(s_arr)
        norm = float(np.linalg.norm(res))
        stalled = not norm < 0.5 * best[0]
        if np.isfinite(norm) and norm < best[0]:
            best = (norm, s_arr, lin)
        if stalled and (stalls := stalls + 1) >= 3:
            break
    return best


def _fit_scores(
    t: np.ndarray, F: np.ndarray, r: np.ndarray, s0: list[float]
) -> tuple[list[float], float]:
    """Scores s with ``F(t) = F(0) + sum_h r_h sigmoid(s_h + log t)`` (r known), by
    Gauss-Newton from s0; returns them and the relative residual norm."""
    lt = np.log(t[1:])
    y = F[1:] - F[0]
    s_arr = np.array(s0, dtype=np.float64)
    best = (math.inf, s_arr)
    for _ in range(30):
        sig = _sigmoid(s_arr[None, :] + lt[:, None])
        res = sig @ r - y
        norm = float(np.linalg.norm(res))
        if not np.isfinite(norm):
            break
        if norm < best[0]:
            best = (norm, s_arr)
        J = sig * (1.0 - sig) * r[None, :]
        step = np.clip(np.linalg.lstsq(J, -res, rcond=None)[0], -2.0, 2.0)
        s_arr = np.clip(s_arr + step, -30.0, 30.0)
        if np.linalg.norm(step) <= 1e-14 * max(1.0, float(np.abs(s_arr).max())):
            break
    return [float(x) for x in best[1]], best[0] / max(float(np.linalg.norm(y)), 1e-300)


def _ranked(errors: dict[tuple[int, ...], float]) -> list[tuple[int, ...]]:
    """The orders indistinguishable from the best one (within _MATCH_MARGIN of its error)."""
    best = min(errors.values())
    return [p for p, e in sorted(errors.items(), key=lambda x: x[1]) if e <= _MATCH_MARGIN * best]


def link_decided(miss: np.ndarray, predicted: float) -> bool:
    """Does a halved link fix its u-group's head order? ``miss``: the orders' misses, best
    first; ``predicted``: the first-order bound on the true order's miss (its u-groups'
    noise carried to the link, :func:`~.float_fit.link_noise`, and the link's own).

    The noise is the larger of that bound and the best order's own miss (a miss beyond
    the bound shows errors at least that large); the order is decided iff the runner-up
    misses by more than _LINK_EXCLUDE x the noise. A bare ratio of the two misses does
    not see the noise: it calls two orders that both miss within the noise decided, and
    refuses a float32 link whose runner-up misses by 4 x the best (measured misses 2e-3
    and 8e-3, E = 8, H = 4) when the noise allows 1e-4.

    >>> link_decided(np.array([1e-12, 1e-3]), 1e-11), link_decided(np.array([2e-3, 8e-3]), 1e-4)
    (True, True)
    >>> link_decided(np.array([1e-12, 1e-9]), 1e-9)  # both within the noise: undecided
    False
    """
    noise = max(float(predicted), float(miss[0]))
    return bool(miss[1] > _LINK_EXCLUDE * noise)


def _float_match(
    base: list[tuple[float, float]],
    other: list[tuple[float, float]],
    link: list[tuple[float, float]],
    what: str,
    ambiguous: list[str],
) -> tuple[int, ...]:
    """The order p with ``{(base[h] + other[p[h]]) / 2}`` nearest to ``link`` (the float
    links are halved, ``((u_1 + u_k) / 2, b_1)``, so that their scores stay in the ratio
    grid's window: scores and residues average along them).

    If another order is within _MATCH_MARGIN of the best one, the best is still taken
    (the joint fit, its conditioning check and the fresh queries decide) and the step is
    recorded in ``ambiguous``: a refusal then names it (NotIdentifiable).
    """
    H = len(base)
    s_scale = max(1.0, *(abs(x[0]) for x in link))
    r_scale = max(abs(x[1]) for x in link) or 1.0  # all residues 0: absolute
    perms = np.array(list(itertools.permutations(range(H))))
    bs, os_, ls = np.array(base), np.array(other), np.array(link)
    got = (bs[None, :, :] + os_[perms]) / 2  # (P, H, 2)
    dist = np.maximum(
        np.abs(got[:, :, None, 0] - ls[None, None, :, 0]) / s_scale,
        np.abs(got[:, :, None, 1] - ls[None, None, :, 1]) / r_scale,
    )  # (P, H, H): head h of order p against link head o
    errors = dist.min(axis=2).max(axis=1)
    order = np.argsort(errors, kind="stable")
    best = float(errors[order[0]])
    close = [int(i) for i in order[1:3] if errors[i] <= _MATCH_MARGIN * best]
    if close:
        ambiguous.append(
            f"the link {what} matches {1 + len(close)}+ head orders within "
            f"{_MATCH_MARGIN:g}x (best mismatch {best:.1e}, next {float(errors[close[0]]):.1e})"
        )
    return tuple(int(x) for x in perms[order[0]])


def _refine(
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], float, np.ndarray, float, float, np.ndarray]:
    """Levenberg-Marquardt on all learning answers at once, from the per-pair decoding.

    Each pair alone is a square (2H + 1)-point fit whose poles are ill-conditioned when two
    scores are close or a residue u^T v_h is small; together the answers overdetermine the
    H (d^2 + 2d) + 1 parameters (``F = beta + sum_h b^T v_h + u^T v_h sigmoid(u^T (W_h b +
    c_h) + log k)``, and ``F(0) = beta + sum_h b^T v_h``), so the joint least-squares fit is
    far better conditioned. Returns the iterate with the smallest residual (never worse
    than the start), its residuals, the smallest singular value of the Jacobian there
    (0 if it is rank deficient; the conditioning figure) and the largest row norm of its
    pseudo-inverse (inf if rank deficient; what the parameter error estimate multiplies),
    and ``S^-1 V^T`` of its SVD (``|g^T J^+| = |S^-1 V^T g|``: how far a functional ``g`` of
    the parameters moves per unit of answer change; empty if rank deficient).
    """
    u, b, logk, y = rows  # (n, d), (n, d), (n,) log t, -inf for F(0), (n,)
    d, H = u.shape[1], len(heads)
    has_k = np.isfinite(logk)
    lk = np.where(has_k, logk, 0.0)

    def residual_and_jacobian(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hs, bt = unpack_parameters(theta, H, d, affine)
        F = np.full(len(y), bt)
        cols = []
        for h in hs:
            W, v = h[0], h[1]
            z = np.einsum("ni,ij,nj->n", u, W, b) + lk
            if affine:
                z = z + u @ h[2]
            sig = np.where(has_k, 0.5 * (1.0 + np.tanh(0.5 * z)), 0.0)  # no overflow
            ds = sig * (1.0 - sig)
            uv = u @ v
            F += b @ v + uv * sig
            g = uv * ds  # dF/dz
            cols.append((g[:, None, None] * u[:, :, None] * b[:, None, :]).reshape(len(y), -1))
            cols.append(b + sig[:, None] * u)
            if affine:
                cols.append(g[:, None] * u)
        if affine:
            cols.append(np.ones((len(y), 1)))
        return F - y, np.hstack(cols)

    theta = pack_parameters(heads, beta, affine)
    res, J = residual_and_jacobian(theta)
    best, best_norm = theta, float(np.linalg.norm(res))
    mu = 1e-3
    for _ in range(_LM_ITERATIONS):
        # Levenberg-Marquardt on the column-scaled Jacobian (Marquardt's scaling).
        scale = np.linalg.norm(J, axis=0)
        scale[scale == 0] = 1.0
        Js = J / scale
        A = np.vstack([Js, math.sqrt(mu) * np.eye(Js.shape[1])])
        rhs = np.concatenate([-res, np.zeros(Js.shape[1])])
        step = np.linalg.lstsq(A, rhs, rcond=None)[0] / scale
        trial = theta + step
        t_res, t_J = residual_and_jacobian(trial)
        norm = float(np.linalg.norm(t_res))
        if np.isfinite(norm) and norm < best_norm:
            theta, res, J = trial, t_res, t_J
            small = best_norm - norm <= 1e-3 * best_norm
            best, best_norm = theta, norm
            mu = max(mu / 10.0, 1e-15)
            if small and np.linalg.norm(step) <= 1e-13 * max(1.0, float(np.abs(theta).max())):
                break
        else:
            mu *= 10.0
            if mu > 1e8:
                break
    hs, bt = unpack_parameters(best, H, d, affine)
    res, J = residual_and_jacobian(best)
    _, sv, Vt = np.linalg.svd(J, full_matrices=False)
    if len(sv) < J.shape[1] or not sv[-1] > 0:
        return hs, bt, res, 0.0, math.inf, np.zeros((0, J.shape[1]))
    # Row i of J^+ = V diag(1/sv) U^T has norm |V[i] / sv|: how far parameter i moves, to
    # first order, per unit of answer change (at most 1 / sigma_min, for every i).
    sensitivity = float(np.sqrt(((Vt / sv[:, None]) ** 2).sum(axis=0)).max())
    return hs, bt, res, float(sv[-1]), sensitivity, Vt / sv[:, None]


# Joint dense polish (all answers, (W, v) parametrisation) only when parameters x answers is
# at most this (~1 MB of Jacobian, d <= 4); larger boxes keep the pooled u-group fit (same minimiser
# on the grid answers, structured).
_DENSE_POLISH = 100_000
# A u-group fit is good when its residual is at most this many times the group's rounding
# floor (unit roundoff x the answers' norm); a link order wins only if the next one misses
# the link by _MATCH_MARGIN times more than max(best, _LINK_FLOOR x floor).
_GROUP_FIT = 1e5
# A u-group fit counts as converged (no repair) when its residual is at most this many times
# its rounding floor. Measured (d = 8, H = 5, 6, seeds 0-9): fits started at the true scores
# and residues end at 0.8-3.7 x the floor, while local minima sit at 90 x - 4e5 x it with
# score errors 1e-2 - 1e-1 (and a first-order estimate that cannot see them).
_CONVERGED = 30.0
_LINK_FLOOR = 10.0
# Residue sources tried per u-group (its best-conditioned single pairs): at least
# _SOURCES, more while d x sources x pairs stays within _SOURCE_WORK (every pair at d = 8:
# measured, eval seeds 7 and 11 at H = 5 need a fourth-to-eighth source, whose pair has no
# score outside the ratio window; at d = 32 the cost keeps it at 3).
_SOURCES = 3
_SOURCE_WORK = 1024
# A pair's scores-only start is in the right basin when it misses by at most this relative
# (the source's residues are themselves only a single pair's estimate).
_BASIN = 1e-6
# Two residues of one u-group within this (relative) are a tie: a tie link decides.
_TIE_RESIDUE = 1e-6
# Starting-point fits with more (problem, start) rows than this are pruned (fit_scores).
_PRUNE_ABOVE = 50_000
# Rounds of the transposition repair of pairs stuck in a local minimum.
_REPAIRS = 3
# Two scores of one pair within this (log t units) are refitted swapped (a second solution?).
_NEAR_GAP = 1e-2
# A second solution whose residual is within this factor of the fit's (or of the rounding
# floor) fits the answers as well. The first-order estimate takes the noise to be the
# residual or the floor; a residual norm twice the fit's is then a misfit ~1.7 x the noise
# norm, which rounding noise spread over the group's 30+ degrees of freedom does not make
# (a chi-square ratio of 4). Measured twins: 0.98-1.01 x (a true second solution, scores
# 6.7e-5 apart, d = 8, H = 6, seed 1) against 2.9 x - 1e6 x for swaps that are not.
_TWIN = 2.0
# A second solution farther than this times the group's first-order error is asked about
# (a tie link); closer ones are the fit itself, found again.
_TWIN_SIGNIFICANT = 100.0
# Levenberg-Marquardt steps per repair start: a pair with several crowded scores (four within
# 0.5 at d = 8, H = 5, seed 2) needs ~300 from a start in the right basin (60 leave it in the
# wrong one, with a score off by 0.15).
_REPAIR_STEPS = 300
# ... of which the first 40 run from every start, the rest from each pair's 8 best (the cost
# is in the starts: d = 16, H = 8 spent 320 of 366 s in these fits without pruning).
_REPAIR_PRUNE = (40, 8)
# Rounds of joint restarts (one pair each) for a group still not converged after the repairs.
_JOINT_ROUNDS = 3
# The redundant design's fit (_linear_stage) restarts a group still off its floor this many
# times, from its pairs' scores refitted alone with the linear fit's residues.
_LINEAR_ROUNDS = 2
# Seeds consensus_start's random subsets (with the sizes), where there are too many to try.
_CONSENSUS_SEED = 0x636F6E
# Shifts of one head's score tried by the joint restarts (log t units).
_LOCAL_SHIFTS = np.array([-0.3, -0.1, -0.03, -0.01, 0.01, 0.03, 0.1, 0.3])
# Random starts per repaired pair.
_RANDOM_STARTS = 96


def _score_grid(lt: np.ndarray) -> np.ndarray:
    """Scores a repair start may move one head to (log t units): the window the ratios span
    (``max |log t|``, rounded up) and 2 more either side, in steps of 1 - read from the
    ratios, so that it follows the design's window (-8..8 for log2 t in [-8, 8]).

    >>> _score_grid(np.log([1 / 256, 1.0, 256.0]))[[0, -1]].tolist()
    [-8.0, 8.0]
    """
    edge = math.ceil(float(np.max(np.abs(lt[np.isfinite(lt)])))) + 2
    return np.arange(-edge, edge + 0.5, 1.0)


@dataclass
class _Decoded:
    heads: list[tuple[np.ndarray, ...]]
    beta: float
    ambiguous: list[str]
    gap: float  # the closest score gap over all grid pairs
    sigma_min: float  # the smallest singular value over the u-group Jacobians
    estimate: float | None  # first-order relative parameter error; None: failed (failure)
    failure: str = ""
    bad: tuple[int, ...] = ()  # the u-groups whose pooled fit misses its answers (failed)


def _group_fits(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    d: int,
    unit: float,
    *,
    ids: Sequence[int] | None = None,
    full_d: int | None = None,
    Mt: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1-2 of :func:`_decode_pooled`: every u-group's residues r (d, H), scores
    s (d, J, H) (head order per group arbitrary), residual norms (d,) and rounding floors
    (d,), from the grid answers ``ans`` (rows: pairs (u_k, b_j), k-major) and ``f0``.

    ``Mt`` (J, p): the probe columns (:func:`float_probe_matrix` transposed). With more pairs
    than p (redundant columns) the free fits are only the starts of the fit in (r, w) with
    ``s = Mt w`` (:func:`_linear_stage`), whose scores are returned.

    ``ids`` (the groups' indices in the design, default ``range(d)``) and ``full_d`` (the
    design's d) let a subset of the groups be refitted (:func:`_refit_groups`) exactly as
    they are fitted among all d: the same sources, repair limit and seeded starts (only the
    pruning of very large batches of starts depends on the batch's size)."""
    ids = list(range(d)) if ids is None else list(ids)
    full_d = d if full_d is None else full_d
    ncols, T = len(f0), len(t)
    lt = np.log(t)
    t0 = np.concatenate([[0.0], t])
    n_grid = d * ncols
    Y = (ans[:n_grid] - np.tile(f0, d)[:, None]).reshape(d, ncols, T)
    # The rounding floor of each group (answers and their F(0)), and of each link.
    floor = unit * np.sqrt(
        (ans[:n_grid] ** 2).sum(axis=1).reshape(d, ncols).sum(axis=1) + T * float(f0 @ f0)
    )
    single = [
        _float_poles(t0, np.concatenate([[f0[j]], ans[k * ncols + j]]), H)
        for k in range(d)
        for j in range(ncols)
    ]
    ss = np.array([[x[0] for x in p] for p in single]).reshape(d, ncols, H)
    sr = np.array([[x[1] for x in p] for p in single]).reshape(d, ncols, H)
    own = group_model(lt, sr.reshape(-1, H), ss.reshape(-1, 1, H)).reshape(d, ncols, T) - Y
    own_rel = np.linalg.norm(own, axis=-1) / np.maximum(np.linalg.norm(Y, axis=-1), 1e-300)
    gaps = np.diff(np.sort(ss, axis=-1), axis=-1).min(axis=-1) if H > 1 else np.ones((d, ncols))
    key = np.where(own_rel <= 1e-8, gaps, -own_rel)
    if Mt is not None and Mt.shape[0] > Mt.shape[1] and H > 1 and ncols > 3:
        # Redundant columns, many heads: a single pair's residues are often far off (2H
        # unknowns from 2H + 1 answers), and its score gap does not say which. The pairs
        # whose residues agree with other pairs' are the sources: key = minus the median
        # distance to its 3 nearest (sorted residues, relative). Measured (nn.MHA E = 16,
        # H = 8): in groups whose widest-gap sources were off by 0.5 - 2, three pairs agreed
        # to 2e-4 with residues 3e-5 - 2e-4 from the truth.
        srt = np.sort(sr, axis=-1)
        scale_r = np.maximum(np.abs(srt).max(axis=-1), 1e-300)
        dist = np.abs(srt[:, :, None, :] - srt[:, None, :, :]).max(axis=-1) / scale_r[:, :, None]
        dist[:, np.arange(ncols), np.arange(ncols)] = np.inf
        near = np.sort(dist, axis=-1)[:, :, :3]
        key = np.where(np.isfinite(near).all(axis=-1), -np.median(near, axis=-1), -np.inf)
    n_src = min(ncols, max(_SOURCES, _SOURCE_WORK // (full_d * ncols)))
    src = np.argsort(-key, axis=1, kind="stable")[:, :n_src]
    r0 = np.empty((d, n_src, H))
    s0 = np.empty((d, n_src, ncols, H))
    for k in range(d):
        for c in range(n_src):
            ref = sr[k, src[k, c]]
            r0[k, c] = ref
            scale = max(float(np.abs(ref).max()), 1e-300)
            for j in range(ncols):
                # Pair j's own heads assigned to the source's by residue (plus a little
                # score distance, which breaks near-ties of residue toward a smooth start).
                cost = np.abs(sr[k, j][:, None] - ref[None, :]) / scale
                rows, cols = _assign(cost)
                s0[k, c, j, cols] = ss[k, j, rows]
    pair_floor = unit * np.sqrt((ans[:n_grid] ** 2).sum(axis=1) + T * np.tile(f0, d) ** 2)
    if H > 1:
        # Each pair's scores alone, with the source's residues fixed, from its own heads
        # (assigned by residue) and every transposition; pairs still missing their answers
        # then from one head moved across the window (a merged or far-off pole).
        # Staged (the cost is in the starts): most pairs are in the right basin from their
        # own heads; only those missing by more than _BASIN relative get the other starts.
        Yr = np.repeat(Y, n_src, axis=0).reshape(-1, T)
        rr = np.repeat(r0.reshape(d * n_src, 1, H), ncols, axis=1).reshape(-1, H)
        flat = s0.reshape(-1, H)
        flat, miss = fit_scores(lt, Yr, rr, flat[:, None, :])
        target = _BASIN * np.maximum(np.linalg.norm(Yr, axis=1), 1e-300)
        for make in (transposition_starts, lambda x: moved_starts(x, _score_grid(lt))):
            worse = np.flatnonzero(~(miss <= target))
            if not len(worse):
                break
            starts = make(flat[worse])
            # Many problems (d = 32, H = 8: 3072 x 136 starts, 170 s) go on from their best
            # 4 starts after 5 steps; the small boxes' fits are left as they were measured.
            big = starts.shape[0] * starts.shape[1] > _PRUNE_ABOVE
            got, got_miss = fit_scores(
                lt, Yr[worse], rr[worse], starts, prune=(5, 4) if big else None
            )
            keep = got_miss < miss[worse]
            flat[worse[keep]], miss[worse[keep]] = got[keep], got_miss[keep]
        s0 = flat.reshape(d, n_src, ncols, H)
    fit = fit_groups(
        lt,
        np.repeat(Y, n_src, axis=0),
        r0.reshape(d * n_src, H),
        s0.reshape(d * n_src, ncols, H),
        floor=np.repeat(floor, n_src),
    )
    fit = polish_groups(lt, np.repeat(Y, n_src, axis=0), fit.r, fit.s)
    wide = Mt is not None and Mt.shape[0] > Mt.shape[1]
    if wide:
        # Redundant columns: every source's free fit starts a fit in (r, w); the best is
        # kept (a group still off its floor goes through the free repairs below).
        r_lin, s_lin, res_lin = _linear_stage(
            lt, np.repeat(Y, n_src, axis=0), Mt, fit.r, fit.s, np.repeat(floor, n_src)
        )
        fit = GroupFit(r=r_lin, s=s_lin, residual=res_lin)
    res = fit.residual.reshape(d, n_src)
    best = res.argmin(axis=1)
    r = fit.r.reshape(d, n_src, H)[np.arange(d), best]
    s = fit.s.reshape(d, n_src, ncols, H)[np.arange(d), best]
    res_best = res[np.arange(d), best]
    # Repairs cost ~10 s a group at d = 16, H = 8; when more groups than _repair_limit(d)
    # miss after the pooled fits, the decoding is refused at once (measured at d = 16, H = 8:
    # 10 of 16 groups at 1e4 x - 1e10 x the floor, where even fits started at the truth
    # estimate errors up to 2e-6: the design's conditioning, not the starts).
    n_bad = int(np.sum(~(res_best <= _CONVERGED * floor)))
    rounds = _REPAIRS if n_bad <= _repair_limit(full_d) else 0
    if wide:
        # The repairs below work on the free fit (off the plane): the groups they change
        # are fitted on the plane again afterwards, from the repaired scores.
        on_plane = (r.copy(), s.copy(), res_best.copy())
    for _ in range(rounds):
        # A group whose pooled fit misses its answers has a pair in a local minimum (two
        # heads' scores swapped, or merged poles), which also biases the shared residues.
        # Leave each pair out in turn (the best of these fits gives unbiased residues),
        # refit the pairs that then miss from many starts, then the whole group again.
        bad_groups = [k for k in range(d) if not res_best[k] <= _CONVERGED * floor[k]]
        if not bad_groups or H == 1:
            break
        changed = False
        for k in bad_groups:
            rk, sk = r[k].copy(), s[k].copy()
            if ncols >= 3:
                keep = np.array([[i for i in range(ncols) if i != j] for j in range(ncols)])
                loo = fit_groups(lt, Y[k][keep], np.repeat(rk[None], ncols, 0), sk[keep])
                loo = polish_groups(lt, Y[k][keep], loo.r, loo.s)
                jbest = int(loo.residual.argmin())
                rk = loo.r[jbest]
                sk[keep[jbest]] = loo.s[jbest]
            miss = np.linalg.norm(group_model(lt, rk[None], sk[None])[0] - Y[k], axis=-1)
            pf = pair_floor[k * ncols : (k + 1) * ncols]
            jj = np.flatnonzero(~(miss <= _CONVERGED * pf))
            if len(jj):
                rng = np.random.default_rng([ids[k], H, 12])
                starts = np.concatenate(
                    [
                        transposition_starts(sk[jj]),
                        moved_starts(sk[jj], _score_grid(lt)),
                        rng.uniform(-6.0, 6.0, (len(jj), _RANDOM_STARTS, H)),
                    ],
                    axis=1,
                )
                sk[jj], _ = fit_scores(
                    lt,
                    Y[k, jj],
                    np.repeat(rk[None], len(jj), 0),
                    starts,
                    steps=_REPAIR_STEPS,
                    prune=_REPAIR_PRUNE,
                )
            again = fit_groups(lt, Y[k][None], rk[None], sk[None], floor=floor[k : k + 1])
            again = polish_groups(lt, Y[k][None], again.r, again.s)
            if again.residual[0] < res_best[k]:
                r[k], s[k], res_best[k] = again.r[0], again.s[0], again.residual[0]
                changed = True
        if not changed:
            break
    for k in range(d if rounds else 0):
        for _ in range(_JOINT_ROUNDS):
            if res_best[k] <= _CONVERGED * floor[k] or H == 1:
                break
            joint = _joint_restarts(lt, Y[k], r[k], s[k], pair_floor[k * ncols : (k + 1) * ncols])
            if not joint.residual[0] < res_best[k]:
                break
            r[k], s[k], res_best[k] = joint.r[0], joint.s[0], joint.residual[0]
    if wide:
        r_rep, s_rep = r, s  # the repaired free fits
        moved = np.flatnonzero(res_best < on_plane[2])
        r, s, res_best = on_plane
        if len(moved):
            # Measured (random d = 8, H = 6, benchmark seeds 4 and 12): one u-group left at
            # 1e9 x its floor by the fit on the plane, which the free repairs' starts reach.
            got = _linear_stage(lt, Y[moved], Mt, r_rep[moved], s_rep[moved], floor[moved])
            better = got[2] < res_best[moved]
            i = moved[better]
            r[i], s[i], res_best[i] = got[0][better], got[1][better], got[2][better]
    return r, s, res_best, floor


def _linear_stage(
    lt: np.ndarray,
    Y: np.ndarray,
    Mt: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    floor: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The redundant design's fit in (r, w), ``s = Mt w`` (:func:`~.float_fit.fit_linear_groups`),
    started from the free fits' scores with the pairs off the plane left out
    (:func:`~.float_fit.linear_start`). A group still over ``_CONVERGED`` x its floor is
    started again from its free scores' consensus planes (:func:`~.float_fit.consensus_start`),
    then, up to ``_LINEAR_ROUNDS`` times, from its pairs' scores refitted alone
    with the linear fit's residues (from the plane's scores, every transposition and one
    head moved across the window): the plane then predicts a wrong-basin pair's scores
    far better than its own free fit did. Returns r, s = Mt w and the residuals."""
    ncols, H = s.shape[1:]
    fit = fit_linear_groups(lt, Y, Mt, r, linear_start(Mt, s, score_weights(lt, r, s)), floor=floor)
    r_free, s_free = r, s
    r, s, res = fit.r, fit.s, fit.residual
    bad = np.flatnonzero(~(res <= _CONVERGED * floor))
    if len(bad) and H > 1:
        # A group off its floor starts again from its free scores' consensus planes: with
        # few redundant pairs the greedy start bends toward a wrong-basin pair (measured,
        # float_fit.consensus_start). Seeded by the sizes alone: a group's fit does not
        # depend on the batch it is fitted in (_refit_groups).
        rng = np.random.default_rng([ncols, Mt.shape[1], H, _CONSENSUS_SEED])
        weight = score_weights(lt, r_free[bad], s_free[bad])
        start = consensus_start(Mt, s_free[bad], weight, rng)
        again = fit_linear_groups(lt, Y[bad], Mt, r_free[bad], start, floor=floor[bad])
        better = again.residual < res[bad]
        i = bad[better]
        r[i], s[i], res[i] = again.r[better], again.s[better], again.residual[better]
    for _ in range(_LINEAR_ROUNDS):
        bad = np.flatnonzero(~(res <= _CONVERGED * floor))
        if not len(bad) or H == 1:
            break
        # Each pair of the bad groups refitted alone with the group's residues.
        Yb = Y[bad].reshape(-1, Y.shape[-1])
        rb = np.repeat(r[bad], ncols, axis=0)
        sb = s[bad].reshape(-1, H)
        starts = np.concatenate(
            [sb[:, None, :], transposition_starts(sb), moved_starts(sb, _score_grid(lt))], axis=1
        )
        got, _ = fit_scores(lt, Yb, rb, starts, prune=_REPAIR_PRUNE)
        s_free = got.reshape(len(bad), ncols, H)
        start = linear_start(Mt, s_free, score_weights(lt, r[bad], s_free))
        again = fit_linear_groups(lt, Y[bad], Mt, r[bad], start, floor=floor[bad])
        better = again.residual < res[bad]
        if not better.any():
            break
        i = bad[better]
        r[i], s[i], res[i] = again.r[better], again.s[better], again.residual[better]
    return r, s, res


def _refit_groups(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    unit: float,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    groups: Sequence[int],
    Mt: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``fits`` (from :func:`_group_fits`) with the u-groups ``groups`` fitted again from
    ``ans``: a conditioning round changes only the answers of the groups it asked again, and
    each group's fit depends only on its own answers (the others keep theirs, at no cost)."""
    d, ncols = len(fits[0]), len(f0)
    rows = np.concatenate([ans[k * ncols : (k + 1) * ncols] for k in groups])
    got = _group_fits(f0, rows, t, H, len(groups), unit, ids=groups, full_d=d, Mt=Mt)
    out = tuple(x.copy() for x in fits)
    for x, y in zip(out, got, strict=True):
        x[list(groups)] = y
    return out  # type: ignore[return-value]


# Seeds the low-rank restarts' random tuples (rank > 2), with the group and the sizes.
_SUBSPACE_SEED = 0x6C6F77


def _stalled(res: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """The u-groups :func:`_decode_pooled` refuses: a fit over ``_GROUP_FIT`` x its rounding
    floor, or over ``_CONVERGED`` x the groups' median level (a local minimum)."""
    level = float(np.median(res / floor)) if len(res) > 1 else 1.0
    return ~((res <= _GROUP_FIT * floor) & (res <= _CONVERGED * max(level, 1.0) * floor))


def _low_rank_restarts(
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    Mt: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[int], int]:
    """``fits`` with the stalled u-groups (:func:`_stalled`) fitted again from starts in the
    heads' plane subspaces, where the converged groups' planes show the heads have a low rank
    (:mod:`.float_rescue`; redundant design only: a square design's plane is every pair's).
    No query: the stalled groups' own answers, started elsewhere. A group's new fit is kept
    if it is better, and it counts as restarted once it is no longer stalled. Returns the
    fits, the restarted groups and the rank found (0: none)."""
    r, s, res, floor = fits
    ncols = len(f0)
    stalled = _stalled(res, floor)
    if H < 2 or Mt.shape[0] <= Mt.shape[1] or not stalled.any():
        return fits, [], 0
    good = np.flatnonzero(~stalled)
    planes = np.linalg.lstsq(Mt, np.moveaxis(s[good], 0, 1).reshape(ncols, -1), rcond=None)[0]
    found = head_subspaces(planes.reshape(Mt.shape[1], len(good), H).transpose(1, 0, 2))
    if found is None:
        return fits, [], 0
    r, s, res = r.copy(), s.copy(), res.copy()
    lt = np.log(t)
    t0 = np.concatenate([[0.0], t])
    level = float(np.median(res / floor))
    restarted = []
    for k in np.flatnonzero(stalled):
        rows = ans[k * ncols : (k + 1) * ncols]
        Y = rows - f0[:, None]
        # The group's single-pair scores: each pair's poles alone (as _group_fits' starts).
        cand = np.array(
            [
                [x[0] for x in _float_poles(t0, np.concatenate([[f0[j]], rows[j]]), H)]
                for j in range(ncols)
            ]
        )
        rng = np.random.default_rng([int(k), H, ncols, _SUBSPACE_SEED])
        for r0, w0 in subspace_starts(lt, Y, Mt, cand, found, rng):
            # One batch: the consensus start, or one head's best grid points (float_rescue).
            n = len(r0)
            fit = fit_linear_groups(
                lt, np.repeat(Y[None], n, 0), Mt, r0, w0, floor=np.repeat(floor[k], n)
            )
            i = int(np.argmin(fit.residual))
            if fit.residual[i] < res[k]:
                r[k], s[k], res[k] = fit.r[i], fit.s[i], fit.residual[i]
            if res[k] <= min(_GROUP_FIT, _CONVERGED * max(level, 1.0)) * floor[k]:
                restarted.append(int(k))
                break
    return (r, s, res, floor), restarted, found.rank


def _repair_limit(d: int) -> int:
    """How many u-groups missing after the pooled fits are repaired (more: refused at once).

    Measured at d = 8, H = 5-7: up to 4 of 8 groups miss after the pooled fits and all are
    repaired; at d = 16, H = 8, 14 of 16 (refused in 24 s instead of 2.5-6 min).

    >>> _repair_limit(8), _repair_limit(32)
    (6, 24)
    """
    return max(3, (3 * d) // 4)


def _joint_restarts(
    lt: np.ndarray, Y: np.ndarray, r: np.ndarray, s: np.ndarray, pair_floor: np.ndarray
) -> GroupFit:
    """One u-group refitted jointly (residues and every score) from restarts of its worst pair.

    The scores-only repairs of :func:`_group_fits` hold the residues fixed, and a pair in a
    local minimum biases them (measured: 3.6e-9 at d = 8, H = 5), enough that a crowded
    pair (four scores within 0.9) cannot reach its basin with them fixed. Here the worst
    pair (largest miss over its rounding floor) starts from every transposition, every
    one-head move over ``_score_grid(lt)`` and every one-head shift by ``_LOCAL_SHIFTS`` while the other pairs keep their fit, and the whole
    group is refitted from each start (batched); returns the best (a GroupFit of one group).
    """
    miss = np.linalg.norm(group_model(lt, r[None], s[None])[0] - Y, axis=-1)
    j = int(np.argmax(miss / np.maximum(pair_floor, 1e-300)))
    H = s.shape[-1]
    # Small shifts of one head too: two close scores with a tiny residue between them sit in
    # a local minimum 1e-2 from the truth (d = 8, H = 4, eval seed 5), which neither a
    # transposition nor a move to the grid reaches.
    shifted = s[j][None, None, :] + np.eye(H)[:, None, :] * _LOCAL_SHIFTS[None, :, None]
    starts = np.concatenate(
        [
            transposition_starts(s[j][None])[0],
            moved_starts(s[j][None], _score_grid(lt))[0],
            shifted.reshape(-1, H),
        ]
    )
    s0 = np.repeat(s[None], len(starts), axis=0)
    s0[:, j] = starts
    n = len(starts)
    # Every start to convergence: pruning to the best 6 after 30 steps loses the crowded
    # pairs' basins (measured: d = 8, H = 5, eval seed 0 refused again).
    fit = fit_groups(lt, np.repeat(Y[None], n, 0), np.repeat(r[None], n, 0), s0)
    fit = polish_groups(lt, np.repeat(Y[None], n, 0), fit.r, fit.s)
    i = int(np.argmin(fit.residual))
    return GroupFit(r=fit.r[i : i + 1], s=fit.s[i : i + 1], residual=fit.residual[i : i + 1])


def _decode_pooled(
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    H: int,
    affine: bool,
    arith: Arithmetic,
    ask_ties: Any,
    fits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> _Decoded:
    """Decode the float answers by pooled u-group fits and predicted links.

    ``fits``: the u-group fits of step 2 (:func:`_group_fits`: r, s, residuals, floors) if
    already computed (a conditioning round refits only the groups it asked again); they are
    not changed here.

    1. Each grid pair alone (:func:`_float_poles`): starting points only.
    2. Per u-group k, the pairs ``(u_k, b_j)`` fitted jointly with shared residues
       (:func:`~.float_fit.fit_groups`), started from each of its ``_SOURCES``
       best-conditioned pairs' residues (the widest score gaps), the best kept; a group
       above ``_CONVERGED`` x its rounding floor is repaired (leave-one-out residues,
       scores-only restarts of its missing pairs, then joint restarts of its worst pair),
       all in :func:`_group_fits`. With redundant columns (:func:`extra_columns`) each
       source's fit is the start of the fit in (r, w), ``s = M^T w``
       (:func:`_linear_stage`), a group the repairs change is fitted on the plane again
       from them, and step 3's swaps are not needed.
    3. Gates: a group over ``_GROUP_FIT`` x its floor misses its answers; one over
       ``_CONVERGED`` x the groups' median level is a local minimum (the first-order
       estimate does not hold there); both are refused. Pairs with two close scores are
       refitted swapped (:func:`_swap_alternatives`): a second solution that fits as well
       is decided by a tie link (:func:`_resolve_twins`), or enters the error estimate with
       its distance, and is named if the estimate fails.
    4. Group k's heads ordered against group 1 by the halved link ``((u_1 + u_k)/2, b_1)``:
       every order predicts its answers outright (:func:`~.float_fit.link_orders`).
    5. ``[W_h | c_h] = U^-1 S_h M^-1``, ``v_h = U^-1 r_h``; the error per group is the
       larger of the first-order ``|dY| / sigma_min`` and a second solution's distance,
       carried through ``|U^-1|`` and ``|M^-1|``.
    """
    d, ncols, T = U.shape[0], B.shape[0], len(t)
    lt = np.log(t)
    n_grid = d * ncols
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    if fits is None:
        fits = _group_fits(f0, ans, t, H, d, unit)
    # Copies: the steps below reorder and replace rows of r and s in place.
    r, s, res_best, floor = (x.copy() for x in fits)
    Y = (ans[:n_grid] - np.tile(f0, d)[:, None]).reshape(d, ncols, T)
    gap = closest_gap(s)
    bad = [k for k in range(d) if not res_best[k] <= _GROUP_FIT * floor[k]]
    if bad:
        k = bad[0]
        return _Decoded(
            [],
            0.0,
            [],
            gap,
            0.0,
            None,
            f"the pooled fit of the u-group u_{k + 1} ({ncols} pairs, {H} heads) misses its "
            f"answers by {res_best[k]:.2e}, over {_GROUP_FIT:g} x its rounding floor "
            f"{floor[k]:.2e} ({len(bad)} of {d} groups): not {H} softmax heads, or too "
            "ill-conditioned",
            tuple(bad),
        )
    M = float_probe_matrix(B, affine)
    wide = M.shape[1] > M.shape[0]
    # (After the refusal above: the swaps cost a group fit each, 20 s at d = 32, H = 8.)
    # With redundant columns a pair's two close scores are fixed by the others through
    # s = M^T w: swapping them leaves the plane, so there is no second solution to look for;
    # what is left of their closeness is in the linear fit's sigma_min (the estimate).
    twins: list[tuple[int, int, int, int, float, float]] = []
    if not wide:
        r, s, res_best, _, twins, alts = _swap_alternatives(lt, Y, r, s, res_best, floor)
        twins = _resolve_twins(twins, alts, r, s, res_best, lt, f0, unit, ask_ties)
    spread = np.zeros(d)
    for tw in twins:
        spread[tw[0]] = max(spread[tw[0]], tw[5])
    gap = closest_gap(s)
    # The first-order estimate holds at a minimum whose residual is the answers' noise, not
    # at a local minimum: a group far above the others' level (each over its own floor; the
    # median adapts to a box noisier than its unit roundoff) is refused, not estimated.
    # Measured: a local minimum at 160 x the floor (the others 1-2 x) with score errors 1e-2
    # and a first-order estimate that passed the gate (caught only by the fresh queries).
    level = float(np.median(res_best / floor)) if d > 1 else 1.0
    stuck = [k for k in range(d) if not res_best[k] <= _CONVERGED * max(level, 1.0) * floor[k]]
    if stuck:
        k = stuck[0]
        return _Decoded(
            [],
            0.0,
            [],
            gap,
            0.0,
            None,
            f"the pooled fit of the u-group u_{k + 1} ({ncols} pairs, {H} heads) stops at "
            f"{res_best[k] / floor[k]:.3g} x its rounding floor, over {_CONVERGED:g} x the "
            f"groups' median {level:.3g} x ({len(stuck)} of {d} groups): a local minimum of "
            "the fit (the box is not shown out of class); rerun with another seed",
            tuple(stuck),
        )
    ambiguous: list[str] = []
    noise = np.sqrt(res_best**2 + floor**2)  # each group's |dY|: residual and rounding
    # Heads with (nearly) equal residues at u_k (e.g. equal v) are interchangeable in the
    # group's fit pair by pair: one F(1) at (u_k, (b_1 + b_j)/2) per such pair j >= 1 (a
    # tie link, as in exact mode) decides which of pair j's scores goes with which of b_1's.
    # With redundant columns no tie link is needed: each head's scores lie on the plane
    # s = M^T w, and a pair whose two heads are swapped leaves it (with the swapped pairs S
    # and the rest S', w'_a meets M_S^T w_a and M_S'^T w_b: J > p equations in p unknowns,
    # inconsistent unless w_a = w_b), so the fit's head order is the same in every pair.
    ties: list[tuple[int, int, list[tuple[int, ...]]]] = []
    for k in range(0 if wide else d):
        scale = max(float(np.abs(r[k]).max()), 1e-300)
        close = [
            (a, b)
            for a, b in itertools.combinations(range(H), 2)
            if abs(r[k, a] - r[k, b]) <= _TIE_RESIDUE * scale
        ]
        if not close:
            continue
        groups = _clusters(H, close)
        orders = [
            p
            for p in itertools.permutations(range(H))
            if all(groups[p[h]] == groups[h] for h in range(H))
        ]
        ties += [(k, j, orders) for j in range(1, ncols)]
    if ties:
        measured = ask_ties([(k, j) for k, j, _ in ties])
        for (k, j, orders), y in zip(ties, measured, strict=True):
            f_mid = (f0[0] + f0[j]) / 2
            misses = {
                p: abs(f_mid + float(r[k] @ _sigmoid((s[k, 0] + s[k, j][list(p)]) / 2)) - y)
                for p in orders
            }
            ok = _ranked(misses)
            if len(ok) != 1:
                ambiguous.append(
                    f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2) is consistent with "
                    f"{len(ok)} head orders in {_float_name(arith)}"
                )
            s[k, j] = s[k, j][list(ok[0])]
    for k in range(1, d):
        y = ans[n_grid + k - 1] - f0[0]
        orders, miss = link_orders(lt, y, r[0], s[0, 0], r[k], s[k, 0])
        link_floor = unit * math.sqrt(
            float(ans[n_grid + k - 1] @ ans[n_grid + k - 1]) + T * f0[0] ** 2
        )
        # The miss the true order may have: groups 1 and k's noise carried to the link, and
        # the link's own rounding (scaled like the groups' residuals over their floors).
        predicted = link_noise(lt, r, s, k, orders[0], noise) + max(level, 1.0) * link_floor
        if len(miss) > 1 and not link_decided(miss, predicted):
            a, b = heads_named(tuple(orders[0]), tuple(orders[1]))
            ambiguous.append(
                f"the link ((u_1 + u_{k + 1})/2, b_1) cannot tell heads {a + 1} and {b + 1} "
                f"(numbered at u_1) apart in {_float_name(arith)}: its best two head orders "
                f"miss it by {miss[0]:.1e} and {miss[1]:.1e}, within {_LINK_EXCLUDE:g} x the "
                f"noise (first-order bound from its u-groups {predicted:.1e})"
            )
        p = orders[0]
        r[k], s[k] = r[k][p], s[k][:, p]
    Uinv = np.linalg.inv(U)
    Minv = np.linalg.pinv(M) if wide else np.linalg.inv(M)
    heads: list[tuple[np.ndarray, ...]] = []
    for h in range(H):
        Wc = Uinv @ s[:, :, h] @ Minv
        head: tuple[np.ndarray, ...] = (Wc[:, :d], Uinv @ r[:, h])
        if affine:
            head = (*head, Wc[:, d])
        heads.append(head)
    beta = float(f0[0] - B[0] @ sum(hd[1] for hd in heads)) if affine else 0.0
    sig = _sigma_min(lt, M, r, s)
    # A second solution that fits as well is an error the first-order figure cannot see.
    estimate = _propagated_error(
        res_best, floor, lt, r, s, spread, U, B, f0, heads, beta, unit, affine
    )
    if estimate > getattr(arith, "parameter_rtol", arith.rtol):
        ambiguous += [
            f"the pair (u_{k + 1}, b_{j + 1}) cannot tell heads {a + 1} and {b + 1} (numbered "
            f"at u_{k + 1}) apart in {_float_name(arith)}: their scores differ by {g:.1e}, and "
            f"with the two swapped the u-group's fit meets its answers as well (the scores "
            f"move by {dist:.1e})"
            for k, j, a, b, g, dist in sorted(twins, key=lambda x: -x[5])
        ]
    return _Decoded(heads, beta, ambiguous, gap, float(sig.min()), estimate)


def _swap_alternatives(
    lt: np.ndarray,
    Y: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    res: np.ndarray,
    floor: np.ndarray,
) -> tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    list[tuple[int, int, int, int, float, float]],
    list[GroupFit],
]:
    """Second solutions of the u-group fits from swapping two close scores of one pair.

    Two heads with scores ``m +- delta/2`` in one pair and residues fixed by the other pairs:
    the swapped pair of scores can be moved so that ``sum_h r_h (s_h - m)^n`` matches for
    n = 1, 2, so the swapped solution misses the answers only at third order, ~ delta^3:
    at delta ~ 1e-4 that is the float64 floor, and both solutions have the same Jacobian
    conditioning (the first-order estimate cannot see the other one). Measured at d = 8,
    H = 6, seed 1: scores 4.8e-5 apart, the swapped fit 1.4 x the floor, the true one 1.6 x,
    scores 6.7e-5 apart. So every pair with two scores within ``_NEAR_GAP`` is refitted
    (the whole group, batched) from the swap: one that fits better by ``_TWIN`` x replaces
    the fit; one within ``_TWIN`` x of the fit's residual (or of the floor) is a second
    solution, and its distance (largest residue or score change) bounds the group's error
    from below.

    Returns r, s, the residuals, the per-group distance (d,), the twins
    ``(k, j, a, b, gap, distance)`` and their second solutions (one group each).
    """
    d, J, H = s.shape
    spread = np.zeros(d)
    twins: list[tuple[int, int, int, int, float, float]] = []
    alts: list[GroupFit] = []
    if H < 2:
        return r, s, res, spread, twins, alts
    cand = [
        (k, j, a, b)
        for k in range(d)
        for j in range(J)
        for a, b in itertools.combinations(range(H), 2)
        if abs(s[k, j, a] - s[k, j, b]) <= _NEAR_GAP
    ]
    if not cand:
        return r, s, res, spread, twins, alts
    idx = np.array([c[0] for c in cand])
    s0 = s[idx].copy()
    for i, (_, j, a, b) in enumerate(cand):
        s0[i, j, [a, b]] = s0[i, j, [b, a]]
    alt = fit_groups(lt, Y[idx], r[idx], s0, floor=floor[idx])
    alt = polish_groups(lt, Y[idx], alt.r, alt.s)
    r, s, res = r.copy(), s.copy(), res.copy()
    first_r, first_s = r.copy(), s.copy()
    for i, (k, j, a, b) in enumerate(cand):
        dist = max(
            float(np.abs(alt.r[i] - first_r[k]).max()), float(np.abs(alt.s[i] - first_s[k]).max())
        )
        if alt.residual[i] * _TWIN < res[k]:
            r[k], s[k], res[k] = alt.r[i], alt.s[i], alt.residual[i]
        elif alt.residual[i] <= _TWIN * max(res[k], floor[k]):
            spread[k] = max(spread[k], dist)
            twins.append((k, j, a, b, float(abs(first_s[k, j, a] - first_s[k, j, b])), dist))
            alts.append(GroupFit(alt.r[i], alt.s[i], alt.residual[i : i + 1]))
    return r, s, res, spread, twins, alts


def _resolve_twins(
    twins: list[tuple[int, int, int, int, float, float]],
    alts: list[GroupFit],
    r: np.ndarray,
    s: np.ndarray,
    res: np.ndarray,
    lt: np.ndarray,
    f0: np.ndarray,
    unit: float,
    ask_ties: Any,
) -> list[tuple[int, int, int, int, float, float]]:
    """Decide second solutions by tie links: returns the twins still undecided.

    The tie link ``(u_k, (b_1 + b_j)/2)`` at t = 1 (the query exact mode asks for tied
    residues) sees the average of pairs 1 and j's scores, so a swap in pair j moves its
    answer at first order (the swap's misfit on the grid is third order): each candidate
    predicts it outright and the one that misses by ``_MATCH_MARGIN`` x less wins (the
    second solution then replaces the group's fit, in r, s, res). Only twins farther from
    the fit than ``_TWIN_SIGNIFICANT`` x its first-order error ask (the others are the same
    solution), at most one link per twin and at most ``len(f0)`` links, in the phase
    "tie links": a box without such twins asks nothing more. For j = 1 the link is
    ``(b_1 + b_2)/2``.
    """
    ncols = len(f0)
    if not twins or ncols < 2:
        return twins
    sig = sigma_min_groups(lt, r, s)
    floor_g = np.maximum(res, 1e-300)
    with np.errstate(divide="ignore"):
        first = np.where(sig > 0, floor_g / sig, math.inf)
    ask = [i for i, tw in enumerate(twins) if tw[5] > _TWIN_SIGNIFICANT * first[tw[0]]]
    if not ask or len(ask) > ncols:
        return twins
    kj = [(twins[i][0], max(twins[i][1], 1)) for i in ask]
    measured = ask_ties(kj)
    undecided = [tw for i, tw in enumerate(twins) if i not in ask]
    replaced: set[int] = set()
    for i, (k, jj), y in zip(ask, kj, measured, strict=True):
        base = (f0[0] + f0[jj]) / 2
        alt = alts[i]
        pc = base + float(r[k] @ _sigmoid((s[k, 0] + s[k, jj]) / 2))
        pa = base + float(alt.r @ _sigmoid((alt.s[0] + alt.s[jj]) / 2))
        mc, ma = abs(pc - y), abs(pa - y)
        link_floor = _LINK_FLOOR * unit * math.sqrt(y * y + base * base)
        if k in replaced or not max(mc, ma) > _MATCH_MARGIN * max(min(mc, ma), link_floor):
            undecided.append(twins[i])
        elif ma < mc:
            r[k], s[k], res[k] = alt.r, alt.s, float(alt.residual[0])
            replaced.add(k)
    return undecided


def _assign(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A greedy assignment (cheapest entry first): rows, cols. Only a starting point.

    >>> [x.tolist() for x in _assign(np.array([[0.0, 1.0], [0.1, 2.0]]))]
    [[0, 1], [0, 1]]
    """
    n = cost.shape[0]
    rows, cols = np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp)
    used_r, used_c = np.zeros(n, bool), np.zeros(n, bool)
    for flat in np.argsort(cost, axis=None, kind="stable"):
        a, b = divmod(int(flat), n)
        if not used_r[a] and not used_c[b]:
            used_r[a] = used_c[b] = True
            rows[used_r.sum() - 1], cols[used_r.sum() - 1] = a, b
    order = np.argsort(rows)
    return rows[order], cols[order]


def _clusters(H: int, close: list[tuple[int, int]]) -> list[int]:
    """Connected components of the relation ``close`` on range(H): a label per head.

    >>> _clusters(4, [(0, 2), (2, 3)])
    [0, 1, 0, 0]
    """
    label = list(range(H))
    for a, b in close:
        la, lb = label[a], label[b]
        label = [la if x == lb else x for x in label]
    return label


def _float_name(arith: Arithmetic) -> str:
    return box_precision(arith)


def learning_sequences(
    U: np.ndarray,
    B: np.ndarray,
    H: int,
    ties: Sequence[dict[str, Any]] = (),
    *,
    unit: float = 2.0**-53,
) -> Iterator[np.ndarray]:
    """The design's learning queries, one at a time: the F(0) queries [b_j], then per pair
    (u, b_j) the queries of :func:`float_ratios`, then the tie links ``ties`` (their ``k``
    and ``j``). Built as they are read, never all at once (nn.MultiheadAttention E = 64,
    H = 4: 3.9 GB of float64 together).

    >>> [X.shape[0] for X in learning_sequences(np.eye(1), np.eye(1), 1, [{"k": 0, "j": 0}])]
    [1, 65, 65, 2]
    """
    ratios = float_ratios(H, unit=unit)
    yield from (B[j][None, :] for j in range(len(B)))
    for u, j in design_pairs(U, len(B)):
        yield from (float_sequence(u, B[j], k, m) for k, m in ratios)
    yield from (float_sequence(U[t["k"]], (B[0] + B[t["j"]]) / 2, 1) for t in ties)


def pilot_pairs(d: int, ncols: int) -> list[int]:
    """The pilot's pairs, as indices into :func:`design_pairs`: ``(u_k, b_k)``, one per
    u-group, so that its scores sample d different u and b (one u-group's scores share
    ``u_1^T c_h``, and misjudge an affine box's spread by up to 2x).

    >>> pilot_pairs(3, 4)
    [0, 5, 10]
    """
    return [k * ncols + k for k in range(d)]


def _pilot(
    oracle: Oracle,
    f0: np.ndarray,
    ratios: Sequence[tuple[int, int]],
    H: int,
    seed: int,
    affine: bool,
) -> tuple[float, np.ndarray, list[dict[str, Any]]]:
    """The pilot (phase ``"pilot"``, :mod:`.float_pilot`): the :func:`pilot_pairs`' queries
    at the design scale; while their single-pair scores ask for another u scale (and rounds
    are left), the same queries again at that scale. Returns the kept scale, the kept
    round's answers (``(d, len(ratios))``, those pairs' answers in the design) and the
    discarded rounds (their scale and answers, for the certificate)."""
    d = oracle.d
    t0 = np.array([0.0] + [k / m for k, m in ratios])
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", _DOUBLE_UNIT))
    rounds = pilot_rounds(d, H, affine, unit=unit)
    scale, discarded = 1.0, []
    with oracle.phase("pilot"):
        for i in range(rounds):
            _, B, pairs = float_design(
                d, seed, affine, scale, extra_columns(d, H, affine, unit=unit)
            )
            chosen = [pairs[p] for p in pilot_pairs(d, len(B))]
            got = ask_pairs(oracle, chosen, B, ratios)
            if i == rounds - 1:
                break
            scores = [
                [s for s, _ in _float_poles(t0, np.concatenate([[f0[j]], got[n]]), H)]
                for n, (_, j) in enumerate(chosen)
            ]
            new = next_scale(np.array(scores), scale)
            if new is None:
                break
            discarded.append({"scale": scale, "answers": got.tolist()})
            scale = new
    return scale, got, discarded


def _not_reproduced(
    exc: ModelClassMismatch,
    where: str,
    H: int,
    arith: Arithmetic,
    estimate: float,
    figure: str,
    bias: float = 0.0,
) -> PrecisionExhausted:
    """The refusal after the fitted heads miss an answer of the box (learning or fresh).

    The relative gap is the agreement rule's (:func:`verified_attn.verification.agree`:
    relative to the answer less the bias ``bias``), the rule that failed.

    >>> e = ModelClassMismatch("miss", query=np.zeros((3, 2)), observed=0.02, expected=0.0201)
    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> msg = str(_not_reproduced(e, "a fresh sequence", 2, FloatArithmetic(), 1e-9, "s 1"))
    >>> msg[:60], "(relative gap 5.00e-03 > rtol 1e-06)" in msg
    ('the fitted 2 heads do not reproduce the box on a fresh seque', True)
    """
    query = np.asarray(exc.query) if exc.query is not None else None
    length = f" of length {query.shape[0]}" if query is not None and query.ndim == 2 else ""
    try:
        obs, exp = float(exc.observed), float(exc.expected)
        gap = f"relative gap {agree(arith, obs, exp, bias=bias)[1]:.2e}"
    except (TypeError, ValueError):
        gap = "a gap"
    return PrecisionExhausted(
        f"the fitted {H} heads do not reproduce the box on {where}{length} ({gap} > rtol "
        f"{arith.rtol:g}): the pooled fit converged to wrong heads or is too ill-conditioned "
        f"for a {box_precision(arith)} box (first-order parameter error estimate "
        f"{estimate:.2e}, {figure}); the answers do not show the box is outside the class; "
        "rerun with another seed"
    )


def _condition(
    oracle: Oracle,
    U: np.ndarray,
    B: np.ndarray,
    ans: np.ndarray,
    ratios: Sequence[tuple[int, int]],
    k: int,
    partner: int | None = None,
) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
    """One conditioning round (phase ``"conditioning"``) for u-group k: its row u_k scaled
    by ``_CONDITIONING_FACTOR`` or, with ``partner`` j, turned by ``_CONDITIONING_ANGLE``
    toward u_j at the same norm (``cos a u_k + sin a u_j |u_k| / |u_j|``, rescaled to
    |u_k|); its pairs and the halved links through it asked again. Returns the new U, the
    answers with those rows replaced, and the replaced rows."""
    d, ncols = U.shape[0], len(B)
    U = U.copy()
    if partner is None:
        U[k] = U[k] * _CONDITIONING_FACTOR
    else:
        norm = float(np.linalg.norm(U[k]))
        toward = U[partner] * (norm / float(np.linalg.norm(U[partner])))
        turned = math.cos(_CONDITIONING_ANGLE) * U[k] + math.sin(_CONDITIONING_ANGLE) * toward
        U[k] = turned * (norm / float(np.linalg.norm(turned)))
    pairs = design_pairs(U, ncols)
    rows = [k * ncols + j for j in range(ncols)]
    rows += [d * ncols + i - 1 for i in range(1, d) if k in (0, i)]  # the links through u_k
    with oracle.phase("conditioning"):
        got = ask_pairs(oracle, [pairs[i] for i in rows], B, ratios)
    old = ans[rows].tolist()
    ans = ans.copy()
    ans[rows] = got
    return U, ans, old


def conditioning_partners(
    d: int, again: Sequence[int], replaced: Sequence[dict[str, Any]]
) -> list[int | None]:
    """The rows the u-groups ``again`` are turned toward in a conditioning round of the
    redundant design (:func:`_condition`), from the rows never asked again (not in
    ``again``, no earlier round's ``k``), the lowest first: U stays invertible (a turned row
    is its own plus a multiple of a row that stays). A group's partner is one no other group
    of the round and no earlier round of this group has had, while there is one; else any
    row it has not had; else None (the group is scaled instead).

    >>> conditioning_partners(6, [1, 4], []), conditioning_partners(4, [0, 1, 2], [{"k": 3}])
    ([0, 2], [None, None, None])
    >>> conditioning_partners(4, [1], [{"k": 1, "partner": 0}])
    [2]
    """
    asked = set(again) | {int(r["k"]) for r in replaced}
    free = [i for i in range(d) if i not in asked]
    taken: set[int] = set()
    out: list[int | None] = []
    for k in again:
        had = {int(r["partner"]) for r in replaced if r["k"] == k and r.get("partner") is not None}
        fresh = [i for i in free if i not in had and i not in taken]
        other = [i for i in free if i not in had]
        j = fresh[0] if fresh else (other[0] if other else None)
        if j is not None:
            taken.add(j)
        out.append(j)
    return out


def learn_float(
    oracle: Oracle,
    H: int,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
) -> MultiHeadRecovery:
    """The float path of :func:`~.canonical_learner.learn_multi_head` (arguments already
    validated there)."""
    # The box's unit roundoff: its design (coarse or not), the fits' rounding floors.
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", _DOUBLE_UNIT))
    bound = float_query_limit(oracle.d, H, affine=affine, unit=unit)
    oracle.require_remaining(bound, verify, "learn_multi_head")
    ratios = float_ratios(H, unit=unit)
    n_grid, n_extra = 2 * H, redundancy(H)
    t = np.array([k / m for k, m in ratios])
    tie_answers: list[dict[str, Any]] = []
    with oracle.run() as run:
        d = oracle.d
        wide = extra_columns(d, H, affine, unit=unit)
        U, B, _ = float_design(d, seed, affine, extra=wide)
        ncols = len(B)
        with oracle.phase("F(0)"):
            f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
        scale, kept, discarded = _pilot(oracle, f0, ratios, H, seed, affine)
        U, B, pairs = float_design(d, seed, affine, scale, wide)
        Mt = float_probe_matrix(B, affine).T
        piloted = pilot_pairs(d, ncols)
        rest = [p for i, p in enumerate(pairs) if i not in set(piloted)]
        with oracle.phase("F(t)"):
            grid_ans = ask_pairs(oracle, rest, B, ratios[:n_grid])
        extra_ans = np.zeros((len(rest), 0))
        if n_extra:
            with oracle.phase("redundancy"):
                extra_ans = ask_pairs(oracle, rest, B, ratios[n_grid:])
        ans = np.empty((len(pairs), len(ratios)))
        ans[piloted] = kept  # the pilot's kept round: those pairs' answers
        others = [i for i in range(len(pairs)) if i not in set(piloted)]
        ans[others] = np.hstack([grid_ans, extra_ans])

        asked_ties: dict[tuple[int, int], float] = {}

        def ask_ties(kj: list[tuple[int, int]]) -> list[float]:
            # A tie link already asked is not asked again (a decoding after a conditioning
            # round meets the same ties): its row u_k is never replaced (below).
            new = list(dict.fromkeys(x for x in kj if x not in asked_ties))
            if new:
                seqs = [float_sequence(U[k], (B[0] + B[j]) / 2, 1) for k, j in new]
                with oracle.phase("tie links"):
                    measured = [float(y) for y in oracle.query_many(seqs)]
                for (k, j), y in zip(new, measured, strict=True):
                    asked_ties[(k, j)] = y
                    tie_answers.append({"k": k, "j": j, "answer": y})
            return [asked_ties[x] for x in kj]

        fits = _group_fits(f0, ans, t, H, d, unit, Mt=Mt)
        # Stalled groups restarted from the converged groups' low-rank head planes (no
        # query) before any is asked again.
        fits, restarted, rank = _low_rank_restarts(f0, ans, t, H, fits, Mt)
        dec = _decode_pooled(U, B, f0, ans, t, H, affine, oracle.arithmetic, ask_ties, fits)
        replaced: list[dict[str, Any]] = []
        # The adaptive phases' share of the bound (float_query_limit), less the pilot's.
        room = (
            bound
            - base_query_limit(d, H, affine=affine, unit=unit)
            - len(discarded) * d * len(ratios)
        )
        for _ in range(CONDITIONING_ROUNDS):
            if dec.estimate is not None or not dec.bad:
                break
            # Every failing group of this decoding is asked again in one round (each its own
            # record and cost), or none: a group left as it is keeps its fit (it depends on
            # its own answers only), so the decoding would fail again on it. Rows with tie
            # links cannot be asked again (the links were asked at the old u_k).
            again = sorted(set(dec.bad))
            cost = sum(conditioning_cost(d, H, affine, k, unit=unit) for k in again)
            if (
                cost > room
                or len(replaced) + len(again) > CONDITIONING_GROUPS
                or any(k in again for k, _ in asked_ties)
            ):
                break
            room -= cost
            # The redundant design turns each group's row toward one that stays; the square
            # design scales it (measured there: 6/10 learned at d = 8, H = 7, see above).
            partners = conditioning_partners(d, again, replaced) if wide else [None] * len(again)
            for k, j in zip(again, partners, strict=True):
                U, ans, old = _condition(oracle, U, B, ans, ratios, k, j)
                record: dict[str, Any] = {"k": k, "answers": old}
                if j is None:
                    record["factor"] = _CONDITIONING_FACTOR
                else:
                    record.update(factor=1.0, partner=j, angle=_CONDITIONING_ANGLE)
                replaced.append(record)
            fits = _refit_groups(f0, ans, t, H, unit, fits, again, Mt=Mt)
            fits, more, more_rank = _low_rank_restarts(f0, ans, t, H, fits, Mt)
            restarted, rank = restarted + more, max(rank, more_rank)
            dec = _decode_pooled(U, B, f0, ans, t, H, affine, oracle.arithmetic, ask_ties, fits)
        ambiguous = dec.ambiguous
        # The learning answers as rows (u, b, log k, F): F(0) rows carry log k = -inf.
        us = [np.zeros(d)] * ncols + [u for u, _ in pairs for _ in ratios]
        bs = [*B] + [B[j] for _, j in pairs for _ in ratios]
        logk = [-np.inf] * ncols + [math.log(k / m) for _ in pairs for k, m in ratios]
        ys = np.concatenate([f0, ans.ravel()])
        # Predictions are verified at rtol; the parameters are stated at the box's
        # parameter tolerance (rtol unless the box declares a looser one, e.g. float32).
        prtol = float(getattr(oracle.arithmetic, "parameter_rtol", oracle.arithmetic.rtol))
        polish = polish_count(d, H, affine, unit=unit)
        polish_seqs: list[np.ndarray] = []
        polish_ans = np.zeros(0)

        def sequence_polish(
            count: int, start: list[tuple[np.ndarray, ...]], start_beta: float
        ) -> tuple[list[tuple[np.ndarray, ...]], float, float, tuple[float, float], str]:
            # The heads start a fit of every parameter on every answer, the design's and
            # those of ``count`` random sequences, whose Jacobian is far better conditioned
            # than the u-groups' (sequence_fit); the figures are this fit's.
            nonlocal polish_seqs, polish_ans
            polish_seqs = polish_sequences(d, count, seed)
            with oracle.phase("polish"):
                polish_ans = np.array(oracle.query_many(polish_seqs), dtype=np.float64)
            design_seqs, design_ys = _design_answers(U, B, f0, ans, tie_answers, H, unit)
            seq_rows = compress([*design_seqs, *polish_seqs], [*design_ys, *polish_ans])
            fit = fit_sequences(start, start_beta, seq_rows, affine=affine)
            estimate, prediction, sigma_min = polish_figures(
                oracle.arithmetic, fit.heads, fit.beta, affine, seq_rows, seed, lengths
            )
            figure = (
                f"smallest singular value {sigma_min:.2e} of the Jacobian on all "
                f"{len(seq_rows)} answers, {count} of them on random sequences"
            )
            return fit.heads, fit.beta, estimate, prediction, figure

        def decoded_figures() -> tuple[
            list[tuple[np.ndarray, ...]], float, float, tuple[float, float], str, str
        ]:
            # The decoded heads with the figures of the joint polish (small boxes) or of the
            # u-groups; PrecisionExhausted over the parameter tolerance or the rule.
            if joint_polish(d, H, affine, len(ys)):
                # Small boxes: a dense joint polish on every answer (links and F(0) too).
                heads, beta_fit, residuals, sigma_min, sensitivity, rows = _refine(
                    dec.heads, dec.beta, (np.array(us), np.array(bs), np.array(logk), ys), affine
                )
                estimate = _parameter_error_estimate(
                    oracle.arithmetic, heads, beta_fit, residuals, ys, sigma_min, sensitivity, H
                )
                figure = f"smallest singular value {sigma_min:.2e} of the joint Jacobian"
                kind = "joint"
            else:
                heads, beta_fit, estimate = dec.heads, dec.beta, dec.estimate
                figure = f"smallest singular value {dec.sigma_min:.2e} of the u-group Jacobians"
                kind = "u-groups"
                # The same figure from the returned heads and the answers alone (what the
                # certificate checker recomputes): the stated tolerance covers both. (The
                # joint figure is not the u-groups' one: it uses every answer, links and
                # F(0) too, and is the smaller at (d, H) = (2, 3), 1.1e-6 against 1.6e-6.)
                estimate = max(
                    estimate,
                    heads_error_estimate(U, B, f0, ans, t, heads, beta_fit, unit, affine),
                )
            _within_parameter_tolerance(estimate, prtol, H, oracle.arithmetic, figure, dec.gap)
            # The predictions' own first-order bound, on the verification's sequences and
            # more from the same generator (none is asked): the parameter estimate bounds
            # each parameter, a prediction combines them all (the polish's: polish_figures).
            if kind == "joint":
                sequences = fresh_sequences(d, PREDICTION_SEQUENCES, seed=seed, lengths=lengths)
                noise = float(np.sqrt(np.sum(residuals**2) + np.sum((unit * np.abs(ys)) ** 2)))
                bounds = joint_prediction_bound(heads, sequences, affine, rows, noise, len(ys))
                prediction = _prediction_ratio(
                    oracle.arithmetic, heads, beta_fit if affine else 0.0, affine, sequences, bounds
                )
            else:
                prediction = prediction_check(
                    oracle.arithmetic, U, B, f0, ans, t, heads, beta_fit, affine, seed, lengths
                )
            return heads, beta_fit, estimate, prediction, figure, kind

        try:
            if dec.estimate is None:
                raise PrecisionExhausted(dec.failure)
            precision = precision_polish_count(d, H, affine, unit=unit)
            if polish:
                # A coarse (float32) box: always polished (the u-groups' figures are 1e-3).
                heads, beta_fit, estimate, prediction, figure = sequence_polish(
                    polish, dec.heads, dec.beta
                )
                kind = "sequences"
            else:
                try:
                    found = decoded_figures()
                except PrecisionExhausted as exc:
                    found, refusal = None, exc
                if polish_wanted(
                    None if found is None else found[2],
                    precision,
                    run.counts.learning,
                    bound,
                    follow_up_query_bound(d, H),
                ):
                    # The precision polish: the estimate asks for it, the rule allows it.
                    start = (found[0], found[1]) if found else (dec.heads, dec.beta)
                    heads, beta_fit, estimate, prediction, figure = sequence_polish(
                        precision, *start
                    )
                    kind = "sequences"
                elif found is None:
                    raise refusal
                else:
                    heads, beta_fit, estimate, prediction, figure, kind = found
            _within_parameter_tolerance(estimate, prtol, H, oracle.arithmetic, figure, dec.gap)
            heads.sort(key=lambda hd: tuple(hd[0].ravel()))  # the canonical order, by W row-major
            beta = beta_fit if affine else None
            candidate = MultiHeadAttention(
                [tuple(x.tolist() for x in hd) for hd in heads], beta=beta
            )
            try:
                where = "a learning query"
                _check_learning_fit(
                    oracle.arithmetic,
                    candidate,
                    f0,
                    ans,
                    tie_answers,
                    U,
                    B,
                    H,
                    affine,
                    (polish_seqs, polish_ans),
                )
                where = "a fresh sequence"
                checked = (
                    verify_model(
                        oracle,
                        candidate,
                        count=verify,
                        seed=seed,
                        lengths=lengths,
                        bias=beta if affine else 0.0,
                        what="the recovered canonical heads",
                    )
                    if verify
                    else None
                )
            except ModelClassMismatch as exc:
                # One miss shows the fit is wrong, not that the box is outside the class:
                # that needs a residual no H-head fit can remove (too_few_heads_float).
                raise _not_reproduced(
                    exc, where, H, oracle.arithmetic, estimate, figure, beta if affine else 0.0
                ) from exc
        except (ModelClassMismatch, PrecisionExhausted) as exc:
            if not ambiguous:
                raise
            # The fit failed after a matching step that was not clear-cut: that step is
            # the likelier reason, and the refusal names it.
            raise NotIdentifiable(
                f"{ambiguous[0]}"
                + (
                    f" (and {len(ambiguous) - 1} more ambiguous steps)"
                    if len(ambiguous) > 1
                    else ""
                )
                + f"; the fit from the best order then failed: {exc}; rerun with another seed"
            ) from exc
    counts = run.counts
    params: dict[str, Any] = {"heads": heads}
    if affine:
        params["beta"] = beta
    ties = counts.by_phase.get("tie links", 0)
    rtol = oracle.arithmetic.rtol
    extra = counts.by_phase.get("redundancy", 0)
    pilot = counts.by_phase.get("pilot", 0)
    conditioning = counts.by_phase.get("conditioning", 0)
    polished = counts.by_phase.get("polish", 0)
    over = counts.learning - follow_up_query_bound(oracle.d, H)
    why = (
        f"the coarse design's {wide} redundant probe columns"
        if wide and coarse(unit)
        else "the conditioning rounds" + (" and the precision polish" if polished else "")
    )
    past = f", not under it ({over:+d}) with {why}" if over >= 0 else ""
    notes = [
        f"canonical method (float ratio grid): {counts.learning} learning queries ({pilot} "
        f"pilot, {len(discarded)} rescaling rounds of {d} pairs discarded, u scale "
        f"{scale:.4g}; {conditioning} conditioning, {len(replaced)} u-groups asked again"
        + (
            f", {len(restarted)} restarted from the other groups' rank-{rank} head planes"
            if restarted
            else ""
        )
        + "; "
        f"{extra} redundant, {ties} tie links, {polished} polish), <= {bound} (without ties, "
        "rescaling or a precision polish "
        f"{float_query_bound(oracle.d, H, affine=affine, unit=unit)}; the follow-up's "
        "4Hd^2 - 2H + 1 = "
        f"{follow_up_query_bound(oracle.d, H)}{past}); float64 decoding, every learning "
        f"answer reproduced at rtol {rtol:g}",
        f"{H} canonical heads ({box_precision(oracle.arithmetic)} answers; not exact); "
        f"first-order parameter error estimate {estimate:.2e} relative (the worst case of "
        f"one parameter under the answers' noise; <= the parameter "
        f"tolerance {prtol:g} stated for the heads; predictions verified at rtol {rtol:g}, "
        f"and to first order on {PREDICTION_SEQUENCES} sequences of the verification's "
        f"generator ({PREDICTION_SIGMAS:g} standard deviations of the prediction error at most "
        f"{prediction[0]:.3g} x what the rule allows, the worst case {prediction[1]:.3g} x); "
        f"residual norm / {figure}; closest score gap {dec.gap:.2e})",
    ]
    certificate = functools.partial(
        _certificate_data,
        oracle.arithmetic,
        U,
        B,
        {
            "F0": list(f0),
            "F": ans.tolist(),
            "ties": tie_answers,
            "ratios": ratios,
            "pilot": discarded,
            "scale": scale,
            "conditioning": replaced,
            "restarts": {"groups": restarted, "rank": rank},
            "polish": polish_ans.tolist(),
        },
        heads,
        beta,
        H,
        affine,
        checked,
        seed,
        counts,
        bound,
        (prtol, estimate, kind),
        {
            "sequences": PREDICTION_SEQUENCES,
            "seed": seed,
            "lengths": list(lengths),
            "sigmas": PREDICTION_SIGMAS,
            "ratio": prediction[0],
            "worst_case": prediction[1],
        },
    )
    return MultiHeadRecovery.from_run(
        counts,
        theorem=THEOREM,
        method=METHOD,
        parameters=params,
        learned_model=candidate,
        arithmetic="float",
        precision=None,
        exact=False,
        bound=bound,
        parameter_count=parameter_count(oracle.d, H, affine),
        seed=seed,
        rounds=1 + (1 if ties else 0),
        verification=checked,
        notes=notes,
        certificate_data=certificate,
        parameter_rtol=prtol,
        parameter_error_estimate=estimate,
    )


def _prediction_ratio(
    arith: Arithmetic,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    affine: bool,
    sequences: Sequence[np.ndarray],
    bounds: np.ndarray,
) -> tuple[float, float]:
    """The largest ``PREDICTION_SIGMAS`` standard deviations of the prediction error, and the
    largest worst-case bound, over what the agreement rule allows an answer to differ from
    the prediction (:func:`~verified_attn.verification.tolerance`, with the floor of these
    predictions; ``bounds``: per sequence, worst case and standard deviation, from
    :mod:`.prediction_bound`); PrecisionExhausted, naming the sequence, if the first is over
    1. So a result claims of its predictions on sequences it did not ask what it verified on
    those it asked: agreement under the one rule, here to first order in the answers' noise."""
    model = MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in heads], beta=beta if affine else None
    )
    preds = np.array([float(model.evaluate_batch(X[None])[0]) for X in sequences])
    floor = float_floor(preds, beta)
    allowed = np.array([tolerance(arith, y, bias=beta, floor=floor) for y in preds])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = PREDICTION_SIGMAS * bounds[:, 1] / allowed
        worst_case = float(np.max(bounds[:, 0] / allowed))
    worst = int(np.argmax(np.where(np.isnan(ratios), np.inf, ratios)))
    ratio = float(ratios[worst])
    if not ratio <= 1.0:
        raise PrecisionExhausted(
            f"the fitted {len(heads)} heads' predictions are too uncertain for a "
            f"{box_precision(arith)} box: at the sequence of length "
            f"{sequences[worst].shape[0]} (no. {worst + 1} of the {len(sequences)} the "
            f"first-order bound is evaluated on, none asked) {PREDICTION_SIGMAS:g} standard "
            f"deviations of the prediction error under the answers' noise are "
            f"{PREDICTION_SIGMAS * bounds[worst, 1]:.2e}, {ratio:.3g} x what the agreement "
            f"rule at rtol {arith.rtol:g} allows there ({allowed[worst]:.2e}; prediction "
            f"{preds[worst]:.6g}; worst case {bounds[worst, 0]:.2e})"
        )
    return ratio, worst_case


def too_few_heads_float(
    oracle: Oracle, H: int, seed: int, affine: bool
) -> ModelClassMismatch | None:
    """After a float decoding failure: does the box have more than ``H`` heads?

    Asks the first pair's ``F(0..2H + 1)`` again plus one sample (phase ``"diagnosis"``,
    counted) and fits a degree-``H`` rational function to ``F(0..2H)``: with at most ``H``
    heads its value at ``k = 2H + 1`` misses the answer by a few units of the box's
    roundoff; a miss over 2^20 of them says the box has more heads (a float test: the
    residual is reported, not certified).
    None otherwise (the failure had another cause).
    """
    _, B, pairs = float_design(oracle.d, seed, affine)
    u, j = pairs[0]
    k = np.arange(2 * H + 2, dtype=np.float64)
    with oracle.phase("diagnosis"):
        F = np.array(
            oracle.query_many([B[j][None, :]] + [float_sequence(u, B[j], int(i)) for i in k[1:]]),
            dtype=np.float64,
        )
    m = H
    A = np.hstack(
        [
            k[: 2 * m + 1, None] ** np.arange(m + 1),
            -F[: 2 * m + 1, None] * k[: 2 * m + 1, None] ** np.arange(1, m + 1),
        ]
    )
    try:
        sol = np.linalg.solve(A, F[: 2 * m + 1])
    except np.linalg.LinAlgError:
        return None
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    predicted = float(P(k[-1]) / Q(k[-1]))
    residual = float(F[-1]) - predicted
    scale = float(np.max(np.abs(F))) or 1.0
    unit = getattr(oracle.arithmetic, "unit_roundoff", None) or 2.0**-53
    threshold = 2**20 * unit * scale  # a correct fit misses by a few ulps, not a million
    if not abs(residual) > threshold:
        return None
    return ModelClassMismatch(
        f"the box has more than {H} heads (the fit with {H} heads leaves residual "
        f"{residual:.3g} at k = {2 * H + 1}, over 2^20 units of the box's roundoff "
        f"({threshold:.2g}); try heads={H + 1}, or max_heads= an upper bound in exact or "
        "certified mode)"
    )


def _parameter_error_estimate(
    arith: Arithmetic,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    residuals: np.ndarray,
    ys: np.ndarray,
    sigma_min: float,
    sensitivity: float,
    H: int,
) -> float:
    """The fit's first-order parameter error, relative to max(1, largest parameter).

    To first order a change dy of the answers moves the least-squares parameters by
    ``J^+ dy``, parameter i by at most ``|dy| |row i of J^+|`` (attained by dy along that
    row; ``sensitivity`` is the largest row norm, never more than ``1 / sigma_min(J)``,
    which bounds all parameters at once). dy is what separates the answers from an
    exact sum of H heads: the fit's residuals, and at least the box's rounding
    (``unit_roundoff * |y|`` per answer). A returned result's estimate is at most the
    oracle's rtol; otherwise PrecisionExhausted, with the figure. This is what catches a
    near-interpolating fit (about as many answers as parameters) that reproduces every
    answer yet sits far from the heads: its sigma_min is tiny.
    """
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    noise = float(np.sqrt(np.sum(residuals**2) + np.sum((unit * np.abs(ys)) ** 2)))
    size = max(1.0, abs(beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    estimate = math.inf if not sigma_min > 0 else noise * sensitivity / size
    prtol = float(getattr(arith, "parameter_rtol", arith.rtol))
    if not estimate <= _PARAMETER_SAFETY * prtol:
        raise PrecisionExhausted(
            f"the joint fit of {H} heads is too ill-conditioned for a {box_precision(arith)} "
            f"box: first-order parameter error estimate {estimate:.2e} relative > the "
            f"parameter tolerance {prtol:g} "
            f"(residual norm {noise:.2e}, smallest singular value of the Jacobian "
            f"{sigma_min:.2e}); two heads nearly coincide, a residue is tiny, or the box has "
            "too few answers for its parameters"
        )
    return estimate


def joint_polish(d: int, H: int, affine: bool, answers: int) -> bool:
    """Whether the float learner polishes jointly on every answer (small boxes: parameters
    x answers <= _DENSE_POLISH) rather than keeping the u-group fits; the certificate
    checker derives the kind of the stored parameter error estimate from it.

    >>> joint_polish(2, 2, False, 30), joint_polish(8, 4, False, 647)
    (True, False)
    """
    return parameter_count(d, H, affine) * answers <= _DENSE_POLISH


def _propagated_error(
    residual: np.ndarray,
    floor: np.ndarray,
    lt: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    spread: np.ndarray,
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    unit: float,
    affine: bool,
) -> float:
    """The largest first-order error of one head parameter, relative to max(1, largest
    parameter): the worst case, entry by entry, of the answers' noise ``|dY_k|`` (each
    u-group's residual and rounding floor) moving the u-groups' least-squares fits.

    Each answer belongs to one u-group, and a group's fit moves by ``J_k^+ dY_k``; entry
    ``a`` of ``[W_h | c_h]`` is ``sum_k U^-1[a, k] x`` (entry b of ``[W_h | c_h]^T u_k``,
    a linear functional of group k's fit), so it moves by at most
    ``sum_k |U^-1[a, k]| |dY_k| |l_kb^T J_k^+|`` (:func:`~.float_fit.row_sensitivities`),
    and that is attained (each dY_k along its row). ``v_h = U^-1 r_h`` and ``beta = F(0)_1
    - b_1^T sum_h v_h`` likewise (beta also carries F(0)_1's rounding). A second solution's
    distance (``spread``, a score move) enters a group's term when it is the larger. This is
    never more than the operator-norm bound ``|U^-1| |M^-1| (sum_k (|dY_k| /
    sigma_min_k)^2)^(1/2)``, which bounds every parameter at once; it is what one parameter
    can err by, the measure the stated parameter tolerance is held to."""
    H = len(heads)
    M = float_probe_matrix(B, affine)
    wide = M.shape[1] > M.shape[0]
    Minv = np.linalg.pinv(M) if wide else np.linalg.inv(M)  # (J, p)
    if wide:
        w_sens, r_sens, t_sens = row_sensitivities(lt, r, s, None, M.T)
    else:
        w_sens, r_sens, t_sens = row_sensitivities(lt, r, s, Minv, None)
    noise = np.sqrt(residual**2 + floor**2)
    # A second solution moves a group's scores by up to spread_k: entry b of
    # [W_h | c_h]^T u_k by at most spread_k sum_j |Minv[j, b]|, a residue by spread_k.
    m1 = np.abs(Minv).sum(axis=0)  # (p,)
    with np.errstate(invalid="ignore"):
        per_w = np.maximum(noise[:, None, None] * w_sens, spread[:, None, None] * m1[None, :, None])
        per_r = np.maximum(noise[:, None] * r_sens, spread[:, None])
        per_t = np.maximum(noise * t_sens, H * spread)
    Ua = np.abs(np.linalg.inv(U))  # (d, G): entry a of a head row from group k
    err_W = float(np.einsum("ak,kbh->abh", Ua, per_w).max())
    err_v = float((Ua @ per_r).max())
    err_beta = (
        float(np.abs(B[0] @ np.linalg.inv(U)) @ per_t) + unit * abs(float(f0[0])) if affine else 0.0
    )
    size = max(1.0, abs(beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    out = max(err_W, err_v, err_beta) / size
    return out if math.isfinite(out) else math.inf


def heads_error_estimate(
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    unit: float,
    affine: bool,
) -> float:
    """The first-order parameter error of given heads against the grid answers, from the
    answers and the heads alone (what a float certificate's stated parameter tolerance is
    re-checked with): each u-group's residual at the heads' residues ``U v_h`` and scores
    ``U [W_h | c_h] [B^T; 1]``, its rounding floor and its Jacobian's smallest singular
    value, carried to the heads as in the decoder (:func:`_decode_pooled`, step 5).

    >>> U, B = np.eye(2), np.eye(2)
    >>> heads = [(np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([1.0, 2.0]))]
    >>> t = np.array([0.5, 2.0])
    >>> r, s = U @ heads[0][1], U @ heads[0][0] @ B.T
    >>> ans = np.array([[r[k] / (1 + np.exp(-s[k, j]) / x) for x in t] for k in (0, 1) for j in (0, 1)])
    >>> e = heads_error_estimate(U, B, np.zeros(2), ans, t, heads, 0.0, 2.0**-53, False)
    >>> bool(0 < e < 1e-14)
    True
    """
    lt, r, s, residual, floor = _groups_at(U, B, f0, ans, t, heads, unit, affine)
    return _propagated_error(
        residual, floor, lt, r, s, np.zeros(U.shape[0]), U, B, f0, heads, beta, unit, affine
    )


def _groups_at(
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    heads: list[tuple[np.ndarray, ...]],
    unit: float,
    affine: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The u-groups at given heads: (log t, residues r (d, H), scores s (d, J, H), each
    group's residual against its grid answers, its rounding floor)."""
    d, ncols, T = U.shape[0], B.shape[0], len(t)
    n_grid = d * ncols
    M = float_probe_matrix(B, affine)
    r = np.stack([U @ hd[1] for hd in heads], axis=1)  # (d, H)
    s = np.stack(
        [U @ (np.column_stack([hd[0], hd[2]]) if affine else hd[0]) @ M for hd in heads], axis=2
    )  # (d, J, H)
    Y = (ans[:n_grid] - np.tile(f0, d)[:, None]).reshape(d, ncols, T)
    lt = np.log(t)
    miss = group_model(lt, r, s) - Y
    residual = np.sqrt(np.einsum("gjt,gjt->g", miss, miss))
    floor = unit * np.sqrt(
        (ans[:n_grid] ** 2).sum(axis=1).reshape(d, ncols).sum(axis=1) + T * float(f0 @ f0)
    )
    return lt, r, s, residual, floor


def polish_figures(
    arith: Arithmetic,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    affine: bool,
    rows: SequenceRows,
    seed: int,
    lengths: Sequence[int],
) -> tuple[float, tuple[float, float], float]:
    """The sequence polish's figures at given heads, from every answer in ``rows``
    (:mod:`.sequence_fit`): the first-order parameter error estimate (PrecisionExhausted
    over the parameter tolerance), the prediction bound on the ``PREDICTION_SEQUENCES``
    sequences ``fresh_sequences(d, ., seed, lengths)`` as fractions of what the agreement
    rule allows (PrecisionExhausted over 1), and the Jacobian's smallest singular value.
    What the learner holds a polished result to and the certificate checker recomputes."""
    unit = float(getattr(arith, "unit_roundoff", _DOUBLE_UNIT))
    residuals, A, _ = normal_equations(heads, beta, rows, affine)
    cov_rows, sigma_min, sensitivity = covariance_rows(A)
    estimate = _parameter_error_estimate(
        arith, heads, beta, residuals, rows.answers, sigma_min, sensitivity, len(heads)
    )
    sequences = fresh_sequences(
        rows.queries.shape[1], PREDICTION_SEQUENCES, seed=seed, lengths=lengths
    )
    noise = float(np.sqrt(np.sum(residuals**2) + np.sum((unit * rows.answers) ** 2)))
    bounds = joint_prediction_bound(heads, sequences, affine, cov_rows, noise, len(rows))
    prediction = _prediction_ratio(arith, heads, beta if affine else 0.0, affine, sequences, bounds)
    return estimate, prediction, sigma_min


def prediction_check(
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    t: np.ndarray,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    affine: bool,
    seed: int,
    lengths: Sequence[int],
) -> tuple[float, float]:
    """The u-groups' prediction bound of given heads from the grid answers alone
    (:func:`~.prediction_bound.groups_prediction_bound`: each u-group's residual and
    rounding floor carried through its fit to ``y(X)``) on the ``PREDICTION_SEQUENCES``
    sequences ``fresh_sequences(d, ., seed, lengths)``, as fractions of what the agreement
    rule allows: (``PREDICTION_SIGMAS`` standard deviations, worst case), the largest over
    the sequences; PrecisionExhausted if the first is over 1. What the learner holds a
    u-groups result to and the certificate checker recomputes from the stored answers."""
    unit = float(getattr(arith, "unit_roundoff", _DOUBLE_UNIT))
    sequences = fresh_sequences(U.shape[0], PREDICTION_SEQUENCES, seed=seed, lengths=lengths)
    lt, r, s, residual, floor = _groups_at(U, B, f0, ans, t, heads, unit, affine)
    bounds = groups_prediction_bound(
        heads,
        sequences,
        affine,
        U=U,
        B=B,
        M=float_probe_matrix(B, affine),
        lt=lt,
        r=r,
        s=s,
        noise=np.sqrt(residual**2 + floor**2),
        f0_noise=unit * abs(float(f0[0])) if affine else 0.0,
    )
    return _prediction_ratio(arith, heads, beta if affine else 0.0, affine, sequences, bounds)


def _sigma_min(lt: np.ndarray, M: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Each u-group's conditioning figure: the free fit's sigma_min in (r, s) for a square
    design, the linear fit's in (r, w) with w = the least-squares ``s = M^T w`` for a wide
    one (redundant columns; their scores are on that plane)."""
    if M.shape[1] <= M.shape[0]:
        return sigma_min_groups(lt, r, s)
    w = np.einsum("aj,gjh->gah", np.linalg.pinv(M.T), s)
    return sigma_min_linear(lt, M.T, r, w)


def _design_answers(
    U: np.ndarray,
    B: np.ndarray,
    f0: np.ndarray,
    ans: np.ndarray,
    tie_answers: list[dict[str, Any]],
    H: int,
    unit: float,
) -> tuple[Iterator[np.ndarray], list[float]]:
    """Every learning query of the design (F(0), the pairs' ratios, the tie links), built
    as it is read (:func:`learning_sequences`), with its answer, in that order."""
    seqs = learning_sequences(U, B, H, tie_answers, unit=unit)
    observed = [*f0.tolist(), *ans.ravel().tolist(), *(float(t["answer"]) for t in tie_answers)]
    return seqs, observed


def _check_learning_fit(
    arith: Arithmetic,
    candidate: MultiHeadAttention,
    f0: np.ndarray,
    ans: np.ndarray,
    tie_answers: list[dict[str, Any]],
    U: np.ndarray,
    B: np.ndarray,
    H: int,
    affine: bool,
    polish: tuple[list[np.ndarray], np.ndarray] = ([], np.zeros(0)),
) -> None:
    """Every learning answer (the sequence polish's too) must agree with the fitted heads
    under the one float rule.

    The fit minimises the residual but nothing bounds it; a fit that misses its own data by
    more than rtol is out of class or ill-conditioned, and is refused (the certificate
    checker re-checks exactly this).
    """
    unit = float(getattr(arith, "unit_roundoff", _DOUBLE_UNIT))
    design, observed = _design_answers(U, B, f0, ans, tie_answers, H, unit)
    seqs = itertools.chain(design, polish[0])
    observed += [float(y) for y in polish[1]]
    beta = float(candidate.beta) if affine else 0.0
    floor = float_floor(observed, beta)
    for X, y in zip(seqs, observed, strict=True):
        expected = float(candidate.evaluate_batch(X[None])[0])
        ok, gap = agree(arith, y, expected, bias=beta, floor=floor)
        if not ok:
            # PrecisionExhausted, not ModelClassMismatch: every u-group met its own answers
            # (the gates before this), so a miss here (a link, a tie link) shows the heads
            # inconsistent, not the box out of class (a group at a wrong solution does the
            # same; measured: nn.MultiheadAttention E = 16, H = 4, a link missed by 4.5e-7).
            raise PrecisionExhausted(
                f"the fitted canonical heads miss the learning answer {y} on the query of "
                f"length {X.shape[0]} (they give {expected}, relative gap {gap:.3e} > rtol "
                f"{arith.rtol:g}): not {H} softmax heads, or a u-group fit at a wrong "
                f"solution, too ill-conditioned for a {box_precision(arith)} box to tell"
            )


def _certificate_data(
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    answers: dict[str, Any],
    heads: list[tuple[np.ndarray, ...]],
    beta: float | None,
    H: int,
    affine: bool,
    checked: Verification | None,
    seed: int,
    counts: QueryCounts,
    bound: int,
    tolerance: tuple[float, float, str],
    prediction: dict[str, Any],
) -> dict[str, Any]:
    """The float canonical certificate: the float design, every answer bit-exact, the heads,
    the stated parameter tolerance and the first-order estimate it covers, and the
    prediction bound (its sequences' seed and lengths, its figures)."""
    d = U.shape[0]
    data = certificate_base(
        kind="multi-head",
        theorem=THEOREM,
        d=d,
        arith=arith,
        seed=seed,
        counts=counts,
        bound=bound,
        verification=checked,
        bias=beta if affine else None,
    )
    data.update(
        {
            "method": METHOD,
            "affine": affine,
            "heads_given": True,
            "H0": H,
            "working_precision": None,
            "denominator_bound": None,
            "design": {
                "U": [[dump_number(float(x)) for x in row] for row in U],
                "B": [[dump_number(float(x)) for x in row] for row in B],
                "ratios": [[k, m] for k, m in answers["ratios"]],
                "u_scale": dump_number(float(answers["scale"])),
                # The pilot's discarded rounds: counted, kept for the record (not decoded).
                "pilot": [
                    {
                        "scale": dump_number(float(p["scale"])),
                        "answers": [[dump_number(float(a)) for a in row] for row in p["answers"]],
                    }
                    for p in answers["pilot"]
                ],
                # Conditioning rounds: u-group k's row scaled by factor, or (redundant design)
                # turned by angle toward row partner (U holds the result); the replaced
                # answers (its pairs, then the links through it) for the record.
                "conditioning": [
                    {
                        "k": c["k"],
                        "factor": dump_number(float(c["factor"])),
                        **(
                            {"partner": c["partner"], "angle": dump_number(float(c["angle"]))}
                            if "partner" in c
                            else {}
                        ),
                        "answers": [[dump_number(float(a)) for a in row] for row in c["answers"]],
                    }
                    for c in answers["conditioning"]
                ],
                # The stalled u-groups whose fit was started again from the other groups'
                # low-rank head planes (no query; float_rescue), and that rank: for the record.
                "low_rank_restarts": {
                    "groups": [int(k) for k in answers["restarts"]["groups"]],
                    "rank": int(answers["restarts"]["rank"]),
                },
            },
            "answers": {
                "F0": [dump_number(float(a)) for a in answers["F0"]],
                "F": [[dump_number(float(a)) for a in row] for row in answers["F"]],
                "ties": [
                    {"k": t["k"], "j": t["j"], "answer": dump_number(float(t["answer"]))}
                    for t in answers["ties"]
                ],
                # The sequence polish's answers (a coarse box), on polish_sequences(d, ., seed).
                **(
                    {"polish": [dump_number(float(a)) for a in answers["polish"]]}
                    if answers["polish"]
                    else {}
                ),
            },
            "result": {
                "exact": False,
                "heads": dump_heads(heads, d),
                "beta": None if beta is None else dump_number(float(beta)),
                # The parameters' stated tolerance (relative to max(1, largest parameter));
                # the checker recomputes the estimate from the answers and the heads.
                "parameter_rtol": dump_number(float(tolerance[0])),
                "parameter_error_estimate": dump_number(float(tolerance[1])),
                # "u-groups", "joint" or "sequences" (the sequence polish)
                "parameter_error_estimate_kind": tolerance[2],
                "prediction_bound": {
                    k: dump_number(float(v)) if k in ("ratio", "worst_case", "sigmas") else v
                    for k, v in prediction.items()
                },
            },
        }
    )
    if tolerance[2] == "joint":  # its checker does not recompute a joint fit's bound
        del data["result"]["prediction_bound"]
    return data

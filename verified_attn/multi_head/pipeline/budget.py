"""Query counts of the float learner: the design's columns, the polish counts, the worst-case
bound and the follow-up's count they are held against.
"""

from __future__ import annotations

import functools
import math
from typing import cast

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import PrecisionExhausted
from verified_attn.multi_head.canonical_bounds import (
    follow_up_query_bound,
    parameter_count,
)
from verified_attn.multi_head.pipeline.design import (
    _DOUBLE_UNIT,
    _PARAMETER_SAFETY,
    CONDITIONING_GROUPS,
    box_precision,
    coarse,
    ratio_window,
)
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.multi_head.sequence_fit import (
    POLISH_PER_PARAMETER,
)


def redundancy(H: int, d: int = 0, affine: bool = False, *, unit: float = _DOUBLE_UNIT) -> int:
    """Redundant samples per pair beyond the 2H a square fit needs (the ratio t = 1): 1 if
    H >= 2, except in a coarse box's design under the follow-up's count
    (:func:`within_follow_up`, which takes the sizes ``d``, ``affine``) and in the lean
    float64 design (:func:`lean_design`): 0 there.

    >>> redundancy(1), redundancy(6), redundancy(3, 8, True), redundancy(3, 8, True, unit=2.0**-24)
    (0, 1, 1, 0)
    >>> redundancy(6, 8, False)  # random d = 8, H = 6 in float64: the lean design
    0
    """
    if H < 2 or within_follow_up(d, H, affine, unit=unit) or lean_design(d, H, affine, unit=unit):
        return 0
    return 1


def samples_per_pair(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The queries of one pair: 2H grid ratios and :func:`redundancy`.

    >>> samples_per_pair(8, 3, True), samples_per_pair(8, 3, True, unit=2.0**-24)
    (7, 6)
    >>> samples_per_pair(8, 6, False)  # the lean design: no t = 1 sample
    12
    """
    return 2 * H + redundancy(H, d, affine, unit=unit)


def float_ratios(
    H: int, *, unit: float = 2.0**-53, d: int = 0, affine: bool = False
) -> list[tuple[int, int]]:
    """The (k, m) of the per-pair queries: 2H grid ratios, then the redundant ones
    (:func:`redundancy`, of the sizes ``d``, ``affine`` and the unit roundoff), in the
    window of :func:`ratio_window` (a function of H and the box's unit roundoff).

    >>> float_ratios(1), float_ratios(3)[0]  # the window: ratio_window(H)
    ([(1, 64), (64, 1)], (1, 256))
    >>> max(k + m for k, m in float_ratios(8)) <= 257
    True
    >>> float_ratios(2)[-1], max(k + m for k, m in float_ratios(4, unit=2.0**-24))
    ((1, 1), 65)
    >>> float_ratios(2, unit=2.0**-24, d=8, affine=True) == float_ratios(2)[:-1]  # no t = 1
    True
    """
    spare = redundancy(H, d, affine, unit=unit)
    return list(_float_ratios(H, ratio_window(H, unit=unit), spare))


@functools.lru_cache(maxsize=64)
def _float_ratios(
    H: int, window_length: tuple[float, int], spare: int
) -> tuple[tuple[int, int], ...]:
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
    out += [(1, 1)] * spare
    if len({k / m for k, m in out}) != len(out):  # pragma: no cover - a design invariant
        raise AssertionError(f"the ratio grid for H = {H} repeats a ratio: {out}")
    return tuple(out)


def max_length(H: int, *, unit: float = 2.0**-53) -> int:
    """The longest learning query of the float design: the largest k + m of its ratios
    (the pilot, the grid, the redundancy and the conditioning all use these ratios).

    >>> from verified_attn.multi_head.pipeline.design import _MAX_LENGTH
    >>> max_length(1), max_length(6) <= _MAX_LENGTH, max_length(6, unit=2.0**-24)
    (65, True, 65)
    """
    return max(k + m for k, m in float_ratios(H, unit=unit))


# Redundant probe columns (more b's than the d, affine d + 1, a square design needs) from
# this many heads on, as many as the room under the follow-up's count holds: where the
# free per-pair scores crowd (nn.MultiheadAttention E = 16, H = 8: the u-groups' sigma_min
# 1e-10 .. 1e-5) the scores' linearity in b pins a pair's close scores through the other
# pairs (float_linear_fit.fit_linear_groups). Until this version only from six heads on; measured
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


def _limit_at(d: int, H: int, affine: bool, extra: int, per_pair: int | None = None) -> int:
    """The count of :func:`base_query_limit` with ``extra`` redundant probe columns and
    ``per_pair`` queries a pair (None: 2H and a t = 1 sample from two heads on): tie links
    only in the square design (``extra == 0``; see :func:`_decode_pooled`)."""
    if per_pair is None:
        per_pair = 2 * H + redundancy(H)
    ncols = d + (1 if affine else 0) + extra
    npairs = d * ncols + d - 1
    ties = d * (ncols - 1) if H >= 2 and not extra else 0
    return ncols + npairs * per_pair + ties


def extra_columns(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """Redundant probe columns of the float design: from :data:`REDUNDANT_FROM_HEADS` heads
    on, as many as the room under the follow-up's ``4Hd^2 - 2H + 1`` holds once the
    pilot's discarded rounds are reserved, each column sized at its F(0), d pairs and d
    tie links, at most d; else 0. A box of unit roundoff ``unit`` >= :data:`COARSE_UNIT`
    (float32) takes d from two heads on, or 1 where it takes the design under the
    follow-up's count (:func:`within_follow_up`). A function of the sizes and the box's unit
    roundoff alone, so that a certificate's design is fixed by them. (The redundant design
    asks no tie links, see :func:`_decode_pooled`; the sizing still counts them, as the
    design was measured, and the conditioning rounds get that room.)

    The conditioning rounds get what room is left. Measured against keeping room for three
    rounds at E = 16, H = 8 (4 columns instead of 8; nn.MultiheadAttention module seeds 0
    and 3 of the independent check): 4 and 5 of the 16 u-groups stalled after the fits
    instead of 2 and 3, and seed 0 was refused all the same.

    >>> extra_columns(8, 6, False), extra_columns(32, 4, False), extra_columns(32, 8, True)
    (1, 16, 21)
    >>> extra_columns(8, 2, False), extra_columns(4, 4, False)  # no room: the square design
    (0, 0)
    >>> extra_columns(8, 5, True, unit=2.0**-24), extra_columns(8, 1, True, unit=2.0**-24)
    (8, 0)
    >>> extra_columns(8, 2, True, unit=2.0**-24), extra_columns(8, 4, True, unit=2.0**-24)
    (1, 1)
    """
    if coarse(unit) and H >= 2:
        return 1 if within_follow_up(d, H, affine, unit=unit) else d
    if lean_design(d, H, affine, unit=unit):
        return 1
    return _full_extra_columns(d, H, affine)


def _full_extra_columns(d: int, H: int, affine: bool) -> int:
    """The redundant columns of the float64 design that is not lean (:func:`extra_columns`).

    >>> _full_extra_columns(8, 6, False), _full_extra_columns(8, 2, False)
    (2, 0)
    """
    if H < REDUNDANT_FROM_HEADS:
        return 0
    per_pair = 2 * H + redundancy(H)
    room = follow_up_query_bound(d, H) - 1 - _limit_at(d, H, affine, 0)
    reserve = (MAX_ROUNDS - 1) * d * per_pair
    column = 1 + d * per_pair + d
    return max(0, min(d, (room - reserve) // column))


def probe_columns(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The float design's probe columns b_j: d (affine d + 1) plus :func:`extra_columns`.

    >>> probe_columns(8, 4, True), probe_columns(32, 8, True)
    (10, 54)
    """
    return d + (1 if affine else 0) + extra_columns(d, H, affine, unit=unit)


#: The coarse (float32) sequence polish takes boxes of at most this many canonical
#: parameters (nn.MultiheadAttention E = 16, H = 8 has 2305); up to it the polish keeps its
#: dense normal equations and exact figures (``sequence_blocks.DENSE_FIGURE_PARAMETERS``).
POLISH_PARAMETERS = 2400


def polish_count(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The random sequences the sequence polish asks (phase ``polish``,
    :mod:`.sequence_fit`): :data:`~.sequence_fit.POLISH_PER_PARAMETER` per canonical
    parameter for a coarse box (:func:`coarse`, float32) from two heads on, up to
    :data:`POLISH_PARAMETERS` parameters; else 0 (the u-group figures stand).

    >>> polish_count(8, 5, True, unit=2.0**-24), polish_count(8, 5, True), polish_count(8, 1, True, unit=2.0**-24)
    (802, 0, 0)
    >>> polish_count(8, 4, True, unit=2.0**-24)  # under the follow-up's count: what it leaves
    310
    """
    P = parameter_count(d, H, affine)
    if within_follow_up(d, H, affine, unit=unit):
        return _follow_up_polish(d, H, affine)
    if coarse(unit) and H >= 2 and P <= POLISH_PARAMETERS:
        return POLISH_PER_PARAMETER * P
    return 0


def polish_after(d: int, H: int, affine: bool, conditioned: int, *, unit: float) -> int:
    """The polish sequences after ``conditioned`` conditioning queries: :func:`polish_count`,
    less them under the follow-up's count (:func:`within_follow_up`: they are the polish's).

    >>> polish_after(16, 4, True, 152, unit=2.0**-24), polish_after(16, 4, True, 0, unit=2.0**-24)
    (1238, 1390)
    >>> polish_after(8, 5, True, 152, unit=2.0**-24) == polish_count(8, 5, True, unit=2.0**-24)
    True
    """
    full = polish_count(d, H, affine, unit=unit)
    return full - conditioned if within_follow_up(d, H, affine, unit=unit) else full


#: A coarse box (float32) with at most this many heads is learned under the follow-up's
#: count (:func:`within_follow_up`): one redundant column, no t = 1 sample, one pilot
#: round (from three heads, :func:`_follow_up_rounds`), no conditioning round, the rest of the count as polish sequences, and each
#: u-group's head order taken on those sequences (:mod:`.reorder`). Measured
#: (nn.MultiheadAttention in float32, the float benchmark's modules, E = 8, H = 4 seeds
#: 0-2): t = 1 samples and the link orders as decoded 1 of 2 learned (the links' best orders
#: within their noise); groups reordered 2 of 3; no t = 1 sample, its 87 queries polish
#: sequences (223 -> 310), and a stuck group starting the polish (:func:`.decode_stage`):
#: 3 of 3, and 6 of 6 of seeds 0-5 (parameters 2^-16.2 .. 2^-19.2), E = 12, H = 3 6 of 6,
#: E = 16, H = 4 6 of 6 (with :data:`FOLLOW_UP_PILOT_POLISH` and, seed 2, a conditioning
#: round from the polish, :mod:`.conditioning`), E = 8, H = 2 2^-18.8 .. 2^-21.5
#: (with t = 1 samples 2^-17.3 .. 2^-19.4). The coarse design they replace (d columns,
#: three pilot rounds, conditioning rounds, 2 P polish sequences) took E = 8, H = 4 2018
#: queries against 1017 and E = 16, H = 4 up to 7676 against 4089.
FOLLOW_UP_COARSE_HEADS = 4
#: ... when the polish sequences the follow-up's count leaves are at least this fraction
#: of the canonical parameters (d = 4, H = 2 has none left: the coarse design stays).
FOLLOW_UP_POLISH_FRACTION = 0.25


#: ... and, from :data:`FOLLOW_UP_PILOT_HEADS` heads on, as many pilot rounds (up to
#: :data:`MAX_ROUNDS`) as leave the polish at least this many sequences per canonical
#: parameter (each discarded round costs d 2H queries).
#: Measured (nn.MultiheadAttention in float32, E = 16, H = 4, the float benchmark's module
#: seeds 0-5): with one round, at the design scale, seeds 2, 3 and 5 were refused (their
#: u-groups up to 3800 x their rounding floor, every group's rows of U W off by 0.3 or
#: more); with three rounds (u scale 2.8, seed 4 1.7) 5 of 6 learned, in 3960 to 4088
#: queries against 4089, parameters 2^-18.9 to 2^-20.9 (one round: 2^-19.6 to 2^-20.7).
FOLLOW_UP_PILOT_POLISH = 1.2
#: Two heads keep one pilot round (the design scale): measured (E = 16, H = 2, module seed
#: 0) a second round's 64 queries taken from the polish left parameters 2^-23.0 instead of
#: 2^-23.7.
FOLLOW_UP_PILOT_HEADS = 3


def _follow_up_polish(d: int, H: int, affine: bool) -> int:
    """The polish sequences left under the follow-up's count by one query once the
    one-column design's worst case (2H ratios a pair, no t = 1 sample; no tie links: it
    is redundant) and its pilot's discarded rounds (:func:`_follow_up_rounds`) are asked.

    >>> _follow_up_polish(8, 2, True), _follow_up_polish(16, 2, True), _follow_up_polish(8, 4, True)
    (150, 814, 310)
    >>> _follow_up_polish(16, 4, True)  # two discarded pilot rounds of 128 queries
    1390
    """
    return _follow_up_room(d, H, affine) - (_follow_up_rounds(d, H, affine) - 1) * d * 2 * H


def _follow_up_room(d: int, H: int, affine: bool) -> int:
    """What the follow-up's count leaves by one query after the one-column design's grid."""
    return follow_up_query_bound(d, H) - 1 - _limit_at(d, H, affine, 1, 2 * H)


def _follow_up_rounds(d: int, H: int, affine: bool) -> int:
    """The pilot rounds of the design under the follow-up's count: 1 plus the discarded
    rounds (``d 2H`` queries each) that keep :data:`FOLLOW_UP_PILOT_POLISH` polish
    sequences per parameter, at most :data:`MAX_ROUNDS`.

    >>> _follow_up_rounds(8, 4, True), _follow_up_rounds(16, 2, True), _follow_up_rounds(16, 4, True)
    (1, 1, 3)
    """
    if d < 1 or H < FOLLOW_UP_PILOT_HEADS:
        return 1
    spare = _follow_up_room(d, H, affine) - FOLLOW_UP_PILOT_POLISH * parameter_count(d, H, affine)
    return 1 + max(0, min(MAX_ROUNDS - 1, math.floor(spare / (d * 2 * H))))


def within_follow_up(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> bool:
    """Whether a coarse box (float32) takes the design under the follow-up's count: at
    most :data:`FOLLOW_UP_COARSE_HEADS` heads (two or more), one redundant probe column,
    no redundant sample (:func:`redundancy`), :func:`_follow_up_rounds` pilot rounds, no
    conditioning round, the u-groups' head orders chosen on the polish sequences, and the
    polish on what the count leaves (:func:`_follow_up_polish`, at least :data:`FOLLOW_UP_POLISH_FRACTION` P). A
    function of the sizes and the unit roundoff alone (the certificate derives it).
    float64 boxes: never (their design is unchanged).

    >>> within_follow_up(8, 2, True, unit=2.0**-24), within_follow_up(8, 2, True)
    (True, False)
    >>> within_follow_up(8, 4, True, unit=2.0**-24), within_follow_up(4, 2, True, unit=2.0**-24)
    (True, False)
    >>> within_follow_up(8, 5, True, unit=2.0**-24)  # five heads: the coarse design
    False
    """
    if not (coarse(unit) and 2 <= H <= FOLLOW_UP_COARSE_HEADS):
        return False
    P = parameter_count(d, H, affine)
    return (
        P <= POLISH_PARAMETERS and _follow_up_polish(d, H, affine) >= FOLLOW_UP_POLISH_FRACTION * P
    )


#: The lean float64 design (:func:`lean_design`) takes boxes of at most this many canonical
#: parameters (d = 8 with eight heads: 576). Measured with it (float64, random boxes):
#: d = 8, H = 6 seeds 0-19 and 100-112, H = 7 seeds 0-1 and H = 8 seed 0 learned; d = 16,
#: H = 6 seed 0 (1632 parameters) only after a conditioning round, and d = 16, H = 8 seed 0
#: (2176) refused (14 of 16 u-groups missed their answers), where the full design learns it.
LEAN_PARAMETERS = 600
#: ... with at least this many heads (plain boxes): where the full design's answers leave the
#: refinement short of 2^-51 (d = 8, H = 6: 9 of 20 seeds, H = 7 0 of 3, d = 16, H = 6 and 8
#: none; up to five heads the median reaches it).
LEAN_FROM_HEADS = 6
#: ... and affine boxes from this many heads, at float64's own unit roundoff (not the
#: Transformer learner's cells, whose unit is the block's over the probe scale: not
#: measured). Their answers are a module's, noisier than a plain box's; the refinement's
#: random sequences bring the parameters down. Measured, the lean design against the full
#: one at the same count: nn.MultiheadAttention E = 8, H = 4 seeds 0-19 every seed closer
#: (median 2^-46.3 against 2^-45.0, worst 2^-44.0 against 2^-43.0), E = 12, H = 3 seeds
#: 0-5 (2^-47.1..2^-48.3 against 2^-46.2..2^-47.5), E = 16, H = 2 seeds 0-1; random affine
#: d = 8, H = 6 seeds 0-3 (2^-49.1..2^-51.1 against 2^-47.2..2^-50.5); none refused.
LEAN_FROM_HEADS_AFFINE = 2


def lean_design(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> bool:
    """Whether a float64 box takes the lean design: one redundant probe column (not the
    :func:`_full_extra_columns` that fit) and no t = 1 sample, so that more of the
    follow-up's ``4Hd^2 - 2H + 1`` is left to the refinement's random sequences
    (``refine.refine_count``). Taken by plain boxes with at least :data:`LEAN_FROM_HEADS`
    heads (affine boxes :data:`LEAN_FROM_HEADS_AFFINE`) where the full design has a
    redundant column, up to :data:`LEAN_PARAMETERS`
    canonical parameters, when the lean design's count leaves at least P / 8 under the
    follow-up's count (the refinement runs). A function of the sizes and the unit roundoff
    alone (the certificate derives it).

    The u-groups' answers carry far less of the heads than random sequences (d = 8, H = 6:
    the design's 1141 answers and 383 random sequences gave 2^-50.9 median, 9 of 20 seeds
    at 2^-51; the same count all on random sequences 2^-52.8): the decoding need only start
    Gauss-Newton in its basin, and the lean design's 957 answers leave 567.

    >>> lean_design(8, 6, False), lean_design(8, 5, False), lean_design(8, 6, False, unit=2.0**-24)
    (True, False, False)
    >>> lean_design(8, 8, False), lean_design(8, 8, True), lean_design(16, 6, False)
    (True, False, False)
    >>> lean_design(8, 4, True), lean_design(8, 2, True), lean_design(16, 8, True)
    (True, False, False)
    >>> lean_design(8, 4, True, unit=2.0**-52), lean_design(8, 6, False, unit=2.0**-52)
    (False, True)
    """
    if coarse(unit) or d < 1 or H < (LEAN_FROM_HEADS_AFFINE if affine else LEAN_FROM_HEADS):
        return False
    if affine and unit > _DOUBLE_UNIT:
        return False
    P = parameter_count(d, H, affine)
    if P > LEAN_PARAMETERS or not _full_extra_columns(d, H, affine):
        return False
    left = follow_up_query_bound(d, H) - 1 - _limit_at(d, H, affine, 1, 2 * H)
    return left * PRECISION_PARAMETERS_PER_SEQUENCE >= P


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
#: (d = 32 with eight heads: 8448; nn.MultiheadAttention E = 32, H = 8: 8705): the limit
#: sets which queries are asked. Past ``sequence_blocks.DENSE_FIGURE_PARAMETERS`` it holds
#: no P x P matrix (lsqr steps, per-head block figures; its time is then the Lanczos bound's
#: and the lsqr iterations', each a pass over the answers). Measured with the dense normal
#: equations, random d = 32, H = 6 seed 1 (P = 6336): its parameters from 4.8e-12 to
#: 2.0e-15 and its predictions from 1.3e-10 to 1.3e-13. The coarse (float32) polish keeps
#: :data:`POLISH_PARAMETERS`: it asks 2 P sequences, not P / 8.
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
    (967, 74, 957)
    """
    ncols = probe_columns(d, H, affine, unit=unit)
    npairs = d * ncols + d - 1
    per_pair = samples_per_pair(d, H, affine, unit=unit)
    return ncols + npairs * per_pair + polish_count(d, H, affine, unit=unit)


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
    per_pair = samples_per_pair(d, H, affine, unit=unit)
    return _limit_at(d, H, affine, extra, per_pair) + polish_count(d, H, affine, unit=unit)


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
    >>> float_query_limit(8, 6) - base_query_limit(8, 6) == 2 * 8 * 12 + 8 * conditioning_cost(8, 6, False)
    True
    """
    per_pair = samples_per_pair(d, H, affine, unit=unit)
    pilot = (pilot_rounds(d, H, affine, unit=unit) - 1) * d * per_pair
    most = pilot + CONDITIONING_GROUPS * conditioning_cost(d, H, affine, unit=unit)
    base = base_query_limit(d, H, affine=affine, unit=unit)
    if extra_columns(d, H, affine, unit=unit) and (
        H >= UNBOUNDED_ROUNDS_FROM_HEADS
        or (coarse(unit) and not within_follow_up(d, H, affine, unit=unit))
    ):
        return base + most
    return base + min(adaptive_room(d, H, affine, unit=unit), most)


def adaptive_room(d: int, H: int, affine: bool, *, unit: float = _DOUBLE_UNIT) -> int:
    """The queries the adaptive phases (pilot rounds discarded, conditioning) may add to
    :func:`base_query_limit`: what keeps the total under the follow-up's count, or 0.

    >>> adaptive_room(8, 6, False), adaptive_room(2, 2, False)
    (567, 0)
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
    (192, 120)
    """
    ncols = probe_columns(d, H, affine, unit=unit)
    links = d - 1 if k == 0 else 1
    return (ncols + links) * samples_per_pair(d, H, affine, unit=unit)


# Rounds of the pilot at most (the last one is always kept).
MAX_ROUNDS = 3


def pilot_rounds(d: int, H: int, affine: bool, *, unit: float = 2.0**-53) -> int:
    """Pilot rounds allowed: up to 3, as many as keep :func:`base_query_limit` and the
    discarded rounds under the follow-up's ``4Hd^2 - 2H + 1`` (at least 1: the first round
    is the pilot pairs' own queries). A coarse box's design (float32, two heads or more:
    :func:`~.design.coarse`) is past that count already and gets all 3, except where it
    takes the design under the count (:func:`within_follow_up`: 1 round); measured
    (nn.MultiheadAttention in float32, E = 16, H = 2, module seeds 0-5) its rescaled
    modules' parameters came back 2-5x closer than at the design scale.

    >>> pilot_rounds(16, 8, True), pilot_rounds(1, 1, False), pilot_rounds(8, 5, True, unit=2.0**-24)
    (3, 1, 3)
    >>> pilot_rounds(8, 4, True, unit=2.0**-24)  # float32, four heads: under the count
    1
    """
    if within_follow_up(d, H, affine, unit=unit):
        return _follow_up_rounds(d, H, affine)
    if coarse(unit) and H >= 2:
        return MAX_ROUNDS
    group = d * samples_per_pair(d, H, affine, unit=unit)
    room = follow_up_query_bound(d, H) - 1 - base_query_limit(d, H, affine=affine, unit=unit)
    return max(1, min(MAX_ROUNDS, 1 + room // group))


def plan(st: FloatState) -> None:
    """Stage 0, the budget: the box's unit roundoff (its design, the fits' rounding floors),
    the worst-case bound checked before any query, the ratio grid, the parameter tolerance
    (the box's rtol unless it declares a looser one, e.g. float32)."""
    arith = st.oracle.arithmetic
    st.unit = float(getattr(arith, "unit_roundoff", _DOUBLE_UNIT))
    st.bound = float_query_limit(st.oracle.d, st.H, affine=st.affine, unit=st.unit)
    st.oracle.require_remaining(st.bound, st.verify, "learn_multi_head")
    st.ratios = float_ratios(st.H, unit=st.unit, d=st.oracle.d, affine=st.affine)
    st.t = np.array([k / m for k, m in st.ratios])
    st.prtol = float(cast(float, getattr(arith, "parameter_rtol", arith.rtol)))
    st.d = st.oracle.d
    st.wide = extra_columns(st.d, st.H, st.affine, unit=st.unit)

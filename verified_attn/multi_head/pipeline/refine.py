"""The refinement, after the polish: Gauss-Newton on every answer, residuals in extended precision.

>>> import numpy as np
>>> from verified_attn.multi_head.sequence_fit import compress, polish_sequences
>>> rng = np.random.default_rng(0)
>>> heads = [(rng.normal(0, 0.5, (2, 2)), rng.normal(0, 1, 2)) for _ in range(2)]
>>> seqs = polish_sequences(2, 30, seed=0)
>>> rows = compress(seqs, extended_values(heads, 0.0, compress(seqs, [0.0] * 30), False))
>>> start = [(W + 1e-9, v - 1e-9) for W, v in heads]
>>> got, _ = gauss_newton(start, 0.0, rows, False)
>>> max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(got, heads)) < 1e-14
True

Measured on random float64 boxes (d = 8, H = 6): the learner's heads sit at the
least-squares floor of its own answers (the box's rounding through the design's Jacobian,
column-scaled condition number 1e3 - 3e3): a Gauss-Newton step from them with exact
residuals lands on that floor (2^-44.6 to 2^-46.9 relative), no better. The floor
falls only with better-conditioned answers: ``R = 4Hd^2 - 2H - (queries asked)`` random
sequences of :func:`~.sequence_fit.polish_sequences` (another stream), which the
follow-up's count leaves, bring the condition number to 30 - 60 and the floor to 2^-50.5 to
2^-51.8. So the stage asks them (phase ``refinement``) when ``R >= P / 8`` (P the canonical
parameters) and then takes at most :data:`STEPS` Gauss-Newton steps on every answer. After
the lean design (:func:`~.budget.lean_design`) the R sequences are picked among the first
``POOL R`` of the stream for the parameters the earlier answers determine least
(:func:`pick_sequences`, no query; the certificate lists the picks). The steps:

* the residual ``y - f(theta)`` in ``np.longdouble`` (64-bit significand on x86-64; the
  answers are float64 numbers, so what is left is the box's rounding); a float64 residual
  carries the learner's own rounding, as large as the box's;
* the Jacobian in float64, applied matrix-free (per head, the rank-one rows
  ``(sum_l p_l (v^T x_l - f_h) x_l) x_N^T`` and ``sum_l p_l x_l``: memory ``O(n H d)``,
  never ``P x P``), column-scaled, solved by ``scipy.sparse.linalg.lsqr`` (:mod:`..sequence_operator`).

A step is kept only if the extended residual's norm falls (never worse than the start).

The stated parameter error of a refined result is this fit's (:func:`refined_error_estimate`,
kind ``"refinement"``): per parameter the worst case ``|row_i J^+| |dY|`` of the answers'
noise dY, estimated from the extended residual (scaled by ``sqrt(n / (n - P))``, the part
of the noise a fit of P parameters absorbs) and the box's rounding ``u |y|``. The
certificate checker recomputes it from every stored answer at the claimed heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verified_attn.multi_head.canonical_bounds import follow_up_query_bound, parameter_count
from verified_attn.multi_head.pipeline.budget import (
    PRECISION_POLISH_PARAMETERS,
    _within_parameter_tolerance,
    lean_design,
)
from verified_attn.multi_head.pipeline.design import coarse
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.multi_head.pipeline.verify import _design_answers, heads_error_estimate
from verified_attn.multi_head.sequence_fit import (
    SequenceRows,
    _jacobian,
    compress,
    covariance_rows,
    group_figures,
    group_max,
    normal_equations,
    pack_parameters,
    polish_sequences,
    unpack_parameters,
)
from verified_attn.multi_head.sequence_operator import damped_step, jacobian_operator

__all__ = [
    "REFINED_FIGURE_PARAMETERS",
    "REFINED_KIND",
    "STEPS",
    "extended_residuals",
    "extended_values",
    "gauss_newton",
    "pick_sequences",
    "picked_sequences",
    "refine_count",
    "refine_sequences",
    "refine_stage",
    "refined_error_estimate",
    "refined_error_groups",
    "refined_figure",
]

#: Gauss-Newton steps at most (measured: the first reaches the floor, the second moves no
#: entry by more than 2^-53 relative).
STEPS = 2
#: A step under this fraction of the largest parameter ends the steps: the residuals are at
#: the rounding level, so Gauss-Newton converges quadratically and the next step would be
#: about its square, under the unit roundoff.
_SMALL_STEP = 2.0**-26
#: The refinement asks its sequences when they are at least this fraction of the parameters
#: (the precision polish's ratio; measured, random d = 4, H = 3 seed 1: 13 sequences for 60
#: parameters take it from 2^-44.4 to 2^-49.2).
MIN_SEQUENCES_PER_PARAMETER = 1 / 8
_STREAM = 0x7266  # the refinement's generator stream (the polish's is 0x706F)
#: The lean design's refinement (:func:`~.budget.lean_design`) picks its ``count``
#: sequences among the first ``POOL count`` of its stream (:func:`pick_sequences`), in
#: :data:`PICK_ROUNDS` rounds, each parameter's variance weighted by its share of the
#: largest to the power :data:`PICK_POWER` (the least-determined parameters first).
#: Measured (random float64 d = 8, H = 6, the learner's own answers, truth compared in
#: extended precision): seeds 7 and 17, where the first ``count`` sequences left the
#: parameters at 2^-50.5 and 2^-50.9 (one head's rows carry the error: its value vector
#: is the shortest, so its W is the least determined), reach 2^-51.8 and 2^-51.7 with the
#: picks (pool 4, power 4; power 0 2^-51.5, 2^-51.4; power 16 2^-51.5, 2^-51.2).
POOL = 4
PICK_ROUNDS = 8
PICK_POWER = 4
#: np.longdouble with at least this many significand bits computes the residuals; with
#: fewer (a platform whose long double is a double) the residuals are float64.
_EXTENDED_BITS = 63

#: The result's ``parameter_error_estimate_kind`` after the refinement.
REFINED_KIND = "refinement"
#: The refined figure is computed up to this many canonical parameters (it forms J^T J,
#: n P^2 operations, and its eigendecomposition, about 9 P^3: at d = 32, H = 8, P = 8448,
#: minutes more in the learner and again in the checker); past it a refined result states
#: the earlier fit's figure. 2400 covers d = 8 and d = 16 up to eight heads and
#: nn.MultiheadAttention E = 16 up to eight heads.
REFINED_FIGURE_PARAMETERS = 2400

Head = tuple[np.ndarray, ...]


def refine_count(d: int, H: int, affine: bool, asked: int, bound: int, *, unit: float) -> int:
    """The refinement's random sequences after ``asked`` learning queries: the run stays
    under the follow-up's count ``4Hd^2 - 2H + 1`` (and within its own ``bound``) by one
    query, when what that leaves is at least P / 8; 0 for a coarse box (its polish already
    fits on 2P sequences) and past :data:`~.budget.PRECISION_POLISH_PARAMETERS` canonical
    parameters, the precision polish's limit: every lsqr iteration costs (answers) x L x d
    x H, and at nn.MultiheadAttention E = 64, H = 4 (P = 16,897, 65,528 answers) a run with
    the refinement was stopped after 68 minutes at 5.3 GB resident, against 212 s and
    1.2 GB without it.

    >>> refine_count(8, 6, False, 957, 2000, unit=2.0**-53)  # the lean design's 957
    567
    >>> refine_count(8, 6, False, 1500, 2000, unit=2.0**-53), refine_count(8, 6, False, 957, 1200, unit=2.0**-53)
    (0, 243)
    >>> refine_count(64, 4, True, 58266, 70000, unit=2.0**-53)
    0
    """
    if coarse(unit) or parameter_count(d, H, affine) > PRECISION_POLISH_PARAMETERS:
        return 0
    left = min(follow_up_query_bound(d, H) - 1, bound) - asked
    if left < MIN_SEQUENCES_PER_PARAMETER * parameter_count(d, H, affine):
        return 0
    return left


def refined_figure(d: int, H: int, affine: bool) -> bool:
    """Whether a refined result states the refined fit's figure (:data:`REFINED_KIND`):
    up to :data:`REFINED_FIGURE_PARAMETERS` canonical parameters.

    >>> refined_figure(8, 6, False), refined_figure(16, 8, True), refined_figure(32, 4, False)
    (True, True, False)
    """
    return parameter_count(d, H, affine) <= REFINED_FIGURE_PARAMETERS


def refine_sequences(d: int, count: int, seed: int) -> list[np.ndarray]:
    """The refinement's ``count`` sequences: :func:`~.sequence_fit.polish_sequences` from
    another generator stream (not the polish's, not the verification's).

    >>> [X.shape for X in refine_sequences(3, 2, seed=0)]
    [(2, 3), (3, 3)]
    """
    return polish_sequences(d, count, seed, stream=_STREAM)


def pick_sequences(
    heads: Sequence[Head], rows: SequenceRows, pool: Sequence[np.ndarray], count: int,
    affine: bool,
) -> list[int]:
    """The (increasing) indices of the ``count`` sequences of ``pool`` that most reduce the
    variance of the least-determined parameters of a fit of ``rows`` and them, at
    ``heads``: greedy in :data:`PICK_ROUNDS` rounds, each taking the sequences of largest
    ``sum_i w_i (C j)_i^2 / (1 + j^T C j)`` (C the column-scaled covariance so far, j a
    sequence's Jacobian row, ``w_i`` the parameter's variance over the largest to the
    power :data:`PICK_POWER`). No queries: the pool's Jacobian needs no answers.

    >>> heads = [(np.eye(2) * 0.5, np.array([1.0, -1.0]))]
    >>> seqs = polish_sequences(2, 12, seed=0)
    >>> rows = compress(seqs, [0.0] * 12)
    >>> pick_sequences(heads, rows, refine_sequences(2, 8, seed=0), 3, False)
    [1, 6, 7]
    """
    J0 = _jacobian(heads, rows, affine)[1]
    Jp = _jacobian(heads, compress(pool, [0.0] * len(pool)), affine)[1]
    scale = np.sqrt(np.sum(J0**2, axis=0) + np.sum(Jp**2, axis=0))
    scale[scale == 0] = 1.0
    J0, Jp = J0 / scale, Jp / scale
    A = J0.T @ J0
    taken = np.zeros(len(Jp), dtype=bool)
    per = -(-count // PICK_ROUNDS)
    while taken.sum() < count:
        C = np.linalg.pinv(A, hermitian=True)
        var = np.diag(C) / scale**2  # the parameters' own variances
        w = (var / var.max()) ** PICK_POWER / scale**2
        M = Jp @ C
        gain = (M**2 @ w) / (1.0 + np.einsum("ij,ij->i", M, Jp))
        gain[taken] = -np.inf
        pick = np.argsort(-gain, kind="stable")[: min(per, count - int(taken.sum()))]
        taken[pick] = True
        A += Jp[pick].T @ Jp[pick]
    return [int(i) for i in np.flatnonzero(taken)]


def picked_sequences(d: int, count: int, seed: int, picks: Sequence[int] | None) -> list[np.ndarray]:
    """The refinement's sequences: the first ``count`` of its stream
    (:func:`refine_sequences`), or, given ``picks``, those of the first ``POOL count``.

    >>> [X.shape[0] for X in picked_sequences(2, 2, 0, [1, 6])]
    [3, 8]
    """
    if picks is None:
        return refine_sequences(d, count, seed)
    pool = refine_sequences(d, POOL * count, seed)
    return [pool[i] for i in picks]


def _extended() -> type[np.floating]:
    """np.longdouble if it is wider than float64 here, else float64."""
    return np.longdouble if np.finfo(np.longdouble).nmant >= _EXTENDED_BITS else np.float64


def extended_values(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool
) -> np.ndarray:
    """The heads' answers on ``rows`` in extended precision (np.longdouble when it is
    wider than float64), shape (n,).

    >>> rows = compress([np.array([[1.0], [0.0]])], [0.0])  # equal scores: (2 + 0) / 2
    >>> float(extended_values([(np.array([[1.0]]), np.array([2.0]))], 0.0, rows, False)[0])
    1.0
    """
    ext = _extended()
    tokens = rows.tokens.astype(ext)
    queries = rows.queries.astype(ext)
    logc = rows.log_counts.astype(ext)
    out = np.full(len(rows), beta if affine else 0.0, dtype=ext)
    for hd in heads:
        shift = queries @ hd[0].astype(ext).T
        if affine:
            shift = shift + hd[2].astype(ext)
        z = np.einsum("nld,nd->nl", tokens, shift) + logc
        p = np.exp(z - z.max(axis=1, keepdims=True))
        vals = tokens @ hd[1].astype(ext)
        out += np.einsum("nl,nl->n", p, vals) / p.sum(axis=1)
    return out


def extended_residuals(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool
) -> np.ndarray:
    """``answers - f(heads)`` computed in extended precision (:func:`extended_values`),
    returned as float64: what is left is the box's rounding, not the learner's."""
    answers = rows.answers.astype(_extended())
    return np.asarray(answers - extended_values(heads, beta, rows, affine), dtype=np.float64)


def refined_error_estimate(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool, unit: float
) -> float:
    """The refined fit's first-order parameter error, relative to max(1, |beta|, largest
    entry): ``max_i |row_i J^+| |dY|``, ``|row_i J^+|^2 = (J^T J)^-1_ii`` at the heads, and
    ``|dY|^2 = |r|^2 n / (n - P) + sum (unit y)^2`` (r the extended residuals of the n
    answers: the noise less the part the P parameters absorb, which is P / n of it on
    average). inf if ``J^T J`` is singular or n <= P. Cauchy-Schwarz makes it a bound for
    every noise of that norm; measured (d = 8, H = 6, seeds 0-19) it is 2^3 to 2^5 over
    the true error, where the design's u-groups figure is 2^9 to 2^11 over it. The largest
    of :func:`refined_error_groups`.

    >>> heads = [(np.eye(2) * 0.5, np.array([1.0, -1.0]))]
    >>> seqs = polish_sequences(2, 12, seed=0)
    >>> rows = compress(seqs, extended_values(heads, 0.0, compress(seqs, [0.0] * 12), False))
    >>> bool(0 < refined_error_estimate(heads, 0.0, rows, False, 2.0**-53) < 1e-14)
    True
    """
    return group_max(refined_error_groups(heads, beta, rows, affine, unit))


def refined_error_groups(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool, unit: float
) -> dict[str, Any]:
    """:func:`refined_error_estimate` per parameter group (:func:`~.sequence_fit.group_figures`:
    per head W, v, c, and beta): ``|dY| max_{i in group} |row_i J^+|``, relative to the
    same max(1, |beta|, largest entry). A group far better determined than the worst
    parameter (the heads' W at a small probe scale) states its own figure.

    >>> heads = [(np.eye(2) * 0.5, np.array([1.0, -1.0]))]
    >>> seqs = polish_sequences(2, 12, seed=0)
    >>> rows = compress(seqs, extended_values(heads, 0.0, compress(seqs, [0.0] * 12), False))
    >>> sorted(refined_error_groups(heads, 0.0, rows, False, 2.0**-53))
    ['W', 'v']
    """
    residuals = extended_residuals(heads, beta, rows, affine)
    _, A, _ = normal_equations(heads, beta, rows, affine)
    n, P = len(rows), A.shape[0]
    cov, sigma_min, _ = covariance_rows(A)
    if not (sigma_min > 0 and n > P):
        per = np.full(P, math.inf)
    else:
        noise = math.sqrt(
            float(residuals @ residuals) * n / (n - P) + float(np.sum((unit * rows.answers) ** 2))
        )
        size = max(1.0, abs(beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
        per = noise * np.sqrt(np.einsum("ij,ij->j", cov, cov)) / size
    return group_figures(per, len(heads), rows.queries.shape[1], affine)


def gauss_newton(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool, *, steps: int = STEPS
) -> tuple[list[Head], float]:
    """At most ``steps`` Gauss-Newton steps on every answer in ``rows`` from the given heads,
    the residuals in extended precision (:func:`extended_values`), the linear solve in
    float64 (lsqr on the column-scaled Jacobian); a step is kept only if the extended
    residual's norm falls. Returns the heads and beta (0 bias-free)."""
    H, d = len(heads), rows.queries.shape[1]
    theta = pack_parameters(heads, beta, affine)

    def residual(th: np.ndarray) -> np.ndarray:
        return extended_residuals(*unpack_parameters(th, H, d, affine), rows, affine)

    res = residual(theta)
    cost = float(res @ res)
    for _ in range(steps):
        hs, _ = unpack_parameters(theta, H, d, affine)
        step = damped_step(*jacobian_operator(hs, rows, affine), res)
        trial = theta + step
        t_res = residual(trial)
        t_cost = float(t_res @ t_res)
        if not (math.isfinite(t_cost) and t_cost < cost):
            break
        theta, res, cost = trial, t_res, t_cost
        if np.abs(step).max() <= _SMALL_STEP * np.abs(theta).max():
            break
    hs, bt = unpack_parameters(theta, H, d, affine)
    return [tuple(np.array(x) for x in h) for h in hs], bt


def refine_stage(st: FloatState, learning: int) -> None:
    """The refinement: after ``learning`` queries, the :func:`refine_count` random sequences (phase
    ``refinement``) and :func:`gauss_newton` on every learning answer. The stated parameter
    error is then the refined fit's (:func:`refined_error_estimate`, kind
    :data:`REFINED_KIND`), which the certificate checker recomputes from every answer;
    past :data:`REFINED_FIGURE_PARAMETERS` the earlier fit's (of u-groups: the larger of it
    and the same figure at the refined heads, what the certificate checker recomputes)."""
    if not st.options.refine:
        return
    count = refine_count(st.d, st.H, st.affine, learning, st.bound, unit=st.unit)
    if not count:
        return
    st.options.mark("refine")
    design_seqs, design_ys = _design_answers(
        st.U, st.B, st.f0, st.ans, st.tie_answers, st.H, st.unit
    )
    earlier = [*design_seqs, *st.polish_seqs], [*design_ys, *st.polish_ans]
    if lean_design(st.d, st.H, st.affine, unit=st.unit):
        # The lean design leaves the heads' rows unevenly determined (a head with a short
        # value vector the least): the sequences are picked for its weakest parameters.
        pool = refine_sequences(st.d, POOL * count, st.seed)
        st.refine_picks = pick_sequences(st.heads, compress(*earlier), pool, count, st.affine)
    st.refine_seqs = picked_sequences(st.d, count, st.seed, st.refine_picks)
    with st.oracle.phase("refinement"):
        st.refine_ans = np.array(st.oracle.query_many(st.refine_seqs), dtype=np.float64)
    rows = compress([*earlier[0], *st.refine_seqs], [*earlier[1], *st.refine_ans])
    st.heads, st.beta_fit = gauss_newton(st.heads, st.beta_fit, rows, st.affine)
    # st.kind stays the earlier fit's: it decides the prediction bound (result.py).
    if refined_figure(st.d, st.H, st.affine):
        st.estimate_groups = refined_error_groups(st.heads, st.beta_fit, rows, st.affine, st.unit)
        st.estimate = group_max(st.estimate_groups)
    elif st.kind == "u-groups":
        at = heads_error_estimate(
            st.U, st.B, st.f0, st.ans, st.t, st.heads, st.beta_fit, st.unit, st.affine
        )
        st.estimate = max(st.estimate, at)
    _within_parameter_tolerance(
        st.estimate, st.prtol, st.H, st.oracle.arithmetic, st.figure, st.decoded.gap
    )

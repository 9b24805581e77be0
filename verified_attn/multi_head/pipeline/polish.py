"""Stage 8, polish and figures: the decoded heads' parameter error estimate and prediction
bound, from the u-groups (large boxes), a dense joint fit on every answer (small boxes), or
a fit of every parameter on every answer and on random sequences (the sequence polish: a
coarse box always, a float64 box when its estimate asks for it and the rule allows it).
"""

from __future__ import annotations

import math

import numpy as np

from verified_attn.errors import PrecisionExhausted
from verified_attn.multi_head.canonical_bounds import follow_up_query_bound, parameter_count
from verified_attn.multi_head.pipeline.budget import (
    _within_parameter_tolerance,
    conditioning_cost,
    polish_after,
    polish_wanted,
    precision_polish_count,
    within_follow_up,
)
from verified_attn.multi_head.pipeline.poles import _refine
from verified_attn.multi_head.pipeline.reorder import reorder_groups
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.multi_head.pipeline.verify import (
    _design_answers,
    _parameter_error_estimate,
    _prediction_ratio,
    heads_error_estimate,
    joint_polish,
    polish_figures,
    prediction_check,
)
from verified_attn.multi_head.prediction_bound import PREDICTION_SEQUENCES, joint_prediction_bound
from verified_attn.multi_head.sequence_blocks import DENSE_FIGURE_PARAMETERS, polish_fit
from verified_attn.multi_head.sequence_fit import compress, polish_sequences
from verified_attn.verification import fresh_sequences

__all__ = ["polish_stage"]

Heads = list[tuple[np.ndarray, ...]]
Figures = tuple[Heads, float, float, tuple[float, float], str, str]


def _learning_rows(st: FloatState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The learning answers as rows (u, b, log k, F): F(0) rows carry log k = -inf."""
    ncols = len(st.B)
    us = [np.zeros(st.d)] * ncols + [u for u, _ in st.pairs for _ in st.ratios]
    bs = [*st.B] + [st.B[j] for _, j in st.pairs for _ in st.ratios]
    logk = [-np.inf] * ncols + [math.log(k / m) for _ in st.pairs for k, m in st.ratios]
    ys = np.concatenate([st.f0, st.ans.ravel()])
    return np.array(us), np.array(bs), np.array(logk), ys


def _sequence_polish(st: FloatState, count: int, start: Heads, start_beta: float) -> Figures:
    """The heads start a fit of every parameter on every answer, the design's and those of
    ``count`` random sequences (phase ``polish``), whose Jacobian is far better conditioned
    than the u-groups' (:mod:`.sequence_fit`); the figures are this fit's."""
    st.polish_seqs = polish_sequences(st.d, count, st.seed)
    with st.oracle.phase("polish"):
        st.polish_ans = np.array(st.oracle.query_many(st.polish_seqs), dtype=np.float64)
    design_seqs, design_ys = _design_answers(
        st.U, st.B, st.f0, st.ans, st.tie_answers, st.H, st.unit
    )
    seq_rows = compress([*design_seqs, *st.polish_seqs], [*design_ys, *st.polish_ans])
    if within_follow_up(st.d, st.H, st.affine, unit=st.unit):
        # A float32 box's one-column links are often within their noise: each group's order
        # is the one the random sequences' answers take (no query; the fit decides the
        # rest). Up to four heads: H! orders a group.
        start, _ = reorder_groups(
            st.U, start, start_beta, compress(st.polish_seqs, list(st.polish_ans)), affine=st.affine
        )
    fit = polish_fit(start, start_beta, seq_rows, affine=st.affine)
    estimate, prediction, sigma_min = polish_figures(
        st.oracle.arithmetic, fit.heads, fit.beta, st.affine, seq_rows, st.seed, st.lengths
    )
    blocks = parameter_count(st.d, st.H, st.affine) > DENSE_FIGURE_PARAMETERS
    figure = (
        f"smallest singular value {'at least ' if blocks else ''}{sigma_min:.2e} of the "
        f"Jacobian on all {len(seq_rows)} answers, {count} of them on random sequences"
        + (" (per-head block bounds)" if blocks else "")
    )
    return fit.heads, fit.beta, estimate, prediction, figure, "sequences"


def _decoded_figures(st: FloatState) -> Figures:
    """The decoded heads with the figures of the joint polish (small boxes) or of the
    u-groups; PrecisionExhausted over the parameter tolerance."""
    dec, arith, H, affine = st.decoded, st.oracle.arithmetic, st.H, st.affine
    rows = _learning_rows(st)
    ys = rows[3]
    if st.options.joint_polish and joint_polish(st.d, H, affine, len(ys)):
        st.options.mark("joint_polish")
        heads, beta_fit, residuals, sigma_min, sensitivity, jrows = _refine(
            dec.heads, dec.beta, rows, affine
        )
        estimate = _parameter_error_estimate(
            arith, heads, beta_fit, residuals, ys, sigma_min, sensitivity, H
        )
        figure = f"smallest singular value {sigma_min:.2e} of the joint Jacobian"
        _within_parameter_tolerance(estimate, st.prtol, H, arith, figure, dec.gap)
        # The predictions' own first-order bound on the verification's sequences and more
        # from the same generator (none is asked).
        sequences = fresh_sequences(st.d, PREDICTION_SEQUENCES, seed=st.seed, lengths=st.lengths)
        noise = float(np.sqrt(np.sum(residuals**2) + np.sum((st.unit * np.abs(ys)) ** 2)))
        bounds = joint_prediction_bound(heads, sequences, affine, jrows, noise, len(ys))
        prediction = _prediction_ratio(
            arith, heads, beta_fit if affine else 0.0, affine, sequences, bounds
        )
        return heads, beta_fit, estimate, prediction, figure, "joint"
    assert dec.estimate is not None
    heads, beta_fit = dec.heads, dec.beta
    figure = f"smallest singular value {dec.sigma_min:.2e} of the u-group Jacobians"
    # The same figure from the returned heads and the answers alone (what the certificate
    # checker recomputes): the stated tolerance covers both.
    estimate = max(
        dec.estimate,
        heads_error_estimate(st.U, st.B, st.f0, st.ans, st.t, heads, beta_fit, st.unit, affine),
    )
    _within_parameter_tolerance(estimate, st.prtol, H, arith, figure, dec.gap)
    prediction = prediction_check(
        arith, st.U, st.B, st.f0, st.ans, st.t, heads, beta_fit, affine, st.seed, st.lengths
    )
    return heads, beta_fit, estimate, prediction, figure, "u-groups"


def polish_stage(st: FloatState, learning: int) -> None:
    """The heads and their figures: a coarse box always polished on sequences; otherwise the
    decoded figures, or the precision polish when :func:`polish_wanted` asks for it with
    ``learning`` queries asked so far. PrecisionExhausted if the decoding failed or the
    estimate is over the parameter tolerance."""
    dec = st.decoded
    if dec.estimate is None:
        raise PrecisionExhausted(dec.failure)
    d, H, affine = st.d, st.H, st.affine
    # Under the follow-up's count a conditioning round's queries are the polish's.
    conditioned = sum(conditioning_cost(d, H, affine, r["k"], unit=st.unit) for r in st.replaced)
    polish = polish_after(d, H, affine, conditioned, unit=st.unit)
    precision = precision_polish_count(d, H, affine, unit=st.unit)
    if polish:
        # A coarse (float32) box: always polished (the u-groups' figures are 1e-3).
        found = _sequence_polish(st, polish, dec.heads, dec.beta)
    else:
        decoded: Figures | None
        try:
            decoded = _decoded_figures(st)
        except PrecisionExhausted as exc:
            decoded, refusal = None, exc
        if st.options.precision_polish and polish_wanted(
            None if decoded is None else decoded[2],
            precision,
            learning,
            st.bound,
            follow_up_query_bound(d, H),
        ):
            st.options.mark("precision_polish")
            start = (decoded[0], decoded[1]) if decoded else (dec.heads, dec.beta)
            found = _sequence_polish(st, precision, *start)
        elif decoded is None:
            raise refusal
        else:
            found = decoded
    st.heads, st.beta_fit, st.estimate, st.prediction, st.figure, st.kind = found
    _within_parameter_tolerance(st.estimate, st.prtol, H, st.oracle.arithmetic, st.figure, dec.gap)

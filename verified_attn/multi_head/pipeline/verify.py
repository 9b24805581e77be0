"""Stages 7-8, polish figures and verification: the first-order parameter error, the
prediction bound and the learning answers' check.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_bounds import (
    parameter_count,
)
from verified_attn.multi_head.float_fit import (
    group_model,
    row_sensitivities,
    sigma_min_groups,
)
from verified_attn.multi_head.float_linear_fit import (
    sigma_min_linear,
)
from verified_attn.multi_head.pipeline.design import (
    _DOUBLE_UNIT,
    _PARAMETER_SAFETY,
    box_precision,
    float_probe_matrix,
)
from verified_attn.multi_head.pipeline.pilot import (
    _not_reproduced,
    learning_sequences,
)
from verified_attn.multi_head.pipeline.rules import (
    _DENSE_POLISH,
)
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.multi_head.prediction_bound import (
    PREDICTION_SEQUENCES,
    PREDICTION_SIGMAS,
    groups_prediction_bound,
    joint_prediction_bound,
)
from verified_attn.multi_head.sequence_blocks import DENSE_FIGURE_PARAMETERS, block_figures
from verified_attn.multi_head.sequence_fit import (
    SequenceRows,
    covariance_rows,
    normal_equations,
    pack_parameters,
)
from verified_attn.prediction_rule import rule_ratios
from verified_attn.verification import (
    agree,
    float_floor,
    fresh_sequences,
    verify_model,
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
    the prediction (:func:`~verified_attn.agreement.tolerance`, with the floor of these
    predictions; ``bounds``: per sequence, worst case and standard deviation, from
    :mod:`.prediction_bound`); PrecisionExhausted, naming the sequence, if the first is over
    1. So a result claims of its predictions on sequences it did not ask what it verified on
    those it asked: agreement under the one rule, here to first order in the answers' noise."""
    model = MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in heads], beta=beta if affine else None
    )
    preds = np.array([float(model.evaluate_batch(X[None])[0]) for X in sequences])
    allowed, ratios, worst_case, worst = rule_ratios(arith, preds, beta, bounds)
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
    prtol = float(cast(float, getattr(arith, "parameter_rtol", arith.rtol)))
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
    What the learner holds a polished result to and the certificate checker recomputes.
    Past :data:`~.sequence_blocks.DENSE_FIGURE_PARAMETERS` parameters the figures are the
    per-head block bounds (:func:`~.sequence_blocks.block_figures`: at least the dense
    ones, and sigma_min a lower bound), which hold no P x P matrix."""
    unit = float(getattr(arith, "unit_roundoff", _DOUBLE_UNIT))
    cov_rows: Any
    if len(pack_parameters(heads, beta, affine)) > DENSE_FIGURE_PARAMETERS:
        figs = block_figures(heads, beta, rows, affine=affine)
        residuals, cov_rows = figs.residuals, figs.rows
        sigma_min, sensitivity = figs.sigma_min, figs.sensitivity
    else:
        residuals, A, _ = normal_equations(heads, beta, rows, affine)
        cov_rows, sigma_min, sensitivity = covariance_rows(A)
        del A
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
    seqs = learning_sequences(U, B, H, tie_answers, unit=unit, samples=ans.shape[1])
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


def verify_stage(st: FloatState) -> None:
    """Stage 9, verification: the heads in their canonical order (by W row-major) must
    reproduce every learning answer and every fresh verification answer under the one
    agreement rule; one miss shows the fit wrong (PrecisionExhausted), not the box out of
    class (that needs a residual no H-head fit removes: ``too_few_heads_float``)."""
    order = sorted(range(len(st.heads)), key=lambda h: tuple(st.heads[h][0].ravel()))
    st.heads = [st.heads[h] for h in order]
    if st.estimate_groups is not None:  # per-head figures follow their heads
        st.estimate_groups = {
            name: [figures[h] for h in order] if isinstance(figures, list) else figures
            for name, figures in st.estimate_groups.items()
        }
    bias = st.beta_fit if st.affine else 0.0
    st.candidate = MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in st.heads],
        beta=st.beta_fit if st.affine else None,
    )
    arith = st.oracle.arithmetic
    try:
        where = "a learning query"
        _check_learning_fit(
            arith,
            st.candidate,
            st.f0,
            st.ans,
            st.tie_answers,
            st.U,
            st.B,
            st.H,
            st.affine,
            (
                [*st.polish_seqs, *st.refine_seqs],
                np.concatenate([st.polish_ans, st.refine_ans]),
            ),
        )
        where = "a fresh sequence"
        if st.verify:
            st.checked = verify_model(
                st.oracle,
                st.candidate,
                count=st.verify,
                seed=st.seed,
                lengths=st.lengths,
                bias=bias,
                what="the recovered canonical heads",
            )
    except ModelClassMismatch as exc:
        raise _not_reproduced(exc, where, st.H, arith, st.estimate, st.figure, bias) from exc

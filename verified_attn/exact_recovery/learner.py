"""Theorem 4.1: learn a single attention head from exactly d^2 + d queries.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [0, 5])     # note v_1 = 0
>>> rec = va.learn_single_head(va.Oracle(model, arithmetic="exact"))
>>> rec.W == model.W and rec.v == model.v
True
>>> rec.queries, rec.bound
(6, 6)

The algorithm (see the documentation's theory page): length-1 queries [e_i] give v; then, for a rational invertible
design U = [u_1..u_d] with u_k^T v != 0, the length-2 query [e_j + t u_k; e_j] has
``alpha_1 = sigmoid(t u_k^T W e_j)`` and ``f = v_j + alpha_1 t u_k^T v``, so
``u_k^T W e_j = logit((f - v_j) / (t u_k^T v)) / t``. Stacking gives ``U^T W = M``.

Every query is an exact dyadic rational (exactly representable in float64), and ``U^{-1}`` is
computed exactly; the answers are the only inexact numbers, so the same code runs in exact,
certified and float arithmetic. The affine model adds the query [0] (beta) and d queries
[t u_k; 0] (c): d^2 + 2d + 1 in all.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Unpack

import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import RunRecord, union_balls
from verified_attn.design import (
    SingleHeadDesign,
    check_design,
    default_design,
    unit_query,
    user_design,
    uv,
)
from verified_attn.errors import ModelClassMismatch
from verified_attn.exact_recovery.extended_decode import extended_w
from verified_attn.exact_recovery.float_bound import (
    DecodedHead,
    parameter_error_estimate,
    precision_or_mismatch,
    require_prediction_bound,
)
from verified_attn.learner_options import ExactOptions, learner_options
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.precision import ErrorFigures, figures_record, stated_relative_error
from verified_attn.probing import (
    MAX_RESCALES,
    RESCALE_FACTOR,
    apply_exact,
    finalize,
    learned_single_head,
    logits,
    measured_array,
    public_params,
    raise_bad_probe,
    reconstruction_assumptions,
    require_nonzero_v,
    saturated,
    verify_reconstruction,
)
from verified_attn.progress import reporting
from verified_attn.recovery import SingleHeadRecovery, enclosures_from_balls
from verified_attn.validation import (
    check_bool,
    check_oracle,
    number_bytes,
    require_memory,
)
from verified_attn.verification import (
    require_bias_resolution,
)

__all__ = ["decode_single_head", "learn_single_head", "query_bound"]

THEOREM = "thm-4.1"


def query_bound(d: int, *, affine: bool = False) -> int:
    """The exact learning-query count: d^2 + d, or d^2 + 2d + 1 for the affine model.

    >>> query_bound(5), query_bound(5, affine=True)
    (30, 36)
    """
    return d * d + (2 * d + 1 if affine else d)


# ---------------------------------------------------------------------------------------
# Decoding: answers -> parameters. Pure; shared by the learner and certificate checks.
# ---------------------------------------------------------------------------------------


def _probe_ratios(
    arith: Arithmetic,
    design: SingleHeadDesign,
    answers: dict[str, Any],
) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
    """v (and beta) from the length-1 answers, and y = alpha_1 for every length-2 probe.

    Returns ``(base, Y, Y0)`` with Y[k, j] for the W probes and Y0[k] for the c probes.
    """
    d = design.d
    beta = answers["beta"] if design.affine else arith.rational(Fraction(0))
    v = measured_array(arith, [answers["v"][i] - beta for i in range(d)])
    products = uv(arith, design, v)
    F = measured_array(arith, answers["W"])  # F[k][j]
    t = _scale_array(arith, design)
    if design.anchor == 1:
        Y = (F - v[None, :] - beta) / (t * products[:, None])
    else:  # the probe [a e_j + (t / a) u_k; a e_j] (non-affine: beta = 0)
        a = float(design.anchor) if arith.name == "float" else arith.rational(design.anchor)
        Y = (F - a * v[None, :]) / ((t / a) * products[:, None])
    Y0 = None
    if design.affine:
        assert design.c_scales is not None
        t0 = measured_array(arith, [arith.rational(s) for s in design.c_scales])
        Y0 = (measured_array(arith, answers["c"]) - beta) / (t0 * products)
    return {"v": v, "beta": beta, "uv": products}, Y, Y0


def decode_single_head(
    arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> dict[str, Any]:
    """Parameters from the answers, in ``arith`` (call inside ``arith.context()``).

    Raises :class:`ModelClassMismatch` (with the probe) if a probe's ratio is not in (0, 1),
    and :class:`PrecisionExhausted` if certified arithmetic cannot decide that it is.
    """
    base, Y, Y0 = _probe_ratios(arith, design, answers)
    d = design.d
    L, bad = logits(arith, Y)
    if bad:
        k, j = bad[0]
        raise_bad_probe(arith, Y[k, j], design.w_query(j, k), answers["W"][k][j])
    for k, j in _irrational(arith, L):
        _raise_irrational_logit(L[k, j], design.w_query(j, k), answers["W"][k][j])
    t = _scale_array(arith, design)
    M = L / t  # M[k, j] = u_k^T (W e_j + c)
    params: dict[str, Any] = {"v": base["v"]}
    if design.affine:
        assert Y0 is not None and design.c_scales is not None
        L0, bad0 = logits(arith, Y0)
        if bad0:
            (k,) = bad0[0]
            raise_bad_probe(arith, Y0[k], design.c_query(k), answers["c"][k])
        for (k,) in _irrational(arith, L0):
            _raise_irrational_logit(L0[k], design.c_query(k), answers["c"][k])
        t0 = measured_array(arith, [arith.rational(s) for s in design.c_scales])
        m0 = L0 / t0
        M = M - m0[:, None]
        params["beta"] = base["beta"]
    extended = extended_w(design, answers) if arith.name == "float" else None
    if extended is not None:  # the default design, non-affine: see extended_decode
        params["W"] = extended
        return params
    fast = design.solve_float(M) if arith.name == "float" else None
    if fast is not None:  # the default design's U^{-T}, applied structurally
        params["W"] = fast
        if design.affine:
            params["c"] = design.solve_float(m0.reshape(d, 1))[:, 0]  # type: ignore[index]
        return params
    inv_t = design.U_inverse_flint().transpose()
    params["W"] = apply_exact(arith, inv_t, M)
    if design.affine:
        params["c"] = apply_exact(arith, inv_t, m0.reshape(d, 1))[:, 0]
    return params


def _scale_array(arith: Arithmetic, design: SingleHeadDesign) -> np.ndarray:
    """The W probe scales t[k, j] as numbers of ``arith`` (float: the design's float view)."""
    if arith.name == "float":
        return design.scales_float()
    return measured_array(arith, [[arith.rational(s) for s in row] for row in design.scales])


def _irrational(arith: Arithmetic, L: np.ndarray) -> list[tuple[int, ...]]:
    """Exact mode: the probes whose logit is not rational (a head has rational scores)."""
    if arith.name != "exact":
        return []
    return [ix for ix in np.ndindex(L.shape) if not sympy.sympify(L[ix]).is_Rational]


def _raise_irrational_logit(logit: Any, query: Any, answer: Any) -> None:
    # Checked here, per probe, so that the error carries the query and its answer.
    raise ModelClassMismatch(
        f"not a single attention head with rational parameters: on the query "
        f"{np.asarray(query).tolist()} the answer {answer} gives the score difference "
        f"{logit}, which is not rational (a head with rational W, c has rational scores)",
        query=query,
        observed=answer,
        expected="an answer v_j + sigmoid(s) u_k^T v with s rational",
    )


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


def learn_single_head(
    oracle: Oracle,
    *,
    affine: bool | None = None,
    design: Any = None,
    **options: Unpack[ExactOptions],
) -> SingleHeadRecovery:
    """Recover (W, v) — and (c, beta) for the affine model — from black-box queries.

    ``affine``: None takes the class the oracle declares (``oracle.model_class``), else the
    paper's model. ``design``: an invertible rational d x d matrix U to use instead of the
    default (each u_k^T v must be nonzero). ``verify``: fresh random sequences the learner
    did not use, of the given ``lengths`` in turn, checked against the recovered model
    (0: not verified, and the result says so). ``denominator_bound``: certified mode
    reconstructs each entry as the unique rational with denominator at most this (default
    2^(precision/4)) inside its ball, then verifies; the result records that assumption.
    ``progress``: a bar or callback over the queries (:mod:`verified_attn.progress`).

    Raises :class:`NotIdentifiable` if v = 0, :class:`ModelClassMismatch` if the oracle is
    not a single head, :class:`QueryBudgetExceeded` (before any query) if the budget is too
    small, :class:`PrecisionExhausted` if certified arithmetic cannot decide a needed sign.
    """
    check_oracle(oracle)
    affine = check_bool(affine, "affine", allow_none=True)
    if affine is None:
        affine = oracle.model_class == "single-head-affine"
    verify, seed, lengths, denominator_bound, progress = learner_options(
        "learn_single_head", options
    )
    arith = oracle.arithmetic
    d = oracle.d
    bound = query_bound(d, affine=affine)
    # W, its answers and the logits: a few d x d arrays of the oracle's numbers.
    require_memory(
        4 * d * d * number_bytes(arith.name, arith.precision), f"learn_single_head at d = {d}"
    )
    oracle.require_remaining(bound, verify, f"learn_single_head at d = {d}")
    with (
        reporting(oracle, progress, "learn_single_head", total=bound + verify),
        oracle.run() as run,
        arith.context(),
    ):
        answers, v = _ask_v(oracle, affine)
        if design is None:
            the_design = default_design(arith, v, d, affine)
        else:
            the_design = user_design(design, d, affine)
        check_design(arith, the_design, v)
        refine = arith.name == "float" and (arith.rtol or 0.0) >= LOW_PRECISION_RTOL
        if arith.name == "float" and not affine and not refine:
            the_design.anchor = FLOAT_ANCHOR
        _ask_w(oracle, the_design, affine, answers)
        if arith.name != "exact":
            _rescale_saturated(oracle, arith, the_design, answers)
        refined = _refine_low_precision(oracle, arith, the_design, answers) if refine else []
        params = decode_single_head(arith, the_design, answers)
        exact, enclosures, params = finalize(arith, params, denominator_bound)
        checked, exact, params, refuted, estimate = _verify_and_bound(
            oracle, the_design, answers, (params, enclosures, exact), verify, seed, lengths
        )
    counts = run.counts
    formula = "d^2 + 2d + 1" if affine else "d^2 + d"
    terms = {formula: bound, "refine round of a low-precision box, at most d^2": d * d}
    notes = _notes(counts, refuted, arith.name == "certified" and not exact)
    assumptions = reconstruction_assumptions(arith, exact, denominator_bound)
    out_params = public_params(params, exact, arith, affine)
    model = learned_single_head(out_params, exact, affine)
    # Built on request: serialising every answer costs seconds at d = 512.
    record = RunRecord(arith, seed, counts, bound, checked, assumptions)
    certificate = functools.partial(
        _certificate_data, record, the_design, answers, out_params, exact, refined, estimate
    )
    return SingleHeadRecovery.from_record(
        record,
        theorem=THEOREM,
        parameters=out_params,
        learned_model=model,
        exact=exact,
        bound=bound + d * d if refine else bound,
        bound_terms=terms if refine else {},
        parameter_count=bound,
        rounds=2 + (1 if counts.by_phase.get("rescale") else 0),
        enclosures=None if enclosures is None else enclosures_from_balls(enclosures),
        notes=notes,
        certificate_data=certificate,
        parameter_error_estimate=estimate,
    )


def _verify_and_bound(
    oracle: Oracle,
    design: SingleHeadDesign,
    answers: dict[str, Any],
    decoded: tuple[dict[str, Any], Any, bool],
    verify: int,
    seed: int,
    lengths: Sequence[int],
) -> tuple[Any, bool, dict[str, Any], str | None, float | None]:
    """Verification, then (float) the prediction bound and the parameter estimate:
    ``(verification, exact, params, refuted note, estimate)``.

    A float refutation the answers' rounding explains is refused with
    :class:`PrecisionExhausted` (:func:`~verified_attn.exact_recovery.float_bound.
    precision_or_mismatch`); the estimate is relative to max(1, |beta|, largest entry)
    (:func:`~verified_attn.exact_recovery.float_bound.parameter_error_estimate`), None for
    exact and certified results.
    """
    params, enclosures, exact = decoded
    arith = oracle.arithmetic
    head = DecodedHead(arith, design, answers, params)
    try:
        checked, exact, params, refuted = verify_reconstruction(
            oracle,
            params,
            enclosures,
            exact,
            design.affine,
            count=verify,
            seed=seed,
            lengths=lengths,
        )
    except ModelClassMismatch as exc:
        precision_or_mismatch(head, exc, seed=seed, lengths=lengths)
        raise
    require_prediction_bound(head._replace(params=params), seed=seed, lengths=lengths)
    if arith.name != "float":
        return checked, exact, params, refuted, None
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    return checked, exact, params, refuted, parameter_error_estimate(unit, design, answers, params)


def _ask_v(oracle: Oracle, affine: bool) -> tuple[dict[str, Any], Any]:
    """The beta (affine) and v phases: the answers so far and the measured v."""
    arith, d = oracle.arithmetic, oracle.d
    answers: dict[str, Any] = {}
    if affine:
        with oracle.phase("beta"):
            answers["beta"] = oracle.query(unit_query(d, None))
    with oracle.phase("v"):
        answers["v"] = oracle.query_many([unit_query(d, i) for i in range(d)])
    beta0 = answers["beta"] if affine else arith.rational(Fraction(0))
    v = measured_array(arith, [a - beta0 for a in answers["v"]])
    require_nonzero_v(arith, v)
    if affine:
        v_scale = max(abs(float(x)) for x in v) if arith.name == "float" else 0.0
        require_bias_resolution(arith, float(beta0), v_scale, "learn_single_head")
    return answers, v


def _ask_w(oracle: Oracle, the_design: Any, affine: bool, answers: dict[str, Any]) -> None:
    """The W phase (and c, affine): d^2 (+ d) probes of the design, into ``answers``."""
    d = oracle.d
    with oracle.phase("W"):
        answers["W"] = [oracle.query_many(the_design.w_queries(k), owned=True) for k in range(d)]
        if affine:
            answers["c"] = oracle.query_many([the_design.c_query(k) for k in range(d)])


def _notes(counts: QueryCounts, refuted: str | None, balls: bool) -> list[str]:
    """The result's notes: a refuted reconstruction, re-asked probes, entries left as balls."""
    notes = [refuted] if refuted else []
    if counts.by_phase.get("rescale"):
        notes.append(
            f"{counts.by_phase['rescale']} probes saturated the softmax and were re-asked at a "
            "smaller scale; these extra queries are counted in 'queries'"
        )
    if balls:
        notes.append("some entries did not reconstruct to a unique rational; W, v are balls")
    return notes


#: The float learner's probes [a e_j + (t / a) u_k; a e_j] use a = 1/8 (non-affine, at
#: a float64-class precision): the score is the same as [e_j + t u_k; e_j]'s, but the
#: reference value a v_j, which the box's rounding of the answer scales with and which
#: the decoding subtracts at full weight, is 64 times smaller against the probe's
#: ``(t / a) u_k^T v`` (``|v_j| <= 4 |u_k^T v|`` in the default design). Measured on
#: random float64 heads at d = 64 to 256: about one more bit (2^-49.1 .. 2^-50.5 with
#: a = 1, 2^-50.6 .. 2^-51.5 with a = 1/8); a = 1/2 .. 1/64 give the same to 0.3 bit.
FLOAT_ANCHOR = Fraction(1, 8)
#: A float box that declares this relative precision or worse (e.g. float32 modules) gets a
#: second round of W probes at better-conditioned scales.
LOW_PRECISION_RTOL = 1e-5
#: The score t * u_k^T (W e_j + c) a refined probe aims at: it maximises s^2 sigmoid'(s),
#: so an answer's error moves the decoded entry least (the error scales as
#: 1 / (t^2 sigmoid'(t m)) for the entry m).
REFINE_TARGET = 2.4
#: Refined scales are powers of two up to this (probes stay exact dyadic rationals).
REFINE_MAX_SCALE = 2**10


def _refine_low_precision(
    oracle: Oracle, arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> list[tuple[int, int, int]]:
    """Re-ask each W probe at t = 2^n with |t m| near :data:`REFINE_TARGET`, where that is
    at least 4x larger than its first scale (phase "refine", counted in ``queries``).
    Returns the refined probes ``(k, j, n)`` (the certificate records them: a refined
    probe's scale is 2^n 16^-m after m re-asks for saturation).

    A float32 box answers to ~1e-7; the logit amplifies that by 1 / (t^2 sigmoid'(t m)),
    which for a small entry m at t = 1 is ~4 / t^2 m^2 times worse than at the target.
    """
    _, Y, _ = _probe_ratios(arith, design, answers)
    L, bad = logits(arith, Y)
    if bad:
        return []  # decoding will name the bad probe
    todo = []
    for k in range(design.d):
        for j in range(design.d):
            t = design.scales[k][j]
            m = abs(float(L[k, j]) / float(t))
            want = REFINE_MAX_SCALE if m == 0 else REFINE_TARGET / m
            n = int(np.floor(np.log2(min(want, REFINE_MAX_SCALE))))
            if n >= 2 and Fraction(2) ** n >= 4 * t:
                todo.append((k, j, Fraction(2) ** n))
    if not todo:
        return []
    for k, j, t_new in todo:
        design.set_scale(k, j, t_new)
    with oracle.phase("refine"):
        new = oracle.query_many([design.w_query(j, k) for k, j, _ in todo])
    for (k, j, _), a in zip(todo, new, strict=True):
        answers["W"][k][j] = a
    _rescale_saturated(oracle, arith, design, answers)
    return [(k, j, t.numerator.bit_length() - 1) for k, j, t in todo]


def _rescale_saturated(
    oracle: Oracle, arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> None:
    """Re-ask probes whose softmax saturated, at 1/16 of the scale, until they do not.

    In float mode a ratio y within 1e-6 of 0 or 1 makes the logit ill-conditioned; in
    certified mode a ball that cannot be shown inside (0, 1) is undecided. Shrinking t
    shrinks the score difference t u_k^T W e_j. Each re-ask is a counted query.
    """
    for _ in range(MAX_RESCALES):
        _, Y, Y0 = _probe_ratios(arith, design, answers)
        # Float saturation reads y alone; certified mode also needs each probe's scale.
        scales = None if arith.name == "float" else np.array(design.scales, dtype=object)
        c_scales = (
            None
            if arith.name == "float" or design.c_scales is None
            else np.array(design.c_scales, dtype=object)
        )
        todo = saturated(arith, Y, scales)
        todo0 = saturated(arith, Y0, c_scales) if Y0 is not None else []
        if not todo and not todo0:
            return
        for k, j in todo:
            design.set_scale(k, j, design.scales[k][j] * RESCALE_FACTOR)
        for (k,) in todo0:
            assert design.c_scales is not None
            design.set_c_scale(k, design.c_scales[k] * RESCALE_FACTOR)
        with oracle.phase("rescale"):
            new = oracle.query_many(
                [design.w_query(j, k) for k, j in todo] + [design.c_query(k) for (k,) in todo0]
            )
        for (k, j), a in zip(todo, new[: len(todo)], strict=True):
            answers["W"][k][j] = a
        for (k,), a in zip(todo0, new[len(todo) :], strict=True):
            answers["c"][k] = a


# ---------------------------------------------------------------------------------------
# Certificate data.
# ---------------------------------------------------------------------------------------


def _certificate_data(
    run: RunRecord,
    design: SingleHeadDesign,
    answers: dict[str, Any],
    params: dict[str, Any],
    exact: bool,
    refined: list[tuple[int, int, int]],
    estimate: float | None = None,
) -> dict[str, Any]:
    """Everything needed to re-check the recovery without the oracle, as exact JSON.

    The design (U and every probe scale) is stored as exact rationals; every answer and
    parameter with :func:`verified_attn.serialize.dump_number` (rationals "p/q", floats
    bit-exact hex, balls as exact dyadic midpoint and radius). Shapes are normalised
    whatever the arithmetic: ``W`` is a d x d nested list, ``v`` and ``c`` flat lists of
    length d, ``beta`` one number. The checker is
    :mod:`verified_attn.certificates.single_head`.

    Certified balls that did not reconstruct are stored widened just enough to contain the
    balls a checker re-decodes from the *stored* answers: flint rounds a reloaded radius up
    (by one unit in its 30-bit radius), so the re-decoded balls are a hair wider than the
    learner's. The union of both still contains the truth, and lets the checker demand
    containment exactly, with no tolerance.
    """
    from verified_attn.serialize import dump_number, dump_rational, load_number

    arith = run.arith
    if arith.name == "certified" and not exact:
        with arith.context():
            reloaded = {
                "v": [load_number(dump_number(a)) for a in answers["v"]],
                "W": [[load_number(dump_number(a)) for a in row] for row in answers["W"]],
            }
            if design.affine:
                reloaded["beta"] = load_number(dump_number(answers["beta"]))
                reloaded["c"] = [load_number(dump_number(a)) for a in answers["c"]]
            again = decode_single_head(arith, design, reloaded)
            params = {name: union_balls(val, again[name]) for name, val in params.items()}

    def dump_param(name: str, val: Any) -> Any:
        if isinstance(val, sympy.MatrixBase):
            val = val.tolist()
        arr = np.asarray(val, dtype=object)
        if name == "beta":
            return dump_number(arr.reshape(-1)[0] if arr.ndim else arr.item())
        if name == "W":
            return [[dump_number(x) for x in row] for row in arr.reshape(design.d, design.d)]
        return [dump_number(x) for x in arr.reshape(-1)]  # v, c: columns become flat lists

    data = run.header(
        "single-head",
        THEOREM,
        design.d,
        bias=float(params["beta"]) if design.affine and arith.name == "float" else None,
    )
    data.update(
        {
            "affine": design.affine,
            "design": {
                "U": [[dump_rational(q) for q in row] for row in design.U],
                "scales": [[dump_rational(q) for q in row] for row in design.scales],
                "c_scales": None
                if design.c_scales is None
                else [dump_rational(q) for q in design.c_scales],
                "refined": [list(r) for r in refined],
                **({} if design.anchor == 1 else {"anchor": dump_rational(design.anchor)}),
            },
            "answers": {
                "beta": dump_number(answers["beta"]) if design.affine else None,
                "v": [dump_number(a) for a in answers["v"]],
                "W": [[dump_number(a) for a in row] for row in answers["W"]],
                "c": [dump_number(a) for a in answers["c"]] if design.affine else None,
            },
            "result": {
                "exact": exact,
                "parameters": {k: dump_param(k, p) for k, p in params.items()},
            },
        }
    )
    checked = run.verification
    if arith.name == "float" and estimate is not None:  # the figures in bits
        gap = checked.max_gap if checked is not None and checked.count else None
        head = [tuple(params[k] for k in ("W", "v", "c") if k in params)]
        beta = float(params["beta"]) if design.affine else 0.0
        data["result"]["parameter_error_estimate"] = dump_number(float(estimate))
        data["result"]["error_figures"] = figures_record(
            ErrorFigures(stated_relative_error(float(estimate), head, beta), gap)
        )
    return data

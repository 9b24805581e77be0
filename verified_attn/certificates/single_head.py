"""Re-check a single-head (Theorem 4.1) certificate from its stored answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.single_head import verify
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [0, 5])
>>> data = va.learn_single_head(va.Oracle(model, "exact")).certificate()
>>> print(verify(data).summary[-1])
verification: 8 fresh sequences (seed 0, lengths 1, 2, 3, 4, 6, 8, 16) equal with the claimed model
>>> data["result"]["parameters"]["W"][0][0] = {"rational": "2/1"}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result W[0][0]: claimed 2, the stored answers give 1

What is re-checked, in order, with the core arithmetic only (not the learner's code):

1. header and counts (:mod:`~verified_attn.certificates.kernel`): the number of stored
   answers is d^2 + d (affine d^2 + 2d + 1) and, with the re-asked probes, equals the
   learning count; every probe scale is 16^-n and the n add up to the re-asks;
2. the design: U is invertible and every u_k^T v is nonzero for v from the stored answers
   (certainly nonzero, in certified mode);
3. decoding, written out here: v_i = f([e_i]) - beta; for each probe
   y = (f - v_j - beta) / (t u_k^T v), M = logit(y) / t (affine: minus the c probes'
   logit / t), and ``W = U^{-T} M``, compared with the claim (a float, non-affine design
   may state an anchor a = 2^-n, n <= :data:`MAX_ANCHOR_EXPONENT`: its probes are
   [a e_j + (t / a) u_k; a e_j] and y = (f - a v_j) / ((t / a) u_k^T v)):

   - ``exact``: ``==``;
   - ``certified``: a claimed rational must lie in its recomputed ball *and* be the only
     rational there with denominator at most D (D from the ball's width), so any rational
     head with such denominators that gave these answers is the claimed one; a claimed ball
     must contain the recomputed ball (exact endpoint comparison);
   - ``float``: agreement to :data:`FLOAT_RTOL` relative to the parameter's largest entry
     (for W and c, which come out of logits with absolute rounding noise, at least 1): the
     same operations in the same order, up to another BLAS or libm's last few ulps;
4. verification: the stored answers to the fresh sequences the seed determines agree with
   the claimed model under the learner's one rule.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic, fmpq_matrix
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    Claimed,
    check_phases,
    check_seed,
    check_theorem,
    claimed_parameters,
    compare_parameters,
    head_predictor,
    logit,
    passed,
    rescales,
    result_exact,
    show,
)
from verified_attn.certificates.float_figures import check_error_figures, max_gap
from verified_attn.design import SingleHeadDesign
from verified_attn.errors import CertificateError
from verified_attn.exact_recovery.float_bound import parameter_error_estimate
from verified_attn.probing import apply_exact, measured_array
from verified_attn.serialize import short_repr

__all__ = ["FLOAT_RTOL", "verify"]

#: Relative agreement required between claimed and re-decoded float parameters.
FLOAT_RTOL = 1e-12
_RESCALE = Fraction(1, 16)
#: The theorem a single-head certificate claims (the learner's id).
THEOREM = "thm-4.1"
#: Largest d read: decoding is a d x d exact inverse and a d^3 product (twice the
#: largest d the benchmarks run; a d = 512 certificate checks in about a minute).
MAX_D = 1024
#: Work budget of the exact inverse of U: d * (nonzeros of U) * (largest entry's bits).
#: The default design (identity plus a row of ones) at d = 1024 costs ~4e6; a dense
#: rational design costs ~7e6 at d = 100 (0.6 s), and its inverse grows like d^3.
DESIGN_WORK = 10_000_000


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``single-head`` certificate dict; CertificateError naming what fails."""
    head = kernel.parse_header(data, "single-head", max_d=MAX_D)
    check_theorem(head, THEOREM)
    affine = kernel.as_bool(kernel.get(data, "affine"), "affine")
    U, scales, c_scales = _design(data, head.d, affine)
    anchor = _anchor(data, head, affine)
    refined = _refined(data, head)
    lines = [head.describe() + (" (affine)" if affine else "")]
    lines.append(_counts(data, head.d, affine, scales, c_scales, refined))
    arith = head.arith
    with arith.context():
        answers = _answers(data, head, affine)
        # Everything that is only parsed comes before the decoding (the costly part), so a
        # malformed file is refused without it.
        exact = result_exact(data, arith)
        claimed = claimed_parameters(data, arith, _shapes(head.d, affine), exact)
        _check_bias(data, head, claimed, affine)
        lines.append(_check_design(arith, U, answers, affine))
        decoded = _decode(arith, U, (scales, anchor), c_scales, answers, affine)
        lines.append(compare_parameters(arith, exact, claimed, decoded, rtol=FLOAT_RTOL))
        lines.append(_describe_result(head, claimed, exact, affine))
        predict = head_predictor(head, claimed, exact, affine=affine)
        lines.append(kernel.check_verification(data, head, predict))
        if arith.name == "float":
            design = SingleHeadDesign(head.d, affine, U, scales, c_scales, anchor)
            lines.insert(-1, _figures(data, head, claimed, (design, answers), predict))
    check_seed(data, head.seed, "the learner uses one seed for both")
    return passed(head, lines)


def _design(
    data: dict[str, Any], d: int, affine: bool
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[Fraction] | None]:
    # Full paths from the root: a missing or malformed field is named in full.
    U = [
        [kernel.rational(q, f"design.U[{i}][{k}]") for k, q in enumerate(row)]
        for i, row in enumerate(kernel.as_matrix(kernel.get(data, "design.U"), "design.U", d, d))
    ]
    nonzero = [q for row in U for q in row if q]
    bits = max((q.numerator.bit_length() + q.denominator.bit_length() for q in nonzero), default=1)
    if d * len(nonzero) * bits > DESIGN_WORK:  # before any other parsing or linear algebra
        raise CertificateError(
            f"design.U ({len(nonzero)} nonzero entries of up to {bits} bits at d = {d}) is "
            f"heavier than this checker inverts (work {d * len(nonzero) * bits:.2e} > "
            f"{DESIGN_WORK:.0e})"
        )
    scales = [
        [kernel.rational(q, f"design.scales[{k}][{j}]") for j, q in enumerate(row)]
        for k, row in enumerate(
            kernel.as_matrix(kernel.get(data, "design.scales"), "design.scales", d, d)
        )
    ]
    c_raw = kernel.get(data, "design.c_scales")
    c_scales = None
    if affine:
        c_scales = [
            kernel.rational(q, f"design.c_scales[{k}]")
            for k, q in enumerate(kernel.as_list(c_raw, "design.c_scales", d))
        ]
    elif c_raw is not None:
        raise CertificateError("design.c_scales must be null for the non-affine model")
    return U, scales, c_scales


#: The smallest anchor a float design may state is 2^-MAX_ANCHOR_EXPONENT.
MAX_ANCHOR_EXPONENT = 10


def _anchor(data: dict[str, Any], head: kernel.Header, affine: bool) -> Fraction:
    """design.anchor: 1 when absent; else 2^-n, 0 <= n <= MAX_ANCHOR_EXPONENT, float only."""
    raw = kernel.get(data, "design").get("anchor")
    if raw is None:
        return Fraction(1)
    a = kernel.rational(raw, "design.anchor")
    if head.arith.name != "float" or affine:
        raise CertificateError(
            f"design.anchor = {a} is stated, but only a float, non-affine design has an anchor"
        )
    if not any(a == Fraction(1, 2**n) for n in range(MAX_ANCHOR_EXPONENT + 1)):
        raise CertificateError(
            f"design.anchor = {a} is not 2^-n with 0 <= n <= {MAX_ANCHOR_EXPONENT}"
        )
    return a


#: A float box declaring this rtol or coarser may have W probes re-asked once at a
#: refined scale 2^n, 2 <= n <= REFINE_MAX_EXPONENT (the learner's "refine" phase).
REFINE_RTOL = 1e-5
REFINE_MAX_EXPONENT = 10


def _refined(data: dict[str, Any], head: kernel.Header) -> dict[tuple[int, int], int]:
    """design.refined: the W probes re-asked at a refined scale 2^n, as {(k, j): n}."""
    raw = kernel.get(data, "design").get("refined", [])
    entries = kernel.as_list(raw, "design.refined")
    if entries and (head.arith.name != "float" or (head.arith.rtol or 0.0) < REFINE_RTOL):
        raise CertificateError(
            f"design.refined lists probes, but only a float box declaring rtol >= "
            f"{REFINE_RTOL:g} has refined probes"
        )
    out: dict[tuple[int, int], int] = {}
    for i, entry in enumerate(entries):
        k, j, n = kernel.as_list(entry, f"design.refined[{i}]", 3)
        key = (
            kernel.as_int(k, f"design.refined[{i}][0]", high=head.d - 1),
            kernel.as_int(j, f"design.refined[{i}][1]", high=head.d - 1),
        )
        if key in out:
            raise CertificateError(f"design.refined lists the probe {list(key)} twice")
        out[key] = kernel.as_int(n, f"design.refined[{i}][2]", low=2, high=REFINE_MAX_EXPONENT)
    return out


def _counts(
    data: dict[str, Any],
    d: int,
    affine: bool,
    scales: list[list[Fraction]],
    c_scales: list[Fraction] | None,
    refined: dict[tuple[int, int], int],
) -> str:
    # A refined probe starts again at 2^n; any later re-asks divide by 16 as usual.
    paths = [
        (f"design.scales[{k}][{j}]", t / 2 ** refined.get((k, j), 0))
        for k, r in enumerate(scales)
        for j, t in enumerate(r)
    ]
    paths += [(f"design.c_scales[{k}]", t) for k, t in enumerate(c_scales or [])]
    rescale = sum(rescales(t, p) for p, t in paths)
    bound = d * d + (2 * d + 1 if affine else d)
    phases = {"v": d, "W": d * d + (d if affine else 0), "rescale": rescale}
    phases["refine"] = len(refined)
    if affine:
        phases["beta"] = 1
    learning = bound + rescale + len(refined)
    q = kernel.check_counts(data, learning=learning, bound=bound, phases=phases)
    check_phases(q["by_phase"], phases)
    return (
        f"queries: {q['learning']} learning = bound {bound} (d^2 + {'2d + 1' if affine else 'd'})"
        f" + {rescale} re-asked probes"
        + (f" + {len(refined)} refined probes" if refined else "")
        + f"; {q['verification']} verification"
    )


def _answers(data: dict[str, Any], head: kernel.Header, affine: bool) -> dict[str, Any]:
    d, arith = head.d, head.arith
    raw = kernel.get(data, "answers")
    out: dict[str, Any] = {
        "v": kernel.numbers(
            kernel.get(data, "answers.v"), "answers.v", arith, d, max_calls=kernel.PROBE_CALLS
        ),
        "W": [
            kernel.numbers(row, f"answers.W[{k}]", arith, d, max_calls=kernel.PROBE_CALLS)
            for k, row in enumerate(kernel.as_list(kernel.get(data, "answers.W"), "answers.W", d))
        ],
    }
    if affine:
        out["beta"] = kernel.number(
            kernel.get(data, "answers.beta"), "answers.beta", arith, max_calls=kernel.PROBE_CALLS
        )
        out["c"] = kernel.numbers(
            kernel.get(data, "answers.c"), "answers.c", arith, d, max_calls=kernel.PROBE_CALLS
        )
    else:
        for key in ("beta", "c"):
            if raw.get(key) is not None:
                raise CertificateError(f"answers.{key} must be null for the non-affine model")
    return out


def _v(arith: Arithmetic, answers: dict[str, Any], affine: bool) -> tuple[list[Any], Any]:
    beta = answers["beta"] if affine else arith.rational(Fraction(0))
    return [a - beta for a in answers["v"]], beta


def _uv(arith: Arithmetic, U: list[list[Fraction]], v: list[Any]) -> list[Any]:
    d = len(U)
    out = []
    for k in range(d):
        acc: Any = arith.rational(Fraction(0))
        for i in range(d):
            if U[i][k]:
                acc = acc + arith.rational(U[i][k]) * v[i]
        out.append(acc)
    return out


def _check_design(
    arith: Arithmetic, U: list[list[Fraction]], answers: dict[str, Any], affine: bool
) -> str:
    det = fmpq_matrix(U).det()
    if det == 0:
        raise CertificateError("design.U is singular; Thm 4.1 needs an invertible design")
    v, _ = _v(arith, answers, affine)
    smallest = math.inf
    for k, uv in enumerate(_uv(arith, U, v)):
        sign = arith.sign(uv)
        if sign not in (-1, 1):
            what = "is zero" if sign == 0 else "cannot be shown nonzero at this precision"
            raise CertificateError(
                f"design column {k}: u_{k}^T v = {uv} {what}, so the probes of column {k} "
                "carry no information about W"
            )
        smallest = min(smallest, arith.magnitude(uv))
    return (
        f"design: U invertible (det {det}), every u_k^T v != 0 (smallest |u_k^T v| ~ "
        f"{smallest:.4g})"
    )


def _decode(
    arith: Arithmetic,
    U: list[list[Fraction]],
    anchored: tuple[list[list[Fraction]], Fraction],
    c_scales: list[Fraction] | None,
    answers: dict[str, Any],
    affine: bool,
) -> dict[str, list[Any]]:
    """The parameters from the stored answers, written out (see the module docstring)."""
    scales, anchor = anchored
    d = len(U)
    v, beta = _v(arith, answers, affine)
    uv = _uv(arith, U, v)
    a = arith.rational(anchor)
    M = np.empty((d, d), dtype=object)
    for k in range(d):
        for j in range(d):
            t = arith.rational(scales[k][j])
            y = (answers["W"][k][j] - a * v[j] - beta) / (t / a * uv[k])
            M[k, j] = logit(arith, y, f"answers.W[{k}][{j}]") / t
    m0 = None
    if affine:
        assert c_scales is not None
        m0 = np.empty(d, dtype=object)
        for k in range(d):
            t0 = arith.rational(c_scales[k])
            y0 = (answers["c"][k] - beta) / (t0 * uv[k])
            m0[k] = logit(arith, y0, f"answers.c[{k}]") / t0
        M = M - m0[:, None]
    if arith.name == "float":
        M = M.astype(np.float64)
    inv_t = fmpq_matrix(U).transpose().inv()
    W = apply_exact(arith, inv_t, measured_array(arith, M))
    out = {"W": list(np.asarray(W, dtype=object).reshape(-1)), "v": v}
    if affine:
        assert m0 is not None
        m0_arr = measured_array(arith, m0.astype(np.float64) if arith.name == "float" else m0)
        c = apply_exact(arith, inv_t, m0_arr.reshape(d, 1))[:, 0]
        out["c"] = list(c)
        out["beta"] = [beta]
    return out


def _shapes(d: int, affine: bool) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"W": (d, d), "v": (d,)}
    return {**shapes, "c": (d,), "beta": ()} if affine else shapes


def _describe_result(head: kernel.Header, claimed: Claimed, exact: bool, affine: bool) -> str:
    """One line: what the result is (small heads in full, larger ones by shape)."""
    d = head.d
    what = "exact rationals" if exact else "balls" if head.arith.name == "certified" else "floats"
    shapes = f"W ({d} x {d}), v ({d})" + (f", c ({d}), beta" if affine else "")
    text = f"result: {shapes}, {what}"
    if d <= 2 and exact and all(len(show(q)) <= 24 for e in claimed.values() for _, q in e):
        W = [[show(q) for _, q in claimed["W"][i * d : (i + 1) * d]] for i in range(d)]
        text += f"; W = {W}, v = {[show(q) for _, q in claimed['v']]}"
        if affine:
            c = [show(q) for _, q in claimed["c"]]
            text += f", c = {c}, beta = {show(claimed['beta'][0][1])}"
    return text.replace("'", "")


def _figures(
    data: dict[str, Any],
    head: kernel.Header,
    claimed: Claimed,
    probes: tuple[SingleHeadDesign, dict[str, Any]],
    predict: Any,
) -> str:
    """``result.error_figures`` recomputed (:mod:`~verified_attn.certificates.float_figures`):
    the verification's largest relative gap, and the parameter figure from
    ``result.parameter_error_estimate``, itself recomputed from the stored design, answers
    and claimed parameters (:func:`~verified_attn.exact_recovery.float_bound.
    parameter_error_estimate`; equal to :data:`ESTIMATE_RTOL`, the last ulps of a sum)."""
    design, answers = probes
    params = {
        name: np.array([float(x) for _, x in entries], dtype=np.float64)
        for name, entries in claimed.items()
    }
    params["W"] = params["W"].reshape(head.d, head.d)
    bias = float(params["beta"][0]) if design.affine else 0.0
    raw = kernel.get(data, "result").get("parameter_error_estimate")
    if raw is not None:
        told = float(kernel.number(raw, "result.parameter_error_estimate", head.arith))
        unit = float(getattr(head.arith, "unit_roundoff", 2.0**-53))
        want = parameter_error_estimate(unit, design, answers, params)
        if not abs(told - want) <= ESTIMATE_RTOL * want:
            raise CertificateError(
                f"result.parameter_error_estimate {told:.6e} is not the first-order estimate "
                f"recomputed from the stored answers ({want:.6e})"
            )
    counted = kernel.get(data, "verification.count")
    gap = max_gap(data, head.arith, head.d, predict, bias) if counted else None
    heads = [tuple(params[k] for k in ("W", "v", "c") if k in params)]
    return check_error_figures(data, head.arith, heads, bias, gap)


#: Relative agreement required between a stated and a recomputed parameter estimate.
ESTIMATE_RTOL = 1e-9


def _check_bias(data: dict[str, Any], head: kernel.Header, claimed: Claimed, affine: bool) -> None:
    """The float rule's bias is the claimed beta (affine float), else absent.

    The rule measures a gap relative to |answer - bias|: any other bias would change what
    the verification answers were held to, so it is not the file's to choose.
    """
    raw = kernel.get(data, "verification.bias")
    if raw is None and kernel.get(data, "verification.count") == 0:
        return  # nothing was verified, so no rule was applied (verify=0)
    if head.arith.name == "float" and affine:
        beta = float(claimed["beta"][0][1])
        bias = kernel.number(raw, "verification.bias", head.arith) if raw is not None else None
        if bias is None or float(bias) != beta:
            raise CertificateError(
                f"verification.bias is {short_repr(raw)}, but the float rule's bias is the "
                f"claimed beta {beta!r}"
            )
    elif raw is not None:
        raise CertificateError(
            f"verification.bias must be null here (only affine float results have one), got "
            f"{short_repr(raw)}"
        )

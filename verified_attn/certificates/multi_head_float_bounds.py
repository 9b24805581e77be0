"""The float canonical multi-head checker's stated bounds, tolerances and adaptive rounds.

>>> from verified_attn.certificates.multi_head_float_bounds import float_redundancy
>>> float_redundancy(1), float_redundancy(2)
(0, 1)

The float fit is not re-done: the claimed heads must reproduce the stored answers, with the
prediction bound and parameter tolerance the certificate states recomputed here from the
stored design; the pilot and conditioning rounds are counted from the stored answers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
)
from verified_attn.certificates import kernel
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    PrecisionExhausted,
)
from verified_attn.multi_head.canonical_float import (
    CONDITIONING_GROUPS,
    float_ratios,
    heads_error_estimate,
    joint_polish,
    max_length,
    prediction_check,
    redundancy,
)
from verified_attn.multi_head.float_pilot import pilot_rounds
from verified_attn.multi_head.prediction_bound import PREDICTION_SEQUENCES, PREDICTION_SIGMAS
from verified_attn.validation import check_lengths, check_seed

__all__ = [
    "FitInputs",
    "claimed_arrays",
    "float_conditioning",
    "float_grid",
    "float_parameter_tolerance",
    "float_pilot",
    "float_prediction_bound",
    "float_redundancy",
    "float_rounds",
    "float_sequence",
    "stated_parameter_rtol",
    "stated_prediction_bound",
    "stored_ratios",
]


@dataclass(frozen=True)
class FitInputs:
    """What the float figures are recomputed from: the certificate, the stored float design
    (U, B) and answers (F0, F, on the grid ``ratios``), the claimed heads and beta."""

    data: dict[str, Any]
    arith: Arithmetic
    U: np.ndarray
    B: np.ndarray
    F0: list[Any]
    F: list[list[Any]]
    ratios: list[tuple[int, int]]
    claimed: list[tuple[list[Any], ...]]
    beta: float
    affine: bool
    ncols: int
    H0: int

    def fields(self) -> tuple[Any, ...]:
        """The inputs in declaration order (not copied, unlike ``dataclasses.astuple``)."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def float_prediction_bound(fit: FitInputs) -> str:
    """result.prediction_bound: the learner's first-order bound on the predictions
    (docs/multi_head.md, The prediction bound). Of kind "u-groups" it is recomputed from the
    stored grid answers and the claimed heads on the same sequences
    (:func:`~verified_attn.multi_head.canonical_float.prediction_check`): the recomputed
    figure must be within what the rule allows and the stored one at least half of it. Of
    kind "joint" it is not recomputed, so it must not be stated. A certificate without the
    field states no bound, and the summary says so."""
    data, arith, U, B, F0, F, ratios, claimed, beta, affine, ncols, H0 = fit.fields()
    raw = kernel.get(data, "result").get("prediction_bound")
    d = U.shape[0]
    joint = joint_polish(d, H0, affine, len(F0) + len(F) * len(ratios))
    if raw is None:
        return "prediction bound: not stated" + (" (a joint fit's is not recomputed)" * joint)
    if joint:  # not recomputed here, so no certificate may state it
        raise CertificateError("result.prediction_bound: a joint fit's is not recomputable")
    seed, lengths, told = stated_prediction_bound(raw, arith)
    heads, t, answers = float_grid(claimed, F, ratios, d, ncols, affine)
    try:
        ratio, worst = prediction_check(
            arith,
            U,
            B,
            np.array(F0, dtype=np.float64),
            answers,
            t,
            heads,
            beta,
            affine,
            seed,
            lengths,
        )
    except PrecisionExhausted as exc:
        raise CertificateError(f"the claimed heads' prediction bound (recomputed): {exc}") from exc
    if not ratio / 2 <= told:
        raise CertificateError(
            f"result.prediction_bound.ratio {told:.3e} is under half the recomputed {ratio:.3e}"
        )
    return (
        f"prediction bound {ratio:.3g} x the rule's allowance ({PREDICTION_SIGMAS:g} standard "
        f"deviations; worst case {worst:.3g} x) on {PREDICTION_SEQUENCES} sequences, "
        "recomputed from the answers and the heads"
    )


def stated_prediction_bound(raw: Any, arith: Arithmetic) -> tuple[int, list[int], float]:
    """result.prediction_bound as stated: over ``PREDICTION_SEQUENCES`` sequences at
    ``PREDICTION_SIGMAS`` standard deviations, its seed, lengths and ratio (in [0, 1])."""
    if not isinstance(raw, dict):
        raise CertificateError("result.prediction_bound must be a mapping")
    count = raw.get("sequences")
    if (
        count != PREDICTION_SEQUENCES
        or float(kernel.number(raw.get("sigmas"), "result.prediction_bound.sigmas", arith))
        != PREDICTION_SIGMAS
    ):
        raise CertificateError(
            f"result.prediction_bound must be over {PREDICTION_SEQUENCES} sequences at "
            f"{PREDICTION_SIGMAS:g} standard deviations, got {count!r} and {raw.get('sigmas')!r}"
        )
    try:
        seed = check_seed(raw.get("seed"))
        lengths = list(check_lengths(raw.get("lengths")))
    except InvalidArgument as exc:
        raise CertificateError(f"result.prediction_bound: {exc}") from exc
    told = float(kernel.number(raw.get("ratio"), "result.prediction_bound.ratio", arith))
    if not 0 <= told <= 1:
        raise CertificateError(f"result.prediction_bound.ratio {told!r} is not in [0, 1]")
    return seed, lengths, told


def stated_parameter_rtol(result: dict[str, Any], arith: Arithmetic) -> float:
    """result.parameter_rtol, the tolerance stated for the float parameters, in [rtol, 1)
    (a certificate without it states rtol)."""
    rtol = float(arith.rtol or 0.0)  # always set in float mode (the header's rtol)
    raw = result.get("parameter_rtol")
    stated = rtol if raw is None else float(kernel.number(raw, "result.parameter_rtol", arith))
    if not rtol <= stated < 1:
        raise CertificateError(
            f"result.parameter_rtol must be in [rtol, 1) = [{rtol:g}, 1), got {stated!r}"
        )
    return stated


def claimed_arrays(
    claimed: list[tuple[list[Any], ...]], d: int, affine: bool
) -> list[tuple[np.ndarray, ...]]:
    """The claimed heads as float64 arrays (W, v, and c if affine)."""
    return [
        (np.array(W, dtype=np.float64).reshape(d, d), np.array(v, dtype=np.float64))
        + ((np.array(c, dtype=np.float64),) if affine else ())
        for W, v, c in claimed
    ]


def float_grid(
    claimed: list[tuple[list[Any], ...]],
    F: list[list[Any]],
    ratios: list[tuple[int, int]],
    d: int,
    ncols: int,
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], np.ndarray, np.ndarray]:
    """The claimed heads as float64 arrays, the ratio grid t and the grid answers (the
    first d x ncols rows of F): what the float figures are recomputed from."""
    t = np.array([k / m for k, m in ratios])
    return claimed_arrays(claimed, d, affine), t, np.array(F, dtype=np.float64)[: d * ncols]


def float_parameter_tolerance(fit: FitInputs) -> str:
    """result.parameter_rtol, the tolerance stated for the float parameters (in [rtol, 1);
    a certificate without it states rtol), must cover the stored first-order estimate
    (result.parameter_error_estimate). Of kind "u-groups" (and without a kind), the
    estimate is recomputed from the stored grid answers and the claimed heads
    (:func:`~verified_attn.multi_head.canonical_float.heads_error_estimate`): the stated
    tolerance must cover it and the stored figure be at least half of it. Of kind
    "joint" (the learner's dense polish of small boxes, on every answer) it is not
    recomputed, and the summary says so; the kind follows from the sizes
    (:func:`~verified_attn.multi_head.canonical_float.joint_polish`), so a file cannot
    choose the unchecked one."""
    data, arith, U, B, F0, F, ratios, claimed, beta, affine, ncols, H0 = fit.fields()
    result = kernel.get(data, "result")
    stated = stated_parameter_rtol(result, arith)
    raw_est = result.get("parameter_error_estimate")
    told = (
        None
        if raw_est is None
        else float(kernel.number(raw_est, "result.parameter_error_estimate", arith))
    )
    if told is not None and not 0 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told!r} exceeds the stated parameter "
            f"tolerance {stated:g}"
        )
    # Which figure the learner gave is fixed by the sizes (joint_polish), not by the file.
    d = U.shape[0]
    kind = "joint" if joint_polish(d, H0, affine, len(F0) + len(F) * len(ratios)) else "u-groups"
    if result.get("parameter_error_estimate_kind", kind) != kind:
        raise CertificateError(
            f"result.parameter_error_estimate_kind must be {kind!r} at these sizes, got "
            f"{result.get('parameter_error_estimate_kind')!r}"
        )
    if kind == "joint":
        if told is None:
            raise CertificateError("a joint parameter error estimate must be stored")
        return (
            f"parameters stated to {stated:g} relative (first-order estimate {told:.2e} of "
            "the joint fit, stored, not recomputed)"
        )
    heads, t, answers = float_grid(claimed, F, ratios, d, ncols, affine)
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    estimate = heads_error_estimate(
        U, B, np.array(F0, dtype=np.float64), answers, t, heads, beta, unit, affine
    )
    if not estimate <= stated:
        raise CertificateError(
            f"the claimed heads' first-order parameter error estimate {estimate:.3e} "
            f"(recomputed from the stored answers) exceeds the stated parameter tolerance "
            f"{stated:g}"
        )
    if told is not None and not estimate / 2 <= told:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is under half the recomputed "
            f"{estimate:.3e}"
        )
    return (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e}, "
        "recomputed from the answers and the heads)"
    )


def float_rounds(
    data: dict[str, Any],
    arith: Arithmetic,
    field: str,
    limit: int,
    size: str,
    rows: Any,
    per_pair: int,
) -> list[Any]:
    """The float design's adaptive rounds at ``field``: at most ``limit`` records, each
    with a positive ``size`` (a scale or factor) and ``rows(record, path)`` rows of
    ``per_pair`` answers (kept for the record; the learning count includes them)."""
    raw = kernel.get(data, field)
    if not isinstance(raw, list) or len(raw) > limit:
        raise CertificateError(f"{field} must list at most {limit} rounds")
    for i, row in enumerate(raw):
        path = f"{field}[{i}]"
        if not kernel.number(kernel.get(row, size), f"{path}.{size}", arith) > 0:
            raise CertificateError(f"{path}.{size} must be positive")
        for r, ans in enumerate(
            kernel.as_list(kernel.get(row, "answers"), f"{path}.answers", rows(row, path))
        ):
            kernel.numbers(ans, f"{path}.answers[{r}]", arith, per_pair)
    return raw


def float_pilot(
    data: dict[str, Any],
    arith: Arithmetic,
    d: int,
    H0: int,
    affine: bool,
    per_pair: int,
) -> int:
    """design.pilot: the float pilot's discarded rounds (scale, answers of its d pairs), at
    most ``pilot_rounds - 1``; their number. design.u_scale: the kept scale, positive."""
    limit = pilot_rounds(d, H0, affine, unit=float(getattr(arith, "unit_roundoff", 2.0**-53))) - 1
    raw = float_rounds(data, arith, "design.pilot", limit, "scale", lambda *_: d, per_pair)
    if not kernel.number(kernel.get(data, "design.u_scale"), "design.u_scale", arith) > 0:
        raise CertificateError("design.u_scale must be positive")
    return len(raw)


def float_conditioning(
    data: dict[str, Any],
    arith: Arithmetic,
    d: int,
    ncols: int,
    per_pair: int,
) -> int:
    """design.conditioning: the float conditioning rounds (u-group k, factor, the replaced
    answers: its ncols pairs, then the halved links through u_k), at most
    ``CONDITIONING_GROUPS`` (their total is held to the bound); the queries they asked."""

    def rows(row: Any, path: str) -> int:
        k = kernel.as_int(kernel.get(row, "k"), f"{path}.k", low=0, high=d - 1)
        return ncols + (d - 1 if k == 0 else 1)

    raw = float_rounds(
        data, arith, "design.conditioning", CONDITIONING_GROUPS, "factor", rows, per_pair
    )
    return sum(rows(row, "") * per_pair for row in raw)


def float_sequence(u: Any, b: Any, k: int, m: int = 1) -> np.ndarray:
    return np.vstack([np.tile(b + u, (k, 1)), np.tile(b, (m, 1))])


def float_redundancy(H0: int, d: int = 0, affine: bool = False, unit: float = 2.0**-53) -> int:
    """Redundant samples per pair of the float design beyond 2 H0 (:func:`redundancy`: 1 if
    H0 >= 2, 0 in a coarse box's design under the follow-up's count)."""
    return redundancy(H0, d, affine, unit=unit)


def stored_ratios(
    data: dict[str, Any], H0: int, unit: float, d: int = 0, affine: bool = False
) -> list[tuple[int, int]]:
    """design.ratios: the float design's ratios for H0 heads, as :func:`float_ratios` gives
    them (2 H0 grid ratios in its window, then the redundant ones): a certificate that
    names other ratios (a longer query, a ratio outside the window) is not this design's."""
    n = 2 * H0 + float_redundancy(H0, d, affine, unit)
    rows = kernel.as_list(kernel.get(data, "design.ratios"), "design.ratios", n)
    out = []
    for i, row in enumerate(rows):
        pair = kernel.as_list(row, f"design.ratios[{i}]", 2)
        k = kernel.as_int(pair[0], f"design.ratios[{i}][0]", low=1)
        m = kernel.as_int(pair[1], f"design.ratios[{i}][1]", low=1)
        out.append((k, m))
    if len({Fraction(k, m) for k, m in out}) != n:
        raise CertificateError(f"design.ratios repeats a ratio: {out}")
    want = float_ratios(H0, unit=unit, d=d, affine=affine)
    if out != want:
        raise CertificateError(
            f"design.ratios {out} are not the float design's ratios for H0 = {H0}: {want} "
            f"(log2 t evenly spaced in the window, k + m <= {max_length(H0, unit=unit)})"
        )
    return out

"""The float canonical multi-head check: the claimed heads reproduce every learning answer.

>>> import verified_attn as va
>>> from verified_attn.certificates.multi_head import verify
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> data = va.learn_multi_head(va.Oracle(model, "float"), heads=1).certificate()
>>> verify(data).ok
True
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
    FloatArithmetic,
)
from verified_attn.certificates import kernel
from verified_attn.certificates.multi_head_float_bounds import (
    FitInputs,
    claimed_arrays,
    float_conditioning,
    float_parameter_tolerance,
    float_pilot,
    float_prediction_bound,
    float_redundancy,
    float_sequence,
    stated_parameter_rtol,
    stated_prediction_bound,
    stored_ratios,
)
from verified_attn.certificates.multi_head_parts import (
    design_pairs,
    heads_model,
    read_design,
    read_samples,
)
from verified_attn.errors import (
    CertificateError,
    PrecisionExhausted,
)
from verified_attn.multi_head.canonical_float import (
    polish_figures,
    precision_polish_count,
)
from verified_attn.multi_head.pipeline.budget import lean_design, polish_after
from verified_attn.multi_head.pipeline.refine import (
    POOL,
    REFINED_KIND,
    picked_sequences,
    refine_count,
    refined_error_groups,
    refined_figure,
)
from verified_attn.multi_head.prediction_bound import PREDICTION_SEQUENCES, PREDICTION_SIGMAS
from verified_attn.multi_head.sequence_fit import (
    SequenceRows,
    compress,
    group_max,
    polish_sequences,
)
from verified_attn.verification import agree, float_floor

__all__ = ["float_fit", "float_phases", "float_polish_count", "float_refine_count"]


def float_fit(
    data: dict[str, Any],
    head: kernel.Header,
    affine: bool,
    H0: int,
    ncols: int,
    npairs: int,
    ties: list[dict[str, Any]],
    claimed: list[tuple[list[Any], ...]],
    beta: Any,
    refine: int = 0,
) -> str:
    """Every learning query rebuilt from the float design (and the ``refine`` sequences of
    the refinement, :func:`float_refine_count`); the claim must reproduce them."""
    arith = head.arith
    U, B = read_design(data, head, ncols)
    Ua, Ba = np.array(U, dtype=np.float64), np.array(B, dtype=np.float64)
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    ratios = stored_ratios(data, H0, unit, Ua.shape[0], affine)
    F0, F = read_samples(data, arith, ncols, npairs, len(ratios))
    pairs = design_pairs(list(Ua), ncols, half=True)
    observed = [*F0, *(a for row in F for a in row)]
    observed += [kernel.number(t["answer"], t["path"], arith) for t in ties]
    # The sequence polish's random sequences: regenerated from the seed.
    conditioned = float_conditioning(data, arith, Ua.shape[0], ncols, len(ratios))
    polish = float_polish_count(data, Ua.shape[0], H0, affine, unit, conditioned)
    if polish:
        observed += kernel.numbers(
            kernel.get(data, "answers.polish"), "answers.polish", arith, polish
        )
    if refine:
        observed += kernel.numbers(
            kernel.get(data, "answers.refinement"), "answers.refinement", arith, refine
        )
    if polish or refine:
        seed = kernel.as_int(kernel.get(data, "seed"), "seed", low=0)
    picks = _refine_picks(data, refine, lean_design(Ua.shape[0], H0, affine, unit=unit))

    def rebuilt() -> Iterator[np.ndarray]:
        # Every learning query, built as it is read (at nn.MultiheadAttention E = 64, H = 4
        # they are 3.9 GB of float64 together).
        yield from (Ba[j][None, :] for j in range(ncols))
        for u, j in pairs:
            yield from (float_sequence(u, Ba[j], k, m) for k, m in ratios)
        yield from (float_sequence(Ua[t["k"]], (Ba[0] + Ba[t["j"]]) / 2, 1) for t in ties)
        if polish:
            yield from polish_sequences(Ua.shape[0], polish, seed)
        if refine:
            yield from picked_sequences(Ua.shape[0], refine, seed, picks)

    model = heads_model(claimed, beta, affine)
    bias = float(beta) if affine else 0.0
    floor = float_floor(observed, bias)
    worst = 0.0
    for i, (X, y) in enumerate(zip(rebuilt(), observed, strict=True)):
        expected = float(model.evaluate_batch(X[None])[0])
        ok, gap = agree(arith, y, expected, bias=bias, floor=floor)
        if not ok or not math.isfinite(expected):
            raise CertificateError(
                f"learning answer {i} (a query of length {X.shape[0]}): stored {y}, the claimed "
                f"heads give {expected} (relative gap {gap:.3e} > rtol {arith.rtol:g})"
            )
        worst = max(worst, gap)
    fit = FitInputs(data, arith, Ua, Ba, F0, F, ratios, claimed, bias, affine, ncols, H0)
    rows = compress(list(rebuilt()), observed) if polish or refine else None
    # A refined result states the refined fit's parameter figure (recomputed from every
    # answer; up to refine.REFINED_FIGURE_PARAMETERS, past it the earlier fit's); its
    # prediction bound stays the earlier fit's kind's.
    tolerance = None
    if rows is not None and refine and refined_figure(Ua.shape[0], H0, affine):
        tolerance = _float_refined(data, arith, rows, (claimed, bias, affine))
    if rows is not None and polish:
        figures = _float_polish(data, arith, rows, claimed, bias, affine, polish, tolerance)
    else:
        figures = (tolerance or float_parameter_tolerance(fit)) + "; " + float_prediction_bound(fit)
    return (
        f"fit (float: not re-decoded; the float fit is not cheaply reproducible): the claimed "
        f"{len(claimed)} heads reproduce all {len(observed)} stored learning answers to rtol "
        f"{arith.rtol:g} (max relative gap {worst:.2e}); " + figures
    )


def float_polish_count(
    data: dict[str, Any], d: int, H0: int, affine: bool, unit: float, conditioned: int = 0
) -> int:
    """How many random sequences the result's sequence polish asked: a coarse box's
    (:func:`~verified_attn.multi_head.pipeline.budget.polish_after`, always: under the
    follow-up's count less the ``conditioned`` queries of its conditioning rounds), else the
    precision polish's (:func:`~verified_attn.multi_head.canonical_float.precision_polish_count`)
    or none, as ``answers.polish`` holds (a certificate without the field holds none)."""
    always = polish_after(d, H0, affine, conditioned, unit=unit)
    if always:
        return always
    raw = kernel.get(data, "answers").get("polish", [])
    if not isinstance(raw, list):
        raise CertificateError("answers.polish must be a list")
    allowed = precision_polish_count(d, H0, affine, unit=unit)
    if len(raw) not in (0, allowed):
        raise CertificateError(
            f"answers.polish has {len(raw)} answers; the precision polish asks {allowed} "
            "random sequences or none"
        )
    return len(raw)


def float_refine_count(
    data: dict[str, Any], sizes: tuple[int, int, bool], asked: int, bound: int, unit: float
) -> int:
    """How many random sequences the refinement asked after the ``asked`` learning queries
    of the other phases: :func:`~verified_attn.multi_head.pipeline.refine.refine_count` or
    none (the stage switched off), as ``answers.refinement`` holds."""
    d, H0, affine = sizes
    raw = kernel.get(data, "answers").get("refinement", [])
    if not isinstance(raw, list):
        raise CertificateError("answers.refine must be a list")
    allowed = refine_count(d, H0, affine, asked, bound, unit=unit)
    if len(raw) not in (0, allowed):
        raise CertificateError(
            f"answers.refinement has {len(raw)} answers; after {asked} learning queries the "
            f"refinement asks {allowed} random sequences or none"
        )
    return len(raw)


def _refine_picks(data: dict[str, Any], refine: int, lean: bool) -> list[int] | None:
    """``answers.refinement_picks``: the refinement's sequences among the first
    ``refine.POOL refine`` of its stream, increasing; present exactly when the refinement
    ran on the lean design (:func:`~verified_attn.multi_head.pipeline.budget.lean_design`)."""
    raw = kernel.get(data, "answers").get("refinement_picks")
    if not (refine and lean):
        if raw is not None:
            raise CertificateError("answers.refinement_picks without a lean design's refinement")
        return None
    path = "answers.refinement_picks"
    entries = kernel.as_list(raw, path, refine)
    picks = [
        kernel.as_int(x, f"{path}[{i}]", high=POOL * refine - 1) for i, x in enumerate(entries)
    ]
    if sorted(set(picks)) != picks:
        raise CertificateError(f"{path} must be increasing")
    return picks


def _float_polish(
    data: dict[str, Any],
    arith: Arithmetic,
    rows: SequenceRows,
    claimed: list[tuple[list[Any], ...]],
    beta: float,
    affine: bool,
    polish: int,
    refined: str | None = None,
) -> str:
    """A polished result (the sequence polish on every answer, ``polish`` of them on random
    sequences: a coarse box's, or a float64 box's precision polish): its parameter error
    estimate and prediction bound are recomputed from every stored answer at the claimed heads
    (:func:`~verified_attn.multi_head.canonical_float.polish_figures`); the stated parameter
    tolerance must cover the estimate, the recomputed prediction bound be within the rule's
    allowance, and each stored figure be at least half the recomputed one. A refined one
    (``refined``: :func:`_float_refined`'s line) states the refined fit's parameter figure
    instead, checked there."""
    result = kernel.get(data, "result")
    stated = stated_parameter_rtol(result, arith)
    if refined is None and result.get("parameter_error_estimate_kind") != "sequences":
        raise CertificateError(
            "result.parameter_error_estimate_kind must be 'sequences' for a box the sequence "
            f"polish takes, got {result.get('parameter_error_estimate_kind')!r}"
        )
    told = float(
        kernel.number(
            kernel.get(result, "parameter_error_estimate"), "result.parameter_error_estimate", arith
        )
    )
    seed, lengths, told_ratio = stated_prediction_bound(
        kernel.get(result, "prediction_bound"), arith
    )
    heads = claimed_arrays(claimed, rows.queries.shape[1], affine)
    # The recomputation holds the claim to the tolerance it states, not to the header's.
    held = FloatArithmetic(
        float(arith.rtol or 0.0), getattr(arith, "unit_roundoff", 2.0**-53), stated
    )
    try:
        estimate, (ratio, worst), sigma_min = polish_figures(
            held, heads, beta, affine, rows, seed, lengths
        )
    except PrecisionExhausted as exc:
        raise CertificateError(f"the claimed heads' polish figures (recomputed): {exc}") from exc
    if refined is None and not estimate / 2 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is not between half the recomputed "
            f"{estimate:.3e} and the stated parameter tolerance {stated:g}"
        )
    if not ratio / 2 <= told_ratio:
        raise CertificateError(
            f"result.prediction_bound.ratio {told_ratio:.3e} is under half the recomputed "
            f"{ratio:.3e}"
        )
    params = refined or (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e} of "
        f"the sequence polish on all {len(rows)} answers, {polish} on random sequences, "
        f"smallest singular value {sigma_min:.2e}, recomputed)"
    )
    return (
        f"{params}; prediction bound "
        f"{ratio:.3g} x the rule's allowance ({PREDICTION_SIGMAS:g} standard deviations; "
        f"worst case {worst:.3g} x) on {PREDICTION_SEQUENCES} sequences, recomputed"
    )


def _float_refined(
    data: dict[str, Any], arith: Arithmetic, rows: SequenceRows, claim: tuple[Any, float, bool]
) -> str:
    """A refined result's parameter figure (kind ``"refinement"``), recomputed from every
    stored learning answer at the claimed heads
    (:func:`~verified_attn.multi_head.pipeline.refine.refined_error_estimate`): the stated
    parameter tolerance must cover it and the stored figure be at least half of it.
    ``claim``: the claimed heads (as stored), beta and whether the heads are affine."""
    claimed, beta, affine = claim
    result = kernel.get(data, "result")
    stated = stated_parameter_rtol(result, arith)
    if result.get("parameter_error_estimate_kind") != REFINED_KIND:
        raise CertificateError(
            f"result.parameter_error_estimate_kind must be {REFINED_KIND!r} for a refined "
            f"result, got {result.get('parameter_error_estimate_kind')!r}"
        )
    told = float(
        kernel.number(
            kernel.get(result, "parameter_error_estimate"), "result.parameter_error_estimate", arith
        )
    )
    heads = claimed_arrays(claimed, rows.queries.shape[1], affine)
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    groups = refined_error_groups(heads, beta, rows, affine, unit)
    estimate = group_max(groups)
    if not estimate / 2 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is not between half the recomputed "
            f"refined figure {estimate:.3e} and the stated parameter tolerance {stated:g}"
        )
    stated_groups = result.get("parameter_error_estimate_groups")
    if stated_groups is not None:
        _check_groups(stated_groups, groups, told, arith)
    return (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e} of "
        f"the refinement on all {len(rows)} answers, recomputed"
        + (", and per parameter group" if stated_groups is not None else "")
        + ")"
    )


def _check_groups(
    stated: Any, groups: dict[str, Any], told: float, arith: Arithmetic
) -> None:
    """``result.parameter_error_estimate_groups``: the recomputed groups' names and sizes,
    each stated figure at least half its recomputed one (as the estimate is) and at most
    the stated estimate (which covers every group)."""
    where = "result.parameter_error_estimate_groups"
    if not isinstance(stated, dict) or set(stated) != set(groups):
        raise CertificateError(f"{where} must name the groups {sorted(groups)}")
    for name, want in groups.items():
        got = stated[name] if isinstance(want, list) else [stated[name]]
        want = want if isinstance(want, list) else [want]
        if not isinstance(got, list) or len(got) != len(want):
            raise CertificateError(f"{where}.{name} must hold {len(want)} figures")
        for h, (g, w) in enumerate(zip(got, want, strict=True)):
            x = float(kernel.number(g, f"{where}.{name}[{h}]", arith))
            if not w / 2 <= x <= told:
                raise CertificateError(
                    f"{where}.{name}[{h}] {x:.3e} is not between half the recomputed figure "
                    f"{w:.3e} and the stated estimate {told:.3e}"
                )


def float_phases(
    data: dict[str, Any],
    arith: Arithmetic,
    sizes: tuple[int, int, int, int],
    affine: bool,
    unit: float,
) -> dict[str, int]:
    """The float design's learning phases and their counts: per pair 2 H0 grid ratios plus
    the redundant ones; the d pilot pairs (u_k, b_k) in the pilot phase, with the pilot's
    discarded rounds; the conditioning and polish rounds the stored answers record."""
    d, H0, ncols, npairs = sizes
    extra = float_redundancy(H0, d, affine, unit)
    per_pair = 2 * H0 + extra
    rounds = 1 + float_pilot(data, arith, d, H0, affine, per_pair)
    phases = {
        "F(0)": ncols,
        "pilot": rounds * d * per_pair,
        "F(t)": (npairs - d) * 2 * H0,
    }
    if extra:
        phases["redundancy"] = (npairs - d) * extra
    conditioning = float_conditioning(data, arith, d, ncols, per_pair)
    if conditioning:
        phases["conditioning"] = conditioning
    polish = float_polish_count(data, d, H0, affine, unit, conditioning)
    if polish:
        phases["polish"] = polish
    return phases

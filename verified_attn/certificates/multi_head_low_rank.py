"""The float multi-head low-rank (skeleton) certificate check (``method:
"canonical-low-rank"``).

The design is re-derived from the stated skeleton (rank p, full u-groups m, whether the rank
was found, the u scale) and the seed: U and B must be the seeded design's, m the one the
rank implies, every answer section the size it implies, and the counts exactly the
skeleton's formula (:func:`~verified_attn.multi_head.pipeline.low_rank_design.low_rank_query_count`,
by phase). Every learning query is rebuilt and the claimed heads must reproduce its stored
answer under the float rule, and the fresh verification's answers too. The pilot's answers
(discarded by the learner) are counted, not stored. The parameter error estimate (the
joint low-rank Gauss-Newton fit's, :func:`~verified_attn.multi_head.pipeline.skeleton_refine.low_rank_estimate`)
is recomputed from the stored learning answers (the rank check pair's left out, as in the
fit) at the claimed heads: it must be within the stated parameter tolerance, and the stored
one between half of it and the tolerance (where the Jacobian is too large for the dense
SVD, the same figure from the reduced unknowns' Gram matrix,
:func:`~verified_attn.multi_head.pipeline.skeleton_blocks.reduced_estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from verified_attn.agreement import agree, float_floor
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import check_phases, passed
from verified_attn.certificates.multi_head_parts import (
    MAX_D,
    MAX_FLOAT_HEADS,
    claimed_heads,
    heads_model,
    predictor,
)
from verified_attn.errors import CertificateError
from verified_attn.multi_head.pipeline.budget import float_ratios, redundancy
from verified_attn.multi_head.pipeline.design import float_design, float_sequence
from verified_attn.multi_head.pipeline.low_rank_design import (
    CONDITIONING_ROUNDS,
    PILOT_PAIRS,
    conditioning_query_count,
    low_rank_query_count,
    redundant_rows,
    round_columns,
    shift_query_count,
    shifted_row,
    skeleton_columns,
    skeleton_pairs,
    skeleton_sizes,
)
from verified_attn.multi_head.pipeline.skeleton_blocks import heads_reduced_estimate
from verified_attn.multi_head.pipeline.skeleton_refine import design_rows, heads_estimate

__all__ = ["verify_low_rank"]


def _rounds(data: dict[str, Any], d: int, p: int, m: int, J: int) -> list[list[int]]:
    """Each u-group's columns: the skeleton's, then its conditioning rounds' as
    ``round_columns`` gives them (a round naming other columns, or past the limit, fails)."""
    cols = [list(range(J if k < m else skeleton_columns(p, J))) for k in range(d)]
    raw = kernel.as_list(kernel.get(data, "design.conditioning"), "design.conditioning")
    for i, rd in enumerate(raw):
        k = kernel.as_int(kernel.get(rd, "k"), f"design.conditioning[{i}].k", low=0, high=d - 1)
        got = [int(j) for j in kernel.as_list(kernel.get(rd, "columns"), "columns")]
        want = round_columns(d, p, m, J, k, cols[k])
        if got != want or sum(1 for r in raw[:i] if r["k"] == k) >= CONDITIONING_ROUNDS:
            raise CertificateError(
                f"design.conditioning[{i}] asks u_{k + 1} at {got}; its round takes {want}"
            )
        cols[k] += got
    return cols


def _shifts(data: dict[str, Any], d: int, m: int, cols: list[list[int]]) -> list[int]:
    """The u-groups asked at shifted rows: increasing, each partial one at more columns than
    full groups (as the learner asks them; a full group at its halved row)."""
    raw = kernel.as_list(kernel.get(data, "design.shifts"), "design.shifts")
    out = [kernel.as_int(k, f"design.shifts[{i}]", low=0, high=d - 1) for i, k in enumerate(raw)]
    for i, k in enumerate(out):
        if (i and k <= out[i - 1]) or (k >= m and len(cols[k]) <= m):
            raise CertificateError(
                f"design.shifts[{i}] shifts u_{k + 1}: shifts are increasing u-groups, the "
                "partial ones asked at more columns than full groups"
            )
    return out


def _phases(
    d: int,
    H: int,
    p: int,
    m: int,
    J: int,
    cols: list[list[int]] | None = None,
    shifts: list[int] | None = None,
) -> dict[str, int]:
    """The learning phases the skeleton implies (each pair at 2H + [H >= 2] ratios), with
    the conditioning rounds' columns ``cols`` past the skeleton's and the shifted rows of
    the groups ``shifts`` (at all their columns)."""
    per = 2 * H + redundancy(H)
    q = skeleton_columns(p, J)
    grid = m * J + (d - m) * q
    check = len(skeleton_pairs(d, p, m, J)) - grid
    out = {"F(0)": J, "pilot": min(PILOT_PAIRS, J) * per, "F(t)": grid * per}
    if d > 1:
        out["links"] = (d - 1) * per
    if check:
        out["rank check"] = check * per
    rounds = [(k, c[J if k < m else q :]) for k, c in enumerate(cols or [])]
    if any(c for _, c in rounds):
        out["conditioning"] = conditioning_query_count(H, J, rounds)
    if shifts:
        out["shifted"] = shift_query_count(H, [(cols or [])[k] for k in shifts])
    return out


def _rows(data: dict[str, Any], path: str, arith: Any, n: int, T: int) -> list[list[Any]]:
    raw = kernel.as_list(kernel.get(data, path), path)
    if len(raw) != n:
        raise CertificateError(f"{path} has {len(raw)} rows; the skeleton implies {n}")
    return [kernel.numbers(row, f"{path}[{i}]", arith, T) for i, row in enumerate(raw)]


def verify_low_rank(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a low-rank skeleton certificate; CertificateError naming what fails."""
    head = kernel.parse_header(data, "multi-head", max_d=MAX_D)
    d, arith = head.d, head.arith
    if arith.name != "float":
        raise CertificateError("a canonical-low-rank certificate is a float one")
    affine = kernel.as_bool(kernel.get(data, "affine"), "affine")
    H = kernel.as_int(kernel.get(data, "H0"), "H0", low=1, high=MAX_FLOAT_HEADS)
    J = d + (1 if affine else 0)
    p = kernel.as_int(kernel.get(data, "design.rank"), "design.rank", low=1, high=J)
    found = kernel.as_bool(kernel.get(data, "design.rank_found"), "design.rank_found")
    m = kernel.as_int(kernel.get(data, "design.full_groups"), "design.full_groups", low=1)
    if m != skeleton_sizes(d, p, affine, found=found)[0]:
        raise CertificateError(f"design.full_groups is {m}; rank {p} implies another count")
    seed = kernel.as_int(kernel.get(data, "seed"), "seed", low=0)
    scale = float(kernel.number(kernel.get(data, "design.u_scale"), "design.u_scale", arith))
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    ratios = [tuple(r) for r in float_ratios(H, unit=unit)]
    if [tuple(r) for r in kernel.get(data, "design.ratios")] != ratios:
        raise CertificateError("design.ratios are not the float design's ratios for H0")
    U, B, _ = float_design(d, seed, affine, scale=scale)
    for name, want in (("U", U), ("B", B)):
        got = np.array(kernel.get(data, f"design.{name}"), dtype=object)
        path = f"design.{name}"
        stored = np.array(
            [[float(kernel.number(x, path, arith)) for x in row] for row in got], dtype=float
        )
        if stored.shape != want.shape or not np.array_equal(stored, want):
            raise CertificateError(f"{path} is not the seeded design's at u scale {scale}")
    cols = _rounds(data, d, p, m, J)
    shifts = _shifts(data, d, m, cols)
    phases = _phases(d, H, p, m, J, cols, shifts)
    learning = sum(phases.values())
    more = learning - phases.get("conditioning", 0) - phases.get("shifted", 0)
    if more != low_rank_query_count(d, H, p, affine=affine, found=found):  # pragma: no cover
        raise AssertionError("the skeleton's phases do not add up to its count")
    q = kernel.check_counts(data, learning=learning, phases=phases)
    check_phases(q["by_phase"], phases)
    line = _fit(data, head, affine, H, (U, B, p, m, J), ratios, (cols, shifts), seed)
    claimed, beta = claimed_heads(data, head, affine, H)
    model = heads_model(claimed, beta, affine)
    lines = [
        head.describe() + (" (affine)" if affine else "") + ", method canonical-low-rank",
        f"queries: {learning} learning (the rank-{p} skeleton: {m} full u-groups, rank "
        f"{'found' if found else 'given'}; {phases}); {q['verification']} verification",
        line,
    ]
    with arith.context():
        lines.append(kernel.check_verification(data, head, predictor(head, model)))
    return passed(head, lines)


def _fit(
    data: dict[str, Any],
    head: kernel.Header,
    affine: bool,
    H: int,
    design: tuple[np.ndarray, np.ndarray, int, int, int],
    ratios: list[tuple[int, ...]],
    asked: tuple[list[list[int]], list[int]],
    seed: int,
) -> str:
    """Every learning query rebuilt; the claimed heads must reproduce each stored answer."""
    U, B, p, m, J = design
    cols, shifts = asked
    arith, d, T = head.arith, head.d, len(ratios)
    skel = skeleton_pairs(d, p, m, J)
    pairs = [(k, j) for k, c in enumerate(cols) for j in c]
    nx = len({j for c in cols for j in c if j >= J})
    Bx = np.vstack([B, float_design(d, seed, affine, extra=redundant_rows())[1][J:]])
    grid = len(pairs)
    pairs += skel[m * J + (d - m) * skeleton_columns(p, J) :]  # the rank check pair
    F0 = kernel.numbers(kernel.get(data, "answers.F0"), "answers.F0", arith, J)
    F0x = kernel.numbers(
        kernel.get(data, "answers.F0_redundant"), "answers.F0_redundant", arith, nx
    )
    F = _rows(data, "answers.F", arith, grid, T)
    links = _rows(data, "answers.links", arith, d - 1, T)
    check = _rows(data, "answers.rank_check", arith, len(pairs) - grid, T)
    moved = [(shifted_row(U, seed, k, m), j) for k in shifts for j in cols[k]]
    shifted = _rows(data, "answers.shifted", arith, len(moved), T)
    answered = F + check + links + shifted
    observed = [float(x) for x in [*F0, *F0x, *(a for row in answered for a in row)]]

    def rebuilt() -> Iterator[np.ndarray]:
        yield from (Bx[j][None, :] for j in range(J + nx))
        for k, j in pairs:
            yield from (float_sequence(U[k], Bx[j], a, b) for a, b in ratios)
        for k in range(1, d):
            yield from (float_sequence((U[0] + U[k]) / 2, B[0], a, b) for a, b in ratios)
        for u, j in moved:
            yield from (float_sequence(u, Bx[j], a, b) for a, b in ratios)

    claimed, beta = claimed_heads(data, head, affine, H)
    model = heads_model(claimed, beta, affine)
    bias = float(beta) if affine else 0.0
    floor = float_floor(observed, bias)
    checked = (
        (X.shape[0], y, float(model.evaluate_batch(X[None])[0]))
        for X, y in zip(rebuilt(), observed, strict=True)
    )
    worst = 0.0
    for i, (n, y, e) in enumerate(checked):
        ok, gap = agree(arith, y, e, bias=bias, floor=floor)
        worst = max(worst, gap if math.isfinite(e) else math.inf)
        if not (ok and math.isfinite(e)):
            raise CertificateError(
                f"learning answer {i} (a query of length {n}) is not reproduced: stored {y}, "
                f"the claimed heads give {e} (relative gap {gap:.3e} > rtol {arith.rtol:g})"
            )
    fit = (np.array([*F0, *F0x], dtype=float), np.array(F, dtype=float))
    rows = design_rows(
        U,
        Bx,
        affine,
        pairs[:grid],
        np.array([a / b for a, b in ratios]),
        (*fit, np.array(links, dtype=float)),
    )
    return (
        f"fit: the claimed {len(claimed)} heads reproduce all {len(observed)} stored learning "
        f"answers (the rank check pair's included) to rtol {arith.rtol:g} (max relative gap "
        f"{worst:.2e}); {_estimate(data, head, rows, (claimed, beta), p)}"
    )


def _estimate(
    data: dict[str, Any], head: kernel.Header, rows: Any, claimed: tuple[Any, Any], p: int
) -> str:
    """The joint fit's first-order parameter error estimate recomputed at the claimed heads:
    within the stated tolerance, the stored one between half of it and the tolerance."""
    arith, d = head.arith, head.d
    result = kernel.get(data, "result")
    if result.get("parameter_error_estimate_kind") != "low-rank skeleton":
        raise CertificateError("result.parameter_error_estimate_kind must be 'low-rank skeleton'")
    stated = float(kernel.number(kernel.get(result, "parameter_rtol"), "parameter_rtol", arith))
    told = float(
        kernel.number(
            kernel.get(result, "parameter_error_estimate"), "result.parameter_error_estimate", arith
        )
    )
    heads: list[tuple[np.ndarray, ...]] = [
        (np.array(W, dtype=float).reshape(d, d), np.array(v, dtype=float), np.array(c, dtype=float))
        for W, v, c in claimed[0]
    ]
    heads = [hd if rows.affine else hd[:2] for hd in heads]
    beta = float(claimed[1]) if rows.affine else 0.0
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    estimate = heads_estimate(rows, heads, beta, p, unit)
    if estimate is None:
        estimate = heads_reduced_estimate(rows, heads, beta, p, unit)
    if not estimate <= stated:
        raise CertificateError(
            f"the claimed heads' first-order parameter error estimate {estimate:.3e} exceeds "
            f"the stated parameter tolerance {stated:g}"
        )
    if not estimate / 2 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is not between half the recomputed "
            f"{estimate:.3e} and the stated parameter tolerance {stated:g}"
        )
    return (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e} recomputed)"
    )

"""The low-rank float learner's result: its notes (the design, the counts against the
parameter count and the follow-up's count, the figures) and its certificate data, which
states the skeleton so that the checker (:mod:`verified_attn.certificates.multi_head_low_rank`)
rebuilds every learning query and re-derives the count from it."""

from __future__ import annotations

from typing import Any

import numpy as np

from verified_attn.certificates.writer import certificate_base
from verified_attn.multi_head.canonical_bounds import THEOREM, follow_up_query_bound
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.multi_head.pipeline.design import box_precision
from verified_attn.multi_head.pipeline.low_rank_design import (
    conditioning_query_count,
    low_rank_parameter_count,
    low_rank_query_count,
    shift_query_count,
)
from verified_attn.multi_head.pipeline.skeleton import Skeleton
from verified_attn.oracle import QueryCounts
from verified_attn.precision import ErrorFigures, figures_record, stated_relative_error
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.serialize import dump_number
from verified_attn.verification import Verification

__all__ = ["LOW_RANK_METHOD", "design_record", "low_rank_recovery"]

#: The method a low-rank result states (its certificate's ``method``).
LOW_RANK_METHOD = "canonical-low-rank"


def _rows(x: np.ndarray) -> list[list[Any]]:
    return [[dump_number(float(a)) for a in row] for row in np.atleast_2d(x)]


def design_record(sk: Skeleton) -> dict[str, Any]:
    """The certificate's ``design``: the skeleton (its size p, full u-groups m, whether the
    rank was found), the ratios and the seed's U and B (stored; the checker rebuilds them)."""
    return {
        "kind": "low-rank skeleton",
        "rank": sk.p,
        "full_groups": sk.m,
        "rank_found": sk.found,
        "u_scale": dump_number(float(sk.scale)),
        "U": _rows(sk.U),
        "B": _rows(sk.B),
        "ratios": [[k, m] for k, m in sk.ratios],
        "conditioning": [{"k": k, "columns": list(c)} for k, c in sk.rounds],
        "shifts": list(sk.shifts),
    }


def _notes(sk: Skeleton, counts: QueryCounts, bound: int, estimate: float) -> list[str]:
    d, H, p = sk.d, sk.H, sk.p
    how = "found from full u-groups" if sk.found else "given"
    params = low_rank_parameter_count(d, H, p)
    refits = [
        f"partial u-groups {', '.join(f'u_{k + 1}' for k in sk.refits)} refitted with each "
        "head's scores in the full groups' row space (no queries): their free fits stalled, "
        "or had two heads' scores crowded at a column and were off the full groups' planes"
    ] * bool(sk.refits)
    shifts = [
        f"u-groups {', '.join(f'u_{k + 1}' for k in sk.shifts)} asked at shifted rows (full "
        "groups at u_k / 2, partial ones at u_k + sum_i c_i u_i over the full groups i) and "
        f"refitted from them (kept: {', '.join(f'u_{k + 1}' for k in sk.shift_kept) or 'none'})"
    ] * bool(sk.shifts)
    return [
        f"low-rank skeleton design (rank {p}, {how}; {sk.m} full u-groups, {d - sk.m} at "
        f"{min(p, sk.J)} columns, {len(sk.check)} rank check pair): {counts.learning} "
        f"learning queries (<= {bound}; the formula "
        f"{low_rank_query_count(d, H, p, affine=sk.affine, found=sk.found)} and "
        f"{len(sk.rounds)} conditioning rounds' "
        f"{conditioning_query_count(H, sk.J, sk.rounds)}, {len(sk.shifts)} shifted rows' "
        f"{shift_query_count(H, [sk.cols[k] for k in sk.shifts])}) against "
        f"H(2rd - r^2 + d) = {params} parameters of rank-{p} heads and the follow-up's "
        f"4Hd^2 - 2H + 1 = {follow_up_query_bound(d, H)}",
        f"{H} canonical heads ({box_precision(sk.oracle.arithmetic)} answers; not exact); "
        f"first-order parameter error estimate {estimate:.2e} relative (the joint low-rank "
        "Gauss-Newton fit's: its step still to go plus the worst case of the answers' noise "
        "through its Jacobian's pseudo-inverse); "
        "every learning answer and the rank check pair reproduced at rtol "
        f"{sk.oracle.arithmetic.rtol:g}; no prediction bound off the fresh sequences",
        *refits,
        *shifts,
    ]


def low_rank_recovery(
    sk: Skeleton,
    counts: QueryCounts,
    bound: int,
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    tolerance: tuple[float, float],
    checked: Verification | None,
) -> MultiHeadRecovery:
    """The result: canonical heads, the low-rank method, the design in its notes and
    certificate."""
    from verified_attn.models import MultiHeadAttention

    params: dict[str, Any] = {"heads": heads}
    if sk.affine:
        params["beta"] = beta
    model = MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in heads], beta=beta if sk.affine else None
    )
    arith = sk.oracle.arithmetic

    def certificate() -> dict[str, Any]:
        data = certificate_base(
            kind="multi-head",
            theorem=THEOREM,
            d=sk.d,
            arith=arith,
            seed=sk.seed,
            counts=counts,
            bound=bound,
            verification=checked,
            bias=beta if sk.affine else None,
        )
        data.update(
            {
                "method": LOW_RANK_METHOD,
                "affine": sk.affine,
                "heads_given": True,
                "H0": sk.H,
                "design": design_record(sk),
                "answers": {
                    "F0": [dump_number(float(a)) for a in sk.f0],
                    "F0_redundant": [dump_number(float(a)) for a in sk.f0x],
                    "F": _rows(np.concatenate(sk.rows)),
                    "links": _rows(np.array(sk.links)) if sk.links else [],
                    "rank_check": _rows(sk.check) if len(sk.check) else [],
                    "shifted": _rows(np.concatenate(sk.shifted)) if sk.shifted else [],
                },
                "result": {
                    "exact": False,
                    "heads": dump_heads(heads, sk.d),
                    "beta": dump_number(float(beta)) if sk.affine else None,
                    "parameter_rtol": dump_number(float(tolerance[0])),
                    "parameter_error_estimate": dump_number(float(tolerance[1])),
                    "parameter_error_estimate_kind": "low-rank skeleton",
                    "error_figures": figures_record(
                        ErrorFigures(
                            stated_relative_error(float(tolerance[1]), heads, beta),
                            checked.max_gap if checked is not None and checked.count else None,
                        )
                    ),
                },
            }
        )
        return data

    return MultiHeadRecovery.from_run(
        counts,
        theorem=THEOREM,
        method=LOW_RANK_METHOD,
        parameters=params,
        learned_model=model,
        arithmetic="float",
        precision=None,
        exact=False,
        bound=bound,
        parameter_count=low_rank_parameter_count(sk.d, sk.H, sk.p),
        seed=sk.seed,
        rounds=1,
        verification=checked,
        notes=_notes(sk, counts, bound, tolerance[1]),
        certificate_data=certificate,
        parameter_rtol=tolerance[0],
        parameter_error_estimate=tolerance[1],
    )

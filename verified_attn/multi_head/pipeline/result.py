"""Stage 9, result: the float canonical certificate's data."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import certificate_base
from verified_attn.multi_head.canonical_bounds import (
    METHOD,
    THEOREM,
    follow_up_query_bound,
    parameter_count,
)
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.multi_head.pipeline.budget import float_query_bound
from verified_attn.multi_head.pipeline.design import box_precision, coarse
from verified_attn.multi_head.pipeline.refine import REFINED_KIND, refined_figure
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.multi_head.prediction_bound import PREDICTION_SEQUENCES, PREDICTION_SIGMAS
from verified_attn.oracle import QueryCounts
from verified_attn.precision import ErrorFigures, figures_record, stated_relative_error
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.serialize import dump_number
from verified_attn.verification import (
    Verification,
)


def _design_record(U: np.ndarray, B: np.ndarray, answers: dict[str, Any]) -> dict[str, Any]:
    """The certificate's ``design``: U, B, the ratios and u scale, and for the record the
    pilot's discarded rounds, the conditioning rounds and the low-rank restarts."""
    return {
        "U": [[dump_number(float(x)) for x in row] for row in U],
        "B": [[dump_number(float(x)) for x in row] for row in B],
        "ratios": [[k, m] for k, m in answers["ratios"]],
        "u_scale": dump_number(float(answers["scale"])),
        # The pilot's discarded rounds: counted, kept for the record (not decoded).
        "pilot": [
            {
                "scale": dump_number(float(p["scale"])),
                "answers": [[dump_number(float(a)) for a in row] for row in p["answers"]],
            }
            for p in answers["pilot"]
        ],
        # Conditioning rounds: u-group k's row scaled by factor, or (redundant design)
        # turned by angle toward row partner (U holds the result); the replaced
        # answers (its pairs, then the links through it) for the record.
        "conditioning": [
            {
                "k": c["k"],
                "factor": dump_number(float(c["factor"])),
                **(
                    {"partner": c["partner"], "angle": dump_number(float(c["angle"]))}
                    if "partner" in c
                    else {}
                ),
                "answers": [[dump_number(float(a)) for a in row] for row in c["answers"]],
            }
            for c in answers["conditioning"]
        ],
        # The stalled u-groups whose fit was started again from the other groups'
        # low-rank head planes (no query; float_rescue), and that rank: for the record.
        "low_rank_restarts": {
            "groups": [int(k) for k in answers["restarts"]["groups"]],
            "rank": int(answers["restarts"]["rank"]),
        },
    }


def _dump_groups(groups: dict[str, Any]) -> dict[str, Any]:
    """Group figures (refine.refined_error_groups) with every number stored exactly."""
    return {
        k: [dump_number(float(x)) for x in v] if isinstance(v, list) else dump_number(float(v))
        for k, v in groups.items()
    }


def _refined(st: FloatState) -> bool:
    """Whether the result states the refined fit's parameter figure (refine.refined_figure)."""
    return bool(len(st.refine_ans)) and refined_figure(st.d, st.H, st.affine)


def _certificate_data(
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    answers: dict[str, Any],
    heads: list[tuple[np.ndarray, ...]],
    beta: float | None,
    H: int,
    affine: bool,
    checked: Verification | None,
    seed: int,
    counts: QueryCounts,
    bound: int,
    tolerance: tuple[float, float, str, dict[str, Any] | None],
    prediction: dict[str, Any] | None,
) -> dict[str, Any]:
    """The float canonical certificate: the float design, every answer bit-exact, the heads,
    the stated parameter tolerance and the first-order estimate it covers, and the
    prediction bound (its sequences' seed and lengths, its figures; None for a joint fit,
    whose bound its checker does not recompute)."""
    d = U.shape[0]
    data = certificate_base(
        kind="multi-head",
        theorem=THEOREM,
        d=d,
        arith=arith,
        seed=seed,
        counts=counts,
        bound=bound,
        verification=checked,
        bias=beta if affine else None,
    )
    data.update(
        {
            "method": METHOD,
            "affine": affine,
            "heads_given": True,
            "H0": H,
            "working_precision": None,
            "denominator_bound": None,
            "design": _design_record(U, B, answers),
            "answers": {
                "F0": [dump_number(float(a)) for a in answers["F0"]],
                "F": [[dump_number(float(a)) for a in row] for row in answers["F"]],
                "ties": [
                    {"k": t["k"], "j": t["j"], "answer": dump_number(float(t["answer"]))}
                    for t in answers["ties"]
                ],
                # The sequence polish's answers (a coarse box), on polish_sequences(d, ., seed).
                **(
                    {"polish": [dump_number(float(a)) for a in answers["polish"]]}
                    if answers["polish"]
                    else {}
                ),
                # The refinement's answers, on refine.picked_sequences(d, ., seed, picks).
                **(
                    {"refinement": [dump_number(float(a)) for a in answers["refine"]]}
                    if answers["refine"]
                    else {}
                ),
                **(
                    {"refinement_picks": list(answers["refine_picks"])}
                    if answers.get("refine_picks")
                    else {}
                ),
            },
            "result": {
                "exact": False,
                "heads": dump_heads(heads, d),
                "beta": None if beta is None else dump_number(float(beta)),
                # The parameters' stated tolerance (relative to max(1, largest parameter));
                # the checker recomputes the estimate from the answers and the heads.
                "parameter_rtol": dump_number(float(tolerance[0])),
                "parameter_error_estimate": dump_number(float(tolerance[1])),
                # "u-groups", "joint", "sequences" (the sequence polish) or "refinement"
                "parameter_error_estimate_kind": tolerance[2],
                # Per parameter group (refinement only; checked like the estimate).
                **(
                    {"parameter_error_estimate_groups": _dump_groups(tolerance[3])}
                    if tolerance[3] is not None
                    else {}
                ),
                # The figures in bits (verified_attn.precision), recomputed by the checker.
                "error_figures": figures_record(
                    ErrorFigures(
                        stated_relative_error(float(tolerance[1]), heads, float(beta or 0.0)),
                        checked.max_gap if checked is not None and checked.count else None,
                    )
                ),
                "prediction_bound": {
                    k: dump_number(float(v)) if k in ("ratio", "worst_case", "sigmas") else v
                    for k, v in (prediction or {}).items()
                },
            },
        }
    )
    if prediction is None:
        del data["result"]["prediction_bound"]
    return data


def _notes(st: FloatState, counts: QueryCounts) -> list[str]:
    """The recovery's notes: the queries by phase against the bounds, then the figures."""
    phase = counts.by_phase.get
    d, H, rtol = st.d, st.H, st.oracle.arithmetic.rtol
    polished = phase("polish", 0)
    over = counts.learning - follow_up_query_bound(d, H)
    why = (
        f"the coarse design's {st.wide} redundant probe columns"
        if st.wide and coarse(st.unit)
        else "the conditioning rounds" + (" and the precision polish" if polished else "")
    )
    past = f", not under it ({over:+d}) with {why}" if over >= 0 else ""
    restarts = (
        f", {len(st.restarted)} restarted from the other groups' rank-{st.rank} head planes"
        if st.restarted
        else ""
    )
    return [
        f"canonical method (float ratio grid): {counts.learning} learning queries "
        f"({phase('pilot', 0)} pilot, {len(st.discarded)} rescaling rounds of {d} pairs "
        f"discarded, u scale {st.scale:.4g}; {phase('conditioning', 0)} conditioning, "
        f"{len(st.replaced)} u-groups asked again{restarts}; {phase('redundancy', 0)} "
        f"redundant, {phase('tie links', 0)} tie links, {polished} polish, "
        f"{phase('refinement', 0)} refinement), <= {st.bound} "
        "(without ties, rescaling or a precision polish "
        f"{float_query_bound(d, H, affine=st.affine, unit=st.unit)}; the follow-up's "
        f"4Hd^2 - 2H + 1 = {follow_up_query_bound(d, H)}{past}); float64 decoding, every "
        f"learning answer reproduced at rtol {rtol:g}",
        f"{H} canonical heads ({box_precision(st.oracle.arithmetic)} answers; not exact); "
        f"first-order parameter error estimate {st.estimate:.2e} relative (the worst case of "
        f"one parameter under the answers' noise; <= the parameter "
        f"tolerance {st.prtol:g} stated for the heads; predictions verified at rtol {rtol:g}, "
        f"and to first order on {PREDICTION_SEQUENCES} sequences of the verification's "
        f"generator ({PREDICTION_SIGMAS:g} standard deviations of the prediction error at most "
        f"{st.prediction[0]:.3g} x what the rule allows, the worst case "
        f"{st.prediction[1]:.3g} x); residual norm / {st.figure}; closest score gap "
        f"{st.decoded.gap:.2e})",
    ]


def result_stage(st: FloatState, counts: QueryCounts) -> MultiHeadRecovery:
    """Stage 10, the result: the recovery with its notes and its certificate's data."""
    beta = st.beta_fit if st.affine else None
    params: dict[str, Any] = {"heads": st.heads}
    if st.affine:
        params["beta"] = beta
    groups = st.estimate_groups if _refined(st) else None
    answers = {
        "F0": list(st.f0),
        "F": st.ans.tolist(),
        "ties": st.tie_answers,
        "ratios": st.ratios,
        "pilot": st.discarded,
        "scale": st.scale,
        "conditioning": st.replaced,
        "restarts": {"groups": st.restarted, "rank": st.rank},
        "polish": st.polish_ans.tolist(),
        "refine": st.refine_ans.tolist(),
        "refine_picks": st.refine_picks,
    }
    prediction = {
        "sequences": PREDICTION_SEQUENCES,
        "seed": st.seed,
        "lengths": list(st.lengths),
        "sigmas": PREDICTION_SIGMAS,
        "ratio": st.prediction[0],
        "worst_case": st.prediction[1],
    }
    certificate = functools.partial(
        _certificate_data,
        st.oracle.arithmetic,
        st.U,
        st.B,
        answers,
        st.heads,
        beta,
        st.H,
        st.affine,
        st.checked,
        st.seed,
        counts,
        st.bound,
        # A refined result states the refined fit's parameter figure; the prediction bound
        # stays the earlier fit's (none for a joint fit: its checker does not recompute it).
        (st.prtol, st.estimate, REFINED_KIND if _refined(st) else st.kind, groups),
        None if st.kind == "joint" else prediction,
    )
    return MultiHeadRecovery.from_run(
        counts,
        theorem=THEOREM,
        method=METHOD,
        parameters=params,
        learned_model=st.candidate,
        arithmetic="float",
        precision=None,
        exact=False,
        bound=st.bound,
        parameter_count=parameter_count(st.d, st.H, st.affine),
        seed=st.seed,
        rounds=1 + (1 if counts.by_phase.get("tie links", 0) else 0),
        verification=st.checked,
        notes=_notes(st, counts),
        certificate_data=certificate,
        parameter_rtol=st.prtol,
        parameter_error_estimate=st.estimate,
        parameter_error_estimate_groups=groups,
    )

"""Stage 9, result: the float canonical certificate's data."""

from __future__ import annotations

from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import certificate_base
from verified_attn.multi_head.canonical_bounds import (
    METHOD,
    THEOREM,
)
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.oracle import QueryCounts
from verified_attn.serialize import dump_number
from verified_attn.verification import (
    Verification,
)


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
    tolerance: tuple[float, float, str],
    prediction: dict[str, Any],
) -> dict[str, Any]:
    """The float canonical certificate: the float design, every answer bit-exact, the heads,
    the stated parameter tolerance and the first-order estimate it covers, and the
    prediction bound (its sequences' seed and lengths, its figures)."""
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
            "design": {
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
            },
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
            },
            "result": {
                "exact": False,
                "heads": dump_heads(heads, d),
                "beta": None if beta is None else dump_number(float(beta)),
                # The parameters' stated tolerance (relative to max(1, largest parameter));
                # the checker recomputes the estimate from the answers and the heads.
                "parameter_rtol": dump_number(float(tolerance[0])),
                "parameter_error_estimate": dump_number(float(tolerance[1])),
                # "u-groups", "joint" or "sequences" (the sequence polish)
                "parameter_error_estimate_kind": tolerance[2],
                "prediction_bound": {
                    k: dump_number(float(v)) if k in ("ratio", "worst_case", "sigmas") else v
                    for k, v in prediction.items()
                },
            },
        }
    )
    if tolerance[2] == "joint":  # its checker does not recompute a joint fit's bound
        del data["result"]["prediction_bound"]
    return data

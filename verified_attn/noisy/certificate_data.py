"""Theorem 6.1's certificate data: every answer as given, the tolerance, the design, the intervals.

The checker :mod:`verified_attn.certificates.noisy` re-derives the intervals from these
answers with its own code.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.certificates.writer import certificate_base
from verified_attn.noisy.intervals import INTERVAL_PRECISION
from verified_attn.noisy.planning import A
from verified_attn.noisy.verification import ToleranceVerification
from verified_attn.oracle import QueryCounts
from verified_attn.serialize import dump_number, dump_rational

__all__ = ["noisy_certificate_data"]

THEOREM = "thm-6.1"


def noisy_certificate_data(
    *,
    d: int,
    arith: Any,
    design: str,
    U: list[list[Fraction]],
    b: Fraction,
    tau: Fraction,
    wbar: Fraction,
    mu: Fraction,
    repeats: int,
    raw_v: list[list[float]],
    raw_W: list[list[float]],
    est: dict[str, Any],
    checked: ToleranceVerification | None,
    seed: int,
    counts: QueryCounts,
    bound: int,
    assumptions: list[str],
) -> dict[str, Any]:
    """The certificate: every answer as the oracle gave it, tolerance, design, intervals.

    Checked by :mod:`verified_attn.certificates.noisy` (see there for what it re-derives).
    ``answers.W[k][j]`` lists the answers to [b u_k + a e_j; a e_j], ``answers.v[i]`` those
    to [e_i] (``repeats`` each); ``verification.answers[i]`` those to the i-th fresh
    sequence.
    """
    data = certificate_base(
        kind="noisy",
        theorem=THEOREM,
        d=d,
        arith=arith,
        seed=seed,
        counts=counts,
        bound=bound,
        verification=None,
        assumptions=assumptions,
    )

    def floats(arr: Any) -> Any:
        return [floats(x) for x in arr] if np.ndim(arr) else dump_number(float(arr))

    data["verified"] = checked is not None and checked.count > 0
    data["verification"] = {
        "rule": "within-tolerance",
        "count": 0 if checked is None else checked.count,
        "seed": seed if checked is None else checked.seed,
        "lengths": [1] if checked is None else list(checked.lengths),
        "answers": []
        if checked is None
        else [[dump_number(a) for a in row] for row in checked.raw_answers],
    }
    data.update(
        {
            "noise": {
                "tolerance": dump_rational(tau),
                "w_bound": dump_rational(wbar),
                "margin": dump_rational(mu),
                "repeats": repeats,
                "stochastic": None,
            },
            "design": {
                "name": design,
                "U": [[dump_rational(q) for q in row] for row in U],
                "a": dump_rational(A),
                "b": dump_rational(b),
                "interval_precision": INTERVAL_PRECISION,
            },
            "answers": {
                "v": [[dump_number(a) for a in row] for row in raw_v],
                "W": [
                    [[dump_number(a) for a in raw_W[k * d + j]] for j in range(d)] for k in range(d)
                ],
            },
            "result": {
                "exact": False,
                "parameters": {"W": floats(est["W"]), "v": floats(est["v"])},
                "enclosures": {
                    "W": {"lower": floats(est["W_lower"]), "upper": floats(est["W_upper"])},
                    "v": {"lower": floats(est["v_lower"]), "upper": floats(est["v_upper"])},
                    "W_error": floats(est["W_error"]),
                    "v_error": floats(est["v_error"]),
                },
            },
        }
    )
    return data

"""The common sections of a certificate, written next to the kernel that reads them.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact"))
>>> data = rec.certificate()
>>> data["format"], data["kind"], data["queries"]["learning"], data["verification"]["count"]
('verified-attn-certificate/2', 'single-head', 2, 8)

A room's certificate is ``certificate_base(...)`` plus its own sections (design, answers,
result); :mod:`verified_attn.certificates.kernel` reads the common ones back.
"""

from __future__ import annotations

from typing import Any

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.kernel import FORMAT
from verified_attn.oracle import QueryCounts
from verified_attn.serialize import dump_number
from verified_attn.verification import Verification

__all__ = ["certificate_base"]


def certificate_base(
    *,
    kind: str,
    theorem: str,
    d: int,
    arith: Arithmetic,
    seed: int,
    counts: QueryCounts,
    bound: int,
    verification: Verification | None,
    assumptions: list[str] | None = None,
    bias: Any = None,
) -> dict[str, Any]:
    """Header, ``queries`` and ``verification`` sections (answers stored exactly).

    ``bias`` is the output bias the float agreement rule subtracts (None: no bias).
    """
    ver: dict[str, Any]
    if verification is None:
        ver = {
            "count": 0,
            "seed": seed,
            "lengths": [1],
            "precision": None,
            "bias": None,
            "answers": [],
        }
    else:
        ver = {
            "count": verification.count,
            "seed": verification.seed,
            "lengths": list(verification.lengths),
            "precision": verification.precision,
            "bias": None if bias is None else dump_number(bias),
            "answers": [dump_number(a) for a in verification.answers],
        }
    return {
        "format": FORMAT,
        "kind": kind,
        "theorem": theorem,
        "d": d,
        "arithmetic": arith.name,
        "precision": arith.precision,
        "rtol": float(arith.rtol) if arith.name == "float" else None,
        "unit_roundoff": float(arith.unit_roundoff) if arith.name == "float" else None,
        "seed": seed,
        "assumptions": list(assumptions or []),
        "verified": verification is not None and verification.count > 0,
        "queries": {
            "learning": counts.learning,
            "verification": counts.verification,
            "by_phase": dict(counts.by_phase),
            "verification_phases": list(counts.verification_phases),
            "bound": bound,
        },
        "verification": ver,
    }

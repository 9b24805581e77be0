"""The common sections of a certificate, written next to the kernel that reads them.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact"))
>>> data = rec.certificate()
>>> data["format"], data["kind"], data["queries"]["learning"], data["verification"]["count"]
('verified-attn-certificate/2', 'single-head', 2, 8)

A room's certificate is ``certificate_base(...)`` (or :meth:`RunRecord.header`, the same
from one record of the run) plus its own sections (design, answers, result);
:mod:`verified_attn.certificates.kernel` reads the common ones back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.kernel import FORMAT
from verified_attn.oracle import QueryCounts
from verified_attn.serialize import dump_number
from verified_attn.verification import Verification

__all__ = ["RunRecord", "certificate_base", "dump_floats", "fresh_section", "union_balls"]


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
    run = RunRecord(arith, seed, counts, bound, verification, list(assumptions or []))
    return run.header(kind, theorem, d, bias=bias)


@dataclass(frozen=True)
class RunRecord:
    """What every certificate's header states of a learner's run: the arithmetic, the seed,
    the query counts and bound, the verification (None: not stored in the header) and the
    assumptions in force.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> from verified_attn.oracle import QueryCounts
    >>> run = RunRecord(get_arithmetic("exact"), 0, QueryCounts(2, 0, {"v": 2}, (), 2, 1), 2)
    >>> head = run.header("single-head", "thm-4.1", 1)
    >>> head["queries"]["learning"], head["verified"], head["assumptions"]
    (2, False, [])
    """

    arith: Arithmetic
    seed: int
    counts: QueryCounts
    bound: int
    verification: Verification | None = None
    assumptions: list[str] = field(default_factory=list)

    def header(self, kind: str, theorem: str, d: int, *, bias: Any = None) -> dict[str, Any]:
        """The header, ``queries`` and ``verification`` sections of a ``kind`` certificate of
        this run (answers stored exactly); ``bias`` is the output bias the float agreement
        rule subtracts (None: no bias)."""
        arith, counts, checked = self.arith, self.counts, self.verification
        ver: dict[str, Any]
        if checked is None:
            ver = {
                "count": 0,
                "seed": self.seed,
                "lengths": [1],
                "precision": None,
                "bias": None,
                "answers": [],
            }
        else:
            ver = {
                "count": checked.count,
                "seed": checked.seed,
                "lengths": list(checked.lengths),
                "precision": checked.precision,
                "bias": None if bias is None else dump_number(bias),
                "answers": [dump_number(a) for a in checked.answers],
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
            "seed": self.seed,
            "assumptions": list(self.assumptions),
            "verified": checked is not None and checked.count > 0,
            "queries": {
                "learning": counts.learning,
                "verification": counts.verification,
                "by_phase": dict(counts.by_phase),
                "verification_phases": list(counts.verification_phases),
                "bound": self.bound,
            },
            "verification": ver,
        }


def union_balls(mine: Any, again: Any) -> np.ndarray:
    """Entry by entry, the smallest ball holding both a learner's ball and the one a checker
    re-decodes from the stored answers (call in the arithmetic's context), shaped as ``mine``.

    Both contain the truth, so their union does; storing it lets the checker demand
    containment exactly, with no tolerance.

    >>> ball = union_balls([flint.arb(1)], [flint.arb(3)])[0]
    >>> ball.contains(1) and ball.contains(3)
    True
    """
    arr = np.asarray(mine, dtype=object)
    flat = [
        flint.arb(x).union(y)
        for x, y in zip(arr.reshape(-1), np.asarray(again, dtype=object).reshape(-1), strict=True)
    ]
    return np.array(flat, dtype=object).reshape(arr.shape)


def fresh_section(rule: str, checked: Any, seed: int, answers: list[Any]) -> dict[str, Any]:
    """A ``verification`` section under a room's own ``rule``: the count, seed and lengths
    of the fresh sequences ``checked`` asked (None: none, at the run's ``seed``) and the
    ``answers`` as stored.

    >>> fresh_section("within-tolerance", None, 3, [])
    {'rule': 'within-tolerance', 'count': 0, 'seed': 3, 'lengths': [1], 'answers': []}
    """
    return {
        "rule": rule,
        "count": 0 if checked is None else checked.count,
        "seed": seed if checked is None else checked.seed,
        "lengths": [1] if checked is None else list(checked.lengths),
        "answers": answers,
    }


def dump_floats(arr: Any) -> Any:
    """An array (nested to any depth) as nested lists of exact float entries.

    >>> dump_floats(np.array([[0.5, 2.0]]))
    [[{'float': '0x1.0000000000000p-1'}, {'float': '0x1.0000000000000p+1'}]]
    """
    return [dump_floats(x) for x in arr] if np.ndim(arr) else dump_number(float(arr))

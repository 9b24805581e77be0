"""Text and JSON renderings of a learner's result, for people and files.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
>>> print(recovery_text(rec))  # doctest: +ELLIPSIS
thm-4.1 (single-head): recovered v, W (2 numbers)
queries: 2 learning (bound 2; = the bound), 8 verification
...
parameters:
  v = [3]
  W =
    [ 2 ]
>>> "parameters:" in recovery_text(rec, parameters=False)
False
"""

from __future__ import annotations

import datetime
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.phases import phase_glossary
from verified_attn.recovery import Recovery, versions
from verified_attn.report import format_number

__all__ = ["recovery_json", "recovery_text"]

_MEANING = {
    "exact": "exact rationals, equal (==) to the truth",
    "certified-exact": "exact rationals reconstructed from certified balls, then verified",
    "certified": "certified balls, each containing the true value",
    "float": "float64 approximations",
}


def _number(x: Any) -> str:
    """A number for a parameter table: balls as ``mid +/- rad`` without flint's brackets.

    >>> import flint
    >>> _number(flint.arb(1, 0.25)), _number(flint.arb(0, 0.25))
    ('1e+0 +/- 0.251', '0 +/- 0.251')
    """
    text = format_number(x)
    if isinstance(x, flint.arb) and text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
        return "0 " + text if text.startswith("+/-") else text
    return text


def _entries(val: Any) -> tuple[list[list[str]], bool]:
    """Parameter entries as rows of strings, and whether it is a vector/scalar (one row)."""
    if isinstance(val, sympy.MatrixBase):
        rows = val.tolist()
        if val.shape[1] == 1:
            return [[_number(x) for x in val]], True
        return [[_number(x) for x in row] for row in rows], False
    arr = np.asarray(val, dtype=object)
    if arr.ndim == 0:
        return [[_number(arr.item())]], True
    if arr.ndim == 1:
        return [[_number(x) for x in arr]], True
    return [[_number(x) for x in row] for row in arr.tolist()], False


def _format_parameter(name: str, val: Any) -> list[str]:
    rows, flat = _entries(val)
    if name == "W" and flat:  # a 1 x 1 matrix is still a matrix
        flat = False
    if flat and len(rows[0]) == 1 and name == "beta":
        return [f"  {name} = {rows[0][0]}"]
    if flat:
        return [f"  {name} = [" + ", ".join(rows[0]) + "]"]
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    out = [f"  {name} ="]
    for row in rows:
        out.append(
            "    [ " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " ]"
        )
    return out


def _format_value(name: str, val: Any) -> list[str]:
    """A parameter, or a list of heads (each a tuple of W, v[, c]) one after the other."""
    if isinstance(val, list | tuple) and val and isinstance(val[0], tuple | list):
        out = []
        for h, head in enumerate(val):
            for part, x in zip(("W", "v", "c"), head, strict=False):
                lines = _format_parameter(part, x)
                lines[0] = lines[0].replace(f"  {part}", f"  {name}[{h}].{part}", 1)
                out.extend(lines)
        return out
    return _format_parameter(name, val)


def recovery_text(rec: Recovery, *, parameters: bool = True) -> str:
    """A result for people: counts against the bound by phase, exactness, verification
    (on which sequences, under which rule), assumptions, notes and (``parameters``) the
    learned parameters."""
    phases = ", ".join(f"{k} {n}" for k, n in rec.queries_by_phase.items())
    arith = rec.arithmetic + (f" at {rec.precision} bits" if rec.precision else "")
    if rec.arithmetic == "certified":
        kind = "certified-exact" if rec.exact else "certified"
    else:
        kind = rec.arithmetic
    if rec.queries == rec.bound:
        versus = "= the bound"
    elif rec.queries < rec.bound:
        versus = f"{rec.bound - rec.queries} below the bound"
    else:
        versus = f"the bound + {rec.queries - rec.bound} extra, see the phases"
    verification = (
        "verification: " + rec.verification.describe() + ": PASSED"
        if rec.verified and rec.verification is not None
        else "verification: NOT VERIFIED (verify=0)"
    )
    lines = [
        f"{rec.theorem} ({rec.kind}): recovered {', '.join(rec.parameters)} "
        f"({rec.parameter_count} numbers)",
        f"queries: {rec.queries} learning (bound {rec.bound_text()}; {versus}), "
        f"{rec.verification_queries} verification",
        f"  by phase: {phases}",
        f"  tokens sent {rec.tokens_sent}, longest query {rec.max_length}, rounds {rec.rounds}",
        f"arithmetic: {arith}; parameters are {_MEANING[kind]}",
        verification,
    ]
    if rec.arithmetic == "float" and rec.verification is not None:
        lines.append(f"precision: {rec.error_figures.text()}")
    lines.extend(f"assumption: {a}" for a in rec.assumptions)
    lines.extend(f"note: {n}" for n in rec.notes)
    lines.extend(phase_glossary(rec.queries_by_phase))
    if parameters:
        lines.append("parameters:")
        for name, val in rec.parameters.items():
            lines.extend(_format_value(name, val))
    return "\n".join(lines)


def recovery_json(rec: Recovery) -> dict[str, Any]:
    """:meth:`Recovery.to_dict` plus the versions and the date."""
    fields = rec.to_dict()
    fields["versions"] = versions()
    fields["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return fields

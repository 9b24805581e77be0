"""Text, JSON and Markdown renderings of claim results (recoveries: recovery_report.py).

>>> from verified_attn.checks import ClaimResult
>>> r = ClaimResult("thm-4.1/query-count", "Thm 4.1", "d^2 + d queries suffice.", True,
...                 queries=72, bound=72, seconds=0.25)
>>> print(claims_table([r]))
id                   paper ref  statement                 queries (bound)  result  seconds
-------------------  ---------  ------------------------  ---------------  ------  -------
thm-4.1/query-count  Thm 4.1    d^2 + d queries suffice.  72 (72)          PASS       0.25
1 passed, 0 failed
>>> print(claims_markdown([r]).splitlines()[2])
| `thm-4.1/query-count` | Thm 4.1 | d^2 + d queries suffice. | 72 (72) | PASS | 0.25 |

Numbers in JSON are written with :mod:`verified_attn.serialize`, so exact rationals,
float bits and ball endpoints survive the round trip; the header records the seed, the
versions of everything involved (:func:`verified_attn.recovery.versions`) and the date.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import asdict
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.checks import Claim, ClaimResult
from verified_attn.errors import InvalidArgument
from verified_attn.recovery import versions
from verified_attn.serialize import dump_number

__all__ = [
    "claim_list_markdown",
    "claim_list_text",
    "claims_json",
    "claims_markdown",
    "claims_table",
    "claims_verbose",
    "format_number",
    "jsonable",
]

STATEMENT_WIDTH = 60


def _verdict(r: ClaimResult) -> str:
    return "SKIP" if r.skipped else "PASS" if r.passed else "FAIL"


def _summary(results: Sequence[ClaimResult]) -> tuple[str, list[ClaimResult]]:
    """ "n passed, m failed" (+ ", k skipped ..." when some could not run) and the failures.

    >>> from verified_attn.checks import ClaimResult
    >>> skip = ClaimResult("formal/x", "Thm", "s", False, "skipped: needs Coq", skipped=True)
    >>> _summary([skip])[0]
    '0 passed, 0 failed, 1 skipped (1 formal claim needs Coq: apt-get install coq ...)'
    """
    skipped = [r for r in results if r.skipped]
    failed = [r for r in results if not r.passed and not r.skipped]
    text = f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed"
    if skipped:
        formal = sum(r.id.startswith("formal/") for r in skipped)
        text += f", {len(skipped)} skipped"
        if formal:
            noun = "claim needs" if formal == 1 else "claims need"
            text += f" ({formal} formal {noun} Coq: apt-get install coq ...)"
    return text, failed


def _shorten(text: str, width: int = STATEMENT_WIDTH) -> str:
    """One line of at most ``width`` characters ("..." marks a cut).

    >>> _shorten("a  b\\nc", 10), _shorten("x" * 12, 10)
    ('a b c', 'xxxxxxx...')
    """
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _counts(r: ClaimResult) -> str:
    if r.queries is None and r.bound is None:
        return "-"
    used = "-" if r.queries is None else str(r.queries)
    bound = "-" if r.bound is None else str(r.bound)
    return f"{used} ({bound})"


def _align(rows: list[list[str]], right: Sequence[int] = ()) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def claims_table(results: Sequence[ClaimResult]) -> str:
    """A plain-text table, one row per claim, with a pass/fail count; failures' details
    follow the table, since that is what one needs to read next."""
    header = ["id", "paper ref", "statement", "queries (bound)", "result", "seconds"]
    rows = [header] + [
        [
            r.id,
            r.paper_ref,
            _shorten(r.statement),
            _counts(r),
            _verdict(r),
            f"{r.seconds:.2f}",
        ]
        for r in results
    ]
    summary, failed = _summary(results)
    lines = [_align(rows, right=[5]), summary]
    lines.extend(f"FAIL {r.id}: {r.detail}" for r in failed)
    return "\n".join(lines)


def claims_verbose(results: Sequence[ClaimResult]) -> str:
    """Every claim in full: id, reference, the whole statement, counts, result and detail.

    >>> from verified_attn.checks import ClaimResult
    >>> print(claims_verbose([ClaimResult("a/b", "Thm 1", "x " * 40, True, "ok")]))
    PASS a/b (Thm 1), 0.00 s
      x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x
      detail: ok
    """
    import textwrap

    blocks = []
    for r in results:
        head = f"{_verdict(r)} {r.id} ({r.paper_ref}), {r.seconds:.2f} s"
        if r.queries is not None or r.bound is not None:
            head += f", queries {_counts(r)}"
        body = textwrap.wrap(" ".join(r.statement.split()), 88) or [""]
        lines = [head, *(f"  {line}" for line in body)]
        if r.detail:
            lines.append(f"  detail: {' '.join(r.detail.split())}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def claims_markdown(results: Sequence[ClaimResult]) -> str:
    """A Markdown table of results (full statements), then the failures' details."""
    lines = [
        "| id | paper ref | statement | queries (bound) | result | seconds |",
        "|---|---|---|---|---|---:|",
    ]
    lines += [
        f"| `{r.id}` | {_md_cell(r.paper_ref)} | {_md_cell(r.statement)} | {_counts(r)} | "
        f"{'**FAIL**' if _verdict(r) == 'FAIL' else _verdict(r)} | {r.seconds:.2f} |"
        for r in results
    ]
    summary, failed = _summary(results)
    lines.append("")
    lines.append(f"{summary}.")
    lines += [f"- **{r.id}** failed: {_md_cell(r.detail)}" for r in failed]
    return "\n".join(lines) + "\n"


def claims_json(results: Sequence[ClaimResult], *, seed: int) -> dict[str, Any]:
    """A JSON-ready dict: a header (seed, versions, date) and every field of every claim."""
    return {
        "tool": "verified-attn check",
        "seed": seed,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": versions(),
        "passed": sum(r.passed for r in results),
        "failed": sum(not r.passed and not r.skipped for r in results),
        "skipped": sum(r.skipped for r in results),
        "claims": [jsonable(asdict(r)) for r in results],
    }


def claim_list_text(claims: Sequence[Claim]) -> str:
    """The registered claims as a text table (id, paper ref, shortened statement, level:
    proved for all d in Coq, symbolic at every d up to a size, or checked on instances)."""
    rows = [["id", "paper ref", "statement", "level"]]
    rows += [[c.id, c.paper_ref, _shorten(c.statement), c.level] for c in claims]
    return _align(rows)


def claim_list_markdown(claims: Sequence[Claim]) -> str:
    """The CLAIMS.md table's columns id, paper, statement: full statements, pipes escaped.

    >>> from verified_attn.checks import Claim
    >>> print(claim_list_markdown([Claim("x/y", "Thm 1", "a | b", lambda s: None)]))
    | id | paper | statement |
    |---|---|---|
    | `x/y` | Thm 1 | a \\| b |
    <BLANKLINE>
    """
    lines = ["| id | paper | statement |", "|---|---|---|"]
    lines += [f"| `{c.id}` | {_md_cell(c.paper_ref)} | {_md_cell(c.statement)} |" for c in claims]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Numbers.
# ---------------------------------------------------------------------------------------


def jsonable(x: Any) -> Any:
    """``x`` with every number in a JSON-safe, lossless form (see serialize.dump_number).

    >>> jsonable({"q": Fraction(1, 3), "n": [1, 2.5], "s": "ok"})
    {'q': {'rational': '1/3'}, 'n': [1, 2.5], 's': 'ok'}
    """
    if x is None or isinstance(x, str | bool):
        return x
    if isinstance(x, int) and not isinstance(x, np.integer):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, sympy.MatrixBase):
        return [[jsonable(v) for v in row] for row in x.tolist()]
    if isinstance(x, np.ndarray):
        return [jsonable(v) for v in x.tolist()] if x.ndim else jsonable(x.item())
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    try:
        return dump_number(x)
    except InvalidArgument:  # not a number of ours: its text
        return str(x)


def format_number(x: Any) -> str:
    """A number for people: rationals exactly, balls as flint prints them, floats in full.

    >>> format_number(Fraction(-2, 3)), format_number(sympy.Rational(5)), format_number(0.1)
    ('-2/3', '5', '0.1')
    """
    if isinstance(x, Fraction):
        return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
    if isinstance(x, sympy.Basic):
        return str(x)
    if isinstance(x, flint.arb):
        return x.str(radius=True)
    if isinstance(x, float | np.floating):
        return repr(float(x))
    return str(x)

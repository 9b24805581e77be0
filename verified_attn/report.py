"""Text, JSON and Markdown renderings of claim results (recoveries: recovery_report.py).

>>> from verified_attn.checks import ClaimResult
>>> r = ClaimResult("thm-4.1/query-count", "Thm 4.1", "d^2 + d queries suffice.", True,
...                 queries=72, bound=72, seconds=0.25)
>>> print(claims_table([r], width=100))
id                   paper ref  statement                 queries (bound)  result  seconds
-------------------- ---------- ------------------------- ---------------- ------- -------
thm-4.1/query-count  Thm 4.1    d^2 + d queries suffice.  72 (72)          PASS       0.25
1 passed, 0 failed
>>> print(claims_table([r], width=60))  # too narrow for a table: one block per claim
PASS thm-4.1/query-count (Thm 4.1), 0.25 s, queries 72 (72)
  d^2 + d queries suffice.
1 passed, 0 failed
>>> print(claims_markdown([r]).splitlines()[2])
| `thm-4.1/query-count` | Thm 4.1 | d^2 + d queries suffice. | 72 (72) | PASS | 0.25 |

Numbers in JSON are written with :mod:`verified_attn.serialize`, so exact rationals,
float bits and ball endpoints survive the round trip; the header records the seed, the
versions of everything involved (:func:`verified_attn.recovery.versions`) and the date.
"""

from __future__ import annotations

import datetime
import io
import math
import shutil
import textwrap
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
    "claim_list_verbose",
    "claims_json",
    "claims_markdown",
    "claims_table",
    "claims_verbose",
    "format_number",
    "jsonable",
    "terminal_width",
]


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


def _counts(r: ClaimResult) -> str:
    if r.queries is None and r.bound is None:
        return "-"
    used = "-" if r.queries is None else str(r.queries)
    bound = "-" if r.bound is None else str(r.bound)
    return f"{used} ({bound})"


def terminal_width() -> int:
    """The width to render for: ``COLUMNS`` if set, else the terminal's, else 80.

    >>> terminal_width() >= 20  # never narrower: a line must hold a word or two
    True
    """
    return max(20, shutil.get_terminal_size((80, 24)).columns)


#: A table whose statement column would be narrower than this is printed as a list,
#: one claim per block (its head line, then the statement indented).
MIN_STATEMENT_WIDTH = 30


def _table(rows: list[list[str]], width: int, right: Sequence[int] = ()) -> str | None:
    """``rows`` (the first is the header; column 2 the statement) as a plain-text table at
    most ``width`` wide, the statement wrapped, the other columns whole; None if the
    statement column would be narrower than :data:`MIN_STATEMENT_WIDTH`."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    fixed = sum(max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0])) if i != 2)
    if width - fixed < MIN_STATEMENT_WIDTH:
        return None
    dashes = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
    table = Table(box=dashes, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, name in enumerate(rows[0]):
        table.add_column(
            name, justify="right" if i in right else "left", overflow="fold", no_wrap=i != 2
        )
    for row in rows[1:]:
        table.add_row(*(Text(cell) for cell in row))  # Text: no markup in statements
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _wrapped(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` on lines of at most ``width`` characters, all indented by ``indent`` (a
    head line: its continuations by two spaces); ids are not split at their hyphens."""
    return textwrap.wrap(
        " ".join(str(text).split()),
        max(width, 20),
        initial_indent=indent,
        subsequent_indent=indent or "  ",
        break_on_hyphens=False,
    ) or [""]


def _result_head(r: ClaimResult) -> str:
    head = f"{_verdict(r)} {r.id} ({r.paper_ref}), {r.seconds:.2f} s"
    if r.queries is not None or r.bound is not None:
        head += f", queries {_counts(r)}"
    return head


def claims_table(results: Sequence[ClaimResult], width: int | None = None) -> str:
    """A plain-text table at most ``width`` characters wide (default the terminal's), one
    row per claim, statements wrapped, with a pass/fail count; failures' details follow
    the table, since that is what one needs to read next. Too narrow for a table: one
    block per claim (as :func:`claims_verbose` without the details)."""
    width = width or terminal_width()
    header = ["id", "paper ref", "statement", "queries (bound)", "result", "seconds"]
    rows = [header] + [
        [
            r.id,
            r.paper_ref,
            " ".join(r.statement.split()),
            _counts(r),
            _verdict(r),
            f"{r.seconds:.2f}",
        ]
        for r in results
    ]
    table = _table(rows, width, right=[5])
    if table is None:
        table = claims_verbose(results, width, details=False)
    summary, failed = _summary(results)
    lines = [table, *_wrapped(summary, width)]
    for r in failed:
        lines += _wrapped(f"FAIL {r.id}: {r.detail}", width)
    return "\n".join(lines)


def claims_verbose(
    results: Sequence[ClaimResult], width: int | None = None, *, details: bool = True
) -> str:
    """Every claim in full: id, reference, the whole statement, counts, result and detail,
    wrapped to ``width`` (default the terminal's).

    >>> from verified_attn.checks import ClaimResult
    >>> print(claims_verbose([ClaimResult("a/b", "Thm 1", "x " * 40, True, "ok")], width=90))
    PASS a/b (Thm 1), 0.00 s
      x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x
      detail: ok
    """
    width = width or terminal_width()
    lines: list[str] = []
    for r in results:
        lines += [*_wrapped(_result_head(r), width), *_wrapped(r.statement, width, "  ")]
        if details and r.detail:
            lines += _wrapped(f"detail: {r.detail}", width, "  ")
    return "\n".join(lines)


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


def claim_list_text(claims: Sequence[Claim], width: int | None = None) -> str:
    """The registered claims as a text table at most ``width`` wide (default the
    terminal's): id, paper ref, statement (wrapped), level (proved for all d in Coq,
    symbolic at every d up to a size, or checked on instances). Too narrow for a table:
    one block per claim, its head line then the statement."""
    width = width or terminal_width()
    rows = [["id", "paper ref", "statement", "level"]]
    rows += [[c.id, c.paper_ref, " ".join(c.statement.split()), c.level] for c in claims]
    table = _table(rows, width)
    if table is not None:
        return table
    lines: list[str] = []
    for c in claims:
        lines += _wrapped(f"{c.id} ({c.paper_ref}), {c.level}", width)
        lines += _wrapped(c.statement, width, "  ")
    return "\n".join(lines)


def claim_list_verbose(claims: Sequence[Claim], width: int | None = None) -> str:
    """Each claim in full: id and reference, the whole statement, and how it is checked.

    >>> from verified_attn.checks import Claim
    >>> print(claim_list_verbose([Claim("x/y", "Thm 1", "a b " * 12, lambda s: None)], 40))
    x/y (Thm 1)
      a b a b a b a b a b a b a b a b a b a
        b a b a b
      checked: checked on instances, at its
        one built-in size
    """
    width = width or terminal_width()
    lines: list[str] = []
    for c in claims:
        how = f"checked: {c.level}"
        if c.sizes is not None and c.presets is not None:
            presets = "; ".join(f"{name} {_params(p)}" for name, p in c.presets.items())
            how += f", at a chosen size (default {_params(c.sizes)}; presets {presets})"
        else:
            how += ", at its one built-in size"
        lines += _wrapped(f"{c.id} ({c.paper_ref})", width)
        lines += [*_wrapped(c.statement, width, "  "), *_wrapped(how, width, "  ")]
    return "\n".join(lines)


def _params(params: Any) -> str:
    return ", ".join(f"{k} = {v}" for k, v in dict(params).items())


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

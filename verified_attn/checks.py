"""The small record types that symbolic derivations and claims report with.

>>> from verified_attn.checks import SymbolicCheck
>>> SymbolicCheck("demo", "1 + 1 = 2", holds=True).holds
True

Rooms return :class:`SymbolicCheck` from their ``symbolic.py`` and declare :class:`Claim`
objects in their ``claims.py``; :mod:`verified_attn.claims` collects and runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LEVEL_INSTANCES",
    "LEVEL_SYMBOLIC",
    "Claim",
    "ClaimResult",
    "SymbolicCheck",
    "md_escape",
]

LEVEL_INSTANCES = "checked on instances"
LEVEL_SYMBOLIC = "symbolic at fixed d"

_MD_SPECIAL = set("\\`*_[]<>|#")


def md_escape(text: str) -> str:
    r"""Plain text made safe for a Markdown paragraph (``W_h`` stays ``W_h``, not italics).

    >>> print(md_escape("W_h * v_h"))
    W\_h \* v\_h
    """
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in " ".join(text.split()))


@dataclass(frozen=True)
class SymbolicCheck:
    """The outcome of one symbolic derivation: what was shown, whether it holds, how."""

    name: str
    statement: str
    holds: bool
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ClaimResult:
    """The outcome of checking one claim (one row of ``verified-attn check``)."""

    id: str
    paper_ref: str
    statement: str
    passed: bool
    detail: str = ""
    queries: int | None = None
    bound: int | None = None
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict, compare=False)
    skipped: bool = False  # could not run here (a formal claim without Coq): not a failure

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP`` (as ``verified-attn check`` prints it)."""
        return "SKIP" if self.skipped else ("PASS" if self.passed else "FAIL")

    def _repr_markdown_(self) -> str:
        r"""Jupyter shows the verdict, the statement, the count against its bound, the detail.

        >>> r = ClaimResult("x/y", "Thm 1", "f_1 = f_2 for *every* X", True, "ok", 6, 6, 0.5)
        >>> print(r._repr_markdown_())
        **PASS** `x/y` (Thm 1), 0.50 s
        <BLANKLINE>
        > f\_1 = f\_2 for \*every\* X
        <BLANKLINE>
        queries 6 (bound 6)
        <BLANKLINE>
        ```
        ok
        ```
        """
        lines = [
            f"**{self.status}** `{self.id}` ({md_escape(self.paper_ref)}), {self.seconds:.2f} s",
            "",
            f"> {md_escape(self.statement)}",
        ]
        if self.queries is not None:
            bound = f" (bound {self.bound})" if self.bound is not None else ""
            lines += ["", f"queries {self.queries}{bound}"]
        if self.detail:
            lines += ["", "```", self.detail.replace("```", "'''"), "```"]
        return "\n".join(lines)


@dataclass(frozen=True)
class Claim:
    """A checkable statement: an id, the paper's reference, and a check.

    ``check(seed)`` returns a :class:`ClaimResult`; it must be able to fail. ``level`` says
    how far the check reaches: :data:`LEVEL_INSTANCES` (numeric instances, the default),
    :data:`LEVEL_SYMBOLIC` (a SymPy derivation at a fixed small d), or "proved for all d
    (Coq: name)" for the formal claims.
    """

    id: str
    paper_ref: str
    statement: str
    check: Callable[[int], ClaimResult]
    level: str = "checked on instances"

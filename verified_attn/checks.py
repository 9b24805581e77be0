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

__all__ = ["LEVEL_INSTANCES", "LEVEL_SYMBOLIC", "Claim", "ClaimResult", "SymbolicCheck"]

LEVEL_INSTANCES = "checked on instances"
LEVEL_SYMBOLIC = "symbolic at fixed d"


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

"""The small record types that symbolic derivations and claims report with.

>>> from verified_attn.checks import SymbolicCheck
>>> SymbolicCheck("demo", "1 + 1 = 2", holds=True).holds
True

Rooms return :class:`SymbolicCheck` from their ``symbolic.py`` and declare :class:`Claim`
objects in their ``claims.py``; :mod:`verified_attn.claims` collects and runs them.

Claims at any size
------------------
A claim may declare size parameters: ``sizes`` (their defaults, e.g. ``{"d": 8}``),
``presets`` (the same parameters for each name in :data:`SIZE_PRESETS`) and
``check_at(seed, params)``, the same check at the given size. ``check(seed)`` stays the
claim's default check (often a few small sizes at once); ``check_at`` runs one size.

>>> from verified_attn.checks import Claim, ClaimResult
>>> def at(seed, size):
...     d = size["d"]
...     return ClaimResult("demo/count", "Thm 0", "d^2 + d", d * d + d == d * (d + 1))
>>> claim = Claim("demo/count", "Thm 0", "d^2 + d", lambda seed: at(seed, {"d": 4}),
...               sizes={"d": 4}, presets={"small": {"d": 4}, "medium": {"d": 16},
...                                        "large": {"d": 64}}, check_at=at)
>>> claim.sized, claim.size_params("medium"), claim.size_params(d=100)
(True, {'d': 16}, {'d': 100})
>>> claim.run(0, {"d": 5}).passed
True

A parameter's type follows its default: an int default takes ints (``d``, ``r``), a
float default takes real numbers (a measurement constant ``c``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verified_attn.errors import InvalidArgument

__all__ = [
    "LEVEL_INSTANCES",
    "LEVEL_SYMBOLIC",
    "SIZE_PRESETS",
    "Claim",
    "ClaimResult",
    "SizeParams",
    "SymbolicCheck",
    "md_escape",
    "result_builder",
]

LEVEL_INSTANCES = "checked on instances"
#: A SymPy derivation at every d up to the claim's size (its statement says which d).
LEVEL_SYMBOLIC = "symbolic at every d up to a size"

#: The size preset names every sized claim defines, smallest first.
SIZE_PRESETS = ("small", "medium", "large")

#: One size of a claim: parameter name -> value (``{"d": 8}``, ``{"d": 16, "r": 1, "c": 3.0}``).
SizeParams = dict[str, int | float]

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


def result_builder(paper_ref: str) -> Callable[..., ClaimResult]:
    """The ClaimResult maker of one paper reference: ``(claim_id, statement, passed,
    detail, *, queries=None, bound=None, data=None)``.

    >>> result = result_builder("Thm 4.1")
    >>> r = result("thm-4.1/x", "f is learned", True, "ok", queries=6)
    >>> r.paper_ref, r.status, r.queries, r.data
    ('Thm 4.1', 'PASS', 6, {})
    """

    def result(
        claim_id: str,
        statement: str,
        passed: bool,
        detail: str,
        *,
        queries: int | None = None,
        bound: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> ClaimResult:
        return ClaimResult(
            claim_id, paper_ref, statement, passed, detail, queries, bound, data=data or {}
        )

    return result


@dataclass(frozen=True)
class Claim:
    """A checkable statement: an id, the paper's reference, and a check.

    ``check(seed)`` returns a :class:`ClaimResult`; it must be able to fail. ``level`` says
    how far the check reaches: :data:`LEVEL_INSTANCES` (numeric instances, the default),
    :data:`LEVEL_SYMBOLIC` (a SymPy derivation at every d up to a size, its wrong variants
    rejected), or "proved for all d (Coq: name)" for the formal claims.
    A claim with size support also has ``sizes`` (parameter defaults), ``presets`` (one parameter dict
    per name in :data:`SIZE_PRESETS`) and ``check_at(seed, params)``; see the module
    docstring. A claim without them runs at its one built-in size.
    """

    id: str
    paper_ref: str
    statement: str
    check: Callable[[int], ClaimResult]
    level: str = "checked on instances"
    sizes: Mapping[str, int | float] | None = field(default=None, compare=False)
    presets: Mapping[str, Mapping[str, int | float]] | None = field(default=None, compare=False)
    check_at: Callable[[int, SizeParams], ClaimResult] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        declared = (self.sizes is not None, self.check_at is not None, self.presets is not None)
        if any(declared) and not all(declared):
            raise InvalidArgument(
                f"claim {self.id!r}: sizes, presets and check_at go together (all or none)"
            )
        if self.sizes is None or self.presets is None:
            return
        if not self.sizes:
            raise InvalidArgument(f"claim {self.id!r}: sizes must name at least one parameter")
        if sorted(self.presets) != sorted(SIZE_PRESETS):
            raise InvalidArgument(
                f"claim {self.id!r}: presets must be exactly {', '.join(SIZE_PRESETS)}; "
                f"got {', '.join(self.presets) or 'none'}"
            )
        for name, preset in self.presets.items():
            self._checked(dict(preset), f"preset {name!r}", complete=True)

    @property
    def sized(self) -> bool:
        """Whether the claim can be checked at a chosen size."""
        return self.check_at is not None

    def _checked(self, params: Mapping[str, Any], what: str, *, complete: bool) -> SizeParams:
        from verified_attn.validation import check_int, check_real

        assert self.sizes is not None
        unknown = sorted(set(params) - set(self.sizes))
        where = f"{what}: " if what else ""
        if unknown:
            raise InvalidArgument(
                f"{where}claim {self.id!r} has no size parameter {unknown[0]!r}; "
                f"its size parameters: {', '.join(self.sizes)}"
            )
        if complete and set(params) != set(self.sizes):
            missing = sorted(set(self.sizes) - set(params))
            raise InvalidArgument(f"{where}claim {self.id!r} needs {', '.join(missing)}")
        out: SizeParams = {}
        for key, value in params.items():
            name = f"{what} {key}" if what else key
            if isinstance(self.sizes[key], float):
                out[key] = float(check_real(value, name, low=0, low_open=True))
            else:
                out[key] = int(check_int(value, name, low=1))
        return out

    def size_params(
        self, size: str | None = None, *, d: int | None = None, **params: int | float
    ) -> SizeParams:
        """The parameters to run at: the defaults, or a preset, then explicit values.

        Raises InvalidArgument for a claim without size support, an unknown preset or
        parameter, or a bad value (naming the parameter).
        """
        if not self.sized or self.sizes is None or self.presets is None:
            raise InvalidArgument(f"claim {self.id!r} has no size support")
        if size is None:
            base = dict(self.sizes)
        elif isinstance(size, str) and size in self.presets:
            base = dict(self.presets[size])
        else:
            raise InvalidArgument(f"size must be one of {', '.join(SIZE_PRESETS)}; got {size!r}")
        if d is not None:
            params = {"d": d, **params}
        base.update(self._checked(params, "", complete=False))
        return base

    def run(self, seed: int, params: Mapping[str, int | float] | None = None) -> ClaimResult:
        """``check_at(seed, params)`` (the defaults filled in), or ``check(seed)`` if None."""
        if params is None:
            return self.check(seed)
        assert self.check_at is not None, f"claim {self.id!r} has no size support"
        rest = dict(params)
        d = rest.pop("d", None)
        return self.check_at(seed, self.size_params(None, d=None if d is None else int(d), **rest))

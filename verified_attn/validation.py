"""Argument checks every public function uses: one rule per kind of argument.

>>> from verified_attn.validation import check_seed, check_int
>>> check_seed(3), check_int(5, "d", low=1)
(3, 5)
>>> check_seed(-1)
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: seed must be an int >= 0, got -1
>>> check_int(True, "verify", low=0)
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: verify must be an int, got bool True

In the style of Hypothesis's ``internal/validation.py``: each check names the argument and
the value it got, and raises :class:`~verified_attn.errors.InvalidArgument` (also a
``ValueError``) before anything is computed, so a bad input never leaves work half-done.
numpy integers are accepted where an int is asked for; bools never are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument

__all__ = [
    "MAX_LENGTH",
    "check_bool",
    "check_choice",
    "check_denominator_bound",
    "check_int",
    "check_lengths",
    "check_oracle",
    "check_real",
    "check_seed",
    "check_verify",
    "is_int",
    "number_bytes",
    "require_memory",
    "require_size",
]

#: The longest verification sequence a learner accepts (a longer one is a typo, not a test).
MAX_LENGTH = 4096
#: The most queries a learner or builder plans before refusing (a hang guard: 16x the
#: d^2 + d = 262,656 queries of a d = 512 single head).
MAX_QUERIES = 1 << 22


def is_int(x: Any) -> bool:
    """An int or numpy integer, not a bool."""
    return not isinstance(x, bool | np.bool_) and isinstance(x, int | np.integer)


def check_int(
    x: Any, name: str, *, low: int | None = None, high: int | None = None, allow_none: bool = False
) -> Any:
    """``int(x)`` if ``x`` is an integer in ``[low, high]`` (None: unbounded on that side)."""
    if x is None and allow_none:
        return None
    if not is_int(x):
        raise InvalidArgument(f"{name} must be an int, got {type(x).__name__} {x!r}")
    value = int(x)
    if low is not None and value < low:
        if high is None:
            raise InvalidArgument(f"{name} must be an int >= {low}, got {value}")
        raise InvalidArgument(f"{name} must be an int in {low}..{high}, got {value}")
    if high is not None and value > high:
        raise InvalidArgument(f"{name} must be an int in {low}..{high}, got {value}")
    return value


def check_seed(seed: Any, name: str = "seed") -> int:
    """A seed is a non-negative int (numpy's generators refuse negative ones)."""
    return int(check_int(seed, name, low=0))


def check_verify(verify: Any) -> int:
    """The number of fresh verification queries: an int >= 0 (0 means: do not verify)."""
    return int(check_int(verify, "verify", low=0))


def check_denominator_bound(bound: Any) -> int | None:
    """None (the default 2^(precision/4)) or an int >= 1."""
    return check_int(bound, "denominator_bound", low=1, allow_none=True)


def check_bool(x: Any, name: str, *, allow_none: bool = False) -> Any:
    """True or False (or None where allowed); 0 and 1 are not booleans here."""
    if x is None and allow_none:
        return None
    if not isinstance(x, bool | np.bool_):
        allowed = "True, False or None" if allow_none else "True or False"
        raise InvalidArgument(f"{name} must be {allowed}, got {type(x).__name__} {x!r}")
    return bool(x)


def check_choice(x: Any, name: str, choices: Iterable[str]) -> str:
    """One of the named options."""
    options = tuple(choices)
    if not isinstance(x, str) or x not in options:
        raise InvalidArgument(f"{name} must be one of {', '.join(map(repr, options))}; got {x!r}")
    return x


def check_real(
    x: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
) -> Any:
    """A finite real number (int, float, Fraction, numpy scalar) within the given bounds.

    Returns the value unchanged (a Fraction stays exact); bounds are compared exactly.
    """
    if x is None and allow_none:
        return None
    if isinstance(x, bool | np.bool_) or not isinstance(x, int | float | Fraction | np.number):
        raise InvalidArgument(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    if isinstance(x, float | np.floating) and not math.isfinite(float(x)):
        raise InvalidArgument(f"{name} must be finite, got {x!r}")
    if low is not None and (x <= low if low_open else x < low):
        raise InvalidArgument(f"{name} must be {'>' if low_open else '>='} {low}, got {x!r}")
    if high is not None and (x >= high if high_open else x > high):
        raise InvalidArgument(f"{name} must be {'<' if high_open else '<='} {high}, got {x!r}")
    return x


def check_nonempty_list(x: Any, name: str, what: str) -> Sequence[Any]:
    """``x`` if it is a non-empty list or tuple (not a string), else :class:`InvalidArgument`:
    "``name`` must be ``what``".

    >>> check_nonempty_list([], "heads", "a non-empty list of heads")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: heads must be a non-empty list of heads; got []
    """
    if isinstance(x, str | bytes) or not isinstance(x, Sequence) or not x:
        raise InvalidArgument(f"{name} must be {what}; got {x!r}"[:200])
    return x


def check_head_tuple(head: Any, h: int, value: str = "v") -> tuple[Any, Any, Any]:
    """``heads[h]`` given as a pair (W, value) or a triple (W, value, c): the three parts,
    c None for a pair.

    >>> check_head_tuple(([[1]], [2]), 0)
    ([[1]], [2], None)
    >>> check_head_tuple([[1]], 3, "V")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: heads[3] must be a pair (W, V) or a triple (W, V, c); got [[1]]
    """
    if isinstance(head, str | bytes) or not isinstance(head, Sequence) or len(head) not in (2, 3):
        raise InvalidArgument(
            f"heads[{h}] must be a pair (W, {value}) or a triple (W, {value}, c); got {head!r}"[
                :200
            ]
        )
    return head[0], head[1], (head[2] if len(head) == 3 else None)


def check_lengths(lengths: Any, name: str = "lengths") -> tuple[int, ...]:
    """A non-empty sequence of sequence lengths, each in 1..MAX_LENGTH."""
    if isinstance(lengths, str | bytes) or not isinstance(lengths, Sequence | range | np.ndarray):
        raise InvalidArgument(
            f"{name} must be a sequence of ints >= 1, got {type(lengths).__name__}"
        )
    out = tuple(int(check_int(n, f"an entry of {name}", low=1, high=MAX_LENGTH)) for n in lengths)
    if not out:
        raise InvalidArgument(f"{name} must not be empty")
    return out


def check_oracle(oracle: Any, name: str = "oracle") -> Any:
    """A :class:`~verified_attn.oracle.Oracle` (or one of its wrappers)."""
    from verified_attn.oracle import Oracle

    if not isinstance(oracle, Oracle):
        hint = ""
        if hasattr(oracle, "evaluate_batch") and hasattr(oracle, "d"):
            hint = "; wrap a model as va.Oracle(model, arithmetic=...)"
        elif callable(oracle):
            hint = "; wrap a function as va.Oracle.from_callable(fn, d=...)"
        raise InvalidArgument(
            f"{name} must be a verified_attn.Oracle, got {type(oracle).__name__}{hint}"
        )
    return oracle


def number_bytes(arithmetic: str, precision: int | None = None) -> int:
    """A working estimate of one number's memory in an arithmetic (with its overhead).

    >>> number_bytes("float"), number_bytes("certified", 256) > number_bytes("float")
    (8, True)
    """
    if arithmetic == "float":
        return 8
    if arithmetic == "certified":
        return 64 + (precision or 256) // 8  # an arb: object, midpoint limbs, radius
    return 200  # a SymPy Rational or expression


def physical_memory() -> int:
    """Bytes of physical memory on this machine (a large default where unknown)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover


def require_memory(needed: float, what: str) -> None:
    """Refuse up front (InvalidArgument) what would need more memory than the machine has.

    >>> require_memory(4 * 10**12 * 8, "learn_single_head at d = 10^6")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: learn_single_head at d = 10^6 would need about 29.1 TiB of memory; this machine has ...
    """
    available = physical_memory()
    if needed > available:
        raise InvalidArgument(
            f"{what} would need about {_bytes_text(needed)} of memory; this machine has "
            f"{_bytes_text(available)}"
        )


def require_size(
    what: str,
    *,
    numbers: int,
    arithmetic: str = "exact",
    precision: int | None = None,
    queries: int = 0,
) -> None:
    """Refuse up front (InvalidArgument) a job of ``numbers`` numbers or ``queries`` queries
    that would not fit in memory (:func:`require_memory`) or exceeds :data:`MAX_QUERIES`.

    >>> require_size("learn_multi_head at d = 2, 2 heads", numbers=36, queries=20)
    >>> require_size("learn_multi_head at d = 2, 10^6 heads", numbers=36 * 10**6, queries=10**7)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: learn_multi_head at d = 2, 10^6 heads would ask about 10000000 queries; at most 4194304 are planned by one call
    """
    if queries > MAX_QUERIES:
        raise InvalidArgument(
            f"{what} would ask about {queries} queries; at most {MAX_QUERIES} are planned by "
            "one call"
        )
    require_memory(numbers * number_bytes(arithmetic, precision), what)

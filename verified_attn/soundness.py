"""Claim checks that must fail for the right reasons: out-of-class and near-rational boxes,
tampered certificates (shared by the rooms' ``claims.py``).

>>> from verified_attn.soundness import window_box
>>> import numpy as np
>>> round(window_box(np.ones((6, 2))), 6) == round(window_box(np.ones((4, 2))), 6)
True

Each check returns ``(ok, detail)``; ``ok`` is True only if the learner refused what it must
refuse (with the right error and message) and accepted what it must accept, so a learner
that calls an out-of-class or near-rational box exact, or a checker that accepts a tampered
certificate, fails the claim.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from verified_attn.errors import (
    CertificateError,
    ModelClassMismatch,
    PrecisionExhausted,
    VerifiedAttnError,
)
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle

__all__ = [
    "near_rational",
    "position_boxes",
    "refuses",
    "rotary_box",
    "tamper",
    "tamper_check",
    "window_box",
]

_HEAD = SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
_W = np.array([[1.0, -1.0], [2.0, 0.0]])
_V = np.array([1.0, 3.0])


def window_box(X: Any) -> float:
    """A sliding-window head: the head above on the last 4 tokens only (d = 2)."""
    return float(_HEAD(np.asarray(X, dtype=np.float64)[-4:]))


def rotary_box(X: Any) -> float:
    """A rotary-like head: scores x_i^T W R^(n-1-i) x_n, R a rotation by 0.3 (d = 2)."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    s = []
    for i in range(n):
        a = 0.3 * (n - 1 - i)
        R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        s.append(X[i] @ _W @ (R @ X[-1]))
    p = np.exp(np.array(s) - max(s))
    return float((p / p.sum()) @ (X @ _V))


def position_boxes() -> dict[str, Oracle]:
    """Fresh float oracles over the two position-dependent boxes (d = 2)."""
    return {
        "window-4": Oracle.from_callable(window_box, d=2),
        "rotary": Oracle.from_callable(rotary_box, d=2),
    }


def refuses(
    learn: Callable[[], Any], error: type[Exception] | tuple[type[Exception], ...], text: str
) -> tuple[bool, str]:
    """Whether ``learn()`` raises ``error`` with ``text`` in its message."""
    try:
        rec = learn()
    except error as exc:
        ok = text in str(exc)
        return ok, f"refused: {type(exc).__name__}" + ("" if ok else f" without {text!r}")
    except VerifiedAttnError as exc:
        return False, f"refused with the wrong error {type(exc).__name__}: {str(exc)[:80]}"
    return False, f"returned a result (exact={getattr(rec, 'exact', None)}) instead of refusing"


def position_check(
    learn: Callable[[Oracle], Any],
    texts: dict[str, str] | None = None,
    errors: dict[str, Any] | None = None,
) -> tuple[bool, str]:
    """``learn`` refuses the window and the rotary box (ModelClassMismatch, or
    ``errors[name]``) with the text ``texts[name]`` in the message (default: naming the
    position dependence)."""
    ok, parts = True, []
    for name, oracle in position_boxes().items():
        text = (texts or {}).get(name, "token positions")
        error = (errors or {}).get(name, ModelClassMismatch)
        good, detail = refuses(lambda o=oracle, e=error: learn(o), error, text)
        ok &= good
        parts.append(f"{name}: {detail}")
    return ok, "; ".join(parts)


def near_rational(eps_exponent: int = 80) -> sympy.Rational:
    """1/3 + 10^-e: a ball at 256 bits around it also holds 1/3."""
    return sympy.Rational(1, 3) + sympy.Rational(1, 10**eps_exponent)


def tamper(data: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of a certificate with the first rational ("p/q") of its ``result`` plus 1."""
    out = copy.deepcopy(data)

    def bump(val: Any) -> str | None:
        if isinstance(val, str) and "/" in val:
            try:
                return str(Fraction(val) + 1)
            except ValueError:
                return None
        return None

    def walk(node: Any) -> bool:
        items = list(node.items()) if isinstance(node, dict) else (
            list(enumerate(node)) if isinstance(node, list) else []
        )
        for key, val in items:
            new = bump(val)
            if new is not None:
                node[key] = new
                return True
            if walk(val):
                return True
        return False

    return out if walk(out.get("result")) else None


def tamper_check(data: dict[str, Any]) -> tuple[bool, str]:
    """The certificate verifies, and a copy with one result entry changed is rejected."""
    from verified_attn.certificates import verify_certificate

    try:
        honest = verify_certificate(data).ok
    except CertificateError as exc:
        return False, f"the honest certificate was rejected: {str(exc)[:100]}"
    bad = tamper(data)
    if bad is None:
        return False, "no rational entry in the result section to tamper with"
    try:
        accepted = verify_certificate(bad).ok
    except CertificateError as exc:
        return honest, f"honest certificate verifies; tampered copy rejected: {str(exc)[:80]}"
    return False, f"a tampered copy was accepted (ok={accepted})"


REFUSED = (PrecisionExhausted, ModelClassMismatch)

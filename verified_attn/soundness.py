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

import flint
import numpy as np
import sympy

from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    PrecisionExhausted,
    VerifiedAttnError,
)
from verified_attn.models import SequenceModel, SingleHeadAttention
from verified_attn.oracle import Oracle

__all__ = [
    "TAMPER_SITES",
    "Plus",
    "Window",
    "near_rational",
    "position_boxes",
    "refuses",
    "refuses_all",
    "replace_second",
    "rotary_box",
    "tamper",
    "tamper_all",
    "tamper_check",
    "window_box",
]

_HEAD = SingleHeadAttention([[1, -1], [2, 0]], [1, 3])
_W = np.array([[1.0, -1.0], [2.0, 0.0]])
_V = np.array([1.0, 3.0])


class Window(SequenceModel):
    """``model`` on the last ``k`` tokens only: a sliding-window box, in every arithmetic.

    On sequences of length <= k it *is* ``model``, so only a verification on longer
    sequences can tell it from the class of ``model``.

    >>> import verified_attn as va
    >>> box = Window(va.SingleHeadAttention([[1, 0], [0, 1]], [1, 2]), 1)
    >>> va.Oracle(box, "exact").query([[1, 0], [0, 1]])   # the last token alone: x^T v
    2
    """

    def __init__(self, model: Any, k: int = 4) -> None:
        self.model, self.k, self.d = model, k, model.d

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.evaluate_batch(np.asarray(Xs)[:, -self.k :, :]))

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        n, d = Xq.nrows(), Xq.ncols()
        rows = range(max(0, n - self.k), n)
        last = flint.fmpq_mat(len(rows), d, [Xq[i, j] for i in rows for j in range(d)])
        return self.model.evaluate_rational(last, arith)


class Plus(SequenceModel):
    """The sum of two models' answers (a head plus a second head of another class, a
    Transformer plus a head), in every arithmetic.

    >>> import verified_attn as va
    >>> h = va.SingleHeadAttention([[0]], [1])
    >>> va.Oracle(Plus(h, h), "exact").query([[3]])
    6
    """

    def __init__(self, first: Any, second: Any) -> None:
        if first.d != second.d:
            raise InvalidArgument(f"Plus: the models' d differ ({first.d} and {second.d})")
        self.first, self.second, self.d = first, second, first.d

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return np.asarray(self.first.evaluate_batch(Xs)) + np.asarray(
            self.second.evaluate_batch(Xs)
        )

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        return self.first.evaluate_rational(Xq, arith) + self.second.evaluate_rational(Xq, arith)


def window_box(X: Any) -> float:
    """A sliding-window head: the head above on the last 4 tokens only (d = 2)."""
    return float(Window(_HEAD)(X))


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


#: Where :func:`tamper_check` changes a certificate by default: a result entry, a
#: learning answer the checker re-decodes, the learning count it re-adds from the phases,
#: a verification answer it re-checks with the agreement rule.
TAMPER_SITES = ("result", "answers", "queries.learning", "verification.answers")


def _bump(val: Any) -> Any:
    """``val`` changed so that its meaning changes, or None if it is not a number.

    A rational "p/q" or an integer count gets + 1, a ball ``{"arb": [mid, rad]}`` its
    midpoint + 1, a float ``{"float": hex}`` is + 1 (a sign label +-1 is flipped instead:
    + 1 would make it no label at all, a parse error rather than a re-derivation).
    """
    if isinstance(val, bool):
        return None
    if isinstance(val, int):
        return val + 1
    if isinstance(val, str) and "/" in val:
        try:
            return str(Fraction(val) + 1)
        except ValueError:
            return None
    if isinstance(val, dict) and set(val) == {"float"} and isinstance(val["float"], str):
        f = float.fromhex(val["float"])
        return {"float": (-f if abs(f) == 1 else f + 1).hex()}
    if isinstance(val, dict) and set(val) == {"arb"} and isinstance(val["arb"], list):
        mid, rad = val["arb"]
        return {"arb": [str(Fraction(mid) + 1), rad]}
    return None


def _bump_first(node: Any) -> bool:
    """Change the first number under ``node`` (depth first) in place; False if none."""
    items = (
        list(node.items())
        if isinstance(node, dict)
        else (list(enumerate(node)) if isinstance(node, list) else [])
    )
    for key, val in items:
        new = _bump(val)
        if new is not None:
            node[key] = new
            return True
        if _bump_first(val):
            return True
    return False


def tamper(data: dict[str, Any], site: str = "result") -> dict[str, Any] | None:
    """A copy of a certificate with the first number under ``site`` changed (None: none).

    ``site`` is a dotted path of keys and list indices ("result", "answers",
    "queries.learning", "subspaces.0.certificate.answers").

    >>> tamper({"result": {"v": ["1/2"]}})["result"]
    {'v': ['3/2']}
    >>> tamper({"queries": {"learning": 6}}, "queries.learning")["queries"]
    {'learning': 7}
    >>> tamper({"result": {}}, "answers") is None
    True
    """
    out = copy.deepcopy(data)
    *parents, last = site.split(".")
    node: Any = out
    for key in parents:
        node = _child(node, key)
    if _child(node, last) is None:
        return None
    slot: Any = int(last) if isinstance(node, list) else last
    new = _bump(node[slot])
    if new is not None:
        node[slot] = new
        return out
    return out if _bump_first(node[slot]) else None


def _child(node: Any, key: str) -> Any:
    """``node[key]`` for a dict, ``node[int(key)]`` for a list; None if there is none."""
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return None


def tamper_check(data: dict[str, Any], sites: tuple[str, ...] = TAMPER_SITES) -> tuple[bool, str]:
    """The certificate verifies, and for every site a copy changed there is rejected.

    A site the certificate does not have (an exact single-head certificate stores no
    answers: they are determined by the design) is skipped and said so; the result entry
    must always exist.
    """
    from verified_attn.certificates import verify_certificate

    try:
        verify_certificate(data)
    except CertificateError as exc:
        return False, f"the honest certificate was rejected: {str(exc)[:100]}"
    ok, parts = True, []
    for site in sites:
        bad = tamper(data, site)
        if bad is None:
            ok &= site != "result"
            parts.append(f"{site}: nothing to change")
            continue
        try:
            accepted = verify_certificate(bad).ok
        except CertificateError as exc:
            parts.append(f"{site} changed: rejected ({str(exc)[:60]})")
        else:
            ok = False
            parts.append(f"{site} changed: ACCEPTED (ok={accepted})")
    return ok, "honest certificate verifies; " + "; ".join(parts)


def tamper_all(
    runs: dict[str, tuple[Any, tuple[str, ...]]], *, result: str = "result"
) -> tuple[bool, str]:
    """:func:`tamper_check` on several results: ``{name: (recovery, answer sites)}``.

    Each is changed at its ``result`` site, each of its answer sites, its learning count
    and a verification answer; all must be rejected.
    """
    ok, rows = True, []
    for name, (rec, answers) in runs.items():
        sites = (result, *answers, "queries.learning", "verification.answers")
        good, detail = tamper_check(rec.certificate(), sites)
        ok &= good
        rows.append(f"{name}: {detail}")
    return ok, "; ".join(rows)


def refuses_all(
    cases: list[tuple[str, Callable[..., Any], Any, tuple[int, ...] | None]],
    error: type[Exception] | tuple[type[Exception], ...] = ModelClassMismatch,
) -> tuple[bool, str]:
    """Every ``learn(box)`` is refused with ``error``; where ``short`` lengths are given,
    ``learn(box, short)`` returns a verified result (the box agrees with the class on
    those lengths, so only the final verification on longer ones can refuse it)."""
    ok, rows = True, []
    for name, learn, box, short in cases:
        good, detail = refuses(lambda learn=learn, box=box: learn(box), error, "")
        if short is not None:
            rec = learn(box, short)
            good &= rec.verified
            detail += f"; verified on lengths {list(short)} only: {rec.verified}"
        ok &= good
        rows.append(f"{name}: {detail}")
    return ok, "; ".join(rows)


def replace_second(data: dict[str, Any]) -> dict[str, Any]:
    """A counterexample certificate whose second model is a copy of its first.

    Two equal models are never a counterexample (they neither differ nor agree for a
    reason), so a checker must reject the copy.
    """
    out = copy.deepcopy(data)
    out["second"] = copy.deepcopy(out["first"])
    return out


REFUSED = (PrecisionExhausted, ModelClassMismatch)

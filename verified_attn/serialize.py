"""Exact, lossless JSON forms of the numbers the three arithmetics produce.

>>> from fractions import Fraction
>>> from verified_attn.serialize import dump_number, load_number
>>> load_number(dump_number(Fraction(-2, 3)))
Fraction(-2, 3)
>>> load_number(dump_number(0.1)) == 0.1
True

Rationals are "p/q" strings; floats their ``float.hex`` (bit-exact); arb balls a midpoint
and radius, both exact dyadic rationals; SymPy expressions their ``srepr``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import fraction_from_arb
from verified_attn.errors import CertificateError

__all__ = ["dump_number", "dump_rational", "load_number", "load_rational"]


def dump_rational(q: Any) -> str:
    """'p/q' for anything rational (Fraction, fmpq, SymPy Rational, int)."""
    if isinstance(q, flint.fmpq):
        q = Fraction(int(q.p), int(q.q))
    elif isinstance(q, sympy.Rational):
        q = Fraction(int(q.p), int(q.q))
    q = Fraction(q)
    return f"{q.numerator}/{q.denominator}"


def load_rational(s: str) -> Fraction:
    try:
        return Fraction(s)
    except (ValueError, TypeError, ZeroDivisionError) as exc:
        raise CertificateError(f"not a rational number: {s!r}") from exc


def dump_number(x: Any) -> Any:
    """A JSON value that :func:`load_number` turns back into exactly ``x``."""
    if isinstance(x, flint.arb):
        return {
            "arb": [
                dump_rational(fraction_from_arb(x.mid())),
                dump_rational(fraction_from_arb(x.rad())),
            ]
        }
    if isinstance(x, (float, np.floating)):
        return {"float": float(x).hex()}
    if isinstance(x, Fraction | flint.fmpq | int):
        return {"rational": dump_rational(x)}
    if isinstance(x, sympy.Basic):
        if x.is_Rational:
            return {"rational": dump_rational(x)}
        return {"sympy": sympy.srepr(x)}
    raise TypeError(f"cannot serialise {type(x).__name__}")


def load_number(obj: Any) -> Any:
    """Inverse of :func:`dump_number` (arb balls need the caller's precision context).

    A ball comes back with the exact midpoint and a radius rounded *up* by at most one unit
    in its 30-bit mantissa (python-flint has no exact-radius constructor), so the loaded
    ball always contains the dumped one: loading never makes a certified claim false.
    """
    if not isinstance(obj, dict) or len(obj) != 1:
        raise CertificateError(f"malformed number {obj!r}")
    ((kind, val),) = obj.items()
    try:
        if kind == "float":
            return float.fromhex(val)
        if kind == "rational":
            return load_rational(val)
        if kind == "arb":
            mid, rad = (load_rational(s) for s in val)
            if rad < 0:
                raise CertificateError(f"negative radius in {obj!r}")
            return flint.arb(
                flint.fmpq(mid.numerator, mid.denominator),
                flint.fmpq(rad.numerator, rad.denominator),
            )
        if kind == "sympy":
            try:
                return _safe_srepr(val)
            except CertificateError:
                raise
            except Exception as exc:  # eval of untrusted text: any failure is a bad file
                raise CertificateError(f"malformed number {obj!r}: {exc}") from exc
    except CertificateError:
        raise
    except (ValueError, TypeError, SyntaxError) as exc:
        raise CertificateError(f"malformed number {obj!r}: {exc}") from exc
    raise CertificateError(f"unknown number kind {kind!r}")


_SREPR_NAMES = {
    name: getattr(sympy, name)
    for name in ("Add", "Mul", "Pow", "exp", "log", "Rational", "Integer", "Symbol", "E", "Float")
}
_SREPR_NAMES.update(
    Half=lambda: sympy.S.Half,
    One=lambda: sympy.S.One,
    Zero=lambda: sympy.S.Zero,
    NegativeOne=lambda: sympy.S.NegativeOne,
    Exp1=lambda: sympy.E,
)


def _safe_srepr(text: str) -> sympy.Expr:
    # srepr is Python syntax over SymPy constructors; evaluate it against a whitelist only.
    if any(tok in text for tok in ("__", "import", "lambda")):
        raise CertificateError(f"refusing to evaluate expression {text!r}")
    return eval(text, {"__builtins__": {}}, dict(_SREPR_NAMES))

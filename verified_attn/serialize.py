"""Exact, lossless JSON forms of the numbers the three arithmetics produce.

>>> import re
import re
from fractions import Fraction
>>> from verified_attn.serialize import dump_number, load_number
>>> load_number(dump_number(Fraction(-2, 3)))
Fraction(-2, 3)
>>> load_number(dump_number(0.1)) == 0.1
True

Rationals are "p/q" strings; floats their ``float.hex`` (bit-exact); arb balls a midpoint
and radius, both exact dyadic rationals; SymPy expressions their ``srepr``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import fraction_from_arb
from verified_attn.errors import CertificateError, InvalidArgument

__all__ = ["dump_number", "dump_rational", "dump_value", "load_number", "load_rational"]


def dump_rational(q: Any) -> str:
    """'p/q' for anything rational (Fraction, fmpq, SymPy Rational, int)."""
    if isinstance(q, flint.fmpq):
        q = Fraction(int(q.p), int(q.q))
    elif isinstance(q, sympy.Rational):
        q = Fraction(int(q.p), int(q.q))
    q = Fraction(q)
    return f"{q.numerator}/{q.denominator}"


_RATIONAL = re.compile(r"-?[0-9]+(/[0-9]+)?")


def load_rational(s: Any) -> Fraction:
    """The rational of a "p/q" (or "p") string; bounded, so a hostile file fails fast.

    >>> load_rational("-2/4")
    Fraction(-1, 2)
    >>> load_rational("1e999999999")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: not a rational number 'p/q': '1e999999999'
    """
    if not isinstance(s, str) or len(s) > 2 * MAX_DIGITS + 2 or not _RATIONAL.fullmatch(s):
        text = repr(s) if len(repr(s)) < 80 else repr(s)[:77] + "..."
        raise CertificateError(f"not a rational number 'p/q': {text}")
    try:
        return Fraction(s)
    except ZeroDivisionError as exc:
        raise CertificateError(f"not a rational number: {s!r} has denominator 0") from exc
    except ValueError as exc:  # more digits than Python converts (4300 by default)
        raise CertificateError(f"not a rational number: {len(s)} characters") from exc


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
    raise InvalidArgument(f"cannot serialise {type(x).__name__} {x!r}")


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
            except Exception as exc:  # SymPy refusing a malformed tree: a bad file
                raise CertificateError(f"malformed number: {exc}") from exc
    except CertificateError:
        raise
    except (ValueError, TypeError, SyntaxError) as exc:
        raise CertificateError(f"malformed number {obj!r}: {exc}") from exc
    raise CertificateError(f"unknown number kind {kind!r}")


_SREPR_CALLS: dict[str, Any] = {
    name: getattr(sympy, name) for name in ("Add", "Mul", "Pow", "exp", "log", "Rational", "Integer")
}
_SREPR_CONSTANTS: dict[str, Any] = {
    "E": sympy.E,
    "Half": sympy.S.Half,
    "One": sympy.S.One,
    "Zero": sympy.S.Zero,
    "NegativeOne": sympy.S.NegativeOne,
    "Exp1": sympy.E,
}
#: Limits on an expression read from a file: its text, its nodes, an integer's digits.
MAX_EXPRESSION_CHARS = 100_000
MAX_EXPRESSION_NODES = 10_000
MAX_DIGITS = 10_000


def _safe_srepr(text: str) -> sympy.Expr:
    """Parse a SymPy ``srepr`` of exp/log/rational arithmetic without evaluating code.

    The text is parsed as a Python expression tree and walked: only calls of the names in
    ``_SREPR_CALLS`` with integer arguments or nested such calls, and the constants in
    ``_SREPR_CONSTANTS``, are accepted; sizes are bounded so a hostile file cannot make
    the checker hang.
    """
    import ast

    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_CHARS:
        raise CertificateError("expression text is not a string or is too long")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CertificateError(f"malformed expression {text[:80]!r}") from exc
    budget = [MAX_EXPRESSION_NODES]

    def build(node: ast.AST, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > 200:
            raise CertificateError("expression too large or too deeply nested")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if abs(node.value).bit_length() > MAX_DIGITS * 4:
                raise CertificateError("integer in expression too large")
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -build(node.operand, depth + 1)
        if isinstance(node, ast.Name) and node.id in _SREPR_CONSTANTS:
            return _SREPR_CONSTANTS[node.id]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in ("Float", "Symbol"):
                return _string_call(name, node)
            if node.keywords:
                raise CertificateError(f"expression {text[:80]!r} has keyword arguments")
            args = [build(a, depth + 1) for a in node.args]
            if name in _SREPR_CONSTANTS and not args:
                return _SREPR_CONSTANTS[name]
            if name in _SREPR_CALLS:
                if name == "Pow" and len(args) == 2 and sympy.sympify(args[1]).is_Integer:
                    if abs(int(args[1])) > 10_000:
                        raise CertificateError("exponent in expression too large")
                return _SREPR_CALLS[name](*args)
        raise CertificateError(f"expression {text[:80]!r} has a part this checker does not read")

    return sympy.sympify(build(tree.body, 0))


def _string_call(name: str, node: Any) -> Any:
    """``Float('digits', precision=p)`` or ``Symbol('x')``: string and small-int arguments."""
    import ast

    args = node.args
    if len(args) != 1 or not isinstance(args[0], ast.Constant) or type(args[0].value) is not str:
        raise CertificateError(f"malformed {name}(...) in an expression")
    text = args[0].value
    if len(text) > MAX_DIGITS:
        raise CertificateError(f"{name}(...) argument too long")
    kwargs: dict[str, int] = {}
    for kw in node.keywords:
        ok = (
            name == "Float"
            and kw.arg == "precision"
            and isinstance(kw.value, ast.Constant)
            and type(kw.value.value) is int
            and 1 <= kw.value.value <= 4 * MAX_DIGITS
        )
        if not ok:
            raise CertificateError(f"malformed {name}(...) keyword in an expression")
        kwargs["precision"] = kw.value.value
    if name == "Symbol":
        if not text.isidentifier():
            raise CertificateError("malformed Symbol name in an expression")
        return sympy.Symbol(text)
    if not re.fullmatch(r"-?[0-9]*\.?[0-9]*(e-?[0-9]{1,6})?", text):
        raise CertificateError("malformed Float digits in an expression")
    return sympy.Float(text, **kwargs)


def dump_value(x: Any) -> Any:
    """Any parameter value as JSON: numbers via :func:`dump_number`, nested lists kept.

    SymPy matrices and numpy arrays become nested lists (columns d x 1 stay nested).

    >>> import sympy
    >>> dump_value(sympy.Matrix([[1, 2]]))
    [[{'rational': '1/1'}, {'rational': '2/1'}]]
    """
    if isinstance(x, sympy.MatrixBase):
        return [[dump_number(e) for e in row] for row in x.tolist()]
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return dump_number(x.item())
        return [dump_value(e) for e in x]
    if isinstance(x, list | tuple):
        return [dump_value(e) for e in x]
    if isinstance(x, dict):
        return {str(k): dump_value(v) for k, v in x.items()}
    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, np.integer):
        x = int(x)
    return dump_number(x)

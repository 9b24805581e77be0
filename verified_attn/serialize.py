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

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import fraction_from_arb
from verified_attn.errors import CertificateError, InvalidArgument

__all__ = [
    "dump_number",
    "dump_rational",
    "dump_value",
    "load_number",
    "load_rational",
    "short_repr",
    "write_certificate",
]


def dump_rational(q: Any) -> str:
    """'p/q' for anything rational (Fraction, fmpq, SymPy Rational, int)."""
    if isinstance(q, flint.fmpq):
        q = Fraction(int(q.p), int(q.q))
    elif isinstance(q, sympy.Rational):
        q = Fraction(int(q.p), int(q.q))
    q = Fraction(q)
    return f"{q.numerator}/{q.denominator}"


#: Digits a stored numerator or denominator may have: Python refuses to convert longer
#: decimal strings (``sys.get_int_max_str_digits``, 4300), and so does ``dump_rational``.
MAX_RATIONAL_DIGITS = 4300
_PART = f"[0-9]{{1,{MAX_RATIONAL_DIGITS}}}"
_RATIONAL = re.compile(f"-?{_PART}(/{_PART})?")
#: Longest float hex text ("-0x1.fffffffffffffp+1023" has 23 characters).
_MAX_FLOAT_CHARS = 32


def short_repr(x: Any) -> str:
    """A bounded repr for error messages (a hostile value may be huge or deep).

    >>> short_repr(list(range(10**6)))
    '[0, 1, 2, 3, ...]'
    """
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlong, r.maxlist, r.maxdict = 3, 60, 60, 40, 4, 4
    try:
        return r.repr(x)
    except RecursionError:
        return f"<deeply nested {type(x).__name__}>"


def load_rational(s: Any) -> Fraction:
    """The rational of a "p/q" (or "p") string; bounded, so a hostile file fails fast.

    >>> load_rational("-2/4")
    Fraction(-1, 2)
    >>> load_rational("1e999999999")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: not a rational number 'p/q': '1e999999999'
    """
    if (
        not isinstance(s, str)
        or len(s) > 2 * MAX_RATIONAL_DIGITS + 2
        or not _RATIONAL.fullmatch(s)
    ):
        raise CertificateError(f"not a rational number 'p/q': {short_repr(s)}")
    try:
        return Fraction(s)
    except ZeroDivisionError as exc:
        raise CertificateError(f"not a rational number: {short_repr(s)} has denominator 0") from exc
    except ValueError as exc:  # past the interpreter's int-string limit, if lowered
        raise CertificateError(f"not a rational number 'p/q': {short_repr(s)}: {exc}") from exc


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
        raise CertificateError(f"malformed number {short_repr(obj)}")
    ((kind, val),) = obj.items()
    try:
        if kind == "float":
            if not isinstance(val, str) or len(val) > _MAX_FLOAT_CHARS:
                raise CertificateError(f"malformed float {short_repr(val)} (float hex expected)")
            return float.fromhex(val)
        if kind == "rational":
            return load_rational(val)
        if kind == "arb":
            if not isinstance(val, list) or len(val) != 2:
                raise CertificateError(f"malformed ball {short_repr(val)} (a [mid, rad] pair)")
            mid, rad = (load_rational(s) for s in val)
            if rad < 0:
                raise CertificateError(f"negative radius in {short_repr(obj)}")
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
    except (ValueError, TypeError, SyntaxError, OverflowError) as exc:
        raise CertificateError(f"malformed number {short_repr(obj)}: {exc}") from exc
    raise CertificateError(f"unknown number kind {short_repr(kind)}")


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
#: Largest size (bits of all the integers in it, powers multiplied out) of any part of an
#: expression: SymPy evaluates rational powers and products eagerly, so without this
#: ``Pow(Pow(3, 9000), 9000)`` would build a 10^8-bit integer.
MAX_EXPRESSION_BITS = 14_000  # ~4200 decimal digits: what str() of a SymPy number can print
#: Largest |exponent| of a power, and largest |x| of a rational exp(x) or log argument
#: size: ``exp(10^4000)`` is a well-formed number no check can compare in bounded time.
MAX_EXPONENT = 10_000
MAX_EXP_ARGUMENT = 1 << 32
MAX_EXP_ARGUMENT_BITS = 1 << 12


def _safe_srepr(text: str) -> sympy.Expr:
    """Parse a SymPy ``srepr`` of exp/log/rational arithmetic without evaluating code.

    The text is parsed as a Python expression tree and walked: only calls of the names in
    ``_SREPR_CALLS`` with integer arguments or nested such calls, and the constants in
    ``_SREPR_CONSTANTS``, are accepted; sizes are bounded so a hostile file cannot make
    the checker hang: the text, the node count, the nesting depth, every integer's digits,
    every part's size in bits *before* SymPy evaluates it (:data:`MAX_EXPRESSION_BITS`),
    exponents and the arguments of exp.
    """
    import ast

    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_CHARS:
        raise CertificateError("expression text is not a string or is too long")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CertificateError(f"malformed expression {text[:80]!r}") from exc
    budget = [MAX_EXPRESSION_NODES]
    shown = repr(text[:80])

    def sized(value: Any, bits: int) -> tuple[Any, int]:
        if bits > MAX_EXPRESSION_BITS:
            raise CertificateError(f"expression {shown} has numbers too large to check")
        return value, bits

    def build(node: ast.AST, depth: int) -> tuple[Any, int]:
        """The value of ``node`` and a bound on the bits of the integers it holds."""
        budget[0] -= 1
        if budget[0] < 0 or depth > 200:
            raise CertificateError("expression too large or too deeply nested")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if abs(node.value).bit_length() > MAX_EXPRESSION_BITS:
                raise CertificateError("integer in expression too large")
            return node.value, abs(node.value).bit_length() + 1
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value, bits = build(node.operand, depth + 1)
            return -value, bits
        if isinstance(node, ast.Name) and node.id in _SREPR_CONSTANTS:
            return _SREPR_CONSTANTS[node.id], 1
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in ("Float", "Symbol"):
                return _string_call(name, node), 64
            if node.keywords:
                raise CertificateError(f"expression {shown} has keyword arguments")
            built = [build(a, depth + 1) for a in node.args]
            args = [value for value, _ in built]
            bits = sum(b for _, b in built) + 1
            if name in _SREPR_CONSTANTS and not args:
                return _SREPR_CONSTANTS[name], 1
            if name in ("Integer", "Rational") and not all(type(a) is int for a in args):
                raise CertificateError(f"expression {shown}: {name}(...) takes integers")
            if name == "Pow" and len(args) == 2:
                exponent = sympy.sympify(args[1])
                if exponent.is_Rational:
                    if abs(exponent) > MAX_EXPONENT:
                        raise CertificateError(f"expression {shown}: exponent too large")
                    # (p/q)^(a/b) holds about |a/b| times the bits of p/q.
                    bits = built[0][1] * max(1, math.ceil(abs(exponent))) + built[1][1]
            if name in ("exp", "log") and len(args) == 1:
                arg = sympy.sympify(args[0])
                if built[0][1] > MAX_EXP_ARGUMENT_BITS or (
                    arg.is_Rational and abs(arg) > MAX_EXP_ARGUMENT
                ):
                    raise CertificateError(f"expression {shown}: {name} argument too large")
            if name in _SREPR_CALLS:
                sized(None, bits)  # refuse before SymPy evaluates anything that large
                return sized(_SREPR_CALLS[name](*args), bits)
        raise CertificateError(f"expression {shown} has a part this checker does not read")

    return sympy.sympify(build(tree.body, 0)[0])


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


def write_certificate(data: dict[str, Any], path: Any) -> None:
    """Write a certificate dict as JSON to ``path`` (a str or Path); InvalidArgument naming
    the path where it is not one or cannot be written.

    >>> write_certificate({}, 3)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: path must be a str or Path, got int
    """
    if not isinstance(path, str | Path):
        raise InvalidArgument(f"path must be a str or Path, got {type(path).__name__}")
    try:
        Path(path).write_text(json.dumps(data, indent=1))
    except OSError as exc:
        raise InvalidArgument(f"cannot write the certificate to {str(path)!r}: {exc}") from exc

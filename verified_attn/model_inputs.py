"""Input checks the ReLU FFN and one-layer Transformer models share (exact rationals).

>>> rational_list([1, Fraction(1, 2)], "a", 2)
[Fraction(1, 1), Fraction(1, 2)]
>>> ffn_biases(None, 3, 2)
([Fraction(0, 1), Fraction(0, 1)], Fraction(3, 1), True)
>>> rational_rect([[1, 2]], "A", rows=2)
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: A must have shape (2, '*'); got shape (1, 2)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import to_fraction
from verified_attn.errors import InvalidArgument

__all__ = [
    "ffn_biases",
    "float_batch",
    "fmpq_rows",
    "matrix_rows",
    "rational_list",
    "rational_rect",
    "sympy_rows",
]


def matrix_rows(x: Any, name: str, *, square: bool = False) -> list[list[Any]]:
    """The rows of a SymPy matrix or 2-D array ``x`` as lists (entries unchecked);
    InvalidArgument naming ``name`` otherwise (``square``: the error says a square one is
    wanted).

    >>> matrix_rows([[1, 2]], "W"), matrix_rows(sympy.Matrix([[3]]), "W")
    ([[1, 2]], [[3]])
    >>> matrix_rows([1, 2], "W", square=True)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: W must be a square 2-D matrix; got shape (2,)
    """
    if isinstance(x, sympy.MatrixBase):
        return x.tolist()
    try:
        arr = np.asarray(x, dtype=object)
    except (ValueError, TypeError) as exc:
        what = "a square matrix" if square else "a 2-D matrix"
        raise InvalidArgument(f"{name} must be {what}, got {x!r}") from exc
    if arr.ndim != 2:
        what = "a square 2-D matrix" if square else "a 2-D matrix"
        raise InvalidArgument(f"{name} must be {what}; got shape {arr.shape}")
    return arr.tolist()


def rational_rect(x: Any, name: str, *, rows: int | None = None, cols: int | None = None) -> list:
    """A non-empty rectangular matrix of exact rationals (rows x cols if given)."""
    data = matrix_rows(x, name)
    shape = (len(data), len(data[0]) if data else 0)
    if shape[0] == 0 or shape[1] == 0 or any(len(r) != shape[1] for r in data):
        raise InvalidArgument(f"{name} must be a non-empty rectangular matrix; got shape {shape}")
    if (rows is not None and shape[0] != rows) or (cols is not None and shape[1] != cols):
        want = (rows if rows is not None else "*", cols if cols is not None else "*")
        raise InvalidArgument(f"{name} must have shape {want}; got shape {shape}")
    return [[to_fraction(a, name=f"entry of {name}") for a in r] for r in data]


def rational_list(x: Any, name: str, length: int) -> list[Fraction]:
    flat = list(x) if isinstance(x, sympy.MatrixBase) else np.asarray(x, dtype=object).tolist()
    if not isinstance(flat, list) or any(isinstance(a, list) for a in flat):
        arr = np.asarray(x, dtype=object)
        if arr.ndim == 2 and 1 in arr.shape:
            flat = arr.reshape(-1).tolist()
        else:
            raise InvalidArgument(f"{name} must be a vector; got shape {arr.shape}")
    if len(flat) != length:
        raise InvalidArgument(f"{name} must have length {length}; got length {len(flat)}")
    return [to_fraction(a, name=f"entry of {name}") for a in flat]


def fmpq_rows(rows: list[list[Fraction]]) -> flint.fmpq_mat:
    return flint.fmpq_mat(
        len(rows), len(rows[0]), [flint.fmpq(q.numerator, q.denominator) for r in rows for q in r]
    )


def sympy_rows(rows: list[list[Fraction]]) -> sympy.Matrix:
    return sympy.Matrix([[sympy.Rational(q.numerator, q.denominator) for q in r] for r in rows])


def ffn_biases(a: Any, b: Any, m: int) -> tuple[list[Fraction], Fraction, bool]:
    """The hidden biases (length m), the output bias, and whether either was given."""
    hidden = [Fraction(0)] * m if a is None else rational_list(a, "a", m)
    out = Fraction(0) if b is None else to_fraction(b, name="b")
    return hidden, out, a is not None or b is not None


def float_batch(Xs: Any, d: int) -> np.ndarray:
    try:
        Xs = np.asarray(Xs, dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"Xs must be a real (B, N, d) array: {exc}") from exc
    if Xs.ndim != 3 or Xs.shape[2] != d or Xs.shape[1] < 1:
        raise InvalidArgument(f"Xs must have shape (B, N>=1, d={d}); got {Xs.shape}")
    if not np.all(np.isfinite(Xs)):
        raise InvalidArgument("Xs has a non-finite entry (NaN or inf)")
    return Xs

"""Sequences and parameters as the models take them: shapes checked, entries exact.

A sequence is an (N, d) array of numbers; the exact arithmetics see it as a flint
rational matrix, the float one as float64. Every entry is checked (finite, a number) and
every shape named in the error.

>>> as_rational_sequence([[1, 0.5]], 2)
[1, 1/2]
>>> as_float_sequence([[1, 2], [3]], 2)
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: X must be a 2-D array of shape (N, d); its rows have unequal lengths [2, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import to_fraction
from verified_attn.errors import InvalidArgument
from verified_attn.model_inputs import matrix_rows
from verified_attn.types import SequenceLike

__all__ = [
    "as_float_sequence",
    "as_rational_sequence",
    "flint_rows",
    "fmpq",
    "fmpq_to_sympy",
    "rational_matrix",
    "rational_vector",
    "square_float_array",
    "to_sympy",
]


def _shape_of(X: Any, name: str) -> tuple[int, int]:
    if isinstance(X, sympy.MatrixBase):
        return X.shape
    if isinstance(X, flint.fmpq_mat):  # as_float_sequence accepts these; numpy cannot see in
        return X.nrows(), X.ncols()
    if isinstance(X, np.ndarray):
        shape = X.shape
    else:
        try:
            shape = np.shape(np.asarray(X, dtype=object))
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"{name} must be a 2-D array (N, d), got {X!r}") from exc
        rows = list(X) if len(shape) == 1 and not isinstance(X, str) else []
        if rows and all(
            isinstance(r, Sequence | np.ndarray) and not isinstance(r, str) for r in rows
        ):
            # numpy reads a ragged list of rows as a 1-D array of lists: name the cause.
            lengths = [len(r) for r in rows]
            if len(set(lengths)) > 1:
                raise InvalidArgument(
                    f"{name} must be a 2-D array of shape (N, d); its rows have unequal "
                    f"lengths {lengths}"
                )
    if len(shape) != 2:
        raise InvalidArgument(f"{name} must be a 2-D array of shape (N, d); got shape {shape}")
    return int(shape[0]), int(shape[1])


def _check_shape(shape: tuple[int, int], d: int | None, name: str) -> None:
    n, width = shape
    if n < 1:
        raise InvalidArgument(f"{name} must have at least one token (N >= 1); got N = {n}")
    if d is not None and width != d:
        raise InvalidArgument(f"{name} must have d = {d} columns; got shape {shape}")


def as_rational_sequence(
    X: SequenceLike, d: int | None = None, *, name: str = "X"
) -> flint.fmpq_mat:
    """``X`` as an exact (N, d) flint matrix, after checking shape and entries.

    >>> as_rational_sequence([[0.5, 1]]).entries()
    [1/2, 1]
    """
    shape = _shape_of(X, name)
    _check_shape(shape, d, name)
    if isinstance(X, flint.fmpq_mat):
        return flint.fmpq_mat(X)
    if isinstance(X, np.ndarray) and X.dtype.kind == "f":
        if not np.all(np.isfinite(X)):
            raise InvalidArgument(f"{name} has a non-finite entry (NaN or inf)")
        entries = [_fmpq_of_float(x) for x in X.ravel().tolist()]
    elif isinstance(X, np.ndarray) and X.dtype.kind in "iu":
        entries = [flint.fmpq(int(x)) for x in X.ravel().tolist()]
    else:
        flat = (
            list(sympy.Matrix(X))
            if isinstance(X, sympy.MatrixBase)
            else [x for row in np.asarray(X, dtype=object).tolist() for x in row]
        )
        entries = []
        for x in flat:
            q = to_fraction(x, name=f"entry of {name}")
            entries.append(flint.fmpq(q.numerator, q.denominator))
    return flint.fmpq_mat(shape[0], shape[1], entries)


def _fmpq_of_float(x: float) -> flint.fmpq:
    if x.is_integer():
        return flint.fmpq(int(x))
    num, den = x.as_integer_ratio()
    return flint.fmpq(num, den)


def as_float_sequence(X: SequenceLike, d: int | None = None, *, name: str = "X") -> np.ndarray:
    """``X`` as a float64 (N, d) array, after checking shape and entries.

    >>> as_float_sequence([[1, 2]]).dtype
    dtype('float64')
    """
    shape = _shape_of(X, name)
    _check_shape(shape, d, name)
    if isinstance(X, np.ndarray) and X.dtype.kind in "fiu":
        arr = X.astype(np.float64, copy=False)
    elif isinstance(X, flint.fmpq_mat):
        arr = np.array([float(Fraction(int(q.p), int(q.q))) for q in X.entries()]).reshape(shape)
    else:
        flat = (
            list(sympy.Matrix(X))
            if isinstance(X, sympy.MatrixBase)
            else [x for row in np.asarray(X, dtype=object).tolist() for x in row]
        )
        arr = np.array(
            [float(to_fraction(x, name=f"entry of {name}")) for x in flat], dtype=np.float64
        ).reshape(shape)
    if not np.all(np.isfinite(arr)):
        raise InvalidArgument(f"{name} has a non-finite entry (NaN or inf)")
    return arr


def rational_vector(x: Any, d: int | None, name: str) -> list[Fraction]:
    arr = np.asarray(list(x) if isinstance(x, sympy.MatrixBase) else x, dtype=object)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise InvalidArgument(f"{name} must be a vector; got shape {arr.shape}")
    if d is not None and arr.shape[0] != d:
        raise InvalidArgument(f"{name} must have length d = {d}; got length {arr.shape[0]}")
    if arr.shape[0] == 0:
        raise InvalidArgument(f"{name} must not be empty")
    return [to_fraction(a, name=f"entry of {name}") for a in arr.tolist()]


def rational_matrix(x: Any, name: str) -> list[list[Fraction]]:
    rows = matrix_rows(x, name, square=True)
    n = len(rows)
    if n == 0 or any(len(r) != n for r in rows):
        shape = (n, len(rows[0]) if n else 0)
        raise InvalidArgument(f"{name} must be a non-empty square matrix; got shape {shape}")
    return [[to_fraction(a, name=f"entry of {name}") for a in r] for r in rows]


def square_float_array(x: Any) -> np.ndarray | None:
    """A copy of ``x`` if it is a non-empty square float/int ndarray of finite numbers.

    None means "not this fast case": the general validation then runs and names any error.
    """
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu" or x.ndim != 2:
        return None
    if x.shape[0] == 0 or x.shape[0] != x.shape[1]:
        return None
    arr = np.array(x, dtype=np.float64)
    if x.dtype.kind in "iu" and not np.array_equal(arr, x):
        return None  # integers beyond 2^53 are not exact in float64
    return arr if np.all(np.isfinite(arr)) else None


def to_sympy(q: Fraction) -> sympy.Rational:
    return sympy.Rational(q.numerator, q.denominator)


def fmpq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def flint_rows(m: flint.fmpq_mat) -> list[list[flint.fmpq]]:
    return [[m[i, j] for j in range(m.ncols())] for i in range(m.nrows())]


def fmpq_to_sympy(q: flint.fmpq) -> sympy.Rational:
    return sympy.Rational(int(q.p), int(q.q))

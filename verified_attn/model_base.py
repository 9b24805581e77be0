"""What every model class shares: the attention formula, the model protocol, the base class.

>>> import sympy
>>> a, w, v1 = sympy.symbols("a w v1")
>>> attention_output([[a, 1]], [[w, 0], [0, 0]], [v1, 0])
a*v1

The definition lives in :func:`attention_output`, written once over any number system
that has ``+ * /`` and an ``exp`` (SymPy symbols included); the symbolic rooms derive the
theorems from it. The fast paths (flint rationals, arb balls, numpy) are checked against it
in the tests. :class:`BlackBoxModel` is what the oracle calls, :class:`SequenceModel` the
base class of the package's models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, get_arithmetic
from verified_attn.errors import InvalidArgument
from verified_attn.sequences import as_float_sequence, as_rational_sequence
from verified_attn.types import Answer, SequenceLike

__all__ = [
    "BlackBoxModel",
    "SequenceModel",
    "attention_output",
    "finite_answers",
    "softmax_weights",
]


def attention_output(
    rows: Sequence[Sequence[Any]],
    W: Any,
    v: Sequence[Any],
    c: Sequence[Any] | None = None,
    beta: Any = 0,
    *,
    exp: Callable[[Any], Any] = sympy.exp,
) -> Any:
    """The single-head attention regressor (the documentation's theory page), as one formula.

    ``s_i = x_i^T (W x_N + c)``, ``alpha = softmax(s)``, ``f = sum_i alpha_i x_i^T v + beta``.
    Works over any number system: pass SymPy symbols to derive identities.

    >>> import sympy
    >>> a, w, v1 = sympy.symbols("a w v1")
    >>> attention_output([[a]], [[w]], [v1])
    a*v1
    """
    d = len(v)
    n = len(rows)
    if n == 0:
        raise InvalidArgument("attention_output needs at least one token (rows is empty)")
    if any(len(row) != d for row in rows):
        widths = sorted({len(row) for row in rows})
        raise InvalidArgument(
            f"every token must have d = len(v) = {d} entries; got widths {widths}"
        )
    if len(W) != d or any(len(row) != d for row in W):
        raise InvalidArgument(f"W must be d x d with d = len(v) = {d}")
    if c is not None and len(c) != d:
        raise InvalidArgument(f"c must have d = len(v) = {d} entries, got {len(c)}")
    query = rows[-1]
    shift = [sum(W[i][k] * query[k] for k in range(d)) for i in range(d)]
    if c is not None:
        shift = [shift[i] + c[i] for i in range(d)]
    scores = [sum(rows[t][i] * shift[i] for i in range(d)) for t in range(n)]
    values = [sum(rows[t][i] * v[i] for i in range(d)) for t in range(n)]
    weights = [exp(s) for s in scores]
    total = sum(weights)
    return sum(weights[t] * values[t] for t in range(n)) / total + beta


def softmax_weights(Xs: np.ndarray, W: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Unnormalised softmax weights exp(s_i - max s) of s_i = x_i^T (W x_N + c), (B, N).

    The scores are quadratic in the entries and overflow float64 at entries near 1e154
    although the weights are fine: then they are recomputed in extended precision
    (``np.longdouble``, range 1e4932 on x86-64), so large inputs give finite answers.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        shift = Xs[:, -1, :] @ W.T + (0.0 if c is None else c)  # (B, d): W x_N + c
        scores = np.einsum("bnd,bd->bn", Xs, shift)
        if not np.all(np.isfinite(scores)):
            X_long = Xs.astype(np.longdouble)
            shift_long = X_long[:, -1, :] @ W.T.astype(np.longdouble)
            if c is not None:
                shift_long = shift_long + c.astype(np.longdouble)
            scores = np.einsum("bnd,bd->bn", X_long, shift_long)
        scores = scores - scores.max(axis=1, keepdims=True)
        return np.exp(scores).astype(np.float64)


def finite_answers(out: np.ndarray) -> np.ndarray:
    """Float answers, or PrecisionExhausted where float64 overflowed (never NaN or inf).

    The scores x_i^T W x_N are quadratic in the entries: at entries near 1e160 they exceed
    float64's range although f itself is finite; exact or certified arithmetic computes it.
    """
    if not np.all(np.isfinite(out)):
        from verified_attn.errors import PrecisionExhausted

        raise PrecisionExhausted(
            "float64 evaluation overflowed on this input (scores or values beyond 1e308); "
            "evaluate it in exact or certified arithmetic instead"
        )
    return out


@runtime_checkable
class BlackBoxModel(Protocol):
    """What :class:`~verified_attn.oracle.Oracle` calls on a model: a public protocol.

    A class of your own with these three members can be wrapped as ``Oracle(model, ...)``
    in every arithmetic (subclassing :class:`SequenceModel` provides ``evaluate`` too):

    >>> import numpy as np, verified_attn as va
    >>> class Mean:
    ...     d = 2
    ...     def evaluate_batch(self, Xs):                  # float64 (B, N, d) -> (B,)
    ...         return np.asarray(Xs).mean(axis=1).sum(axis=1)
    ...     def evaluate_rational(self, Xq, arith):        # exact flint (N, d) matrix
    ...         n = Xq.nrows()
    ...         total = sum((Xq[i, j] for i in range(n) for j in range(2)), 0) / n
    ...         return arith.rational(va.arithmetic.to_fraction(total))
    >>> isinstance(Mean(), va.models.BlackBoxModel)
    True
    >>> va.Oracle(Mean(), "exact").query([[1, 2], [3, 4]])
    5
    """

    d: int

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """f on a float64 (B, N, d) batch, as a (B,) float64 array."""
        ...

    def evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        """f on one exact (N, d) sequence, as a number of ``arith``."""
        ...


class SequenceModel:
    """What every model here shares: f on one sequence, in float64 or any arithmetic.

    Subclasses set ``d`` and implement ``evaluate_batch`` (float64, (B, N, d) -> (B,)) and
    ``_evaluate_rational`` (an exact (N, d) flint matrix, in exact or certified arithmetic);
    :class:`~verified_attn.oracle.Oracle` uses exactly these two.
    """

    d: int

    def __call__(self, X: Any) -> float:
        """f(X) in float64."""
        return float(self.evaluate_batch(as_float_sequence(X, self.d)[None, :, :])[0])

    def evaluate(self, X: SequenceLike, arithmetic: str | Arithmetic = "float") -> Answer:
        """f(X) in the given arithmetic ("exact", "certified" or "float")."""
        arith = get_arithmetic(arithmetic)
        if arith.name == "float":
            return self(X)
        Xq = as_rational_sequence(X, self.d)
        with arith.context():
            return self._evaluate_rational(Xq, arith)

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        """f(Xq) for an exact (N, d) flint matrix, in exact or certified arithmetic.

        Part of the :class:`BlackBoxModel` protocol; call inside ``arith.context()``.
        """
        return self._evaluate_rational(Xq, arith)

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        raise NotImplementedError

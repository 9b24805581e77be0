"""The model classes, each evaluated in every arithmetic from one definition.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, 0], [0, 2]], [1, -1])
>>> model([[1, 0]])                  # length 1: softmax over one position is 1, f = x^T v
1.0
>>> model.evaluate([[1, 0], [0, 1]], "exact")
(-1 + exp(-2))/(exp(-2) + 1)

The definition lives in :func:`attention_output`, written once over any number system
that has ``+ * /`` and an ``exp`` (SymPy symbols included); the symbolic rooms derive the
theorems from it. The fast paths (flint rationals, arb balls, numpy) are checked against it
in the tests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, get_arithmetic, to_fraction
from verified_attn.errors import InvalidArgument
from verified_attn.model_inputs import ffn_biases as _ffn_biases
from verified_attn.model_inputs import float_batch as _float_batch
from verified_attn.model_inputs import fmpq_rows as _fmpq_matrix
from verified_attn.model_inputs import rational_list as _rational_list
from verified_attn.model_inputs import rational_rect as _rational_rect
from verified_attn.model_inputs import sympy_rows as _sympy_matrix
from verified_attn.relu_eval import active_mix
from verified_attn.relu_eval import sign_of_exp_sum as _sign_of_exp_sum  # noqa: F401 (tests)
from verified_attn.types import Answer, SequenceLike

__all__ = [
    "MultiHeadAttention",
    "OneLayerTransformer",
    "ReluFFN",
    "SequenceModel",
    "SingleHeadAttention",
    "as_float_sequence",
    "as_rational_sequence",
    "attention_output",
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


def _softmax_weights(Xs: np.ndarray, W: np.ndarray, c: np.ndarray | None) -> np.ndarray:
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


def _finite(out: np.ndarray) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------
# Input validation shared by models and oracles.
# ---------------------------------------------------------------------------------------


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


def _rational_vector(x: Any, d: int | None, name: str) -> list[Fraction]:
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


def _rational_matrix(x: Any, name: str) -> list[list[Fraction]]:
    if isinstance(x, sympy.MatrixBase):
        rows = x.tolist()
    else:
        try:
            arr = np.asarray(x, dtype=object)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"{name} must be a square matrix, got {x!r}") from exc
        if arr.ndim != 2:
            raise InvalidArgument(f"{name} must be a square 2-D matrix; got shape {arr.shape}")
        rows = arr.tolist()
    n = len(rows)
    if n == 0 or any(len(r) != n for r in rows):
        shape = (n, len(rows[0]) if n else 0)
        raise InvalidArgument(f"{name} must be a non-empty square matrix; got shape {shape}")
    return [[to_fraction(a, name=f"entry of {name}") for a in r] for r in rows]


def _square_float_array(x: Any) -> np.ndarray | None:
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


def _to_sympy(q: Fraction) -> sympy.Rational:
    return sympy.Rational(q.numerator, q.denominator)


def _fmpq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


# ---------------------------------------------------------------------------------------
# Single head.
# ---------------------------------------------------------------------------------------


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


class SingleHeadAttention(SequenceModel):
    """Single-head softmax attention read out at the last token (see the theory page, docs/theory.md).

    ``f(X) = sum_i softmax(s)_i x_i^T v + beta`` with ``s_i = x_i^T (W x_N + c)``. Without
    ``c`` and ``beta`` this is the paper's model (d^2 + d parameters); with either it is the
    affine extension (d^2 + 2d + 1), which is what a PyTorch head with biases computes.

    Parameters are stored exactly: floats become the binary rationals they are.

    >>> m = SingleHeadAttention([[0, 1], [1, 0]], [2, 3], beta=1)
    >>> m.affine, m.parameter_count
    (True, 9)
    >>> m.v.T
    Matrix([[2, 3]])
    >>> SingleHeadAttention([[1, 2]], [1])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: W must be a non-empty square matrix; got shape (1, 2)
    """

    def __init__(self, W: Any, v: Any, *, c: Any = None, beta: Any = None) -> None:
        w_float = _square_float_array(W)
        if w_float is None:
            w_rows = _rational_matrix(W, "W")
            d = len(w_rows)
            self._W = w_rows
            self._W_float = np.array([[float(q) for q in row] for row in w_rows], dtype=np.float64)
        else:
            # A float array is already exact (binary rationals): keep it, and make the
            # Fraction and flint copies only if an exact arithmetic asks (d = 512: 262k).
            d = w_float.shape[0]
            self._W_float = w_float
        v_q = _rational_vector(v, d, "v")
        c_q = None if c is None else _rational_vector(c, d, "c")
        beta_q = None if beta is None else to_fraction(beta, name="beta")
        self.d = d
        self.affine = c is not None or beta is not None
        self._v = v_q
        self._c = c_q if c_q is not None else [Fraction(0)] * d
        self._beta = beta_q if beta_q is not None else Fraction(0)
        self._v_flint = flint.fmpq_mat(d, 1, [_fmpq(q) for q in v_q])
        self._c_flint = flint.fmpq_mat(d, 1, [_fmpq(q) for q in self._c])
        self._v_float = np.array([float(q) for q in v_q], dtype=np.float64)
        self._c_float = np.array([float(q) for q in self._c], dtype=np.float64)
        self._beta_float = float(self._beta)

    @functools.cached_property
    def _W(self) -> list[list[Fraction]]:  # only reached when W came as a float array
        return [[Fraction(x) for x in row] for row in self._W_float.tolist()]

    @functools.cached_property
    def _W_flint(self) -> flint.fmpq_mat:
        d = self.d
        return flint.fmpq_mat(d, d, [_fmpq(q) for row in self._W for q in row])

    # -- exact parameters ------------------------------------------------------------
    @property
    def W(self) -> sympy.Matrix:
        """The merged query-key matrix, exactly (d x d SymPy matrix)."""
        return sympy.Matrix([[_to_sympy(q) for q in row] for row in self._W])

    @property
    def v(self) -> sympy.Matrix:
        """The merged value-readout vector, exactly (d x 1 SymPy matrix)."""
        return sympy.Matrix([_to_sympy(q) for q in self._v])

    @property
    def c(self) -> sympy.Matrix:
        """The score bias (zero for the non-affine model)."""
        return sympy.Matrix([_to_sympy(q) for q in self._c])

    @property
    def beta(self) -> sympy.Rational:
        """The output bias (zero for the non-affine model)."""
        return _to_sympy(self._beta)

    @property
    def parameter_count(self) -> int:
        """d^2 + d, or d^2 + 2d + 1 for the affine model: the information-theoretic floor."""
        return self.d * self.d + (2 * self.d + 1 if self.affine else self.d)

    def parameters(self) -> dict[str, Any]:
        """The parameters as exact SymPy objects (``c`` and ``beta`` only if affine)."""
        out: dict[str, Any] = {"W": self.W, "v": self.v}
        if self.affine:
            out["c"] = self.c
            out["beta"] = self.beta
        return out

    def float_parameters(self) -> dict[str, Any]:
        """The parameters as float64 arrays."""
        out: dict[str, Any] = {"W": self._W_float.copy(), "v": self._v_float.copy()}
        if self.affine:
            out["c"] = self._c_float.copy()
            out["beta"] = self._beta_float
        return out

    # -- evaluation (f(X) and evaluate() come from SequenceModel) ----------------------
    def symbolic(self, X: SequenceLike) -> sympy.Expr:
        """f(X) straight from :func:`attention_output` (slow; the reference)."""
        rows = [
            [_to_sympy(Fraction(int(q.p), int(q.q))) for q in r]
            for r in _rows(as_rational_sequence(X, self.d))
        ]
        W = [[_to_sympy(q) for q in r] for r in self._W]
        return attention_output(
            rows,
            W,
            [_to_sympy(q) for q in self._v],
            [_to_sympy(q) for q in self._c],
            _to_sympy(self._beta),
        )

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        n = Xq.nrows()
        last = flint.fmpq_mat(self.d, 1, [Xq[n - 1, k] for k in range(self.d)])
        scores = Xq * (self._W_flint * last + self._c_flint)
        values = Xq * self._v_flint
        s = [scores[i, 0] for i in range(n)]
        p = [values[i, 0] for i in range(n)]
        top = max(s)
        if arith.name == "exact":
            beta = _to_sympy(self._beta)
            if n == 1:
                return _sympy_q(p[0]) + beta
            w = [sympy.exp(_sympy_q(si - top)) for si in s]
            return sum(wi * _sympy_q(pi) for wi, pi in zip(w, p, strict=True)) / sum(w) + beta
        if arith.name == "certified":
            beta = flint.arb(_fmpq(self._beta))
            w = [flint.arb(si - top).exp() for si in s]
            num = sum((wi * flint.arb(pi) for wi, pi in zip(w, p, strict=True)), flint.arb(0))
            return num / sum(w, flint.arb(0)) + beta
        raise InvalidArgument(f"no rational evaluation in arithmetic {arith.name!r}")

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """f on a batch of equal-length sequences, shape (B, N, d) -> (B,), float64."""
        try:
            Xs = np.asarray(Xs, dtype=np.float64)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"Xs must be a real (B, N, d) array: {exc}") from exc
        if Xs.ndim != 3 or Xs.shape[2] != self.d or Xs.shape[1] < 1:
            raise InvalidArgument(f"Xs must have shape (B, N>=1, d={self.d}); got {Xs.shape}")
        if not np.all(np.isfinite(Xs)):
            raise InvalidArgument("Xs has a non-finite entry (NaN or inf)")
        weights = _softmax_weights(Xs, self._W_float, self._c_float)
        values = Xs @ self._v_float
        return _finite((weights * values).sum(axis=1) / weights.sum(axis=1) + self._beta_float)

    def __repr__(self) -> str:
        kind = "affine, " if self.affine else ""
        return f"SingleHeadAttention({kind}d={self.d})"


def _rows(m: flint.fmpq_mat) -> list[list[flint.fmpq]]:
    return [[m[i, j] for j in range(m.ncols())] for i in range(m.nrows())]


def _sympy_q(q: flint.fmpq) -> sympy.Rational:
    return sympy.Rational(int(q.p), int(q.q))


# ---------------------------------------------------------------------------------------
# Multi-head (Prop 7.1; docs/theory.md): a sum of single heads.
# ---------------------------------------------------------------------------------------


class MultiHeadAttention(SequenceModel):
    """H softmax heads read out at the last token: ``f(X) = sum_h softmax(X W_h x_N)^T X v_h``.

    ``heads`` is a non-empty list of pairs ``(W_h, v_h)``, or triples ``(W_h, v_h, c_h)``
    for the affine variant (docs/theory.md) with per-head score bias ``c_h``:
    ``f(X) = sum_h softmax(X (W_h x_N + c_h))^T X v_h + beta``, ``beta`` one output bias.
    That is what PyTorch ``nn.MultiheadAttention`` with biases computes, head by head. Each
    head is a :class:`SingleHeadAttention` (exact parameters) and f is the sum of their
    outputs plus ``beta``, in every arithmetic.

    >>> m = MultiHeadAttention([([[1]], [2]), ([[0]], [-1])])
    >>> m.H, m.parameter_count, m.model_class
    (2, 4, 'multi-head')
    >>> m([[3]])                        # length 1: each head gives x^T v_h
    3.0
    >>> a = MultiHeadAttention([([[1]], [2], [1]), ([[0]], [-1])], beta=5)
    >>> a.affine, a.parameter_count, a.model_class, a([[3]])
    (True, 7, 'multi-head-affine', 8.0)
    >>> MultiHeadAttention([])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: heads must be a non-empty list of (W, v) pairs or (W, v, c) triples; got []
    """

    model_class = "multi-head"

    def __init__(self, heads: Any, *, beta: Any = None) -> None:
        if isinstance(heads, str | bytes) or not isinstance(heads, Sequence) or not heads:
            raise InvalidArgument(
                "heads must be a non-empty list of (W, v) pairs or (W, v, c) triples; "
                f"got {heads!r}"[:200]
            )
        models = []
        for h, head in enumerate(heads):
            if isinstance(head, SingleHeadAttention):
                models.append(head)
                continue
            if not isinstance(head, Sequence) or len(head) not in (2, 3):
                raise InvalidArgument(
                    f"heads[{h}] must be a pair (W, v) or a triple (W, v, c); got {head!r}"[:200]
                )
            try:
                c = head[2] if len(head) == 3 else None
                models.append(SingleHeadAttention(head[0], head[1], c=c))
            except InvalidArgument as exc:
                raise InvalidArgument(f"heads[{h}]: {exc}") from exc
        d = models[0].d
        for h, m in enumerate(models):
            if m.d != d:
                raise InvalidArgument(f"heads[{h}] has d = {m.d}; heads[0] has d = {d}")
        self.d = d
        self.head_models = models
        # The heads' own output biases (SingleHeadAttention given with beta) add up with
        # ``beta``; the model keeps them in the heads and adds only its own on evaluation.
        self._own_beta = Fraction(0) if beta is None else to_fraction(beta, name="beta")
        self.affine = beta is not None or any(m.affine for m in models)
        if self.affine:
            self.model_class = "multi-head-affine"  # the learners read this off the oracle

    @property
    def H(self) -> int:
        """The number of heads as given (before any merging; see ``canonical_form``)."""
        return len(self.head_models)

    @property
    def heads(self) -> list[tuple[sympy.Matrix, ...]]:
        """The heads exactly, as SymPy matrices: ``(W_h, v_h)``, or ``(W_h, v_h, c_h)`` if
        the model is affine (``c_h`` zero for a head given without one)."""
        if self.affine:
            return [(m.W, m.v, m.c) for m in self.head_models]
        return [(m.W, m.v) for m in self.head_models]

    @property
    def beta(self) -> sympy.Rational:
        """The total output bias: ``beta`` plus any heads' own (zero if not affine)."""
        total = self._own_beta + sum((m._beta for m in self.head_models), Fraction(0))
        return _to_sympy(total)

    @property
    def parameter_count(self) -> int:
        """H (d^2 + d), or H (d^2 + 2d) + 1 if affine: numbers, not identifiable ones."""
        per_head = self.d * self.d + (2 * self.d if self.affine else self.d)
        return self.H * per_head + (1 if self.affine else 0)

    def parameters(self) -> dict[str, Any]:
        """``{"heads": [...]}`` with exact SymPy matrices (and ``"beta"`` if affine)."""
        out: dict[str, Any] = {"heads": self.heads}
        if self.affine:
            out["beta"] = self.beta
        return out

    def symbolic(self, X: SequenceLike) -> sympy.Expr:
        """f(X) as the sum of :func:`attention_output` over the heads (the reference)."""
        total = sum((m.symbolic(X) for m in self.head_models), sympy.Integer(0))
        return total + _to_sympy(self._own_beta)

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        parts = [m._evaluate_rational(Xq, arith) for m in self.head_models]
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        if self._own_beta == 0:
            return total
        if arith.name == "certified":
            return total + flint.arb(_fmpq(self._own_beta))
        return total + _to_sympy(self._own_beta)

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """f on a batch of equal-length sequences, shape (B, N, d) -> (B,), float64."""
        out = self.head_models[0].evaluate_batch(Xs)
        for m in self.head_models[1:]:
            out = out + m.evaluate_batch(Xs)
        return _finite(out + float(self._own_beta))

    def __repr__(self) -> str:
        kind = "affine, " if self.affine else ""
        return f"MultiHeadAttention({kind}d={self.d}, H={self.H})"


# ---------------------------------------------------------------------------------------
# The bias-free ReLU FFN and the one-layer Transformer (docs/theory.md).
# ---------------------------------------------------------------------------------------


class ReluFFN(SequenceModel):
    """One-hidden-layer ReLU network ``g(x) = w_o^T ReLU(A^T x + a) + b``.

    ``a`` (hidden biases, length m) and ``b`` (output bias) are keyword-only; without them
    g is the bias-free network. As an oracle model, ``f([x_1..x_N]) = g(x_N)`` (the
    learners only send it length-1 queries). Width m = number of columns of A;
    ``parameter_count`` is m(d + 1), or m(d + 2) + 1 with biases. ReLU of an exact rational
    is decided exactly.

    >>> g = ReluFFN([[1, 0], [0, 1]], [1, -1])
    >>> g.d, g.m, g.parameter_count, g.model_class
    (2, 2, 6, 'relu-ffn')
    >>> g.value([Fraction(3), Fraction(-1)])
    Fraction(3, 1)
    >>> h = ReluFFN([[1, 0], [0, 1]], [1, -1], a=[-1, 2], b=5)
    >>> h.value([Fraction(3), Fraction(-1)]), h.parameter_count, h.model_class
    (Fraction(6, 1), 9, 'relu-ffn-biased')
    >>> ReluFFN([[1, 0]], [1])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: w_o must have length 2; got length 1
    """

    model_class = "relu-ffn"

    def __init__(self, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> None:
        self._A = _rational_rect(A, "A")
        self.d = len(self._A)
        self.m = len(self._A[0])
        self._w = _rational_list(w_o, "w_o", self.m)
        self._a, self._b, self.biased = _ffn_biases(a, b, self.m)
        if self.biased:
            self.model_class = "relu-ffn-biased"
        self._A_flint = _fmpq_matrix(self._A)
        self._A_float = np.array([[float(q) for q in r] for r in self._A], dtype=np.float64)
        self._w_float = np.array([float(q) for q in self._w], dtype=np.float64)
        self._a_float = np.array([float(q) for q in self._a], dtype=np.float64)

    @property
    def A(self) -> sympy.Matrix:
        """The hidden-layer matrix (d x m), exactly."""
        return _sympy_matrix(self._A)

    @property
    def w_o(self) -> sympy.Matrix:
        """The output weights (m x 1), exactly."""
        return _sympy_matrix([[q] for q in self._w])

    @property
    def a(self) -> sympy.Matrix:
        """The hidden biases (m x 1), exactly (zero when not given)."""
        return _sympy_matrix([[q] for q in self._a])

    @property
    def b(self) -> sympy.Rational:
        """The output bias, exactly (zero when not given)."""
        return _to_sympy(self._b)

    @property
    def parameter_count(self) -> int:
        return self.m * (self.d + 1) + (self.m + 1 if self.biased else 0)

    def value(self, x: Sequence[Fraction]) -> Fraction:
        """g(x) for a rational vector, exactly (Fractions)."""
        out = self._b
        for k in range(self.m):
            z = sum((self._A[i][k] * x[i] for i in range(self.d)), self._a[k])
            if z > 0:
                out += self._w[k] * z
        return out

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        n = Xq.nrows()
        out = self.value([to_fraction(Xq[n - 1, k]) for k in range(self.d)])
        if arith.name == "exact":
            return _to_sympy(out)
        if arith.name == "certified":
            return flint.arb(_fmpq(out))
        raise InvalidArgument(f"no rational evaluation in arithmetic {arith.name!r}")

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """g(x_N) for a batch (B, N, d) -> (B,), float64."""
        Xs = _float_batch(Xs, self.d)
        z = Xs[:, -1, :] @ self._A_float + self._a_float
        return _finite(np.maximum(z, 0.0) @ self._w_float + float(self._b))

    def __repr__(self) -> str:
        kind = "biased, " if self.biased else ""
        return f"ReluFFN({kind}d={self.d}, m={self.m})"


class OneLayerTransformer(SequenceModel):
    """``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N) + a) + b`` (docs/theory.md).

    W is d x d, V is d x e, A is e x m, w_o has length m; the FFN biases ``a`` (length m)
    and ``b`` (a number) are keyword-only and zero when not given (the paper's model).
    ``v_eff = V A w_o`` is the value vector of the antisymmetrised bias-free model
    T(X) - T(-X).

    Exact and certified arithmetic decide every ReLU exactly: the pre-activation is
    ``z_k = sum_i e^{s_i} (r_ik + a_k) / sum_i e^{s_i}`` with rational s, r, a; merging
    equal scores, z_k = 0 iff every merged coefficient is 0 (exp of distinct rationals are
    linearly independent over Q, Lindemann-Weierstrass), else its sign is settled in ball
    arithmetic at rising precision (:mod:`verified_attn.relu_eval`). So ReLU never meets a
    ball straddling 0.

    >>> T = OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1])    # T = |h|
    >>> T.evaluate([[1], [-1]], "exact")
    (1 - exp(-2))/(exp(-2) + 1)
    >>> T.v_eff.T, T.parameter_count, T.model_class
    (Matrix([[0]]), 6, 'one-layer-transformer')
    >>> Tb = OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1], a=[-1, 0], b=2)
    >>> Tb.evaluate([[3]], "exact"), Tb.parameter_count, Tb.model_class   # 1*2 + 0 + 2
    (4, 9, 'one-layer-transformer-biased')
    >>> OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1], a=[1])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: a must have length 2; got length 1
    """

    model_class = "one-layer-transformer"

    def __init__(self, W: Any, V: Any, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> None:
        self._W = _rational_rect(W, "W")
        self.d = len(self._W)
        if len(self._W[0]) != self.d:
            raise InvalidArgument(f"W must be square; got shape ({self.d}, {len(self._W[0])})")
        self._V = _rational_rect(V, "V", rows=self.d)
        self.e = len(self._V[0])
        self._A = _rational_rect(A, "A", rows=self.e)
        self.m = len(self._A[0])
        self._w = _rational_list(w_o, "w_o", self.m)
        self._a, self._b, self.biased = _ffn_biases(a, b, self.m)
        if self.biased:
            self.model_class = "one-layer-transformer-biased"
        self._W_flint = _fmpq_matrix(self._W)
        self._VA_flint = _fmpq_matrix(self._V) * _fmpq_matrix(self._A)  # r_ik = x_i^T V A e_k
        self._w_fmpq = [_fmpq(q) for q in self._w]
        self._a_fmpq = [_fmpq(q) for q in self._a]
        self._W_float = np.array([[float(q) for q in r] for r in self._W], dtype=np.float64)
        self._VA_float = np.array(
            [[float(Fraction(int(q.p), int(q.q))) for q in row] for row in _rows(self._VA_flint)]
        )
        self._w_float = np.array([float(q) for q in self._w], dtype=np.float64)
        self._a_float = np.array([float(q) for q in self._a], dtype=np.float64)

    # -- exact parameters ------------------------------------------------------------
    @property
    def W(self) -> sympy.Matrix:
        return _sympy_matrix(self._W)

    @property
    def V(self) -> sympy.Matrix:
        return _sympy_matrix(self._V)

    @property
    def A(self) -> sympy.Matrix:
        return _sympy_matrix(self._A)

    @property
    def w_o(self) -> sympy.Matrix:
        return _sympy_matrix([[q] for q in self._w])

    @property
    def a(self) -> sympy.Matrix:
        """The FFN's hidden biases (m x 1), exactly (zero when not given)."""
        return _sympy_matrix([[q] for q in self._a])

    @property
    def b(self) -> sympy.Rational:
        """The FFN's output bias, exactly (zero when not given)."""
        return _to_sympy(self._b)

    @property
    def v_eff(self) -> sympy.Matrix:
        """V A w_o: the value vector of T(X) - T(-X) (for the bias-free model)."""
        return self.V * self.A * self.w_o

    @property
    def parameter_count(self) -> int:
        """d^2 + d e + e m + m, plus m + 1 with biases (raw; the function has fewer)."""
        raw = self.d * self.d + self.d * self.e + self.e * self.m + self.m
        return raw + (self.m + 1 if self.biased else 0)

    def ffn(self) -> ReluFFN:
        """The length-1 function g(x) = T([x]) = w_o^T ReLU(A^T V^T x + a) + b as a ReluFFN."""
        if not self.biased:
            return ReluFFN(self.V * self.A, self.w_o)
        return ReluFFN(self.V * self.A, self.w_o, a=self.a, b=self.b)

    # -- evaluation ------------------------------------------------------------------

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        if arith.name not in ("exact", "certified"):
            raise InvalidArgument(f"no rational evaluation in arithmetic {arith.name!r}")
        n = Xq.nrows()
        last = flint.fmpq_mat(self.d, 1, [Xq[n - 1, k] for k in range(self.d)])
        scores = Xq * (self._W_flint * last)
        s = [scores[i, 0] for i in range(n)]
        top = max(s)
        s = [si - top for si in s]
        # rho_i = sum over the active neurons k of w_o[k] (R[i, k] + a_k), R = X V A;
        # T = sum_i e^{s_i} rho_i / sum_i e^{s_i} + b.
        # With b folded into every rho_i, the exact expression depends only on the values
        # of g's affine piece at the tokens: equal functions give == expressions.
        b = _fmpq(self._b)
        rho = [r + b for r in active_mix(s, Xq * self._VA_flint, self._a_fmpq, self._w_fmpq)]
        if arith.name == "exact":
            if n == 1:
                return _sympy_q(rho[0])
            w = [sympy.exp(_sympy_q(si)) for si in s]
            return sum(wi * _sympy_q(ri) for wi, ri in zip(w, rho, strict=True)) / sum(w)
        w = [flint.arb(si).exp() for si in s]
        total = sum(w, flint.arb(0))
        out = sum((wi * flint.arb(ri) for wi, ri in zip(w, rho, strict=True)), flint.arb(0))
        return out / total

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """T on a batch (B, N, d) -> (B,), float64."""
        Xs = _float_batch(Xs, self.d)
        alpha = _softmax_weights(Xs, self._W_float, None)
        alpha /= alpha.sum(axis=1, keepdims=True)
        pooled = np.einsum("bn,bnd->bd", alpha, Xs)  # X^T alpha
        z = np.maximum(pooled @ self._VA_float + self._a_float, 0.0)
        return _finite(z @ self._w_float + float(self._b))

    def __repr__(self) -> str:
        kind = "biased, " if self.biased else ""
        return f"OneLayerTransformer({kind}d={self.d}, e={self.e}, m={self.m})"

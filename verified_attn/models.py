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
import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, to_fraction
from verified_attn.errors import InvalidArgument
from verified_attn.ffn_models import OneLayerTransformer, ReluFFN
from verified_attn.model_base import BlackBoxModel, SequenceModel, attention_output
from verified_attn.model_base import finite_answers as _finite
from verified_attn.model_base import softmax_weights as _softmax_weights
from verified_attn.relu_eval import sign_of_exp_sum as _sign_of_exp_sum  # noqa: F401 (tests)
from verified_attn.sequences import as_float_sequence, as_rational_sequence
from verified_attn.sequences import flint_rows as _rows
from verified_attn.sequences import fmpq as _fmpq
from verified_attn.sequences import fmpq_to_sympy as _sympy_q
from verified_attn.sequences import rational_matrix as _rational_matrix
from verified_attn.sequences import rational_vector as _rational_vector
from verified_attn.sequences import square_float_array as _square_float_array
from verified_attn.sequences import to_sympy as _to_sympy
from verified_attn.types import SequenceLike
from verified_attn.validation import check_head_tuple, check_nonempty_list

__all__ = [
    "BlackBoxModel",
    "MultiHeadAttention",
    "OneLayerTransformer",
    "ReluFFN",
    "SequenceModel",
    "SingleHeadAttention",
    "as_float_sequence",
    "as_rational_sequence",
    "attention_output",
]


def _float(q: Fraction) -> float:
    """q as a float64, +-inf beyond its range: the float view of an exact parameter, whose
    float evaluation then says PrecisionExhausted (exact and certified use q itself).

    >>> _float(Fraction(1, 4)), _float(Fraction(-10**400))
    (0.25, -inf)
    """
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


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
            self._W_float = np.array([[_float(q) for q in row] for row in w_rows], dtype=np.float64)
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
        self._v_float = np.array([_float(q) for q in v_q], dtype=np.float64)
        self._c_float = np.array([_float(q) for q in self._c], dtype=np.float64)
        self._beta_float = _float(self._beta)

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
        check_nonempty_list(heads, "heads", "a non-empty list of (W, v) pairs or (W, v, c) triples")
        models = []
        for h, head in enumerate(heads):
            if isinstance(head, SingleHeadAttention):
                models.append(head)
                continue
            W, v, c = check_head_tuple(head, h)
            try:
                models.append(SingleHeadAttention(W, v, c=c))
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

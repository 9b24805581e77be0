"""The ReLU FFN and the one-layer Transformer, exact in every arithmetic (docs/theory.md).

>>> ReluFFN([[1, -1]], [1, 1]).evaluate([[-2]], "exact")      # |x| at x = -2
2
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, to_fraction
from verified_attn.errors import InvalidArgument
from verified_attn.model_base import SequenceModel
from verified_attn.model_base import finite_answers as _finite
from verified_attn.model_base import softmax_weights as _softmax_weights
from verified_attn.model_inputs import ffn_biases as _ffn_biases
from verified_attn.model_inputs import float_batch as _float_batch
from verified_attn.model_inputs import fmpq_rows as _fmpq_matrix
from verified_attn.model_inputs import rational_list as _rational_list
from verified_attn.model_inputs import rational_rect as _rational_rect
from verified_attn.model_inputs import sympy_rows as _sympy_matrix
from verified_attn.relu_eval import active_mix
from verified_attn.sequences import flint_rows as _rows
from verified_attn.sequences import fmpq as _fmpq
from verified_attn.sequences import fmpq_to_sympy as _sympy_q
from verified_attn.sequences import to_sympy as _to_sympy

__all__ = ["OneLayerTransformer", "ReluFFN"]


# ---------------------------------------------------------------------------------------
# The bias-free ReLU FFN and the one-layer Transformer (docs/theory.md).
# ---------------------------------------------------------------------------------------


class _ReluLayer(SequenceModel):
    """The ReLU layer both models end in: ``w_o^T ReLU(A^T h + a) + b`` with A's m columns,
    its exact parameters and their float copies.

    >>> ReluFFN([[2]], [3], b=1).b, OneLayerTransformer([[1]], [[1]], [[2]], [3]).w_o
    (1, Matrix([[3]]))
    """

    #: model_class when a hidden or output bias is given.
    biased_class = ""

    def _set_layer(self, A: list[list[Fraction]], w_o: Any, a: Any, b: Any) -> None:
        self._A = A
        self.m = len(A[0])
        self._w = _rational_list(w_o, "w_o", self.m)
        self._a, self._b, self.biased = _ffn_biases(a, b, self.m)
        if self.biased:
            self.model_class = self.biased_class
        self._w_float = np.array([float(q) for q in self._w], dtype=np.float64)
        self._a_float = np.array([float(q) for q in self._a], dtype=np.float64)

    @property
    def A(self) -> sympy.Matrix:
        """The hidden-layer matrix (one column per neuron), exactly."""
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


class ReluFFN(_ReluLayer):
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
    biased_class = "relu-ffn-biased"

    def __init__(self, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> None:
        self._set_layer(_rational_rect(A, "A"), w_o, a, b)
        self.d = len(self._A)
        self._A_flint = _fmpq_matrix(self._A)
        self._A_float = np.array([[float(q) for q in r] for r in self._A], dtype=np.float64)

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


class OneLayerTransformer(_ReluLayer):
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
    biased_class = "one-layer-transformer-biased"

    def __init__(self, W: Any, V: Any, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> None:
        self._W = _rational_rect(W, "W")
        self.d = len(self._W)
        if len(self._W[0]) != self.d:
            raise InvalidArgument(f"W must be square; got shape ({self.d}, {len(self._W[0])})")
        self._V = _rational_rect(V, "V", rows=self.d)
        self.e = len(self._V[0])
        self._set_layer(_rational_rect(A, "A", rows=self.e), w_o, a, b)
        self._W_flint = _fmpq_matrix(self._W)
        self._VA_flint = _fmpq_matrix(self._V) * _fmpq_matrix(self._A)  # r_ik = x_i^T V A e_k
        self._w_fmpq = [_fmpq(q) for q in self._w]
        self._a_fmpq = [_fmpq(q) for q in self._a]
        self._W_float = np.array([[float(q) for q in r] for r in self._W], dtype=np.float64)
        self._VA_float = np.array(
            [[float(Fraction(int(q.p), int(q.q))) for q in row] for row in _rows(self._VA_flint)]
        )

    @staticmethod
    def from_heads(heads: Any, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> Any:
        """The multi-head form: ``heads`` (W_h, V_h[, c_h]) or a MultiHeadAttention, summed
        before the FFN; a :class:`~verified_attn.ffn_heads.MultiHeadTransformer`.

        >>> T = OneLayerTransformer.from_heads([([[1]], [[1]]), ([[0]], [[1]])], [[1]], [1])
        >>> T.H, T.evaluate([[3]], "exact")
        (2, 6)
        """
        from verified_attn.ffn_heads import MultiHeadTransformer

        return MultiHeadTransformer(heads, A, w_o, a=a, b=b)

    # -- exact parameters ------------------------------------------------------------
    @property
    def W(self) -> sympy.Matrix:
        return _sympy_matrix(self._W)

    @property
    def V(self) -> sympy.Matrix:
        return _sympy_matrix(self._V)

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

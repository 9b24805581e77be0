"""The multi-head one-layer Transformer: H heads summed, then the ReLU FFN (docs/theory.md).

>>> T = MultiHeadTransformer([([[1]], [[1]]), ([[-1]], [[2]])], [[1, -1]], [1, 1])
>>> T.evaluate([[2]], "exact")            # length 1: h = (1 + 2) x, T = |3 x|
6
>>> T.H, T.e, T.m, T.model_class
(2, 1, 2, 'one-layer-transformer-multi-head')

``T(X) = w_o^T ReLU(A^T h(X) + a) + b`` with ``h(X) = sum_h V_h^T X^T alpha_h(X)`` and
``alpha_h = softmax(X (W_h x_N + c_h))``. Exact and certified arithmetic decide every ReLU
exactly: ``z_k = sum_h (sum_i e^{s_hi} r_hik) / Z_h + a_k`` times the positive
``prod_h Z_h`` is ``sum_S e^S (Q_Sk + a_k M_S)`` over the sums S of one score per head
(:func:`pre_activation_terms`), a sum of rational multiples of exp of rationals, whose
sign :func:`~verified_attn.relu_eval.sign_of_exp_sum` decides exactly.
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
from verified_attn.ffn_models import ReluFFN, _ReluLayer
from verified_attn.model_base import finite_answers, softmax_weights
from verified_attn.model_inputs import (
    float_batch,
    fmpq_rows,
    rational_list,
    rational_rect,
    sympy_rows,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.relu_eval import sign_of_exp_sum
from verified_attn.sequences import fmpq, fmpq_to_sympy
from verified_attn.validation import check_head_tuple, check_nonempty_list

__all__ = ["MultiHeadTransformer", "pre_activation_terms"]

Group = tuple[list[flint.fmpq], flint.fmpq_mat]  # a group's scores (max 0) and X V A rows


def pre_activation_terms(
    groups: Sequence[Group], a: Sequence[flint.fmpq]
) -> tuple[list[flint.fmpq], list[list[flint.fmpq]]]:
    """Exponents S and, per neuron k, coefficients c_Sk with ``sign(z_k) = sign(sum_S
    c_Sk e^S)``: S runs over the sums of one token's score per group, ``c_Sk = Q_Sk + a_k
    M_S`` with M_S the number of such token choices and Q_Sk the sum of their values.

    >>> q = flint.fmpq
    >>> one = ([q(0)], flint.fmpq_mat(1, 1, [2]))                 # one token, value 2
    >>> pre_activation_terms([one, one], [q(-1)])                  # z = 2 + 2 - 1
    ([0], [[3]])
    """
    m = len(a)
    table: dict[flint.fmpq, tuple[flint.fmpq, list[flint.fmpq]]] = {
        flint.fmpq(0): (flint.fmpq(1), [flint.fmpq(0)] * m)
    }
    for s, R in groups:
        dist: dict[flint.fmpq, tuple[flint.fmpq, list[flint.fmpq]]] = {}
        for i, si in enumerate(s):
            mass, vals = dist.get(si, (flint.fmpq(0), [flint.fmpq(0)] * m))
            dist[si] = (mass + 1, [v + R[i, k] for k, v in enumerate(vals)])
        out: dict[flint.fmpq, tuple[flint.fmpq, list[flint.fmpq]]] = {}
        for S1, (M1, Q1) in table.items():
            for s2, (m2, q2) in dist.items():
                M0, Q0 = out.get(S1 + s2, (flint.fmpq(0), [flint.fmpq(0)] * m))
                Q = [x + y * m2 + M1 * z for x, y, z in zip(Q0, Q1, q2, strict=True)]
                out[S1 + s2] = (M0 + M1 * m2, Q)
        table = out
    keys = list(table)
    coeffs = [[table[S][1][k] + a[k] * table[S][0] for S in keys] for k in range(m)]
    return keys, coeffs


def _heads_of(heads: Any) -> tuple[list[tuple[Any, Any, Any]], Fraction]:
    """(W_h, V_h, c_h or None) per head, and the attention's output bias (a
    :class:`MultiHeadAttention` gives V_h = v_h as a d x 1 matrix and its beta)."""
    if isinstance(heads, MultiHeadAttention):
        out = [(m.W, m.v, m.c if m.affine else None) for m in heads.head_models]
        return out, to_fraction(heads.beta)
    what = "a MultiHeadAttention or a non-empty list of (W, V) pairs or (W, V, c) triples"
    check_nonempty_list(heads, "heads", what)
    return [check_head_tuple(head, h, "V") for h, head in enumerate(heads)], Fraction(0)


class MultiHeadTransformer(_ReluLayer):
    """``T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T softmax(X (W_h x_N + c_h)) + a) + b``.

    ``heads``: a list of ``(W_h, V_h)`` pairs or ``(W_h, V_h, c_h)`` triples (W_h d x d,
    V_h d x e, the score bias c_h of length d), or a
    :class:`~verified_attn.models.MultiHeadAttention` (then e = 1, V_h = v_h and its output
    bias beta is folded into ``a``). A is e x m, w_o has length m, the FFN biases ``a``
    and ``b`` are keyword-only. :meth:`OneLayerTransformer.from_heads
    <verified_attn.models.OneLayerTransformer.from_heads>` builds one.

    >>> T = MultiHeadTransformer([([[1]], [[1]], [1]), ([[0]], [[-1]])], [[2]], [1], b=3)
    >>> T.affine, T.parameter_count, T.evaluate([[1], [0]], "exact")
    (True, 10, 2/(exp(-1) + 1) + 2)
    >>> MultiHeadTransformer([([[1]], [[1]]), ([[1, 0], [0, 1]], [[1], [1]])], [[1]], [1])
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: heads[1]: W must have shape (1, 1); got shape (2, 2)
    """

    model_class = "one-layer-transformer-multi-head"
    biased_class = "one-layer-transformer-multi-head"

    def __init__(self, heads: Any, A: Any, w_o: Any, *, a: Any = None, b: Any = None) -> None:
        parsed, beta = _heads_of(heads)
        self._W: list[list[list[Fraction]]] = []
        self._V: list[list[list[Fraction]]] = []
        self._c: list[list[Fraction] | None] = []
        d = e = None
        for h, (W, V, c) in enumerate(parsed):
            try:
                self._W.append(rational_rect(W, "W", rows=d, cols=d))
                d = len(self._W[-1])
                if len(self._W[-1][0]) != d:
                    raise InvalidArgument(f"W must be square; got shape ({d}, {len(W[0])})")
                self._V.append(rational_rect(V, "V", rows=d, cols=e))
                e = len(self._V[-1][0])
                self._c.append(None if c is None else rational_list(c, "c", d))
            except InvalidArgument as exc:
                raise InvalidArgument(f"heads[{h}]: {exc}") from exc
        assert d is not None and e is not None
        self.d, self.e = d, e
        self.affine = any(c is not None for c in self._c)
        A_rows = rational_rect(A, "A", rows=e)
        self._set_layer(A_rows, w_o, a, b)
        if beta:  # the attention's output bias enters every neuron as beta * (column sum of A)
            self._a = [
                q + beta * sum((r[k] for r in A_rows), Fraction(0)) for k, q in enumerate(self._a)
            ]
            self.biased = True
        self._prepare()

    def _prepare(self) -> None:
        A = fmpq_rows(self._A)
        self._W_flint = [fmpq_rows(W) for W in self._W]
        self._c_flint = [
            None if c is None else flint.fmpq_mat(self.d, 1, [fmpq(q) for q in c]) for c in self._c
        ]
        self._VA_flint = [fmpq_rows(V) * A for V in self._V]
        self._w_fmpq = [fmpq(q) for q in self._w]
        self._a_fmpq = [fmpq(q) for q in self._a]
        self._W_float = [np.array(W, dtype=np.float64) for W in self._W]
        self._c_float = [None if c is None else np.array(c, dtype=np.float64) for c in self._c]
        self._V_float = [np.array(V, dtype=np.float64) for V in self._V]
        self._A_float = np.array(self._A, dtype=np.float64)
        self._a_float = np.array([float(q) for q in self._a], dtype=np.float64)

    # -- exact parameters ------------------------------------------------------------
    @property
    def H(self) -> int:
        """The number of heads as given."""
        return len(self._W)

    @property
    def heads(self) -> list[tuple[sympy.Matrix, ...]]:
        """``(W_h, V_h)`` per head, or ``(W_h, V_h, c_h)`` if any head has a score bias."""
        out = []
        for W, V, c in zip(self._W, self._V, self._c, strict=True):
            part: tuple[sympy.Matrix, ...] = (sympy_rows(W), sympy_rows(V))
            if self.affine:
                cz = c if c is not None else [Fraction(0)] * self.d
                part = (*part, sympy_rows([[q] for q in cz]))
            out.append(part)
        return out

    @property
    def parameter_count(self) -> int:
        """H (d^2 + d e) (+ H d score biases) + e m + m (+ m + 1 FFN biases): raw numbers."""
        per_head = self.d * self.d + self.d * self.e + (self.d if self.affine else 0)
        ffn = self.e * self.m + self.m + (self.m + 1 if self.biased else 0)
        return self.H * per_head + ffn

    def ffn(self) -> ReluFFN:
        """The length-1 function g(x) = T([x]) (alpha_h = 1: h = (sum_h V_h)^T x), a ReluFFN.

        >>> T = MultiHeadTransformer([([[1]], [[1]]), ([[5]], [[2]])], [[1]], [1], a=[1])
        >>> T.ffn().value([Fraction(1)])
        Fraction(4, 1)
        """
        V = sum((sympy_rows(V) for V in self._V[1:]), sympy_rows(self._V[0]))
        return ReluFFN(V * self.A, self.w_o, a=self.a, b=self.b)

    # -- evaluation ------------------------------------------------------------------
    def _groups(self, Xq: flint.fmpq_mat) -> list[Group]:
        """Heads with the same scores on this sequence (shifted to max 0) share alpha: one
        group each, its X V A rows summed."""
        n = Xq.nrows()
        last = flint.fmpq_mat(self.d, 1, [Xq[n - 1, k] for k in range(self.d)])
        groups: dict[tuple[flint.fmpq, ...], flint.fmpq_mat] = {}
        for W, c, VA in zip(self._W_flint, self._c_flint, self._VA_flint, strict=True):
            shift = W * last if c is None else W * last + c
            col = Xq * shift
            s = [col[i, 0] for i in range(n)]
            top = max(s)
            key = tuple(si - top for si in s)
            R = Xq * VA
            groups[key] = groups[key] + R if key in groups else R
        return [(list(k), R) for k, R in sorted(groups.items(), key=lambda kv: kv[0])]

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        if arith.name not in ("exact", "certified"):
            raise InvalidArgument(f"no rational evaluation in arithmetic {arith.name!r}")
        groups = self._groups(Xq)
        keys, coeffs = pre_activation_terms(groups, self._a_fmpq)
        active = [k for k in range(self.m) if sign_of_exp_sum(keys, coeffs[k]) > 0]
        const = fmpq(self._b) + sum(
            (self._w_fmpq[k] * self._a_fmpq[k] for k in active), flint.fmpq(0)
        )
        parts = []  # per group: {score: (token count, sum of rho)}, rho_i = sum_k w_k R[i, k]
        for s, R in groups:
            merged: dict[flint.fmpq, tuple[int, flint.fmpq]] = {}
            for i, si in enumerate(s):
                rho = sum((self._w_fmpq[k] * R[i, k] for k in active), flint.fmpq(0))
                cnt, tot = merged.get(si, (0, flint.fmpq(0)))
                merged[si] = (cnt + 1, tot + rho)
            if any(tot != 0 for _, tot in merged.values()):
                parts.append(sorted(merged.items()))
        if arith.name == "exact":
            out: Any = fmpq_to_sympy(const)
            for part in parts:
                if len(part) == 1:
                    out += fmpq_to_sympy(part[0][1][1] / part[0][1][0])
                    continue
                w = [sympy.exp(fmpq_to_sympy(si)) for si, _ in part]
                num = sum(wi * fmpq_to_sympy(t) for wi, (_, (_, t)) in zip(w, part, strict=True))
                out += num / sum(wi * c for wi, (_, (c, _)) in zip(w, part, strict=True))
            return out
        total = flint.arb(const)
        for part in parts:
            w = [flint.arb(si).exp() for si, _ in part]
            num = sum(
                (wi * flint.arb(t) for wi, (_, (_, t)) in zip(w, part, strict=True)), flint.arb(0)
            )
            den = sum((wi * c for wi, (_, (c, _)) in zip(w, part, strict=True)), flint.arb(0))
            total += num / den
        return total

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """T on a batch (B, N, d) -> (B,), float64."""
        Xs = float_batch(Xs, self.d)
        h = np.zeros((Xs.shape[0], self.e))
        for W, c, V in zip(self._W_float, self._c_float, self._V_float, strict=True):
            alpha = softmax_weights(Xs, W, c)
            alpha /= alpha.sum(axis=1, keepdims=True)
            h += np.einsum("bn,bnd->bd", alpha, Xs) @ V
        z = np.maximum(h @ self._A_float + self._a_float, 0.0)
        return finite_answers(z @ self._w_float + float(self._b))

    def __repr__(self) -> str:
        kind = "biased, " if self.biased else ""
        return f"MultiHeadTransformer({kind}d={self.d}, H={self.H}, e={self.e}, m={self.m})"

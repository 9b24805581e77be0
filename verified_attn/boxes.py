"""A fast certified black box for a single head: exact scores by float64 BLAS, proved exact.

>>> import verified_attn as va
>>> from verified_attn.boxes import FastCertifiedHead
>>> head = va.SingleHeadAttention([[1, 2], [0, -1]], [1, 3])
>>> box = FastCertifiedHead(head)
>>> X = [[1, 0], [0, 1]]
>>> fast = va.Oracle(box, "certified").query(X)
>>> slow = va.Oracle(head, "certified").query(X)
>>> fast.mid() == slow.mid() and fast.rad() == slow.rad()      # the same ball, bit for bit
True

A certified answer of a single head is ``sum_i w_i p_i / sum_i w_i`` with
``w_i = exp(s_i - max s)``, scores ``s_i = x_i^T W x_N`` and values ``p_i = x_i^T v``. The
scores and values are rationals; :class:`verified_attn.SingleHeadAttention` computes them
with exact rational matrices (``fmpq_mat``), which at d = 768 costs tens of milliseconds a
query, nearly all of it the d x d product. This box computes the same rationals exactly,
faster, and then does the same few arb operations, so its answers are the model's balls
bit for bit (tested):

* ``X = X_num / den`` and ``W = W_num / D`` with integer matrices (one common denominator
  each), so ``s_i = (X_num,i^T W_num X_num,N) / (D den^2)`` and
  ``p_i = (X_num,i^T v_num) / (D_v den)``: integer products over known denominators.
* The integer products are computed in float64 (BLAS) and are *exact* when every integer
  that can occur stays below 2^53 in magnitude: an integer below 2^53 is a float64, so
  every product and every partial sum (in any summation order, with or without FMA) is
  then computed without rounding. The box proves this before it uses a result:
  ``max_j sum_k |W_num,jk| * max_k |X_num,Nk| < 2^53`` (exact Python integers) bounds
  every partial sum of ``y = W_num X_num,N``; the products ``|X_num| |y|`` and
  ``|X_num| |v_num|``, computed in float64, bound those of the scores and values, and a
  float sum of non-negative terms is below 2^53 exactly when the true sum is (rounding is
  monotone and 2^53 is a float64, so a true sum that reaches 2^53 is never rounded below
  it). IEEE double arithmetic (SSE2 or later; not x87 extended precision) is assumed, as
  NumPy on x86-64 and ARM64 has it.
* When the bound fails (large numerators: a query with entries of very different scales)
  the integer products are computed with flint's exact integer matrices instead (slower,
  still exact). Nothing is ever rounded: there is no error term to bound.

Only the non-affine head (no score bias c, no output bias beta) is sped up; an affine
head, and the exact and float arithmetics, are answered by the wrapped model itself.
"""

from __future__ import annotations

from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import InvalidArgument
from verified_attn.models import SingleHeadAttention

__all__ = ["FastCertifiedHead"]

#: Every integer of magnitude below 2^53 is a float64; sums that stay below it are exact.
_EXACT = 2**53


class FastCertifiedHead:
    """A :class:`~verified_attn.SingleHeadAttention` as a black box whose certified answers
    take one float64 matrix-vector product (proved exact) instead of an exact rational one.

    >>> import verified_attn as va
    >>> box = FastCertifiedHead(va.SingleHeadAttention([[0, 1], [1, 0]], [2, -1]))
    >>> box.d, box.model_class
    (2, 'single-head')
    >>> s, p = box.scores_and_values(va.models.as_rational_sequence([[1, 2], [3, 4]]))
    >>> [str(x) for x in s], [str(x) for x in p]            # x_i^T W x_N, x_i^T v
    (['10', '24'], ['0', '2'])
    """

    model_class = "single-head"

    def __init__(self, model: SingleHeadAttention) -> None:
        if not isinstance(model, SingleHeadAttention):
            raise InvalidArgument(
                f"model must be a SingleHeadAttention, got {type(model).__name__}"
            )
        self.model = model
        self.d = model.d
        self.affine = model.affine
        W_num, W_den = model._W_flint.numer_denom()
        v_num, v_den = model._v_flint.numer_denom()
        self._W_num, self._W_den = W_num, int(W_den)
        self._v_num, self._v_den = v_num, int(v_den)
        W_ints = [int(x) for x in W_num.entries()]
        v_ints = [int(x) for x in v_num.entries()]
        d = self.d
        # max_j sum_k |W_num,jk|: with max_k |x_k| it bounds every partial sum of W_num x.
        self._W_row_l1 = max(sum(abs(x) for x in W_ints[j * d : (j + 1) * d]) for j in range(d))
        small = max(map(abs, W_ints + v_ints)) < _EXACT
        self._W_float = np.array(W_ints, dtype=np.float64).reshape(d, d) if small else None
        self._v_float = np.array(v_ints, dtype=np.float64) if small else None
        self._v_abs = None if self._v_float is None else np.abs(self._v_float)
        #: How many queries took the float64 path and the exact-integer fallback.
        self.fast_queries = 0
        self.exact_queries = 0

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """The wrapped model's float answers (float mode is not sped up here)."""
        return self.model.evaluate_batch(Xs)

    def evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        """f(X) as the wrapped model computes it: the same arb ball in certified mode."""
        if arith.name != "certified" or self.affine:
            return self.model.evaluate_rational(Xq, arith)
        s, p = self.scores_and_values(Xq)
        # The same operations, in the same order, as SingleHeadAttention (beta = 0).
        top = max(s)
        w = [flint.arb(si - top).exp() for si in s]
        num = sum((wi * flint.arb(pi) for wi, pi in zip(w, p, strict=True)), flint.arb(0))
        return num / sum(w, flint.arb(0)) + flint.arb(0)

    def scores_and_values(self, Xq: flint.fmpq_mat) -> tuple[list[Any], list[Any]]:
        """The exact scores x_i^T W x_N and values x_i^T v of a rational (N, d) query."""
        if Xq.ncols() != self.d or Xq.nrows() < 1:
            raise InvalidArgument(
                f"Xq must be an (N >= 1, d = {self.d}) matrix; got {Xq.nrows()} x {Xq.ncols()}"
            )
        num, den_f = Xq.numer_denom()
        den = int(den_f)
        ints = self._float_products(num)
        if ints is None:
            self.exact_queries += 1
            ints = self._exact_products(num)
        else:
            self.fast_queries += 1
        s_ints, p_ints = ints
        s_den = self._W_den * den * den
        p_den = self._v_den * den
        return [flint.fmpq(x, s_den) for x in s_ints], [flint.fmpq(x, p_den) for x in p_ints]

    def _float_products(self, num: flint.fmpz_mat) -> tuple[list[int], list[int]] | None:
        """X_num W_num x_N and X_num v_num in float64 if provably exact (see the module)."""
        if self._W_float is None or self._v_float is None or self._v_abs is None:
            return None
        n, d = num.nrows(), self.d
        ints = [int(x) for x in num.entries()]
        if max(map(abs, ints)) >= _EXACT:  # before converting: 10^400 is no float64
            return None
        F = np.array(ints, dtype=np.float64).reshape(n, d)
        A = np.abs(F)
        if self._W_row_l1 * int(A[-1].max()) >= _EXACT:
            return None  # some partial sum of W_num x_N could leave the exact range
        y = self._W_float @ F[-1]  # exact: every partial sum is an integer below 2^53
        if not (A @ np.abs(y)).max() < _EXACT or not (A @ self._v_abs).max() < _EXACT:
            return None
        s = F @ y  # exact, as above: |any partial sum| <= (|X_num| |y|)_i < 2^53
        p = F @ self._v_float
        return [int(x) for x in s], [int(x) for x in p]

    def _exact_products(self, num: flint.fmpz_mat) -> tuple[list[int], list[int]]:
        """The same integers with flint's exact integer matrices (any size)."""
        n, d = num.nrows(), self.d
        last = flint.fmpz_mat(d, 1, [num[n - 1, k] for k in range(d)])
        s = num * (self._W_num * last)
        p = num * self._v_num
        return [int(s[i, 0]) for i in range(n)], [int(p[i, 0]) for i in range(n)]

    def __repr__(self) -> str:
        return f"FastCertifiedHead(d={self.d})"

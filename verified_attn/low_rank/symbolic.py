"""Theorem 5.1's identities, derived in SymPy from the model definition.

>>> from verified_attn.low_rank.symbolic import rop_identity, skeleton_identity, rank_r_dimension
>>> rop_identity(2).holds, skeleton_identity(3, 1).holds
(True, True)
>>> rank_r_dimension(5, 2).data["rank"], 2 * 5 * 2 - 2 * 2
(16, 16)

* :func:`rop_identity`: for the query [a + b; b], ``logit((f - b^T v) / (a^T v)) =
  a^T W b = <a b^T, W>`` — from :func:`verified_attn.models.attention_output` on symbols.
* :func:`skeleton_identity`: ``W = C (U^T C)^{-1} (U^T W)`` with ``C = W B`` for symbolic
  rank-r factors W = K^T Q and rational B, U (the identity is exact as rational functions).
* :func:`rank_r_dimension`: the rank of the Jacobian of (K, Q) -> K^T Q at random rational
  points: 2dr - r^2, the dimension of the set of rank-r matrices (the query floor).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import flint
import numpy as np
import sympy

from verified_attn.checks import SymbolicCheck
from verified_attn.models import attention_output

__all__ = ["rank_r_dimension", "rop_identity", "skeleton_identity"]


def rop_identity(d: int) -> SymbolicCheck:
    """Derive ``logit((f([a + b; b]) - b^T v) / (a^T v)) = a^T W b`` for symbolic a, b, W, v."""
    a = sympy.symbols(f"a0:{d}", real=True)
    b = sympy.symbols(f"b0:{d}", real=True)
    v = sympy.symbols(f"v0:{d}", real=True)
    W = [[sympy.Symbol(f"W{i}{j}", real=True) for j in range(d)] for i in range(d)]
    rows = [[a[i] + b[i] for i in range(d)], list(b)]
    f = attention_output(rows, W, v)
    av = sum(a[i] * v[i] for i in range(d))
    bv = sum(b[i] * v[i] for i in range(d))
    y = (f - bv) / av
    # y / (1 - y) = e^{s_1} / e^{s_2}; its log, expanded, must be the bilinear form.
    ratio = sympy.powsimp(sympy.cancel(sympy.together(y / (1 - y))))
    log_ratio = sympy.expand(sympy.expand_log(sympy.log(ratio), force=True))
    target = sympy.expand(sum(a[i] * W[i][j] * b[j] for i in range(d) for j in range(d)))
    holds = sympy.expand(log_ratio - target) == 0
    return SymbolicCheck(
        "thm-5.1/rop-identity",
        f"logit((f([a+b; b]) - b^T v)/(a^T v)) = a^T W b (d = {d}, from attention_output)",
        bool(holds),
        detail=f"logit = {log_ratio}" if d <= 1 else f"difference expands to {log_ratio - target}",
        data={"d": d},
    )


def _rational_matrix(rng: np.random.Generator, n: int, m: int) -> sympy.Matrix:
    return sympy.Matrix(
        n,
        m,
        [
            sympy.Rational(int(p), int(q))
            for p, q in zip(rng.integers(-5, 6, n * m), rng.integers(1, 4, n * m), strict=True)
        ],
    )


def skeleton_identity(
    d: int,
    r: int,
    *,
    seed: int = 0,
    adjugate: Callable[[sympy.Matrix], sympy.Matrix] = sympy.Matrix.adjugate,
) -> SymbolicCheck:
    """``C (U^T C)^{-1} U^T W == W`` for W = K^T Q with symbolic K, Q in R^{r x d}.

    B and U are random rationals; U^T C = (U^T K^T)(Q B) is invertible as a rational
    function (its determinant is a nonzero polynomial), so the identity is exact.
    ``adjugate`` is the formula under test for det(M) M^-1 (tests pass wrong ones).
    """
    rng = np.random.default_rng(seed)
    K = sympy.Matrix(r, d, lambda i, j: sympy.Symbol(f"k{i}_{j}"))
    Q = sympy.Matrix(r, d, lambda i, j: sympy.Symbol(f"q{i}_{j}"))
    W = K.T * Q
    B = _rational_matrix(rng, d, r)
    U = _rational_matrix(rng, d, r)
    C = W * B
    M = U.T * C
    det = sympy.expand(M.det())
    shown = sympy.factor(det) if r == 1 else det
    # Cleared of the denominator det(M): a polynomial identity, checked by expansion.
    diff = (C * adjugate(M) * (U.T * W) - M.det() * W).applyfunc(sympy.expand)
    holds = det != 0 and diff == sympy.zeros(d, d)
    return SymbolicCheck(
        "thm-5.1/skeleton-identity",
        f"W = C (U^T C)^(-1) (U^T W), C = W B, for symbolic rank-{r} W = K^T Q (d = {d})",
        bool(holds),
        detail=f"det(U^T C) = {shown}" if r == 1 else "det(U^T C) is a nonzero polynomial",
        data={"d": d, "r": r},
    )


def rank_r_dimension(
    d: int,
    r: int,
    *,
    seed: int = 0,
    dimension: Callable[[int, int], int] = lambda d, r: 2 * d * r - r * r,
) -> SymbolicCheck:
    """Rank of the Jacobian of (K, Q) -> K^T Q at a random rational point, exactly.

    d^2 x 2rd; generic rank 2dr - r^2 (the map is invariant under (K, Q) -> (G K, G^{-T} Q),
    an r^2-dimensional group, and that is the only degeneracy). ``dimension`` is the
    formula under test (tests pass wrong ones, e.g. 2dr without the group).
    """
    rng = np.random.default_rng(seed)
    K = sympy.Matrix(r, d, lambda i, j: sympy.Symbol(f"k{i}_{j}"))
    Q = sympy.Matrix(r, d, lambda i, j: sympy.Symbol(f"q{i}_{j}"))
    W = K.T * Q
    variables = list(K) + list(Q)
    J = sympy.Matrix(list(W)).jacobian(variables)
    point = {
        x: sympy.Rational(int(p), int(q))
        for x, p, q in zip(
            variables,
            rng.integers(-9, 10, len(variables)),
            rng.integers(1, 5, len(variables)),
            strict=True,
        )
    }
    Jq = J.subs(point)
    entries = [Fraction(int(x.p), int(x.q)) for x in Jq]
    fm = flint.fmpq_mat(Jq.rows, Jq.cols, [flint.fmpq(q.numerator, q.denominator) for q in entries])
    rank = fm.rank()
    expected = dimension(d, r)
    return SymbolicCheck(
        "thm-5.1/dimension",
        f"rank of d(K^T Q)/d(K, Q) at a random rational point = 2dr - r^2 (d = {d}, r = {r})",
        rank == expected,
        detail=f"Jacobian {Jq.rows} x {Jq.cols}, rank {rank}, 2dr - r^2 = {expected}",
        data={"d": d, "r": r, "rank": rank, "expected": expected},
    )

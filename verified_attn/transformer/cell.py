"""W from d^2 two-token queries inside one open cell of a known piecewise-affine g.

Both exact-mode ways of learning W once the FFN g is known (the bias-free ``direct``
method and the biased learner) use this: in an open cell of g's hyperplane arrangement
``g = G^T x + beta``; the two-token query ``[b_j + t u_k; b_j]`` pools to
``b_j + alpha_1 t u_k``, which stays in the cell (cells are convex), so
``alpha_1 = (T - G^T b_j - beta) / (t G^T u_k)`` and ``logit(alpha_1) = t u_k^T W b_j``:
``W = U^{-T} M B^{-1}`` with exact U, B. The design is checked exactly to lie in the cell
before any query.

>>> one = Fraction(1)
>>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))   # 1 + x + 2 ReLU(x - 1)
>>> G, beta, base, U, t = cell_design(net, 1, seed=0)
>>> all(cell_of(net, (b[0] + t * u[0],))[0] == G for b in base for u in U)
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, OutsideUnitInterval, arb_bounds
from verified_attn.arithmetic import reconstruct_rational as _reconstruct
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.oracle import Oracle
from verified_attn.transformer.relu_biased import BiasedReluNetwork, Vec
from verified_attn.transformer.relu_network import ReluNetwork

__all__ = ["as_biased", "cell_attention", "cell_design", "cell_of"]


def as_biased(net: ReluNetwork) -> BiasedReluNetwork:
    """A bias-free network as the same function in the biased form (every c_j = 0).

    >>> one = Fraction(1)
    >>> as_biased(ReluNetwork((one,), (((one,), 2 * one),))).neurons
    ((((Fraction(1, 1),), Fraction(0, 1)), Fraction(2, 1)),)
    """
    zero = Fraction(0)
    return BiasedReluNetwork(zero, net.linear, tuple(((n, zero), g) for n, g in net.neurons))


def cell_of(net: BiasedReluNetwork, y: Vec) -> tuple[Vec, Fraction] | None:
    """(G, beta) with g = G^T x + beta on the open cell of y; None if y is on a hyperplane.

    >>> one = Fraction(1)
    >>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))   # 1 + x + 2 ReLU(x - 1)
    >>> cell_of(net, (Fraction(3),)), cell_of(net, (one,))
    (((Fraction(3, 1),), Fraction(-1, 1)), None)
    """
    G, beta = list(net.linear), net.constant
    for (n, c), gamma in net.neurons:
        z = sum((a * b for a, b in zip(n, y, strict=True)), c)
        if z == 0:
            return None
        if z > 0:
            G = [g + gamma * x for g, x in zip(G, n, strict=True)]
            beta += gamma * c
    return tuple(G), beta


def _same_cell(net: BiasedReluNetwork, y: Vec, points: list[Vec]) -> bool:
    """Every point strictly on y's side of every hyperplane (one open cell), decided
    exactly with one rational matrix product (Z[j, p] = n_j^T x_p)."""
    if not net.neurons:
        return True
    d, width = len(y), len(net.neurons)
    cols = [y, *points]
    N = flint.fmpq_mat(width, d, [_fq(q) for (n, _), _ in net.neurons for q in n])
    P = flint.fmpq_mat(d, len(cols), [_fq(cols[p][i]) for i in range(d) for p in range(len(cols))])
    Z = N * P
    for j, ((_, c), _) in enumerate(net.neurons):
        side = Z[j, 0] + _fq(c) > 0
        for p in range(1, len(cols)):
            z = Z[j, p] + _fq(c)
            if z == 0 or (z > 0) != side:
                return False
    return True


def cell_design(
    net: BiasedReluNetwork, d: int, seed: int
) -> tuple[Vec, Fraction, list[Vec], list[Vec], Fraction]:
    """(G, beta, base tokens b_j, directions u_k, t): every b_j and b_j + t u_k lies in one
    open cell of g (g = G^T x + beta there, G != 0) and every G^T u_k != 0. Checked exactly.
    """
    rng = np.random.default_rng(seed + 15485863)
    for _ in range(256):
        y = tuple(Fraction(int(x), 16) for x in rng.integers(-64, 65, d))
        cell = cell_of(net, y)
        if cell is not None and any(cell[0]):
            break
    else:
        raise NotIdentifiable(
            "g has no sampled cell with a nonzero gradient (g is constant): no answer depends "
            "on the attention weights, so W is not identifiable"
        )
    G, beta = cell
    p = max(range(d), key=lambda i: abs(G[i]))
    U = []
    for k in range(d):  # u_k = e_k, mixed with e_p where G_k is small: G^T u_k != 0
        u = [Fraction(int(i == k)) for i in range(d)]
        if k != p and 4 * abs(G[k]) < abs(G[p]):
            u[p] = Fraction(1)
        U.append(tuple(u))
    rho = Fraction(1, 4)
    for _ in range(200):
        base = [tuple(y[i] + (rho if i == j else 0) for i in range(d)) for j in range(d)]
        probes = [tuple(b[i] + rho * u[i] for i in range(d)) for b in base for u in U]
        B = flint.fmpq_mat(d, d, [_fq(b[i]) for i in range(d) for b in base])
        if B.rank() == d and _same_cell(net, y, base + probes):
            return G, beta, base, U, rho
        rho /= 2
    raise NotIdentifiable("no design fits inside one cell of g (the cell is too thin)")


def _fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def cell_attention(
    oracle: Oracle, net: BiasedReluNetwork, seed: int, D: int
) -> tuple[sympy.Matrix, dict[str, Any]]:
    """W from d^2 two-token queries inside one cell of the known g (``D``: the denominator
    bound of certified reconstruction); also the design and the answers (flat,
    direction-major: answer k d + j is [b_j + t u_k; b_j])."""
    arith = oracle.arithmetic
    d = oracle.d
    G, beta, base, U, t = cell_design(net, d, seed)
    queries = [[[b[i] + t * u[i] for i in range(d)], list(b)] for u in U for b in base]
    answers = oracle.query_many([np.array(q, dtype=object) for q in queries])
    M = []
    for idx, y in enumerate(answers):
        u, b = U[idx // d], base[idx % d]
        gb = sum((x * z for x, z in zip(G, b, strict=True)), beta)
        gu = sum((x * z for x, z in zip(G, u, strict=True)), Fraction(0))
        alpha = (y - arith.rational(gb)) / arith.rational(t * gu)
        try:
            logit = arith.logit(alpha)
        except OutsideUnitInterval as exc:
            if exc.undecided:
                raise PrecisionExhausted(
                    f"at {arith.precision} bits alpha_1 = {alpha} cannot be shown inside (0, 1)"
                ) from exc
            raise ModelClassMismatch(
                f"not a one-layer Transformer with this g: the query {queries[idx]} gives "
                f"alpha_1 = {alpha}, outside (0, 1)",
                query=queries[idx],
                observed=y,
            ) from exc
        M.append(logit / arith.rational(t))
    left = flint.fmpq_mat(d, d, [_fq(U[k][i]) for k in range(d) for i in range(d)]).inv()
    right = flint.fmpq_mat(d, d, [_fq(base[j][i]) for i in range(d) for j in range(d)]).inv()
    design = {"base": base, "directions": U, "t": t, "answers": answers}
    return _decode(arith, left, M, right, D), design


def _decode(
    arith: Arithmetic, left: flint.fmpq_mat, M: list[Any], right: flint.fmpq_mat, D: int
) -> sympy.Matrix:
    """W = left M right as exact rationals (exact: simplified; certified: reconstructed)."""
    d = left.nrows()
    if arith.name == "exact":
        Wm = _sym(left) * sympy.Matrix(d, d, M) * _sym(right)
        entries = [sympy.sympify(x) for x in Wm]
        if not all(x.is_Rational for x in entries):
            raise ModelClassMismatch(
                "not a one-layer Transformer with rational W: a decoded entry is irrational",
                observed=Wm,
            )
        return sympy.Matrix(d, d, entries)
    Wa = flint.arb_mat(left) * flint.arb_mat(d, d, M) * flint.arb_mat(right)
    out = []
    for i in range(d):
        for j in range(d):
            lo, hi = arb_bounds(Wa[i, j])
            q = _reconstruct(lo, hi, D)
            if q is None:
                raise PrecisionExhausted(
                    f"at {arith.precision} bits W[{i}, {j}] = {Wa[i, j]} does not pin down a "
                    f"rational with denominator <= {D}; raise the precision"
                )
            out.append(sympy.Rational(q.numerator, q.denominator))
    return sympy.Matrix(d, d, out)


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )

"""The ``direct`` attention method: W from d^2 plain two-token queries in one linear piece of g.

Once the FFN g is known, a two-token query whose pooled point stays inside one linear
piece of g answers an affine function of the attention weight; a design of d base points
and d probes in one cell of g's hyperplane arrangement gives W exactly.

>>> from verified_attn.arithmetic import get_arithmetic
>>> direct_denominator_bound(get_arithmetic("certified"), None) == 2**64   # 256 bits / 4
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import (
    Arithmetic,
    OutsideUnitInterval,
    arb_bounds,
    reconstruct_rational,
)
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.oracle import Oracle
from verified_attn.transformer.relu import ReluNetwork, Vec

__all__ = ["direct_attention", "direct_denominator_bound"]


def _gradient_at(net: ReluNetwork, y: Vec) -> Vec | None:
    """G with g = G^T x on the open cell of y, or None if y lies on a hyperplane."""
    G = list(net.linear)
    for n, gamma in net.neurons:
        z = sum((a * b for a, b in zip(n, y, strict=True)), Fraction(0))
        if z == 0:
            return None
        if z > 0:
            G = [g + gamma * b for g, b in zip(G, n, strict=True)]
    return tuple(G)


def _same_cell(net: ReluNetwork, y: Vec, points: list[Vec]) -> bool:
    """Every point strictly on the same side of every hyperplane as y (one open cell).

    Decided exactly with one rational matrix product (Z[j, p] = n_j^T x_p).
    """
    if not net.neurons:
        return True
    d = len(y)
    cols = [y, *points]
    N = flint.fmpq_mat(net.width, d, [_fq(q) for n, _ in net.neurons for q in n])
    P = flint.fmpq_mat(d, len(cols), [_fq(cols[p][i]) for i in range(d) for p in range(len(cols))])
    Z = N * P
    for j in range(net.width):
        side = Z[j, 0] > 0
        for p in range(1, len(cols)):
            if Z[j, p] == 0 or (Z[j, p] > 0) != side:
                return False
    return True


def _direct_design(
    net: ReluNetwork, d: int, seed: int
) -> tuple[Vec, list[Vec], list[Vec], Fraction]:
    """(G, base tokens b_j, directions u_k, t): every [b_j + t u_k; b_j] pools inside one
    open cell of g with gradient G, and every G^T u_k != 0. Checked exactly."""
    rng = np.random.default_rng(seed + 15485863)
    for _ in range(256):
        y = tuple(Fraction(int(x), 16) for x in rng.integers(-64, 65, d))
        G = _gradient_at(net, y)
        if G is not None and any(G):
            break
    else:
        raise NotIdentifiable(
            "g has no usable linear piece: every sampled cell of the learned g has gradient 0 "
            "(g = 0), so no query's answer depends on the attention weights"
        )
    # u_k = e_k, mixed with e_p (p = argmax |G_p|) where G_k is small: G^T u_k != 0.
    p = max(range(d), key=lambda i: abs(G[i]))
    U = []
    for k in range(d):
        u = [Fraction(int(i == k)) for i in range(d)]
        if k != p and 4 * abs(G[k]) < abs(G[p]):
            u[p] = Fraction(1)
        U.append(tuple(u))
    rho = Fraction(1, 4)
    for _ in range(200):
        base = [tuple(y[i] + (rho if i == j else 0) for i in range(d)) for j in range(d)]
        t = rho
        probes = [tuple(b[i] + t * u[i] for i in range(d)) for b in base for u in U]
        B = flint.fmpq_mat(d, d, [_fq(b[i]) for i in range(d) for b in base])
        if B.rank() == d and _same_cell(net, y, base + probes):
            return G, base, U, t
        rho /= 2
    raise NotIdentifiable("no design fits inside one linear piece of g (cell too thin)")


def _fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def direct_denominator_bound(arith: Arithmetic, denominator_bound: int | None) -> int:
    return (
        denominator_bound if denominator_bound is not None else 2 ** ((arith.precision or 256) // 4)
    )


def direct_attention(
    oracle: Oracle, net: ReluNetwork, seed: int, denominator_bound: int | None
) -> tuple[sympy.Matrix, dict[str, Any]]:
    """W from d^2 queries [b_j + t u_k; b_j]: alpha_1 = (T - G^T b_j) / (t G^T u_k) and
    logit(alpha_1) = t u_k^T W b_j; then ``W = U^{-T} M B^{-1}`` with exact U, B.

    Returns W and the design with the answers (row k: direction u_k, column j: base b_j).
    """
    arith = oracle.arithmetic
    d = oracle.d
    G, base, U, t = _direct_design(net, d, seed)
    queries = [
        [[b[i] + t * u[i] for i in range(d)], list(b)] for u in U for b in base
    ]  # row k of M: direction u_k, column j: base b_j
    answers = oracle.query_many([np.array(q, dtype=object) for q in queries])
    design = {
        "base": base,
        "directions": U,
        "t": t,
        "answers": [answers[k * d : (k + 1) * d] for k in range(d)],
    }
    M = []
    for idx, y in enumerate(answers):
        u, b = U[idx // d], base[idx % d]
        gb = sum((a * c for a, c in zip(G, b, strict=True)), Fraction(0))
        gu = sum((a * c for a, c in zip(G, u, strict=True)), Fraction(0))
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
    Ut = flint.fmpq_mat(d, d, [_fq(U[k][i]) for k in range(d) for i in range(d)])  # U^T
    Bm = flint.fmpq_mat(d, d, [_fq(base[j][i]) for i in range(d) for j in range(d)])  # B
    left = Ut.inv()  # W = U^{-T} M B^{-1}
    right = Bm.inv()
    if arith.name == "exact":
        Ms = sympy.Matrix(d, d, M)
        Wm = _sym(left) * Ms * _sym(right)
        entries = [sympy.sympify(x) for x in Wm]
        if not all(x.is_Rational for x in entries):
            raise ModelClassMismatch(
                "not a one-layer Transformer with rational W: a decoded entry is irrational",
                observed=Wm,
            )
        return sympy.Matrix(d, d, entries), design
    Ma = flint.arb_mat(d, d, M)
    Wa = flint.arb_mat(left) * Ma * flint.arb_mat(right)
    D = direct_denominator_bound(arith, denominator_bound)
    out = []
    for i in range(d):
        for j in range(d):
            lo, hi = arb_bounds(Wa[i, j])
            q = reconstruct_rational(lo, hi, D)
            if q is None:
                raise PrecisionExhausted(
                    f"at {arith.precision} bits W[{i}, {j}] = {Wa[i, j]} does not pin down a "
                    f"rational with denominator <= {D}; raise the precision"
                )
            out.append(sympy.Rational(q.numerator, q.denominator))
    return sympy.Matrix(d, d, out), design


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )

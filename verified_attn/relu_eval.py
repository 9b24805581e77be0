"""Exact ReLU decisions on softmax-pooled values: the sign of a sum of c_i e^{s_i}.

>>> import flint
>>> q = flint.fmpq
>>> sign_of_exp_sum([q(1, 3), q(1, 3)], [q(2), q(-2)])       # equal exponents cancel
0
>>> sign_of_exp_sum([q(0), q(-1)], [q(-1), q(3)])             # -1 + 3/e > 0
1

A one-layer Transformer's pre-activation ``z_k = sum_i e^{s_i} (r_ik + a_k) / sum_i e^{s_i}``
(rational scores s_i, rational r_ik, bias a_k) has the sign of the numerator; this module
decides it exactly, so exact and certified arithmetic never apply ReLU to a ball that
straddles 0. It depends only on python-flint (the models import it).
"""

from __future__ import annotations

import flint

__all__ = ["active_mix", "sign_of_exp_sum"]


def sign_of_exp_sum(s: list[flint.fmpq], c: list[flint.fmpq]) -> int:
    """Sign of sum_i c_i e^{s_i} (s_i rational), decided exactly; 0 iff the sum is 0.

    Terms with equal exponents are merged; exp of distinct rationals are linearly
    independent over Q (Lindemann-Weierstrass), so the sum is zero iff every merged
    coefficient is. A nonzero sum has its sign settled in ball arithmetic at rising
    precision (this terminates).
    """
    groups: dict[flint.fmpq, flint.fmpq] = {}
    for si, ci in zip(s, c, strict=True):
        groups[si] = groups.get(si, flint.fmpq(0)) + ci
    terms = [(si, ci) for si, ci in groups.items() if ci != 0]
    if not terms:
        return 0
    if all(ci > 0 for _, ci in terms) or all(ci < 0 for _, ci in terms):
        return 1 if terms[0][1] > 0 else -1
    old = flint.ctx.prec
    try:
        prec = 64
        while True:
            flint.ctx.prec = prec
            total = sum((flint.arb(ci) * flint.arb(si).exp() for si, ci in terms), flint.arb(0))
            if total > 0:
                return 1
            if total < 0:
                return -1
            prec *= 2
    finally:
        flint.ctx.prec = old


def active_mix(
    s: list[flint.fmpq],
    R: flint.fmpq_mat,
    a: list[flint.fmpq],
    w: list[flint.fmpq],
) -> list[flint.fmpq]:
    """rho_i = sum over the active neurons k of w_k (R[i, k] + a_k), exactly.

    Neuron k is active when ``sum_i e^{s_i} (R[i, k] + a_k) > 0``; then
    ``sum_k w_k ReLU(z_k) = sum_i e^{s_i} rho_i / sum_i e^{s_i}``.

    >>> q = flint.fmpq
    >>> R = flint.fmpq_mat(2, 2, [1, -1, 3, -3])
    >>> active_mix([q(0), q(0)], R, [q(0), q(0)], [q(1), q(5)])   # neuron 2 is off
    [1, 3]
    """
    n = R.nrows()
    rho = [flint.fmpq(0)] * n
    for k in range(R.ncols()):
        col = [R[i, k] + a[k] for i in range(n)]
        if sign_of_exp_sum(s, col) > 0:
            rho = [r + w[k] * c for r, c in zip(rho, col, strict=True)]
    return rho

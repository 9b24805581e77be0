"""Certified rational interpolation: the poles and residues of F(k) = P(k) / Q(k) in arb.

>>> import flint
>>> from fractions import Fraction
>>> lam, r = flint.arb(2), flint.arb(3)             # one head: F(k) = 1 + r k lam / (1 + k lam)
>>> F = [1 + r * k * lam / (1 + k * lam) for k in range(3)]
>>> [(s.contains(flint.arb(2).log()), res.contains(3)) for s, res in poles(F, 1)]
[(True, True)]

Pure mathematics on balls, shared by the canonical multi-head learner and its certificate
checker (the checker re-decodes the stored answers with it; it imports nothing of the
learner). For samples ``F(0..2m)`` of

    F(k) = c + sum_h r_h k lam_h / (1 + k lam_h),   lam_h > 0,

:func:`interpolate` solves the (2m + 1)-point linear system for ``P`` (degree <= m) and
``Q`` (degree <= m, ``Q(0) = 1``); :func:`poles` isolates the roots of Q (each
``-1/lam_h``), refines each by interval Newton, and returns per head the score
``log lam_h`` and the residue ``r_h = -lam_h P(z) / Q'(z)`` at the root z, as balls that
contain the true values. :func:`to_arb` encloses an exact-mode answer (a SymPy closed form
of rationals and exp) in a ball.
"""

from __future__ import annotations

from typing import Any

import flint
import sympy

from verified_attn.errors import ModelClassMismatch, PrecisionExhausted

__all__ = ["interpolate", "newton", "poles", "to_arb"]

#: Root isolation is refined to this width before interval Newton takes over.
ISOLATION_TOL_BITS = 40
#: Interval Newton iterations at most (each at least halves the radius until it stalls).
NEWTON_STEPS = 64


def to_arb(x: Any) -> flint.arb:
    """An exact-mode answer (SymPy closed form of rationals and exp) enclosed in a ball.

    >>> import sympy
    >>> to_arb(sympy.Rational(1, 3) + sympy.exp(sympy.Rational(1, 2))).contains(flint.arb(1) / 3)
    False
    """
    if isinstance(x, flint.arb):
        return x
    x = sympy.sympify(x)
    if x.is_Rational:
        return flint.arb(flint.fmpq(int(x.p), int(x.q)))
    if x == sympy.E:
        return flint.arb(1).exp()
    if isinstance(x, sympy.exp):
        return to_arb(x.args[0]).exp()
    if x.is_Add:
        return sum((to_arb(a) for a in x.args), flint.arb(0))
    if x.is_Mul:
        out = flint.arb(1)
        for a in x.args:
            out *= to_arb(a)
        return out
    if x.is_Pow and x.exp.is_Integer:
        base = to_arb(x.base)
        n = int(x.exp)
        return base**n if n >= 0 else 1 / base ** (-n)
    if x.is_Pow and x.base == sympy.E:
        return to_arb(x.exp).exp()
    raise ModelClassMismatch(
        f"the exact oracle answered {x}, which is not a closed form in rationals and exp",
        observed=x,
        expected="a sum of rational multiples of exponentials",
    )


def interpolate(F: list[flint.arb], m: int) -> tuple[list[flint.arb], list[flint.arb]] | None:
    """P (deg <= m), Q (deg <= m, Q(0) = 1) with F(k) Q(k) = P(k) at k = 0..2m; None if
    the system cannot be certified nonsingular (above the true degree it is singular)."""
    rows, rhs = [], []
    for k in range(2 * m + 1):
        kk = flint.arb(k)
        rows.append([kk**i for i in range(m + 1)] + [-F[k] * kk**i for i in range(1, m + 1)])
        rhs.append([F[k]])
    try:
        sol = flint.arb_mat(rows).solve(flint.arb_mat(rhs))
    except ZeroDivisionError:
        return None
    P = [sol[i, 0] for i in range(m + 1)]
    Q = [flint.arb(1)] + [sol[m + 1 + i, 0] for i in range(m)]
    return P, Q


def poles(F: list[flint.arb], m: int) -> list[tuple[flint.arb, flint.arb]]:
    """(score log lam_h, residue r_h) per head, as balls, from the samples F(0..2m).

    Raises :class:`PrecisionExhausted` if the system or a root cannot be certified, and
    :class:`ModelClassMismatch` if a pole is certainly not real and negative (F is then
    no sum of softmax heads).
    """
    pq = interpolate(F, m)
    if pq is None:
        raise PrecisionExhausted(
            "the interpolation system of a pair could not be certified nonsingular: two heads "
            "share a score there, a residue u^T v_h is 0 (H too large), or the precision is "
            "too low; rerun with another seed or a higher precision"
        )
    P, Q = pq
    Qa, Pa = flint.arb_poly(Q), flint.arb_poly(P)
    dQ = Qa.derivative()
    try:
        boxes = flint.acb_poly([flint.acb(c) for c in Q]).roots(
            tol=flint.arb(2) ** -ISOLATION_TOL_BITS
        )
    except ValueError as exc:
        raise PrecisionExhausted(
            f"the poles of F could not be isolated ({exc}); two heads may share a score here"
        ) from exc
    out = []
    for box in boxes:
        if not box.imag.contains(0):
            raise ModelClassMismatch(
                f"F(k) has a non-real pole {box}: not a sum of softmax heads",
                observed=box,
                expected="a pole -1/lambda with lambda > 0",
            )
        root = newton(Qa, dQ, box.real)
        if not root < 0:
            raise ModelClassMismatch(
                f"F(k) has a pole at {root}, not certified negative: not a sum of softmax heads",
                observed=root,
                expected="a pole -1/lambda with lambda > 0",
            )
        lam = -1 / root
        out.append((lam.log(), -lam * Pa(root) / dQ(root)))
    return out


def newton(Q: flint.arb_poly, dQ: flint.arb_poly, X: flint.arb) -> flint.arb:
    """Interval Newton refinement of a simple real root isolated in X (stays an enclosure:
    N(X) = m - Q(m)/Q'(X) contains every root in X, so X & N(X) does too)."""
    for _ in range(NEWTON_STEPS):
        mid = flint.arb(X.mid())
        slope = dQ(X)
        if slope.contains(0) or not slope.is_finite():
            raise PrecisionExhausted(
                f"the pole isolated in {X} could not be refined: Q' may vanish"
            )
        N = mid - Q(mid) / slope
        if not N.overlaps(X):
            raise PrecisionExhausted(f"interval Newton lost the pole isolated in {X}")
        new = N.intersection(X)
        if not new.rad() < X.rad():
            return new
        X = new
    return X

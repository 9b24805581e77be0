"""Theorem 6.1's intervals from noisy answers: exact rational interval arithmetic, pure.

Given the v estimates, the averaged W answers, the design U, the probe scale b and the
tolerance tau, :func:`noisy_intervals` returns the estimate of W and intervals that
contain the truth whenever every answer is within tau of f (see
:mod:`verified_attn.noisy.learner`); floats are rounded outward.

>>> from fractions import Fraction
>>> down(Fraction(1, 3)) < up(Fraction(1, 3)), down(Fraction(1, 2)) == up(Fraction(1, 2)) == 0.5
(True, True)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import arb_bounds
from verified_attn.noisy.planning import A

__all__ = ["INTERVAL_PRECISION", "arb_of", "down", "noisy_intervals", "up"]


#: Bits of the ball arithmetic for the logits and the constants L, sigmoid(1/2).
INTERVAL_PRECISION = 128


def down(q: Fraction) -> float:
    """The largest float <= q."""
    f = float(q)
    return f if Fraction(f) <= q else math.nextafter(f, -math.inf)


def up(q: Fraction) -> float:
    """The smallest float >= q."""
    f = float(q)
    return f if Fraction(f) >= q else math.nextafter(f, math.inf)


def arb_of(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def noisy_intervals(
    v_hat: list[Fraction],
    F: list[Fraction],
    U: list[list[Fraction]],
    b: Fraction,
    tau: Fraction,
) -> dict[str, Any]:
    """The estimates and their per-entry enclosures from exact (averaged) answers.

    ``F[k * d + j]`` answers the probe [b u_k + a e_j; a e_j]. Returns float arrays ``W``,
    ``W_lower``, ``W_upper``, ``W_error`` (d x d) and ``v``, ``v_lower``, ``v_upper``,
    ``v_error`` (d), and the list ``bad`` of probes (k, j) whose alpha_hat lies certainly
    outside [sigmoid(-1/2) - e_k, sigmoid(1/2) + e_k] (the data contradict the norm bound).

    >>> from fractions import Fraction as Q
    >>> out = noisy_intervals([Q(1)], [Q(1)], [[Q(1)]], Q(1), Q(1, 1000))
    >>> float(out["W"][0, 0]), bool(out["W_lower"][0, 0] < 0 < out["W_upper"][0, 0]), out["bad"]
    (0.0, True, [])
    """
    d = len(v_hat)
    with flint.ctx.workprec(INTERVAL_PRECISION):
        s_plus = 1 / (1 + flint.arb(-0.5).exp())
        s_hi = arb_bounds(s_plus)[1]  # >= sigmoid(1/2)
        s_lo = 1 - s_hi  # <= sigmoid(-1/2) = 1 - sigmoid(1/2)
        L_hi = arb_bounds(flint.arb(0.5).exp() + flint.arb(-0.5).exp() + 2)[1]
        ab = A * b
        m_lo = [[Fraction(0)] * d for _ in range(d)]
        m_hi = [[Fraction(0)] * d for _ in range(d)]
        E = [[Fraction(0)] * d for _ in range(d)]
        bad: list[tuple[int, int]] = []
        for k in range(d):
            col = [U[i][k] for i in range(d)]
            uv = sum((c * q for c, q in zip(col, v_hat, strict=True)), Fraction(0))
            l1 = sum((abs(c) for c in col), Fraction(0))
            e_k = tau * (1 + A + s_hi * b * l1) / (b * abs(uv))
            for j in range(d):
                alpha_hat = (F[k * d + j] - A * v_hat[j]) / (b * uv)
                if alpha_hat < s_lo - e_k or alpha_hat > s_hi + e_k:
                    bad.append((k, j))
                if alpha_hat <= s_lo:
                    lo, hi = Fraction(-1, 2), Fraction(-1, 2)
                elif alpha_hat >= s_hi:
                    lo, hi = Fraction(1, 2), Fraction(1, 2)
                else:  # s_lo < alpha_hat < s_hi, inside (0, 1): its logit, clipped
                    lo, hi = arb_bounds((arb_of(alpha_hat) / (1 - arb_of(alpha_hat))).log())
                    lo = min(max(lo, Fraction(-1, 2)), Fraction(1, 2))
                    hi = min(max(hi, Fraction(-1, 2)), Fraction(1, 2))
                m_lo[k][j], m_hi[k][j] = lo / ab, hi / ab
                E[k][j] = min(L_hi * e_k, Fraction(1)) / ab
    # W = U^{-T} M exactly: interval arithmetic on exact endpoints.
    Ut = flint.fmpq_mat(
        d,
        d,
        [flint.fmpq(U[i][k].numerator, U[i][k].denominator) for k in range(d) for i in range(d)],
    )
    inv = Ut.inv()
    W = np.empty((d, d))
    W_err = np.empty((d, d))
    W_lo = np.empty((d, d))
    W_hi = np.empty((d, d))
    for r in range(d):
        row = [
            (k, Fraction(int(inv[r, k].p), int(inv[r, k].q))) for k in range(d) if inv[r, k] != 0
        ]
        for j in range(d):
            lo = sum((c * (m_lo[k][j] if c > 0 else m_hi[k][j]) for k, c in row), Fraction(0))
            hi = sum((c * (m_hi[k][j] if c > 0 else m_lo[k][j]) for k, c in row), Fraction(0))
            err = sum((abs(c) * E[k][j] for k, c in row), Fraction(0))
            mid = float((lo + hi) / 2)
            total = max(Fraction(mid) - lo, hi - Fraction(mid)) + err
            W[r, j] = mid
            W_err[r, j] = up(total)
            W_lo[r, j] = down(Fraction(mid) - total)
            W_hi[r, j] = up(Fraction(mid) + total)
    v = np.array([float(q) for q in v_hat])
    v_err = np.array([up(abs(Fraction(float(q)) - q) + tau) for q in v_hat])
    return {
        "W": W,
        "W_error": W_err,
        "W_lower": W_lo,
        "W_upper": W_hi,
        "v": v,
        "v_error": v_err,
        "v_lower": np.array([down(q - tau) for q in v_hat]),
        "v_upper": np.array([up(q + tau) for q in v_hat]),
        "bad": bad,
    }

"""The noisy checker's intervals, re-derived from the exact averaged answers.

>>> from fractions import Fraction
>>> from verified_attn.certificates.noisy_intervals import intervals
>>> out = intervals([Fraction(1)], [[Fraction(1)]], [[Fraction(1)]], Fraction(1),
...                 Fraction(1, 1000), 128)
>>> out["W"], out["v"], out["v_error"]
([[0.0]], [1.0], [0.001])

The formula of :mod:`verified_attn.noisy.learner`'s docstring, written out again in exact
rationals (flint's fmpq) and outward-rounded to floats, so that the checker of
:mod:`verified_attn.certificates.noisy` can demand the reported intervals *exactly*.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.arithmetic import arb_bounds, fmpq_matrix
from verified_attn.certificates.interval_box import fmpq_of, fraction_of, round_down, round_up
from verified_attn.errors import CertificateError

__all__ = ["intervals"]


def intervals(
    v_hat: list[Fraction],
    F: list[list[Fraction]],
    U: list[list[Fraction]],
    b: Fraction,
    tau: Fraction,
    precision: int,
) -> dict[str, Any]:
    """Estimates, intervals and error bounds from exact averaged answers (see step 4).

    >>> out = intervals([Fraction(1)], [[Fraction(1)]], [[Fraction(1)]], Fraction(1),
    ...                 Fraction(1, 1000), 128)
    >>> out["W"], out["v"], out["v_error"]
    ([[0.0]], [1.0], [0.001])

    ``F[k][j]`` answers [b u_k + a e_j; a e_j], a = 1/2. Raises CertificateError where
    the answers contradict ||W||_F <= w_bound (a probe's ratio out of range).
    """
    # Exact rational arithmetic in flint's fmpq (the same rationals as Fraction, faster);
    # back to Fraction only to round to floats.
    d = len(v_hat)
    vq = [fmpq_of(q) for q in v_hat]
    Uq = [[fmpq_of(q) for q in row] for row in U]
    bq, tq, a = fmpq_of(b), fmpq_of(tau), flint.fmpq(1, 2)
    half = flint.fmpq(1, 2)
    with flint.ctx.workprec(precision):
        s_hi = fmpq_of(arb_bounds(1 / (1 + flint.arb(-0.5).exp()))[1])  # >= sigmoid(1/2)
        s_lo = 1 - s_hi  # <= sigmoid(-1/2)
        L_hi = fmpq_of(arb_bounds(flint.arb(0.5).exp() + flint.arb(-0.5).exp() + 2)[1])
        lo_M = [[flint.fmpq(0)] * d for _ in range(d)]
        hi_M = [[flint.fmpq(0)] * d for _ in range(d)]
        err_M = [[flint.fmpq(0)] * d for _ in range(d)]
        for k in range(d):
            uv = sum((Uq[i][k] * vq[i] for i in range(d)), flint.fmpq(0))
            if uv == 0:
                raise CertificateError(f"design column {k}: u_{k}^T v_hat = 0")
            l1 = sum((abs(Uq[i][k]) for i in range(d)), flint.fmpq(0))
            e_k = tq * (1 + a + s_hi * bq * l1) / (bq * abs(uv))
            cap = min(L_hi * e_k, flint.fmpq(1)) / (a * bq)
            for j in range(d):
                y = (fmpq_of(F[k][j]) - a * vq[j]) / (bq * uv)
                if y < s_lo - e_k or y > s_hi + e_k:
                    raise CertificateError(
                        f"answers.W[{k}][{j}]: alpha_hat = {float(fraction_of(y))} is outside "
                        "[sigmoid(-1/2), sigmoid(1/2)] by more than its error bound: the "
                        "answers contradict ||W||_F <= w_bound"
                    )
                if y <= s_lo:
                    lo = hi = -half
                elif y >= s_hi:
                    lo = hi = half
                else:
                    ball = flint.arb(y)
                    lo, hi = (fmpq_of(x) for x in arb_bounds((ball / (1 - ball)).log()))
                    lo, hi = min(max(lo, -half), half), min(max(hi, -half), half)
                lo_M[k][j], hi_M[k][j] = lo / (a * bq), hi / (a * bq)
                err_M[k][j] = cap
    inv = fmpq_matrix(U).transpose().inv()
    out: dict[str, Any] = {
        name: [[0.0] * d for _ in range(d)] for name in ("W", "W_lower", "W_upper", "W_error")
    }
    zero = flint.fmpq(0)
    for r in range(d):
        coef = [(k, inv[r, k]) for k in range(d) if inv[r, k] != 0]
        for j in range(d):
            lo = sum((c * (lo_M[k][j] if c > 0 else hi_M[k][j]) for k, c in coef), zero)
            hi = sum((c * (hi_M[k][j] if c > 0 else lo_M[k][j]) for k, c in coef), zero)
            err = sum((abs(c) * err_M[k][j] for k, c in coef), zero)
            lo_f, hi_f, err_f = fraction_of(lo), fraction_of(hi), fraction_of(err)
            mid = float((lo_f + hi_f) / 2)
            total = max(Fraction(mid) - lo_f, hi_f - Fraction(mid)) + err_f
            out["W"][r][j] = mid
            out["W_error"][r][j] = round_up(total)
            out["W_lower"][r][j] = round_down(Fraction(mid) - total)
            out["W_upper"][r][j] = round_up(Fraction(mid) + total)
    out["v"] = [float(q) for q in v_hat]
    out["v_error"] = [round_up(abs(Fraction(float(q)) - q) + tau) for q in v_hat]
    out["v_lower"] = [round_down(q - tau) for q in v_hat]
    out["v_upper"] = [round_up(q + tau) for q in v_hat]
    return out

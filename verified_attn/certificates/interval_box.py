"""Bounded rationals, outward rounding and the interval box's values: shared by the noisy
and labels checkers.

>>> from fractions import Fraction
>>> q = Fraction(1, 3)
>>> round_down(q) < q < round_up(q), round_up(q) - round_down(q) < 1e-16
(True, True)
>>> bounded_rational("-1/2", "noise.tolerance")
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: noise.tolerance must be > 0, got -1/2
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import arb_bounds
from verified_attn.certificates import kernel
from verified_attn.errors import CertificateError
from verified_attn.validation import MAX_LENGTH
from verified_attn.verification import fresh_sequences

__all__ = [
    "MAX_ANSWERS",
    "MAX_BOX_WORK",
    "MAX_D",
    "MAX_RATIONAL_BITS",
    "bounded_rational",
    "box_balls",
    "box_enclosure",
    "check_fresh",
    "float_header",
    "fmpq_of",
    "fraction_of",
    "fresh_enclosures",
    "round_down",
    "round_up",
    "verification_summary",
]

#: Largest dimension a noisy certificate may name (d^2 logits, a d x d inverse).
MAX_D = 256
#: Largest number of stored answers (all phases, all repeats).
MAX_ANSWERS = 1 << 22
#: Largest bit length of a stored tolerance, bound or margin (numerator and denominator).
MAX_RATIONAL_BITS = 256
#: Largest ball work of re-evaluating the verification: the sum over the fresh sequences
#: of d^2 + 2 length d ball operations (a few microseconds each: 2^20 is seconds at most).
MAX_BOX_WORK = 1 << 20


def float_header(data: Any, kind: str, max_d: int, why: str) -> kernel.Header:
    """The header of a ``kind`` certificate, which is in float arithmetic (``why``).

    >>> float_header({"format": "verified-attn-certificate/2", "kind": "labels"}, "noisy", 8, "")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: kind is 'labels', this checker reads 'noisy'
    """
    head = kernel.parse_header(data, kind, max_d=max_d)
    if head.arith.name != "float":
        raise CertificateError(f"a {kind} certificate is in float arithmetic ({why})")
    return head


def bounded_rational(obj: Any, path: str, *, positive: bool = True) -> Fraction:
    """A stored rational with bounded numerator and denominator (and > 0 if asked).

    >>> bounded_rational("1/1000", "noise.tolerance")
    Fraction(1, 1000)
    >>> bounded_rational("1/" + "9" * 5000, "noise.tolerance")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: noise.tolerance has more than 256 bits

    The text's length is bounded first: Python refuses to parse integers of more than
    4300 digits with a ValueError, which must never escape a checker.
    """
    if isinstance(obj, str) and len(obj) > 2 * (MAX_RATIONAL_BITS // 3 + 2) + 2:
        raise CertificateError(f"{path} has more than {MAX_RATIONAL_BITS} bits")
    q = kernel.rational(obj, path)
    if max(abs(q.numerator).bit_length(), q.denominator.bit_length()) > MAX_RATIONAL_BITS:
        raise CertificateError(f"{path} has more than {MAX_RATIONAL_BITS} bits")
    if positive and q <= 0:
        raise CertificateError(f"{path} must be > 0, got {q}")
    return q


def round_down(q: Fraction) -> float:
    """The largest float64 <= q.

    >>> Fraction(round_down(Fraction(1, 3))) < Fraction(1, 3) < Fraction(round_up(Fraction(1, 3)))
    True
    """
    f = float(q)
    return f if Fraction(f) <= q else math.nextafter(f, -math.inf)


def round_up(q: Fraction) -> float:
    """The smallest float64 >= q.

    >>> round_up(Fraction(1, 2))
    0.5
    """
    f = float(q)
    return f if Fraction(f) >= q else math.nextafter(f, math.inf)


def _ball(lo: float, hi: float) -> flint.arb:
    a, b = Fraction(lo), Fraction(hi)
    mid, rad = (a + b) / 2, (b - a) / 2
    return flint.arb(flint.fmpq(mid.numerator, mid.denominator)) + flint.arb(0, round_up(rad))


def box_balls(
    W_lo: list[list[float]], W_hi: list[list[float]], v_lo: list[float], v_hi: list[float]
) -> tuple[list[list[flint.arb]], list[flint.arb]]:
    """Balls (128 bits) containing the intervals of W and v.

    >>> W, v = box_balls([[0.0]], [[1.0]], [2.0], [2.0])
    >>> W[0][0].contains(0) and W[0][0].contains(1) and v[0].contains(2)
    True
    """
    d = len(v_lo)
    with flint.ctx.workprec(128):
        W = [[_ball(W_lo[i][j], W_hi[i][j]) for j in range(d)] for i in range(d)]
        v = [_ball(v_lo[i], v_hi[i]) for i in range(d)]
    return W, v


def box_enclosure(
    X: np.ndarray,
    W_lo: list[list[float]],
    W_hi: list[list[float]],
    v_lo: list[float],
    v_hi: list[float],
    *,
    balls: tuple[Any, Any] | None = None,
) -> tuple[Fraction, Fraction]:
    """Exact [lo, hi] containing f(X) for every head with entries in the intervals.

    ``balls``: :func:`box_balls` of the same intervals, built once for many sequences.

    >>> lo, hi = box_enclosure(np.array([[1.0], [-1.0]]), [[0.0]], [[0.0]], [2.0], [2.0])
    >>> lo <= 0 <= hi and hi - lo < 1e-6     # W = 0: equal weights, f = (2 - 2) / 2
    True

    The weights are e_t = exp((x_t - x_N)^T W x_N) (exact token differences, so a box's
    common part cancels), f = sum_t e_t x_t^T v / sum_t e_t, and f is also kept within
    the hull of the x_t^T v, since it is their convex combination for every W.
    """
    d = len(v_lo)
    rows = [[Fraction(float(x)) for x in row] for row in X]
    W, v = box_balls(W_lo, W_hi, v_lo, v_hi) if balls is None else balls
    with flint.ctx.workprec(128):
        last = rows[-1]
        q = [
            sum((W[i][k] * _exact(last[k]) for k in range(d) if last[k]), flint.arb(0))
            for i in range(d)
        ]
        values = [sum((_exact(x[i]) * v[i] for i in range(d) if x[i]), flint.arb(0)) for x in rows]
        hull = (
            min(arb_bounds(y)[0] for y in values),
            max(arb_bounds(y)[1] for y in values),
        )
        num, den = flint.arb(0), flint.arb(0)
        for x, value in zip(rows, values, strict=True):
            s = sum(
                (_exact(x[i] - last[i]) * q[i] for i in range(d) if x[i] != last[i]),
                flint.arb(0),
            )
            num += s.exp() * value
            den += s.exp()
        total = num / den
        if not total.is_finite():
            return hull
        lo, hi = arb_bounds(total)
        return max(lo, hull[0]), min(hi, hull[1])


def fmpq_of(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def fraction_of(q: flint.fmpq) -> Fraction:
    return Fraction(int(q.p), int(q.q))


def _exact(x: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(x.numerator, x.denominator))


def check_fresh(
    ver: dict[str, Any], d: int, *, per_answer: int, stated: int
) -> tuple[int, int, tuple[int, ...]]:
    """count, seed, lengths of a verification section, with the work they imply bounded.

    >>> check_fresh({"count": 2, "seed": 0, "lengths": [1, 2]}, 3, per_answer=1, stated=2)
    (2, 0, (1, 2))
    """
    count = kernel.as_int(kernel.get(ver, "count"), "verification.count", high=MAX_ANSWERS)
    seed = kernel.as_int(kernel.get(ver, "seed"), "verification.seed")
    lengths = tuple(
        kernel.as_int(n, f"verification.lengths[{i}]", low=1, high=MAX_LENGTH)
        for i, n in enumerate(kernel.as_list(kernel.get(ver, "lengths"), "verification.lengths"))
    )
    if not lengths:
        raise CertificateError("verification.lengths must not be empty")
    # Sequence i has length n = lengths[i % len(lengths)]: its box costs ~ d^2 + 2 n d balls.
    full, rest = divmod(count, len(lengths))
    tokens = full * sum(lengths) + sum(lengths[:rest])
    if count * d * d + 2 * tokens * d > MAX_BOX_WORK:
        raise CertificateError("verification asks for more work than a checker does")
    if count * per_answer != stated:
        raise CertificateError(
            f"verification.count is {count} ({per_answer} answers each), but "
            f"queries.verification is {stated}"
        )
    return count, seed, lengths


def fresh_enclosures(
    d: int, count: int, seed: int, lengths: tuple[int, ...], box: tuple[Any, ...]
) -> Iterator[tuple[np.ndarray, Fraction, Fraction]]:
    """The fresh sequences ``seed`` and ``lengths`` determine, each with the exact [lo, hi]
    the reported ``box`` (W_lo, W_hi, v_lo, v_hi) gives f there.

    >>> box = ([[0.0]], [[0.0]], [2.0], [2.0])
    >>> [(X.tolist(), lo, hi) for X, lo, hi in fresh_enclosures(1, 1, 0, (1,), box)]
    [([[0.5]], Fraction(1, 1), Fraction(1, 1))]
    """
    balls = box_balls(*box) if count else None
    for X in fresh_sequences(d, count, seed, lengths):
        lo, hi = box_enclosure(X, *box, balls=balls)
        yield X, lo, hi


# ---------------------------------------------------------------------------------------
# The intervals, from the answers.
# ---------------------------------------------------------------------------------------


def verification_summary(data: dict[str, Any], shown: int, why: str, count: int, line: str) -> str:
    """``verified`` must say whether ``shown`` (what the fresh answers showed) is positive,
    ``why`` naming it; the summary is ``line``, or that none is stored when ``count`` is 0.

    >>> verification_summary({"verified": False}, 0, "0 were shown", 0, "ok")
    'verification: none stored (the result was NOT verified)'
    >>> verification_summary({"verified": False}, 2, "2 were shown", 2, "ok")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: verified is False, but 2 were shown
    """
    verified = kernel.get(data, "verified")
    if verified is not (shown > 0):
        raise CertificateError(f"verified is {verified!r}, but {why}")
    return "verification: none stored (the result was NOT verified)" if count == 0 else line

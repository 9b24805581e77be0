"""Appendix B: learning from labels only, by bisection.

>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import LabelOracle
>>> model = va.SingleHeadAttention([[0.5, -0.25], [0, 0.5]], [2, -1])
>>> rec = learn_from_labels(LabelOracle(va.Oracle(model, "exact")), w_bound=1, bits=20)
>>> rec.queries == label_query_bound(2, 20), rec.v.round(4)     # v up to scale: |v_0| = 1
(True, array([ 1. , -0.5]))
>>> bool(abs(rec.W - model.float_parameters()["W"]).max() < 1e-3)
True

**The label.** ``label(X) = +1 if f(X) >= 0 else -1`` (:class:`~verified_attn.
oracle_wrappers.LabelOracle` with ``threshold=0``).

**What is identifiable.** For kappa > 0, (W, kappa v) has f scaled by kappa, hence the
same labels on every query: v is identifiable at most up to a positive scale. This
learner recovers v / |v_p| (p the first coordinate with v_p != 0) and W itself, so that is
exactly what labels identify (under the assumptions below).

**The algorithm.** Signs of v from [e_i] and [-e_i] (2d queries; both labels +1 means
v_i = 0). For i != p, along x(lam) = lam s_i e_i - (1 - lam) s_p e_p the answer
lam |v_i| - (1 - lam) |v_p| changes sign at lam* = |v_p| / (|v_i| + |v_p|): bisection.
For W_ij: f([b e_i + a e_j; a e_j]) = a v_j + sigmoid(a b W_ij) b v_i; with a of the sign
making a v_j and v_i opposite, and b in [0, B], B = 1 / (|a| w_bound), the term
b sigmoid(a b W_ij) is increasing (|a b W_ij| <= 1), so the sign flips once, at b*, with
W_ij = logit(-a v_j / (b* v_i)) / (a b*). |a| is a power of two small enough that the flip
lies inside [0, B]. Every query is an exact dyadic rational.

**Cost.** ``bits`` halvings per unknown: 2d + (d - 1 + d^2) * bits queries when every
v_i != 0 (:func:`label_query_bound`), logarithmic in the precision. Needs every v_i != 0
for W (each entry's probe divides by v_i) and ||W||_F <= w_bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn._legacy import Recovery, split_counts
from verified_attn.arithmetic import arb_bounds, reconstruct_rational, to_fraction
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import attention_output
from verified_attn.oracle import Oracle

__all__ = ["label_query_bound", "learn_from_labels"]

THEOREM = "app-b"
_PREC = 128


def label_query_bound(d: int, bits: int) -> int:
    """2d sign queries + (d - 1) v ratios + d^2 W entries, ``bits`` queries each.

    >>> label_query_bound(3, 10)
    116
    """
    return 2 * d + (d - 1 + d * d) * bits


def _arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def _label(oracle: Oracle, X: np.ndarray) -> int:
    y = oracle.query(X)
    if y not in (1.0, -1.0):
        raise InvalidArgument(
            f"oracle must answer labels +1.0 / -1.0 (a LabelOracle); it answered {y!r}"
        )
    return 1 if y > 0 else -1


def _bisect(
    oracle: Oracle, query: Any, lo: Fraction, hi: Fraction, bits: int, up: int
) -> tuple[Fraction, Fraction]:
    """Shrink [lo, hi] around the flip of ``label(query(t))`` ``bits`` times.

    ``up`` is the label at ``hi`` (+1 or -1); the flip point t* has label(t) == up iff
    t >= t* (labels are +1 on f >= 0, so t* is in (lo, hi] or [lo, hi)).
    """
    for _ in range(bits):
        mid = (lo + hi) / 2
        if _label(oracle, query(mid)) == up:
            hi = mid
        else:
            lo = mid
    return lo, hi


def learn_from_labels(
    oracle: Oracle,
    *,
    w_bound: Any,
    bits: int = 30,
    max_denominator: int | None = None,
    verify: int = 16,
    seed: int = 0,
) -> Recovery:
    """Recover v up to a positive scale and W from sign labels, ``bits`` bits each.

    Returns a :class:`~verified_attn.recovery.Recovery` (theorem ``"app-b"``) with float
    W and normalised v (|v_p| = 1) and certified ``enclosures["W_interval"]``,
    ``enclosures["v_interval"]`` (the truth, normalised, lies inside when the labels are
    exact). ``max_denominator``: also reconstruct each v ratio as the unique rational with
    that denominator bound in its interval (``enclosures["v_exact"]``, None where not unique).

    Raises :class:`NotIdentifiable` if v = 0 (every label is +1) or, for W, if some v_i = 0.
    """
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    wbar = to_fraction(w_bound, name="w_bound")
    if wbar <= 0:
        raise InvalidArgument(f"w_bound must be > 0, got {w_bound!r}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 48:
        # Up to 48 halvings every probe is still an exact dyadic float64 (checked).
        raise InvalidArgument(f"bits must be an int in [1, 48], got {bits!r}")
    if isinstance(verify, bool) or not isinstance(verify, int) or verify < 0:
        raise InvalidArgument(f"verify must be an int >= 0, got {verify!r}")
    d = oracle.d
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent
    eye = np.eye(d)

    with oracle.phase("signs"):
        signs = []
        for i in range(d):
            plus, minus = _label(oracle, eye[i : i + 1]), _label(oracle, -eye[i : i + 1])
            signs.append(0 if plus == minus == 1 else plus)
            if plus == minus == -1:
                raise ModelClassMismatch(
                    f"f(e_{i}) < 0 and f(-e_{i}) < 0: impossible for a single head, where "
                    "f([x]) = x^T v is odd in x",
                    query=eye[i : i + 1],
                )
    if all(s == 0 for s in signs):
        raise NotIdentifiable("v = 0: every label is +1 whatever W is; nothing is identifiable")
    p = signs.index(next(s for s in signs if s != 0))
    if any(s == 0 for s in signs):
        raise NotIdentifiable(
            f"v_{signs.index(0)} = 0 (labels of [e_i] and [-e_i] both +1): the W probes divide "
            "by v_i, so this label learner needs every v_i != 0"
        )

    # v_i / |v_p| in [r_lo, r_hi], via lam* = |v_p| / (|v_i| + |v_p|).
    ratios: list[tuple[Fraction, Fraction]] = []
    with oracle.phase("v"):
        for i in range(d):
            if i == p:
                ratios.append((Fraction(signs[p]), Fraction(signs[p])))
                continue

            def line(lam: Fraction, i: int = i) -> np.ndarray:
                x = [[Fraction(0)] * d]
                x[0][i] = signs[i] * lam
                x[0][p] = -signs[p] * (1 - lam)
                return _exact_floats(x)

            lo, hi = _bisect(oracle, line, Fraction(0), Fraction(1), bits, up=1)
            # |v_i|/|v_p| = (1 - lam*)/lam*, decreasing in lam*; lam* in (lo, hi].
            r_hi = (1 - lo) / lo if lo > 0 else None
            r_lo = (1 - hi) / hi
            if r_hi is None:  # never left lo = 0: |v_i| / |v_p| > 2^bits - 1
                raise NotIdentifiable(
                    f"|v_{i}| / |v_{p}| exceeds 2^{bits} - 1: raise bits to bound it"
                )
            s = signs[i]
            ratios.append((s * r_lo, s * r_hi) if s > 0 else (s * r_hi, s * r_lo))

    entries = _learn_W(oracle, ratios, wbar, bits)
    with flint.ctx.workprec(_PREC):
        W_int = np.empty((d, d, 2))
        for (i, j), ball in entries.items():
            lo, hi = arb_bounds(ball)
            W_int[i, j] = (_down(lo), _up(hi))
        v_int = np.array([[_down(lo), _up(hi)] for lo, hi in ratios])
        _verify_labels(oracle, W_int, v_int, verify, seed)

    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    v_exact = None
    if max_denominator is not None:
        v_exact = [reconstruct_rational(lo, hi, max_denominator) for lo, hi in ratios]
    return Recovery(
        theorem=THEOREM,
        parameters={"W": W_int.mean(axis=2), "v": v_int.mean(axis=1)},
        arithmetic="float",
        precision=None,
        exact=False,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=label_query_bound(d, bits),
        parameter_count=d * d + d - 1,
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        # The sign queries are one round; every bisection step depends on the last.
        rounds=1 + (d - 1 + d * d) * bits,
        enclosures={"W_interval": W_int, "v_interval": v_int, "v_exact": v_exact, "p": p},
        notes=[
            f"labels sign(f) identify v only up to a positive scale: v is normalised so that "
            f"|v_{p}| = 1 (v_{p} is the first nonzero coordinate)",
            f"{bits} bisection steps per unknown",
        ],
    )


def _learn_W(
    oracle: Oracle, ratios: list[tuple[Fraction, Fraction]], wbar: Fraction, bits: int
) -> dict[tuple[int, int], flint.arb]:
    d = len(ratios)
    sig_m1 = 1 / (1 + math.e)  # sigmoid(-1) > 0.2689; we use 1/4 below it, safely
    out = {}
    with oracle.phase("W"), flint.ctx.workprec(_PREC):
        for i in range(d):
            ri_lo = min(abs(ratios[i][0]), abs(ratios[i][1]))
            for j in range(d):
                rj_hi = max(abs(ratios[j][0]), abs(ratios[j][1]))
                # |a| a power of two with a^2 w_bound |r_j| <= sigmoid(-1) |r_i| / 2 (margin),
                # so that B sigmoid(-1) |r_i| > |a r_j|: the flip lies inside [0, B].
                a = Fraction(1)
                while a * a * wbar * rj_hi * 8 > ri_lo:
                    a /= 2
                assert Fraction(1, 4) < sig_m1
                sign_i = 1 if ratios[i][0] > 0 else -1
                sign_j = 1 if ratios[j][0] > 0 else -1
                a = -a if sign_i == sign_j else a
                B = Fraction(1)
                while B * abs(a) * wbar > 1:
                    B /= 2
                while 2 * B * abs(a) * wbar <= 1:
                    B *= 2

                def probe(t: Fraction, i: int = i, j: int = j, a: Fraction = a) -> np.ndarray:
                    X = [[Fraction(0)] * d for _ in range(2)]
                    X[0][i] += t
                    X[0][j] += a
                    X[1][j] = a
                    return _exact_floats(X)

                # g(b) = a v_j + sigmoid(a b W_ij) b v_i has the sign of v_i for b = B.
                lo, hi = _bisect(oracle, probe, Fraction(0), B, bits, up=sign_i)
                bstar = _arb((lo + hi) / 2) + flint.arb(0, float((hi - lo) / 2) * (1 + 1e-15))
                rj = _hull(ratios[j])
                ri = _hull(ratios[i])
                alpha = -_arb(a) * rj / (bstar * ri)
                if not (alpha > 0 and alpha < 1):
                    alpha = _clip01(alpha)
                w = (alpha / (1 - alpha)).log() / (_arb(a) * bstar)
                # |W_ij| <= ||W||_F <= w_bound: intersect (few bits leave b* near 0).
                lo_w, hi_w = arb_bounds(w) if w.is_finite() else (-wbar, wbar)
                out[(i, j)] = _hull((max(lo_w, -wbar), min(hi_w, wbar)))
    return out


def _exact_floats(rows: list[list[Fraction]]) -> np.ndarray:
    """The query as float64, refusing any entry that is not exactly a float."""
    out = np.array([[float(q) for q in row] for row in rows])
    if any(Fraction(float(q)) != q for row in rows for q in row):
        raise PrecisionExhausted(
            "a bisection probe is no longer an exact float64 dyadic; use fewer bits"
        )
    return out


def _hull(iv: tuple[Fraction, Fraction]) -> flint.arb:
    lo, hi = iv
    return _arb((lo + hi) / 2) + flint.arb(0, float((hi - lo) / 2) * (1 + 1e-15))


def _clip01(x: flint.arb) -> flint.arb:
    """The part of a ball inside [1/4, 3/4] ⊃ [sigmoid(-1), sigmoid(1)], where alpha is."""
    lo, hi = arb_bounds(x) if x.is_finite() else (Fraction(1, 4), Fraction(3, 4))
    lo = max(lo, Fraction(1, 4))
    hi = min(hi, Fraction(3, 4))
    return _hull((lo, hi))


def _down(q: Fraction) -> float:
    f = float(q)
    return f if Fraction(f) <= q else math.nextafter(f, -math.inf)


def _up(q: Fraction) -> float:
    f = float(q)
    return f if Fraction(f) >= q else math.nextafter(f, math.inf)


def _verify_labels(
    oracle: Oracle, W_int: np.ndarray, v_int: np.ndarray, count: int, seed: int
) -> None:
    """Fresh queries whose predicted sign is certain must get that label."""
    if count == 0:
        return
    d = oracle.d
    Wb = [
        [_hull((Fraction(W_int[i, j, 0]), Fraction(W_int[i, j, 1]))) for j in range(d)]
        for i in range(d)
    ]
    vb = [_hull((Fraction(lo), Fraction(hi))) for lo, hi in v_int]
    rng = np.random.default_rng(seed)
    with oracle.phase("verify"):
        for k in range(count):
            X = rng.choice(np.array([-0.5, -0.25, 0.25, 0.5]), size=(1 + k % 3, d))
            pred = attention_output(
                [[flint.arb(x) for x in row] for row in X], Wb, vb, exp=lambda s: s.exp()
            )
            label = _label(oracle, X)
            if (pred > 0 and label < 0) or (pred < 0 and label > 0):
                raise ModelClassMismatch(
                    f"the label oracle is not the recovered single head: on the fresh query "
                    f"{X.tolist()} it answered {label}, the recovered model gives f in {pred}",
                    query=X,
                    observed=label,
                    expected=str(pred),
                )

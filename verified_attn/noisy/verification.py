"""Verification on fresh queries for inexact oracles: answers within a tolerance, labels.

>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import NoisyOracle
>>> model = va.SingleHeadAttention([[0.5]], [2])
>>> oracle = NoisyOracle(va.Oracle(model, "certified"), tolerance=1e-3, seed=0)
>>> box = (np.array([[0.5]]), np.array([[0.5]])), (np.array([2.0]), np.array([2.0]))
>>> with oracle.run() as run:
...     rec = verify_within_tolerance(oracle, *box, tolerance=1e-3, count=8, seed=0)
>>> rec.count, rec.lengths_used, run.counts.verification
(8, (1, 2, 3, 4, 6, 8, 16), 8)
>>> verify_within_tolerance(oracle, (np.array([[0.5]]),) * 2, (np.array([2.1]),) * 2,
...                         tolerance=1e-3, count=8, seed=0)
Traceback (most recent call last):
...
verified_attn.errors.ModelClassMismatch: the oracle is not the recovered single head within the tolerance: on the fresh sequence of length 1 ...

Why not :func:`verified_attn.verification.verify_model`: its float rule compares an answer
with a point prediction to a *relative* rtol (the precision of a float black box). A
noisy oracle's answers are off by up to an *absolute* tolerance, and the learned model is a
box of parameters, not a point; the right test is containment: the answer (the average of
``repeats`` answers) lies within ``tolerance`` of the ball of values the box gives. A
label oracle answers one bit; the test there is that every fresh sequence whose predicted
sign is certain gets that label. Both use the core's fresh sequences
(:func:`verified_attn.verification.fresh_sequences`, lengths 1 to 16 in turn) and a
declared verification phase, and return a
:class:`~verified_attn.verification.Verification` record that says which rule was applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar

import flint
import numpy as np

from verified_attn.arithmetic import arb_bounds, to_fraction
from verified_attn.errors import ModelClassMismatch, OracleError
from verified_attn.validation import check_int, check_lengths, check_seed, check_verify
from verified_attn.verification import DEFAULT_LENGTHS, Verification, fresh_sequences

__all__ = [
    "LabelVerification",
    "ToleranceVerification",
    "box_prediction",
    "verify_labels",
    "verify_within_tolerance",
]

_PREC = 128  # bits of the ball arithmetic evaluating the box


def _ball(lo: float, hi: float) -> flint.arb:
    """A ball containing [lo, hi] (call at the working precision)."""
    a, b = Fraction(float(lo)), Fraction(float(hi))
    mid = (a + b) / 2
    ball = flint.arb(flint.fmpq(mid.numerator, mid.denominator))
    rad = (b - a) / 2
    # arb(0, r) with r a float >= rad: the radius is rounded up, never down.
    r = float(rad)
    if Fraction(r) < rad:
        r = float(np.nextafter(r, np.inf))
    return ball + flint.arb(0, r)


def box_prediction(
    X: np.ndarray,
    W_box: tuple[np.ndarray, np.ndarray],
    v_box: tuple[np.ndarray, np.ndarray],
    *,
    balls: tuple[Any, Any] | None = None,
) -> tuple[Fraction, Fraction]:
    """Exact [lo, hi] containing f(X) for every head with W, v in the boxes.

    >>> lo, hi = box_prediction(np.array([[1.0]]), (np.zeros((1, 1)),) * 2,
    ...                         (np.array([1.0]), np.array([2.0])))
    >>> lo <= 1 and 2 <= hi and hi - lo < 1 + 1e-7      # the ball is rounded outward
    True

    Written to keep ball arithmetic's dependency blow-up small on wide boxes: with
    q = W x_N, the weights e_t = exp((x_t - x_N)^T q) (exact token differences; e_N = 1),
    f = sum_t e_t x_t^T v / sum_t e_t is intersected with the hull of the x_t^T v (f is
    their convex combination whatever W is), which is also the answer when the ratio's
    ball is not finite.
    """
    rows = [[Fraction(float(x)) for x in row] for row in np.asarray(X)]
    W, v = _balls(W_box, v_box) if balls is None else balls
    with flint.ctx.workprec(_PREC):
        return _softmax_enclosure(rows, W, v)


def _balls(
    W_box: tuple[np.ndarray, np.ndarray], v_box: tuple[np.ndarray, np.ndarray]
) -> tuple[list[list[flint.arb]], list[flint.arb]]:
    d = len(v_box[0])
    with flint.ctx.workprec(_PREC):
        W = [[_ball(W_box[0][i, j], W_box[1][i, j]) for j in range(d)] for i in range(d)]
        v = [_ball(v_box[0][i], v_box[1][i]) for i in range(d)]
    return W, v


def _softmax_enclosure(
    rows: list[list[Fraction]], W: list[list[flint.arb]], v: list[flint.arb]
) -> tuple[Fraction, Fraction]:
    d, last = len(v), rows[-1]
    q = [sum((W[i][k] * _q(last[k]) for k in range(d) if last[k]), flint.arb(0)) for i in range(d)]
    values = [sum((_q(x[i]) * v[i] for i in range(d) if x[i]), flint.arb(0)) for x in rows]
    hull_lo = min(arb_bounds(y)[0] for y in values)
    hull_hi = max(arb_bounds(y)[1] for y in values)
    num, den = flint.arb(0), flint.arb(0)
    for x, value in zip(rows, values, strict=True):
        gap = [x[i] - last[i] for i in range(d)]
        weight = sum((_q(g) * q[i] for i, g in enumerate(gap) if g), flint.arb(0)).exp()
        num += weight * value
        den += weight
    total = num / den
    if not total.is_finite():
        return hull_lo, hull_hi
    lo, hi = arb_bounds(total)
    return max(lo, hull_lo), min(hi, hull_hi)


def _q(x: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(x.numerator, x.denominator))


@dataclass
class ToleranceVerification(Verification):
    """Fresh answers within ``tolerance`` of the recovered box (``answers``: the averages;
    ``raw_answers``: every answer as the oracle gave it, ``repeats`` per sequence).

    ``max_gap`` is the largest |answer - box midpoint| / max(|answer|, tolerance).
    """

    tolerance: float = 0.0
    repeats: int = 1
    raw_answers: list[list[float]] = field(default_factory=list, repr=False)

    def describe(self) -> str:
        if self.count == 0:
            return "not verified (verify=0)"
        rep = "" if self.repeats == 1 else f" (each the average of {self.repeats} answers)"
        text = (
            f"{self.count} fresh sequences (seed {self.seed}, lengths "
            f"{', '.join(map(str, self.lengths_used))}): every answer{rep} within tolerance "
            f"{self.tolerance:g} of the recovered model's enclosure"
        )
        if self.max_gap is not None:
            text += f"; max relative gap to its midpoint {self.max_gap:.3e}"
        return text

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(
            {"rule": "within-tolerance", "tolerance": self.tolerance, "repeats": self.repeats}
        )
        return out


def verify_within_tolerance(
    oracle: Any,
    W_box: tuple[np.ndarray, np.ndarray],
    v_box: tuple[np.ndarray, np.ndarray],
    *,
    tolerance: Any,
    count: int,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    repeats: int = 1,
    what: str = "the recovered single head",
) -> ToleranceVerification:
    """Ask ``count`` fresh sequences (``repeats`` times each) in a verification phase.

    >>> import verified_attn as va
    >>> o = va.Oracle(va.SingleHeadAttention([[0]], [1]), "float")
    >>> box = (np.zeros((1, 1)),) * 2, (np.array([0.999]), np.array([1.001]))
    >>> rec = verify_within_tolerance(o, *box, tolerance=1e-6, count=4, seed=0)
    >>> rec.count, rec.lengths_used, rec.max_gap < 1e-12
    (4, (1, 2, 3, 4), True)

    Raises :class:`~verified_attn.errors.ModelClassMismatch` naming the first sequence
    whose (averaged) answer is farther than ``tolerance`` from every value the box gives.
    """
    count = check_verify(count)
    seed = check_seed(seed)
    lengths = check_lengths(lengths)
    repeats = check_int(repeats, "repeats", low=1)
    tau = to_fraction(tolerance, name="tolerance")
    sequences = fresh_sequences(oracle.d, count, seed, lengths)
    raw: list[list[float]] = []
    with oracle.phase("verify", verification=True):
        for X in sequences:  # sequences differ in length: one batch per sequence
            raw.append(list(oracle.query_many([X] * repeats)))
    worst = 0.0
    averages = []
    balls = _balls(W_box, v_box) if count else None
    for X, answers in zip(sequences, raw, strict=True):
        observed = sum((Fraction(a) for a in answers), Fraction(0)) / repeats
        averages.append(float(observed))
        lo, hi = box_prediction(X, W_box, v_box, balls=balls)
        if not lo - tau <= observed <= hi + tau:
            raise ModelClassMismatch(
                f"the oracle is not {what} within the tolerance: on the fresh sequence of "
                f"length {X.shape[0]} {X.tolist()} it answered {float(observed)}, {what} "
                f"gives a value in [{float(lo)}, {float(hi)}] and the tolerance is "
                f"{float(tau)}",
                query=X,
                observed=float(observed),
                expected=(float(lo), float(hi)),
            )
        gap = float(abs(observed - (lo + hi) / 2))
        worst = max(worst, gap / max(abs(float(observed)), float(tau)))
    return _float_record(
        ToleranceVerification,
        (count, seed, lengths),
        worst if count else None,
        sequences=sequences,
        answers=averages,
        tolerance=float(tau),
        repeats=repeats,
        raw_answers=raw,
    )


@dataclass
class LabelVerification(Verification):
    """Fresh labels checked where the recovered box decides the sign (``decided`` of them).

    A label carries one bit: a sequence whose predicted f straddles 0 tests nothing, so
    only ``decided`` sequences were checked; the result is verified iff ``decided > 0``.
    """

    decided: int = 0

    def describe(self) -> str:
        if self.count == 0:
            return "not verified (verify=0)"
        return (
            f"{self.count} fresh sequences (seed {self.seed}, lengths "
            f"{', '.join(map(str, self.lengths_used))}): on the {self.decided} whose "
            "predicted sign is certain, every label agrees"
            + ("" if self.decided else " (none decided: NOT verified)")
        )

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update({"rule": "certain-signs", "decided": self.decided})
        return out


def verify_labels(
    oracle: Any,
    W_box: tuple[np.ndarray, np.ndarray],
    v_box: tuple[np.ndarray, np.ndarray],
    *,
    count: int,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    what: str = "the recovered single head",
) -> LabelVerification:
    """Fresh sequences whose predicted sign is certain must get that label (+1: f >= 0).

    >>> import verified_attn as va
    >>> from verified_attn.oracle_wrappers import LabelOracle
    >>> o = LabelOracle(va.Oracle(va.SingleHeadAttention([[0]], [1]), "exact"))
    >>> box = (np.zeros((1, 1)),) * 2, (np.array([0.5]), np.array([2.0]))
    >>> rec = verify_labels(o, *box, count=8, seed=0)
    >>> rec.count, rec.decided     # three sequences' f straddle 0 over the box: not decided
    (8, 5)

    Raises :class:`~verified_attn.errors.ModelClassMismatch` at the first that does not,
    :class:`~verified_attn.errors.OracleError` if an answer is not +1.0 or -1.0.
    """
    count = check_verify(count)
    seed = check_seed(seed)
    lengths = check_lengths(lengths)
    sequences = fresh_sequences(oracle.d, count, seed, lengths)
    with oracle.phase("verify", verification=True):
        labels = [oracle.query(X) for X in sequences]
    decided = 0
    balls = _balls(W_box, v_box) if count else None
    for X, label in zip(sequences, labels, strict=True):
        if label not in (1.0, -1.0):
            raise OracleError(f"a label oracle must answer +1.0 or -1.0; it answered {label!r}")
        lo, hi = box_prediction(X, W_box, v_box, balls=balls)
        if lo > 0 or hi < 0:
            decided += 1
            if (lo > 0) != (label > 0):
                raise ModelClassMismatch(
                    f"the label oracle is not {what}: on the fresh sequence of length "
                    f"{X.shape[0]} {X.tolist()} it answered {label}, {what} gives f in "
                    f"[{float(lo)}, {float(hi)}]",
                    query=X,
                    observed=label,
                    expected=(float(lo), float(hi)),
                )
    return _float_record(
        LabelVerification,
        (count, seed, lengths),
        None,
        sequences=sequences,
        answers=list(labels),
        decided=decided,
    )


_V = TypeVar("_V", bound=Verification)


def _float_record(
    cls: type[_V], fresh: tuple[int, int, Any], max_gap: float | None, **fields: Any
) -> _V:
    """A float-mode record of one of the noisy rules (``fresh``: count, seed and lengths of
    the fresh sequences; no precision and no rtol: the rule is the tolerance, or the sign)."""
    count, seed, lengths = fresh
    # Verification's leading fields: count, seed, lengths, precision, arithmetic, rtol, max_gap.
    return cls(count, seed, lengths, None, "float", None, max_gap, **fields)

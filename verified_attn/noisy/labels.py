"""Appendix B: learning from labels only, by bisection.

>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import LabelOracle
>>> model = va.SingleHeadAttention([[0.5, -0.25], [0, 0.5]], [2, -1])
>>> rec = learn_from_labels(LabelOracle(va.Oracle(model, "exact")), w_bound=1, bits=20)
>>> rec.queries == rec.bound == label_query_bound(2, 20), rec.v.round(4)  # |v_0| = 1
(True, array([ 1. , -0.5]))
>>> bool(abs(rec.W - model.float_parameters()["W"]).max() < 1e-3), rec.verified
(True, True)
>>> va.verify_certificate(rec.certificate()).ok
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

**The enclosures** follow from the bisection brackets alone, in exact rational interval
arithmetic (one logit ball per end, flint ``arb`` at :data:`INTERVAL_PRECISION` bits):
b* in [lo, hi], the ratios in theirs, alpha = -a r_j / (b* r_i) intersected with
[1/4, 3/4] (which contains [sigmoid(-1), sigmoid(1)]), W_ij = logit(alpha) / (a b*)
intersected with [-w_bound, w_bound]; then rounded outward to floats. The certificate
stores every label; its checker (:mod:`verified_attn.certificates.labels`) replays the
bisections and requires exactly these intervals.

**Cost.** ``bits`` halvings per unknown: 2d + (d - 1 + d^2) * bits queries when every
v_i != 0 (:func:`label_query_bound`), logarithmic in the precision. Needs every v_i != 0
for W (each entry's probe divides by v_i) and ||W||_F <= w_bound.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Unpack

import flint
import numpy as np

from verified_attn import validation
from verified_attn.arithmetic import arb_bounds, reconstruct_rational, to_fraction
from verified_attn.certificates.writer import RunRecord, dump_floats, fresh_section
from verified_attn.design import label_probe_scales
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.learner_options import CheckOptions, learner_options
from verified_attn.models import SingleHeadAttention
from verified_attn.noisy.intervals import down as _down
from verified_attn.noisy.intervals import up as _up
from verified_attn.noisy.verification import LabelVerification, verify_labels
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import LabelRecovery
from verified_attn.serialize import dump_number, dump_rational

__all__ = ["INTERVAL_PRECISION", "MAX_BITS", "label_query_bound", "learn_from_labels"]

THEOREM = "app-b"
#: Bits of the ball arithmetic for the logits.
INTERVAL_PRECISION = 128
#: Up to 48 halvings every probe is still an exact dyadic float64 (checked per probe).
MAX_BITS = 48
#: Fresh label queries by default: a label carries one bit, so more than for real answers.
DEFAULT_LABEL_VERIFY = 16


def label_query_bound(d: int, bits: int) -> int:
    """2d sign queries + (d - 1) v ratios + d^2 W entries, ``bits`` queries each.

    >>> label_query_bound(3, 10)
    116
    """
    d = validation.check_int(d, "d", low=1)
    bits = validation.check_int(bits, "bits", low=1, high=MAX_BITS)
    return 2 * d + (d - 1 + d * d) * bits


def _label(oracle: Oracle, X: np.ndarray) -> float:
    y = oracle.query(X)
    if y not in (1.0, -1.0):
        raise InvalidArgument(
            f"oracle must answer labels +1.0 / -1.0 (a LabelOracle); it answered {y!r}"
        )
    return 1.0 if y > 0 else -1.0


def _bisect(
    oracle: Oracle,
    query: Callable[[Fraction], np.ndarray],
    lo: Fraction,
    hi: Fraction,
    bits: int,
    up: float,
    transcript: list[float],
) -> tuple[Fraction, Fraction]:
    """Shrink [lo, hi] around the flip of ``label(query(t))`` ``bits`` times.

    ``up`` is the label at ``hi`` (+1 or -1); the flip point t* has label(t) == up iff
    t >= t* (labels are +1 on f >= 0, so t* is in (lo, hi] or [lo, hi)). Every label is
    appended to ``transcript``.
    """
    for _ in range(bits):
        mid = (lo + hi) / 2
        label = _label(oracle, query(mid))
        transcript.append(label)
        if label == up:
            hi = mid
        else:
            lo = mid
    return lo, hi


# ---------------------------------------------------------------------------------------
# Interval arithmetic on exact endpoints.
# ---------------------------------------------------------------------------------------

Interval = tuple[Fraction, Fraction]


def _mul(x: Interval, y: Interval) -> Interval:
    p = [x[0] * y[0], x[0] * y[1], x[1] * y[0], x[1] * y[1]]
    return min(p), max(p)


def _div(x: Interval, y: Interval) -> Interval | None:
    """x / y, or None if y contains 0 (unbounded)."""
    if y[0] <= 0 <= y[1]:
        return None
    return _mul(x, (1 / y[1], 1 / y[0]))


def _ratio_interval(lo: Fraction, hi: Fraction, sign: int) -> Interval:
    """v_i / |v_p| from lam* in (lo, hi]: |v_i| / |v_p| = (1 - lam*) / lam*, decreasing."""
    r_lo, r_hi = (1 - hi) / hi, (1 - lo) / lo
    return (r_lo, r_hi) if sign > 0 else (-r_hi, -r_lo)


def _logit_interval(x: Interval) -> Interval:
    """[lower(logit(x_lo)), upper(logit(x_hi))] for 0 < x_lo <= x_hi < 1 (increasing)."""
    with flint.ctx.workprec(INTERVAL_PRECISION):
        lo_ball = flint.arb(flint.fmpq(x[0].numerator, x[0].denominator))
        hi_ball = flint.arb(flint.fmpq(x[1].numerator, x[1].denominator))
        lo = arb_bounds((lo_ball / (1 - lo_ball)).log())[0]
        hi = arb_bounds((hi_ball / (1 - hi_ball)).log())[1]
    return lo, hi


def _w_interval(
    ri: Interval, rj: Interval, a: Fraction, bstar: Interval, wbar: Fraction
) -> Interval | None:
    """Exact [lo, hi] containing W_ij, or None if the brackets contradict the model class."""
    alpha = _div(_mul((-a, -a), rj), _mul(bstar, ri))
    lo_a, hi_a = (Fraction(1, 4), Fraction(3, 4)) if alpha is None else alpha
    lo_a, hi_a = max(lo_a, Fraction(1, 4)), min(hi_a, Fraction(3, 4))
    if lo_a > hi_a:
        return None
    w = _div(_logit_interval((lo_a, hi_a)), _mul((a, a), bstar))
    lo_w, hi_w = (-wbar, wbar) if w is None else (max(w[0], -wbar), min(w[1], wbar))
    return None if lo_w > hi_w else (lo_w, hi_w)


def _exact_floats(rows: list[list[Fraction]]) -> np.ndarray:
    """The query as float64, refusing any entry that is not exactly a float."""
    out = np.array([[float(q) for q in row] for row in rows])
    if any(Fraction(float(q)) != q for row in rows for q in row):
        raise PrecisionExhausted(
            "a bisection probe is no longer an exact float64 dyadic; use fewer bits"
        )
    return out


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


def learn_from_labels(
    oracle: Oracle,
    *,
    w_bound: Any,
    bits: int = 30,
    max_denominator: int | None = None,
    **options: Unpack[CheckOptions],
) -> LabelRecovery:
    """Recover v up to a positive scale and W from sign labels, ``bits`` bits each.

    >>> import verified_attn as va
    >>> from verified_attn.oracle_wrappers import LabelOracle
    >>> o = LabelOracle(va.Oracle(va.SingleHeadAttention([[0.5]], [3]), "exact"))
    >>> rec = learn_from_labels(o, w_bound=1, bits=12, verify=0)
    >>> rec.v, rec.queries, rec.verified           # v normalised: |v_p| = 1
    (array([1.]), 14, False)

    Returns a :class:`~verified_attn.recovery.LabelRecovery` (theorem ``"app-b"``):
    ``parameters`` ``W`` (d x d, the intervals' midpoints) and ``v`` (d, normalised so that
    |v_p| = 1, p the first coordinate with v_p != 0); ``model`` is the float
    :class:`~verified_attn.models.SingleHeadAttention` with that *normalised* v (it has the
    oracle's labels, not its values). ``enclosures``:

    - ``"W"``, ``"v"``: ``{"lower": array, "upper": array}``, certified float intervals of
      W and of the normalised v (they contain the truth when the labels are exact);
    - ``"v_exact"``: with ``max_denominator``, each v ratio as the unique rational with
      that denominator bound in its interval (None where not unique), else None;
    - ``"p"``: the normalising coordinate.

    ``verify``: fresh sequences (lengths 1 to 16 in turn) whose predicted sign is certain
    must get that label; verified only if at least one was decided. ``progress``: a bar or
    callback over the queries (:mod:`verified_attn.progress`).

    Raises :class:`NotIdentifiable` if v = 0 (every label is +1), if some v_i = 0 (the W
    probes divide by v_i), or if a ratio is beyond 2^bits; :class:`ModelClassMismatch`
    if the labels are impossible for a single head.
    """
    validation.check_oracle(oracle)
    wbar = to_fraction(validation.check_real(w_bound, "w_bound", low=0, low_open=True), name="w_bound")
    bits = validation.check_int(bits, "bits", low=1, high=MAX_BITS)
    max_denominator = validation.check_int(max_denominator, "max_denominator", low=1, allow_none=True)
    verify, seed, lengths, _, progress = learner_options(
        "learn_from_labels", options, CheckOptions, verify=DEFAULT_LABEL_VERIFY
    )
    d = oracle.d
    bound = label_query_bound(d, bits)
    oracle.require_remaining(bound, verify, f"learn_from_labels at d = {d}")
    transcript: dict[str, Any] = {"signs": [], "v": [], "W": []}
    total = bound + verify
    with reporting(oracle, progress, "learn_from_labels", total=total), oracle.run() as run:
        signs, p = _signs(oracle, transcript["signs"])
        ratios = _learn_ratios(oracle, signs, p, bits, transcript["v"])
        W_iv = _learn_W(oracle, ratios, wbar, bits, transcript["W"])
        W_lo = np.array([[_down(W_iv[i][j][0]) for j in range(d)] for i in range(d)])
        W_hi = np.array([[_up(W_iv[i][j][1]) for j in range(d)] for i in range(d)])
        v_lo = np.array([_down(r[0]) for r in ratios])
        v_hi = np.array([_up(r[1]) for r in ratios])
        checked = None
        if verify:
            box = ((W_lo, W_hi), (v_lo, v_hi))
            checked = verify_labels(oracle, *box, count=verify, seed=seed, lengths=lengths)
    counts = run.counts
    W, v = _midpoints(W_lo, W_hi), _midpoints(v_lo, v_hi)
    v_exact = None
    if max_denominator is not None:
        v_exact = [reconstruct_rational(lo, hi, max_denominator) for lo, hi in ratios]
    assumptions, notes = _assumptions_and_notes(wbar, p, bits)
    certificate = functools.partial(
        _certificate_data,
        RunRecord(oracle.arithmetic, seed, counts, bound, None, assumptions),
        (wbar, bits, max_denominator),
        transcript,
        (W, v, (W_lo, W_hi, v_lo, v_hi)),
        (v_exact, p),
        checked,
    )
    return LabelRecovery.from_run(
        counts,
        theorem=THEOREM,
        parameters={"W": W, "v": v},
        learned_model=SingleHeadAttention(W, v),
        arithmetic="float",
        precision=None,
        exact=False,
        verified=checked is not None and checked.decided > 0,
        bound=bound,
        parameter_count=d * d + d - 1,
        seed=seed,
        # The sign queries are one round; every bisection step depends on the last.
        rounds=1 + (d - 1 + d * d) * bits,
        verification=checked,
        enclosures={
            "W": {"lower": W_lo, "upper": W_hi},
            "v": {"lower": v_lo, "upper": v_hi},
            "v_exact": v_exact,
            "p": p,
        },
        assumptions=assumptions,
        notes=notes,
        certificate_data=certificate,
        p=p,
        bits=bits,
    )

def _signs(oracle: Oracle, kept: list[list[float]]) -> tuple[list[int], int]:
    """The sign of each v_i from the labels of [e_i] and [-e_i] (kept), and the first nonzero p."""
    d = oracle.d
    eye = np.eye(d)
    with oracle.phase("signs"):
        signs = []
        for i in range(d):
            plus, minus = _label(oracle, eye[i : i + 1]), _label(oracle, -eye[i : i + 1])
            kept.append([plus, minus])
            signs.append(0 if plus == minus == 1 else int(plus))
            if plus == minus == -1:
                raise ModelClassMismatch(
                    f"f(e_{i}) < 0 and f(-e_{i}) < 0: impossible for a single head, where "
                    "f([x]) = x^T v is odd in x",
                    query=eye[i : i + 1],
                )
    if all(s == 0 for s in signs):
        raise NotIdentifiable("v = 0: every label is +1 whatever W is; nothing is identifiable")
    p = next(i for i, s in enumerate(signs) if s != 0)
    if any(s == 0 for s in signs):
        raise NotIdentifiable(
            f"v_{signs.index(0)} = 0 (labels of [e_i] and [-e_i] both +1): the W probes "
            "divide by v_i, so this label learner needs every v_i != 0"
        )
    return signs, p


def _midpoints(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The float nearest each interval's exact midpoint."""
    out = [float((Fraction(a) + Fraction(b)) / 2) for a, b in zip(lo.ravel(), hi.ravel(), strict=True)]
    return np.array(out).reshape(lo.shape)


def _assumptions_and_notes(wbar: Fraction, p: int, bits: int) -> tuple[list[str], list[str]]:
    """What a label result rests on, and how to read it (v up to a positive scale)."""
    assumptions = [
        "every label is sign(f(X)) exactly (+1 iff f(X) >= 0)",
        f"||W||_F <= w_bound = {float(wbar)}",
        "v is identified only up to a positive scale: the result is v / |v_p|",
    ]
    notes = [
        f"labels sign(f) identify v only up to a positive scale: v is normalised so that "
        f"|v_{p}| = 1 (v_{p} is the first nonzero coordinate)",
        f"{bits} bisection steps per unknown",
    ]
    return assumptions, notes


def _learn_ratios(
    oracle: Oracle, signs: list[int], p: int, bits: int, transcript: list[Any]
) -> list[Interval]:
    """v_i / |v_p| in [r_lo, r_hi], via lam* = |v_p| / (|v_i| + |v_p|)."""
    d = len(signs)
    ratios: list[Interval] = []
    with oracle.phase("v"):
        for i in range(d):
            if i == p:
                ratios.append((Fraction(signs[p]), Fraction(signs[p])))
                transcript.append(None)
                continue

            def line(lam: Fraction, i: int = i) -> np.ndarray:
                x = [[Fraction(0)] * d]
                x[0][i] = signs[i] * lam
                x[0][p] = -signs[p] * (1 - lam)
                return _exact_floats(x)

            labels: list[float] = []
            transcript.append(labels)
            lo, hi = _bisect(oracle, line, Fraction(0), Fraction(1), bits, 1.0, labels)
            if lo == 0:  # never left lo = 0: |v_i| / |v_p| > 2^bits - 1
                raise NotIdentifiable(
                    f"|v_{i}| / |v_{p}| exceeds 2^{bits} - 1: raise bits to bound it"
                )
            if hi == 1:  # never left hi = 1: |v_i| / |v_p| < 1 / (2^bits - 1)
                raise NotIdentifiable(
                    f"|v_{i}| / |v_{p}| is below 1 / (2^{bits} - 1): raise bits to bound it "
                    "away from 0 (the W probes divide by it)"
                )
            ratios.append(_ratio_interval(lo, hi, signs[i]))
    return ratios


def _learn_W(
    oracle: Oracle,
    ratios: list[Interval],
    wbar: Fraction,
    bits: int,
    transcript: list[Any],
) -> list[list[Interval]]:
    d = len(ratios)
    out: list[list[Interval]] = []
    with oracle.phase("W"):
        for i in range(d):
            row: list[Interval] = []
            rows_t: list[list[float]] = []
            transcript.append(rows_t)
            for j in range(d):
                a, B = label_probe_scales(ratios[i], ratios[j], wbar)

                def probe(t: Fraction, i: int = i, j: int = j, a: Fraction = a) -> np.ndarray:
                    X = [[Fraction(0)] * d for _ in range(2)]
                    X[0][i] += t
                    X[0][j] += a
                    X[1][j] = a
                    return _exact_floats(X)

                labels: list[float] = []
                rows_t.append(labels)
                # g(b) = a v_j + sigmoid(a b W_ij) b v_i has the sign of v_i for b = B.
                up = 1.0 if ratios[i][0] > 0 else -1.0
                bstar = _bisect(oracle, probe, Fraction(0), B, bits, up, labels)
                iv = _w_interval(ratios[i], ratios[j], a, bstar, wbar)
                if iv is None:
                    raise NotIdentifiable(
                        f"w_bound: the labels of the probes for W_{i}{j} are consistent with "
                        f"no single head with ||W||_F <= w_bound = {float(wbar)}"
                    )
                row.append(iv)
            out.append(row)
    return out


# ---------------------------------------------------------------------------------------
# Certificate data.
# ---------------------------------------------------------------------------------------


def _certificate_data(
    run: RunRecord,
    labels_setting: tuple[Fraction, int, int | None],
    transcript: dict[str, Any],
    result: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]],
    v_ratios: tuple[list[Fraction | None] | None, int],
    checked: LabelVerification | None,
) -> dict[str, Any]:
    """Every label as the oracle gave it (the bisection transcripts), and the result.

    ``answers.signs[i]`` = labels of [e_i], [-e_i]; ``answers.v[i]`` the ``bits`` labels of
    the ratio bisection (null for i = p); ``answers.W[i][j]`` those of W_ij's. Checked by
    :mod:`verified_attn.certificates.labels`.
    """
    wbar, bits, max_denominator = labels_setting
    W, v, (W_lo, W_hi, v_lo, v_hi) = result
    v_exact, p = v_ratios

    def labels(x: Any) -> Any:
        if x is None:
            return None
        return [labels(y) for y in x] if isinstance(x, list) else dump_number(float(x))

    data = run.header("labels", THEOREM, len(v))
    data["verified"] = checked is not None and checked.decided > 0
    data["verification"] = fresh_section(
        "certain-signs",
        checked,
        run.seed,
        [] if checked is None else [dump_number(float(a)) for a in checked.answers],
    )
    data["verification"]["decided"] = 0 if checked is None else checked.decided
    data.update(
        {
            "labels": {
                "w_bound": dump_rational(wbar),
                "bits": bits,
                "threshold": "0/1",
                "max_denominator": max_denominator,
                "interval_precision": INTERVAL_PRECISION,
            },
            "answers": {k: labels(x) for k, x in transcript.items()},
            "result": {
                "exact": False,
                "p": p,
                "parameters": {"W": dump_floats(W), "v": dump_floats(v)},
                "enclosures": {
                    "W": {"lower": dump_floats(W_lo), "upper": dump_floats(W_hi)},
                    "v": {"lower": dump_floats(v_lo), "upper": dump_floats(v_hi)},
                },
                "v_exact": None
                if v_exact is None
                else [None if q is None else dump_rational(q) for q in v_exact],
            },
        }
    )
    return data

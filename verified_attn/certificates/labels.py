"""Re-check a label-only (Appendix B) certificate: the bisection transcripts imply the result.

>>> import verified_attn as va
>>> from verified_attn.certificates.labels import verify
>>> from verified_attn.noisy import learn_from_labels
>>> from verified_attn.oracle_wrappers import LabelOracle
>>> model = va.SingleHeadAttention([[0.5, -0.25], [0, 0.5]], [2, -1])
>>> data = learn_from_labels(LabelOracle(va.Oracle(model, "exact")), w_bound=1,
...                          bits=12).certificate()
>>> print(verify(data).summary[3])
enclosures: the 4 W and 2 v intervals the transcripts imply are exactly the reported ones (widest W interval 1.596e-01)
>>> data["result"]["enclosures"]["W"]["lower"][0][1] = {"float": (-0.2).hex()}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result.enclosures.W.lower[0][1]: reported -0.2, the transcripts give ...

What is re-checked, with the core arithmetic only (never the learner's code):

1. header, the assumptions (w_bound, bits, threshold 0) and the counts:
   2d + (d - 1 + d^2) bits learning queries, 2d in ``signs``, (d - 1) bits in ``v``,
   d^2 bits in ``W``;
2. the sign labels: each is +1.0 or -1.0, no coordinate has both labels -1 (f([x]) is odd
   in x), v != 0 and every v_i != 0; p is the first coordinate;
3. the bisections, replayed from the stored labels: lam* for each ratio in (0, 1], then
   for each W_ij the probe weight a and range [0, B] that the ratios and w_bound fix, and
   b* in its bracket;
4. the enclosures, re-derived here in exact interval arithmetic (alpha = -a r_j / (b* r_i)
   within [1/4, 3/4], W_ij = logit(alpha) / (a b*) within [-w_bound, w_bound], rounded
   outward): the reported intervals, midpoints and (with a denominator bound) the exact
   ratios must be *exactly* these;
5. verification: on the fresh sequences the seed and lengths determine, every stored
   label whose sign the *reported* box decides agrees with it; the number decided is the
   stored one and ``verified`` is true iff it is positive.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.arithmetic import arb_bounds, reconstruct_rational
from verified_attn.certificates import CertificateCheck, interval_box, kernel
from verified_attn.certificates.common_checks import check_phases, passed
from verified_attn.design import label_probe_scales
from verified_attn.errors import CertificateError

__all__ = ["MAX_BITS", "MAX_D", "verify"]

#: Largest dimension a labels certificate may name (d^2 bisections are replayed).
MAX_D = 128
#: Largest number of bisection steps per unknown (the learner's limit).
MAX_BITS = 48

Interval = tuple[Fraction, Fraction]


def _labels(obj: Any, path: str, arith: Any, length: int) -> list[int]:
    out = []
    for i, y in enumerate(kernel.numbers(obj, path, arith, length)):
        if y not in (1.0, -1.0):
            raise CertificateError(f"{path}[{i}]: a label is +1.0 or -1.0, got {y!r}")
        out.append(1 if y > 0 else -1)
    return out


def _replay(labels: list[int], lo: Fraction, hi: Fraction, up: int) -> Interval:
    for label in labels:
        mid = (lo + hi) / 2
        if label == up:
            hi = mid
        else:
            lo = mid
    return lo, hi


def _times(x: Interval, y: Interval) -> Interval:
    p = (x[0] * y[0], x[0] * y[1], x[1] * y[0], x[1] * y[1])
    return min(p), max(p)


def _over(x: Interval, y: Interval) -> Interval | None:
    if y[0] <= 0 <= y[1]:
        return None  # unbounded
    return _times(x, (1 / y[1], 1 / y[0]))


def _w(
    ri: Interval,
    rj: Interval,
    a: Fraction,
    bstar: Interval,
    wbar: Fraction,
    precision: int,
    path: str,
) -> Interval:
    alpha = _over(_times((-a, -a), rj), _times(bstar, ri))
    quarter, three = Fraction(1, 4), Fraction(3, 4)
    lo, hi = (quarter, three) if alpha is None else (max(alpha[0], quarter), min(alpha[1], three))
    if lo > hi:
        raise CertificateError(f"{path}: the labels imply sigmoid(a b* W) outside [1/4, 3/4]")
    with flint.ctx.workprec(precision):
        ends = []
        for q, side in ((lo, 0), (hi, 1)):
            ball = flint.arb(flint.fmpq(q.numerator, q.denominator))
            ends.append(arb_bounds((ball / (1 - ball)).log())[side])
    w = _over((ends[0], ends[1]), _times((a, a), bstar))
    lo_w, hi_w = (-wbar, wbar) if w is None else (max(w[0], -wbar), min(w[1], wbar))
    if lo_w > hi_w:
        raise CertificateError(f"{path}: the labels imply |W_ij| > w_bound")
    return lo_w, hi_w


def _check_floats(path: str, claimed: list[Any], again: list[Any]) -> None:
    for i, (x, y) in enumerate(zip(claimed, again, strict=True)):
        if isinstance(x, list):
            _check_floats(f"{path}[{i}]", x, y)
        elif x != y:
            raise CertificateError(f"{path}[{i}]: reported {x!r}, the transcripts give {y!r}")


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``labels`` certificate dict; CertificateError naming what fails.

    >>> verify({"format": "verified-attn-certificate/2", "kind": "labels", "theorem": "app-b",
    ...         "d": 10**6})
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: d must be an int in 1..128, got 1000000
    """
    head = interval_box.float_header(data, "labels", MAX_D, "labels +-1.0")
    d, arith = head.d, head.arith
    section = kernel.get(data, "labels")
    wbar = interval_box.bounded_rational(kernel.get(section, "w_bound"), "labels.w_bound")
    bits = kernel.as_int(kernel.get(section, "bits"), "labels.bits", low=1, high=MAX_BITS)
    threshold = kernel.get(section, "threshold")
    if interval_box.bounded_rational(threshold, "labels.threshold", positive=False) != 0:
        raise CertificateError("labels.threshold must be 0 (labels are sign(f))")
    max_den = kernel.get(section, "max_denominator")
    if max_den is not None:
        max_den = kernel.as_int(max_den, "labels.max_denominator", low=1, high=1 << 64)
    precision = kernel.as_int(
        kernel.get(section, "interval_precision"), "labels.interval_precision", low=32, high=4096
    )
    lines = [head.describe() + f", {bits} bits per unknown, w_bound {float(wbar):g}"]
    bound = 2 * d + (d - 1 + d * d) * bits
    q = kernel.check_counts(
        data,
        learning=bound,
        bound=bound,
        phases={"signs": 2 * d, "v": (d - 1) * bits, "W": d * d * bits},
    )
    check_phases(q["by_phase"], {"signs", "v", "W"})
    lines.append(
        f"queries: {q['learning']} learning = 2d + (d - 1 + d^2) bits = {bound}; "
        f"{q['verification']} verification"
    )

    answers = kernel.get(data, "answers")
    signs = _signs(answers, d, arith)
    p = 0
    if kernel.as_int(kernel.get(data, "result.p"), "result.p", high=d - 1) != p:
        raise CertificateError("result.p must be 0, the first coordinate with v_p != 0")

    ratios = _ratios(answers, signs, p, arith, bits)
    W_iv = _w_intervals(answers, ratios, wbar, (bits, precision), arith)

    W_lo = [[interval_box.round_down(x[0]) for x in row] for row in W_iv]
    W_hi = [[interval_box.round_up(x[1]) for x in row] for row in W_iv]
    v_lo = [interval_box.round_down(r[0]) for r in ratios]
    v_hi = [interval_box.round_up(r[1]) for r in ratios]
    W_mid = [
        [float((Fraction(a) + Fraction(b)) / 2) for a, b in zip(rl, rh, strict=True)]
        for rl, rh in zip(W_lo, W_hi, strict=True)
    ]
    v_mid = [float((Fraction(a) + Fraction(b)) / 2) for a, b in zip(v_lo, v_hi, strict=True)]

    result = kernel.get(data, "result")
    if kernel.get(result, "exact") is not False:
        raise CertificateError("result.exact must be false")

    def matrix(path: str) -> list[list[float]]:
        return [
            kernel.numbers(r, f"{path}[{i}]", arith, d)
            for i, r in enumerate(kernel.as_list(kernel.get(data, path), path, d))
        ]

    def vector(path: str) -> list[float]:
        return kernel.numbers(kernel.get(data, path), path, arith, d)

    _check_floats("result.enclosures.W.lower", matrix("result.enclosures.W.lower"), W_lo)
    _check_floats("result.enclosures.W.upper", matrix("result.enclosures.W.upper"), W_hi)
    _check_floats("result.enclosures.v.lower", vector("result.enclosures.v.lower"), v_lo)
    _check_floats("result.enclosures.v.upper", vector("result.enclosures.v.upper"), v_hi)
    _check_floats("result.parameters.W", matrix("result.parameters.W"), W_mid)
    _check_floats("result.parameters.v", vector("result.parameters.v"), v_mid)
    widest = max(float(x[1] - x[0]) for row in W_iv for x in row)
    lines.append(
        f"signs: v_p = {'+' if signs[p] > 0 else '-'}1 at p = {p}, every v_i != 0; "
        f"{len(ratios) - 1} ratio and {d * d} W bisections replayed"
    )
    lines.append(
        f"enclosures: the {d * d} W and {d} v intervals the transcripts imply are exactly the "
        f"reported ones (widest W interval {widest:.3e})"
    )
    lines.extend(_v_exact(result, ratios, max_den, d))
    lines.append(_verification(data, d, arith, (W_lo, W_hi, v_lo, v_hi)))
    return passed(head, lines)


def _signs(answers: Any, d: int, arith: Any) -> list[int]:
    """The sign of every v_i from the labels of e_i and -e_i; none may be 0."""
    signs = []
    for i, pair in enumerate(kernel.as_list(kernel.get(answers, "signs"), "answers.signs", d)):
        plus, minus = _labels(pair, f"answers.signs[{i}]", arith, 2)
        if plus == minus == -1:
            raise CertificateError(
                f"answers.signs[{i}]: f(e_{i}) < 0 and f(-e_{i}) < 0 is "
                "impossible for a single head"
            )
        signs.append(0 if plus == minus == 1 else plus)
    if any(s == 0 for s in signs):
        raise CertificateError("answers.signs: some v_i = 0; the learner needs every v_i != 0")
    return signs


def _ratios(answers: Any, signs: list[int], p: int, arith: Any, bits: int) -> list[Interval]:
    """v_i / |v_p| bracketed by replaying each stored bisection of the ratio."""
    d = len(signs)
    ratios: list[Interval] = []
    for i, raw in enumerate(kernel.as_list(kernel.get(answers, "v"), "answers.v", d)):
        if i == p:
            if raw is not None:
                raise CertificateError(f"answers.v[{i}] must be null (v_p is the scale)")
            ratios.append((Fraction(signs[p]), Fraction(signs[p])))
            continue
        lo, hi = _replay(_labels(raw, f"answers.v[{i}]", arith, bits), Fraction(0), Fraction(1), 1)
        if lo == 0 or hi == 1:
            raise CertificateError(
                f"answers.v[{i}]: the ratio |v_{i}| / |v_p| is not bracketed within {bits} bits"
            )
        r_lo, r_hi = (1 - hi) / hi, (1 - lo) / lo
        ratios.append((r_lo, r_hi) if signs[i] > 0 else (-r_hi, -r_lo))
    return ratios


def _w_intervals(
    answers: Any, ratios: list[Interval], wbar: Fraction, sizes: tuple[int, int], arith: Any
) -> list[list[Interval]]:
    """Every W_ij bracketed by replaying its stored bisection at its own scale."""
    bits, precision = sizes
    d = len(ratios)
    W_iv: list[list[Interval]] = []
    for i, row in enumerate(kernel.as_matrix(kernel.get(answers, "W"), "answers.W", d, d)):
        W_row = []
        for j, raw in enumerate(row):
            a, B = label_probe_scales(ratios[i], ratios[j], wbar)
            up = 1 if ratios[i][0] > 0 else -1
            bstar = _replay(_labels(raw, f"answers.W[{i}][{j}]", arith, bits), Fraction(0), B, up)
            W_row.append(
                _w(ratios[i], ratios[j], a, bstar, wbar, precision, f"answers.W[{i}][{j}]")
            )
        W_iv.append(W_row)
    return W_iv


def _v_exact(result: Any, ratios: list[Interval], max_den: int | None, d: int) -> list[str]:
    """result.v_exact: the unique rational of bounded denominator in each v interval."""
    claimed_exact = kernel.get(result, "v_exact")
    if max_den is None:
        if claimed_exact is not None:
            raise CertificateError("result.v_exact must be null without labels.max_denominator")
        return []
    stored = kernel.as_list(claimed_exact, "result.v_exact", d)
    for i, ((lo, hi), x) in enumerate(zip(ratios, stored, strict=True)):
        want = reconstruct_rational(lo, hi, max_den)
        got = (
            None
            if x is None
            else interval_box.bounded_rational(x, f"result.v_exact[{i}]", positive=False)
        )
        if got != want:
            raise CertificateError(
                f"result.v_exact[{i}]: reported {got}, the unique "
                f"rational with denominator <= {max_den} is {want}"
            )
    return [f"v_exact: the unique rationals with denominator <= {max_den}"]


def _verification(data: dict[str, Any], d: int, arith: Any, box: tuple[Any, ...]) -> str:
    ver = kernel.get(data, "verification")
    if kernel.get(ver, "rule") != "certain-signs":
        raise CertificateError("verification.rule must be 'certain-signs'")
    count, seed, lengths = interval_box.check_fresh(
        ver, d, per_answer=1, stated=kernel.get(data, "queries.verification")
    )
    labels = _labels(kernel.get(ver, "answers"), "verification.answers", arith, count)
    decided = 0
    enclosures = interval_box.fresh_enclosures(d, count, seed, lengths, box)
    for i, ((X, lo, hi), label) in enumerate(zip(enclosures, labels, strict=True)):
        if lo > 0 or hi < 0:
            decided += 1
            if (lo > 0) != (label > 0):
                raise CertificateError(
                    f"verification.answers[{i}]: label {label} on the fresh sequence of length "
                    f"{X.shape[0]}, but the reported box gives f in [{float(lo)}, {float(hi)}]"
                )
    stored = kernel.as_int(kernel.get(ver, "decided"), "verification.decided", high=count)
    if stored != decided:
        raise CertificateError(f"verification.decided is {stored}, the box decides {decided}")
    line = (
        f"verification: {count} fresh labels (seed {seed}); the {decided} whose sign the "
        "reported box decides all agree"
    )
    return interval_box.verification_summary(
        data, decided, f"{decided} labels were decided", count, line
    )

"""Re-check a noisy-oracle (Theorem 6.1) certificate from its stored answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.noisy import verify
>>> from verified_attn.oracle_wrappers import NoisyOracle
>>> model = va.SingleHeadAttention([[0.25, -0.5], [0.5, 0]], [1, -2])
>>> rec = va.learn_noisy(NoisyOracle(va.Oracle(model, "certified"), 1e-3, seed=0),
...                      tolerance=1e-3, w_bound=1, margin=1)
>>> data = rec.certificate()
>>> print(verify(data).summary[4])
intervals: the 4 W and 2 v intervals re-derived from the answers are exactly the reported ones (max W error bound 1.806e-02)
>>> data["result"]["enclosures"]["W"]["upper"][0][0] = {"float": (0.3).hex()}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result.enclosures.W.upper[0][0]: reported 0.3, the stored answers give 0.258...

What is re-checked, with the core arithmetic only (never the learner's code):

1. header, the assumptions in force (tolerance tau, w_bound, margin, design, repeats) and
   the counts: ``repeats (d^2 + d)`` learning queries, ``repeats d`` in phase ``v`` and
   ``repeats d^2`` in ``W``, the bound the same formula;
2. the answers' exact averages contradict no assumption (|v_hat_i| >= margin - tau, or
   ||v_hat||_2 + sqrt(d) tau >= margin for the norm design; no probe's alpha_hat outside
   [sigmoid(-1/2), sigmoid(1/2)] by more than its error bound; the intervals meet the
   ball ||W||_F <= w_bound);
3. the design: U is the one the design rule gives for these answers, and b the largest
   power of two with b ||u_k||_2 w_bound <= 1;
4. the intervals, re-derived (:func:`~.noisy_intervals.intervals`, the formula of the learner's module
   docstring written out again): every reported estimate, interval end and error bound
   must be *exactly* the float re-derived (both sides round the same exact rationals);
5. verification: the fresh sequences the seed and lengths determine
   (:func:`verified_attn.verification.fresh_sequences`); every stored (averaged) answer
   must lie within tau of the ball of values the *reported* box gives
   (:func:`~.interval_box.box_enclosure`).

A stochastic run's certificate says so: its tolerance holds only with the stated
probability, and the checker re-checks the intervals *given* tau.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import check_phases, passed
from verified_attn.certificates.interval_box import (
    MAX_ANSWERS,
    MAX_D,
    bounded_rational,
    check_fresh,
    float_header,
    fresh_enclosures,
    verification_summary,
)
from verified_attn.certificates.noisy_intervals import intervals
from verified_attn.design import largest_dyadic_scale, noisy_design
from verified_attn.errors import CertificateError

# The checker's helpers live in interval_box and noisy_intervals; this module owns verify.
__all__ = ["verify"]

_HALF = Fraction(1, 2)


# ---------------------------------------------------------------------------------------
# The checker.
# ---------------------------------------------------------------------------------------


def _mean(xs: list[float]) -> Fraction:
    return sum((Fraction(x) for x in xs), Fraction(0)) / len(xs)


def _margin(v_hat: list[Fraction], tau: Fraction, mu: Fraction, name: str) -> str:
    d = len(v_hat)
    if name == "paper":
        if tau >= mu:
            raise CertificateError("noise.tolerance must be < noise.margin for design 'paper'")
        for i, q in enumerate(v_hat):
            if abs(q) < mu - tau:
                raise CertificateError(
                    f"answers.v[{i}]: |v_hat_{i}| = {float(abs(q))} < margin - tau: the "
                    "answers contradict |v_i| >= margin"
                )
        return "every |v_hat_i| >= margin - tau"
    if tau * tau * d >= mu * mu:
        raise CertificateError("noise.tolerance must be < margin / sqrt(d) for design 'norm'")
    norm_sq = sum((q * q for q in v_hat), Fraction(0))
    with flint.ctx.workprec(128):
        low = flint.arb(flint.fmpq(norm_sq.numerator, norm_sq.denominator)).sqrt()
        tau_b = flint.arb(flint.fmpq(tau.numerator, tau.denominator))
        if low + flint.arb(d).sqrt() * tau_b < flint.arb(flint.fmpq(mu.numerator, mu.denominator)):
            raise CertificateError("answers.v: ||v_hat||_2 + sqrt(d) tau < margin")
    return "||v_hat||_2 + sqrt(d) tau >= margin"


def _claimed(raw: Any, path: str, d: int, matrix: bool, arith: Any) -> list[Any]:
    if matrix:
        return [
            kernel.numbers(row, f"{path}[{i}]", arith, d)
            for i, row in enumerate(kernel.as_list(raw, path, d))
        ]
    return kernel.numbers(raw, path, arith, d)


def _same(path: str, claimed: Any, again: Any) -> None:
    pairs = (
        [
            (f"{path}[{i}][{j}]", x, y)
            for i, (rx, ry) in enumerate(zip(claimed, again, strict=True))
            for j, (x, y) in enumerate(zip(rx, ry, strict=True))
        ]
        if claimed and isinstance(claimed[0], list)
        else [(f"{path}[{i}]", x, y) for i, (x, y) in enumerate(zip(claimed, again, strict=True))]
    )
    for label, x, y in pairs:
        if x != y:
            raise CertificateError(f"{label}: reported {x!r}, the stored answers give {y!r}")


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``noisy`` certificate dict; CertificateError naming what fails.

    >>> verify({"format": "verified-attn-certificate/2", "kind": "labels"})
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: kind is 'labels', this checker reads 'noisy'
    """
    head = float_header(data, "noisy", MAX_D, "noisy answers")
    d, arith = head.d, head.arith
    noise = kernel.get(data, "noise")
    tau = bounded_rational(kernel.get(noise, "tolerance"), "noise.tolerance")
    wbar = bounded_rational(kernel.get(noise, "w_bound"), "noise.w_bound")
    mu = bounded_rational(kernel.get(noise, "margin"), "noise.margin")
    repeats = kernel.as_int(kernel.get(noise, "repeats"), "noise.repeats", low=1, high=MAX_ANSWERS)
    stochastic = kernel.get(noise, "stochastic")
    if repeats * (d * d + d) > MAX_ANSWERS:
        raise CertificateError(f"{repeats} repeats of d^2 + d queries: more than a checker reads")
    design = kernel.get(data, "design")
    name = kernel.get(design, "name")
    if name not in ("paper", "norm"):
        raise CertificateError(f"design.name must be 'paper' or 'norm', got {name!r:.40}")
    if bounded_rational(kernel.get(design, "a"), "design.a") != _HALF:
        raise CertificateError("design.a must be 1/2")
    precision = kernel.as_int(
        kernel.get(design, "interval_precision"), "design.interval_precision", low=32, high=4096
    )

    lines = [
        head.describe()
        + f", design {name!r}, tolerance {float(tau):g}"
        + ("" if repeats == 1 else f", {repeats} repeats")
    ]
    bound = repeats * (d * d + d)
    q = kernel.check_counts(
        data, learning=bound, bound=bound, phases={"v": repeats * d, "W": repeats * d * d}
    )
    check_phases(q["by_phase"], {"v", "W"})
    lines.append(
        f"queries: {q['learning']} learning = bound {bound} (repeats (d^2 + d)); "
        f"{q['verification']} verification"
    )

    answers = kernel.get(data, "answers")
    raw_v = [
        kernel.numbers(a, f"answers.v[{i}]", arith, repeats)
        for i, a in enumerate(kernel.as_list(kernel.get(answers, "v"), "answers.v", d))
    ]
    raw_W = [
        [kernel.numbers(a, f"answers.W[{k}][{j}]", arith, repeats) for j, a in enumerate(row)]
        for k, row in enumerate(kernel.as_matrix(kernel.get(answers, "W"), "answers.W", d, d))
    ]
    v_hat = [_mean(a) for a in raw_v]
    F = [[_mean(a) for a in row] for row in raw_W]
    lines.append(f"assumptions: {_margin(v_hat, tau, mu, name)}")

    U, b = _check_design(design, name, v_hat, wbar, d)
    lines.append(f"design: U from the {name!r} rule, b = {b}")

    again = intervals(v_hat, F, U, b, tau, precision)
    claimed, line = _check_intervals(data, again, wbar, d, arith)
    lines.append(line)
    lines.append(_verification(data, d, tau, repeats, claimed, arith))
    if stochastic is not None:
        lines.append(_stochastic(stochastic, arith))
    return passed(head, lines)


def _check_design(
    design: Any, name: str, v_hat: list[Fraction], wbar: Fraction, d: int
) -> tuple[list[list[Fraction]], Fraction]:
    """The stored U is the design rule's for these answers, and b the largest scale."""
    U = noisy_design(v_hat, name)
    stored_U = [
        [bounded_rational(x, f"design.U[{i}][{k}]", positive=False) for k, x in enumerate(row)]
        for i, row in enumerate(kernel.as_matrix(kernel.get(design, "U"), "design.U", d, d))
    ]
    for i in range(d):
        for k in range(d):
            if stored_U[i][k] != U[i][k]:
                raise CertificateError(
                    f"design.U[{i}][{k}] is {stored_U[i][k]}, the {name!r} design rule gives "
                    f"{U[i][k]} for these answers"
                )
    norm_sq = max(sum((U[i][k] ** 2 for i in range(d)), Fraction(0)) for k in range(d))
    b = largest_dyadic_scale(norm_sq * wbar * wbar)
    if bounded_rational(kernel.get(design, "b"), "design.b") != b:
        raise CertificateError(
            f"design.b is not {b}, the largest power of two with b ||u_k||_2 w_bound <= 1"
        )
    return U, b


def _check_intervals(
    data: dict[str, Any], again: dict[str, Any], wbar: Fraction, d: int, arith: Any
) -> tuple[dict[str, Any], str]:
    """The reported parameters and enclosures are exactly those re-derived (``again``)."""
    result = kernel.get(data, "result")
    if kernel.get(result, "exact") is not False:
        raise CertificateError("result.exact must be false")
    paths = {
        "W": "result.parameters.W",
        "v": "result.parameters.v",
        "W_lower": "result.enclosures.W.lower",
        "W_upper": "result.enclosures.W.upper",
        "v_lower": "result.enclosures.v.lower",
        "v_upper": "result.enclosures.v.upper",
        "W_error": "result.enclosures.W_error",
        "v_error": "result.enclosures.v_error",
    }
    claimed = {
        key: _claimed(kernel.get(data, path), path, d, key.startswith("W"), arith)
        for key, path in paths.items()
    }
    for key, path in paths.items():
        _same(path, claimed[key], again[key])
    nearest = [
        Fraction(lo) if lo > 0 else (-Fraction(hi) if hi < 0 else Fraction(0))
        for rl, rh in zip(again["W_lower"], again["W_upper"], strict=True)
        for lo, hi in zip(rl, rh, strict=True)
    ]
    if sum(x * x for x in nearest) > wbar * wbar:
        raise CertificateError("the W intervals exclude every W with ||W||_F <= w_bound")
    widest = max(max(row) for row in again["W_error"])
    return claimed, (
        f"intervals: the {d * d} W and {d} v intervals re-derived from the answers are exactly "
        f"the reported ones (max W error bound {widest:.3e})"
    )


def _stochastic(stochastic: Any, arith: Any) -> str:
    """What stochastic noise means for the result: the tolerance holds with probability."""
    if not isinstance(stochastic, dict):
        raise CertificateError("noise.stochastic must be null or an object")
    delta = float(
        kernel.number(
            kernel.get(stochastic, "failure_probability"),
            "noise.stochastic.failure_probability",
            arith,
        )
    )
    return (
        f"stochastic noise: the tolerance holds only with probability >= {1 - delta:g} "
        "(not certified); the intervals are re-checked given it"
    )


def _verification(
    data: dict[str, Any],
    d: int,
    tau: Fraction,
    repeats: int,
    claimed: dict[str, Any],
    arith: Any,
) -> str:
    ver = kernel.get(data, "verification")
    if kernel.get(ver, "rule") != "within-tolerance":
        raise CertificateError("verification.rule must be 'within-tolerance'")
    stated = kernel.get(data, "queries.verification")
    count, seed, lengths = check_fresh(ver, d, per_answer=repeats, stated=stated)
    raw = [
        kernel.numbers(a, f"verification.answers[{i}]", arith, repeats)
        for i, a in enumerate(
            kernel.as_list(kernel.get(ver, "answers"), "verification.answers", count)
        )
    ]
    box = (claimed["W_lower"], claimed["W_upper"], claimed["v_lower"], claimed["v_upper"])
    used = set()
    enclosures = fresh_enclosures(d, count, seed, lengths, box)
    for i, ((X, lo, hi), answers) in enumerate(zip(enclosures, raw, strict=True)):
        observed = _mean(answers)
        used.add(int(X.shape[0]))
        if not lo - tau <= observed <= hi + tau:
            raise CertificateError(
                f"verification.answers[{i}]: the answer {float(observed)} to the fresh sequence "
                f"of length {X.shape[0]} is farther than tau from the reported box's values "
                f"[{float(lo)}, {float(hi)}]"
            )
    line = (
        f"verification: {count} fresh sequences (seed {seed}, lengths "
        f"{', '.join(map(str, sorted(used)))}): every answer within tau of the reported box"
    )
    return verification_summary(data, count, f"{count} fresh answers are stored", count, line)

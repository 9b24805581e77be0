"""Theorem 6.1: learn a single head from a noisy oracle, with guaranteed error bounds.

>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import NoisyOracle
>>> model = va.SingleHeadAttention([[0.25, -0.5], [0.5, 0]], [1, -2])
>>> oracle = NoisyOracle(va.Oracle(model, "certified"), tolerance=1e-4, seed=0)
>>> rec = learn_noisy(oracle, tolerance=1e-4, w_bound=1, margin=1)
>>> rec.queries, rec.bound, rec.queries_by_phase, rec.verified
(6, 6, {'v': 2, 'W': 4, 'verify': 8}, True)
>>> err = abs(rec.W - model.float_parameters()["W"])
>>> bool((err <= rec.enclosures["W_error"]).all()), float(rec.enclosures["W_error"].max()) < 0.01
(True, True)
>>> lo, hi = rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"]
>>> bool(((lo <= model.float_parameters()["W"]) & (model.float_parameters()["W"] <= hi)).all())
True
>>> va.verify_certificate(rec.certificate()).ok
True

The algorithm (the documentation's theory page, docs/theory.md). Length-1 queries [e_i]
give v_hat (error <= tau). For a design U = [u_1..u_d] (the paper's: U = I) and each
(k, j) the length-2 query [b u_k + a e_j; a e_j] has score gap a b u_k^T W e_j in
[-1/2, 1/2] and answer ``f = a v_j + alpha b u_k^T v``;
``alpha_hat = (f_hat - a v_hat_j) / (b u_k^T v_hat)`` is clipped to
[sigmoid(-1/2), sigmoid(1/2)] and inverted, and ``W = U^{-T} M``.

Probe scales: a = 1/2 and b the largest power of two with b ||u_k||_2 w_bound <= 1
(:func:`~verified_attn.noisy.planning.probe_scale`), so every query is an exact dyadic
float.

**The enclosures** (per entry, *a posteriori*, i.e. from the observed answers, and
rigorous), computed by :func:`noisy_intervals` in exact rational arithmetic except for
one logit ball per probe (flint ``arb`` at :data:`INTERVAL_PRECISION` bits):

- ``e_k = tau (1 + a + s+ b ||u_k||_1) / (b |u_k^T v_hat|)`` bounds ``|alpha_hat - alpha|``
  (:func:`~verified_attn.noisy.symbolic.error_propagation`), with s+ an upper bound of
  sigmoid(1/2);
- the clipped estimate's logit lies in a ball [l, h] (clipped to [-1/2, 1/2]) and the
  truth's within ``E = min(L+ e_k, 1)`` of it (L+ an upper bound of the Lipschitz constant
  L = 2 + e^(1/2) + e^(-1/2) of :func:`~verified_attn.noisy.symbolic.lipschitz_constant`;
  the cap 1 because both lie in [-1/2, 1/2]), so u_k^T W e_j is in
  ``[(l - E), (h + E)] / (a b)``;
- ``W = U^{-T} M`` with exact rational interval arithmetic; the float estimate is the midpoint
  rounded to nearest, ``W_error`` the distance to the far end plus the error, rounded up,
  and the interval ``W_hat -+ W_error`` rounded outward to floats.

The truth lies in the intervals whenever every answer (every average, with repeats) is
within ``tolerance`` of f(X), ||W||_F <= w_bound and the margin holds. The certificate
checker :mod:`verified_attn.certificates.noisy` re-derives the intervals from the stored
answers with its own code and requires the reported ones to be exactly those.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Unpack

import flint
import numpy as np

from verified_attn import validation
from verified_attn.arithmetic import to_fraction
from verified_attn.certificates.writer import RunRecord
from verified_attn.design import noisy_design
from verified_attn.errors import InvalidArgument, NotIdentifiable
from verified_attn.learner_options import CheckOptions, learner_options
from verified_attn.models import SingleHeadAttention
from verified_attn.noisy import symbolic
from verified_attn.noisy.certificate_data import THEOREM, NoisySetting
from verified_attn.noisy.certificate_data import noisy_certificate_data as _certificate_data
from verified_attn.noisy.intervals import INTERVAL_PRECISION, noisy_intervals
from verified_attn.noisy.intervals import arb_of as _arb
from verified_attn.noisy.planning import (
    DESIGNS,
    A,
    probe_scale,
    query_bound,
    repeats_for,
    tolerance_for_error,
)
from verified_attn.noisy.verification import ToleranceVerification, verify_within_tolerance
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import NoisyRecovery
from verified_attn.serialize import dump_number

# The planning formulas, the intervals and the adversaries are their modules' own (the
# package re-exports them); this module owns the learners.
__all__ = ["learn_noisy", "learn_stochastic"]


# ---------------------------------------------------------------------------------------
# The design.
# ---------------------------------------------------------------------------------------


def _queries(U: list[list[Fraction]], b: Fraction) -> np.ndarray:
    """All d^2 probes [b u_k + a e_j; a e_j], k major, as one exact (d^2, 2, d) array."""
    d = len(U)
    Uf = np.array([[float(q) for q in row] for row in U])
    bf, af = float(b), float(A)
    out = np.zeros((d * d, 2, d))
    for k in range(d):
        for j in range(d):
            out[k * d + j, 0] = bf * Uf[:, k]
            out[k * d + j, 0, j] += af
            out[k * d + j, 1, j] = af
    # Dyadic by construction (b a power of two, entries 0/1): the floats are the rationals.
    return out


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


def _positive(x: Any, name: str) -> Fraction:
    return to_fraction(validation.check_real(x, name, low=0, low_open=True), name=name)


def _assumptions(
    tau: Fraction, wbar: Fraction, mu: Fraction, design: str, repeats: int
) -> list[str]:
    what = "every answer" if repeats == 1 else f"the average of every query's {repeats} answers"
    margin = (
        f"|v_i| >= margin = {float(mu)} for every i (design 'paper')"
        if design == "paper"
        else f"||v||_2 >= margin = {float(mu)} (design 'norm')"
    )
    return [
        f"{what} is within tolerance tau = {float(tau)} of f(X)",
        f"||W||_F <= w_bound = {float(wbar)}",
        margin,
    ]


def learn_noisy(
    oracle: Oracle,
    *,
    tolerance: Any,
    w_bound: Any,
    margin: Any,
    design: str = "paper",
    repeats: int = 1,
    **options: Unpack[CheckOptions],
) -> NoisyRecovery:
    """Estimate (W, v) with per-entry guaranteed error bounds from d^2 + d noisy queries.

    >>> import verified_attn as va
    >>> o = va.Oracle(va.SingleHeadAttention([[0.5]], [2]), "float")
    >>> rec = learn_noisy(o, tolerance=1e-6, w_bound=1, margin=1, verify=0)
    >>> rec.queries, rec.verified, rec.enclosures["v"]["lower"] < 2 < rec.enclosures["v"]["upper"]
    (2, False, array([ True]))

    Assumptions (recorded in ``rec.assumptions``): every answer is within ``tolerance``
    of f(X); ``||W||_F <= w_bound``; ``|v_i| >= margin`` for every i (``design="paper"``)
    or only ``||v||_2 >= margin`` (``design="norm"``, ours). ``repeats``: each query is
    asked this many times and the answers averaged exactly (for stochastic noise;
    ``tolerance`` then bounds the averages). ``verify``: fresh sequences of the given
    ``lengths`` (:func:`verified_attn.verification.fresh_sequences`) whose answers must lie
    within ``tolerance`` of the recovered model's enclosure (0: not verified). ``progress``:
    a bar or callback over the queries (:mod:`verified_attn.progress`).

    Returns a :class:`~verified_attn.recovery.NoisyRecovery`: ``parameters`` ``W`` (d x d)
    and ``v`` (d) are float64 estimates, ``model`` the float
    :class:`~verified_attn.models.SingleHeadAttention` of them, ``exact`` False.
    ``enclosures``:

    - ``"W"``, ``"v"``: ``{"lower": array, "upper": array}``, float64 intervals (rounded
      outward) that contain the truth under the assumptions;
    - ``"W_error"``, ``"v_error"``: per-entry bounds on ``|estimate - truth|``;
    - ``"W_a_priori"``: the a-priori per-entry bound of :mod:`verified_attn.noisy.symbolic`
      (a float, >= every ``W_error`` entry);
    - ``"probe_scale"``: b (a Fraction); ``"design"``: U (float array, columns u_k).

    ``rec.certificate()`` stores every answer, the tolerance and assumptions; its checker
    re-derives the intervals. Raises :class:`InvalidArgument` for a non-positive or
    inconsistent argument, :class:`NotIdentifiable` if the answers contradict the margin or
    the norm bound, and :class:`ModelClassMismatch` if a fresh answer is farther than the
    tolerance from the recovered model's enclosure.
    """
    validation.check_oracle(oracle)
    if oracle.arithmetic.name != "float":
        raise InvalidArgument(
            f"learn_noisy needs a float-mode oracle (a noisy black box); got arithmetic="
            f"{oracle.arithmetic.name!r}: wrap it in verified_attn.oracle_wrappers.NoisyOracle"
        )
    tau = _positive(tolerance, "tolerance")
    wbar = _positive(w_bound, "w_bound")
    mu = _positive(margin, "margin")
    design = validation.check_choice(design, "design", DESIGNS)
    repeats = validation.check_int(repeats, "repeats", low=1)
    verify, seed, lengths, _, progress = learner_options("learn_noisy", options, CheckOptions)
    d = oracle.d
    _check_tolerance(design, tau, mu, d)
    bound = repeats * query_bound(d)
    oracle.require_remaining(bound, repeats * verify, f"learn_noisy (repeats={repeats})")
    total = bound + repeats * verify
    with reporting(oracle, progress, "learn_noisy", total=total), oracle.run() as run:
        with oracle.phase("v"):
            raw_v = _ask(oracle, np.eye(d)[:, None, :], repeats)
        v_hat = [_mean(a) for a in raw_v]
        _check_v(v_hat, tau, mu, design)
        U = noisy_design(v_hat, design)
        norm_sq = max(sum(U[i][k] ** 2 for i in range(d)) for k in range(d))
        b = probe_scale(wbar, norm_sq)
        with oracle.phase("W"):
            raw_W = _ask(oracle, _queries(U, b), repeats)
        est = noisy_intervals(v_hat, [_mean(a) for a in raw_W], U, b, tau)
        _check_bad(est["bad"], wbar)
        _check_norm(est["W_lower"], est["W_upper"], wbar)
        checked = _verify(oracle, est, tau, (verify, seed, lengths, repeats))
    counts = run.counts
    prior = symbolic.a_priori_bounds(
        float(tau), float(mu), float(wbar), d, probe_scale=float(b), design=design
    )
    enclosures, notes = _enclosures_and_notes(est, prior, b, U, design, tau, repeats)
    assumptions = _assumptions(tau, wbar, mu, design, repeats)
    params = {"W": est["W"], "v": est["v"]}
    # The header's verification is None: the certificate stores the checked answers itself.
    record = RunRecord(oracle.arithmetic, seed, counts, bound, None, assumptions)
    setting = NoisySetting(tau, wbar, mu, repeats, design, U, b)
    certificate = functools.partial(
        _certificate_data, record, setting, (raw_v, raw_W), est, checked
    )
    return NoisyRecovery.from_record(
        record,
        theorem=THEOREM,
        parameters=params,
        learned_model=SingleHeadAttention(est["W"], est["v"]),
        exact=False,
        parameter_count=query_bound(d),
        rounds=2,
        verification=checked,
        enclosures=enclosures,
        notes=notes,
        certificate_data=certificate,
        tolerance=tau,
        repeats=repeats,
    )


def _check_tolerance(design: str, tau: Fraction, mu: Fraction, d: int) -> None:
    """The tolerance the design needs against the margin (else some v_i can be 0)."""
    if design == "paper" and tau >= mu:
        raise InvalidArgument(
            f"tolerance must be < margin for design='paper' (else v_i can be 0 within the "
            f"tolerance); got tolerance={float(tau)}, margin={float(mu)}"
        )
    if design == "norm" and tau * tau * d >= mu * mu:
        raise InvalidArgument(
            f"tolerance must be < margin / sqrt(d) for design='norm'; got tolerance="
            f"{float(tau)}, margin={float(mu)}, d={d}"
        )


def _verify(
    oracle: Oracle, est: dict[str, Any], tau: Fraction, how: tuple[int, int, Any, int]
) -> ToleranceVerification | None:
    """Fresh sequences within the tolerance of the enclosure (None with verify=0)."""
    verify, seed, lengths, repeats = how
    if not verify:
        return None
    return verify_within_tolerance(
        oracle,
        (est["W_lower"], est["W_upper"]),
        (est["v_lower"], est["v_upper"]),
        tolerance=tau,
        count=verify,
        seed=seed,
        lengths=lengths,
        repeats=repeats,
    )


def _enclosures_and_notes(
    est: dict[str, Any],
    prior: dict[str, float],
    b: Fraction,
    U: list[list[Fraction]],
    design: str,
    tau: Fraction,
    repeats: int,
) -> tuple[dict[str, Any], list[str]]:
    """The result's enclosures (intervals, error bounds, design) and notes."""
    enclosures = {
        "W": {"lower": est["W_lower"], "upper": est["W_upper"]},
        "v": {"lower": est["v_lower"], "upper": est["v_upper"]},
        "W_error": est["W_error"],
        "v_error": est["v_error"],
        "W_a_priori": prior["W_entry"],
        "probe_scale": b,
        "design": np.array([[float(q) for q in row] for row in U]),
    }
    notes = [
        f"design {design!r}, probe scales a = 1/2, b = {b}; tolerance {float(tau)}",
        f"max per-entry W error bound {float(est['W_error'].max()):.3e} (a priori "
        f"{prior['W_entry']:.3e}); v error bound {float(est['v_error'].max()):.3e}",
    ]
    if repeats > 1:
        notes.append(f"every query asked {repeats} times and averaged")
    return enclosures, notes


def _ask(oracle: Oracle, Xs: np.ndarray, repeats: int) -> list[list[float]]:
    """Every query's ``repeats`` answers, as the oracle gave them (all asked in one batch)."""
    n = Xs.shape[0]
    answers = oracle.query_many(np.concatenate([Xs] * repeats) if repeats > 1 else Xs)
    return [[answers[r * n + i] for r in range(repeats)] for i in range(n)]


def _mean(answers: list[float]) -> Fraction:
    """The exact average of float answers."""
    return sum((Fraction(a) for a in answers), Fraction(0)) / len(answers)


def _check_v(v_hat: list[Fraction], tau: Fraction, mu: Fraction, design: str) -> None:
    d = len(v_hat)
    if design == "paper":
        for i, q in enumerate(v_hat):
            if abs(q) < mu - tau:
                raise NotIdentifiable(
                    f"margin: the answer to [e_{i}] is v_hat_{i} = {float(q)}, so |v_{i}| <= "
                    f"{float(abs(q) + tau)} < margin = {float(mu)}; the data contradict "
                    f"|v_i| >= margin (or the tolerance is larger than stated). design='norm' "
                    f"needs only ||v||_2 >= margin"
                )
        return
    # ||v||_2 <= ||v_hat||_2 + sqrt(d) tau: refuse when that is certainly < margin.
    norm_sq = sum((q * q for q in v_hat), Fraction(0))
    with flint.ctx.workprec(INTERVAL_PRECISION):
        norm = _arb(norm_sq).sqrt()
        refused = bool(norm + flint.arb(d).sqrt() * _arb(tau) < _arb(mu))
    if refused:
        raise NotIdentifiable(
            f"margin: ||v_hat||_2 = {math.sqrt(float(norm_sq))} with tolerance {float(tau)} "
            f"per entry means ||v||_2 < margin = {float(mu)}; the data contradict the "
            "assumption ||v||_2 >= margin"
        )


def _check_bad(bad: list[tuple[int, int]], wbar: Fraction) -> None:
    if bad:
        k, j = bad[0]
        raise NotIdentifiable(
            f"w_bound: the probe for (k={k}, j={j}) gives alpha_hat outside [sigmoid(-1/2), "
            f"sigmoid(1/2)] by more than its error bound: its score gap exceeds 1/2, so "
            f"||W||_F > w_bound = {float(wbar)} (or the oracle is not a single head within "
            "the tolerance)"
        )


def _check_norm(lo: np.ndarray, hi: np.ndarray, wbar: Fraction) -> None:
    """NotIdentifiable if every W inside the intervals has ||W||_F > w_bound."""
    nearest = np.where(lo > 0, lo, np.where(hi < 0, -hi, 0.0))
    least = sum(Fraction(float(x)) ** 2 for x in nearest.ravel())
    if least > wbar * wbar:
        raise NotIdentifiable(
            f"w_bound: every W consistent with the answers has ||W||_F >= "
            f"{math.sqrt(float(least)):.6g} > w_bound = {float(wbar)}"
        )


# ---------------------------------------------------------------------------------------
# Stochastic noise: repeat and average.
# ---------------------------------------------------------------------------------------


def learn_stochastic(
    oracle: Oracle,
    *,
    noise_scale: float,
    target_error: float,
    w_bound: Any,
    margin: Any,
    failure_probability: float = 1e-3,
    design: str = "paper",
    **options: Unpack[CheckOptions],
) -> NoisyRecovery:
    """Zero-mean Gaussian noise of scale sigma: repeat, average, then Thm 6.1.

    >>> import verified_attn as va
    >>> from verified_attn.oracle_wrappers import StochasticOracle
    >>> o = StochasticOracle(va.Oracle(va.SingleHeadAttention([[0.5]], [2]), "certified"), 1e-3)
    >>> rec = learn_stochastic(o, noise_scale=1e-3, target_error=0.05, w_bound=1, margin=1)
    >>> rec.queries == rec.repeats * 2, rec.assumptions[0].startswith("probabilistic")
    (True, True)

    Chooses tau from the a-priori bound so every entry's error is <= ``target_error``
    (:func:`~verified_attn.noisy.planning.tolerance_for_error`), and n repeats so every
    average is within tau with probability >= 1 - failure_probability
    (:func:`~verified_attn.noisy.planning.repeats_for`); queries = n (d^2 + d).
    ``progress``: a bar or callback over the queries (:mod:`verified_attn.progress`).

    **What is certified.** Gaussian noise is unbounded, so no tolerance holds surely: the
    statement is *probabilistic*. With probability >= 1 - failure_probability (over the
    noise, under the Gaussian model of scale ``noise_scale``) every average is within tau,
    and *on that event* the enclosures contain the truth. ``rec.assumptions`` says so first;
    the certificate re-checks the intervals from the answers given tau, not the event.
    """
    validation.check_oracle(oracle)
    sigma = float(validation.check_real(noise_scale, "noise_scale", low=0, low_open=True))
    eps = float(validation.check_real(target_error, "target_error", low=0, low_open=True))
    _positive(w_bound, "w_bound")
    _positive(margin, "margin")
    delta = float(
        validation.check_real(
            failure_probability,
            "failure_probability",
            low=0,
            high=1,
            low_open=True,
            high_open=True,
        )
    )
    design = validation.check_choice(design, "design", DESIGNS)
    verify = learner_options("learn_stochastic", options, CheckOptions).verify
    d = oracle.d
    tau = tolerance_for_error(eps, float(w_bound), float(margin), d, design=design)
    n = repeats_for(sigma, tau, query_bound(d) + verify, delta)
    rec = learn_noisy(
        oracle,
        tolerance=tau,
        w_bound=w_bound,
        margin=margin,
        design=design,
        repeats=n,
        **options,
    )
    statement = (
        f"probabilistic, not certified: the noise is assumed zero-mean Gaussian of scale "
        f"sigma = {sigma}; then every average of {n} answers is within tau = {tau:.4g} with "
        f"probability >= {1 - delta} (Gaussian tail + union bound), and the enclosures "
        "contain the truth on that event only"
    )
    rec.assumptions.insert(0, statement)
    rec.notes.append(f"stochastic noise sigma = {sigma}: {n} repeats per query, tau = {tau:.4g}")
    stochastic = {
        "noise_scale": sigma,
        "target_error": eps,
        "failure_probability": delta,
    }
    base = rec.certificate_data
    assert callable(base)
    rec.certificate_data = functools.partial(
        _with_stochastic, base, stochastic, list(rec.assumptions)
    )
    return rec


def _with_stochastic(
    base: Any, stochastic: dict[str, float], assumptions: list[str]
) -> dict[str, Any]:
    data = base()
    data["assumptions"] = assumptions
    data["noise"]["stochastic"] = {k: dump_number(float(v)) for k, v in stochastic.items()}
    return data

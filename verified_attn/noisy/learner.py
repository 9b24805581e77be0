"""Theorem 6.1: learn a single head from a noisy oracle, with guaranteed error bounds.

>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import NoisyOracle
>>> model = va.SingleHeadAttention([[0.25, -0.5], [0.5, 0]], [1, -2])
>>> oracle = NoisyOracle(va.Oracle(model, "certified"), tolerance=1e-4, seed=0)
>>> rec = learn_noisy(oracle, tolerance=1e-4, w_bound=1, margin=1)
>>> rec.queries, rec.bound, rec.queries_by_phase
(6, 6, {'v': 2, 'W': 4, 'verify': 8})
>>> err = abs(rec.W - model.float_parameters()["W"])
>>> bool((err <= rec.enclosures["W_error"]).all()), float(rec.enclosures["W_error"].max()) < 0.01
(True, True)

The algorithm (THEORY §5). Length-1 queries [e_i] give v_hat (error <= tau). For a design
U = [u_1..u_d] (the paper's: U = I) and each (k, j) the length-2 query
[b u_k + a e_j; a e_j] has score gap a b u_k^T W e_j in [-1/2, 1/2] and answer
``f = a v_j + alpha b u_k^T v``; ``alpha_hat = (f_hat - a v_hat_j) / (b u_k^T v_hat)`` is
clipped to [sigmoid(-1/2), sigmoid(1/2)] and inverted, and W = U^{-T} M.

Probe scales: a = 1/2 and b the largest power of two with b ||u_k||_2 w_bound <= 1 (at
most 1/w_bound, at least half of it), so every query is an exact dyadic float.

Error bounds (per entry, *a posteriori*, i.e. from the observed v_hat, and rigorous):
``|alpha_hat - alpha| <= tau (1 + a + sigmoid(1/2) b ||u_k||_1) / (b |u_k^T v_hat|)``
(:func:`~verified_attn.noisy.symbolic.error_propagation`), times the Lipschitz constant
L = 2 + e^(1/2) + e^(-1/2) of logit (:func:`~verified_attn.noisy.symbolic.lipschitz_constant`)
and 1/(a b); capped at 1/(a b) because both the clipped estimate and the truth lie in
[-1/2, 1/2] / (a b). All of it is computed in ball arithmetic from the exact answers, and
the float estimates' rounding is added, so the returned intervals contain the truth
whenever every answer is within ``tolerance`` of f.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache
from typing import Any

import flint
import numpy as np

from verified_attn._legacy import Recovery, split_counts
from verified_attn.arithmetic import arb_bounds, fraction_from_arb, to_fraction
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
)
from verified_attn.models import SingleHeadAttention, attention_output
from verified_attn.noisy import symbolic
from verified_attn.oracle import Oracle

__all__ = [
    "DESIGNS",
    "learn_noisy",
    "learn_stochastic",
    "probe_scale",
    "query_bound",
    "repeats_for",
    "tolerance_for_error",
    "worst_case_direction",
    "worst_case_oracle",
]

THEOREM = "thm-6.1"
DESIGNS = ("paper", "norm")
A = Fraction(1, 2)
_PREC = 128  # bits for the ball arithmetic that turns exact answers into bounds


def query_bound(d: int) -> int:
    """d^2 + d learning queries (per repetition).

    >>> query_bound(4)
    20
    """
    return d * d + d


def probe_scale(w_bound: Any, u_norm_sq: Any = 1) -> Fraction:
    """The largest power of two b with b^2 ||u||_2^2 w_bound^2 <= 1 (exact).

    >>> probe_scale(3), probe_scale(1), probe_scale(Fraction(1, 4)), probe_scale(1, 2)
    (Fraction(1, 4), Fraction(1, 1), Fraction(4, 1), Fraction(1, 2))
    """
    w = to_fraction(w_bound, name="w_bound")
    n = to_fraction(u_norm_sq, name="u_norm_sq")
    b = Fraction(1)
    while b * b * n * w * w > 1:
        b /= 2
    while 4 * b * b * n * w * w <= 1:
        b *= 2
    return b


def _arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def _upper(x: flint.arb) -> float:
    """A float >= every point of the ball."""
    hi = arb_bounds(x)[1]
    f = float(hi)
    return f if Fraction(f) >= hi else math.nextafter(f, math.inf)


def _lower(x: flint.arb) -> float:
    lo = arb_bounds(x)[0]
    f = float(lo)
    return f if Fraction(f) <= lo else math.nextafter(f, -math.inf)


def _positive(x: Any, name: str) -> Fraction:
    q = to_fraction(x, name=name)
    if q <= 0:
        raise InvalidArgument(f"{name} must be > 0, got {x!r}")
    return q


# ---------------------------------------------------------------------------------------
# The design.
# ---------------------------------------------------------------------------------------


def _design(v_hat: list[Fraction], design: str) -> list[list[Fraction]]:
    """Columns u_k: e_k (paper), or e_k / e_k + e_p with p = argmax |v_hat| (norm)."""
    d = len(v_hat)
    U = [[Fraction(int(i == k)) for k in range(d)] for i in range(d)]  # U[i][k]
    if design == "norm":
        p = max(range(d), key=lambda i: abs(v_hat[i]))
        for k in range(d):
            if k != p and 4 * abs(v_hat[k]) < abs(v_hat[p]):
                U[p][k] = Fraction(1)
    return U


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


def learn_noisy(
    oracle: Oracle,
    tolerance: Any,
    w_bound: Any,
    margin: Any,
    *,
    design: str = "paper",
    repeats: int = 1,
    verify: int = 8,
    seed: int = 0,
) -> Recovery:
    """Estimate (W, v) with per-entry guaranteed error bounds from d^2 + d noisy queries.

    Assumptions: every answer is within ``tolerance`` of f(X); ``||W||_F <= w_bound``;
    ``|v_i| >= margin`` for every i (``design="paper"``) or only ``||v||_2 >= margin``
    (``design="norm"``, ours). ``repeats``: each query is asked this many times and the
    answers averaged (for stochastic noise; ``tolerance`` then bounds the averages).

    Returns a :class:`~verified_attn.recovery.Recovery` (float parameters) whose
    ``enclosures`` hold ``W_error``, ``v_error`` (per-entry bounds), ``W_interval``,
    ``v_interval`` (``[..., 0]`` lower, ``[..., 1]`` upper ends, containing the truth) and
    ``W_a_priori`` (the derived bound of :mod:`verified_attn.noisy.symbolic`).

    Raises :class:`InvalidArgument` for a non-positive or inconsistent argument,
    :class:`NotIdentifiable` if the answers contradict the margin or the norm bound, and
    :class:`ModelClassMismatch` if fresh queries disagree by more than the bound + tau.
    """
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    if oracle.arithmetic.name != "float":
        raise InvalidArgument(
            f"learn_noisy needs a float-mode oracle (a noisy black box); got arithmetic="
            f"{oracle.arithmetic.name!r}: wrap it in verified_attn.oracle_wrappers.NoisyOracle"
        )
    tau = _positive(tolerance, "tolerance")
    wbar = _positive(w_bound, "w_bound")
    mu = _positive(margin, "margin")
    if design not in DESIGNS:
        raise InvalidArgument(f"design must be one of {DESIGNS}, got {design!r}")
    for name, val, least in (("repeats", repeats, 1), ("verify", verify, 0)):
        if isinstance(val, bool) or not isinstance(val, int) or val < least:
            raise InvalidArgument(f"{name} must be an int >= {least}, got {val!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    d = oracle.d
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
    oracle.require_remaining(
        repeats * query_bound(d), repeats * verify, f"learn_noisy (repeats={repeats})"
    )
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent

    with oracle.phase("v"):
        v_hat = _averaged(oracle, np.eye(d)[:, None, :], repeats)
    _check_v(v_hat, tau, mu, design)
    U = _design(v_hat, design)
    norm_sq = max(sum(U[i][k] ** 2 for i in range(d)) for k in range(d))
    b = probe_scale(wbar, norm_sq)
    with oracle.phase("W"):
        F = _averaged(oracle, _queries(U, b), repeats)
    with flint.ctx.workprec(_PREC):
        est = _decode(F, v_hat, U, b, tau, wbar)
        ver_err = _verify(oracle, est, tau, verify, repeats, seed)

    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    prior = symbolic.a_priori_bounds(
        float(tau), float(mu), float(wbar), d, probe_scale=float(b), design=design
    )
    enclosures = {
        "W_error": est["W_error"],
        "v_error": np.full(d, _upper(_arb(tau))),
        "W_interval": est["W_interval"],
        "v_interval": np.stack([[_lower(_arb(q - tau)), _upper(_arb(q + tau))] for q in v_hat]),
        "W_a_priori": prior["W_entry"],
        "probe_scale": b,
        "design": np.array([[float(q) for q in row] for row in U]),
    }
    notes = [
        f"design {design!r}, probe scales a = 1/2, b = {b}; tolerance {float(tau)}",
        f"max per-entry W error bound {float(est['W_error'].max()):.3e} (a priori "
        f"{prior['W_entry']:.3e}); v error bound {float(tau):.3e}",
    ]
    if repeats > 1:
        notes.append(f"every query asked {repeats} times and averaged")
    return Recovery(
        theorem=THEOREM,
        parameters={"W": est["W"], "v": np.array([float(q) for q in v_hat])},
        arithmetic="float",
        precision=None,
        exact=False,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=repeats * query_bound(d),
        parameter_count=query_bound(d),
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        rounds=2,
        enclosures=enclosures,
        verification_error=ver_err,
        notes=notes,
    )


def _averaged(oracle: Oracle, Xs: np.ndarray, repeats: int) -> list[Fraction]:
    """Exact averages (Fractions) of ``repeats`` answers to each query."""
    answers = oracle.query_many(np.concatenate([Xs] * repeats)) if repeats > 1 else None
    if answers is None:
        answers = oracle.query_many(Xs)
    n = Xs.shape[0]
    return [
        sum((Fraction(answers[r * n + i]) for r in range(repeats)), Fraction(0)) / repeats
        for i in range(n)
    ]


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
    with flint.ctx.workprec(_PREC):
        norm = sum((_arb(q) ** 2 for q in v_hat), flint.arb(0)).sqrt()
        if norm + flint.arb(d).sqrt() * _arb(tau) < _arb(mu):
            raise NotIdentifiable(
                f"margin: ||v_hat||_2 = {float(norm.mid())} with tolerance {float(tau)} per "
                f"entry means ||v||_2 < margin = {float(mu)}; the data contradict the "
                "assumption ||v||_2 >= margin"
            )


@cache
def _lipschitz() -> flint.arb:
    return flint.arb(0.5).exp() + flint.arb(-0.5).exp() + 2


@cache
def _sigmoid_half() -> flint.arb:
    return 1 / (1 + flint.arb(-0.5).exp())


def _decode(
    F: list[Fraction],
    v_hat: list[Fraction],
    U: list[list[Fraction]],
    b: Fraction,
    tau: Fraction,
    wbar: Fraction,
) -> dict[str, Any]:
    d = len(v_hat)
    L, s_plus = _lipschitz(), _sigmoid_half()
    s_minus = 1 - s_plus
    ab = _arb(A * b)
    M = [[flint.arb(0)] * d for _ in range(d)]
    E = [[flint.arb(0)] * d for _ in range(d)]
    for k in range(d):
        col = [U[i][k] for i in range(d)]
        uv = sum((c * q for c, q in zip(col, v_hat, strict=True)), Fraction(0))
        l1 = sum((abs(c) for c in col), Fraction(0))
        err_alpha = _arb(tau) * (1 + _arb(A) + s_plus * _arb(b * l1)) / _arb(b * abs(uv))
        for j in range(d):
            alpha_hat = (F[k * d + j] - A * v_hat[j]) / (b * uv)  # exact rational
            ah = _arb(alpha_hat)
            if ah < s_minus - err_alpha or ah > s_plus + err_alpha:
                raise NotIdentifiable(
                    f"w_bound: the probe for (k={k}, j={j}) gives alpha_hat = {float(alpha_hat)}"
                    f" (error <= {float(err_alpha.mid()):.3g}), outside [sigmoid(-1/2), "
                    f"sigmoid(1/2)]: its score gap exceeds 1/2, so ||W||_F > w_bound = "
                    f"{float(wbar)} (or the oracle is not a single head within the tolerance)"
                )
            if ah <= s_minus:
                lg = flint.arb(-0.5)
            elif ah >= s_plus:
                lg = flint.arb(0.5)
            elif 0 < ah < 1:  # inside, or undecidably near an end: clip the logit's ball
                lg = _clip_ball((ah / (1 - ah)).log())
            else:  # cannot happen: the ends are far from 0 and 1
                lg = _ball_of(Fraction(-1, 2), Fraction(1, 2))
            M[k][j] = lg / ab
            # Both clipped estimate and truth lie in [-1/2, 1/2]: the error is also <= 1.
            bound = L * err_alpha
            E[k][j] = (bound if bound < 1 else flint.arb(1)) / ab
    # W = U^{-T} M exactly; the error propagates through |U^{-T}|.
    Ut = flint.fmpq_mat(d, d, [_fmpq(U[i][k]) for k in range(d) for i in range(d)])
    inv = Ut.inv()
    W = np.empty((d, d))
    W_err = np.empty((d, d))
    W_int = np.empty((d, d, 2))
    for r in range(d):
        row = [(k, flint.arb(inv[r, k])) for k in range(d) if inv[r, k] != 0]
        for j in range(d):
            val = sum((c * M[k][j] for k, c in row), flint.arb(0))
            err = sum((abs(c) * E[k][j] for k, c in row), flint.arb(0))
            mid = float(fraction_from_arb(val.mid()))
            total = abs(_arb(Fraction(mid)) - val) + err  # float rounding + ball radius
            W[r, j] = mid
            W_err[r, j] = _upper(total)
            W_int[r, j] = (_lower(mid - total), _upper(mid + total))
    _check_norm(W_int, wbar)
    return {"W": W, "W_error": W_err, "W_interval": W_int, "v_hat": v_hat}


def _fmpq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def _ball_of(lo: Fraction, hi: Fraction) -> flint.arb:
    """A ball containing [lo, hi] (radius rounded up)."""
    rad = (hi - lo) / 2
    r = float(rad)
    r = r if Fraction(r) >= rad else math.nextafter(r, math.inf)
    return _arb((lo + hi) / 2) + flint.arb(0, r)


def _clip_ball(x: flint.arb) -> flint.arb:
    lo, hi = arb_bounds(x)
    return _ball_of(max(lo, Fraction(-1, 2)), min(hi, Fraction(1, 2)))


def _check_norm(W_int: np.ndarray, wbar: Fraction) -> None:
    """NotIdentifiable if every W inside the intervals has ||W||_F > w_bound."""
    lo, hi = W_int[..., 0], W_int[..., 1]
    nearest = np.where(lo > 0, lo, np.where(hi < 0, -hi, 0.0))
    least = sum(Fraction(float(x)) ** 2 for x in nearest.ravel())
    if least > wbar * wbar:
        raise NotIdentifiable(
            f"w_bound: every W consistent with the answers has ||W||_F >= "
            f"{math.sqrt(float(least)):.6g} > w_bound = {float(wbar)}"
        )


# ---------------------------------------------------------------------------------------
# Verification on fresh queries, allowing for the tolerance.
# ---------------------------------------------------------------------------------------


def _verification_queries(d: int, count: int, seed: int) -> np.ndarray | list[np.ndarray]:
    """Fresh queries of lengths 1..3, entries in {+-1/4, +-1/2} (none is a learning query)."""
    rng = np.random.default_rng(seed)
    return [
        rng.choice(np.array([-0.5, -0.25, 0.25, 0.5]), size=(1 + i % 3, d)) for i in range(count)
    ]


def _verify(
    oracle: Oracle, est: dict[str, Any], tau: Fraction, count: int, repeats: int, seed: int
) -> float | None:
    if count == 0:
        return None
    d = oracle.d
    W_int = est["W_interval"]
    Wb = [
        [_ball_of(Fraction(W_int[i, j, 0]), Fraction(W_int[i, j, 1])) for j in range(d)]
        for i in range(d)
    ]
    vb = [_ball_of(q - tau, q + tau) for q in est["v_hat"]]
    worst = 0.0
    with oracle.phase("verify"):
        for X in _verification_queries(d, count, seed):
            observed = _averaged(oracle, X[None], repeats)[0]
            rows = [[_arb(Fraction(x)) for x in row] for row in X]
            pred = attention_output(rows, Wb, vb, exp=lambda s: s.exp())
            lo, hi = arb_bounds(pred)
            if not (lo - tau <= observed <= hi + tau):
                raise ModelClassMismatch(
                    f"the oracle is not the recovered single head within the tolerance: on the "
                    f"fresh query {X.tolist()} it answered {float(observed)}, the recovered "
                    f"model's enclosure is [{float(lo)}, {float(hi)}] and the tolerance "
                    f"{float(tau)}",
                    query=X,
                    observed=float(observed),
                    expected=(float(lo), float(hi)),
                )
            # Relative discrepancy against the enclosure's midpoint (what reports print).
            gap = float(abs(observed - (lo + hi) / 2))
            worst = max(worst, gap / max(abs(float(observed)), float(tau)))
    return worst


# ---------------------------------------------------------------------------------------
# Stochastic noise: repeat and average.
# ---------------------------------------------------------------------------------------


def repeats_for(
    noise_scale: float, tolerance: float, answers: int, failure_probability: float
) -> int:
    """Repeats n so that all ``answers`` averages are within ``tolerance`` w.p. >= 1 - delta.

    Gaussian tail of the mean of n answers: P(|mean - f| > t) <= 2 exp(-n t^2 / (2 sigma^2));
    a union bound over the answers gives n = ceil(2 sigma^2 ln(2 answers / delta) / t^2).

    >>> repeats_for(0.1, 0.01, 30, 1e-3)
    2201
    """
    for name, val in (("noise_scale", noise_scale), ("tolerance", tolerance)):
        if not val > 0:
            raise InvalidArgument(f"{name} must be > 0, got {val!r}")
    if not 0 < failure_probability < 1:
        raise InvalidArgument(f"failure_probability must be in (0, 1), got {failure_probability!r}")
    n = 2 * noise_scale**2 * math.log(2 * answers / failure_probability) / tolerance**2
    return max(1, math.ceil(n))


def tolerance_for_error(
    target_error: float, w_bound: float, margin: float, d: int, *, design: str = "paper"
) -> float:
    """The largest tau whose a-priori per-entry bounds (W and v) are <= ``target_error``.

    >>> t = tolerance_for_error(0.05, 1, 1, 3)
    >>> from verified_attn.noisy.symbolic import a_priori_bounds
    >>> a_priori_bounds(t, 1, 1, 3, probe_scale=1)["W_entry"] <= 0.05 + 1e-12
    True
    """
    b = float(probe_scale(w_bound, 1 if design == "paper" else 2))
    lo, hi = 0.0, float(margin) if design == "paper" else float(margin) / math.sqrt(d)
    for _ in range(60):  # the bound is increasing in tau: bisection
        mid = (lo + hi) / 2
        ok = symbolic.a_priori_bounds(mid, margin, w_bound, d, probe_scale=b, design=design)
        if ok["W_entry"] <= target_error and mid <= target_error:
            lo = mid
        else:
            hi = mid
    return lo


def learn_stochastic(
    oracle: Oracle,
    noise_scale: float,
    target_error: float,
    w_bound: Any,
    margin: Any,
    *,
    failure_probability: float = 1e-3,
    design: str = "paper",
    verify: int = 8,
    seed: int = 0,
) -> Recovery:
    """Zero-mean Gaussian noise of scale sigma: repeat, average, then Thm 6.1.

    Chooses tau from the a-priori bound so every entry's error is <= ``target_error``, and
    n repeats so every average is within tau with probability >= 1 - failure_probability
    (:func:`repeats_for`); queries = n (d^2 + d).
    """
    for name, val in (
        ("noise_scale", noise_scale),
        ("target_error", target_error),
        ("w_bound", w_bound),
        ("margin", margin),
    ):
        _positive(val, name)
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    d = oracle.d
    tau = tolerance_for_error(target_error, float(w_bound), float(margin), d, design=design)
    n = repeats_for(noise_scale, tau, query_bound(d) + verify, failure_probability)
    rec = learn_noisy(
        oracle, tau, w_bound, margin, design=design, repeats=n, verify=verify, seed=seed
    )
    rec.notes.append(
        f"stochastic noise sigma = {noise_scale}: tau = {tau:.4g} holds for every average with "
        f"probability >= {1 - failure_probability} (Gaussian tail + union bound)"
    )
    return rec


# ---------------------------------------------------------------------------------------
# The worst-case adversary against this learner.
# ---------------------------------------------------------------------------------------


def worst_case_direction(
    model: SingleHeadAttention, tolerance: Any, *, v_push: str = "shrink"
) -> Any:
    """A rule that knows the truth and the learner and pushes each answer to hurt most.

    Length-1 answers are pushed towards 0 (``v_push="shrink"``: |v_hat_i| smaller, which
    the estimate divides by) or away from it (``"grow"``: then e_i, e_j align with e_f in
    the numerator tau (1 + a + alpha b), which is what hurts most for scores near +1/2).
    For a probe [b u + a e_j; a e_j] it evaluates the learner's estimate of u^T W e_j at
    both ends of the allowed range (with the v_hat it forced) and picks the worse. Run both
    settings to get the worst case of this family.

    >>> import verified_attn as va
    >>> rule = worst_case_direction(va.SingleHeadAttention([[0]], [2]), 0.1)
    >>> rule(np.array([[1.0]]), Fraction(19, 10), Fraction(21, 10))
    -1
    """
    tau = float(to_fraction(tolerance, name="tolerance"))
    W = model.float_parameters()["W"]
    v = model.float_parameters()["v"]
    if v_push not in ("shrink", "grow"):
        raise InvalidArgument(f"v_push must be 'shrink' or 'grow', got {v_push!r}")
    push = -1 if v_push == "shrink" else 1
    v_hat = v + push * np.where(v >= 0, 1.0, -1.0) * tau

    def rule(X: np.ndarray, lo: Fraction, hi: Fraction) -> int:
        if X.shape[0] == 1:
            return push * (1 if float(X[0] @ v) >= 0 else -1)
        if X.shape[0] != 2:
            return 1
        j = int(np.argmax(np.abs(X[1])))
        a = float(X[1, j])
        u_b = X[0] - X[1]
        target = float(u_b @ W @ X[1]) / a  # b u^T W e_j
        best, pick = -1.0, 1
        for s, y in ((-1, float(lo)), (1, float(hi))):
            den = float(u_b @ v_hat)
            alpha = (y - a * v_hat[j]) / den if den != 0 else 0.5
            alpha = min(max(alpha, 1e-300), 1 - 1e-16)
            est = min(max(math.log(alpha) - math.log1p(-alpha), -0.5), 0.5) / a
            if abs(est - target) > best:
                best, pick = abs(est - target), s
        return pick

    return rule


def worst_case_oracle(
    model: SingleHeadAttention, tolerance: Any, *, v_push: str = "shrink", **kwargs: Any
) -> Oracle:
    """A certified oracle for ``model`` behind the worst-case adversary.

    >>> import verified_attn as va
    >>> o = worst_case_oracle(va.SingleHeadAttention([[0]], [2]), 0.1)
    >>> o.query([[1]])   # the float next to 1.9 that is within 0.1 of 2 (1.9 is not)
    1.9000000000000001
    """
    from verified_attn.oracle_wrappers import NoisyOracle

    return NoisyOracle(
        Oracle(model, "certified"),
        tolerance,
        "worst-case",
        direction=worst_case_direction(model, tolerance, v_push=v_push),
        **kwargs,
    )

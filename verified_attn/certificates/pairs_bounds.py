"""The counterexample rules that rest on a derived error bound or a norm inequality.

>>> from fractions import Fraction
>>> from verified_attn.certificates.pairs_bounds import derived_bound
>>> bound = derived_bound(Fraction(1, 100), Fraction(1), Fraction(1), Fraction(1, 2), Fraction(1))
>>> round(float(bound.mid()), 6)
0.182457

Each rule takes the parsed certificate as :func:`verified_attn.certificates.pairs.verify_pair`
passes it (the proof, d, the two models' parameters and models, the sequences, the
tolerance), re-checks it in exact rationals and :data:`~.pairs_models.PRECISION`-bit balls,
and returns its summary line (``paper-design``, ``adversary`` and ``nuclear-gap``: see
:mod:`verified_attn.certificates.pairs`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.certificates import kernel
from verified_attn.certificates.pairs_models import (
    arb,
    ball_value,
    exact_rank,
    need,
    sequence_key,
    vec,
    with_prec,
)
from verified_attn.design import paper_noisy_queries
from verified_attn.errors import CertificateError

__all__ = ["derived_bound", "rule_adversary", "rule_nuclear_gap", "rule_paper_design"]


def derived_bound(
    tau: Fraction, mu: Fraction, wbar: Fraction, a: Fraction, b: Fraction
) -> flint.arb:
    """L tau (1 + a + sigmoid(1/2) b) / (b (mu - tau)) / (a b), L = 2 + e^{1/2} + e^{-1/2}."""
    half = flint.arb(1) / 2
    L = 2 + half.exp() + (-half).exp()
    s_plus = 1 / (1 + (-half).exp())
    at, am, aa, ab = arb(tau), arb(mu), arb(a), arb(b)
    return L * at * (1 + aa + s_plus * ab) / (ab * (am - at)) / (aa * ab)


def _noise_figures(proof: Any) -> tuple[Fraction, ...]:
    return tuple(
        kernel.rational(kernel.get(proof, k), f"proof.{k}")
        for k in ("tau", "mu", "w_bound", "a", "b")
    )


def rule_paper_design(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is not None and "v" in p1 and seqs is not None, "paper-design")
    tau, mu, wbar, a, b = _noise_figures(proof)
    if tol != tau:
        raise CertificateError("the relation's tolerance must be proof.tau")
    if sorted(map(sequence_key, paper_noisy_queries(d, a, b))) != sorted(map(sequence_key, seqs)):
        raise CertificateError("the sequences are not the paper's design at the stated a, b")
    for name, p in (("first", p1), ("second", p2)):
        if sum((x * x for r in p["W"] for x in r), Fraction(0)) > wbar * wbar:
            raise CertificateError(f"{name} has ||W||_F > Wbar")
    small = [i for i in range(d) if abs(p1["v"][i]) < mu]
    if not small:
        raise CertificateError("no |v_i| < mu: the margin is not violated")
    gap = max(
        abs(x - y)
        for r1, r2 in zip(p1["W"], p2["W"], strict=True)
        for x, y in zip(r1, r2, strict=True)
    )
    bound = with_prec(lambda: derived_bound(tau, mu, wbar, a, b))
    if not with_prec(lambda: arb(gap) > 2 * bound):
        raise CertificateError(
            f"the W differ by {gap}, not more than twice the derived bound {bound}"
        )
    return (
        f"design: the paper's d^2 + d probes (a = {a}, b = {b}); ||W||_F <= {wbar} in both; "
        f"|v_{small[0]}| = {abs(p1['v'][small[0]])} < mu = {mu}; max |W1 - W2| entry = {gap} > "
        f"twice the derived per-entry bound {float(bound.mid()):.6g} at tau = {tau}"
    )


def rule_adversary(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is not None and "v" in p1 and seqs is not None, "adversary")
    tau, mu, wbar, a, b = _noise_figures(proof)
    answers = [
        kernel.rational(x, f"proof.answers[{i}]")
        for i, x in enumerate(
            kernel.as_list(kernel.get(proof, "answers"), "proof.answers", len(seqs))
        )
    ]

    def within() -> bool:
        return all(
            abs(ball_value(m1, X) - arb(y)) <= arb(tau) for X, y in zip(seqs, answers, strict=True)
        )

    if not with_prec(within):
        raise CertificateError(f"an adversary answer is not within tau = {tau} of first")
    i, j = (
        kernel.as_int(x, "proof.entry", high=d - 1)
        for x in kernel.as_list(kernel.get(proof, "entry"), "proof.entry", 2)
    )
    frac = kernel.rational(kernel.get(proof, "fraction"), "proof.fraction")
    err = abs(p2["W"][i][j] - p1["W"][i][j])
    bound = with_prec(lambda: derived_bound(tau, mu, wbar, a, b))
    ok = with_prec(lambda: bool(arb(err) >= arb(frac) * bound and arb(err) <= bound))
    if not ok:
        raise CertificateError(
            f"the estimate's error {err} is not in [{frac}, 1] x the bound {bound}"
        )
    ratio = float(err) / float(bound.mid())
    return (
        f"adversary: {len(seqs)} answers within tau = {tau} of first; the learner's estimate "
        f"errs at W[{i}][{j}] by {float(err):.6g} = {ratio:.5f} x the derived bound "
        f"{float(bound.mid()):.6g} (>= {frac}); so the bound cannot be lowered by 1 %"
    )


def rule_nuclear_gap(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is not None and "v" in p1 and seqs is not None, "nuclear-gap")
    if p1["v"] != p2["v"]:
        raise CertificateError("nuclear-gap: the heads must share v")
    if exact_rank(p1["W"]) != 1:
        raise CertificateError("nuclear-gap: first's W must have rank 1 (then ||W||_* = ||W||_F)")
    parts = kernel.as_list(kernel.get(proof, "decomposition"), "proof.decomposition")
    if len(parts) > d:
        raise CertificateError(f"proof.decomposition has more than d = {d} terms")
    R = [list(row) for row in p2["W"]]
    terms = []
    for t, entry in enumerate(_pairs(parts)):
        P = vec(entry[0], f"proof.decomposition[{t}][0]", d)
        Q = vec(entry[1], f"proof.decomposition[{t}][1]", d)
        terms.append((P, Q))
        R = [[R[a][b] - P[a] * Q[b] for b in range(d)] for a in range(d)]

    def sq(xs: list[Fraction]) -> flint.arb:
        return arb(sum((x * x for x in xs), Fraction(0))).sqrt()

    def gap() -> tuple[bool, float, float]:
        upper = sum((sq(P) * sq(Q) for P, Q in terms), flint.arb(0))
        upper += flint.arb(d).sqrt() * sq([x for row in R for x in row])
        norm = sq([x for row in p1["W"] for x in row])
        return bool(upper < norm), float(upper.mid()), float(norm.mid())

    ok, upper, norm = with_prec(gap)
    if not ok:
        raise CertificateError(
            f"nuclear-gap: the bound ||W'||_* <= {upper:.6g} is not below ||W||_* = {norm:.6g}"
        )
    return (
        f"nuclear: ||W'||_* <= {upper:.6g} (rational rank-one decomposition + sqrt(d) ||R||_F) "
        f"< ||W||_* = ||W||_F = {norm:.6g} (rank W = 1), while the pair agrees on every recorded "
        "query: W is not the nuclear-norm minimiser for these measurements"
    )


def _pairs(parts: list[Any]) -> list[list[Any]]:
    return [kernel.as_list(e, f"proof.decomposition[{t}]", 2) for t, e in enumerate(parts)]

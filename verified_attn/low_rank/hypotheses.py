"""Theorem 5.1's hypotheses, each with an exact counterexample.

>>> from verified_attn.low_rank.hypotheses import rank_exceeds
>>> cx = rank_exceeds(d=3, seed=0)
>>> cx.figures["ranks"], cx.check()
('1 and 2', True)

``rank_exceeds``: the rank-r skeleton (:mod:`verified_attn.low_rank.skeleton`) measures
``u^T W b`` for pairs (u, b) it chooses; with p orthogonal to every u it pairs with a unit
vector b and q orthogonal to every generic b, ``W' = W + p q^T`` has rank r + 1 and the
same value of every measured ``u^T W' b``, so the two heads agree exactly on all of the
skeleton's learning queries; the skeleton would return the rank-r W for both. Its one
rank test query (a generic u, b) tells them apart: that is why it is asked.

``nuclear_below_constant``: the paper's nuclear-norm method with m = C r (2d)
measurements, C below the measured constant (``benchmarks/low_rank.py``: the 95 % success
point is C ~ 2.75 at d = 16, r = 1, and grows with d for r = 1; the smallest measured is
1.5, at d = 16, r = 4; here C <= 1.5, default 1, i.e. m = 2dr). The learner returns a wrong W; the counterexample makes that exact: a
second head whose W' agrees with W on every measurement (exactly, after a rational
projection onto the measurements' affine space) and has a smaller nuclear norm than W
(an upper bound from a rational rank-one decomposition, against ||W||_* = ||W||_F for
rank-1 W, certified in balls), so W is not the program's minimiser at this m.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.counterexample import Counterexample, Proof, model_dict
from verified_attn.errors import InvalidArgument
from verified_attn.models import SingleHeadAttention
from verified_attn.serialize import dump_rational
from verified_attn.validation import check_int

__all__ = ["nuclear_below_constant", "rank_exceeds"]


def _fmpq_mat(rows: list[list[Fraction]]) -> flint.fmpq_mat:
    n, m = len(rows), len(rows[0])
    return flint.fmpq_mat(n, m, [flint.fmpq(q.numerator, q.denominator) for r in rows for q in r])


def _fr(x: Any) -> Fraction:
    return Fraction(int(x.p), int(x.q))


def _null_vector(vectors: list[list[Fraction]], d: int) -> list[Fraction]:
    """A nonzero rational vector orthogonal to all ``vectors`` (InvalidArgument if none)."""
    if not vectors:
        return [Fraction(int(i == 0)) for i in range(d)]
    import sympy

    basis = sympy.Matrix(
        [[sympy.Rational(x.numerator, x.denominator) for x in row] for row in vectors]
    ).nullspace()
    if not basis:
        raise InvalidArgument("no vector is orthogonal to all of them (d too small for the rank)")
    return [Fraction(int(x.p), int(x.q)) for x in basis[0]]


def _low_rank_head(d: int, r: int, seed: int) -> tuple[list[list[Fraction]], list[Fraction]]:
    rng = np.random.default_rng(seed)
    while True:
        K = [[Fraction(int(rng.integers(-3, 4))) for _ in range(d)] for _ in range(r)]
        Q = [[Fraction(int(rng.integers(-3, 4)), 2) for _ in range(d)] for _ in range(r)]
        W = [
            [sum((K[t][i] * Q[t][j] for t in range(r)), Fraction(0)) for j in range(d)]
            for i in range(d)
        ]
        if _fmpq_mat(W).rank() == r:
            break
    v = [Fraction(int(rng.integers(-3, 4))) for _ in range(d)]
    v[int(rng.integers(d))] = Fraction(2)
    return W, v


def rank_exceeds(*, d: int = 3, seed: int = 0, rank: int = 1) -> Counterexample:
    """A rank r + 1 and a rank r head agreeing on every skeleton learning query."""
    from verified_attn.low_rank.learner import learn_low_rank
    from verified_attn.oracle import Oracle

    r = check_int(rank, "rank", low=1, high=d - 1)
    W, v = _low_rank_head(d, r, seed)
    first = SingleHeadAttention(W, v)
    oracle = Oracle(first, "exact")
    learn_low_rank(oracle, rank=r, verify=0, seed=seed)
    learning = [e for e in oracle.transcript if e.phase != "rank"]
    tests = [e for e in oracle.transcript if e.phase == "rank"]
    if len(tests) != 1:
        raise AssertionError("the rank-given skeleton asks exactly one rank test")
    pairs = []
    for e in learning:
        X = [list(row) for row in e.sequence]
        if len(X) == 2:
            b = X[1]
            pairs.append(([X[0][i] - b[i] for i in range(d)], b))
    is_unit = [sum(x != 0 for x in b) == 1 for _, b in pairs]
    q = _null_vector([b for (_, b), unit in zip(pairs, is_unit, strict=True) if not unit], d)
    p = _null_vector([u for (u, _), unit in zip(pairs, is_unit, strict=True) if unit], d)
    for scale in (Fraction(1), Fraction(2), Fraction(1, 3), Fraction(5)):
        W2 = [[W[i][j] + scale * p[i] * q[j] for j in range(d)] for i in range(d)]
        if _fmpq_mat(W2).rank() == r + 1:
            break
    else:
        raise InvalidArgument("no rank r + 1 partner for this seed; try another seed")
    for u, b in pairs:
        if sum(u[i] * p[i] for i in range(d)) * sum(q[j] * b[j] for j in range(d)) != 0:
            raise AssertionError("the perturbation p q^T is seen by a skeleton measurement")
    second = SingleHeadAttention(W2, v)
    seqs = [[list(row) for row in e.sequence] for e in learning]
    test = [list(row) for row in tests[0].sequence]
    proof = Proof(
        "recorded-queries",
        f"W' = W + p q^T with p orthogonal to every u the skeleton pairs with a unit b and "
        f"q orthogonal to every generic b: every measured u^T W' b equals u^T W b, so the "
        f"{len(seqs)} learning queries agree; rank W = {r}, rank W' = {r + 1}; the rank "
        "test query tells them apart",
        True,
        {
            "ranks": [r, r + 1],
            "differ": [[dump_rational(x) for x in row] for row in test],
        },
    )
    return Counterexample(
        "thm-5.1",
        "rank-exceeds",
        d,
        seed,
        f"The rank hypothesis needs the skeleton's rank test: a rank {r + 1} head and a "
        f"rank {r} head agree exactly on all {len(seqs)} learning queries of the rank-{r} "
        "skeleton; only the test query separates them.",
        first,
        second,
        "equal",
        seqs,
        proof,
        figures={"ranks": f"{r} and {r + 1}", "learning queries": len(seqs)},
        payload={"first": model_dict(first), "second": model_dict(second)},
    )


def nuclear_below_constant(
    *, d: int = 3, seed: int = 0, oversampling: float = 1.0
) -> Counterexample:
    """The nuclear-norm method at m = C r (2d), C below its measured constant: W is not the minimiser."""
    import math

    import mpmath

    from verified_attn.low_rank.learner import learn_low_rank
    from verified_attn.oracle import Oracle

    r = 1
    c = float(oversampling)
    if not 0 < c <= 1.5:
        raise InvalidArgument(
            f"oversampling must be in (0, 1.5] (below every measured 95 % point), got {c}"
        )
    m = min(d * d, max(1, math.ceil(c * r * 2 * d)))
    tried = []
    for attempt in range(20):
        W, v = _low_rank_head(d, r, seed + 1000 * attempt)
        first = SingleHeadAttention(W, v)
        oracle = Oracle(first, "float")
        rec = learn_low_rank(
            oracle, rank=r, method="nuclear", measurements=m, verify=0, seed=seed + attempt
        )
        Wt = np.array([[float(x) for x in row] for row in W])
        rel = float(np.linalg.norm(np.asarray(rec.W, dtype=float) - Wt) / np.linalg.norm(Wt))
        tried.append(rel)
        if rel <= 1e-3:
            continue  # the method succeeded on this instance: no failure to show
        entries = [e for e in oracle.transcript if e.phase not in ("v",) and len(e.sequence) == 2]
        pairs = [
            ([e.sequence[0][i] - e.sequence[1][i] for i in range(d)], list(e.sequence[1]))
            for e in entries
        ]
        X = _project(np.asarray(rec.W, dtype=float), W, pairs, d)
        if X is None:
            continue
        decomposition, upper = _nuclear_upper(X, d)
        frob = mpmath.sqrt(
            sum((mpmath.mpf(x.numerator) / x.denominator) ** 2 for row in W for x in row)
        )
        if not upper < frob * (1 - mpmath.mpf(10) ** -6):
            continue
        return _nuclear_gap_counterexample(
            d, seed, c, m, first, SingleHeadAttention(X, v), oracle, len(pairs),
            decomposition, (rel, upper, frob), tried,
        )
    raise InvalidArgument(
        f"the nuclear-norm method succeeded (or gave no certified gap) on 20 instances at "
        f"C = {c}, d = {d}: errors {[f'{e:.2g}' for e in tried]}; lower the oversampling"
    )


def _project(
    Z: np.ndarray, W: list[list[Fraction]], pairs: list[Any], d: int
) -> list[list[Fraction]] | None:
    """Z rounded to rationals, moved exactly onto {X : u^T X b = u^T W b for every pair}."""
    grid = 2**30
    Zq = [[Fraction(round(float(x) * grid), grid) for x in row] for row in Z]
    rows = [[u[i] * b[j] for i in range(d) for j in range(d)] for u, b in pairs]
    A = _fmpq_mat(rows)
    w = _fmpq_mat([[x] for row in W for x in row])
    z = _fmpq_mat([[x] for row in Zq for x in row])
    G = A * A.transpose()
    if G.rank() < len(pairs):
        return None
    x = z + A.transpose() * G.solve(A * w - A * z)
    return [[_fr(x[i * d + j, 0]) for j in range(d)] for i in range(d)]


def _nuclear_upper(X: list[list[Fraction]], d: int) -> tuple[list[Any], Any]:
    """A rational decomposition X = sum P_i Q_i^T + R and sum ||P_i|| ||Q_i|| + sqrt(d) ||R||_F."""
    import mpmath

    Xf = np.array([[float(x) for x in row] for row in X])
    U, S, Vt = np.linalg.svd(Xf)
    grid = 2**40
    decomposition = []
    R = [list(row) for row in X]
    for i in range(d):
        if S[i] <= 1e-12 * S[0]:
            continue
        P = [Fraction(round(float(S[i] * U[a, i]) * grid), grid) for a in range(d)]
        Q = [Fraction(round(float(Vt[i, b]) * grid), grid) for b in range(d)]
        decomposition.append((P, Q))
        R = [[R[a][b] - P[a] * Q[b] for b in range(d)] for a in range(d)]
    with mpmath.workdps(50):
        total = mpmath.mpf(0)
        for P, Q in decomposition:
            total += mpmath.sqrt(_sq(P)) * mpmath.sqrt(_sq(Q))
        total += mpmath.sqrt(d) * mpmath.sqrt(_sq([x for row in R for x in row]))
    return decomposition, total


def _sq(xs: list[Fraction]) -> Any:
    import mpmath

    s = sum((x * x for x in xs), Fraction(0))
    return mpmath.mpf(s.numerator) / s.denominator


def _nuclear_gap_counterexample(
    d: int,
    seed: int,
    c: float,
    m: int,
    first: SingleHeadAttention,
    second: SingleHeadAttention,
    oracle: Any,
    n_pairs: int,
    decomposition: Any,
    figures: tuple[float, Any, Any],
    tried: list[float],
) -> Counterexample:
    """The counterexample of one instance where W' beats W's nuclear norm on W's measurements."""
    rel, upper, frob = figures
    seqs = [[list(row) for row in e.sequence] for e in oracle.transcript]
    proof = Proof(
        "nuclear-gap",
        f"W' agrees with W on all {n_pairs} measurements <a_k b_k^T, .> (exactly) and "
        f"||W'||_* <= {float(upper):.6g} < ||W||_* = ||W||_F = {float(frob):.6g} "
        "(rank-1 W): W is not the nuclear-norm minimiser at this m",
        True,
        {
            "rank": 1,
            "decomposition": [
                [[dump_rational(x) for x in P], [dump_rational(x) for x in Q]]
                for P, Q in decomposition
            ],
        },
    )
    failure = (
        f"nuclear-norm method with m = {m} = ceil({c} r (2d)) measurements (d = {d}, r = 1): "
        f"relative Frobenius error {rel:.3g} > 1e-3"
    )
    return Counterexample(
        "thm-5.1",
        "nuclear-below-constant",
        d,
        seed,
        f"Below the measured constant (C = {c} <= 1.5, the smallest 95 % point) the nuclear-norm program's "
        "minimiser is not W: an exact head W' agrees on every measurement with a smaller "
        "nuclear norm, and the learner returns a wrong W.",
        first,
        second,
        "equal",
        seqs,
        proof,
        failure=failure,
        figures={
            "m": m,
            "C": c,
            "relative error": f"{rel:.3g}",
            "||W'||_* upper": f"{float(upper):.6g}",
            "||W||_*": f"{float(frob):.6g}",
            "instances tried": len(tried),
            "of them recovered (error <= 1e-3)": sum(e <= 1e-3 for e in tried),
        },
        payload={"first": model_dict(first), "second": model_dict(second)},
    )

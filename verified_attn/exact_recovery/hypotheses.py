"""Theorem 4.1's hypotheses, each with an exact counterexample.

>>> from verified_attn.exact_recovery.hypotheses import one_query_short
>>> cx = one_query_short(d=2, seed=0)
>>> len(cx.sequences), cx.relation, cx.check()
(5, 'equal', True)

``v_zero``: v = 0, two different W, f = 0 on every sequence. ``one_query_short``: the
learner's own design (:func:`verified_attn.design.default_design`) with one of its
length-2 probes [e_j + u_k; e_j] left out; the left-out probe alone measures entry (k, j)
of U^T W, so ``W' = W + U^{-T} e_k e_j^T delta`` changes only that entry and every other
answer is identical (exact rationals, checked with ``==``). With a length-1 query [e_i]
left out (``left_out="v"``), v_i is free but every probe's answer depends on v, so
keeping them requires ``u_k^T W' e_j = logit((sigmoid(s) u_k^T v + v_j - v'_j) / u_k^T
v')``, irrational in general: the pair is then *certified*, not exact (W' rounded to
2^-300, agreement shown to 2^-200 in balls). ``design_orthogonal``: a user design whose
column k has u_k^T v = 0; its probes return v_j whatever W is, so ``W' = W + U^{-T} e_k
r^T`` agrees on all d^2 + d queries.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import mpmath
import numpy as np

from verified_attn.arithmetic import get_arithmetic
from verified_attn.counterexample import Counterexample, Proof, model_dict
from verified_attn.design import default_design, design_queries
from verified_attn.errors import InvalidArgument
from verified_attn.models import SingleHeadAttention
from verified_attn.serialize import dump_rational
from verified_attn.validation import check_choice

__all__ = ["design_orthogonal", "one_query_short", "random_head", "v_zero"]

THEOREM = "thm-4.1"


def _q(rng: np.random.Generator) -> Fraction:
    return Fraction(int(rng.integers(-4, 5)), int(rng.integers(1, 4)))


def _matrix(d: int, rng: np.random.Generator) -> list[list[Fraction]]:
    return [[_q(rng) for _ in range(d)] for _ in range(d)]


def random_head(d: int, seed: int) -> tuple[list[list[Fraction]], list[Fraction]]:
    """A seeded head (W, v) with small rational entries and v != 0."""
    rng = np.random.default_rng(seed)
    W = _matrix(d, rng)
    v = [_q(rng) for _ in range(d)]
    v[int(rng.integers(d))] = Fraction(int(rng.choice([-2, -1, 1, 2])))
    return W, v


def _fmpq_mat(rows: list[list[Fraction]]) -> flint.fmpq_mat:
    n, m = len(rows), len(rows[0])
    return flint.fmpq_mat(n, m, [flint.fmpq(q.numerator, q.denominator) for r in rows for q in r])


def _rows(M: flint.fmpq_mat) -> list[list[Fraction]]:
    return [
        [Fraction(int(M[i, j].p), int(M[i, j].q)) for j in range(M.ncols())]
        for i in range(M.nrows())
    ]


def _u_rows(U: list[list[Fraction]]) -> list[list[str]]:
    return [[dump_rational(x) for x in row] for row in U]


def v_zero(*, d: int = 3, seed: int = 0) -> Counterexample:
    """Two heads with v = 0 and different W: f = 0 on every sequence."""
    rng = np.random.default_rng(seed)
    W1 = _matrix(d, rng)
    W2 = _matrix(d, rng)
    while W2 == W1:
        W2 = _matrix(d, rng)
    zero = [Fraction(0)] * d
    first, second = SingleHeadAttention(W1, zero), SingleHeadAttention(W2, zero)
    proof = Proof(
        "zero-value",
        "v = 0 in both heads, so f(X) = sum_i alpha_i x_i^T v = 0 on every sequence of "
        "every length, whatever W is",
        True,
    )
    return Counterexample(
        THEOREM,
        "v-zero",
        d,
        seed,
        "Without v != 0, W is not identifiable: two heads with different W and v = 0 are "
        "equal on every sequence.",
        first,
        second,
        "equal",
        None,
        proof,
        payload={"first": model_dict(first), "second": model_dict(second)},
    )


def one_query_short(*, d: int = 3, seed: int = 0, left_out: str = "W") -> Counterexample:
    """The learner's design with one query left out: two heads agreeing on the rest."""
    left_out = check_choice(left_out, "left_out", ("W", "v"))
    W, v = random_head(d, seed)
    rng = np.random.default_rng(seed + 1)
    arith = get_arithmetic("exact")
    design = default_design(arith, [arith.rational(x) for x in v], d, affine=False)
    U = design.U
    if any(s != 1 for row in design.scales for s in row):  # the default design's scales
        raise AssertionError("the default design has unit probe scales")
    queries = design_queries(U, d)
    if left_out == "W":
        k, j = int(rng.integers(d)), int(rng.integers(d))
        delta = Fraction(int(rng.choice([-2, -1, 1, 2])), int(rng.integers(1, 3)))
        E = [[delta if (a, b) == (k, j) else Fraction(0) for b in range(d)] for a in range(d)]
        change = _rows(_fmpq_mat(U).transpose().inv() * _fmpq_mat(E))
        W2 = [[W[a][b] + change[a][b] for b in range(d)] for a in range(d)]
        key: tuple[Any, ...] = ("W", k, j)
        first, second = SingleHeadAttention(W, v), SingleHeadAttention(W2, v)
        relation, tol, exact = "equal", None, True
        what = (
            f"the probe [e_{j} + u_{k}; e_{j}] alone measures entry ({k}, {j}) of U^T W; "
            f"W' = W + U^(-T) e_{k} e_{j}^T ({delta}) changes only that entry, so the "
            f"other {d * d + d - 1} answers are identical"
        )
    else:
        i = int(rng.integers(d))
        v2 = list(v)
        v2[i] += Fraction(1, 64)
        W2 = _refit_w(W, v, v2, U, d)
        key = ("v", i)
        first, second = SingleHeadAttention(W, v), SingleHeadAttention(W2, v2)
        relation, tol, exact = "within", Fraction(1, 2**200), False
        what = (
            f"with [e_{i}] left out, v_{i} is free (+1/64 here), but every probe depends on "
            "v: the exact partner needs W' with u_k^T W' e_j = logit(...) (irrational); "
            "W' is given rounded to 2^-300 and agreement shown to 2^-200 (certified, not "
            "exact)"
        )
    kept = [X for name, X in queries if name != key]
    proof = Proof(
        "design-queries",
        what,
        True,
        {"U": _u_rows(U), "left_out": list(key), "orthogonal": None},
    )
    return Counterexample(
        THEOREM,
        "one-query-short",
        d,
        seed,
        f"d^2 + d queries are needed for this design: with the {key[0]} query "
        f"{list(key[1:])} left out, two different heads agree on the other "
        f"{d * d + d - 1}.",
        first,
        second,
        relation,
        kept,
        proof,
        tolerance=tol,
        exact=exact,
        figures={"queries kept": d * d + d - 1, "left out": str(list(key))},
        payload={"first": model_dict(first), "second": model_dict(second)},
    )


def _refit_w(
    W: list[list[Fraction]], v: list[Fraction], v2: list[Fraction], U: Any, d: int
) -> list[list[Fraction]]:
    """W' keeping every probe's answer when v becomes v2 (rounded to 2^-300)."""
    S = _rows(_fmpq_mat(U).transpose() * _fmpq_mat(W))  # S[k][j] = u_k^T W e_j
    S2 = [[Fraction(0)] * d for _ in range(d)]
    with mpmath.workdps(150):
        for k in range(d):
            uv = sum((U[t][k] * v[t] for t in range(d)), Fraction(0))
            uv2 = sum((U[t][k] * v2[t] for t in range(d)), Fraction(0))
            for j in range(d):
                s = mpmath.mpf(S[k][j].numerator) / S[k][j].denominator
                sig = 1 / (1 + mpmath.exp(-s))
                target = (sig * _mp(uv) + _mp(v[j] - v2[j])) / _mp(uv2)
                if not 0 < target < 1:
                    raise InvalidArgument(
                        "no partner head exists for this seed (a probe's weight would leave "
                        "(0, 1)); try another seed"
                    )
                s2 = mpmath.log(target / (1 - target))
                S2[k][j] = Fraction(int(mpmath.nint(s2 * mpmath.mpf(2) ** 300)), 2**300)
    return _rows(_fmpq_mat(U).transpose().inv() * _fmpq_mat(S2))


def _mp(q: Fraction) -> Any:
    return mpmath.mpf(q.numerator) / q.denominator


def design_orthogonal(*, d: int = 3, seed: int = 0) -> Counterexample:
    """A design column with u_k^T v = 0: two heads agreeing on all d^2 + d queries."""
    if d < 2:
        raise InvalidArgument(f"d must be >= 2 for design-orthogonal, got {d}")
    W, v = random_head(d, seed)
    rng = np.random.default_rng(seed + 2)
    m = next(t for t in range(d) if v[t] != 0)
    k = (m + 1) % d
    U = [[Fraction(int(a == b)) for b in range(d)] for a in range(d)]
    for t in range(d):
        U[t][k] = Fraction(0)
    U[k][k] = v[m]
    U[m][k] = -v[k]  # u_k = v_m e_k - v_k e_m: u_k^T v = 0, U invertible (v_m != 0)
    r = [Fraction(int(rng.integers(-3, 4))) for _ in range(d)]
    if not any(r):
        r[0] = Fraction(1)
    E = [[r[b] if a == k else Fraction(0) for b in range(d)] for a in range(d)]
    change = _rows(_fmpq_mat(U).transpose().inv() * _fmpq_mat(E))
    W2 = [[W[a][b] + change[a][b] for b in range(d)] for a in range(d)]
    first, second = SingleHeadAttention(W, v), SingleHeadAttention(W2, v)
    proof = Proof(
        "design-queries",
        f"u_{k}^T v = 0, so every probe [e_j + u_{k}; e_j] answers v_j whatever W is; "
        f"W' = W + U^(-T) e_{k} r^T (r = {[str(x) for x in r]}) changes only row {k} of "
        "U^T W, which no other probe sees: all d^2 + d answers are identical",
        True,
        {"U": _u_rows(U), "left_out": None, "orthogonal": k},
    )
    return Counterexample(
        THEOREM,
        "design-orthogonal",
        d,
        seed,
        f"The design needs u_k^T v != 0: with column {k} orthogonal to v, two heads with "
        f"different W agree exactly on all {d * d + d} design queries.",
        first,
        second,
        "equal",
        [X for _, X in design_queries(U, d)],
        proof,
        figures={"orthogonal column": k, "direction": f"U^(-T) e_{k} r^T"},
        payload={"first": model_dict(first), "second": model_dict(second)},
    )

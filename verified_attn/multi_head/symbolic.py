"""Prop 7.1, symbolically: when two multi-head parameterisations define the same map.

>>> from verified_attn.models import MultiHeadAttention
>>> m1 = MultiHeadAttention([([[1]], [2]), ([[1]], [3])])
>>> m2 = MultiHeadAttention([([[1]], [5])])
>>> proof = prove_same_map(m1, m2, seed=0)
>>> proof.holds, proof.difference
(True, 0)

Two ingredients, both derived rather than assumed:

* **Structure.** ``attention_output`` is linear in v, with coefficients that depend on
  (X, W) only (checked from the definition, with ``exp`` an opaque SymPy function, by
  :func:`linearity_in_v`). So ``f(X) = sum_h g(X, W_h)^T v_h`` where ``g(X, W) =
  X^T softmax(X W x_N)`` may be treated as an opaque function: heads with equal ``W`` get
  the same symbol, distinct ones independent symbols. If the two sums are identical as
  polynomials in those symbols, the maps agree on every sequence of every length.
* **Concrete exact values.** :func:`exact_same_value` decides ``f_1(X) == f_2(X)`` for a
  rational X with no tolerance: every score is rational, so with ``z = e^{1/L}`` (L the
  common denominator of all scores) each output is a rational function of z with rational
  coefficients; z is transcendental (Lindemann), so the outputs are equal iff the
  rational functions are (computed with flint polynomials). When L is huge (parameters
  from floats) the same test runs on sparse sums ``sum_s c_s e^s``, equal to 0 iff every
  ``c_s`` is (Lindemann-Weierstrass: the ``e^s`` for distinct rational s are linearly
  independent over Q).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.checks import SymbolicCheck
from verified_attn.errors import InvalidArgument
from verified_attn.models import (
    MultiHeadAttention,
    SingleHeadAttention,
    as_rational_sequence,
    attention_output,
)

__all__ = [
    "EquivalenceProof",
    "exact_same_value",
    "head_key",
    "head_matrices",
    "linearity_in_v",
    "opaque_form",
    "prove_same_map",
    "random_rational_sequence",
]


def head_key(W: sympy.Matrix) -> tuple[Fraction, ...]:
    """An exact, hashable key for a matrix (row-major Fractions).

    >>> head_key(sympy.Matrix([[1, sympy.Rational(1, 2)]]))
    (Fraction(1, 1), Fraction(1, 2))
    """
    return tuple(Fraction(int(x.p), int(x.q)) for x in W)


def opaque_form(
    model: MultiHeadAttention, symbols: dict[tuple[object, ...], sympy.Symbol] | None = None
) -> sympy.Expr:
    """``sum_h g(X, W_h)^T v_h`` with ``g_j`` opaque SymPy functions of (X, key of W_h).

    ``symbols`` maps each distinct W (by exact key) to its symbol; it is extended in place,
    so two models share symbols for equal matrices.

    >>> m = MultiHeadAttention([([[1]], [2]), ([[1]], [-2])])
    >>> opaque_form(m)
    0
    """
    if symbols is None:
        symbols = {}
    X = sympy.Symbol("X")
    total = sympy.Integer(0)
    for m in model.head_models:
        # Heads share g exactly when they share the score map: W and (affine) c both equal.
        W, v = m.W, m.v
        c = head_key(m.c)
        key = head_key(W) if not any(c) else (*head_key(W), "c", *c)
        if key not in symbols:
            symbols[key] = sympy.Symbol(f"W{len(symbols) + 1}")
        w = symbols[key]
        for j in range(model.d):
            total += sympy.Function(f"g{j + 1}")(X, w) * v[j]
    return sympy.expand(total + model.beta)


def linearity_in_v(d: int, n: int) -> SymbolicCheck:
    """From :func:`attention_output`: f is linear in v, its coefficients free of v.

    Symbols for every entry of X (length n), W and v; ``exp`` is an opaque function E, so
    nothing about the exponential is used.

    >>> linearity_in_v(2, 2).holds
    True
    """
    xs = sympy.symbols(f"x0:{n * d}")
    rows = [list(xs[t * d : (t + 1) * d]) for t in range(n)]
    W = [list(r) for r in np.array(sympy.symbols(f"w0:{d * d}"), dtype=object).reshape(d, d)]
    v = list(sympy.symbols(f"v0:{d}"))
    E = sympy.Function("E")
    f = attention_output(rows, W, v, exp=E)
    coeffs = [sympy.diff(f, vj) for vj in v]
    free = all(not (c.free_symbols & set(v)) for c in coeffs)
    rest = sympy.cancel(sympy.together(f - sum(c * vj for c, vj in zip(coeffs, v, strict=True))))
    holds = free and rest == 0
    return SymbolicCheck(
        "linearity-in-v",
        f"attention_output (d={d}, N={n}, exp opaque) = g(X, W)^T v with g free of v",
        holds,
        f"coefficients free of v: {free}; remainder after removing the linear part: {rest}",
        {"d": d, "n": n},
    )


@functools.lru_cache(maxsize=256)
def head_matrices(m: SingleHeadAttention) -> tuple[flint.fmpq_mat, flint.fmpq_mat, flint.fmpq_mat]:
    """A head's exact (W, v, c) as flint matrices, from its public SymPy parameters.

    >>> W, v, c = head_matrices(SingleHeadAttention([[1, 2], [3, 4]], [1, -1]))
    >>> W[1, 0], v[1, 0], c[0, 0]
    (3, -1, 0)
    """

    def fmpq(M: sympy.Matrix) -> flint.fmpq_mat:
        return flint.fmpq_mat(M.rows, M.cols, [flint.fmpq(int(x.p), int(x.q)) for x in M])

    return fmpq(m.W), fmpq(m.v), fmpq(m.c)


def _scores_and_values(
    model: MultiHeadAttention, Xq: flint.fmpq_mat
) -> list[tuple[list[flint.fmpq], list[flint.fmpq]]]:
    n = Xq.nrows()
    last = flint.fmpq_mat(model.d, 1, [Xq[n - 1, k] for k in range(model.d)])
    out = []
    for m in model.head_models:
        W, v, c = head_matrices(m)
        scores = Xq * (W * last + c)
        values = Xq * v
        out.append(([scores[i, 0] for i in range(n)], [values[i, 0] for i in range(n)]))
    return out


ExpSum = dict[Fraction, Fraction]  # {s: c} stands for sum_s c e^s


def _mul(a: ExpSum, b: ExpSum) -> ExpSum:
    out: ExpSum = {}
    for s, c in a.items():
        for t, e in b.items():
            out[s + t] = out.get(s + t, Fraction(0)) + c * e
    return {s: c for s, c in out.items() if c != 0}


def _add(a: ExpSum, b: ExpSum) -> ExpSum:
    out = dict(a)
    for s, c in b.items():
        out[s] = out.get(s, Fraction(0)) + c
    return {s: c for s, c in out.items() if c != 0}


def _as_fraction(
    parts: list[tuple[list[flint.fmpq], list[flint.fmpq]]],
) -> tuple[ExpSum, ExpSum]:
    """The output ``sum_h (sum_i e^{s_i} p_i) / (sum_i e^{s_i})`` as (numerator, denominator)."""
    num: ExpSum = {}
    den: ExpSum = {Fraction(0): Fraction(1)}
    for scores, values in parts:
        hn: ExpSum = {}
        hd: ExpSum = {}
        for s, p in zip(scores, values, strict=True):
            key = Fraction(int(s.p), int(s.q))
            hn = _add(hn, {key: Fraction(int(p.p), int(p.q))})
            hd = _add(hd, {key: Fraction(1)})
        num, den = _add(_mul(num, hd), _mul(hn, den)), _mul(den, hd)
    return num, den


def _as_rational_function(
    parts: list[tuple[list[flint.fmpq], list[flint.fmpq]]], L: int
) -> tuple[flint.fmpq_poly, flint.fmpq_poly]:
    """The output ``sum_h (sum_i z^{L s_i} p_i) / (sum_i z^{L s_i})`` as num/den in z."""
    num, den = flint.fmpq_poly([0]), flint.fmpq_poly([1])
    for scores, values in parts:
        exps = [int(s * L) for s in scores]  # exact: L is a common denominator
        low = min(exps)
        coeff_n = [flint.fmpq(0)] * (max(exps) - low + 1)
        coeff_d = [flint.fmpq(0)] * (max(exps) - low + 1)
        for e, p in zip(exps, values, strict=True):
            coeff_n[e - low] += p
            coeff_d[e - low] += 1
        hn, hd = flint.fmpq_poly(coeff_n), flint.fmpq_poly(coeff_d)
        num, den = num * hd + hn * den, den * hd
    return num, den


_DENSE_LIMIT = 1 << 16  # largest per-head exponent span for the dense (flint) path


def exact_same_value(m1: MultiHeadAttention, m2: MultiHeadAttention, X: Any) -> bool:
    """Decide ``m1(X) == m2(X)`` exactly for a rational sequence X.

    >>> m1 = MultiHeadAttention([([[1]], [1])])
    >>> exact_same_value(m1, MultiHeadAttention([([[2]], [1])]), [[1], [2]])
    False
    >>> exact_same_value(m1, MultiHeadAttention([([[2]], [1])]), [[1]])
    True
    """
    if m1.d != m2.d:
        raise InvalidArgument(f"the models have different d: {m1.d} and {m2.d}")
    Xq = as_rational_sequence(X, m1.d)
    p1, p2 = _scores_and_values(m1, Xq), _scores_and_values(m2, Xq)
    L = 1
    for scores, _ in p1 + p2:
        for s in scores:
            L = math.lcm(L, int(s.q))
    span = max(int((max(sc) - min(sc)) * L) for sc, _ in p1 + p2)
    if span <= _DENSE_LIMIT:
        # Dense: with z = e^{1/L} (transcendental) both outputs are rational functions of z
        # with rational coefficients; equal values iff equal rational functions.
        n1, d1 = _as_rational_function(p1, L)
        n2, d2 = _as_rational_function(p2, L)
        b1, b2 = _fmpq_of(m1.beta), _fmpq_of(m2.beta)
        return (n1 + b1 * d1) * d2 == (n2 + b2 * d2) * d1
    # Sparse (scores with huge common denominators, e.g. from float parameters):
    # Lindemann-Weierstrass makes the e^s for distinct rational s linearly independent
    # over Q, so sum_s c_s e^s = 0 iff every collected c_s is 0.
    n1s, d1s = _as_fraction(p1)
    n2s, d2s = _as_fraction(p2)
    n1s = _add(n1s, _mul({Fraction(0): _frac(m1.beta)}, d1s))  # the output biases
    n2s = _add(n2s, _mul({Fraction(0): _frac(m2.beta)}, d2s))
    return not _add(_mul(n1s, d2s), {s: -c for s, c in _mul(n2s, d1s).items()})


def _frac(q: sympy.Rational) -> Fraction:
    return Fraction(int(q.p), int(q.q))


def _fmpq_of(q: sympy.Rational) -> flint.fmpq:
    return flint.fmpq(int(q.p), int(q.q))


def random_rational_sequence(d: int, n: int, rng: np.random.Generator) -> list[list[Fraction]]:
    """An n x d sequence of small random rationals (numerators in [-4, 4], den in 1..3).

    >>> len(random_rational_sequence(2, 3, np.random.default_rng(0)))
    3
    """
    return [
        [Fraction(int(rng.integers(-4, 5)), int(rng.integers(1, 4))) for _ in range(d)]
        for _ in range(n)
    ]


@dataclass(frozen=True)
class EquivalenceProof:
    """Why two multi-head models are the same map (or why the argument fails).

    ``opaque_first`` and ``opaque_second`` are the models as ``sum_h g(X, W_h)^T v_h`` with
    opaque g; ``difference`` their expanded difference (0 proves equality for every
    sequence length); ``concrete`` the exact checks ``(length, equal)`` on random
    rational sequences; ``holds`` requires all of it.
    """

    statement: str
    holds: bool
    opaque_first: sympy.Expr
    opaque_second: sympy.Expr
    difference: sympy.Expr
    linearity: SymbolicCheck
    concrete: list[tuple[int, bool]] = field(default_factory=list)
    symbols: dict[str, list[list[str]]] = field(default_factory=dict)
    #: The random rational sequences of the exact checks, in order (for certificates).
    sequences: list[list[list[Fraction]]] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return self.holds

    def text(self) -> str:
        """The proof in a few lines of plain text."""
        lines = [
            f"claim: {self.statement}",
            f"1. {self.linearity.statement}: {self.linearity.holds}",
            f"2. first model  = {self.opaque_first}",
            f"   second model = {self.opaque_second}",
            f"   difference   = {self.difference}"
            + ("  (identically zero: equal for every X and N)" if self.difference == 0 else ""),
            "   where g(X, W) = X^T softmax(X W x_N) and "
            + ", ".join(f"{k} = {v}" for k, v in self.symbols.items()),
            "3. exact checks on random rational sequences (length: equal): "
            + ", ".join(f"{n}: {ok}" for n, ok in self.concrete),
            f"holds: {self.holds}",
        ]
        return "\n".join(lines)


def prove_same_map(
    m1: MultiHeadAttention,
    m2: MultiHeadAttention,
    *,
    seed: int = 0,
    lengths: Sequence[int] = (1, 2, 3, 4, 5, 6),
) -> EquivalenceProof:
    """Prove ``m1`` and ``m2`` equal on every sequence, structurally and exactly.

    >>> a = MultiHeadAttention([([[1]], [2]), ([[3]], [1])])
    >>> b = MultiHeadAttention([([[3]], [1]), ([[1]], [2])])
    >>> prove_same_map(a, b).holds
    True
    >>> prove_same_map(a, MultiHeadAttention([([[3]], [1]), ([[1]], [3])])).holds
    False
    """
    for name, m in (("m1", m1), ("m2", m2)):
        if not isinstance(m, MultiHeadAttention):
            raise InvalidArgument(f"{name} must be a MultiHeadAttention, got {type(m).__name__}")
    if m1.d != m2.d:
        raise InvalidArgument(f"the models have different d: m1.d = {m1.d}, m2.d = {m2.d}")
    symbols: dict[tuple[object, ...], sympy.Symbol] = {}
    e1 = opaque_form(m1, symbols)
    e2 = opaque_form(m2, symbols)
    diff = sympy.expand(e1 - e2)
    lin = linearity_in_v(min(m1.d, 2), 2)
    rng = np.random.default_rng(seed)
    sequences = [random_rational_sequence(m1.d, n, rng) for n in lengths]
    concrete = [(len(X), exact_same_value(m1, m2, X)) for X in sequences]
    d = m1.d
    names = {
        str(sym): [[str(key[i * d + j]) for j in range(d)] for i in range(d)]
        for key, sym in symbols.items()
    }
    return EquivalenceProof(
        statement="f_1(X) = f_2(X) for every sequence X of every length N >= 1",
        holds=bool(diff == 0 and lin.holds and all(ok for _, ok in concrete)),
        opaque_first=e1,
        opaque_second=e2,
        difference=diff,
        linearity=lin,
        concrete=concrete,
        symbols=names,
        sequences=sequences,
    )

"""The canonical form of a ReLU FFN, and the query bound of learning it.

A bias-free FFN ``g(x) = w_o^T ReLU(A^T x)`` is, as a function, a linear part plus one
term ``c ReLU(u^T x)`` per distinct hyperplane direction u (normalised): equal functions
have equal canonical forms (:class:`ReluNetwork`), so a learned FFN is compared with ``==``.

>>> net = canonical_network(ReluFFN([[1, -1]], [1, 1]))    # |x| = x + 2 ReLU(-x)
>>> net.width
1
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import InvalidArgument
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.validation import check_int

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_DEPTH",
    "MAX_GRID",
    "THEOREM",
    "CanonicalNetwork",
    "ReluNetwork",
    "Vec",
    "canonical_network",
    "default_denominator_bound",
    "dot",
    "ffn_query_bound",
    "ffn_query_count",
    "network_of",
    "normalise",
]

THEOREM = "ffn/relu"
#: Bisections allowed per kink (and per segment end) before a plane is given up.
MAX_DEPTH = 60
#: Most attempts (random planes) a call may ask for (each doubles the grid), and the largest
#: initial grid: they size the bound, and a certificate checker reads no larger ones.
MAX_ATTEMPTS = 8
MAX_GRID = 1 << 10
Vec = tuple[Fraction, ...]


class CanonicalNetwork:
    """What both canonical forms (bias-free and biased) have: ``linear`` (length d) and
    ``neurons`` (one per distinct hyperplane)."""

    linear: tuple[Any, ...]
    neurons: tuple[Any, ...]

    @property
    def d(self) -> int:
        return len(self.linear)

    @property
    def width(self) -> int:
        """Number of distinct hyperplanes (canonical neurons)."""
        return len(self.neurons)


@dataclass(frozen=True)
class ReluNetwork(CanonicalNetwork):
    """``g(x) = linear^T x + sum_j gamma_j ReLU(n_j^T x)`` in canonical form.

    ``neurons`` is a sorted tuple of ``(n_j, gamma_j)``; each n_j has first nonzero entry 1
    and the n_j are distinct; every gamma_j != 0. Equal objects are equal functions.

    >>> net = ReluNetwork((Fraction(1),), ((((Fraction(1),), Fraction(2)),)))
    >>> net.value((Fraction(3),)), net.value((Fraction(-3),))
    (Fraction(9, 1), Fraction(-3, 1))
    """

    linear: Vec
    neurons: tuple[tuple[Vec, Fraction], ...]

    def value(self, x: Vec) -> Fraction:
        out = dot(self.linear, x)
        for n, gamma in self.neurons:
            z = dot(n, x)
            if z > 0:
                out += gamma * z
        return out

    def model(self) -> ReluFFN:
        """The network as a :class:`ReluFFN` (the linear term as ReLU(l^T x) - ReLU(-l^T x))."""
        cols = [list(n) for n, _ in self.neurons]
        out = [g for _, g in self.neurons]
        if any(self.linear):
            cols += [list(self.linear), [-a for a in self.linear]]
            out += [Fraction(1), Fraction(-1)]
        if not cols:  # g == 0: one dead neuron keeps the shapes valid
            cols, out = [[Fraction(0)] * self.d], [Fraction(0)]
        A = [[cols[k][i] for k in range(len(cols))] for i in range(self.d)]
        return ReluFFN(A, out)


def dot(a: Vec, b: Vec) -> Fraction:
    return sum((x * y for x, y in zip(a, b, strict=True)), Fraction(0))


def normalise(w: Vec) -> tuple[Vec, Fraction]:
    """(n, sigma) with w = sigma n and n's first nonzero entry 1."""
    sigma = next(x for x in w if x != 0)
    return tuple(x / sigma for x in w), sigma


def _fractions(M: sympy.MatrixBase) -> list[list[Fraction]]:
    return [[Fraction(int(x.p), int(x.q)) for x in row] for row in M.tolist()]


def network_of(d: int, linear: list[Fraction], terms: dict[Vec, Fraction]) -> ReluNetwork:
    neurons = tuple(sorted((n, g) for n, g in terms.items() if g != 0))
    return ReluNetwork(tuple(linear), neurons)


def canonical_network(model: ReluFFN | OneLayerTransformer) -> ReluNetwork:
    """The canonical form of a model's length-1 function, from its parameters.

    For a :class:`OneLayerTransformer` this is ``g(x) = T([x]) = w_o^T ReLU(A^T V^T x)``.

    >>> g = ReluFFN([[2, -1, 0]], [1, 4, 7])      # 1 ReLU(2x) + 4 ReLU(-x), dead 3rd
    >>> canonical_network(g)                        # = 6 ReLU(x) - 4 x
    ReluNetwork(linear=(Fraction(-4, 1),), neurons=(((Fraction(1, 1),), Fraction(6, 1)),))
    """
    if isinstance(model, OneLayerTransformer):
        model = model.ffn()
    if not isinstance(model, ReluFFN) or model.biased:
        what = "a biased ReluFFN" if isinstance(model, ReluFFN) else type(model).__name__
        raise InvalidArgument(f"model must be a bias-free ReluFFN or Transformer, got {what}")
    d = model.d
    A, w_o = _fractions(model.A), _fractions(model.w_o)
    linear = [Fraction(0)] * d
    terms: dict[Vec, Fraction] = {}
    for k in range(model.m):
        w = tuple(A[i][k] for i in range(d))
        c = w_o[k][0]
        if c == 0 or not any(w):
            continue  # a dead neuron
        n, sigma = normalise(w)
        # c ReLU(sigma z) = c|sigma| ReLU(z) for sigma > 0, c|sigma| (ReLU(z) - z) for sigma < 0.
        terms[n] = terms.get(n, Fraction(0)) + c * abs(sigma)
        if sigma < 0:
            linear = [a - c * abs(sigma) * b for a, b in zip(linear, n, strict=True)]
    return network_of(d, linear, terms)


def ffn_query_bound(d: int, width: int, *, grid: int = 1, attempts: int = 1) -> int:
    """The learning-query bound the FFN learner is held to, at canonical width ``width``.

    Sum over the attempts i < ``attempts`` (grid g_i = grid 2^i) of
    ``4(g_i + 1) + 2 width + (4 MAX_DEPTH + d - min(d, 2))(width + 2)``; see the module
    docstring for where each term comes from.

    >>> ffn_query_bound(5, 3), ffn_query_bound(1, 0)
    (1229, 488)
    """
    d = check_int(d, "d", low=1)
    width = check_int(width, "width", low=0)
    grid = check_int(grid, "grid", low=1)
    attempts = check_int(attempts, "attempts", low=1, high=MAX_ATTEMPTS)
    per_piece = 4 * MAX_DEPTH + d - min(d, 2)
    return sum(4 * (grid * 2**i + 1) + 2 * width + per_piece * (width + 2) for i in range(attempts))


def ffn_query_count(d: int, *, pieces: int, half_pieces: int = 0, probes: int, kinks: int) -> int:
    """Learning queries of one random plane of the bias-free learner:
    ``2 pieces + half_pieces + probes + (d - min(d, 2))(kinks + 1)``.

    Its two segments' line searches measure ``pieces`` pieces (2 queries each),
    ``half_pieces`` (1 each) and ``probes`` (1 each) and find ``kinks`` kinks in all; the
    two segments cross kinks + 1 cells (the second starts in the cone where the first one
    ends, whose piece and gradient it reuses), each of which costs d - 2 coordinate probes
    (the line gives G^T p and G^T q; d = 1: none).

    >>> ffn_query_count(16, pieces=3, half_pieces=4, probes=60, kinks=28)
    476
    """
    return 2 * pieces + half_pieces + probes + (d - min(d, 2)) * (kinks + 1)


def default_denominator_bound(arith: Arithmetic) -> int:
    """Certified answers are reconstructed with denominators <= 2^(precision/2 - 16)."""
    return 2 ** max((arith.precision or 256) // 2 - 16, 0)

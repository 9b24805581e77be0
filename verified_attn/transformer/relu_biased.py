"""Learning a one-hidden-layer ReLU network *with biases* from value queries.

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> from verified_attn.transformer.relu_biased import canonical_biased_network
>>> from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
>>> g = ReluFFN([[1, 2, -1], [1, -1, 0]], [3, -1, 2], a=[1, -2, 3], b=5)
>>> rec = learn_biased_relu_ffn(va.Oracle(g, "exact"))
>>> rec.network == canonical_biased_network(g), rec.exact, rec.verified
(True, True, True)
>>> rec.queries == biased_ffn_query_count(2, **rec.line_counts), rec.parameter_count
(True, 12)

The function ``g(x) = w_o^T ReLU(A^T x + a) + b`` is continuous and piecewise affine; neuron
k switches on the hyperplane ``{x : A_k^T x + a_k = 0}``. Its *canonical form* is

    g(x) = beta + l^T x + sum_j gamma_j ReLU(n_j^T x + c_j)

over the distinct hyperplanes (n_j scaled by a positive number so that its first nonzero
entry is 1, then sorted; every gamma_j != 0). Neuron order, positive rescaling, neurons
that never switch (A_k = 0: a constant w_k ReLU(a_k), including the ones a bias keeps
always on), zero output weights, duplicates and antipodal pairs
(``c ReLU(z) - c ReLU(-z) = c z``) all collapse into it; two networks are the same
function on R^d iff their canonical forms are equal (:func:`canonical_biased_network`).
Its free numbers: d + 1 per neuron (n_j less its unit entry, c_j, gamma_j) plus d + 1
for the affine part: ``(m' + 1)(d + 1)``, the ``parameter_count`` of a result.

The algorithm, on one random line ``L(t) = x_0 + t u`` (t in [-R, R]):

1. *Kinks along the line.* ``phi(t) = g(L(t))`` is piecewise linear; a *piece* (slope,
   intercept) costs 2 queries (at s and s + eps). Two pieces A, B at the ends of an
   interval meet at ``t* = (B_0 - A_0) / (A_1 - B_1)``, a rational found exactly; a probe
   just left of t* on A, then one just right of it on B, check that t* is the one kink in
   the interval (1 query each; a failed left probe already refutes it, so the right one is
   then not asked). Otherwise the interval is split at the failed probe (no query when it
   lies on the other end's piece, else 1 more point beside it: a *half piece*) or, every
   other time and when the end pieces do not meet inside, at a simple middle point by one
   probe (on an end's piece it narrows the interval, else a half piece there; float mode
   measures a whole piece, 2 queries). Equal pieces at both ends mean no kink there.
2. *Cells.* Inside piece j the network is affine, ``g = G_j^T x + beta_j``. The line gives
   ``G_j^T u`` and ``G_j^T x_0 + beta_j``; ``d - 1`` probes ``g(y + delta e_i)`` at a point y
   of the piece (whose value the piece already gives) fill in the rest.
3. *Neurons.* Across kink j the cell's affine function jumps by ``gamma_j (n_j^T x + c_j)``:
   the difference of the two cells' affine maps *is* the neuron, hyperplane and weight at
   once (orientation from the crossing direction). The affine part is cell 0's map less
   the neurons on whose positive side it lies.

*The count.* With S pieces, S_half half pieces and P probes measured and K kinks found,
the learning queries are ``2 S + S_half + P + (d - 1)(K + 1)``
(:func:`biased_ffn_query_count`; counted on the oracle, the golden tests compare the two).
Confirming a kink takes a value on each side of it (one probe alone is fooled by two kinks
on its far side), so P >= 2K: the ratio to the ``(d + 1)(m' + 1)`` free parameters is at
least ``1 + 2 m' / ((d + 1)(m' + 1))`` for this method, at most 1.2 only when
``m' (9 - d) <= d + 1`` or d >= 9.

Exact mode compares with ``==``; certified mode reconstructs each answer as the unique
rational with denominator at most the bound (an assumption the result records); float
mode runs the same steps with float64 answers, a relative tolerance deciding equal pieces
and passing checks, and reports its verification error. Every mode verifies the learned
network on fresh sequences; a failed check or verification retries on a new line with a
wider window, every query counted.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import (
    Arithmetic,
    simplest_rational_between,
)
from verified_attn.errors import InvalidArgument, ModelClassMismatch
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.oracle import Oracle
from verified_attn.transformer.common import rational_answer
from verified_attn.transformer.relu_network import CanonicalNetwork, default_denominator_bound

__all__ = [
    "BiasedReluNetwork",
    "LineSearch",
    "Piece",
    "biased_ffn_query_count",
    "canonical_biased_network",
    "learn_line",
]

Num = Any  # Fraction (exact, certified) or float (float mode)
Vec = tuple[Num, ...]
#: Relative tolerance of float mode's equality decisions (pieces, checks, hyperplanes).
FLOAT_TOL = 1e-8


# ---------------------------------------------------------------------------------------
# Canonical form.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BiasedReluNetwork(CanonicalNetwork):
    """``g(x) = constant + linear^T x + sum_j gamma_j ReLU(n_j^T x + c_j)``, canonical.

    ``neurons`` is a sorted tuple of ``((n_j, c_j), gamma_j)``: n_j's first nonzero entry
    is 1, the pairs are distinct, every gamma_j != 0. Equal objects are equal functions.

    >>> one = Fraction(1)
    >>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))
    >>> net.value((Fraction(3),)), net.value((Fraction(0),))    # 1 + 3 + 2*2, 1 + 0 + 0
    (Fraction(8, 1), Fraction(1, 1))
    """

    constant: Num
    linear: Vec
    neurons: tuple[tuple[tuple[Vec, Num], Num], ...]

    @property
    def parameter_count(self) -> int:
        """(width + 1)(d + 1): the free numbers of the canonical form."""
        return (self.width + 1) * (self.d + 1)

    def value(self, x: Vec) -> Num:
        out = self.constant + _dot(self.linear, x)
        for (n, c), gamma in self.neurons:
            z = _dot(n, x) + c
            if z > 0:
                out += gamma * z
        return out

    def model(self) -> ReluFFN:
        """The network as a biased :class:`ReluFFN` (l^T x as ReLU(l^T x) - ReLU(-l^T x))."""
        cols = [list(n) for (n, _), _ in self.neurons]
        bias = [c for (_, c), _ in self.neurons]
        out = [g for _, g in self.neurons]
        if any(x != 0 for x in self.linear):
            cols += [list(self.linear), [-x for x in self.linear]]
            bias += [0, 0]
            out += [1, -1]
        if not cols:  # g is constant: one dead neuron keeps the shapes valid
            cols, bias, out = [[0] * self.d], [0], [0]
        A = [[cols[k][i] for k in range(len(cols))] for i in range(self.d)]
        return ReluFFN(A, out, a=bias, b=self.constant)


def _dot(a: Vec, b: Vec) -> Num:
    return sum((x * y for x, y in zip(a, b, strict=True)), 0 * a[0] if a else 0)


def _leading(w: Vec, tol: float) -> int | None:
    """Index of w's first entry that is nonzero (float: above tol times the largest)."""
    top = max((abs(x) for x in w), default=0)
    for i, x in enumerate(w):
        if x != 0 and abs(x) > tol * top:
            return i
    return None


def _fractions(M: sympy.MatrixBase) -> list[list[Fraction]]:
    return [[Fraction(int(x.p), int(x.q)) for x in row] for row in M.tolist()]


def canonical_biased_network(model: ReluFFN | OneLayerTransformer) -> BiasedReluNetwork:
    """The canonical form of a model's length-1 function, from its parameters (exact).

    >>> g = ReluFFN([[2, -1, 0]], [1, 4, 7], a=[2, 3, 1])   # ReLU(2x+2) + 4 ReLU(3-x) + 7
    >>> net = canonical_biased_network(g)                     # = 7 + 12 - 4x + 2 ReLU(x+1) + 4 ReLU(x-3)
    >>> net.constant, net.linear, net.width
    (Fraction(19, 1), (Fraction(-4, 1),), 2)
    """
    if isinstance(model, OneLayerTransformer):
        model = model.ffn()
    if not isinstance(model, ReluFFN):
        raise InvalidArgument(
            f"model must be a ReluFFN or OneLayerTransformer, got {type(model).__name__}"
        )
    d = model.d
    A, w_o, a = _fractions(model.A), _fractions(model.w_o), _fractions(model.a)
    constant = Fraction(int(model.b.p), int(model.b.q))
    linear = [Fraction(0)] * d
    terms: dict[tuple[Vec, Fraction], Fraction] = {}
    for k in range(model.m):
        w, bias, weight = tuple(A[i][k] for i in range(d)), a[k][0], w_o[k][0]
        if weight == 0:
            continue
        if not any(w):  # never switches: a constant (0 if the bias keeps it off)
            constant += weight * max(bias, Fraction(0))
            continue
        sigma = next(x for x in w if x != 0)
        key = (tuple(x / sigma for x in w), bias / sigma)
        scale = weight * abs(sigma)
        terms[key] = terms.get(key, Fraction(0)) + scale
        if sigma < 0:  # ReLU(-z) = ReLU(z) - z
            linear = [x - scale * y for x, y in zip(linear, key[0], strict=True)]
            constant -= scale * key[1]
    neurons = tuple(sorted((key, g) for key, g in terms.items() if g != 0))
    return BiasedReluNetwork(constant, tuple(linear), neurons)


def biased_ffn_query_count(
    d: int, *, pieces: int, half_pieces: int = 0, probes: int, kinks: int
) -> int:
    """Learning queries of one line search:
    ``2 pieces + half_pieces + probes + (d - 1)(kinks + 1)``.

    >>> biased_ffn_query_count(16, pieces=2, half_pieces=3, probes=70, kinks=32)
    572
    """
    return 2 * pieces + half_pieces + probes + (d - 1) * (kinks + 1)


# ---------------------------------------------------------------------------------------
# Answers in three arithmetics.
# ---------------------------------------------------------------------------------------


class Answers:
    """g at length-1 query points, as Fractions (exact, certified) or floats, cached.

    Certified answers are reconstructed as the unique rational with denominator at most
    ``denominator_bound`` in the ball (:class:`PrecisionExhausted` if there is none; None:
    :func:`~verified_attn.transformer.relu_network.default_denominator_bound`).
    """

    def __init__(self, oracle: Oracle, denominator_bound: int | None) -> None:
        self.oracle = oracle
        self.arith: Arithmetic = oracle.arithmetic
        self.float = self.arith.name == "float"
        self.D = (
            default_denominator_bound(self.arith)
            if denominator_bound is None
            else denominator_bound
        )
        self.cache: dict[Vec, Num] = {}
        self.raw: dict[Vec, Any] = {}

    def many(self, points: list[Vec]) -> list[Num]:
        todo = list(dict.fromkeys(p for p in points if p not in self.cache))
        if todo:
            answers = self.oracle.query_many([self._query(p) for p in todo])
            for p, y in zip(todo, answers, strict=True):
                self.raw[p] = y
                self.cache[p] = self._number(y, p)
        return [self.cache[p] for p in points]

    def assumptions(self) -> list[str]:
        """What a result learned from these answers rests on: certified answers taken as
        the one rational of their ball with denominator <= D (none for exact or float)."""
        if self.arith.name != "certified":
            return []
        return [
            f"every answer to a length-1 query is a rational with denominator <= {self.D} "
            f"(the denominator bound): each ball at {self.arith.precision} bits holds exactly "
            "one such rational, which the learner uses"
        ]

    def _query(self, p: Vec) -> Any:
        if self.float:
            return np.array([p], dtype=np.float64)
        return flint.fmpq_mat(1, len(p), [flint.fmpq(x.numerator, x.denominator) for x in p])

    def _number(self, y: Any, p: Vec) -> Num:
        if self.float:
            return float(y)
        return rational_answer(self.arith, y, p, self.D)

    def same(self, x: Num, y: Num, scale: Num = 0) -> bool:
        """x == y (exact), or within FLOAT_TOL of the scale of x, y (float)."""
        if not self.float:
            return bool(x == y)
        return abs(x - y) <= FLOAT_TOL * (1.0 + abs(x) + abs(y) + abs(scale))


class _Unresolved(Exception):
    """Internal: a piece's two points are one float64 number apart by less than its
    resolution (the line search's interval has no width left)."""


class Retry(Exception):
    """A consistency check failed on this line: try another one (internal to the room).

    ``search`` is the line's :class:`LineSearch` when its queries were asked."""

    search: Any = None


# ---------------------------------------------------------------------------------------
# The line search.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One linear piece of phi(t) = g(x_0 + t u) along a line: ``intercept + slope t``.

    >>> Piece(Fraction(2), Fraction(1)).at(Fraction(3))
    Fraction(7, 1)
    """

    slope: Num
    intercept: Num

    def at(self, t: Num) -> Num:
        return self.intercept + self.slope * t


def _between(lo: Num, hi: Num, is_float: bool) -> Num:
    """A simple point in the middle third of (lo, hi) (small denominators keep certified
    reconstruction cheap)."""
    if is_float:
        return (lo + hi) / 2
    return simplest_rational_between(lo + (hi - lo) / 3, hi - (hi - lo) / 3)


def _small(width: Num, bits: int, is_float: bool) -> Num:
    """A power of two below width / 2^bits."""
    if is_float:
        return float(width) / 2.0**bits
    e = math.floor(math.log2(width.numerator) - math.log2(width.denominator)) - bits
    return Fraction(2) ** e


@dataclass
class LineSearch:
    """The kinks of phi(t) = g(x_0 + t u) on [-R, R], with the queries they cost."""

    answers: Answers
    x0: Vec
    u: Vec
    radius: Num
    grid: int = 1
    eps_bits: int = 12
    max_depth: int = 60
    pieces: int = 0
    half_pieces: int = 0
    probes: int = 0
    found: int = 0
    cells: int = 0

    def queries(self) -> int:
        """Learning queries this line asked (:func:`biased_ffn_query_count`)."""
        d = len(self.u)
        return 2 * self.pieces + self.half_pieces + self.probes + (d - 1) * self.cells

    def point(self, t: Num) -> Vec:
        return tuple(a + t * b for a, b in zip(self.x0, self.u, strict=True))

    def _step(self, t: Num, width: Num, side: int) -> Num:
        """The second point of a piece beside t; :class:`_Unresolved` where float64 cannot
        tell it from t (the interval has shrunk below float64 resolution)."""
        t2 = t + side * _small(width, self.eps_bits, self.answers.float)
        if t2 == t:
            raise _Unresolved
        return t2

    def piece(self, t: Num, width: Num, side: int) -> Piece:
        t2 = self._step(t, width, side)
        y1, y2 = self.answers.many([self.point(t), self.point(t2)])
        self.pieces += 1
        slope = (y2 - y1) / (t2 - t)
        return Piece(slope, y1 - slope * t)

    def _same_piece(self, A: Piece, B: Piece) -> bool:
        scale = abs(A.slope) * self.radius
        return self.answers.same(A.slope * self.radius, B.slope * self.radius) and (
            self.answers.same(A.intercept, B.intercept, scale)
        )

    def _one_kink(
        self, a: Num, A: Piece, t: Num, B: Piece, b: Num
    ) -> tuple[bool, tuple[Num, Num, int]]:
        """phi follows A just left of t, then B just right of it: 1 probe on each side,
        the right one only when the left one agrees (a failed left probe already refutes
        the single kink). Returns (ok, (probe, phi(probe), side)) with side -1 for a failed
        left probe, +1 for a failed right one."""
        fl = self.answers.float
        w = min(t - a, b - t) / (4 if fl else 2**16)
        left = t - w if fl else simplest_rational_between(t - w, t - w / 2)
        right = t + w if fl else simplest_rational_between(t + w / 2, t + w)
        scale = abs(A.slope * w) + abs(B.slope * w)
        for probe, piece, side in ((left, A, -1), (right, B, 1)):
            (gp,) = self.answers.many([self.point(probe)])
            self.probes += 1
            if not self.answers.same(gp, piece.at(probe), scale):
                return False, (probe, gp, side)
        return True, (right, 0, 0)

    def _split(self, probe: tuple[Num, Num, int], A: Piece, B: Piece, w: Num) -> Piece:
        """The piece through a failed probe: the other end's piece when the probe lies on
        it (no query), else a new piece from the probe and one more point beside it, 1
        query (a *half piece*)."""
        t, gt, side = probe
        other = B if side < 0 else A
        if self.answers.same(gt, other.at(t), abs(other.slope * w)):
            return other
        t2 = self._step(t, w, side)
        (g2,) = self.answers.many([self.point(t2)])
        self.half_pieces += 1
        slope = (g2 - gt) / (t2 - t)
        return Piece(slope, gt - slope * t)

    def _narrow(self, item: tuple, stack: list, found: list) -> None:
        """One kink in (a, b) when the pieces A, B at its ends meet there and the two
        probes agree; else the interval split at a failed probe (every other depth) or
        in the middle, the halves pushed on ``stack``."""
        a, A, b, B, depth = item
        if not self.answers.same(A.slope * self.radius, B.slope * self.radius):
            t = (B.intercept - A.intercept) / (A.slope - B.slope)
            if a < t < b:
                ok, probe = self._one_kink(a, A, t, B, b)
                if ok:
                    found.append((t, A, B))
                    return
                if depth % 2 == 0:  # split at the probe; every other time in the middle,
                    p = probe[0]  # so intervals keep shrinking
                    M = self._split(probe, A, B, 2 * abs(t - p))
                    stack.append((p, M, b, B, depth + 1))
                    stack.append((a, A, p, M, depth + 1))
                    return
        self._middle(item, stack)

    def _middle(self, item: tuple, stack: list) -> None:
        """Split (a, b) at a simple middle point: 1 probe there. On A's line it narrows the
        interval to (mid, b), on B's to (a, mid); else 1 more point beside it gives the
        piece there (a half piece) and both halves are searched. Float mode measures a
        whole piece at mid (2 queries): narrowing on a probe within the tolerance would
        let a smooth box exhaust the depth before float resolution."""
        a, A, b, B, depth = item
        mid = _between(a, b, self.answers.float)
        if self.answers.float:  # a whole piece: a smooth box must reach float resolution
            M = self.piece(mid, min(mid - a, b - mid), 1)  # (the refusal's witness)
            stack.append((mid, M, b, B, depth + 1))
            stack.append((a, A, mid, M, depth + 1))
            return
        (gm,) = self.answers.many([self.point(mid)])
        self.probes += 1
        scale = abs(A.slope * (mid - a)) + abs(B.slope * (b - mid))
        if self.answers.same(gm, A.at(mid), scale):
            stack.append((mid, A, b, B, depth + 1))
            return
        if self.answers.same(gm, B.at(mid), scale):
            stack.append((a, A, mid, B, depth + 1))
            return
        M = self._split((mid, gm, 1), A, B, min(mid - a, b - mid))
        stack.append((mid, M, b, B, depth + 1))
        stack.append((a, A, mid, M, depth + 1))

    def _unresolved(self, a: Num, A: Piece, b: Num, B: Piece) -> ModelClassMismatch:
        """The refusal when (a, b) shrank below float64 resolution with the pieces measured
        at its ends still different: the witness is the two end points (``query``) and the
        two pieces as (slope, intercept) in t (``observed`` at b, ``expected`` from a)."""
        return ModelClassMismatch(
            "the length-1 answers are not piecewise linear at float64 resolution: the "
            f"line search split the interval ({a}, {b}) of its line to zero width, and the "
            f"pieces measured at its ends still differ (slope, intercept {A.slope}, "
            f"{A.intercept} at t = {a}; {B.slope}, {B.intercept} at t = {b}): a smooth "
            "activation such as GELU; a ReLU network would need two kinks closer than "
            "float64 rounding on a random line",
            query=[list(self.point(a)), list(self.point(b))],
            observed=(B.slope, B.intercept),
            expected=(A.slope, A.intercept),
        )

    def kinks(self) -> tuple[list[Num], list[Piece]]:
        """Sorted kinks t_1 < ... < t_K in (-R, R) and the K + 1 pieces between them."""
        R = self.radius
        ts = [-R + 2 * R * i / self.grid for i in range(self.grid + 1)]
        step = 2 * R / self.grid
        samples = [self.piece(t, step, -1 if i == self.grid else 1) for i, t in enumerate(ts)]
        found: list[tuple[Num, Piece, Piece]] = []
        stack = [(ts[i], samples[i], ts[i + 1], samples[i + 1], 0) for i in range(self.grid)]
        while stack:
            a, A, b, B, depth = stack.pop()
            if self._same_piece(A, B):
                continue
            if depth >= self.max_depth:
                raise Retry(f"could not isolate the kinks in ({a}, {b})")
            try:
                self._narrow((a, A, b, B, depth), stack, found)
            except _Unresolved:
                raise self._unresolved(a, A, b, B) from None
        found.sort(key=lambda f: f[0])
        self.found = len(found)
        if not found:
            return [], [samples[0]]
        for (_, _, B), (_, A2, _) in itertools.pairwise(found):
            if not self._same_piece(B, A2):
                raise Retry("adjacent kinks disagree about the piece between them")
        return [t for t, _, _ in found], [found[0][1]] + [B for _, _, B in found]


def _cell(search: LineSearch, piece: Piece, lo: Num, hi: Num, shrink: int) -> tuple[Vec, Num]:
    """(G, beta) with g = G^T x + beta on the cell of the piece (lo, hi): d - 1 queries."""
    ans, u, x0 = search.answers, search.u, search.x0
    d = len(u)
    t = _between(lo, hi, ans.float)
    y = search.point(t)
    gy = piece.at(t)
    scale = max(max(abs(x) for x in u), 1)
    delta = _small((hi - lo) / scale, (2 if ans.float else 12) + shrink, ans.float)
    p = max(range(d), key=lambda i: abs(u[i]))  # G_p from the slope G^T u
    others = [i for i in range(d) if i != p]
    probes = [tuple(yj + (delta if j == i else 0) for j, yj in enumerate(y)) for i in others]
    G: list[Num] = [0] * d
    search.cells += 1
    for i, val in zip(others, ans.many(probes), strict=True):
        G[i] = (val - gy) / delta
    G[p] = (piece.slope - sum((G[i] * u[i] for i in others), 0 * gy)) / u[p]
    beta = piece.intercept - _dot(tuple(G), x0)
    return tuple(G), beta


def learn_line(
    answers: Answers, d: int, rng: np.random.Generator, *, radius: int, grid: int, shrink: int
) -> tuple[BiasedReluNetwork, LineSearch]:
    """One line's network (unverified) and its search record (for the count)."""
    fl = answers.float
    x0 = tuple(_coord(int(x), fl) for x in rng.integers(-(2**10), 2**10, d))
    u = tuple(_coord(int(x), fl) for x in rng.integers(-(2**10), 2**10, d))
    if not any(u):
        raise Retry("the line's direction is 0")
    R = radius if fl else Fraction(radius)
    bits = (4 if fl else 12) + shrink
    search = LineSearch(answers, x0, u, R, grid=grid, eps_bits=bits)
    try:
        return _network(search, shrink), search
    except Retry as exc:
        exc.search = search  # its queries count in the bound
        raise


def _network(search: LineSearch, shrink: int) -> BiasedReluNetwork:
    """The network from the line's kinks and the cells between them."""
    fl, u, R = search.answers.float, search.u, search.radius
    kinks, pieces = search.kinks()
    bounds = [-R, *kinks, R]
    cells = [_cell(search, pc, bounds[i], bounds[i + 1], shrink) for i, pc in enumerate(pieces)]
    neurons: list[tuple[tuple[Vec, Num], Num]] = []
    for i, t in enumerate(kinks):
        dG = tuple(x - y for x, y in zip(cells[i + 1][0], cells[i][0], strict=True))
        lead = _leading(dG, FLOAT_TOL if fl else 0)
        if lead is None:
            raise Retry(f"the gradient does not change across the kink at t = {t}")
        sigma = dG[lead]
        n = tuple(0 * x if j < lead else x / sigma for j, x in enumerate(dG))
        n = tuple(1 if j == lead else x for j, x in enumerate(n))
        c = (cells[i + 1][1] - cells[i][1]) / sigma
        gamma = sigma if _dot(n, u) > 0 else -sigma
        neurons.append(((n, c), gamma))
    y0 = search.point(_between(bounds[0], bounds[1], fl))
    G0, beta0 = cells[0]
    linear, constant = list(G0), beta0
    for (n, c), gamma in neurons:
        if _dot(n, y0) + c > 0:
            linear = [x - gamma * y for x, y in zip(linear, n, strict=True)]
            constant -= gamma * c
    if fl:
        neurons = _merge_float(neurons)
    return BiasedReluNetwork(constant, tuple(linear), tuple(sorted(neurons)))


def _merge_float(neurons: list[tuple[tuple[Vec, Num], Num]]) -> list:
    """Float mode: hyperplanes equal within FLOAT_TOL are one (weights added); a weight
    within FLOAT_TOL of the largest is dropped (a piece measured across a kink shows up
    as such a pair, +gamma and -gamma on one hyperplane)."""
    merged: list[list[Any]] = []
    for (n, c), gamma in neurons:
        key = (*n, c)
        for item in merged:
            if all(
                abs(x - y) <= FLOAT_TOL * (1 + abs(x)) for x, y in zip(item[0], key, strict=True)
            ):
                item[1] += gamma
                break
        else:
            merged.append([key, gamma])
    top = max((abs(g) for _, g in merged), default=0.0)
    return [((k[:-1], k[-1]), g) for k, g in merged if abs(g) > FLOAT_TOL * (1 + top)]


def _coord(k: int, is_float: bool) -> Num:
    return k / 256 if is_float else Fraction(k, 256)

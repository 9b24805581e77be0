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

``g(x) = w_o^T ReLU(A^T x + a) + b`` is learned in its *canonical form*
``beta + l^T x + sum_j gamma_j ReLU(n_j^T x + c_j)``, ``(m' + 1)(d + 1)`` free numbers
(:mod:`verified_attn.transformer.relu_biased_canonical`).

The algorithm, on one random line ``L(t) = x_0 + t u`` (t in [-R, R]):

1. *Kinks along the line.* ``phi(t) = g(L(t))`` is piecewise linear; a *piece* (slope,
   intercept) costs 2 queries (at s and s + eps). Two pieces A, B at the ends of an
   interval meet at ``t* = (B_0 - A_0) / (A_1 - B_1)``, a rational found exactly; a probe
   just left of t* on A and one just right of it on B check that t* is the one kink in
   the interval (1 query each; a failed probe already refutes it, so the other one is then
   not asked; exact and certified modes ask first on the longer side of t*, float mode on
   the left). Otherwise the interval is split at the failed probe (no query when it lies
   on the other end's piece, else 1 more point beside it: a *half piece*, a new piece of
   phi for 1 query, so exact and certified modes always split there; float mode only every
   other time) or, when the end pieces do not meet inside, at a simple middle point by one
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
rational with denominator at most the bound (an assumption the result records). Float
mode runs the same steps on float64 answers, each taken to carry at most ``NOISE_ULPS``
unit roundoffs of the largest answer seen; a piece's value at t then errs by at most that
noise times ``1 + 2 |t - s| / eps``, and two values are equal when within ``AGREE`` times
their summed bounds (pieces at both ends of an interval, probes). Its pieces are measured
over width / 2^STEP_BITS, probes sit width / 2^PROBE_BITS beside a kink, and once the
kinks are found each piece is refitted through every point asked on its segment (no
query; a point off it is a missed kink: retry). A bend whose slope change is within
``RESOLVE`` times the slopes' error is refused: a smooth box (GELU), not a ReLU kink.
Every mode verifies the learned network on fresh sequences; a failed check or
verification retries on a new line with a wider window, every query counted.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
    simplest_rational_between,
)
from verified_attn.errors import ModelClassMismatch
from verified_attn.oracle import Oracle
from verified_attn.transformer.common import rational_answer
from verified_attn.transformer.relu_biased_canonical import (
    BiasedReluNetwork,
    Num,
    Vec,
    canonical_biased_network,
)
from verified_attn.transformer.relu_network import default_denominator_bound

__all__ = [
    "BiasedReluNetwork",
    "LineSearch",
    "Piece",
    "biased_ffn_query_count",
    "canonical_biased_network",
]

#: Relative tolerance of float mode's hyperplane decisions (merging, leading entries);
#: the line search's decisions use the error bounds below instead.
FLOAT_TOL = 1e-8
#: Float mode: one answer's rounding error is taken as at most NOISE_ULPS unit roundoffs of
#: the largest answer seen on the line (a box summing m terms of about that size in float;
#: the benchmark's random networks, d <= 16, err by at most 8 such units).
NOISE_ULPS = 64
#: Float mode: two measured values are equal when they differ by at most AGREE times the
#: sum of their error bounds.
AGREE = 4
#: Float mode: a kink's probes sit min(t - a, b - t) / 2^PROBE_BITS beside it (exact: 2^16).
PROBE_BITS = 12
#: Float mode: a piece's two points are width / 2^STEP_BITS apart (exact: 2^12).
STEP_BITS = 8
#: Float mode: a kink's slope change must exceed RESOLVE times the two slopes' rounding
#: error, else the answers bend too faintly for a ReLU kink and the line is retried (a
#: smooth box bends so on every line: refused). Measured: GELU's bends reach 24, the
#: benchmark networks' kinks on their first line 5e3 and more.
RESOLVE = 2**7
#: Float mode: a cell's coordinate probes are width / (max |u_i|) / 2^CELL_BITS off its
#: point (exact: 2^12): far enough that rounding stays small, near enough not to cross
#: a hyperplane that passes close to the point off the line.
CELL_BITS = 4


def biased_ffn_query_count(
    d: int, *, pieces: int, half_pieces: int = 0, probes: int, kinks: int
) -> int:
    """Learning queries of one line search:
    ``2 pieces + half_pieces + probes + (d - 1)(kinks + 1)`` (the search counts only points
    not asked before: a piece one of whose points was asked already is a half piece).

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
        #: Float mode: the largest |answer| seen, the scale of the box's rounding.
        self.scale = 0.0

    def many(self, points: list[Vec]) -> list[Num]:
        todo = list(dict.fromkeys(p for p in points if p not in self.cache))
        if todo:
            answers = self.oracle.query_many([self._query(p) for p in todo])
            for p, y in zip(todo, answers, strict=True):
                self.raw[p] = y
                self.cache[p] = self._number(y, p)
                if self.float:
                    self.scale = max(self.scale, abs(self.cache[p]))
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

    def noise(self) -> float:
        """Float mode: a bound on one answer's rounding error, NOISE_ULPS unit roundoffs of
        the largest answer seen (the box's terms are about that large, summed in float)."""
        unit = float(getattr(self.arith, "unit_roundoff", 2.0**-53))
        return NOISE_ULPS * unit * (1.0 + self.scale)

    def close(self, x: Num, y: Num, error: Num) -> bool:
        """x == y (exact), or within AGREE times ``error``, the two sides' summed error
        bounds (float): a difference the rounding cannot explain is a real one."""
        if not self.float:
            return bool(x == y)
        return abs(x - y) <= AGREE * error


class _Unresolved(Exception):
    """Internal: a piece's two points are one float64 number apart by less than its
    resolution (the line search's interval has no width left)."""


class Retry(Exception):
    """A consistency check failed on this line: try another one (internal to the room).

    ``search`` is the line's :class:`LineSearch` when its queries were asked."""

    search: Any = None


class Faint(Retry):
    """Float mode: a kink too faint to tell from curvature on this line (internal to the
    room); ``refusal`` is the :class:`ModelClassMismatch` with its witness, raised when no
    line succeeds (a smooth box such as GELU bends faintly on every line)."""

    def __init__(self, refusal: ModelClassMismatch) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


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
    #: Where the piece was measured: its first point and the second's offset from it
    #: (float mode's error bound grows with the distance from ``anchor`` in units of
    #: ``step``; exact mode ignores them).
    anchor: Num = 0
    step: Num = 1

    def at(self, t: Num) -> Num:
        return self.intercept + self.slope * t

    def error(self, t: Num, noise: float) -> float:
        """Float mode: a bound on |at(t) - phi(t)| from rounding alone, when the piece is
        phi's there: ``noise`` at each measured point, so 2 noise / step on the slope."""
        return noise * (1.0 + 2.0 * abs(t - self.anchor) / abs(self.step))

    def slope_error(self, noise: float) -> float:
        return 2.0 * noise / abs(self.step)


def _through(t: Num, y: Num, t2: Num, y2: Num) -> Piece:
    """The line through (t, y) and (t2, y2), anchored at t."""
    slope = (y2 - y) / (t2 - t)
    return Piece(slope, y - slope * t, t, t2 - t)


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
    #: The piece at t = -R when it is known already (the bias-free learner's second
    #: segment starts in the cone where its first one ends): no query for it.
    start: Piece | None = None
    #: Float mode: phi(t) at every t asked, for refitting the pieces (:meth:`_refit`).
    seen: dict[Num, Num] = field(default_factory=dict)

    def queries(self) -> int:
        """Learning queries this line asked (:func:`biased_ffn_query_count`)."""
        d = len(self.u)
        return 2 * self.pieces + self.half_pieces + self.probes + (d - 1) * self.cells

    def point(self, t: Num) -> Vec:
        return tuple(a + t * b for a, b in zip(self.x0, self.u, strict=True))

    def _new(self, *ts: Num) -> int:
        """How many of the points at ts have not been asked yet (a point asked before is
        answered from the cache, neither asked nor counted again)."""
        return len({self.point(t) for t in ts} - self.answers.cache.keys())

    def _ask(self, ts: list[Num]) -> list[Num]:
        ys = self.answers.many([self.point(t) for t in ts])
        if self.answers.float:
            self.seen.update(zip(ts, ys, strict=True))
        return ys

    def _step(self, t: Num, width: Num, side: int) -> Num:
        """The second point of a piece beside t; :class:`_Unresolved` where float64 cannot
        tell it from t (the interval has shrunk below float64 resolution)."""
        t2 = t + side * _small(width, self.eps_bits, self.answers.float)
        if t2 == t:
            raise _Unresolved
        return t2

    def piece(self, t: Num, width: Num, side: int) -> Piece:
        t2 = self._step(t, width, side)
        new = self._new(t, t2)  # a piece with one point asked before costs a half piece
        y1, y2 = self._ask([t, t2])
        self.pieces += new == 2
        self.half_pieces += new == 1
        return _through(t, y1, t2, y2)

    def _same_piece(self, A: Piece, B: Piece, a: Num, b: Num) -> bool:
        """A and B are one line: equal (exact), or within their error bounds at both ends
        of (a, b) (float: the bounds, not a fixed tolerance, since a slope measured over a
        short step carries the rounding amplified by 1 / step)."""
        if not self.answers.float:
            return A.slope == B.slope and A.intercept == B.intercept
        eta, close = self.answers.noise(), self.answers.close
        return all(close(A.at(t), B.at(t), A.error(t, eta) + B.error(t, eta)) for t in (a, b))

    def _parallel(self, A: Piece, B: Piece) -> bool:
        """Equal slopes (exact), or slopes within their error bounds (float)."""
        eta = self.answers.noise() if self.answers.float else 0.0
        return self.answers.close(A.slope, B.slope, A.slope_error(eta) + B.slope_error(eta))

    def _one_kink(
        self, a: Num, A: Piece, t: Num, B: Piece, b: Num
    ) -> tuple[bool, tuple[Num, Num, int]]:
        """phi follows A just left of t, then B just right of it: 1 probe on each side, the
        second only when the first agrees (a failed probe already refutes the single kink).
        Exact and certified modes ask first on the longer side of t, where a pair of kinks
        that fools the other side's probe is likelier to lie (float: left first). Returns
        (ok, (probe, phi(probe), side)), side -1 for a failed left probe, +1 for a failed
        right one."""
        fl = self.answers.float
        w = min(t - a, b - t) / 2 ** (PROBE_BITS if fl else 16)
        eta = self.answers.noise() if fl else 0.0
        if fl:  # off t by more than t's own error, so a probe is on the side it tests
            t_err = (A.error(t, eta) + B.error(t, eta)) / abs(A.slope - B.slope)
            w = min(max(w, 16 * AGREE * t_err), min(t - a, b - t) / 2)
        left = t - w if fl else simplest_rational_between(t - w, t - w / 2)
        right = t + w if fl else simplest_rational_between(t + w / 2, t + w)
        order = [(left, A, -1), (right, B, 1)]
        if not fl and b - t > t - a:
            order.reverse()
        for probe, piece, side in order:
            self.probes += self._new(probe)
            (gp,) = self._ask([probe])
            if not self.answers.close(gp, piece.at(probe), eta + piece.error(probe, eta)):
                return False, (probe, gp, side)
        return True, (right, 0, 0)

    def _split(self, probe: tuple[Num, Num, int], A: Piece, B: Piece, w: Num) -> Piece:
        """The piece through a failed probe: the other end's piece when the probe lies on
        it (no query), else a new piece from the probe and one more point beside it, 1
        query (a *half piece*)."""
        t, gt, side = probe
        other = B if side < 0 else A
        eta = self.answers.noise() if self.answers.float else 0.0
        if self.answers.close(gt, other.at(t), eta + other.error(t, eta)):
            return other
        t2 = self._step(t, w, side)
        self.half_pieces += self._new(t2)
        (g2,) = self._ask([t2])
        return _through(t, gt, t2, g2)

    def _narrow(self, item: tuple, stack: list, found: list) -> None:
        """One kink in (a, b) when the pieces A, B at its ends meet there and the two
        probes agree; else the interval split at a failed probe (float: every other depth)
        or in the middle, the halves pushed on ``stack``."""
        a, A, b, B, depth = item
        if not self._parallel(A, B):
            t = (B.intercept - A.intercept) / (A.slope - B.slope)
            if a < t < b:
                ok, probe = self._one_kink(a, A, t, B, b)
                if ok and self._faint(A, B):  # a bend within rounding: another line
                    raise Faint(self._unresolved(a, A, b, B, faint=True))
                if ok:
                    found.append((t, A, B))
                    return
                # Split at the failed probe: off both end pieces it is a new piece's point
                # (K + 1 pieces in all), on the other end's piece it narrows (a, b) and the
                # middle follows. Float: every other depth only, the middle otherwise, so
                # that a smooth box's intervals keep shrinking.
                if depth % 2 == 0 or not self.answers.float:
                    self._split_at(item, t, probe, stack)
                    return
        self._middle(item, stack)

    def _split_at(self, item: tuple, t: Num, probe: tuple[Num, Num, int], stack: list) -> None:
        """Split (a, b) at the failed probe p, the piece there from :meth:`_split` (float:
        a half piece over up to 64 times the probe's offset, the room allowing: a tiny step
        amplifies the rounding in its slope)."""
        a, A, b, B, depth = item
        p, _, side = probe
        room = min(p - a if side < 0 else b - p, 64 * abs(t - p)) if self.answers.float else 0
        M = self._split(probe, A, B, room or 2 * abs(t - p))
        stack.append((p, M, b, B, depth + 1))
        stack.append((a, A, p, M, depth + 1))

    def _middle(self, item: tuple, stack: list) -> None:
        """Split (a, b) at a simple middle point: 1 probe there. On A's line it narrows the
        interval to (mid, b), on B's to (a, mid); else 1 more point beside it gives the
        piece there (a half piece) and both halves are searched. Float mode measures a
        whole piece at mid (2 queries): a smooth box's bend must show in its slope."""
        a, A, b, B, depth = item
        mid = _between(a, b, self.answers.float)
        if self.answers.float:
            M = self.piece(mid, min(mid - a, b - mid), 1)
            stack.append((mid, M, b, B, depth + 1))
            stack.append((a, A, mid, M, depth + 1))
            return
        self.probes += self._new(mid)
        (gm,) = self._ask([mid])
        if gm == A.at(mid):  # (exact and certified only: == decides)
            stack.append((mid, A, b, B, depth + 1))
            return
        if gm == B.at(mid):
            stack.append((a, A, mid, B, depth + 1))
            return
        M = self._split((mid, gm, 1), A, B, min(mid - a, b - mid))
        stack.append((mid, M, b, B, depth + 1))
        stack.append((a, A, mid, M, depth + 1))

    def _faint(self, A: Piece, B: Piece) -> bool:
        """Float mode: the slopes of A and B differ by less than RESOLVE times their
        rounding error: a kink there could not be told from curvature (a smooth box's
        pieces pass the probes once the interval is narrow enough)."""
        if not self.answers.float:
            return False
        eta = self.answers.noise()
        return abs(A.slope - B.slope) < RESOLVE * (A.slope_error(eta) + B.slope_error(eta))

    def _unresolved(
        self, a: Num, A: Piece, b: Num, B: Piece, faint: bool = False
    ) -> ModelClassMismatch:
        """The refusal when (a, b) shrank below float64 resolution, or to where its end
        pieces, different beyond their error bounds, meet in a bend too faint to be a kink
        (``faint``): the witness is the two end points (``query``) and the two pieces as
        (slope, intercept) in t (``observed`` at b, ``expected`` from a)."""
        why = (
            f"the pieces measured at its ends differ beyond their rounding error, yet "
            f"meet in a slope change within {RESOLVE} times the slopes' rounding error"
            if faint
            else "split it to zero width, and the pieces measured at its ends still differ"
        )
        return ModelClassMismatch(
            "the length-1 answers are not piecewise linear at float64 resolution: on the "
            f"interval ({a}, {b}) of its line the line search {why} (slope, intercept "
            f"{A.slope}, {A.intercept} at t = {a}; {B.slope}, {B.intercept} at t = {b}): a "
            "smooth activation such as GELU; a ReLU network would need kinks closer than "
            "float64 rounding resolves on a random line",
            query=[list(self.point(a)), list(self.point(b))],
            observed=(B.slope, B.intercept),
            expected=(A.slope, A.intercept),
        )

    def kinks(self) -> tuple[list[Num], list[Piece]]:
        """Sorted kinks t_1 < ... < t_K in (-R, R) and the K + 1 pieces between them."""
        R = self.radius
        ts = [-R + 2 * R * i / self.grid for i in range(self.grid + 1)]
        step = 2 * R / self.grid
        samples = [
            self.start
            if i == 0 and self.start is not None
            else self.piece(t, step, -1 if i == self.grid else 1)
            for i, t in enumerate(ts)
        ]
        found: list[tuple[Num, Piece, Piece]] = []
        stack = [(ts[i], samples[i], ts[i + 1], samples[i + 1], 0) for i in range(self.grid)]
        while stack:
            a, A, b, B, depth = stack.pop()
            if self._same_piece(A, B, a, b):
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
        for (t1, _, B), (t2, A2, _) in itertools.pairwise(found):
            if not self._same_piece(B, A2, t1, t2):
                raise Retry("adjacent kinks disagree about the piece between them")
        kinks, pieces = [t for t, _, _ in found], [found[0][1]] + [B for _, _, B in found]
        return self._refit(kinks, pieces) if self.answers.float else (kinks, pieces)

    def _refit(self, kinks: list[Num], pieces: list[Piece]) -> tuple[list[Num], list[Piece]]:
        """Float mode: each piece refitted (least squares) through every point asked on its
        segment, so its slope rests on the segment's whole span instead of one short step
        (no query: the probes are spread along it); each kink is then where its two
        refitted pieces meet. A point off its refitted piece by more than the error bound
        is a kink the search missed: Retry."""
        R, eta = self.radius, self.answers.noise()
        bounds = [-R, *kinks, R]
        fitted: list[Piece] = []
        for i, old in enumerate(pieces):
            lo, hi = bounds[i], bounds[i + 1]
            gap = (hi - lo) * 2.0**-20  # a kink's own error is far below this
            lo, hi = (lo + gap if i else -2 * R), (hi - gap if i < len(kinks) else 2 * R)
            pts = sorted((t, y) for t, y in self.seen.items() if lo <= t <= hi)
            ts, ys = np.array([t for t, _ in pts]), np.array([y for _, y in pts])
            span = float(ts[-1] - ts[0]) if len(pts) > 1 else 0.0
            if span <= abs(old.step):
                fitted.append(old)
                continue
            slope, icpt = np.polyfit(ts - ts[0], ys, 1)
            piece = Piece(float(slope), float(icpt - slope * ts[0]), float(ts[0]), span)
            if any(abs(piece.at(t) - y) > AGREE * 2 * piece.error(t, eta) for t, y in pts):
                raise Retry(
                    f"a point between the kinks at {bounds[i]}, {bounds[i + 1]} is off "
                    "the piece through the others: a kink the search missed"
                )
            fitted.append(piece)
        moved = [
            (B.intercept - A.intercept) / (A.slope - B.slope) for A, B in itertools.pairwise(fitted)
        ]
        if not all(lo < t < hi for lo, t, hi in zip(bounds, moved, bounds[2:], strict=False)):
            raise Retry("refitted pieces do not meet between their neighbouring kinks")
        return moved, fitted

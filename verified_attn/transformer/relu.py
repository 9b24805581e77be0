"""Exact learning of a bias-free one-hidden-layer ReLU network from value queries.

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> from verified_attn.transformer.relu import canonical_network, learn_relu_ffn
>>> g = ReluFFN([[1, 2, -1, 0], [1, -1, -1, 0]], [3, -1, 3, 5])   # a dead neuron (w_4 = 0)
>>> rec = learn_relu_ffn(va.Oracle(g, "certified"))
>>> rec.network == canonical_network(g), rec.exact, rec.verified
(True, True, True)
>>> rec.network.width, rec.network.linear     # 3 ReLU(z) + 3 ReLU(-z) = 6 ReLU(z) - 3 z
(2, (Fraction(-3, 1), Fraction(-3, 1)))
>>> rec.queries, rec.parameter_count, rec.verification_queries, rec.bound
(23, 6, 8, 984)
>>> va.verify_certificate(rec.certificate()).ok
True

``g(x) = sum_k c_k ReLU(w_k^T x)`` is positively homogeneous and piecewise linear. Its
*canonical form* is ``g(x) = l^T x + sum_j gamma_j ReLU(n_j^T x)`` over the distinct
hyperplanes ``n_j^T x = 0`` (each n_j scaled so its first nonzero entry is 1, gamma_j != 0):
permutations, positive rescalings, dead neurons, duplicate directions and antipodal pairs
(``c ReLU(z) - c ReLU(-z) = c z``) all collapse into it, and two networks are the same
function iff their canonical forms are equal (:func:`canonical_network`).

The algorithm, in exact rational arithmetic (answers are rationals: exact mode gives them,
certified mode reconstructs them from balls):

1. *Kinks.* Random rational p, q span a plane; the two segments ``p + s q`` and
   ``q - t p`` (s, t in [-1, 1]) together cross every hyperplane once. Along a segment g is
   piecewise linear in s. A *piece* is measured from two values (at s and s + eps); two
   pieces A, B at the ends of an interval are intersected exactly (rational arithmetic) at
   s*, and two more queries check that g follows A just left of s* and B just right of it:
   then s* is the one kink there. Otherwise the interval is bisected at a simple rational
   point. Cost: 2 queries per sample, 2 per kink check; every query point has a small
   denominator (never s* itself), which keeps certified reconstruction cheap.
2. *Gradients.* Inside each piece g(x) = G^T x. The line already gives G^T p and G^T q; one
   query g(y + delta e_i) per remaining coordinate gives G_i = (g(y + delta e_i) - G^T y) /
   delta: d - 2 queries per piece.
3. *Neurons.* The gradient jump across a kink is J = gamma n (orientation from the crossing
   direction); continuity J^T x* = 0 at the exact kink point is checked. The linear term is
   l = G_0 - sum over the hyperplanes on whose positive side y_0 lies of gamma_j n_j.

The result is verified on the core's fresh sequences
(:func:`verified_attn.verification.verify_model`: == in exact mode, overlapping balls in
certified mode); a failed check (a kink hidden by a coincidence, a probe step that left its
piece) retries on a new random plane with smaller steps, every query counted.

*The bound.* The cost adapts to how close the kinks lie on the random plane, so there is no
closed form in d and m alone; the learner is held to :func:`ffn_query_bound`, a formula in
d and the learned canonical width m': per attempt with g grid intervals per segment,
``4(g + 1)`` samples, ``2 m'`` kink checks, at most ``MAX_DEPTH`` bisections (4 queries
each: a piece and a check) per kink and segment end, and ``d - min(d, 2)`` gradient probes
per piece: ``4(g + 1) + 2m' + (4 MAX_DEPTH + d - min(d, 2))(m' + 2)``, summed over the
attempts made (each doubles g). A run that would return a network learned with more
queries than that is refused (it never happens when every kink is isolated within
MAX_DEPTH bisections, as the learner demands anyway).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Any, Unpack

import flint
import numpy as np

from verified_attn.arithmetic import (
    simplest_rational_between,
)
from verified_attn.certificates.writer import RunRecord
from verified_attn.learner_options import ExactOptions
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import ReluFFNRecovery
from verified_attn.transformer.common import first_success, learner_arguments, verify_network
from verified_attn.transformer.relu_biased import Answers, Piece
from verified_attn.transformer.relu_certificate import relu_certificate_data
from verified_attn.transformer.relu_network import (
    MAX_ATTEMPTS,
    MAX_DEPTH,
    MAX_GRID,
    THEOREM,
    ReluNetwork,
    Vec,
    canonical_network,
    default_denominator_bound,
    ffn_query_bound,
)
from verified_attn.transformer.relu_network import dot as _dot
from verified_attn.transformer.relu_network import network_of as _assemble
from verified_attn.transformer.relu_network import normalise as _normalise
from verified_attn.validation import (
    check_int,
)
from verified_attn.verification import (
    Verification,
)

__all__ = [
    "MAX_DEPTH",
    "ReluNetwork",
    "canonical_network",
    "default_denominator_bound",
    "ffn_query_bound",
    "learn_relu_ffn",
]


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


class _Retry(Exception):
    """Internal: an exact consistency check failed on this plane; try another."""


def _dyadic_below(x: Fraction) -> Fraction:
    """The largest power of two <= x (x > 0)."""
    e = math.floor(math.log2(x.numerator) - math.log2(x.denominator))
    t = Fraction(2) ** e
    while t > x:
        t /= 2
    while 2 * t <= x:
        t *= 2
    return t


class _Segment:
    """g along b + s u for s in [-1, 1]: kinks and pieces, found exactly."""

    def __init__(self, values: Answers, b: Vec, u: Vec, grid: int, eps_bits: int) -> None:
        self.values, self.b, self.u = values, b, u
        self.grid, self.eps_bits = grid, eps_bits

    def point(self, s: Fraction) -> Vec:
        return tuple(bi + s * ui for bi, ui in zip(self.b, self.u, strict=True))

    def piece(self, s: Fraction, width: Fraction, side: int) -> Piece:
        eps = _dyadic_below(width) / 2**self.eps_bits
        s2 = s + side * eps
        y1, y2 = self.values.many([self.point(s), self.point(s2)])
        slope = (y2 - y1) / (s2 - s)
        return Piece(slope, y1 - slope * s)

    def _single_kink(self, a: Fraction, A: Piece, s: Fraction, B: Piece, b: Fraction) -> bool:
        """g follows A just left of s and B just right of it (two dyadic-ish probes).

        Checking g(s) == A(s) alone is not enough: two kinks both left of s can end on B,
        and then g(s) = B(s) = A(s) too.
        """
        w = min(s - a, b - s) / 2**16
        left = simplest_rational_between(s - w, s - w / 2)
        right = simplest_rational_between(s + w / 2, s + w)
        gl, gr = self.values.many([self.point(left), self.point(right)])
        return gl == A.at(left) and gr == B.at(right)

    def kinks(self, max_depth: int = 60) -> tuple[list[Fraction], list[Piece]]:
        """Sorted kinks s_1 < ... < s_K in (-1, 1) and the K + 1 pieces between them."""
        grid = [Fraction(-1) + Fraction(2 * i, self.grid) for i in range(self.grid + 1)]
        step = Fraction(2, self.grid)
        samples = [self.piece(s, step, -1 if s == 1 else 1) for s in grid]
        found: list[tuple[Fraction, Piece, Piece]] = []
        stack = [(grid[i], samples[i], grid[i + 1], samples[i + 1], 0) for i in range(self.grid)]
        while stack:
            a, A, b, B, depth = stack.pop()
            if A == B:
                continue
            if A.slope != B.slope:
                s = (B.intercept - A.intercept) / (A.slope - B.slope)
                if a < s < b and self._single_kink(a, A, s, B, b):
                    found.append((s, A, B))
                    continue
            if depth >= max_depth:
                raise _Retry(f"could not isolate the kinks in ({a}, {b})")
            mid = simplest_rational_between(a + (b - a) / 3, b - (b - a) / 3)
            M = self.piece(mid, min(mid - a, b - mid), 1)
            stack.append((a, A, mid, M, depth + 1))
            stack.append((mid, M, b, B, depth + 1))
        found.sort(key=lambda t: t[0])
        kinks = [s for s, _, _ in found]
        if not found:
            return kinks, [samples[0]]
        pieces = [found[0][1]] + [B for _, _, B in found]
        for (_, _, B), (_, A2, _) in itertools.pairwise(found):
            if B != A2:
                raise _Retry("adjacent kinks disagree about the piece between them")
        return kinks, pieces


def _gradient(
    values: Answers, seg: _Segment, piece: Piece, lo: Fraction, hi: Fraction, shrink: int
) -> Vec:
    """G with g(x) = G^T x on the piece (lo, hi) of the segment: d - rank[b u] queries."""
    d = len(seg.b)
    s = simplest_rational_between(lo + (hi - lo) / 4, hi - (hi - lo) / 4)
    y = seg.point(s)
    gy = piece.at(s)
    scale = max(max(abs(x) for x in seg.u), Fraction(1))
    delta = _dyadic_below((hi - lo) / scale) / 2 ** (12 + shrink)
    # Known: G^T b = intercept, G^T u = slope. Choose coordinates where [b u] is invertible.
    B = flint.fmpq_mat(
        d,
        2,
        [flint.fmpq(x.numerator, x.denominator) for r in zip(seg.b, seg.u, strict=True) for x in r],
    )
    pivots = _pivot_rows(B)
    others = [i for i in range(d) if i not in pivots]
    probes = [tuple(yj + (delta if j == i else 0) for j, yj in enumerate(y)) for i in others]
    G: list[Fraction | None] = [None] * d
    for i, val in zip(others, values.many(probes), strict=True):
        G[i] = (val - gy) / delta
    known = [piece.intercept, piece.slope]
    cols = [seg.b, seg.u][: len(pivots)]
    rhs = [
        k - sum((c[i] * G[i] for i in others), Fraction(0))
        for k, c in zip(known, cols, strict=False)
    ]
    M = flint.fmpq_mat(
        len(pivots),
        len(pivots),
        [flint.fmpq(c[i].numerator, c[i].denominator) for c in cols for i in pivots],
    )
    sol = M.solve(
        flint.fmpq_mat(len(pivots), 1, [flint.fmpq(r.numerator, r.denominator) for r in rhs])
    )
    for t, i in enumerate(pivots):
        G[i] = Fraction(int(sol[t, 0].p), int(sol[t, 0].q))
    return tuple(G)  # type: ignore[arg-type]


def _pivot_rows(B: flint.fmpq_mat) -> list[int]:
    """Rows of the d x 2 matrix B forming an invertible rank(B) x rank(B) minor."""
    rank = B.rank()
    rows: list[int] = []
    for i in range(B.nrows()):
        trial = [*rows, i]
        sub = flint.fmpq_mat(
            len(trial), B.ncols(), [B[r, c] for r in trial for c in range(B.ncols())]
        )
        if sub.rank() == len(trial):
            rows = trial
        if len(rows) == rank:
            break
    # Keep the columns that are independent too: rank 1 means b, u parallel; use b only.
    return rows


def _learn_once(
    values: Answers, d: int, rng: np.random.Generator, grid: int, shrink: int
) -> ReluNetwork:
    p = tuple(Fraction(int(x), 256) for x in rng.integers(-(2**16), 2**16, d))
    q = tuple(Fraction(int(x), 256) for x in rng.integers(-(2**16), 2**16, d))
    if (
        d >= 2
        and flint.fmpq_mat(
            d,
            2,
            [flint.fmpq(x.numerator, x.denominator) for r in zip(p, q, strict=True) for x in r],
        ).rank()
        < 2
    ):
        raise _Retry("p and q are parallel")
    segments = [
        _Segment(values, p, q, grid, 20 + shrink),
        _Segment(values, q, tuple(-x for x in p), grid, 20 + shrink),
    ]
    terms: dict[Vec, Fraction] = {}
    ref: tuple[Vec, Vec] | None = None
    for seg in segments:
        kinks, pieces = seg.kinks()
        bounds = [Fraction(-1), *kinks, Fraction(1)]
        grads = [
            _gradient(values, seg, pc, bounds[i], bounds[i + 1], shrink)
            for i, pc in enumerate(pieces)
        ]
        if ref is None:
            lo, hi = bounds[0], bounds[1]
            ref = (
                seg.point(simplest_rational_between(lo + (hi - lo) / 4, hi - (hi - lo) / 4)),
                grads[0],
            )
        for i, s in enumerate(kinks):
            J = tuple(a - b for a, b in zip(grads[i + 1], grads[i], strict=True))
            if not any(J) or _dot(J, seg.point(s)) != 0:
                raise _Retry(f"the gradient jump at s = {s} is not a hyperplane's normal")
            n, kappa = _normalise(J)
            gamma = kappa if _dot(n, seg.u) > 0 else -kappa
            terms[n] = terms.get(n, Fraction(0)) + gamma
    assert ref is not None
    y, G = ref
    linear = list(G)
    for n, gamma in terms.items():
        if _dot(n, y) > 0:
            linear = [a - gamma * b for a, b in zip(linear, n, strict=True)]
    return _assemble(d, linear, terms)


def learn_relu_ffn(
    oracle: Oracle,
    *,
    grid: int = 4,
    attempts: int = 3,
    **options: Unpack[ExactOptions],
) -> ReluFFNRecovery:
    """Learn g(x) = f([x]) exactly as a canonical bias-free ReLU network.

    Learning sends only length-1 queries. ``verify``: fresh sequences of the given
    ``lengths`` in turn (:func:`verified_attn.verification.fresh_sequences`) checked against
    the learned :class:`ReluFFN`, which reads the last token; pass ``lengths=(1,)`` to
    check only the length-1 function (e.g. of a Transformer); 0: not verified, and a failed
    plane can then go unnoticed. ``grid``: initial samples per segment (more guards against
    kinks whose jumps cancel inside one interval); ``attempts``: random planes to try
    before giving up; ``denominator_bound``: certified answers are reconstructed as the
    unique rational with at most this denominator (default
    :func:`default_denominator_bound`), an assumption the result records. ``progress``: a
    bar or callback over the queries (:mod:`verified_attn.progress`).

    The result's parameters are ``A`` (d x m) and ``w_o`` (m x 1) of the canonical network
    as a ReluFFN (a nonzero linear term l as the pair ReLU(l^T x) - ReLU(-l^T x));
    ``parameter_count`` is m'(d + 1) for the canonical width m'; ``bound`` is
    :func:`ffn_query_bound` at m'.

    Raises :class:`InvalidArgument` in float arithmetic (exact learning needs rational
    answers), :class:`ModelClassMismatch` if no attempt verifies (the oracle is not a
    bias-free ReLU network), :class:`PrecisionExhausted` if an answer cannot be
    reconstructed, :class:`QueryBudgetExceeded` when the oracle's budget runs out.
    """
    verify, seed, lengths, denominator_bound, progress = learner_arguments(
        oracle, "learn_relu_ffn", options
    )
    grid = check_int(grid, "grid", low=1, high=MAX_GRID)
    attempts = check_int(attempts, "attempts", low=1, high=MAX_ATTEMPTS)
    arith = oracle.arithmetic
    values = Answers(oracle, denominator_bound)
    d = oracle.d
    rng = np.random.default_rng(seed)
    with reporting(oracle, progress, "learn_relu_ffn"), oracle.run() as run, arith.context():
        (net, checked), failed = first_success(
            attempts,
            lambda i: _attempt(oracle, values, rng, (grid, i), verify, seed + i, lengths),
            (_Retry,),
            f"no bias-free ReLU network fits the oracle after {attempts} attempts",
        )
    counts = run.counts
    reasons = [str(exc) for exc in failed]
    used = len(reasons) + 1
    notes = [f"attempt {i + 1} failed: {r}" for i, r in enumerate(reasons)]
    if used > 1:
        notes.append(
            f"{used} random planes were used; the queries of the failed ones are counted in "
            "'queries' (phase 'ffn') and in the bound (one term per attempt)"
        )
    assumptions = values.assumptions()
    model = net.model()
    parameters = {"A": model.A, "w_o": model.w_o}
    bound = ffn_query_bound(d, net.width, grid=grid, attempts=used)
    record = RunRecord(arith, seed, counts, bound, checked, assumptions)
    certificate = functools.partial(
        relu_certificate_data, record, net, dict(values.raw), grid, used, values.D
    )
    return ReluFFNRecovery.from_record(
        record,
        theorem=THEOREM,
        parameters=parameters,
        learned_model=model,
        exact=True,
        parameter_count=net.width * (d + 1),
        rounds=0,
        notes=notes,
        certificate_data=certificate,
        network=net,
        attempts=used,
    )


def _attempt(
    oracle: Oracle,
    values: Answers,
    rng: np.random.Generator,
    plan: tuple[int, int],
    verify: int,
    seed: int,
    lengths: Any,
) -> tuple[ReluNetwork, Verification | None]:
    """One random plane at grid * 2^attempt: the network, verified; _Retry if it fails."""
    grid, attempt = plan
    d = oracle.d
    with oracle.phase("ffn"):
        net = _learn_once(values, d, rng, grid * 2**attempt, 8 * attempt)
    bound = ffn_query_bound(d, net.width, grid=grid, attempts=attempt + 1)
    if len(values.raw) > bound:
        raise _Retry(
            f"{len(values.raw)} learning queries exceed the bound {bound} at width {net.width}"
        )
    checked = verify_network(oracle, net, count=verify, seed=seed, lengths=lengths, retry=_Retry)
    return net, checked

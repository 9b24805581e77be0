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
(13, 6, 8, 972)
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
   piecewise linear; each segment is searched by the biased learner's line search
   (:class:`~verified_attn.transformer.relu_biased.LineSearch`, window [-1, 1]): a piece
   costs 2 queries, the pieces at an interval's ends meet at an exact s*, one probe on each
   side of s* confirms it as the one kink there (the one on the longer side of s* first,
   the other only when it agrees), and a failed probe or a middle point splits the
   interval (a half piece: 1 query). Every query point has a small denominator (never s* itself), which keeps
   certified reconstruction cheap. The second segment starts at q + p, the direction where
   the first one ends: the same cone (g is positively homogeneous), so its first piece is
   the first segment's last one read along ``q - t p`` and is not asked.
2. *Gradients.* Inside each cell g(x) = G^T x. The line already gives G^T p and G^T q; one
   query g(y + delta e_i) per remaining coordinate gives G_i = (g(y + delta e_i) - G^T y) /
   delta: d - 2 queries per cell, K + 1 cells for K kinks (the shared cone's gradient is
   computed once).
3. *Neurons.* The gradient jump across a kink is J = gamma n (orientation from the crossing
   direction); continuity J^T x* = 0 at the exact kink point is checked. The linear term is
   l = G_0 - sum over the hyperplanes on whose positive side y_0 lies of gamma_j n_j.

*The count.* With S pieces, S_half half pieces and P probes measured on the two segments
and K kinks found, one plane costs ``2 S + S_half + P + (d - min(d, 2))(K + 1)`` queries
(:func:`ffn_query_count` of the result's ``line_counts``, equal to the oracle's count; a
point asked before is neither asked nor counted again). At the default grid 1, S = 3.

The result is verified on the core's fresh sequences
(:func:`verified_attn.verification.verify_model`: == in exact mode, overlapping balls in
certified mode); a failed check (a kink hidden by a coincidence, a probe step that left its
piece) retries on a new random plane with smaller steps, every query counted.

*The bound.* The cost adapts to how close the kinks lie on the random plane, so there is no
closed form in d and m alone; the learner is held to :func:`ffn_query_bound`, a worst case
in d and the learned canonical width m': per attempt with g grid intervals per segment,
``4(g + 1)`` samples, ``2 m'`` kink probes, at most ``MAX_DEPTH`` splits (at most 4 queries
each: 2 probes, a middle probe and a half piece) per kink and segment end, and
``d - min(d, 2)`` gradient probes per cell:
``4(g + 1) + 2m' + (4 MAX_DEPTH + d - min(d, 2))(m' + 2)``, summed over the attempts made
(each doubles g). A run that would return a network learned with more queries than that is
refused (it never happens when every kink is isolated within MAX_DEPTH splits, as the
learner demands anyway).
"""

from __future__ import annotations

import functools
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
from verified_attn.transformer.relu_biased import Answers, LineSearch, Piece, Retry
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
    ffn_query_count,
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
    "ffn_query_count",
    "learn_relu_ffn",
]


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


def _dyadic_below(x: Fraction) -> Fraction:
    """The largest power of two <= x (x > 0)."""
    e = math.floor(math.log2(x.numerator) - math.log2(x.denominator))
    t = Fraction(2) ** e
    while t > x:
        t /= 2
    while 2 * t <= x:
        t *= 2
    return t


def _gradient(
    values: Answers, seg: LineSearch, piece: Piece, lo: Fraction, hi: Fraction, shrink: int
) -> Vec:
    """G with g(x) = G^T x on the piece (lo, hi) of the segment: d - rank[b u] queries."""
    d = len(seg.x0)
    s = simplest_rational_between(lo + (hi - lo) / 4, hi - (hi - lo) / 4)
    y = seg.point(s)
    gy = piece.at(s)
    scale = max(max(abs(x) for x in seg.u), Fraction(1))
    delta = _dyadic_below((hi - lo) / scale) / 2 ** (12 + shrink)
    # Known: G^T b = intercept, G^T u = slope. Choose coordinates where [b u] is invertible.
    B = flint.fmpq_mat(
        d,
        2,
        [flint.fmpq(x.numerator, x.denominator) for r in zip(seg.x0, seg.u, strict=True) for x in r],
    )
    pivots = _pivot_rows(B)
    others = [i for i in range(d) if i not in pivots]
    probes = [tuple(yj + (delta if j == i else 0) for j, yj in enumerate(y)) for i in others]
    G: list[Fraction | None] = [None] * d
    for i, val in zip(others, values.many(probes), strict=True):
        G[i] = (val - gy) / delta
    known = [piece.intercept, piece.slope]
    cols = [seg.x0, seg.u][: len(pivots)]
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
) -> tuple[ReluNetwork, dict[str, int]]:
    """One random plane's network (unverified) and its counts (:func:`ffn_query_count`)."""
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
        raise Retry("p and q are parallel")
    one = Fraction(1)
    first = LineSearch(values, p, q, one, grid=grid, eps_bits=20 + shrink, max_depth=MAX_DEPTH)
    kinks, pieces = first.kinks()
    grads = _gradients(values, first, kinks, pieces, shrink, None)
    # The second segment q - t p starts at q + p, the direction where the first one ends:
    # the same cone (no hyperplane passes through it, else neither segment sees it). Its
    # piece there is the first's last read along q - t p (G^T q - t G^T p), its gradient
    # the same: neither is asked again.
    last = pieces[-1]
    second = LineSearch(
        values,
        q,
        tuple(-x for x in p),
        one,
        grid=grid,
        eps_bits=20 + shrink,
        max_depth=MAX_DEPTH,
        start=Piece(-last.intercept, last.slope),
    )
    kinks2, pieces2 = second.kinks()
    grads2 = _gradients(values, second, kinks2, pieces2, shrink, grads[-1])
    terms: dict[Vec, Fraction] = {}
    for seg, ks, gs in ((first, kinks, grads), (second, kinks2, grads2)):
        for i, s in enumerate(ks):
            J = tuple(a - b for a, b in zip(gs[i + 1], gs[i], strict=True))
            if not any(J) or _dot(J, seg.point(s)) != 0:
                raise Retry(f"the gradient jump at s = {s} is not a hyperplane's normal")
            n, kappa = _normalise(J)
            gamma = kappa if _dot(n, seg.u) > 0 else -kappa
            terms[n] = terms.get(n, Fraction(0)) + gamma
    # The linear term from the first cell: its gradient less the neurons on whose positive
    # side it lies.
    hi = kinks[0] if kinks else one
    y = first.point(simplest_rational_between(-one + (hi + one) / 4, hi - (hi + one) / 4))
    linear = list(grads[0])
    for n, gamma in terms.items():
        if _dot(n, y) > 0:
            linear = [a - gamma * b for a, b in zip(linear, n, strict=True)]
    counts = {
        "pieces": first.pieces + second.pieces,
        "half_pieces": first.half_pieces + second.half_pieces,
        "probes": first.probes + second.probes,
        "kinks": len(kinks) + len(kinks2),
    }
    return _assemble(d, linear, terms), counts


def _gradients(
    values: Answers,
    seg: LineSearch,
    kinks: list[Fraction],
    pieces: list[Piece],
    shrink: int,
    known: Vec | None,
) -> list[Vec]:
    """The gradient of every cell the segment crosses (``known``: the first one's)."""
    bounds = [Fraction(-1), *kinks, Fraction(1)]
    return [
        known
        if i == 0 and known is not None
        else _gradient(values, seg, pc, bounds[i], bounds[i + 1], shrink)
        for i, pc in enumerate(pieces)
    ]


def learn_relu_ffn(
    oracle: Oracle,
    *,
    grid: int = 1,
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
        (net, checked, line_counts), failed = first_success(
            attempts,
            lambda i: _attempt(oracle, values, rng, (grid, i), verify, seed + i, lengths),
            (Retry,),
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
        line_counts=line_counts,
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
) -> tuple[ReluNetwork, Verification | None, dict[str, int]]:
    """One random plane at grid * 2^attempt: the network, verified, and its counts; Retry
    if it fails."""
    grid, attempt = plan
    d = oracle.d
    with oracle.phase("ffn"):
        net, line_counts = _learn_once(values, d, rng, grid * 2**attempt, 8 * attempt)
    bound = ffn_query_bound(d, net.width, grid=grid, attempts=attempt + 1)
    if len(values.raw) > bound:
        raise Retry(
            f"{len(values.raw)} learning queries exceed the bound {bound} at width {net.width}"
        )
    checked = verify_network(oracle, net, count=verify, seed=seed, lengths=lengths, retry=Retry)
    return net, checked, line_counts

"""How many heads? The number of canonical heads of a float box, from an upper bound.

>>> import verified_attn as va
>>> from verified_attn.multi_head.counterexamples import random_multi_head
>>> oracle = va.Oracle(random_multi_head(3, 2, 0), "float")
>>> found = count_heads(oracle, 4, seed=0)
>>> found.count, found.queries, head_count_queries(4)
(2, 56, 56)
>>> found.gap > GAP
True

For a pair of tokens (u, b) the query ``[b + u] * k + [b] * m`` gives every head the
ratio t = k / m of its two scores' weights, and the answer is

    F(t) = c + sum_h r_h * t lam_h / (1 + t lam_h),   lam_h = exp(u^T W_h b (+ u^T c_h)),

with ``r_h = u^T v_h`` (the constant c collects ``b^T v_h`` and the output bias). F is a
rational function of t whose poles ``-1/lam_h`` are one per canonical head with a nonzero
residue at that pair (heads with equal scores there merge into one pole), so at most H of
them. In the variable ``w = (t - 1) / (t + 1)`` (it maps the samples into [-1, 1), the
poles outside) the samples at two disjoint node sets ``w_i`` (rows) and ``w'_j`` (columns)
give the Loewner matrix

    L_ij = (F(w_i) - F(w'_j)) / (w_i - w'_j).

A constant contributes nothing to it and each simple pole ``a / (w - p)`` contributes the
rank-one matrix ``-a / ((w_i - p)(w'_j - p))``, so ``rank L`` is the number of poles: at
most H, in exact arithmetic never more.

**The rule.** ``n = max_heads + 2`` nodes per side (t = 0, the length-1 query [b], is a
row node; the others are ratios k / m with k + m <= 24, log-spaced in [2^-4, 2^4]), so
``2 max_heads + 4`` queries per pair, plus ``NOISE_QUERIES`` = 2 of them asked again with
the context tokens in the other order (the last token kept), at ``PAIRS`` = 4 seeded
random pairs: ``4 (2 max_heads + 6)`` queries in phase ``"head-count"``. The noise
figure is

    noise = max(u * A, the largest |difference| of a permuted pair of answers),

with A the largest |answer| and u the box's unit roundoff (at least 2^-53: the decoding
is float64); every sum of heads ignores the order of the context tokens, so a permuted
pair differs by rounding only (by more than rtol * A: the box depends on token order,
refused with ModelClassMismatch). With K the Cauchy matrix ``1 / (w_i - w'_j)``, a pair's
noise floor is

    tau = NOISE_FACTOR * noise * ||K||_F,   NOISE_FACTOR = 64.

A pair's count is the number of singular values of its L above tau; the head count is the
largest pair count (a head can be invisible at one pair: a residue near 0, or two heads
with nearly one score there). It is accepted only if at one pair attaining it
``sigma_count / sigma_(count + 1) >= GAP`` = 8 (a floor that sits in a gap of the
spectrum); otherwise PrecisionExhausted, naming the figures. A count of ``max_heads + 1``
is refused with ModelClassMismatch (more heads than the bound), ``n`` (every singular
value above the floor) with PrecisionExhausted (the box is noisier than the noise model),
0 with NotIdentifiable (the answers do not depend on the pair's weights).

**Why it cannot overcount.** The noise model: every answer is within ``30 noise`` of the
exact function of its heads. Then the measured matrix is ``L + E + R`` with
``E_ij = (e_i - e'_j) K_ij``, so ``||E||_2 <= 2 max|e| ||K||_F <= 60 noise ||K||_F``, and
R (float64's own rounding in forming L and in the SVD, a few units of
``2^-53 A ||K||_F``) takes the rest of tau; by Weyl's inequality
``sigma_(H + 1)(L + E + R) <= sigma_(H + 1)(L) + ||E + R||_2 <= tau``: no pair counts more
than H heads. Measured (``benchmarks/head_count_float.py``, 1280 counts): the singular
values beyond the true count stay under 0.04 of the floor (about ``2.6 noise ||K||_F``),
on float64 and float32 boxes and PyTorch modules; no overcount. A head whose singular
values stay under the floor at every pair is not counted; the float learner then fits
too few heads, and its check of every learning answer and of the fresh queries refuses
(ModelClassMismatch or PrecisionExhausted) rather than return a wrong model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.multi_head.refusals import restated
from verified_attn.oracle import Oracle
from verified_attn.recovery import MultiHeadRecovery, count_fields
from verified_attn.validation import check_int, check_oracle, check_seed

__all__ = [
    "ANSWER_ERROR",
    "GAP",
    "MAX_FLOAT_HEADS",
    "NOISE_FACTOR",
    "NOISE_QUERIES",
    "PAIRS",
    "U_SCALES",
    "HeadCount",
    "Spectra",
    "count_heads",
    "count_rule",
    "head_count_nodes",
    "head_count_queries",
    "learn_float_max_heads",
    "loewner",
    "probe_spectra",
]

#: C in the floor ``tau = C noise ||K||_F``: twice the error (30 noise) an answer may carry,
#: plus float64's rounding of L and its SVD. Measured tails stay under 0.04 of the floor.
NOISE_FACTOR = 64.0
#: The error an answer may carry, in units of the noise figure (the noise model).
ANSWER_ERROR = 30.0
#: G: the count's singular value must be at least G times the next one at some pair.
GAP = 8.0
#: Per pair, queries re-asked with the context in the other order (the measured noise).
NOISE_QUERIES = 2
#: Random (u, b) pairs probed (the count is the largest pair count).
PAIRS = 4
#: The scale of u at pair p is U_SCALES[p % 4] (see :func:`probe_pairs`).
U_SCALES = (1.0, 2.0, 3.0, 4.0)
#: The largest max_heads the node grid supports (2 max_heads + 3 distinct ratios).
MAX_FLOAT_HEADS = 16
# Node ratios t = k / m: k + m <= _MAX_LENGTH, log2 t evenly spread over the window.
_MAX_LENGTH = 24
_LOG2_WINDOW = 4.0
# The probe tokens' entries ~ N(0, s^2), s = _SCALE d^(-1/4): for heads with W ~ N(0, 1/d)
# the scores u^T W b then have a standard deviation of about 1.5 at every d, inside the
# nodes' window (poles -1/lam_h neither at 0 nor at infinity).
_SCALE = math.sqrt(1.5)
# Seeds the pairs apart from the learner's own design drawn from the same seed.
_STREAM = 0x48C


@dataclass(frozen=True)
class HeadCount:
    """The head count of a float box and its evidence.

    ``count``: the number of heads; ``max_heads``: the bound it was found under;
    ``singular_values[p]``: pair p's Loewner singular values, largest first; ``floors[p]``:
    its noise floor tau; ``per_pair[p]``: how many exceed it; ``pair``: the pair whose
    spectrum decided (the largest gap among those attaining the count); ``gap``: its
    ``sigma_count / sigma_(count + 1)``; ``queries``: asked in phase "head-count";
    ``noise``: the noise figure the floors are made of, ``unit_noise`` its unit-roundoff
    part (unit roundoff x largest |answer|).

    >>> hc = HeadCount(1, 2, ((1.0, 1e-15, 1e-16, 0.0),), (1e-12,), (1,), 0, 1e15, 8)
    >>> hc.describe().split(";")[0]
    '1 head (at most 2) by the Loewner rule at 1 pairs (per pair: [1])'
    """

    count: int
    max_heads: int
    singular_values: tuple[tuple[float, ...], ...]
    floors: tuple[float, ...]
    per_pair: tuple[int, ...]
    pair: int
    gap: float
    queries: int
    noise: float = 0.0
    unit_noise: float = 0.0

    def describe(self) -> str:
        """One line: the count, the per-pair counts, the deciding spectrum and its gap."""
        sv = self.singular_values[self.pair]
        tau = self.floors[self.pair]
        shown = ", ".join(f"{s / tau:.2g}" for s in sv)
        return (
            f"{self.count} head{'s' if self.count != 1 else ''} (at most {self.max_heads}) by "
            f"the Loewner rule at {len(self.per_pair)} pairs (per pair: {list(self.per_pair)}); "
            f"pair {self.pair + 1}: singular values / floor = [{shown}], gap sigma_{self.count}"
            f"/sigma_{self.count + 1} = {self.gap:.3g} >= {GAP:g}"
        )


def head_count_nodes(max_heads: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (k, m) of one pair's queries: ``max_heads + 2`` row nodes (t = 0 first, the
    query [b]) and as many column nodes, alternating along the sorted ratio grid.

    >>> rows, cols = head_count_nodes(1)
    >>> rows, cols
    ([(0, 1), (1, 4), (4, 1)], [(1, 16), (1, 1), (16, 1)])
    >>> max(k + m for k, m in sum(head_count_nodes(MAX_FLOAT_HEADS), [])) <= 24
    True
    """
    n = max_heads + 2
    count = 2 * n - 1  # positive ratios; t = 0 is the first row node
    candidates = sorted(
        {
            (k // math.gcd(k, m), m // math.gcd(k, m))
            for k in range(1, _MAX_LENGTH)
            for m in range(1, _MAX_LENGTH - k + 1)
        }
    )
    chosen: list[tuple[int, int]] = []
    for i in range(count):
        e = (-_LOG2_WINDOW + 2 * _LOG2_WINDOW * i / (count - 1)) * math.log(2.0)
        free = [c for c in candidates if c not in chosen]
        # the nearest ratio in log t, then the shortest query
        chosen.append(min(free, key=lambda c: (round(abs(math.log(c[0] / c[1]) - e), 9), sum(c))))
    nodes = [(0, 1), *sorted(chosen, key=lambda c: c[0] / c[1])]
    return nodes[0::2], nodes[1::2]


def head_count_queries(max_heads: int, pairs: int = PAIRS) -> int:
    """Queries of the head count: ``pairs (2 max_heads + 4 + NOISE_QUERIES)``.

    >>> head_count_queries(3), head_count_queries(8)
    (48, 88)
    """
    return pairs * (2 * max_heads + 4 + NOISE_QUERIES)


def probe_pairs(d: int, seed: int, pairs: int = PAIRS) -> list[tuple[np.ndarray, np.ndarray]]:
    """``pairs`` seeded random token pairs (u, b), entries N(0, 1.5 / sqrt d), u then
    scaled by 1, 2, 3, 4 in turn (``U_SCALES``).

    The scores u^T (W_h b + c_h) and residues u^T v_h are linear in u: a larger u spreads
    the poles of a box whose scores are crowded (PyTorch's default initialisation: score
    spread ~0.5 at these probes, against ~1.5 for W ~ N(0, 1/d)). The count is the
    largest over the pairs, so each scale can only add heads that are there.

    >>> [u.shape for u, _ in probe_pairs(3, 0)], U_SCALES
    ([(3,), (3,), (3,), (3,)], (1.0, 2.0, 3.0, 4.0))
    """
    rng = np.random.default_rng([seed, _STREAM])
    s = _SCALE * d**-0.25
    out = []
    for p in range(pairs):
        u, b = rng.normal(0.0, s, d), rng.normal(0.0, s, d)
        out.append((U_SCALES[p % len(U_SCALES)] * u, b))
    return out


def _sequence(
    u: np.ndarray, b: np.ndarray, k: int, m: int, *, context_first: bool = False
) -> np.ndarray:
    """``[b + u] * k + [b] * m``, or with ``context_first`` ``[b] * (m - 1) + [b + u] * k +
    [b]`` (the same tokens, the context in the other order)."""
    a, c = np.tile(b + u, (k, 1)), np.tile(b, (m, 1))
    if context_first:
        return np.vstack([c[1:], a, c[:1]])
    return np.vstack([a, c])


def _noise_nodes(nodes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The NOISE_QUERIES longest nodes whose context has both tokens (k >= 1, m >= 2)."""
    mixed = [c for c in nodes if c[0] >= 1 and c[1] >= 2]
    return sorted(mixed, key=lambda c: -sum(c))[:NOISE_QUERIES]


def _moebius(nodes: Sequence[tuple[int, int]]) -> np.ndarray:
    t = np.array([k / m for k, m in nodes])
    return (t - 1.0) / (t + 1.0)


def loewner(
    rows: Sequence[tuple[int, int]],
    f_rows: np.ndarray,
    cols: Sequence[tuple[int, int]],
    f_cols: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The Loewner matrix ``(F_i - F'_j) / (w_i - w'_j)`` and the Cauchy matrix
    ``1 / (w_i - w'_j)`` of the nodes (w the Moebius variable of t = k / m).

    A sum of H poles gives rank H; a constant gives 0:

    >>> rows, cols = head_count_nodes(2)
    >>> F = lambda nodes: np.array([sum(2 * t * x / (1 + t * x) for x in (0.5, 3.0))
    ...                             for t in (k / m for k, m in nodes)])
    >>> L, K = loewner(rows, F(rows), cols, F(cols))
    >>> int(np.linalg.matrix_rank(L)), L.shape
    (2, (4, 4))
    >>> float(np.abs(loewner(rows, np.ones(4), cols, np.ones(4))[0]).max())
    0.0
    """
    K = 1.0 / (_moebius(rows)[:, None] - _moebius(cols)[None, :])
    return (np.asarray(f_rows)[:, None] - np.asarray(f_cols)[None, :]) * K, K


def count_rule(
    singular_values: Sequence[Sequence[float]],
    floors: Sequence[float],
    *,
    max_heads: int,
    gap: float = GAP,
) -> tuple[int, int, float, list[int]]:
    """The rule on given spectra: (count, deciding pair, its gap, per-pair counts).

    Pure (no queries): the head count is the largest number of singular values above a
    pair's floor, accepted if some pair attaining it has
    ``sigma_count / sigma_(count + 1) >= gap``.

    >>> count_rule([[1.0, 0.5, 1e-14, 1e-15], [1.0, 1e-14, 1e-15, 0.0]], [1e-12] * 2,
    ...            max_heads=2)[:2]
    (2, 0)
    >>> count_rule([[1.0, 0.5, 1e-11, 1e-15]], [1e-12], max_heads=2)
    Traceback (most recent call last):
    ...
    verified_attn.errors.ModelClassMismatch: the box has more than max_heads = 2 heads: ...
    """
    n = max_heads + 2
    per_pair = [
        int(sum(1 for s in sv if s > tau)) for sv, tau in zip(singular_values, floors, strict=True)
    ]
    count = max(per_pair)

    def figures(p: int) -> str:
        sv, tau = singular_values[p], floors[p]
        if tau <= 0:  # every answer exactly 0: the floor is 0 too (no ratio to give)
            return f"pair {p + 1}: singular values [{', '.join(f'{s:.3g}' for s in sv)}], floor 0"
        return (
            f"pair {p + 1}: singular values / floor = [{', '.join(f'{s / tau:.3g}' for s in sv)}]"
        )

    best = per_pair.index(count)
    if count == n:
        raise PrecisionExhausted(
            f"every one of the {n} Loewner singular values of a pair is above the noise floor "
            f"({figures(best)}): the box's answers are noisier than the noise model "
            f"({ANSWER_ERROR:g} x its unit roundoff times the largest answer, or x the "
            "rounding measured on context-permuted probes), or it is not a sum of softmax "
            "heads; declare the box's precision (unit_roundoff=) or give heads="
        )
    if count == 0:
        raise NotIdentifiable(
            f"no Loewner singular value of any of the {len(per_pair)} pairs is above the noise "
            f"floor ({figures(best)}): the answers do not depend on the heads' weights "
            "(every residue u^T v_h is 0, or the box is constant)"
        )

    def ratio(p: int) -> float:
        sv = singular_values[p]
        return math.inf if sv[count] <= 0 else float(sv[count - 1] / sv[count])

    best = max((p for p, c in enumerate(per_pair) if c == count), key=ratio)
    if not ratio(best) >= gap:
        raise PrecisionExhausted(
            f"the head count {count} has no gap in the spectrum: sigma_{count}/sigma_"
            f"{count + 1} = {ratio(best):.3g} < {gap:g} at every pair counting {count} "
            f"({figures(best)}); a head sits at the noise floor or the box is noisier than "
            "declared; give heads= or declare the box's precision"
        )
    if count > max_heads:
        raise ModelClassMismatch(
            f"the box has more than max_heads = {max_heads} heads: {count} Loewner singular "
            f"values of a pair are above the noise floor ({figures(best)}, gap "
            f"{ratio(best):.3g}); give a larger max_heads"
        )
    return count, best, ratio(best), per_pair


@dataclass(frozen=True)
class Spectra:
    """What the head-count probes measured, before the rule: per pair the Loewner singular
    values (largest first) and ``||K||_F``; the noise figure ``noise`` (the larger of
    ``unit_noise`` = unit roundoff x largest |answer| and the measured rounding) and the
    queries asked. :func:`count_rule` turns them into a count."""

    singular_values: tuple[tuple[float, ...], ...]
    cauchy_norms: tuple[float, ...]
    noise: float
    unit_noise: float
    measured_noise: float
    queries: int

    def floors(self, noise: float | None = None) -> list[float]:
        """Each pair's floor ``NOISE_FACTOR * noise * ||K||_F`` (default: the measured
        noise figure)."""
        delta = self.noise if noise is None else noise
        return [NOISE_FACTOR * delta * k for k in self.cauchy_norms]


def probe_spectra(oracle: Oracle, max_heads: int, *, seed: int = 0, pairs: int = PAIRS) -> Spectra:
    """Ask the head-count probes (phase "head-count") and measure their spectra.

    >>> import verified_attn as va
    >>> from verified_attn.multi_head.counterexamples import random_multi_head
    >>> sp = probe_spectra(va.Oracle(random_multi_head(2, 1, 3), "float"), 3)
    >>> len(sp.singular_values), len(sp.singular_values[0]), sp.queries
    (4, 5, 48)
    """
    check_oracle(oracle)
    if oracle.arithmetic.name != "float":
        raise InvalidArgument(
            f"count_heads needs a float oracle (got arithmetic {oracle.arithmetic.name!r}); "
            "exact and certified oracles find the degree by a certified test "
            "(learn_multi_head(max_heads=))"
        )
    max_heads = check_int(max_heads, "max_heads", low=1, high=MAX_FLOAT_HEADS)
    seed = check_seed(seed)
    pairs = check_int(pairs, "pairs", low=1)
    oracle.require_remaining(head_count_queries(max_heads, pairs), 0, "count_heads")
    rows, cols = head_count_nodes(max_heads)
    nodes = rows + cols
    noise_nodes = _noise_nodes(nodes)
    probes = probe_pairs(oracle.d, seed, pairs)
    seqs = [_sequence(u, b, k, m) for u, b in probes for k, m in nodes]
    # Each pair's noise queries: the same multiset of tokens with the context in the other
    # order (the last token, the one read out, kept): equal exactly for every sum of heads,
    # so their difference is rounding, measured rather than assumed.
    seqs += [_sequence(u, b, k, m, context_first=True) for u, b in probes for k, m in noise_nodes]
    before = oracle.queries
    with oracle.phase("head-count"):
        got = np.array(oracle.query_many(seqs), dtype=np.float64)
    if not np.all(np.isfinite(got)):
        bad = int(np.flatnonzero(~np.isfinite(got))[0])
        raise ModelClassMismatch(
            f"the box answered {got[bad]} to a head-count query: not a sum of softmax heads "
            "(whose answers are finite)",
            query=seqs[bad],
            observed=float(got[bad]),
        )
    answers = got[: pairs * len(nodes)].reshape(pairs, len(nodes))
    again = got[pairs * len(nodes) :].reshape(pairs, len(noise_nodes))
    index = [nodes.index(node) for node in noise_nodes]
    diffs = np.abs(again - answers[:, index])
    measured = float(diffs.max())
    A = float(np.abs(answers).max())
    rtol = float(oracle.arithmetic.rtol or 0.0)  # always set in float mode
    if measured > rtol * A:
        # Beyond the declared precision: not rounding but a dependence on token order.
        p, i = np.unravel_index(int(np.argmax(diffs)), diffs.shape)
        k, m = noise_nodes[i]
        first = seqs[p * len(nodes) + index[i]]
        raise ModelClassMismatch(
            f"the box depends on the order of the context tokens: two head-count queries with "
            f"the same tokens ({k} x b + u and {m} x b, the last token b in both) in another "
            f"order differ by {measured:.3g} > rtol {rtol:g} x {A:.3g}; "
            "every sum of softmax heads ignores that order (positional encodings? a window?)",
            query=first,
            observed=float(again[p, i]),
            expected=float(answers[p, index[i]]),
        )
    unit = max(float(getattr(oracle.arithmetic, "unit_roundoff", 2.0**-53)), 2.0**-53)
    unit_noise = unit * A
    spectra: list[tuple[float, ...]] = []
    norms: list[float] = []
    for F in answers:
        L, K = loewner(rows, F[: len(rows)], cols, F[len(rows) :])
        spectra.append(tuple(float(s) for s in np.linalg.svd(L, compute_uv=False)))
        norms.append(float(np.linalg.norm(K)))
    return Spectra(
        singular_values=tuple(spectra),
        cauchy_norms=tuple(norms),
        noise=max(unit_noise, measured),
        unit_noise=unit_noise,
        measured_noise=measured,
        queries=oracle.queries - before,
    )


def count_heads(oracle: Oracle, max_heads: int, *, seed: int = 0, pairs: int = PAIRS) -> HeadCount:
    """Count the canonical heads of a float box known to have at most ``max_heads``.

    Asks ``head_count_queries(max_heads, pairs)`` learning queries in phase "head-count"
    (counted by the caller's run) and applies the rule of this module. Never more heads
    than the box has, under its noise model (see the module docstring).

    >>> import verified_attn as va
    >>> from verified_attn.multi_head.counterexamples import random_multi_head
    >>> count_heads(va.Oracle(random_multi_head(2, 1, 3), "float"), 3).count
    1
    >>> count_heads(va.Oracle(random_multi_head(2, 1, 3), "certified"), 3)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: count_heads needs a float oracle (got arithmetic 'certified'); exact and certified oracles find the degree by a certified test (learn_multi_head(max_heads=))
    """
    sp = probe_spectra(oracle, max_heads, seed=seed, pairs=pairs)
    floors = sp.floors()
    count, pair, gap, per_pair = count_rule(sp.singular_values, floors, max_heads=max_heads)
    return HeadCount(
        count=count,
        max_heads=max_heads,
        singular_values=sp.singular_values,
        floors=tuple(floors),
        per_pair=tuple(per_pair),
        pair=pair,
        gap=gap,
        queries=sp.queries,
        noise=sp.noise,
        unit_noise=sp.unit_noise,
    )


def noise_assumption(found: HeadCount, unit: float) -> str:
    """The assumption a float head count rests on (recorded in the result)."""
    return (
        f"head count {found.count}: every answer is within {ANSWER_ERROR:g} x "
        f"{found.noise:.3g} of an exact sum of softmax heads (the larger of the box's unit "
        f"roundoff {unit:.3g} times its largest probe answer and the rounding measured on "
        "context-permuted probes); under it no Loewner matrix has more singular values above "
        "its floor than there are heads (Weyl), so the count is at most the truth"
    )


def learn_float_max_heads(
    oracle: Oracle,
    max_heads: int,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
) -> MultiHeadRecovery:
    """``learn_multi_head(float_oracle, max_heads=...)``: count, then decode (arguments
    already validated there). One run: ``rec.queries + rec.verification_queries`` is
    everything asked, the head count included (phase "head-count").

    >>> import verified_attn as va
    >>> from verified_attn.multi_head.counterexamples import random_multi_head
    >>> from verified_attn.multi_head.canonical_learner import learn_multi_head
    >>> rec = learn_multi_head(va.Oracle(random_multi_head(2, 1, 0), "float"), max_heads=2)
    >>> rec.H, rec.queries_by_phase["head-count"] == head_count_queries(2)
    (1, True)
    """
    from verified_attn.multi_head.canonical_float import (
        float_query_limit,
        learn_float,
        too_few_heads_float,
    )

    max_heads = check_int(max_heads, "max_heads", low=1, high=MAX_FLOAT_HEADS)
    counting = head_count_queries(max_heads)
    # The worst case (the decoding at max_heads heads): a budget is checked against it
    # before any query, so a too-small budget leaves nothing half-done.
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", 2.0**-53))
    bound = counting + float_query_limit(oracle.d, max_heads, affine=affine, unit=unit)
    oracle.require_remaining(bound, verify, "learn_multi_head")
    with oracle.run() as run:
        found = count_heads(oracle, max_heads, seed=seed)
        H = found.count
        try:
            inner = learn_float(oracle, H, verify=verify, seed=seed, lengths=lengths, affine=affine)
        except (ModelClassMismatch, PrecisionExhausted, NotIdentifiable) as exc:
            cause: Exception = exc
            if not isinstance(exc, ModelClassMismatch):
                diagnosis = too_few_heads_float(oracle, H, seed, affine)
                if diagnosis is not None:
                    cause = diagnosis
            why = (
                f"; {H} heads were counted ({found.describe()}): a head whose Loewner "
                "singular values stay under the noise floor at every probed pair is not "
                "counted, and the decoding with fewer heads than the box has is refused"
            )
            if isinstance(cause, ModelClassMismatch):
                raise restated(cause, f"{cause}{why}") from exc
            raise type(cause)(f"{cause}{why}") from exc
    counts = run.counts
    unit = max(float(getattr(oracle.arithmetic, "unit_roundoff", 2.0**-53)), 2.0**-53)
    notes = [
        f"head count (float, at most {max_heads}): {found.describe()}; "
        f"{found.queries} queries (phase head-count), then the float decoding with {H} heads",
        *inner.notes,
        f"the certificate re-checks the decoding with heads = {H} (its counts are the "
        f"decoding's {inner.queries} learning queries); the {found.queries} head-count "
        "queries are not in it",
    ]
    return dataclasses.replace(
        inner,
        **count_fields(counts),
        bound=bound,
        rounds=inner.rounds + 1,  # the decoding's design depends on the count
        assumptions=[*inner.assumptions, noise_assumption(found, unit)],
        notes=notes,
    )

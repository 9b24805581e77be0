"""Canonical multi-head recovery without subspaces (in the style of arXiv 2608.03294).

>>> import verified_attn as va
>>> from verified_attn.models import MultiHeadAttention
>>> from verified_attn.multi_head.canonical import canonical_form
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> rec = learn_multi_head(va.Oracle(model, "certified"), heads=2)
>>> rec.heads == canonical_form(model).heads, type(rec.model).__name__
(True, 'MultiHeadAttention')
>>> rec.queries, canonical_query_bound(2, 2), follow_up_query_bound(2, 2)
(22, 22, 29)

For tokens a = b + u and b, the query ``X_k = [a, ..., a (k copies), b]`` gives each head the
scores ``a^T W_h b`` (k times) and ``b^T W_h b``, so

    F(k) = sum_h [ b^T v_h + u^T v_h * k lam_h / (1 + k lam_h) ],  lam_h = exp(u^T W_h b),

a rational function of k of degree H with poles ``-1/lam_h`` and residues
``-u^T v_h / lam_h``. ``F(0)`` is the length-1 query [b]; k = 1..2H give 2H + 1 samples
that fix ``F = P/Q`` (Q(0) = 1) by one linear system. The roots of Q give each canonical
head's score ``u^T W_h b = log lam_h``, the residues its ``u^T v_h``.

Design (ours): bases ``u_1..u_d`` and ``b_1..b_d`` (random small rationals); pairs
``(u_k, b_j)`` for all k, j, plus the links ``(u_1 + u_k, b_1)``, k = 2..d. Heads are
matched across j for fixed u_k by their residue ``u_k^T v_h`` (it does not depend on b),
and across k through the links, where score and residue must be the sums of those at
``u_1`` and ``u_k``. Then ``U^T W_h B`` and ``U^T v_h`` are known exactly and solved
for. Queries: ``d + 2H (d^2 + d - 1)``, against the follow-up's ``4Hd^2 - 2H + 1`` and
the parameter count ``H (d^2 + d)``; longest query ``2H + 1``. Heads with equal v tie in
the residue labelling; each tie costs one query (F(1) at ``(u_k, (b_1 + b_j)/2)``, which
every candidate order predicts exactly), at most ``d (d - 1)``, so the worst case
``canonical_query_limit`` stays within the follow-up's count.

Affine heads (score bias c_h, output bias beta): one more generic probe b_0 makes the
scores' affine dependence on b solvable (``d + 1 + 2H (d^2 + 2d - 1)`` queries, at most
``d^2`` tie links); beta is F(0) at b_1 minus ``b_1^T sum_h v_h``.

Certified arithmetic: the linear system and the roots are solved in arb, the scores and
residues reconstructed as rationals (denominator bound), then verified on fresh queries.
Exact arithmetic: the exact answers are enclosed in arb and the same steps run; the final
check compares exact values. If only an upper bound ``max_heads`` is known, the degree is
found as the largest m <= max_heads whose system is *certified* nonsingular: above the true
degree the system is exactly singular, so arb can never certify it. A float box's count
comes from :mod:`.head_count_float` (Loewner ranks above a stated noise floor).

Float arithmetic (e.g. a PyTorch module): an orthogonal float design
with a ratio grid per pair (one redundant sample), the pairs of each u fitted jointly with
shared residues, the u-groups ordered by predicting the halved links (see
:mod:`.canonical_float`); ``d + (2H + [H >= 2])(d^2 + d - 1)`` queries (+ tie links only
where residues tie). The result is returned only if its first-order parameter error
estimate, the learning answers and the fresh queries all agree with it to the oracle's rtol.

Modules: this one holds the public learner, the query bounds and the design (shared);
:mod:`.canonical_certified` the exact/certified decoding, :mod:`.canonical_float` the
float64 one. The pole mathematics is the core :mod:`verified_attn.rational_interpolation`,
which the certificate checker (:mod:`verified_attn.certificates.multi_head`) uses too.
"""

from __future__ import annotations

from typing import Unpack

from verified_attn.errors import InvalidArgument
from verified_attn.learner_options import ExactOptions, LearnerOptions, learner_options
from verified_attn.multi_head.canonical_bounds import (
    EXACT_MODE_PRECISION,
    METHOD,
    THEOREM,
    basis,
    canonical_design,
    canonical_query_bound,
    canonical_query_limit,
    follow_up_query_bound,
    lifted_probes,
    parameter_count,
    probe_matrix,
    probe_sequence,
)
from verified_attn.multi_head.refusals import diagnosed
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.validation import (
    check_bool,
    check_int,
    check_oracle,
    require_size,
)

__all__ = [
    "EXACT_MODE_PRECISION",
    "METHOD",
    "THEOREM",
    "basis",
    "canonical_design",
    "canonical_query_bound",
    "canonical_query_limit",
    "follow_up_query_bound",
    "learn_multi_head",
    "lifted_probes",
    "parameter_count",
    "probe_matrix",
    "probe_sequence",
]


def learn_multi_head(
    oracle: Oracle,
    *,
    heads: int | None = None,
    max_heads: int | None = None,
    affine: bool | None = None,
    rank: int | str | None = None,
    **options: Unpack[ExactOptions],
) -> MultiHeadRecovery:
    """Recover the canonical form of a multi-head oracle (exact, certified or float).

    Give ``heads`` (the number of canonical heads) or ``max_heads`` (an upper bound H0; the
    queries are then counted with H0). The result's ``parameters["heads"]`` is the canonical
    form, equal (``==``) to ``canonical_form(model).heads`` for rational ground truth.
    ``affine`` (default: what the oracle declares) learns score biases c_h and the output
    bias beta too (``parameters["beta"]``): one more generic probe b_0 makes the scores'
    affine dependence on b solvable, and beta = F(0) at b_1 minus ``b_1^T sum_h v_h``.

    Float oracles (e.g. a PyTorch module) are decoded in float64 with the same queries and
    accepted only if the fresh verification queries agree to the oracle's ``rtol``; the heads
    are then float arrays (``parameters["heads"]``, canonical order). Given ``heads=`` the
    decoding uses it; given ``max_heads=``, the number of heads is first counted from
    probes of its own (:mod:`.head_count_float`: the numerical rank of Loewner matrices
    above a stated noise floor, never more heads than there are under its noise model;
    phase "head-count").

    ``verify``: fresh sequences (of the given ``lengths`` in turn) checked against the
    result in a declared verification phase (0: not verified, and the result says so).
    ``denominator_bound``: scores and residues are reconstructed as the unique rational
    with denominator at most this (default 2^(precision/4)) in their balls; the result
    records that assumption. Returns a :class:`~verified_attn.recovery.MultiHeadRecovery`
    (``method == "canonical"``) whose ``model`` is the canonical
    :class:`~verified_attn.models.MultiHeadAttention` and whose ``certificate()`` stores
    every answer for :mod:`verified_attn.certificates.multi_head`. ``progress``: a bar or
    callback over the queries (:mod:`verified_attn.progress`).

    ``rank`` (float oracles with ``heads=``): the heads' score matrices ``[W_h | c_h]`` have
    rank at most this int, or ``"find"`` to find it from full u-groups; the low-rank
    skeleton design (:mod:`.pipeline.low_rank_design`) then asks about ``2H (2rd - r^2 + d)``
    queries instead of ``2H d^2`` (``method == "canonical-low-rank"``). A box whose heads
    have a higher rank is refused (ModelClassMismatch naming the rank), never returned.
    None (default): the full design.

    >>> import verified_attn as va
    >>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [1]), "float"), heads=1)
    >>> rec.queries, rec.exact, rec.verified, rec.verification_error < 1e-12
    (3, False, True, True)
    >>> learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [1])), heads=1, verify=0).verified
    False
    >>> from verified_attn.multi_head.counterexamples import random_multi_head
    >>> rec = learn_multi_head(va.Oracle(random_multi_head(2, 2, 0), "float"), max_heads=3)
    >>> rec.H, rec.queries_by_phase["head-count"], rec.verified
    (2, 48, True)
    """
    check_oracle(oracle)
    arith = oracle.arithmetic
    if (heads is None) == (max_heads is None):
        raise InvalidArgument("give exactly one of heads= (known H) or max_heads= (an upper bound)")
    H0 = check_int(
        heads if heads is not None else max_heads,
        "heads" if heads is not None else "max_heads",
        low=1,
    )
    d = oracle.d
    require_size(
        f"learn_multi_head at d = {d}, {H0} heads",
        numbers=4 * H0 * (d * d + 2 * d + 1),
        arithmetic=arith.name,
        precision=arith.precision,
        queries=2 * H0 * (d * d + 2 * d),
    )
    opts = learner_options("learn_multi_head", options)
    affine = check_bool(affine, "affine", allow_none=True)
    declared = oracle.model_class in ("multi-head-affine", "single-head-affine")
    if affine is None:
        affine = declared
    elif declared and not affine:
        raise InvalidArgument(
            f"affine=False, but the oracle declares model class {oracle.model_class!r} "
            "(score or output biases): pass affine=True or leave it None"
        )
    if rank is not None:
        return _low_rank(oracle, H0, heads is not None, opts, affine, rank)
    with reporting(oracle, opts.progress, "learn_multi_head"):
        return _learn(oracle, H0, heads is not None, opts, affine)


def _low_rank(
    oracle: Oracle,
    H0: int,
    degree_known: bool,
    opts: LearnerOptions,
    affine: bool,
    rank: int | str,
) -> MultiHeadRecovery:
    """The low-rank skeleton path (:mod:`.pipeline.skeleton`), arguments checked here."""
    from verified_attn.multi_head.pipeline.skeleton import RANK_FOUND, learn_low_rank_float

    if oracle.arithmetic.name != "float" or not degree_known:
        raise InvalidArgument(
            "rank= is for float oracles with heads= given (the low-rank skeleton design)"
        )
    if rank != RANK_FOUND:
        if isinstance(rank, str):
            raise InvalidArgument(f"rank must be an int or {RANK_FOUND!r}, got {rank!r}")
        rank = check_int(rank, "rank", low=1, high=oracle.d + (1 if affine else 0))
    with reporting(oracle, opts.progress, "learn_multi_head"):
        return learn_low_rank_float(
            oracle,
            H0,
            rank,
            verify=opts.verify,
            seed=opts.seed,
            lengths=opts.lengths,
            affine=affine,
        )


def _learn(
    oracle: Oracle, H0: int, degree_known: bool, opts: LearnerOptions, affine: bool
) -> MultiHeadRecovery:
    """:func:`learn_multi_head` by arithmetic (arguments validated there)."""
    verify, seed, lengths = opts.verify, opts.seed, opts.lengths
    arith = oracle.arithmetic
    if arith.name == "float" and not degree_known:
        # The count first (its own probes, the Loewner rule), then the float decoding with it.
        from verified_attn.multi_head.head_count_float import learn_float_max_heads

        return learn_float_max_heads(
            oracle, H0, verify=verify, seed=seed, lengths=lengths, affine=affine
        )
    if arith.name == "float":
        # Its own design and count (a ratio grid with redundancy), budget-checked there.
        from verified_attn.multi_head.canonical_float import learn_float, too_few_heads_float

        return diagnosed(
            lambda: learn_float(
                oracle, H0, verify=verify, seed=seed, lengths=lengths, affine=affine
            ),
            lambda: too_few_heads_float(oracle, H0, seed, affine),
        )
    # The worst case, ties included: never exceeded, so a budget is checked against it.
    bound = canonical_query_limit(oracle.d, H0, affine=affine)
    oracle.require_remaining(bound, verify, "learn_multi_head")
    from verified_attn.multi_head.canonical_certified import learn_certified

    return learn_certified(oracle, H0, degree_known, opts, affine)

"""Claims on recovering the canonical form of multi-head attention from queries (the
follow-up's learner, and its affine extension): exact heads, the query counts attained,
the budget refused below them.

>>> from verified_attn.multi_head.claims_recovery import RECOVERY_CLAIM
>>> RECOVERY_CLAIM.id, sorted(RECOVERY_CLAIM.presets)
('prop-7.1/canonical-recovery', ['large', 'medium', 'small'])
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn.certificates import verify_certificate
from verified_attn.checks import Claim, ClaimResult, SizeParams
from verified_attn.errors import QueryBudgetExceeded
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical import canonical_form
from verified_attn.multi_head.canonical_learner import (
    canonical_query_bound,
    canonical_query_limit,
    follow_up_query_bound,
    learn_multi_head,
)
from verified_attn.multi_head.claims_structure import REF, is_canonical_of, size_presets
from verified_attn.multi_head.counterexamples import counterexample, random_multi_head
from verified_attn.oracle import Oracle

__all__ = ["AFFINE_RECOVERY_CLAIM", "RECOVERY_CLAIM"]


def _result(cid: str, statement: str, ok: bool, detail: str, **kw: object) -> ClaimResult:
    return ClaimResult(cid, REF, statement, bool(ok), detail, **kw)  # type: ignore[arg-type]


_CASES = (("certified", 3, 2), ("certified", 2, 3), ("exact", 2, 2), ("certified", 4, 2))


def _canonical_recovery(seed: int, cases: tuple[tuple[str, int, int], ...] = _CASES) -> ClaimResult:
    ok, rows = True, []
    used = bound = 0
    for arith, d, H in cases:
        model = random_multi_head(d, H, seed + 7 * d + H)
        oracle = Oracle(model, arith, record=True)
        rec = learn_multi_head(oracle, heads=H, seed=seed)
        used, bound = rec.queries, canonical_query_bound(d, H)
        good = (
            rec.heads == canonical_form(model).heads
            and is_canonical_of(rec.heads, model, seed)
            and used == bound == d + 2 * H * (d * d + d - 1)
            and used <= follow_up_query_bound(d, H) == 4 * H * d * d - 2 * H + 1
            and _longest_learning_query(oracle) == 2 * H + 1
            and verify_certificate(rec.certificate()).ok
        )
        ok &= good
        rows.append(
            f"{arith} d={d} H={H}: {used} queries (ours {bound}, follow-up "
            f"{follow_up_query_bound(d, H)}, params {H * (d * d + d)}), exact {good}"
        )
    # Merged heads come back canonical, with H given only as an upper bound.
    pair = counterexample("multi-head", d=2, heads=3, kind="shared-score-split", seed=seed)
    rec = learn_multi_head(Oracle(pair.first, "certified"), max_heads=3, seed=seed)
    merged = rec.parameters["heads"] == canonical_form(pair.second).heads
    ok &= merged
    rows.append(f"shared-W pair, max_heads=3: canonical {merged}")
    # Equal v: every (u_k, b_j), j > 1, ties; one tie link each. The worst case is
    # attained exactly and stays within the follow-up's count.
    for d, H in ((2, 2), (3, 2)):
        tied = _equal_v_model(d, H, seed)
        rec = learn_multi_head(Oracle(tied, "certified"), heads=H, seed=seed)
        limit = canonical_query_limit(d, H)
        good = (
            rec.parameters["heads"] == canonical_form(tied).heads
            and rec.queries == limit == d + 2 * H * (d * d + d - 1) + d * (d - 1)
            and limit <= 4 * H * d * d - 2 * H + 1
            and rec.queries_by_phase.get("tie links") == d * (d - 1)
        )
        ok &= good
        rows.append(f"equal v d={d} H={H}: {rec.queries} queries (limit {limit}), exact {good}")
    # The limit minus one is refused before any query.
    refused = _refused_below(random_multi_head(2, 2, seed), canonical_query_limit(2, 2), seed)
    ok &= refused
    rows.append(f"budget bound - 1 refused: {refused}")
    return _result(
        "prop-7.1/canonical-recovery", RECOVERY, ok, "; ".join(rows), queries=used, bound=bound
    )


def _longest_learning_query(oracle: Oracle) -> int:
    """The longest query outside the verification phase (from the oracle's transcript)."""
    return max(
        e.sequence.nrows() if hasattr(e.sequence, "nrows") else len(e.sequence)
        for e in oracle.transcript
        if e.phase != "verify"
    )


def _equal_v_model(d: int, H: int, seed: int) -> MultiHeadAttention:
    """H heads sharing one v (distinct W): residues tie at every probe."""
    base = random_multi_head(d, H, seed)
    v = base.head_models[0].v
    return MultiHeadAttention([(m.W, v) for m in base.head_models])


def _affine_model(d: int, H: int, seed: int, *, equal_v: bool) -> MultiHeadAttention:
    base = random_multi_head(d, H, seed)
    shift = random_multi_head(d, H, seed + 1)  # its v's serve as score biases c_h
    v0 = base.head_models[0].v
    return MultiHeadAttention(
        [
            (m.W, v0 if equal_v else m.v, s.v)
            for m, s in zip(base.head_models, shift.head_models, strict=True)
        ],
        beta=Fraction(-7, 3),
    )


def _affine_recovery(seed: int) -> ClaimResult:
    ok, rows = True, []
    used = bound = 0
    cases = (("certified", 2, 2, False), ("exact", 2, 2, True), ("certified", 3, 2, False))
    for arith, d, H, equal_v in cases:
        model = _affine_model(d, H, seed + 5 * d + H, equal_v=equal_v)
        rec = learn_multi_head(Oracle(model, arith), heads=H, seed=seed)
        form = canonical_form(model)
        used = rec.queries
        bound = (canonical_query_limit if equal_v else canonical_query_bound)(d, H, affine=True)
        # Written out: d + 1 + 2H (d^2 + 2d - 1), plus d^2 tie links when the values tie.
        literal = d + 1 + 2 * H * (d * d + 2 * d - 1) + (d * d if equal_v else 0)
        good = (
            form.affine
            and rec.parameters["heads"] == form.heads
            and rec.parameters["beta"] == form.beta
            and used == bound == literal
        )
        ok &= good
        rows.append(f"{arith} d={d} H={H} equal v {equal_v}: {used} queries, exact {good}")
    model = _affine_model(2, 2, seed, equal_v=False)
    refused = _refused_below(model, canonical_query_limit(2, 2, affine=True), seed)
    ok &= refused
    rows.append(f"budget limit - 1 refused: {refused}")
    return _result(
        "prop-7.1/affine-canonical-recovery",
        AFFINE_RECOVERY,
        ok,
        "; ".join(rows),
        queries=used,
        bound=bound,
    )


def _refused_below(model: MultiHeadAttention, limit: int, seed: int) -> bool:
    """A budget of the learning limit minus one (plus the 8 default verification queries)
    is refused with QueryBudgetExceeded before any query (two heads asked)."""
    oracle = Oracle(model, "certified", budget=limit + 8 - 1)
    try:
        learn_multi_head(oracle, heads=2, seed=seed)
    except QueryBudgetExceeded:
        return oracle.queries == 0
    return False


RECOVERY = (
    "Without subspaces, the canonical form is recovered exactly (certified and exact "
    "arithmetic) from d + 2H(d^2 + d - 1) queries of length <= 2H + 1, plus one tie-link "
    "query per pair (u_k, b_j), j > 1, where heads with equal v tie: at most "
    "d + 2H(d^2 + d - 1) + d(d - 1) <= 4Hd^2 - 2H + 1 in all, the limit attained."
)
AFFINE_RECOVERY = (
    "With score biases c_h and an output bias beta (affine heads), the canonical form and "
    "beta are recovered exactly from d + 1 + 2H(d^2 + 2d - 1) queries, plus at most d^2 "
    "tie links for heads with equal v."
)


def _canonical_recovery_at(seed: int, size: SizeParams) -> ClaimResult:
    """Certified at the given d and H (the tie, merge and budget cases stay as they are)."""
    return _canonical_recovery(seed, (("certified", int(size["d"]), int(size["heads"])),))


_RECOVERY_SIZES: dict[str, Any] = {
    **size_presets({"d": 4, "heads": 2}, {"d": 8, "heads": 2}, {"d": 16, "heads": 3}),
    "check_at": _canonical_recovery_at,
}


RECOVERY_CLAIM = Claim(
    "prop-7.1/canonical-recovery",
    "follow-up (arXiv 2608.03294)",
    RECOVERY,
    _canonical_recovery,
    **_RECOVERY_SIZES,
)
AFFINE_RECOVERY_CLAIM = Claim(
    "prop-7.1/affine-canonical-recovery",
    "ours (docs/theory.md, The models)",
    AFFINE_RECOVERY,
    _affine_recovery,
)

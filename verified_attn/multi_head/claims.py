"""Claims of Prop 7.1 (non-identifiability of multi-head attention) and beyond.

>>> from verified_attn.multi_head.claims import CLAIMS
>>> [c.id for c in CLAIMS][:2]
['prop-7.1/permutation', 'prop-7.1/shared-score-split']
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn import soundness
from verified_attn.certificates import verify_certificate
from verified_attn.checks import LEVEL_SYMBOLIC, Claim, ClaimResult, SizeParams
from verified_attn.errors import (
    ModelClassMismatch,
    PrecisionExhausted,
    QueryBudgetExceeded,
    VerifiedAttnError,
)
from verified_attn.models import MultiHeadAttention, SingleHeadAttention
from verified_attn.multi_head.canonical import canonical_form, equivalent
from verified_attn.multi_head.canonical_learner import (
    canonical_query_bound,
    canonical_query_limit,
    follow_up_query_bound,
    learn_multi_head,
)
from verified_attn.multi_head.counterexamples import counterexample, perturb, random_multi_head
from verified_attn.multi_head.identifiability import local_dimension
from verified_attn.multi_head.learner import (
    learn_orthogonal_heads,
    orthogonal_heads_model,
    orthogonal_query_bound,
)
from verified_attn.multi_head.symbolic import linearity_in_v, prove_same_map
from verified_attn.oracle import Oracle
from verified_attn.oracle_wrappers import float32_multi_head_oracle

__all__ = ["CLAIMS"]

REF = "Prop 7.1"


def _result(cid: str, statement: str, ok: bool, detail: str, **kw: object) -> ClaimResult:
    return ClaimResult(cid, REF, statement, bool(ok), detail, **kw)  # type: ignore[arg-type]


#: The kind claims check every d = 1..D and every H = 2..H_max (the structural proof and
#: its wrong partner take about 0.5 s per pair).
_KIND_SIZES: dict[str, Any] = {
    "sizes": {"d_max": 3, "heads_max": 3},
    "presets": {
        "small": {"d_max": 3, "heads_max": 3},
        "medium": {"d_max": 5, "heads_max": 3},
        "large": {"d_max": 8, "heads_max": 4},
    },
}
_EVERY_DH = (
    " Proved structurally for every d = 1..3 and H = 2..3 (--size medium: d = 1..5, "
    "large: d = 1..8 and H = 2..4); the same proof fails on a perturbed partner."
)


def _kind_check(kind: str, statement: str) -> Claim:
    cid = f"prop-7.1/{kind}"
    statement += _EVERY_DH

    def at(seed: int, size: SizeParams) -> ClaimResult:
        rows, ok = [], True
        for H in range(2, int(size["heads_max"]) + 1):
            for d in range(1, int(size["d_max"]) + 1):
                pair = counterexample("multi-head", d=d, heads=H, kind=kind, seed=seed + d + H)
                distinct = pair.first.heads != pair.second.heads
                # The deliberately wrong partner: the same proof must fail on it.
                wrong = prove_same_map(pair.first, perturb(pair.second), seed=seed)
                ok &= distinct and pair.proof.holds and not wrong.holds
                rows.append(
                    f"d={d} H={H}: distinct {distinct}, proof {pair.proof.holds}, "
                    f"perturbed proof {wrong.holds}"
                )
        return _result(cid, statement, ok, "; ".join(rows))

    def check(seed: int) -> ClaimResult:
        return at(seed, dict(_KIND_SIZES["sizes"]))

    return Claim(cid, REF, statement, check, level=LEVEL_SYMBOLIC, check_at=at, **_KIND_SIZES)


def _linearity(seed: int) -> ClaimResult:
    checks = [linearity_in_v(d, n) for d, n in ((1, 1), (2, 1), (2, 2), (2, 3), (3, 2))]
    return _result(
        "prop-7.1/linearity-in-v",
        LINEARITY,
        all(c.holds for c in checks),
        "; ".join(f"d={c.data['d']} N={c.data['n']}: {c.holds}" for c in checks),
    )


def _is_canonical_of(
    heads: list[tuple[object, object]], model: MultiHeadAttention, seed: int
) -> bool:
    """Checked without canonical_form: the heads compute the model's function (== at seeded
    rational sequences of lengths 1..5), their W are pairwise distinct, every v is nonzero."""
    import numpy as np

    rng = np.random.default_rng(seed + 12345)
    form = MultiHeadAttention(list(heads))
    for n in range(1, 6):
        X = (rng.integers(-6, 7, (n, model.d)) / 4).tolist()
        if form.evaluate(X, "exact") != model.evaluate(X, "exact"):
            from verified_attn.arithmetic import exact_equal

            if not exact_equal(form.evaluate(X, "exact"), model.evaluate(X, "exact")):
                return False
    Ws = [h[0] for h in heads]
    distinct = all(Ws[i] != Ws[j] for i in range(len(Ws)) for j in range(i))
    return distinct and all(any(x != 0 for x in h[1]) for h in heads)


def _canonical(seed: int) -> ClaimResult:
    ok, rows = True, []
    for kind in ("permutation", "shared-score-split", "dead-head", "cancelling-values"):
        pair = counterexample("multi-head", d=2, heads=3, kind=kind, seed=seed)
        same = canonical_form(pair.first) == canonical_form(pair.second)
        # Not canonical_form against itself only: the form computes the model's function.
        same &= _is_canonical_of(canonical_form(pair.first).heads, pair.first, seed)
        yes = equivalent(pair.first, pair.second, seed=seed)
        no = equivalent(pair.first, perturb(pair.first), seed=seed)
        witness_ok = (
            no.witness is not None and no.values is not None and no.values[0] != no.values[1]
        )
        ok &= same and yes.equivalent and not no.equivalent and witness_ok
        rows.append(f"{kind}: same form {same}, equivalent {yes.equivalent}, perturbed {no}")
    return _result("prop-7.1/canonical-form", CANONICAL, ok, "; ".join(r[:90] for r in rows))


def _dimension(seed: int) -> ClaimResult:
    W = [[1, 2], [0, -1]]
    W2 = [[0, 1], [1, 1]]
    d = 2
    cases = [
        ("single head, v != 0", MultiHeadAttention([(W, [1, 2])]), 0, False),
        ("dead head", MultiHeadAttention([(W, [0, 0])]), d * d, False),
        ("two heads, distinct W", MultiHeadAttention([(W, [1, 2]), (W2, [-1, 1])]), 0, False),
        ("two heads, equal W", MultiHeadAttention([(W, [1, 2]), (W, [-1, 1])]), d, True),
        ("cancelling heads", MultiHeadAttention([(W, [1, 2]), (W, [-1, -2])]), d * d + d, False),
    ]
    ok, rows = True, []
    for name, model, fibre, critical in cases:
        for arith in ("exact", "certified"):
            r = local_dimension(model, arithmetic=arith, seed=seed)
            good = r.rank is not None and r.dimension == fibre and r.critical == critical
            ok &= good
            rows.append(
                f"{name} ({arith}): rank {r.rank_lower}..{r.rank_upper}, kernel "
                f"{r.kernel_dimension}, fibre {r.dimension}"
            )
    return _result("prop-7.1/identifiability-dimension", DIMENSION, ok, "; ".join(rows[::2]))


def _collision(seed: int) -> ClaimResult:
    ok, rows = True, []
    for d in (1, 2, 3):
        # Two heads with one W and v's that are not parallel (for d > 1) and do not cancel.
        W = [[(i + 2 * j + seed) % 3 - 1 for j in range(d)] for i in range(d)]
        v1 = [1] + [0] * (d - 1)
        v2 = [2] + [1] * (d - 1)
        model = MultiHeadAttention([(W, v1), (W, v2)])
        r = local_dimension(model, arithmetic="certified", seed=seed)
        ok &= r.kernel_dimension == 2 * d and r.dimension == d
        rows.append(f"d={d}: kernel {r.kernel_dimension}, fibre {r.dimension}")
    return _result("prop-7.1/collision-kernel", COLLISION, ok, "; ".join(rows))


def _orthogonal(seed: int) -> ClaimResult:
    ok, rows = True, []
    used = bound = 0
    for arith, d, ranks in (
        ("exact", 3, [1, 2]),
        ("certified", 4, [2, 2]),
        ("certified", 5, [1, 1, 2]),
    ):
        model, bases = orthogonal_heads_model(d, ranks, seed + d)
        rec = learn_orthogonal_heads(Oracle(model, arith), bases, seed=seed)
        used, bound = rec.queries, orthogonal_query_bound(ranks)
        good = rec.exact and rec.parameters["heads"] == model.heads
        good &= used == bound == sum(r * r + r for r in ranks)  # Thm 4.1 per subspace
        ok &= good
        rows.append(f"{arith} d={d} ranks={ranks}: {used} queries (bound {bound}), exact {good}")
    # A head outside its declared subspace must be caught, not returned.
    model, bases = orthogonal_heads_model(3, [1, 1], seed)
    W0, v0 = model.heads[0]
    leaky = MultiHeadAttention([(W0 + _bump(3), v0), model.heads[1]])
    try:
        learn_orthogonal_heads(Oracle(leaky, "certified"), bases, seed=seed)
        caught = False
    except ModelClassMismatch:
        caught = True
    ok &= caught
    rows.append(f"head leaking out of its subspace caught: {caught}")
    return _result(
        "prop-7.1/orthogonal-subspaces", ORTHOGONAL, ok, "; ".join(rows), queries=used, bound=bound
    )


def _bump(d: int) -> object:
    import sympy

    return sympy.Matrix(d, d, lambda i, j: 1 if (i, j) == (0, d - 1) else 0)


def _single_vs_multi(seed: int) -> ClaimResult:
    # A single head is identifiable (Thm 4.1): its canonical form is itself.
    m = SingleHeadAttention([[1, 2], [3, 4]], [1, -1])
    c = canonical_form(MultiHeadAttention([m]))
    ok = c.H == 1 and c.heads[0] == (m.W, m.v)
    return _result("prop-7.1/single-head-canonical", SINGLE, ok, f"canonical heads: {c.H}")


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
            and _is_canonical_of(rec.heads, model, seed)
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
    model = random_multi_head(2, 2, seed)
    oracle = Oracle(model, "certified", budget=canonical_query_limit(2, 2) + 8 - 1)
    try:
        learn_multi_head(oracle, heads=2, seed=seed)
        refused = False
    except QueryBudgetExceeded:
        refused = oracle.queries == 0
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
    oracle = Oracle(model, "certified", budget=canonical_query_limit(2, 2, affine=True) + 8 - 1)
    try:
        learn_multi_head(oracle, heads=2, seed=seed)
        refused = False
    except QueryBudgetExceeded:
        refused = oracle.queries == 0
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
LINEARITY = (
    "f is linear in each v_h with coefficients g(X, W_h) that depend on X and W_h only "
    "(derived from attention_output with exp opaque)."
)
CANONICAL = (
    "Equal canonical forms give equal maps (proof); a perturbed model is told apart by an "
    "exact witness sequence."
)
DIMENSION = (
    "The fibre of the parameter-to-map function has dimension 0 for a live head, d^2 for a "
    "dead head, d for two heads sharing W, d^2 + d for two cancelling heads (Jacobian rank "
    "bracketed exactly and in arb)."
)
COLLISION = (
    "Where two heads share W the Jacobian kernel is 2d while the fibre is d: "
    "W_a += v_b w^T, W_b -= v_a w^T is null to first order only (a critical point)."
)
ORTHOGONAL = (
    "Heads in known pairwise orthogonal subspaces are recovered exactly with "
    "sum_h (r_h^2 + r_h) queries (Thm 4.1 per subspace); a head outside its subspace is caught."
)
SINGLE = "A single head is its own canonical form (no ambiguity at H = 1 with v != 0)."


def _canonical_recovery_at(seed: int, size: SizeParams) -> ClaimResult:
    """Certified at the given d and H (the tie, merge and budget cases stay as they are)."""
    return _canonical_recovery(seed, (("certified", int(size["d"]), int(size["heads"])),))


_RECOVERY_SIZES: dict[str, Any] = {
    "sizes": {"d": 4, "heads": 2},
    "presets": {
        "small": {"d": 4, "heads": 2},
        "medium": {"d": 8, "heads": 2},
        "large": {"d": 16, "heads": 3},
    },
    "check_at": _canonical_recovery_at,
}


def _mh_positions(seed: int) -> ClaimResult:
    # The rotary box is already inconsistent with the learning answers (refused there).
    # The float ratio grid asks sequences up to 65 tokens at one head: a window of 4 makes its
    # answers inconsistent with any sum of heads, and the joint fit refuses first
    # (PrecisionExhausted: no consistent heads); never a result.
    ok, detail = soundness.position_check(
        lambda o: learn_multi_head(o, heads=1, seed=seed),
        {"rotary": "", "window-4": ""},
        {"window-4": (ModelClassMismatch, PrecisionExhausted)},
    )
    return ClaimResult("prop-7.1/position-dependent", REF, MH_POSITIONS, ok, detail)


def _mh_near_rational(seed: int) -> ClaimResult:
    """A score just off 1/3, and a second head below the balls' radius, at 256 bits."""
    import sympy

    from verified_attn.recovery import MultiHeadRecovery

    h1 = SingleHeadAttention([[1, soundness.near_rational()], [0, 2]], [1, -1])
    h2 = SingleHeadAttention([[2, 0], [1, 1]], [0, 1])
    tiny = SingleHeadAttention([[2, 0], [1, 1]], [0, sympy.Rational(1, 10**80)])
    clean = SingleHeadAttention([[1, sympy.Rational(1, 3)], [0, 2]], [1, -1])

    def learn(parts: list[SingleHeadAttention], **kw: int) -> MultiHeadRecovery:
        oracle = Oracle(MultiHeadAttention(parts), "certified", precision=256)
        return learn_multi_head(oracle, seed=seed, **kw)

    ok1, d1 = soundness.refuses(lambda: learn([h1, h2], heads=2), soundness.REFUSED, "refutes")
    ok2, d2 = soundness.refuses(lambda: learn([clean, tiny], max_heads=2), soundness.REFUSED, "")
    rec = learn([clean, h2], heads=2)
    cert_ok, cert = soundness.tamper_check(rec.certificate())
    ok3 = rec.exact and bool(rec.assumptions) and cert_ok
    return ClaimResult(
        "prop-7.1/near-rational",
        REF,
        MH_NEAR,
        ok1 and ok2 and ok3,
        f"1/3 + 1e-80: {d1}; a head of size 1e-80 with max_heads=2: {d2}; clean: exact with "
        f"{len(rec.assumptions)} assumption(s); certificate: {cert}",
    )


MH_POSITIONS = (
    "The canonical multi-head learner (float) refuses a box whose answers depend on token "
    "positions and never returns a result for it: a rotary-like head with "
    "ModelClassMismatch (its learning answers fit no sum of heads), a window of 4 tokens (a head on short "
    "sequences, inconsistent on the ratio grid's sequences of up to 24 tokens) with "
    "ModelClassMismatch or PrecisionExhausted."
)
MH_NEAR = (
    "In certified mode (256 bits) a score 1/3 + 1e-80 is not returned as 1/3 exactly, a "
    "second head of size 1e-80 is not dropped silently by the degree test, and a clean "
    "result is exact with its assumption recorded; its certificate verifies and a tampered "
    "copy is rejected."
)


def _float_head_count(seed: int) -> ClaimResult:
    """The float head count on random float64/float32 boxes, a tiny head, too many heads."""
    import numpy as np

    from verified_attn.errors import NotIdentifiable
    from verified_attn.multi_head.head_count_float import count_heads, probe_spectra

    def heads(d: int, H: int, s: int) -> list[tuple[Any, Any]]:
        rng = np.random.default_rng([seed, s, d, H])
        return [(rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d)) for _ in range(H)]

    def float64(hs: list[tuple[Any, Any]]) -> Oracle:
        return Oracle(MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in hs]), "float")

    def float32(hs: list[tuple[Any, Any]], d: int) -> Oracle:
        return float32_multi_head_oracle(hs)  # every head computed in float32, declared so

    def count(oracle: Oracle, bound: int) -> int | str:
        try:
            return int(count_heads(oracle, bound, seed=seed).count)
        except (PrecisionExhausted, NotIdentifiable, ModelClassMismatch) as exc:
            return type(exc).__name__

    rows, ok = [], True
    for d, H in ((2, 1), (3, 2), (4, 3)):
        hs = heads(d, H, 0)
        got64, got32 = count(float64(hs), H + 2), count(float32(hs, d), H + 2)
        W, v = hs[-1]
        got_tiny = count(float64([*hs[:-1], (W, 1e-12 * v)]), H + 2)
        # a refusal is allowed for the tiny head; a count above H never
        tiny_ok = not isinstance(got_tiny, int) or got_tiny <= H
        # The deliberately wrong variant: a zero floor counts every singular value.
        naive = max(
            sum(1 for x in sv if x > 0)
            for sv in probe_spectra(float64(hs), H + 2, seed=seed).singular_values
        )
        ok &= got64 == H and isinstance(got32, int) and got32 <= H and tiny_ok and naive > H
        rows.append(
            f"d={d} H={H}: float64 {got64}, float32 {got32}, last head x 1e-12 {got_tiny}, "
            f"zero floor {naive}"
        )
    many, refused = heads(3, 3, 1), False
    try:
        learn_multi_head(float64(many), max_heads=2, seed=seed)
    except VerifiedAttnError as exc:
        refused = isinstance(exc, ModelClassMismatch) and "more than max_heads = 2" in str(exc)
    ok &= refused
    rows.append(f"3 heads with max_heads=2: refused {refused}")
    return ClaimResult("prop-7.1/float-head-count", "ours", FLOAT_COUNT, ok, "; ".join(rows))


FLOAT_COUNT = (
    "From an upper bound max_heads, the float head count (Loewner singular values above the "
    "noise floor 64 x noise x ||K||_F at 4 pairs, with a gap of 8) equals the number of "
    "heads of random float64 boxes and never exceeds it for float32 boxes or a head "
    "scaled by 1e-12; a zero floor overcounts; a box with more heads than max_heads is "
    "refused (ModelClassMismatch)."
)


def _float_precision(seed: int) -> ClaimResult:
    """Float64 boxes learned to 1e-12 of their heads (the precision polish where it is
    asked), predictions on independent fresh sequences to 1e-11, under the follow-up's count;
    the same box unpolished, and a learned parameter moved by 1e-11, fail the check."""
    import itertools
    import math
    from unittest import mock

    import numpy as np

    from verified_attn.multi_head.pipeline import budget

    d = 8

    def box(H: int, s: int) -> tuple[MultiHeadAttention, list[Any]]:
        rng = np.random.default_rng(s)  # the float benchmark's random boxes
        hs = [(rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d)) for _ in range(H)]
        return MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in hs]), hs

    def errors(got: list[Any], truth: list[Any], model: MultiHeadAttention, s: int) -> Any:
        flat = [np.concatenate([np.ravel(x) for x in h[:2]]) for h in got]
        true = [np.concatenate([np.ravel(x) for x in h]) for h in truth]
        ref = max(float(np.abs(x).max()) for x in true)
        perr = (
            min(
                max(float(np.abs(flat[p[h]] - true[h]).max()) for h in range(len(true)))
                for p in itertools.permutations(range(len(true)))
            )
            / ref
        )
        learned = MultiHeadAttention([tuple(x.tolist() for x in h[:2]) for h in got])
        rng, pred = np.random.default_rng([seed, s, 0x7072]), 0.0
        for n in range(1, 17):
            for _ in range(2):
                X = rng.normal(0.0, 1.0, (n, d))
                y = float(model.evaluate_batch(X[None])[0])
                got_y = float(learned.evaluate_batch(X[None])[0])
                pred = max(pred, abs(got_y - y) / max(1.0, abs(y)))
        return perr, pred

    rows, ok = [], True
    # (H, box seed): d = 8, H = 1 seed 13 is the box the pilot rescales (its decoded heads
    # are 1e-9 off); the others are the float benchmark's seeds 0 and 1.
    cases = [(1, 13), (1, 0), (2, 0), (2, 1), (3, 0), (4, 1)]
    for H, s in cases:
        model, truth = box(H, s)
        rec = learn_multi_head(Oracle(model, "float"), heads=H, seed=s)
        perr, pred = errors(rec.parameters["heads"], truth, model, s)
        polish = rec.queries_by_phase.get("polish", 0)
        under = rec.queries < follow_up_query_bound(d, H)
        ok &= perr <= 1e-12 and pred <= 1e-11 and under and verify_certificate(rec.certificate()).ok
        rows.append(
            f"H={H} seed {s}: {rec.queries} queries ({polish} polish; follow-up "
            f"{follow_up_query_bound(d, H)}), parameters {perr:.1e}, predictions {pred:.1e}"
        )
        if (H, s) == (1, 13):
            # The deliberately wrong variants: a learned parameter moved by 1e-11 relative,
            # and the same box with the polish never asked (its target out of reach).
            W, v = (np.array(x) for x in rec.parameters["heads"][0][:2])
            scale = max(float(np.abs(x).max()) for x in truth[0])  # errors are relative to it
            moved = [(W + 1e-11 * scale, v)]
            moved_err = errors(moved, truth, model, s)[0]
            with mock.patch.multiple(
                budget, PRECISION_TARGET=math.inf, PRECISION_REQUIRED=math.inf
            ):
                bare = learn_multi_head(Oracle(model, "float"), heads=H, seed=s)
            bare_err = errors(bare.parameters["heads"], truth, model, s)[0]
            ok &= polish > 0 and moved_err > 1e-12 and bare_err > 1e-12
            rows.append(
                f"wrong variants: a parameter moved by 1e-11 {moved_err:.1e}, unpolished "
                f"{bare_err:.1e}"
            )
    return ClaimResult("prop-7.1/float-precision", "ours", FLOAT_PRECISION, ok, "; ".join(rows))


FLOAT_PRECISION = (
    "The canonical multi-head learner on float64 black boxes (d = 8, H = 1-4, heads W ~ N(0, "
    "1/d), v ~ N(0, 1)) returns the canonical heads within 1e-12 relative of the true heads, "
    "predictions on 32 independent sequences of lengths 1-16 within 1e-11, in fewer "
    "queries than the follow-up's 4Hd^2 - 2H + 1, with a certificate that re-checks; a "
    "box whose decoded heads are 1e-9 off is brought within 1e-12 by the precision polish "
    "(random sequences, asked because its first-order estimate is above 1e-12), and off "
    "by more without it."
)


_TWO = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])


def _mh_out_of_class(seed: int) -> ClaimResult:
    three = MultiHeadAttention([*_TWO.heads, ([[Fraction(1, 2), 0], [0, -1]], [1, 1])])
    ortho, bases = orthogonal_heads_model(3, [1, 1], seed)

    def canonical(box: Any, lengths: Any = None) -> Any:
        kw = {} if lengths is None else {"lengths": lengths}
        return learn_multi_head(Oracle(box, "certified"), heads=2, seed=seed, **kw)

    def orthogonal(box: Any, lengths: Any = None) -> Any:
        kw = {} if lengths is None else {"lengths": lengths}
        return learn_orthogonal_heads(Oracle(box, "certified"), bases, seed=seed, **kw)

    # The canonical learner's queries have length <= 2H + 1 = 5: a window of 5 tokens is
    # two heads on all of them, so only the final verification (lengths 6..16) sees it.
    cases = (
        ("canonical: window-5 of two heads", canonical, soundness.Window(_TWO, 5), (1, 2, 3, 4, 5)),
        ("canonical: three heads given heads=2", canonical, three, None),
        ("orthogonal: window-4 of its heads", orthogonal, soundness.Window(ortho), (1, 2, 3, 4)),
    )
    ok, detail = soundness.refuses_all(list(cases))
    return ClaimResult("prop-7.1/out-of-class", REF, MH_OOC, ok, detail)


MH_OOC = (
    "The certified multi-head learners refuse boxes outside their class with "
    "ModelClassMismatch: the canonical learner a window of 5 tokens over two heads (two "
    "heads on every learning query, length <= 2H + 1 = 5, so only the final verification "
    "sees it; returned verified on lengths <= 5) and three heads given heads=2; the "
    "orthogonal-subspace learner a window of 4 tokens over its heads (verified on lengths "
    "<= 4 only)."
)


def _mh_certificate_tamper(seed: int) -> ClaimResult:
    ortho, bases = orthogonal_heads_model(3, [1, 1], seed)
    runs = {
        "canonical, certified": (
            learn_multi_head(Oracle(_TWO, "certified"), heads=2, seed=seed),
            ("answers",),
        ),
        "canonical, float": (
            learn_multi_head(Oracle(_TWO, "float"), heads=2, seed=seed),
            ("answers",),
        ),
        "orthogonal, certified": (
            learn_orthogonal_heads(Oracle(ortho, "certified"), bases, seed=seed),
            ("subspaces.0.certificate.answers", "subspaces.0.basis"),
        ),
    }
    ok, detail = soundness.tamper_all(runs)
    return ClaimResult("prop-7.1/certificate-tamper", REF, MH_TAMPER, ok, detail)


MH_TAMPER = (
    "Multi-head certificates (canonical in certified and float mode, orthogonal subspaces) "
    "verify without the oracle; copies with one result entry, one learning answer (for "
    "the orthogonal learner: an answer of a subspace's head, or its basis), the "
    "learning count or one verification answer changed are each rejected."
)


CLAIMS = [
    _kind_check("permutation", "Permuting the heads leaves f unchanged for every sequence length."),
    _kind_check(
        "shared-score-split",
        "Heads with one W may split their summed v arbitrarily: f is unchanged.",
    ),
    _kind_check("dead-head", "A head with v_h = 0 contributes nothing: its W_h is arbitrary."),
    _kind_check(
        "cancelling-values",
        "Equal-W heads whose v's sum to 0 vanish, whatever their W and v.",
    ),
    Claim("prop-7.1/linearity-in-v", REF, LINEARITY, _linearity),
    Claim("prop-7.1/canonical-form", REF, CANONICAL, _canonical),
    Claim("prop-7.1/identifiability-dimension", REF, DIMENSION, _dimension),
    Claim("prop-7.1/collision-kernel", REF, COLLISION, _collision),
    Claim("prop-7.1/orthogonal-subspaces", "§7", ORTHOGONAL, _orthogonal),
    Claim("prop-7.1/single-head-canonical", REF, SINGLE, _single_vs_multi),
    Claim(
        "prop-7.1/canonical-recovery",
        "follow-up (arXiv 2608.03294)",
        RECOVERY,
        _canonical_recovery,
        **_RECOVERY_SIZES,
    ),
    Claim(
        "prop-7.1/affine-canonical-recovery",
        "ours (docs/theory.md, The models)",
        AFFINE_RECOVERY,
        _affine_recovery,
    ),
    Claim("prop-7.1/position-dependent", REF, MH_POSITIONS, _mh_positions),
    Claim("prop-7.1/near-rational", REF, MH_NEAR, _mh_near_rational),
    Claim(
        "prop-7.1/float-head-count",
        "ours (docs/multi_head.md, How many heads? (float))",
        FLOAT_COUNT,
        _float_head_count,
    ),
    Claim(
        "prop-7.1/float-precision",
        "ours (docs/multi_head.md, Float black boxes: precision polish)",
        FLOAT_PRECISION,
        _float_precision,
    ),
    Claim("prop-7.1/out-of-class", REF, MH_OOC, _mh_out_of_class),
    Claim("prop-7.1/certificate-tamper", REF, MH_TAMPER, _mh_certificate_tamper),
]

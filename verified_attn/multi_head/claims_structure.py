"""Claims of Prop 7.1 on the structure of multi-head attention: its symmetries (the ways
distinct heads give one map), the canonical form, the fibre's dimension, and the structure
that restores identifiability (known orthogonal subspaces, a single head).

>>> from verified_attn.multi_head.claims_structure import KIND_CLAIMS
>>> [c.id for c in KIND_CLAIMS][:2]
['prop-7.1/permutation', 'prop-7.1/shared-score-split']
"""

from __future__ import annotations

from typing import Any

from verified_attn.checks import LEVEL_SYMBOLIC, Claim, ClaimResult, SizeParams
from verified_attn.errors import ModelClassMismatch
from verified_attn.models import MultiHeadAttention, SingleHeadAttention
from verified_attn.multi_head.canonical import canonical_form, equivalent
from verified_attn.multi_head.counterexamples import counterexample, perturb
from verified_attn.multi_head.identifiability import local_dimension
from verified_attn.multi_head.learner import (
    learn_orthogonal_heads,
    orthogonal_heads_model,
    orthogonal_query_bound,
)
from verified_attn.multi_head.symbolic import linearity_in_v, prove_same_map
from verified_attn.oracle import Oracle

__all__ = [
    "CANONICAL_CLAIM",
    "COLLISION_CLAIM",
    "DIMENSION_CLAIM",
    "KIND_CLAIMS",
    "LINEARITY_CLAIM",
    "ORTHOGONAL_CLAIM",
    "REF",
    "SINGLE_CLAIM",
    "is_canonical_of",
    "size_presets",
]

REF = "Prop 7.1"


def _result(cid: str, statement: str, ok: bool, detail: str, **kw: object) -> ClaimResult:
    return ClaimResult(cid, REF, statement, bool(ok), detail, **kw)  # type: ignore[arg-type]


def size_presets(small: SizeParams, medium: SizeParams, large: SizeParams) -> dict[str, Any]:
    """A claim's size arguments: the presets, the small one its default sizes.

    >>> size_presets({"d": 2}, {"d": 4}, {"d": 8})["sizes"]
    {'d': 2}
    """
    return {"sizes": small, "presets": {"small": small, "medium": medium, "large": large}}


#: The kind claims check every d = 1..D and every H = 2..H_max (the structural proof and
#: its wrong partner take about 0.5 s per pair).
_KIND_SIZES = size_presets(
    {"d_max": 3, "heads_max": 3}, {"d_max": 5, "heads_max": 3}, {"d_max": 8, "heads_max": 4}
)

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


def is_canonical_of(heads: list[tuple[Any, Any]], model: MultiHeadAttention, seed: int) -> bool:
    """Whether ``heads`` are a canonical form of ``model``, checked without canonical_form:
    they compute the model's function (== at seeded rational sequences of lengths 1..5),
    their W are pairwise distinct, every v is nonzero.

    >>> model = MultiHeadAttention([([[1]], [2])])
    >>> is_canonical_of([([[1]], [2])], model, 0), is_canonical_of([([[1]], [3])], model, 0)
    (True, False)
    """
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
        same &= is_canonical_of(canonical_form(pair.first).heads, pair.first, seed)
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


KIND_CLAIMS = [
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
]
LINEARITY_CLAIM = Claim("prop-7.1/linearity-in-v", REF, LINEARITY, _linearity)
CANONICAL_CLAIM = Claim("prop-7.1/canonical-form", REF, CANONICAL, _canonical)
DIMENSION_CLAIM = Claim("prop-7.1/identifiability-dimension", REF, DIMENSION, _dimension)
COLLISION_CLAIM = Claim("prop-7.1/collision-kernel", REF, COLLISION, _collision)
ORTHOGONAL_CLAIM = Claim("prop-7.1/orthogonal-subspaces", "§7", ORTHOGONAL, _orthogonal)
SINGLE_CLAIM = Claim("prop-7.1/single-head-canonical", REF, SINGLE, _single_vs_multi)

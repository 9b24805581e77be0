"""Claims about one-layer Transformers whose FFN has biases (docs/transformer.md).

>>> from verified_attn.transformer.claims_biased import CLAIMS
>>> [c.id for c in CLAIMS]
['transformer/biased-ffn-exact', 'transformer/biased-transformer', 'transformer/heads-float-residual']

Every check can fail: canonical forms and parameters are compared with ``==``, counts with
the derived formula, and a perturbed network or W must differ.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn import soundness
from verified_attn.checks import Claim, ClaimResult
from verified_attn.models import OneLayerTransformer, ReluFFN, SingleHeadAttention
from verified_attn.oracle import Oracle
from verified_attn.transformer.biased_learner import learn_biased_transformer
from verified_attn.transformer.relu_biased import canonical_biased_network
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

__all__ = ["CLAIMS", "random_biased_ffn", "two_head_transformer"]

REF = "docs/transformer.md, FFN biases"
REF_FLOAT = "docs/transformer.md, Several heads before the FFN (float path)"


def random_biased_ffn(d: int, m: int, rng: np.random.Generator) -> ReluFFN:
    """A random rational ReLU network with biases (and an output bias)."""
    A = [
        [Fraction(int(rng.integers(-4, 5)), int(rng.integers(1, 4))) for _ in range(m)]
        for _ in range(d)
    ]
    w = [Fraction(int(x), 2) for x in rng.integers(-4, 5, m)]
    a = [Fraction(int(x), int(rng.integers(1, 4))) for x in rng.integers(-6, 7, m)]
    return ReluFFN(A, w, a=a, b=Fraction(int(rng.integers(-5, 6)), 3))


FFN = (
    "a one-hidden-layer ReLU network with biases is learned exactly (canonical form ==) "
    "from length-1 queries in exact and certified arithmetic, d = 2, 4, 8 with m = 2d; the "
    "learning count is at most the derived 2 S + S_half + 2 C + (d - 1)(K + 1) of the lines "
    "searched; the learned FFN equals g (==) at 8 fresh rational points; the same network "
    "with one bias changed has another canonical form"
)


def _ffn(seed: int) -> ClaimResult:
    rng = np.random.default_rng(seed)
    rows, passed, total, bound = [], True, 0, 0
    for d, arith in ((2, "exact"), (4, "certified"), (8, "exact")):
        g = random_biased_ffn(d, 2 * d, rng)
        rec = learn_biased_relu_ffn(Oracle(g, arith), seed=seed)
        truth = canonical_biased_network(g)
        a = [Fraction(int(x.p), int(x.q)) for x in g.a]
        a[0] += 1
        other = canonical_biased_network(ReluFFN(g.A, g.w_o, a=a, b=g.b))
        pts = [
            [[Fraction(int(rng.integers(-9, 10)), int(rng.integers(1, 7))) for _ in range(d)]]
            for _ in range(8)
        ]
        same = all(rec.model.evaluate(X, "exact") == g.evaluate(X, "exact") for X in pts)
        ok = rec.network == truth and same and rec.queries <= rec.bound and other != truth
        passed &= ok
        total, bound = total + rec.queries, bound + rec.bound
        rows.append(
            f"d={d} {arith}: width {truth.width}, {rec.queries} queries (formula {rec.bound}, "
            f"parameters {rec.parameter_count}), equal: {rec.network == truth}"
        )
    return ClaimResult(
        "transformer/biased-ffn-exact", REF, FFN, passed, "; ".join(rows), total, bound
    )


TR = (
    "a one-layer Transformer with FFN biases (T(X) - T(-X) not linear in the pooled token) "
    "is learned exactly: the FFN, then W from exactly d^2 two-token queries in one cell of "
    "it; W == the truth, the learned model == T (exact) on fresh sequences of lengths 1..5, "
    "a W with one entry changed differs there; T plus a head is refused"
)


def _transformer(seed: int) -> ClaimResult:
    T = OneLayerTransformer(
        [[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1], a=[1, -2], b=3
    )
    rec = learn_biased_transformer(Oracle(T, "exact"), seed=seed)
    g = rec.model.ffn()
    W = [[1, -1], [0, 3]]
    wrong = OneLayerTransformer(W, np.eye(2, dtype=int), g.A, g.w_o, a=g.a, b=g.b)
    rng = np.random.default_rng(seed)
    seqs = [
        [[Fraction(int(v), 3) for v in rng.integers(-6, 7, 2)] for _ in range(n)]
        for n in (1, 2, 3, 4, 5)
    ]
    same = all(rec.model.evaluate(X, "exact") == T.evaluate(X, "exact") for X in seqs)
    differs = any(wrong.evaluate(X, "exact") != T.evaluate(X, "exact") for X in seqs)
    head = SingleHeadAttention([[Fraction(1, 2), 0], [0, Fraction(-1, 2)]], [1, 1])
    refused, how = soundness.refuses(
        lambda: learn_biased_transformer(Oracle(soundness.Plus(T, head), "certified")),
        soundness.REFUSED,
        "",
    )
    ok = rec.W == T.W and rec.attention_queries == 4 and same and differs and refused
    detail = (
        f"d=2: {rec.queries} queries = {rec.ffn_queries} FFN + {rec.attention_queries} "
        f"attention (d^2 = 4), parameters {rec.parameter_count}; W equal: {rec.W == T.W}; "
        f"== on fresh sequences: {same}; wrong W differs: {differs}; T + head: {how}"
    )
    return ClaimResult(
        "transformer/biased-transformer", REF, TR, ok, detail, rec.queries, rec.bound
    )


def two_head_transformer() -> Any:
    """The float claims' box: two affine heads under a biased FFN of width 2 (d = 2)."""
    from verified_attn.ffn_heads import MultiHeadTransformer

    heads = [
        ([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0]),
        ([[0, -1], [1, 0]], [[1, 1], [-1, 0]], [0, 1]),
    ]
    return MultiHeadTransformer(heads, [[1, -1], [0, 1]], [1, 2], a=[1, -1], b=-1)


RESIDUAL = (
    "learn_transformer(max_heads=2) refuses a float64 two-head Transformer plus a residual "
    "x_N . r with ModelClassMismatch carrying the swap test's witness (4 sequences, their "
    "answers), which check_swap_witness re-checks against the box; the same witness fails "
    "the check against the Transformer without the residual, and at the witness's sequences "
    "that Transformer's own answers have no first-order odd part"
)


def _heads_float_residual(seed: int) -> ClaimResult:
    from verified_attn.errors import CertificateError, ModelClassMismatch
    from verified_attn.transformer.entry import learn_transformer
    from verified_attn.transformer.swap_witness import check_swap_witness

    T = two_head_transformer()
    r = np.array([1.0, -0.5])

    def plain(X: Any) -> float:
        return float(T.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])

    def fn(X: Any) -> float:  # T plus the residual x_N . r
        return plain(X) + float(np.asarray(X, dtype=np.float64)[-1] @ r)

    oracle = Oracle.from_callable(fn, d=2, model_class="one-layer-transformer-multi-head")
    unit = 2.0**-53
    try:
        learn_transformer(oracle, max_heads=2, seed=seed)
        return ClaimResult("transformer/heads-float-residual", REF_FLOAT, RESIDUAL, False, "learned")
    except ModelClassMismatch as exc:
        witness = exc
    verdicts = []
    for box_fn, answers in (
        (fn, witness.observed),
        (plain, witness.observed),
        (plain, [plain(X) for X in witness.query]),
    ):
        try:
            check_swap_witness(box_fn, witness.query, answers, unit)
            verdicts.append(True)
        except CertificateError:
            verdicts.append(False)
    ok = verdicts == [True, False, False]
    detail = (
        f"refused after {oracle.queries} queries; witness re-checked against the box: "
        f"{verdicts[0]}; against the Transformer alone: {verdicts[1]}; its own answers: "
        f"{verdicts[2]}"
    )
    return ClaimResult("transformer/heads-float-residual", REF_FLOAT, RESIDUAL, ok, detail)


CLAIMS = [
    Claim("transformer/biased-ffn-exact", REF, FFN, _ffn),
    Claim("transformer/biased-transformer", REF, TR, _transformer),
    Claim("transformer/heads-float-residual", REF_FLOAT, RESIDUAL, _heads_float_residual),
]

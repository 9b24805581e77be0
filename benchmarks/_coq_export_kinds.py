"""Coq check times of the other exported kinds (used by ``coq_export.py``).

Exact skeleton (low-rank) runs of random rank-r heads W = C X (integer C, rationals X with
denominators <= 2, seeded) at (d, r) = (4, 1), (8, 2), (8, 4), and certified ones with
the entry bound D = 16 at 256 bits at (4, 1), (4, 2), (6, 2) (the file pins each
measurement among the rationals of denominator at most D_m = D^K cu cb, so the balls must be
that narrow; ``run_low_rank_cert`` runs them on their own); five hypothesis pairs
(thm-4.1 v-zero, app-b positive-scale, transformer v-eff-zero, and on recorded queries
thm-4.1 design-orthogonal, thm-5.1 rank-exceeds) and one Prop 7.1 pair
(shared-score-split) at d = 4; certified canonical multi-head runs of two random heads at
d = 2 and d = 3 (quick: d = 2); exact single-head runs (closed-form answers, no interval
calls) of ``random_head`` at d = 2, 4, 8 (quick: d = 2; ``exact_head_rows``); a run with
``max_heads=3`` that finds two heads (384 bits, D = 2^22, ``fewer_heads_row``). One coqc run
each; rows name the kind, d, r, the file size, export time and coqc wall and CPU seconds.
"""

from __future__ import annotations

import random
import time
from fractions import Fraction
from typing import Any

import verified_attn as va
from verified_attn.formal.coq_check import compile_exported

LOW_RANK = ((4, 1), (8, 2), (8, 4))
LOW_RANK_QUICK = ((4, 1),)
#: Certified skeleton runs (d, r, entry bound D, precision): two interval calls per
#: learning probe.
LOW_RANK_CERT = ((4, 1, 16, 256), (4, 2, 16, 256), (6, 2, 16, 256))
LOW_RANK_CERT_QUICK = ((4, 1, 16, 256),)
#: Certified canonical multi-head runs (d, H) at 256 bits: one interval call per query.
MULTI_HEAD = ((2, 2), (3, 2))
#: The kind of ``fewer_heads_row``.
FEWER_KIND = "multi-head certified, fewer heads"
MULTI_HEAD_KIND = "multi-head certified"
#: Exact canonical multi-head runs (d, H), the certified rows' heads: one field per query.
MULTI_HEAD_EXACT = ((2, 2), (3, 2), (3, 3))
MULTI_HEAD_EXACT_KIND = "multi-head exact"
#: Certified affine canonical runs (d, H): their files prove parts 1 and 2.
MULTI_HEAD_AFFINE = ((2, 2), (3, 2))
MULTI_HEAD_AFFINE_KIND = "multi-head certified affine"
#: Exact single-head runs: d (the certified rows of ``coq_export.py`` use the same heads).
EXACT_HEAD = (2, 4, 8)
HYPOTHESES = (
    ("thm-4.1", "v-zero"),
    ("app-b", "positive-scale"),
    ("transformer", "v-eff-zero"),
    ("thm-4.1", "design-orthogonal"),
    ("thm-5.1", "rank-exceeds"),
)
#: The multi-head Transformer's canonical-form pairs (formal/CertTransformerHyp.v) and
#: the ffn-bias witness (formal/CertHyp.v).
TRANSFORMER_PAIRS = (
    ("transformer", "ffn-bias"),
    ("transformer", "dead-neuron"),
    ("transformer", "always-on-neuron"),
    ("transformer", "killed-head"),
    ("transformer", "colliding-heads"),
)


def random_head(d: int, seed: int) -> va.SingleHeadAttention:
    """A random rational head: entries k/q, |k| <= 3q, q in 1..4 (seeded), v_0 != 0."""
    rng = random.Random(seed)

    def q() -> Fraction:
        den = rng.randint(1, 4)
        return Fraction(rng.randint(-3 * den, 3 * den), den)

    W = [[q() for _ in range(d)] for _ in range(d)]
    v = [q() for _ in range(d)]
    v[0] = v[0] or Fraction(1)
    return va.SingleHeadAttention(W, v)


def exact_head_row(d: int, seed: int) -> dict[str, Any]:
    """The exact single-head row of d: ``random_head`` learned on an exact oracle."""
    rec = va.learn_single_head(va.Oracle(random_head(d, seed), "exact"), seed=seed)
    return _row("single-head exact", d, rec.certificate(), learning_queries=rec.queries)


def exact_head_rows(quick: bool, seed: int) -> list[dict[str, Any]]:
    return [exact_head_row(d, seed) for d in (EXACT_HEAD[:1] if quick else EXACT_HEAD)]


def low_rank_head(d: int, r: int, seed: int) -> va.SingleHeadAttention:
    rng = random.Random(seed)
    C = [[Fraction(rng.randint(-3, 3)) for _ in range(r)] for _ in range(d)]
    X = [[Fraction(rng.randint(-2, 2), rng.randint(1, 2)) for _ in range(d)] for _ in range(r)]
    W = [
        [sum((C[i][k] * X[k][j] for k in range(r)), Fraction(0)) for j in range(d)]
        for i in range(d)
    ]
    return va.SingleHeadAttention(W, [Fraction(rng.randint(1, 3)) for _ in range(d)])


def multi_head_heads(d: int, H: int, seed: int) -> list[tuple[Any, Any]]:
    """H heads (W, v) with small rationals: W entries in [-2, 2] (denominators <= 2), v in
    1..3."""
    rng = random.Random(seed)
    return [
        (
            [[Fraction(rng.randint(-2, 2), rng.randint(1, 2)) for _ in range(d)] for _ in range(d)],
            [Fraction(rng.randint(1, 3)) for _ in range(d)],
        )
        for _ in range(H)
    ]


def multi_head_model(d: int, H: int, seed: int) -> va.MultiHeadAttention:
    """The model of :func:`multi_head_heads`."""
    return va.MultiHeadAttention(multi_head_heads(d, H, seed))


def multi_head_rows(quick: bool, seed: int) -> list[dict[str, Any]]:
    """The certified canonical multi-head rows."""
    return [multi_head_row(d, H, seed) for d, H in (MULTI_HEAD[:1] if quick else MULTI_HEAD)]


def multi_head_row(d: int, H: int, seed: int) -> dict[str, Any]:
    """A default certified canonical run of H heads (its answers at ``answer_precision``):
    its file proves parts 1-8, every interval call included."""
    return _certified_row(MULTI_HEAD_KIND, multi_head_model(d, H, seed), d, H, seed)


def multi_head_affine_row(d: int, H: int, seed: int) -> dict[str, Any]:
    """A default certified affine canonical run: :func:`multi_head_heads` with score biases
    c_h (entries in -1..1) and beta = 1/2; its file proves parts 1-3."""
    rng = random.Random(seed + 1)
    heads = [
        (W, v, [Fraction(rng.randint(-1, 1)) for _ in range(d)])
        for W, v in multi_head_heads(d, H, seed)
    ]
    model = va.MultiHeadAttention(heads, beta=Fraction(1, 2))
    return _certified_row(MULTI_HEAD_AFFINE_KIND, model, d, H, seed)


def _certified_row(
    kind: str, model: va.MultiHeadAttention, d: int, H: int, seed: int
) -> dict[str, Any]:
    """The row of a default certified canonical run of ``model`` (H heads)."""
    rec = va.learn_multi_head(va.Oracle(model, "certified"), heads=H, seed=seed)
    data = rec.certificate()
    extra = {
        "heads": H,
        "learning_queries": rec.queries,
        "answer_precision": data.get("answer_precision"),
    }
    return _row(kind, d, data, **extra)


def multi_head_exact_row(d: int, H: int, seed: int) -> dict[str, Any]:
    """An exact canonical run of H heads (``multi_head_model``): its file proves the exact
    answers (one ``field`` identity per query) and the identification."""
    oracle = va.Oracle(multi_head_model(d, H, seed), "exact")
    rec = va.learn_multi_head(oracle, heads=H, seed=seed)
    extra = {"heads": H, "learning_queries": rec.queries}
    return _row(MULTI_HEAD_EXACT_KIND, d, rec.certificate(), **extra)


def fewer_heads_row(seed: int) -> dict[str, Any]:
    """A certified canonical run of the two heads of ``tests/formal`` with ``max_heads=3``
    (two found) at 384 bits with D = 2^22: its file proves parts 1-4 for H0 = 3 and 5-8 for
    models of at most 2 heads (``run_h``)."""
    model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    oracle = va.Oracle(model, "certified", precision=384)
    rec = va.learn_multi_head(oracle, max_heads=3, denominator_bound=2**22, seed=seed)
    data = rec.certificate()
    extra = {"heads": 2, "H0": 3, "learning_queries": rec.queries, "precision": 384}
    return _row(FEWER_KIND, 2, data, **extra, denominator_bound=2**22)


def _row(kind: str, d: int, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    text = va.export_coq(data)
    export_s = time.perf_counter() - t0
    check = compile_exported(text)
    return {
        "kind": kind,
        "d": d,
        **extra,
        "theorem": check.theorem,
        "file_bytes": len(text.encode()),
        "export_seconds": round(export_s, 3),
        "coqc_seconds": round(check.seconds, 2),
        "coqc_cpu_seconds": round(check.cpu_seconds or 0.0, 2),
        "ok": check.ok,
        "axioms": check.axioms,
    }


def run_low_rank_cert(specs: Any, seed: int) -> list[dict[str, Any]]:
    """One row per certified skeleton run (d, r, D, precision) of ``specs``."""
    rows = []
    for d, r, D, prec in specs:
        oracle = va.Oracle(low_rank_head(d, r, seed), "certified", precision=prec)
        rec = va.learn_low_rank(oracle, seed=seed, denominator_bound=D)
        data = rec.certificate()
        extra = {"rank": data["rank"], "learning_queries": rec.queries}
        rows.append(
            _row("low-rank certified", d, data, **extra, denominator_bound=D, precision=prec)
        )
    return rows


def hypothesis_row(theorem: str, kind: str, seed: int) -> dict[str, Any]:
    """The row of one hypothesis counterexample's file at d = 4."""
    data = va.counterexample(theorem, kind=kind, d=4, seed=seed).certificate()
    return _row(f"{theorem} {kind}", 4, data)


def run_kinds(quick: bool, seed: int) -> list[dict[str, Any]]:
    """One row per exported certificate of the kinds above."""
    rows = exact_head_rows(quick, seed)
    for d, r in LOW_RANK_QUICK if quick else LOW_RANK:
        rec = va.learn_low_rank(va.Oracle(low_rank_head(d, r, seed), "exact"), seed=seed)
        data = rec.certificate()
        rows.append(
            _row("low-rank exact", d, data, rank=data["rank"], learning_queries=rec.queries)
        )
    rows += run_low_rank_cert(LOW_RANK_CERT_QUICK if quick else LOW_RANK_CERT, seed)
    for theorem, kind in HYPOTHESES[:1] if quick else HYPOTHESES + TRANSFORMER_PAIRS:
        rows.append(hypothesis_row(theorem, kind, seed))
    if not quick:
        pair = va.counterexample("multi-head", d=4, heads=3, kind="shared-score-split", seed=seed)
        rows.append(_row("prop-7.1 shared-score-split", 4, pair.certificate()))
    exact = MULTI_HEAD_EXACT[:1] if quick else MULTI_HEAD_EXACT
    rows += [multi_head_exact_row(d, H, seed) for d, H in exact]
    affine = MULTI_HEAD_AFFINE[:1] if quick else MULTI_HEAD_AFFINE
    rows += [multi_head_affine_row(d, H, seed) for d, H in affine]
    return rows + multi_head_rows(quick, seed)

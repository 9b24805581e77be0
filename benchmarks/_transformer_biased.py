"""The FFN-bias rows of ``benchmarks/transformer.py``: the biased FFN learner (exact and
float) on random biased ReLU networks, and the biased Transformer learner on a random
single-head T with that FFN (V = I, d <= 8).

>>> row = run_biased(2, 4, "exact", 0)
>>> row["ffn_equal"], row["transformer_W_equal"]
(True, True)
>>> row["transformer_queries"] == row["ffn_queries_in_transformer"] + row["attention_queries"]
True

Per row: the FFN learner's queries against its formula and the canonical parameter count
(m' + 1)(d + 1); the Transformer's learning queries (FFN + attention) against d^2 +
(m' + 1)(d + 1); exact rows compare W and the canonical network with ``==``, float rows
give the max relative W error (of max(1, max |W|)) and the fresh-sequence verification
gap. A refusal is a row (``ffn_refused`` or ``transformer_refused``), never dropped. Run
from the repository root::

    python benchmarks/transformer.py --biased-only     # these rows only, seeds 0, 1, 2,
                                                       # merged into results/transformer.json
"""

from __future__ import annotations

import resource
import time
from fractions import Fraction
from typing import Any

import numpy as np
from _transformer_heads import child_row

import verified_attn as va
from verified_attn.errors import VerifiedAttnError
from verified_attn.models import OneLayerTransformer
from verified_attn.transformer import canonical_biased_network, learn_biased_transformer
from verified_attn.transformer.claims_biased import random_biased_ffn
from verified_attn.transformer.relu_biased_learner import WINDOW_ASSUMPTION

#: (d, m) of the biased rows; the Transformer is learned for d <= 8 (the FFN at every d).
BIASED_SIZES = ((2, 4), (4, 8), (8, 16), (16, 32))
BIASED_SEEDS = (0, 1, 2)


def run_biased(d: int, m: int, arithmetic: str, seed: int) -> dict[str, Any]:
    """One biased row (``kind`` "biased") in ``arithmetic`` ("exact" or "float")."""
    rng = np.random.default_rng([seed, d, m, 7])
    g = random_biased_ffn(d, m, rng)
    truth = canonical_biased_network(g)
    row: dict[str, Any] = {
        "d": d,
        "m": m,
        "arithmetic": arithmetic,
        "kind": "biased",
        "seed": seed,
        "canonical_parameter_count": truth.parameter_count,
    }
    t0 = time.perf_counter()
    try:
        rec = va.learn_relu_ffn(va.Oracle(g, arithmetic), seed=seed)
    except VerifiedAttnError as exc:
        return {**row, "ffn_refused": f"{type(exc).__name__}: {str(exc)[:200]}"}
    row.update(
        ffn_queries=rec.queries,
        ffn_formula=rec.bound,
        ffn_lines=rec.attempts,
        ffn_ratio=rec.queries / truth.parameter_count,
        ffn_equal=bool(rec.network == truth) if rec.exact else None,
        window_holds=_window_holds(truth, rec.assumptions),
        ffn_verification_error=rec.verification_error,
        ffn_seconds=time.perf_counter() - t0,
    )
    if d > 8:
        return {**row, "peak_rss_mib": _rss_mib()}
    W = rng.integers(-3, 4, (d, d)) / 2
    T = OneLayerTransformer(W, np.eye(d, dtype=int), g.A, g.w_o, a=g.a, b=g.b)
    t0 = time.perf_counter()
    try:
        if arithmetic == "float":  # the float learner (va.learn_transformer picks it)
            tr = va.learn_transformer(va.Oracle(T, arithmetic), seed=seed)
        else:
            tr = learn_biased_transformer(va.Oracle(T, arithmetic), seed=seed)
    except VerifiedAttnError as exc:
        return {**row, "transformer_refused": f"{type(exc).__name__}: {str(exc)[:200]}"}
    row.update(
        transformer_queries=tr.queries,
        ffn_queries_in_transformer=tr.queries - tr.attention_queries,
        attention_queries=tr.attention_queries,
        transformer_parameter_count=tr.parameter_count,
        transformer_seconds=time.perf_counter() - t0,
    )
    if arithmetic == "float":
        err = float(np.abs(tr.W - W).max() / max(1.0, np.abs(W).max()))
        row.update(transformer_W_error=err, transformer_verification_error=tr.verification_error)
    else:
        row["transformer_W_equal"] = bool(tr.W == T.W)
    return {**row, "peak_rss_mib": _rss_mib()}


def _window_holds(truth: Any, assumptions: list[str]) -> bool:
    """Whether the truth meets the result's window assumption: every hyperplane of its
    neurons crosses the stated search line x0 + t u within |t| <= R."""
    (text,) = [a for a in assumptions if a.startswith(WINDOW_ASSUMPTION)]

    def vec(name: str) -> list[Fraction]:
        return [Fraction(q) for q in text.split(f"{name} = [")[1].split("]")[0].split(", ")]

    x0, u, R = vec("x0"), vec("u"), Fraction(text.split("|t| <= ")[1].split(" ")[0])
    for (n, c), _ in truth.neurons:
        nu = sum(Fraction(a) * b for a, b in zip(n, u, strict=True))
        nx = sum(Fraction(a) * b for a, b in zip(n, x0, strict=True)) + Fraction(c)
        if nu == 0 or abs(nx / nu) > R:
            return False
    return True


def _rss_mib() -> float:
    """This process's peak RSS in MiB (one row's own when run by ``child_row``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def biased_rows(quick: bool = False) -> list[dict[str, Any]]:
    """Every biased row: sizes x ("exact", "float") x seeds (quick: d = 2 and 4, seed 0)."""
    sizes = BIASED_SIZES[:2] if quick else BIASED_SIZES
    seeds = BIASED_SEEDS[:1] if quick else BIASED_SEEDS
    specs = [[d, m, a, s] for d, m in sizes for a in ("exact", "float") for s in seeds]
    return [child_row("_transformer_biased", "run_biased", spec) for spec in specs]

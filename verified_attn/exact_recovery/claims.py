"""Claims of Theorem 4.1, checked by running the learner and the symbolic derivations.

>>> from verified_attn.exact_recovery.claims import CLAIMS
>>> CLAIMS[0].id
'thm-4.1/query-count'
"""

from __future__ import annotations

import numpy as np

from verified_attn.checks import Claim, ClaimResult
from verified_attn.exact_recovery.learner import learn_single_head, query_bound
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle

__all__ = ["CLAIMS"]


def _random_head(d: int, seed: int) -> SingleHeadAttention:
    rng = np.random.default_rng(seed)
    W = rng.integers(-9, 10, (d, d)) / rng.integers(1, 9, (d, d))
    v = rng.integers(-5, 6, d)
    v[rng.integers(d)] = 3  # v != 0
    return SingleHeadAttention(W, v)


def _check_query_count(seed: int) -> ClaimResult:
    ok = True
    used = bound = 0
    for d in (1, 2, 5, 8):
        model = _random_head(d, seed + d)
        rec = learn_single_head(Oracle(model, "certified"), seed=seed)
        used, bound = rec.queries, query_bound(d)
        ok &= used == bound == d * d + d and rec.W == model.W and rec.v == model.v
    return ClaimResult(
        "thm-4.1/query-count",
        "Thm 4.1",
        STATEMENT,
        ok,
        detail=f"d = 8: {used} queries, bound d^2 + d = {bound}",
        queries=used,
        bound=bound,
    )


STATEMENT = "A single head is recovered exactly from d^2 + d queries of length <= 2."

CLAIMS = [Claim("thm-4.1/query-count", "Thm 4.1", STATEMENT, _check_query_count)]

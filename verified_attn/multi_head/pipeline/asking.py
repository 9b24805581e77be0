"""Stage 3, asking: the ratio-grid queries of each (u, b) pair, asked in blocks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verified_attn.multi_head.pipeline.design import (
    float_sequence,
)
from verified_attn.oracle import Oracle

#: Query entries (tokens x d) built at once when the design's pairs are asked
#: (:func:`ask_pairs`): the F(t) queries of nn.MultiheadAttention E = 64, H = 4 are 3.9 GB
#: of float64 together.
_BLOCK_ENTRIES = 1 << 24


def ask_pairs(
    oracle: Oracle,
    pairs: Sequence[tuple[np.ndarray, int]],
    B: np.ndarray,
    ratios: Sequence[tuple[int, int]],
) -> np.ndarray:
    """The answers, ``(len(pairs), len(ratios))``, to :func:`float_sequence` ``(u, B[j], k,
    m)`` for every pair ``(u, j)`` and ratio ``(k, m)``, asked pair by pair in the oracle's
    current phase, in blocks of pairs of at most :data:`_BLOCK_ENTRIES` query entries (the
    same queries in the same order as one list; memory bounded at any d).

    >>> from verified_attn import MultiHeadAttention, Oracle
    >>> box = Oracle(MultiHeadAttention([([[1.0]], [2.0])]), "float")
    >>> ask_pairs(box, [(np.array([0.0]), 0)], np.ones((1, 1)), [(1, 1), (2, 1)]).tolist()
    [[2.0, 2.0]]
    >>> box.queries
    2
    """
    per_pair = max(1, sum(k + m for k, m in ratios) * B.shape[1])
    step = max(1, _BLOCK_ENTRIES // per_pair)
    out = np.empty((len(pairs), len(ratios)))
    for start in range(0, len(pairs), step):
        block = pairs[start : start + step]
        seqs = [float_sequence(u, B[j], k, m) for u, j in block for k, m in ratios]
        got = np.array(oracle.query_many(seqs), dtype=np.float64)
        out[start : start + len(block)] = got.reshape(len(block), len(ratios))
    return out

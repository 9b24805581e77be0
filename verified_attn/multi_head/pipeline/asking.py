"""Stage 3, asking: the ratio-grid queries of each (u, b) pair, asked in blocks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verified_attn.multi_head.pipeline.design import (
    float_sequence,
)
from verified_attn.multi_head.pipeline.state import FloatState
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


def ask_zero(st: FloatState) -> None:
    """Stage 2a: the length-1 queries ``[b_j]``, one per probe column (phase ``F(0)``)."""
    with st.oracle.phase("F(0)"):
        st.f0 = np.array(st.oracle.query_many(st.B[:, None, :]), dtype=np.float64)


def ask_grid(st: FloatState) -> None:
    """Stage 3: the ratio grid of every pair the pilot did not ask (phase ``F(t)``), then the
    redundant ratio t = 1 (phase ``redundancy``, H >= 2); the pilot's kept round fills its
    pairs' rows."""
    n_grid = 2 * st.H
    piloted = set(st.piloted)
    rest = [p for i, p in enumerate(st.pairs) if i not in piloted]
    with st.oracle.phase("F(t)"):
        grid_ans = ask_pairs(st.oracle, rest, st.B, st.ratios[:n_grid])
    extra_ans = np.zeros((len(rest), 0))
    if len(st.ratios) > n_grid:
        with st.oracle.phase("redundancy"):
            extra_ans = ask_pairs(st.oracle, rest, st.B, st.ratios[n_grid:])
    ans = np.empty((len(st.pairs), len(st.ratios)))
    ans[st.piloted] = st.kept
    others = [i for i in range(len(st.pairs)) if i not in piloted]
    ans[others] = np.hstack([grid_ans, extra_ans])
    st.ans = ans


def ask_ties(st: FloatState, kj: list[tuple[int, int]]) -> list[float]:
    """The tie links ``((u_k, (b_1 + b_j) / 2)`` at k = 1) the decoding asks for (phase ``tie
    links``). A link already asked is not asked again (a decoding after a conditioning round
    meets the same ties): its row u_k is never replaced."""
    new = list(dict.fromkeys(x for x in kj if x not in st.asked_ties))
    if new:
        seqs = [float_sequence(st.U[k], (st.B[0] + st.B[j]) / 2, 1) for k, j in new]
        with st.oracle.phase("tie links"):
            measured = [float(y) for y in st.oracle.query_many(seqs)]
        for (k, j), y in zip(new, measured, strict=True):
            st.asked_ties[(k, j)] = y
            st.tie_answers.append({"k": k, "j": j, "answer": y})
    return [st.asked_ties[x] for x in kj]

"""The coarse (float32) polish's start: each u-group's head order taken on the random
sequences (:mod:`verified_attn.multi_head.pipeline.reorder`), and the design under the
follow-up's count it serves from two to four heads.

Fast: no learning run (the learning runs are under ``-m slow`` in
tests/multi_head/test_float32_follow_up.py).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from verified_attn.multi_head.pipeline import reorder
from verified_attn.multi_head.pipeline.budget import within_follow_up
from verified_attn.multi_head.pipeline.design import float_design
from verified_attn.multi_head.sequence_fit import compress, model_values, polish_sequences

F32 = 2.0**-24


def _case(d: int, H: int, seed: int) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]], object]:
    """An affine box's true heads, the float design's U and the float32-rounded answers on
    the polish sequences (as a float32 box gives them)."""
    rng = np.random.default_rng(seed)
    heads = [
        (rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d), rng.normal(0, 1, d)) for _ in range(H)
    ]
    U = float_design(d, seed, True, extra=1)[0]
    seqs = polish_sequences(d, 120, seed)
    exact = model_values(heads, 0.5, compress(seqs, [0.0] * len(seqs)), True)
    return U, heads, compress(seqs, np.float32(exact).astype(np.float64))


def _error(got: list[tuple[np.ndarray, ...]], heads: list[tuple[np.ndarray, ...]]) -> float:
    """The largest entry error over the best head numbering (the heads are a set)."""
    return min(
        max(
            float(np.abs(a - b).max())
            for g, h in zip(p, heads, strict=True)
            for a, b in zip(g, h, strict=True)
        )
        for p in itertools.permutations(got)
    )


@pytest.mark.parametrize(("d", "H"), [(8, 3), (6, 4)])
def test_swapped_groups_are_put_back_in_order(d: int, H: int) -> None:
    U, heads, rows = _case(d, H, seed=H)
    # Three groups' head orders scrambled (a wrong link in each), group 1 kept.
    mixed = reorder.swap_row(U, heads, 1, tuple(np.roll(range(H), 1)))
    mixed = reorder.swap_row(U, mixed, 3, (1, 0, *range(2, H)))
    mixed = reorder.swap_row(U, mixed, d - 1, tuple(reversed(range(H))))
    assert _error(mixed, heads) > 0.1
    got, moved = reorder.reorder_groups(U, mixed, 0.5, rows, affine=True)
    assert moved == 3  # one move a group (steepest descent)
    assert _error(got, heads) < 1e-12  # the very heads: only rows moved back
    # The order the decoding gave is kept when it is right.
    same, none = reorder.reorder_groups(U, heads, 0.5, rows, affine=True)
    assert none == 0 and _error(same, heads) == 0.0


def test_the_wrong_variant_without_moves_keeps_the_wrong_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    U, heads, rows = _case(8, 4, seed=4)
    mixed = reorder.swap_row(U, heads, 3, (1, 0, 2, 3))
    monkeypatch.setattr(reorder, "REORDER_MOVES", 0)
    got, moved = reorder.reorder_groups(U, mixed, 0.5, rows, affine=True)
    assert moved == 0 and _error(got, heads) > 0.1


def test_swap_row_moves_one_row_of_every_head() -> None:
    U, heads, _ = _case(4, 2, seed=0)
    swapped = reorder.swap_row(U, heads, 1, (1, 0))
    for h, other in ((0, 1), (1, 0)):
        for part, (a, b) in enumerate(zip(swapped[h], heads[h], strict=True)):
            moved = U @ a - U @ b
            # Only row 1 of U W (U v, U c) changed, to the other head's row.
            assert np.allclose(np.delete(moved, 1, axis=0), 0.0, atol=1e-12)
            assert np.allclose((U @ a)[1], (U @ heads[other][part])[1], atol=1e-12)


def test_up_to_four_heads_take_the_design_under_the_count() -> None:
    assert [within_follow_up(8, H, True, unit=F32) for H in (1, 2, 3, 4, 5)] == [
        False,
        True,
        True,
        True,
        False,
    ]


def _low_rank_case(d: int, H: int, rank: int, seed: int) -> tuple[np.ndarray, list, object]:
    """As :func:`_case`, with heads of rank ``rank`` (W = Q^T K, c = Q^T q, as
    nn.MultiheadAttention's heads with E / H = rank)."""
    rng = np.random.default_rng(seed)
    heads = []
    for _ in range(H):
        Q, K = rng.normal(0, d**-0.5, (rank, d)), rng.normal(0, 1, (rank, d))
        heads.append((Q.T @ K, rng.normal(0, 1, d), Q.T @ rng.normal(0, 0.3, rank)))
    U = float_design(d, seed, True, extra=1)[0]
    seqs = polish_sequences(d, 200, seed)
    exact = model_values(heads, 0.5, compress(seqs, [0.0] * len(seqs)), True)
    return U, heads, compress(seqs, np.float32(exact).astype(np.float64))


def _cost(rows: object) -> object:
    """The steepest descent's figure: the squared residual on ``rows``' answers."""

    def cost(hs: list) -> float:
        return float(np.sum((model_values(hs, 0.5, rows, True) - rows.answers) ** 2))

    return cost


def _scrambled(d: int, H: int) -> tuple[np.ndarray, list, list, object]:
    """Rank-4 heads with every u-group's head order drawn at random: U, the true heads,
    the scrambled ones and the answers."""
    U, heads, rows = _low_rank_case(d, H, 4, seed=7)
    orders = np.array([np.random.default_rng(k).permutation(H) for k in range(d)])
    return U, heads, reorder.permute_groups(U, heads, orders), rows


def test_every_group_scrambled_low_rank_heads_are_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = 12
    U, heads, mixed, rows = _scrambled(d, 3)
    assert _error(mixed, heads) > 0.1
    cost = _cost(rows)
    start, value = reorder.low_rank_start(U, mixed, True, cost)
    assert _error(start, heads) < 1e-12 and value < cost(mixed)
    # reorder_groups takes that start from LOW_RANK_START_GROUPS groups on (d = 12 here).
    monkeypatch.setattr(reorder, "LOW_RANK_START_GROUPS", d)
    got, moved = reorder.reorder_groups(U, mixed, 0.5, rows, affine=True)
    assert moved == 0 and _error(got, heads) < 1e-12


def test_full_rank_heads_keep_the_decoded_start() -> None:
    # The wrong variant: heads of full rank have no common subspace, so no proposal beats
    # the decoded orders on the answers and the start is the decoded heads, unchanged.
    U, heads, rows = _case(8, 3, seed=3)
    mixed = reorder.swap_row(U, heads, 2, (1, 0, 2))
    cost = _cost(rows)
    start, value = reorder.low_rank_start(U, mixed, True, cost)
    assert value == cost(mixed) and _error(start, mixed) == 0.0


def test_without_the_subspace_steps_the_scrambled_orders_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wrong variant of the k-subspaces: no iteration (the random starts as drawn) finds
    # no better start, and the scrambled orders stay.
    U, heads, mixed, rows = _scrambled(12, 3)
    monkeypatch.setattr(reorder, "_SUBSPACE_ITERATIONS", 0)
    start, _ = reorder.low_rank_start(U, mixed, True, _cost(rows))
    assert _error(start, heads) > 0.1

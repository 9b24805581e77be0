"""verify_if_asked: verify_model when fresh sequences are asked for, None (no query) at 0."""

from __future__ import annotations

import pytest

import verified_attn as va
from verified_attn.verification import verify_if_asked

HEAD = va.SingleHeadAttention([[1, 2], [0, -1]], [1, 3])


def test_zero_asks_nothing_and_returns_none() -> None:
    oracle = va.Oracle(HEAD, "exact")
    assert verify_if_asked(oracle, HEAD, count=0, seed=0, lengths=(1, 2), what="h") is None
    assert oracle.queries == 0


def test_a_count_asks_that_many_fresh_sequences() -> None:
    oracle = va.Oracle(HEAD, "exact")
    checked = verify_if_asked(oracle, HEAD, count=3, seed=1, lengths=(1, 2), what="h")
    assert checked is not None and checked.count == 3 and oracle.queries == 3


def test_a_wrong_model_is_refused() -> None:
    wrong = va.SingleHeadAttention([[1, 2], [0, -1]], [1, 4])  # v differs in one entry
    oracle = va.Oracle(HEAD, "exact")
    with pytest.raises(va.ModelClassMismatch, match="the wrong head"):
        verify_if_asked(oracle, wrong, count=3, seed=1, lengths=(1, 2), what="the wrong head")

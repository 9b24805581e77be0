"""Position-dependent and window boxes are refused by the permuted fresh sequences."""

from __future__ import annotations

import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates import verify_certificate
from verified_attn.errors import ModelClassMismatch
from verified_attn.verification import (
    DEFAULT_LENGTHS,
    fresh_sequences,
    permute_context,
    permuted_pairs,
    verify_model,
)

HEAD = va.SingleHeadAttention([[1, -1], [2, 0]], [1, 3])


def window_box(X: np.ndarray) -> float:
    return HEAD(X[-4:])  # a sliding window of 4 tokens


def rotary_box(X: np.ndarray) -> float:
    """Scores x_i^T W (R^(n-1-i) x_n): a 2-d rotation by the relative position."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    W = np.array([[1.0, -1.0], [2.0, 0.0]])
    v = np.array([1.0, 3.0])
    scores = []
    for i in range(n):
        a = 0.3 * (n - 1 - i)
        R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        scores.append(X[i] @ W @ (R @ X[-1]))
    s = np.array(scores)
    p = np.exp(s - s.max())
    p /= p.sum()
    return float(p @ (X @ v))


def test_pairs_are_permuted_copies_with_the_lengths_kept_deterministic() -> None:
    seqs = fresh_sequences(3, 16, seed=5)
    pairs = permuted_pairs(16, DEFAULT_LENGTHS)
    assert pairs == [(6, 7), (14, 15)]
    for copy, source in pairs:
        X, Y = seqs[source], seqs[copy]
        assert X.shape == Y.shape and not np.array_equal(X, Y)
        assert np.array_equal(X[-1], Y[-1])
        assert sorted(map(tuple, X[:-1])) == sorted(map(tuple, Y[:-1]))
    again = fresh_sequences(3, 16, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(seqs, again, strict=True))
    assert permuted_pairs(7, DEFAULT_LENGTHS) == []  # no full run of lengths: no pair
    assert permuted_pairs(5, (2,)) == []  # a one-token context has no permutation
    X = np.array([[1.0, 0], [1.0, 0], [2.0, 1]])  # reversal is the identity here: rotated
    assert np.array_equal(permute_context(X), X)  # equal tokens: nothing to move


@pytest.mark.parametrize("box", [window_box, rotary_box], ids=["window-4", "rotary"])
def test_position_dependent_boxes_are_refused_naming_the_witness(box) -> None:
    oracle = va.Oracle.from_callable(box, d=2)
    with pytest.raises(ModelClassMismatch, match="depend on token positions") as info:
        verify_model(oracle, HEAD, count=8, seed=0)
    assert "same tokens at other positions" in str(info.value)
    assert np.asarray(info.value.query).shape == (16, 2)


@pytest.mark.parametrize("box", [window_box, rotary_box], ids=["window-4", "rotary"])
def test_learners_refuse_position_dependent_boxes(box) -> None:
    with pytest.raises(ModelClassMismatch):
        va.learn_single_head(va.Oracle.from_callable(box, d=2))


def test_a_permutation_invariant_head_passes_and_its_certificate_checks() -> None:
    rec = va.learn_single_head(va.Oracle(HEAD, "exact"))
    assert rec.verified and rec.exact
    assert verify_certificate(rec.certificate()).ok


def test_transformer_derivation_is_anchored_to_the_model(monkeypatch) -> None:
    from verified_attn.transformer import symbolic

    assert symbolic.matches_model().holds
    monkeypatch.setattr(symbolic, "_max0", lambda z: z)  # a wrong ReLU in the formula
    assert not symbolic.matches_model().holds

"""The orthogonal-subspace learner (paper v2 §7): exact heads, exact query counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    QueryBudgetExceeded,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.learner import (
    learn_orthogonal_heads,
    orthogonal_heads_model,
    orthogonal_query_bound,
)


@pytest.mark.parametrize(
    ("arith", "d", "ranks", "golden"),
    [("exact", 3, [1, 2], 8), ("certified", 4, [2, 2], 12), ("certified", 5, [1, 1, 2], 10)],
)
def test_golden_counts_and_exact_heads(arith: str, d: int, ranks: list, golden: int) -> None:
    model, bases = orthogonal_heads_model(d, ranks, 3)
    oracle = va.Oracle(model, arith)
    rec = learn_orthogonal_heads(oracle, bases, verify=8)
    assert rec.queries == golden == orthogonal_query_bound(ranks)
    assert rec.exact and rec.verified and rec.parameters["heads"] == model.heads
    assert rec.verification_queries == 8 * (len(ranks) + 1)
    assert oracle.queries == rec.queries + rec.verification_queries
    assert rec.theorem == "prop-7.1" and rec.method == "orthogonal"
    # The call's longest query: a fresh verification sequence (Thm 4.1 probes have length 2).
    assert rec.max_length == 16
    assert rec.queries_by_phase["verify"] == 8


@given(seed=st.integers(0, 10**4), split=st.sampled_from([[1], [1, 1], [2, 1], [1, 1, 1]]))
def test_property_certified_recovery(seed: int, split: list) -> None:
    model, bases = orthogonal_heads_model(3, split, seed)
    rec = learn_orthogonal_heads(va.Oracle(model, "certified"), bases, seed=seed, verify=2)
    assert rec.parameters["heads"] == model.heads


def test_float_mode_is_close() -> None:
    model, bases = orthogonal_heads_model(4, [2, 1], 0)
    rec = learn_orthogonal_heads(va.Oracle(model, "float"), bases)
    assert not rec.exact and rec.verification_error is not None and rec.verification_error < 1e-8
    for (W, v), (Wt, vt) in zip(rec.parameters["heads"], model.heads, strict=True):
        Wf = np.array(Wt.tolist(), dtype=float)
        assert np.abs(np.asarray(W) - Wf).max() < 1e-8
        assert np.abs(np.asarray(v) - np.array(list(vt), dtype=float)).max() < 1e-8


def test_dead_head_is_reported_and_left_out() -> None:
    model, bases = orthogonal_heads_model(4, [2, 2], 1, dead=(0,))
    rec = learn_orthogonal_heads(va.Oracle(model, "certified"), bases)
    assert len(rec.parameters["heads"]) == 1 and rec.parameters["heads"][0] == model.heads[1]
    assert any("dead head" in n for n in rec.notes)


def test_all_dead_is_not_identifiable() -> None:
    model, bases = orthogonal_heads_model(2, [1, 1], 1, dead=(0, 1))
    with pytest.raises(NotIdentifiable):
        learn_orthogonal_heads(va.Oracle(model, "exact"), bases)


def test_head_outside_its_subspace_is_caught() -> None:
    model, bases = orthogonal_heads_model(3, [1, 1], 2)
    (W0, v0), second = model.heads
    W_bad = W0.copy()
    W_bad[0, 2] += 1  # leaks out of span(B_0)
    leaky = MultiHeadAttention([(W_bad, v0), second])
    with pytest.raises(ModelClassMismatch):
        learn_orthogonal_heads(va.Oracle(leaky, "certified"), bases)


def test_budget_is_checked_before_any_query() -> None:
    model, bases = orthogonal_heads_model(3, [1, 2], 0)
    oracle = va.Oracle(model, "certified", budget=10)
    with pytest.raises(QueryBudgetExceeded):
        learn_orthogonal_heads(oracle, bases)
    assert oracle.queries == 0


@pytest.mark.parametrize(
    ("bases", "word"),
    [
        ([], "bases"),
        ([[[1], [0]], [[1], [1]]], "not orthogonal"),
        ([[[1, 2], [2, 4]]], "independent"),
        ([[[1], [0], [0]]], "bases\\[0\\]"),
    ],
)
def test_bad_bases(bases: list, word: str) -> None:
    model = MultiHeadAttention([([[1, 0], [0, 0]], [1, 0])])
    with pytest.raises(InvalidArgument, match=word):
        learn_orthogonal_heads(va.Oracle(model, "exact"), bases)


def test_model_generator_arguments() -> None:
    with pytest.raises(InvalidArgument, match="ranks"):
        orthogonal_heads_model(2, [2, 1], 0)
    with pytest.raises(InvalidArgument, match="d"):
        orthogonal_heads_model(0, [1], 0)


def test_affine_oracle_is_refused() -> None:
    model = MultiHeadAttention([([[1, 0], [0, 0]], [1, 0], [1, 0]), ([[0, 0], [0, 1]], [0, 1])])
    oracle = va.Oracle(model, "certified")
    with pytest.raises(InvalidArgument, match="multi-head-affine"):
        learn_orthogonal_heads(oracle, [[[1], [0]], [[0], [1]]])
    assert oracle.queries == 0

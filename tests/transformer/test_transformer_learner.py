"""learn_transformer: paper and direct methods, exact results, golden counts, degenerate cases."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import exact_equal
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    QueryBudgetExceeded,
)
from verified_attn.models import OneLayerTransformer
from verified_attn.transformer import antisymmetrised, learn_transformer, paper_attention_count
from verified_attn.transformer.claims import random_transformer
from verified_attn.transformer.relu import canonical_network


@settings(max_examples=12)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 10**6),
    st.sampled_from(["exact", "certified"]),
    st.sampled_from(["paper", "direct"]),
)
def test_exact_recovery(d: int, m: int, seed: int, arith: str, method: str) -> None:
    T = random_transformer(d, m, np.random.default_rng(seed))
    rec = learn_transformer(va.Oracle(T, arith), method=method, seed=seed % 7)
    assert rec.W == T.W
    assert rec.v_eff == T.v_eff
    assert rec.network == canonical_network(T)
    assert rec.exact and rec.verified
    expected = paper_attention_count(d) if method == "paper" else d * d
    assert rec.attention_queries == expected == rec.attention_bound
    assert va.verify_certificate(rec.certificate()).ok  # re-checked without the oracle


def test_learned_transformer_equals_the_truth_as_a_function() -> None:
    T = OneLayerTransformer(
        [[1, Fraction(-1, 2)], [2, 0]], [[1, 1], [0, 2]], [[1, -1, 2], [0, 1, -1]], [2, 1, -1]
    )
    rec = learn_transformer(va.Oracle(T, "certified"), method="paper")
    rng = np.random.default_rng(42)
    for n in range(1, 9):  # sequences of lengths 1..8 the learner never saw, compared with ==
        X = rng.integers(-6, 7, (n, 2)) / 3
        assert exact_equal(rec.model.evaluate(X, "exact"), T.evaluate(X, "exact"))


def test_golden_counts_paper_and_direct() -> None:
    T = random_transformer(3, 4, np.random.default_rng(11))
    paper_oracle = va.Oracle(T, "certified")
    paper = learn_transformer(paper_oracle, method="paper")
    assert paper.queries_by_phase["attention-v"] == 6  # 2 d
    assert paper.queries_by_phase["attention-W"] == 18  # 2 d^2
    assert paper.queries_by_phase["attention-verify"] == 16  # 2 x 8 fresh head checks
    assert paper.queries == paper.ffn_queries + 24
    assert paper.queries_by_phase["ffn-verify"] == 8
    assert paper.queries_by_phase["verify"] == 8
    assert paper.verification_queries == 8 + 16 + 8  # FFN, head (antisymmetrised), whole T
    assert paper_oracle.queries == paper.queries + paper.verification_queries
    direct_oracle = va.Oracle(T, "certified")
    direct = learn_transformer(direct_oracle, method="direct")
    assert direct.queries_by_phase["attention-direct"] == 9  # d^2
    assert direct.queries == direct.ffn_queries + 9
    assert direct_oracle.queries == direct.queries + direct.verification_queries
    assert (paper.ffn_queries, direct.ffn_queries) == (20, 20)


def test_antisymmetrised_oracle_counts_two_real_queries() -> None:
    T = random_transformer(2, 3, np.random.default_rng(1))
    inner = va.Oracle(T, "exact")
    outer = antisymmetrised(inner)
    X = [[1, 2], [Fraction(1, 2), -1]]
    y = outer.query(X)
    assert (outer.queries, inner.queries) == (1, 2)
    neg = [[-a for a in r] for r in X]
    assert exact_equal(y, T.evaluate(X, "exact") - T.evaluate(neg, "exact"))
    head = va.SingleHeadAttention(T.W, T.v_eff)
    assert exact_equal(y, head.evaluate(X, "exact"))  # it is a single head


def test_v_eff_zero_is_not_identifiable_by_the_paper_but_direct_learns_it() -> None:
    T = OneLayerTransformer([[1, 2], [0, 1]], [[1, 0], [0, 1]], [[1, -1], [0, 0]], [1, 1])
    assert not any(T.v_eff)
    with pytest.raises(NotIdentifiable, match="v_eff"):
        learn_transformer(va.Oracle(T, "certified"), method="paper")
    rec = learn_transformer(va.Oracle(T, "certified"), method="direct")
    assert rec.W == T.W


def test_g_zero_is_not_identifiable() -> None:
    T = OneLayerTransformer([[1, 2], [0, 1]], [[1, 0], [0, 1]], [[1, -1], [0, 0]], [0, 0])
    for method in ("paper", "direct"):
        with pytest.raises(NotIdentifiable):
            learn_transformer(va.Oracle(T, "exact"), method=method)


def test_a_single_head_is_a_one_layer_transformer_with_linear_g() -> None:
    head = va.SingleHeadAttention([[1, -1], [2, 1]], [3, -2])
    for method in ("paper", "direct"):
        rec = learn_transformer(va.Oracle(head, "certified"), method=method)
        assert rec.W == head.W and rec.network.width == 0
        assert rec.v_eff == 2 * head.v  # f(X) - f(-X) = 2 f(X)


def test_affine_head_is_a_mismatch() -> None:
    head = va.SingleHeadAttention([[1, -1], [2, 1]], [3, -2], beta=1)
    with pytest.raises(ModelClassMismatch):
        learn_transformer(va.Oracle(head, "exact"), method="paper")


def test_bad_arguments() -> None:
    T = random_transformer(2, 2, np.random.default_rng(0))
    with pytest.raises(InvalidArgument, match="method"):
        learn_transformer(va.Oracle(T, "exact"), method="fancy")
    with pytest.raises(InvalidArgument, match="arithmetic"):
        learn_transformer(va.Oracle(T, "float"))
    with pytest.raises(InvalidArgument, match="verify"):
        learn_transformer(va.Oracle(T, "exact"), verify=-1)
    with pytest.raises(InvalidArgument, match="oracle"):
        learn_transformer(T)  # type: ignore[arg-type]


def test_budget_is_respected() -> None:
    T = random_transformer(2, 2, np.random.default_rng(0))
    oracle = va.Oracle(T, "certified", budget=30)
    with pytest.raises(QueryBudgetExceeded):
        learn_transformer(oracle)
    assert oracle.queries <= 30


def test_exact_mode_values_are_sympy_rationals() -> None:
    T = random_transformer(2, 3, np.random.default_rng(8))
    rec = learn_transformer(va.Oracle(T, "exact"), method="direct")
    assert all(isinstance(x, sympy.Rational) for x in rec.W)

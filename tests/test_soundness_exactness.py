"""Certified results are exact only with their assumptions, and never near a rational."""

from __future__ import annotations

import pytest
import sympy

import verified_attn as va
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted

RANK1 = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]


def _perturbed(eps: sympy.Rational) -> sympy.Matrix:
    W = sympy.Matrix(RANK1)
    W[0, 2] += eps
    return W


@pytest.mark.parametrize(("precision", "exponent"), [(64, 20), (256, 80)])
def test_low_rank_plus_a_tiny_entry_is_not_rank_one_exactly(precision, exponent) -> None:
    model = va.SingleHeadAttention(_perturbed(sympy.Rational(1, 10**exponent)), [1, 0, 1])
    oracle = va.Oracle(model, "certified", precision=precision)
    with pytest.raises(PrecisionExhausted, match="ball containing 0"):
        va.learn_low_rank(oracle)  # the rank to find: refused, not "rank 1, exact"
    # With rank 1 given (the user's class), the result is the balls, not exact, and the
    # class check that could not see the tiny entry is stated.
    rec = va.learn_low_rank(va.Oracle(model, "certified", precision=precision), rank=1)
    assert not rec.exact and rec.enclosures is not None
    assert any(a.startswith("rank W <= 1") for a in rec.assumptions)
    assert any("refutes" in n for n in rec.notes)
    assert va.verify_certificate(rec.certificate()).ok


@pytest.mark.parametrize("precision", [64, 256])
def test_low_rank_exact_result_states_the_rank_and_denominator_assumptions(precision) -> None:
    rec = va.learn_low_rank(
        va.Oracle(va.SingleHeadAttention(RANK1, [1, 0, 1]), "certified", precision=precision)
    )
    assert rec.exact and rec.rank == 1 and rec.W == sympy.Matrix(RANK1)
    assert any("denominator" in a for a in rec.assumptions)
    assert any(a.startswith("rank W = 1") for a in rec.assumptions)
    assert rec.verification is not None and rec.verification.precision == 4 * precision
    assert va.verify_certificate(rec.certificate()).ok


def test_exact_mode_low_rank_assumes_nothing() -> None:
    rec = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(RANK1, [1, 0, 1]), "exact"))
    assert rec.exact and rec.assumptions == []


THIRD = sympy.Rational(1, 3)


@pytest.mark.parametrize("heads", [2, None])
def test_multi_head_a_ball_just_off_a_simple_rational_is_not_exact(heads) -> None:
    h1 = va.SingleHeadAttention([[1, THIRD + sympy.Rational(1, 10**80)], [0, 2]], [1, -1])
    h2 = va.SingleHeadAttention([[2, 0], [1, 1]], [0, 1])
    oracle = va.Oracle(va.MultiHeadAttention([h1, h2]), "certified", precision=256)
    kw = {"heads": 2} if heads else {"max_heads": 3}
    with pytest.raises(PrecisionExhausted, match="refutes the recovered canonical heads"):
        va.learn_multi_head(oracle, **kw)


def test_multi_head_degree_test_does_not_drop_a_tiny_head_silently() -> None:
    h1 = va.SingleHeadAttention([[1, THIRD], [0, 2]], [1, -1])
    h2 = va.SingleHeadAttention([[2, 0], [1, 1]], [0, sympy.Rational(1, 10**80)])
    oracle = va.Oracle(va.MultiHeadAttention([h1, h2]), "certified", precision=256)
    with pytest.raises((PrecisionExhausted, ModelClassMismatch), match="more than 1 heads"):
        va.learn_multi_head(oracle, max_heads=2)
    # The true single head: the degree decision is stated as an assumption.
    rec = va.learn_multi_head(
        va.Oracle(va.MultiHeadAttention([h1]), "certified", precision=256), max_heads=2
    )
    assert rec.exact and len(rec.heads) == 1
    assert any(a.startswith("1 heads: the interpolation systems") for a in rec.assumptions)
    assert rec.verification is not None and rec.verification.precision == 1024
    assert va.verify_certificate(rec.certificate()).ok


@pytest.mark.parametrize("where", ["W", "A"])
def test_transformer_just_off_a_simple_rational_is_refused_not_exact(where) -> None:
    from verified_attn.models import OneLayerTransformer

    off = THIRD + sympy.Rational(1, 10**95)
    W = [[1, off], [0, 1]] if where == "W" else [[1, 2], [0, 1]]
    A = [[1, -1], [off, 1]] if where == "A" else [[1, -1], [0, 1]]
    T = OneLayerTransformer(W, [[1, 0], [0, 1]], A, [1, 2])
    with pytest.raises(PrecisionExhausted, match="refutes the learned"):
        va.learn_transformer(va.Oracle(T, "certified", precision=256))

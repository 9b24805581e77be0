"""Canonical forms and the exact equivalence decision."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verified_attn.errors import InvalidArgument
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head import KINDS, counterexample
from verified_attn.multi_head.canonical import canonical_form, equivalent
from verified_attn.multi_head.counterexamples import perturb
from verified_attn.multi_head.symbolic import exact_same_value

MIN_HEADS = {"permutation": 2, "shared-score-split": 2, "dead-head": 1, "cancelling-values": 2}


def test_canonical_form_merges_drops_and_orders() -> None:
    m = MultiHeadAttention(
        [([[2]], [1]), ([[0]], [0]), ([[-1]], [5]), ([[2]], [3]), ([[7]], [1]), ([[7]], [-1])]
    )
    c = canonical_form(m)
    assert c.keys == (
        ((Fraction(-1),), (Fraction(5),)),
        ((Fraction(2),), (Fraction(4),)),
    )
    assert c.H == 2
    assert c.model() is not None and c.model().heads == c.heads


def test_zero_map_has_no_heads() -> None:
    m = MultiHeadAttention([([[1]], [1]), ([[1]], [-1])])
    assert canonical_form(m).H == 0 and canonical_form(m).model() is None
    assert equivalent(m, MultiHeadAttention([([[5]], [0])])).equivalent


@given(kind=st.sampled_from(KINDS), d=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_counterexample_pairs_share_a_canonical_form(kind: str, d: int, seed: int) -> None:
    pair = counterexample(d=d, heads=MIN_HEADS[kind] + 1, kind=kind, seed=seed)
    assert canonical_form(pair.first) == canonical_form(pair.second)
    verdict = equivalent(pair.first, pair.second, seed=seed)
    assert verdict and verdict.proof is not None and verdict.proof.holds
    assert verdict.witness is None


@given(d=st.integers(1, 3), seed=st.integers(0, 10**6), entry=st.integers(0, 2))
def test_perturbed_models_get_an_exact_witness(d: int, seed: int, entry: int) -> None:
    pair = counterexample(d=d, heads=2, kind="shared-score-split", seed=seed)
    wrong = perturb(pair.first, head=1, entry=entry % d, delta=Fraction(1, 3))
    verdict = equivalent(pair.first, wrong, seed=seed)
    assert not verdict
    assert verdict.witness is not None
    # Re-check the witness independently of equivalent().
    assert not exact_same_value(pair.first, wrong, verdict.witness)
    a, b = verdict.values
    assert a != b


def test_same_sum_of_v_different_w_needs_a_longer_witness() -> None:
    # Length-1 queries see only sum_h v_h, which agrees here; a longer witness is needed.
    m1 = MultiHeadAttention([([[1]], [1]), ([[2]], [1])])
    m2 = MultiHeadAttention([([[1]], [1]), ([[3]], [1])])
    verdict = equivalent(m1, m2)
    assert not verdict and len(verdict.witness) >= 2


def test_bad_arguments() -> None:
    m = MultiHeadAttention([([[1]], [1])])
    with pytest.raises(InvalidArgument, match="model"):
        canonical_form("not a model")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="m2"):
        equivalent(m, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="different d"):
        equivalent(m, MultiHeadAttention([([[1, 0], [0, 1]], [1, 1])]))
    with pytest.raises(InvalidArgument, match="tries"):
        equivalent(m, m, tries=0)

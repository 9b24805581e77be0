"""Canonical forms and the exact equivalence decision."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
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


def test_affine_heads_merge_only_when_w_and_c_agree() -> None:
    W = [[1, 0], [0, 2]]
    m = MultiHeadAttention(
        [(W, [1, 0], [1, 1]), (W, [2, -1], [1, 1]), (W, [5, 5], [0, 1]), (W, [1, 1])],
        beta=Fraction(1, 3),
    )
    c = canonical_form(m)
    assert c.H == 3 and c.affine
    merged = [(h[1], h[2]) for h in c.heads]
    assert (sympy.Matrix([3, -1]), sympy.Matrix([1, 1])) in merged  # equal (W, c): v adds
    assert (sympy.Matrix([5, 5]), sympy.Matrix([0, 1])) in merged  # other c: its own head
    assert (sympy.Matrix([1, 1]), sympy.Matrix([0, 0])) in merged  # no c: c = 0
    assert c.beta == Fraction(1, 3)
    assert canonical_form(c.model()) == c
    assert equivalent(m, c.model())


def test_affine_output_biases_add_and_zero_biases_are_plain() -> None:
    h = va.SingleHeadAttention([[2]], [1], c=[1], beta=2)
    m = MultiHeadAttention([h, ([[2]], [3], [1])], beta=-5)
    c = canonical_form(m)
    assert c.beta == -3 and c.heads == [(sympy.Matrix([[2]]), sympy.Matrix([4]), sympy.Matrix([1]))]
    plain = MultiHeadAttention([([[2]], [1])])
    assert canonical_form(MultiHeadAttention([([[2]], [1], [0])], beta=0)) == canonical_form(plain)
    # Only a constant left: the canonical model is a dead head plus beta.
    const = MultiHeadAttention([([[2]], [1], [1]), ([[2]], [-1], [1])], beta=4)
    cc = canonical_form(const)
    assert cc.H == 0 and cc.beta == 4 and cc.model() is not None
    assert cc.model()([[7]]) == 4.0


def test_affine_equivalence_is_decided_exactly() -> None:
    W = [[1, 0], [0, -1]]
    a = MultiHeadAttention([(W, [1, 2], [1, -1]), (W, [2, 0], [1, -1])], beta=1)
    b = MultiHeadAttention([(W, [3, 2], [1, -1])], beta=1)
    verdict = equivalent(a, b)
    assert verdict and verdict.proof is not None and verdict.proof.holds
    # Deliberately wrong partners: another c, another beta; each gets an exact witness.
    for wrong in (
        MultiHeadAttention([(W, [3, 2], [1, 0])], beta=1),
        MultiHeadAttention([(W, [3, 2], [1, -1])], beta=2),
        MultiHeadAttention([(W, [3, 2])], beta=1),
    ):
        verdict = equivalent(a, wrong)
        assert not verdict and verdict.witness is not None
        assert not exact_same_value(a, wrong, verdict.witness)
        x, y = verdict.values
        assert x != y

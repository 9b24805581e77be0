"""Prop 7.1 counterexamples: distinct exact parameters, one map, and a proof that can fail."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from verified_attn.errors import InvalidArgument
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head import KINDS, counterexample, counterexample_report, to_json
from verified_attn.multi_head.counterexamples import perturb
from verified_attn.multi_head.symbolic import (
    exact_same_value,
    linearity_in_v,
    opaque_form,
    prove_same_map,
    random_rational_sequence,
)

MIN_HEADS = {"permutation": 2, "shared-score-split": 2, "dead-head": 1, "cancelling-values": 2}


@given(
    kind=st.sampled_from(KINDS),
    d=st.integers(1, 3),
    extra=st.integers(0, 2),
    seed=st.integers(0, 10**6),
)
def test_every_pair_is_distinct_and_proved(kind: str, d: int, extra: int, seed: int) -> None:
    H = MIN_HEADS[kind] + extra
    first, second, proof = counterexample("multi-head", d=d, heads=H, kind=kind, seed=seed)
    assert first.heads != second.heads
    assert first.H == second.H == H and first.d == d
    assert proof.holds and proof.difference == 0
    assert [n for n, _ in proof.concrete] == [1, 2, 3, 4, 5, 6]
    # Independent of the proof: the exact values agree, and the float values agree closely.
    rng = np.random.default_rng(seed)
    for n in (1, 3, 7):
        X = random_rational_sequence(d, n, rng)
        assert exact_same_value(first, second, X)
        Xf = np.array([[float(x) for x in r] for r in X])
        assert abs(first(Xf) - second(Xf)) <= 1e-9 * (1 + abs(first(Xf)))


@given(kind=st.sampled_from(KINDS), d=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_a_perturbed_partner_fails_the_proof(kind: str, d: int, seed: int) -> None:
    pair = counterexample("multi-head", d=d, heads=MIN_HEADS[kind] + 1, kind=kind, seed=seed)
    wrong = perturb(pair.second, head=0, entry=d - 1)
    proof = prove_same_map(pair.first, wrong, seed=seed)
    assert not proof.holds
    assert proof.difference != 0
    # Length 1 already sees sum_h v_h, which the perturbation changed: [e_entry] tells.
    e = [[Fraction(int(j == d - 1)) for j in range(d)]]
    assert not exact_same_value(pair.first, wrong, e)


def test_exact_same_value_sees_tiny_differences() -> None:
    # Two heads whose outputs differ by about 1e-30: floats cannot tell, the decision can.
    a = MultiHeadAttention([([[0]], [1])])
    b = MultiHeadAttention([([[Fraction(1, 10**30)]], [1])])
    X = [[1], [2]]
    assert a(X) == b(X)  # float64 cannot see it
    assert not exact_same_value(a, b, X)
    assert exact_same_value(a, a, X)


def test_opaque_form_shares_symbols_for_equal_w() -> None:
    m = MultiHeadAttention([([[1]], [2]), ([[1]], [3]), ([[2]], [0])])
    expr = opaque_form(m)
    assert str(expr) == "5*g1(X, W1)"


def test_linearity_is_derived_not_assumed() -> None:
    for d, n in ((1, 1), (2, 2), (1, 4)):
        assert linearity_in_v(d, n).holds


def test_report_and_json_carry_exact_rationals() -> None:
    pair = counterexample("multi-head", d=2, heads=2, kind="shared-score-split", seed=5)
    text = counterexample_report(pair)
    assert "first model:" in text and "second model:" in text and "holds: True" in text
    data = json.loads(json.dumps(to_json(pair)))
    assert data["proof"]["holds"] is True and data["proof"]["difference"] == "0"
    firsts = [[Fraction(x) for x in row] for row in data["first"][0]["W"]]
    assert firsts == [
        [Fraction(int(x.p), int(x.q)) for x in pair.first.heads[0][0].row(i)] for i in range(2)
    ]
    # Every printed v entry is an exact rational of the model.
    for (_W, v), head in zip(pair.second.heads, data["second"], strict=True):
        assert [Fraction(s) for s in head["v"]] == [Fraction(int(x.p), int(x.q)) for x in v]
        assert f"v = [{', '.join(map(str, v))}]" in text


def test_seeds_are_reproducible() -> None:
    a = counterexample(d=3, heads=2, kind="dead-head", seed=11)
    b = counterexample(d=3, heads=2, kind="dead-head", seed=11)
    assert a.first.heads == b.first.heads and a.second.heads == b.second.heads


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"kind": "rotation"}, "kind"),
        ({"d": 0}, "d"),
        ({"d": 1.5}, "d"),
        ({"heads": 0}, "heads"),
        ({"heads": 1, "kind": "permutation"}, "heads"),
        ({"heads": 1, "kind": "shared-score-split"}, "heads"),
        ({"heads": 1, "kind": "cancelling-values"}, "heads"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, word: str) -> None:
    with pytest.raises(InvalidArgument, match=word):
        counterexample("multi-head", **kwargs)


def test_unknown_model_class() -> None:
    with pytest.raises(InvalidArgument, match="model_class"):
        counterexample("single-head", d=2, heads=2)


def test_dead_head_with_one_head_is_allowed() -> None:
    pair = counterexample(d=2, heads=1, kind="dead-head")
    assert pair.proof.holds and pair.first.heads[0][1].is_zero_matrix


def test_prove_same_map_rejects_mismatched_d() -> None:
    with pytest.raises(InvalidArgument, match="different d"):
        prove_same_map(
            MultiHeadAttention([([[1]], [1])]), MultiHeadAttention([([[1, 0], [0, 1]], [1, 1])])
        )


@given(kind=st.sampled_from(KINDS), d=st.integers(1, 2), seed=st.integers(0, 10**6))
def test_dense_and_sparse_decisions_agree(kind: str, d: int, seed: int) -> None:
    import verified_attn.multi_head.symbolic as sym

    pair = counterexample("multi-head", d=d, heads=MIN_HEADS[kind], kind=kind, seed=seed)
    wrong = perturb(pair.second, head=0, entry=0, delta=Fraction(1, 7))
    rng = np.random.default_rng(seed)
    seqs = [random_rational_sequence(d, n, rng) for n in (1, 2, 3)]
    dense = [exact_same_value(pair.first, m, X) for m in (pair.second, wrong) for X in seqs]
    old = sym._DENSE_LIMIT
    sym._DENSE_LIMIT = -1  # force the sparse (Lindemann-Weierstrass) path
    try:
        sparse = [exact_same_value(pair.first, m, X) for m in (pair.second, wrong) for X in seqs]
    finally:
        sym._DENSE_LIMIT = old
    assert dense == sparse
    assert dense[:3] == [True, True, True]

"""MultiHeadAttention: one definition (sum of attention_output), three arithmetics."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import arb_bounds, exact_equal
from verified_attn.errors import InvalidArgument
from verified_attn.models import MultiHeadAttention, attention_output

small = st.integers(-3, 3)


@st.composite
def models_and_sequences(draw: st.DrawFn) -> tuple[MultiHeadAttention, list[list[int]]]:
    d = draw(st.integers(1, 3))
    H = draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    heads = [
        (
            [[draw(small) for _ in range(d)] for _ in range(d)],
            [draw(small) for _ in range(d)],
        )
        for _ in range(H)
    ]
    X = [[draw(small) for _ in range(d)] for _ in range(n)]
    return MultiHeadAttention(heads), X


@given(models_and_sequences())
def test_all_arithmetics_agree_with_the_definition(case: tuple) -> None:
    model, X = case
    ref = sum(
        (
            attention_output([[sympy.Integer(x) for x in r] for r in X], W.tolist(), list(v))
            for W, v in model.heads
        ),
        sympy.Integer(0),
    )
    exact = model.evaluate(X, "exact")
    assert exact_equal(exact, ref)
    ball = model.evaluate(X, "certified")
    lo, hi = arb_bounds(ball)
    approx = Fraction(str(sympy.N(ref, 90)))  # 90 digits: far inside the 256-bit ball's slack
    slack = Fraction(1, 10**80)
    assert lo - slack <= approx <= hi + slack
    assert abs(model(X) - float(sympy.N(ref, 30))) <= 1e-9 * (1 + abs(float(sympy.N(ref, 30))))


def test_sum_of_heads_in_every_arithmetic() -> None:
    h1 = va.SingleHeadAttention([[1, 0], [0, 2]], [1, -1])
    h2 = va.SingleHeadAttention([[0, 1], [1, 0]], [2, 0])
    m = MultiHeadAttention([h1, h2])
    X = [[1, 0], [0, 1], [1, 1]]
    assert m.evaluate(X, "exact") == h1.evaluate(X, "exact") + h2.evaluate(X, "exact")
    assert m(X) == pytest.approx(h1(X) + h2(X), rel=1e-15)
    ball = m.evaluate(X, "certified")
    assert ball.overlaps(h1.evaluate(X, "certified") + h2.evaluate(X, "certified"))
    batch = m.evaluate_batch(np.array([X, X], dtype=float))
    assert batch.shape == (2,) and batch.dtype == np.float64


def test_oracle_declares_the_class_and_counts() -> None:
    m = MultiHeadAttention([([[1]], [2]), ([[-1]], [1])])
    for arith in ("exact", "certified", "float"):
        o = va.Oracle(m, arith)
        assert o.model_class == "multi-head"
        o.query_many([[[1]], [[2], [1]]])
        assert o.queries == 2 and o.tokens_sent == 3
    assert va.Oracle(m, "exact").query([[3]]) == 9


def test_parameters_are_exact() -> None:
    m = MultiHeadAttention([([[0.5]], [0.25]), ([[1]], [3])])
    assert m.heads[0][0] == sympy.Matrix([[sympy.Rational(1, 2)]])
    assert m.parameter_count == 4 and m.H == 2 and m.d == 1
    assert m.parameters()["heads"][1][1] == sympy.Matrix([3])


@pytest.mark.parametrize(
    ("heads", "word"),
    [
        ([], "heads"),
        ("ab", "heads"),
        ([([[1, 2]], [1])], "heads[0]"),
        ([([[1]], [1, 2])], "heads[0]"),
        ([([[1]], [1]), ([[1, 0], [0, 1]], [1, 1])], "heads[1]"),
        ([([[1]],)], "heads[0]"),
    ],
)
def test_bad_heads_name_the_argument(heads: object, word: str) -> None:
    with pytest.raises(InvalidArgument, match=word.replace("[", r"\[").replace("]", r"\]")):
        MultiHeadAttention(heads)


@st.composite
def affine_models_and_sequences(draw: st.DrawFn) -> tuple[list, int, list[list[int]]]:
    d = draw(st.integers(1, 3))
    H = draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    heads = [
        (
            [[draw(small) for _ in range(d)] for _ in range(d)],
            [draw(small) for _ in range(d)],
            [draw(small) for _ in range(d)],
        )
        for _ in range(H)
    ]
    X = [[draw(small) for _ in range(d)] for _ in range(n)]
    return heads, draw(small), X


@given(affine_models_and_sequences())
def test_affine_is_the_sum_of_affine_single_heads_plus_beta(case: tuple) -> None:
    heads, beta, X = case
    model = MultiHeadAttention(heads, beta=beta)
    singles = [va.SingleHeadAttention(W, v, c=c) for W, v, c in heads]
    exact = sum((m.evaluate(X, "exact") for m in singles), sympy.Integer(beta))
    assert exact_equal(model.evaluate(X, "exact"), exact)
    # The definition itself, with c and beta, from attention_output.
    rows = [[sympy.Integer(x) for x in r] for r in X]
    ref = sum((attention_output(rows, W, v, c) for W, v, c in heads), sympy.Integer(beta))
    assert exact_equal(model.evaluate(X, "exact"), ref)
    lo, hi = arb_bounds(model.evaluate(X, "certified"))
    approx = Fraction(str(sympy.N(ref, 90)))
    slack = Fraction(1, 10**80)
    assert lo - slack <= approx <= hi + slack
    expected = sum(m(X) for m in singles) + beta
    assert abs(model(X) - expected) <= 1e-12 * (1 + abs(expected))
    batch = model.evaluate_batch(np.array([X, X], dtype=float))
    assert np.allclose(batch, [model(X)] * 2, rtol=1e-15, atol=0)


def test_affine_bias_changes_the_value_and_zero_biases_do_not() -> None:
    # A deliberately wrong variant: dropping c or beta changes f (so the tests can fail).
    X = [[1, 0], [0, 1], [1, 1]]
    W, v, c = [[1, 0], [0, 2]], [1, -1], [1, 2]
    with_c = MultiHeadAttention([(W, v, c)], beta=3)
    assert with_c.evaluate(X, "exact") != MultiHeadAttention([(W, v)], beta=3).evaluate(X, "exact")
    assert with_c.evaluate(X, "exact") != MultiHeadAttention([(W, v, c)]).evaluate(X, "exact")
    zero = MultiHeadAttention([(W, v, [0, 0])], beta=0)
    assert zero.affine and zero.evaluate(X, "exact") == MultiHeadAttention([(W, v)]).evaluate(
        X, "exact"
    )


def test_affine_model_declares_itself() -> None:
    m = MultiHeadAttention([([[1]], [2], [1]), ([[0]], [-1])], beta=Fraction(1, 2))
    assert m.affine and m.model_class == "multi-head-affine"
    assert va.Oracle(m, "certified").model_class == "multi-head-affine"
    assert m.parameter_count == 2 * (1 + 2) + 1
    assert m.heads[1][2] == sympy.Matrix([0]) and m.beta == sympy.Rational(1, 2)
    assert m.parameters()["beta"] == sympy.Rational(1, 2)
    assert va.Oracle(m, "exact").query([[3]]) == 3 * 2 - 3 + sympy.Rational(1, 2)
    assert not MultiHeadAttention([([[1]], [2])]).affine


def test_affine_single_head_heads_keep_their_beta() -> None:
    h1 = va.SingleHeadAttention([[1, 0], [0, 2]], [1, -1], c=[1, 0], beta=2)
    h2 = va.SingleHeadAttention([[0, 1], [1, 0]], [2, 0])
    m = MultiHeadAttention([h1, h2], beta=-1)
    X = [[1, 0], [0, 1], [1, 1]]
    assert m.evaluate(X, "exact") == h1.evaluate(X, "exact") + h2.evaluate(X, "exact") - 1
    assert m.beta == 1 and m.affine


@pytest.mark.parametrize(
    ("heads", "beta", "word"),
    [
        ([([[1, 0], [0, 1]], [1, 1], [1])], None, "heads[0]: c must have length d = 2"),
        ([([[1]], [1], [[1, 2]])], None, "heads[0]: c"),
        ([([[1]], [1], ["x"])], None, "heads[0]: entry of c"),
        ([([[1]], [1], [1], [1])], None, "heads[0]"),
        ([([[1]], [1])], "one", "beta"),
        ([([[1]], [1])], float("nan"), "beta"),
    ],
)
def test_bad_affine_arguments_name_the_argument(heads: list, beta: object, word: str) -> None:
    with pytest.raises(InvalidArgument, match=word.replace("[", r"\[").replace("]", r"\]")):
        MultiHeadAttention(heads, beta=beta)


def test_bad_sequence_is_a_clear_error() -> None:
    m = MultiHeadAttention([([[1]], [1])])
    with pytest.raises(InvalidArgument, match="X"):
        m([[1, 2]])
    with pytest.raises(InvalidArgument):
        m.evaluate_batch(np.zeros((1, 2, 3)))

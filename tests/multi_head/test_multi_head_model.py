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


def test_affine_head_rejected() -> None:
    with pytest.raises(InvalidArgument, match="affine"):
        MultiHeadAttention([va.SingleHeadAttention([[1]], [1], beta=1)])


def test_bad_sequence_is_a_clear_error() -> None:
    m = MultiHeadAttention([([[1]], [1])])
    with pytest.raises(InvalidArgument, match="X"):
        m([[1, 2]])
    with pytest.raises(InvalidArgument):
        m.evaluate_batch(np.zeros((1, 2, 3)))

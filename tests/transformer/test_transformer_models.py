"""ReluFFN and OneLayerTransformer: one definition, three arithmetics, exact ReLU decisions."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import arb_bounds, exact_equal
from verified_attn.errors import InvalidArgument
from verified_attn.models import OneLayerTransformer, ReluFFN, _sign_of_exp_sum
from verified_attn.transformer.symbolic import transformer_output

FLOAT_RTOL = 1e-12  # float64 evaluation of these small models, relative to the answer's scale


def _random_transformer(seed: int, d: int = 2, e: int = 3, m: int = 3) -> OneLayerTransformer:
    rng = np.random.default_rng(seed)
    return OneLayerTransformer(
        rng.integers(-3, 4, (d, d)) / 2,
        rng.integers(-2, 3, (d, e)),
        rng.integers(-2, 3, (e, m)),
        rng.integers(-3, 4, m),
    )


def _reference(T: OneLayerTransformer, X: list[list[Fraction]]) -> sympy.Expr:
    """T(X) straight from attention_output with ReLU = Max(., 0) (the slow reference)."""
    rows = [[sympy.Rational(x.numerator, x.denominator) for x in r] for r in X]
    return transformer_output(rows, T.W, T.V, T.A, T.w_o, _relu_reference)


def _relu_reference(z: sympy.Expr) -> sympy.Expr:
    # SymPy's Max cannot compare an expression that is exactly 0 but not visibly so.
    return sympy.Integer(0) if exact_equal(z, 0) else sympy.Max(z, 0)


@settings(max_examples=8)
@given(st.integers(0, 10**6), st.integers(1, 3))
def test_exact_value_is_the_reference_and_certified_contains_it(seed: int, n: int) -> None:
    T = _random_transformer(seed)
    rng = np.random.default_rng(seed + 1)
    X = [[Fraction(int(a), 2) for a in rng.integers(-3, 4, T.d)] for _ in range(n)]
    exact = T.evaluate(X, "exact")
    assert exact_equal(exact, _reference(T, X))
    ball = T.evaluate(X, "certified")
    lo, hi = arb_bounds(ball)
    # The exact value to 100 digits (SymPy's evalf is correct to the digits it prints;
    # widened by 10^-80 to stay sound) must meet the ball.
    approx = Fraction(str(sympy.N(exact, 100)))
    assert lo - Fraction(1, 10**80) <= approx <= hi + Fraction(1, 10**80)
    assert abs(T(np.array(X, dtype=float)) - float(approx)) <= FLOAT_RTOL * max(1.0, abs(approx))


def test_length_one_is_the_ffn_exactly() -> None:
    T = _random_transformer(3)
    g = T.ffn()
    for x in ([1, -2], [Fraction(1, 3), 5], [0, 0]):
        xq = [Fraction(a) for a in x]
        assert T.evaluate([x], "exact") == sympy.Rational(g.value(xq))
        assert g.evaluate([[7, 7], x], "exact") == sympy.Rational(g.value(xq))  # f = g(x_N)


def test_relu_ffn_values_and_batch() -> None:
    g = ReluFFN([[1, -1, 2]], [2, 3, -1])  # d = 1
    assert g.value([Fraction(2)]) == 2 * 2 - 1 * 4
    assert g.value([Fraction(-1)]) == 3
    assert g.evaluate([[-1]], "certified").is_exact()
    out = g.evaluate_batch(np.array([[[2.0]], [[-1.0]]]))
    assert out.tolist() == [0.0, 3.0]


def test_a_pre_activation_exactly_zero_is_decided_exactly() -> None:
    # Two tokens +x, -x with equal scores: the pooled h is exactly 0, so ReLU(z) = 0.
    T = OneLayerTransformer([[0, 0], [0, 0]], [[1, 0], [0, 1]], [[1, -1], [0, 0]], [5, 7])
    X = [[1, 0], [-1, 0]]
    assert T.evaluate(X, "exact") == 0
    ball = T.evaluate(X, "certified")
    assert ball.is_exact() and ball == 0


def test_sign_of_exp_sum_exact_zero_and_near_cancellation() -> None:
    q = flint.fmpq
    assert _sign_of_exp_sum([q(1, 3), q(1, 3)], [q(2), q(-2)]) == 0
    # e^0 - e^(-10^-40) > 0: needs more than 64 bits to decide; must not report 0.
    assert _sign_of_exp_sum([q(0), q(-1, 10**40)], [q(1), q(-1)]) == 1
    assert _sign_of_exp_sum([q(0), q(-1, 10**40)], [q(-1), q(1)]) == -1
    assert flint.ctx.prec == 53  # precision restored


def test_models_work_with_the_oracle() -> None:
    T = _random_transformer(5)
    for arith in ("exact", "certified", "float"):
        o = va.Oracle(T, arith)
        o.query([[1, 0], [0, 1]])
        assert o.queries == 1 and o.model_class == "one-layer-transformer"
    assert va.Oracle(ReluFFN([[1]], [1]), "exact").model_class == "relu-ffn"


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (([[1, 2]], [[1]], [[1]], [1]), "W"),
        (([[1]], [[1], [2]], [[1]], [1]), "V"),
        (([[1]], [[1, 2]], [[1]], [1]), "A"),
        (([[1]], [[1]], [[1, 2]], [1]), "w_o"),
    ],
)
def test_bad_shapes_name_the_argument(args: tuple, name: str) -> None:
    with pytest.raises(InvalidArgument, match=name):
        OneLayerTransformer(*args)


def test_bad_ffn_inputs() -> None:
    with pytest.raises(InvalidArgument, match="w_o"):
        ReluFFN([[1, 2]], [1])
    with pytest.raises(InvalidArgument, match="entry of A"):
        ReluFFN([["x"]], [1])
    with pytest.raises(InvalidArgument, match="Xs"):
        ReluFFN([[1]], [1]).evaluate_batch(np.zeros((2, 1, 3)))

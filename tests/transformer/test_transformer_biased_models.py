"""FFN biases a, b of ReluFFN and OneLayerTransformer: one definition, three arithmetics."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from verified_attn.arithmetic import arb_bounds, exact_equal
from verified_attn.errors import InvalidArgument
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.transformer.relu import canonical_network
from verified_attn.transformer.symbolic import pre_activations

FLOAT_RTOL = 1e-12


def _biased(seed: int, d: int = 2, e: int = 3, m: int = 3) -> OneLayerTransformer:
    rng = np.random.default_rng(seed)
    return OneLayerTransformer(
        rng.integers(-3, 4, (d, d)) / 2,
        rng.integers(-2, 3, (d, e)),
        rng.integers(-2, 3, (e, m)),
        rng.integers(-3, 4, m),
        a=[Fraction(int(x), 2) for x in rng.integers(-3, 4, m)],
        b=Fraction(int(rng.integers(-5, 6)), 3),
    )


def _relu(z: sympy.Expr) -> sympy.Expr:
    return sympy.Integer(0) if exact_equal(z, 0) else sympy.Max(z, 0)


def _reference(T: OneLayerTransformer, X: list[list[Fraction]]) -> sympy.Expr:
    """w_o^T ReLU(A^T h(X) + a) + b from the symbolic room's attention (the slow reference)."""
    rows = [[sympy.Rational(x.numerator, x.denominator) for x in r] for r in X]
    z = pre_activations(rows, T.W, T.V, T.A)
    return sum(T.w_o[k] * _relu(z[k] + T.a[k]) for k in range(T.m)) + T.b


@settings(max_examples=8)
@given(st.integers(0, 10**6), st.integers(1, 3))
def test_biased_transformer_in_every_arithmetic_is_the_reference(seed: int, n: int) -> None:
    T = _biased(seed)
    rng = np.random.default_rng(seed + 1)
    X = [[Fraction(int(a), 2) for a in rng.integers(-3, 4, T.d)] for _ in range(n)]
    exact = T.evaluate(X, "exact")
    assert exact_equal(exact, _reference(T, X))
    lo, hi = arb_bounds(T.evaluate(X, "certified"))
    approx = Fraction(str(sympy.N(exact, 100)))
    assert lo - Fraction(1, 10**80) <= approx <= hi + Fraction(1, 10**80)
    assert abs(T(np.array(X, dtype=float)) - float(approx)) <= FLOAT_RTOL * max(1.0, abs(approx))


def test_a_bias_changes_the_value_so_the_reference_can_fail() -> None:
    T = _biased(3)
    plain = OneLayerTransformer(T.W, T.V, T.A, T.w_o, a=T.a)  # b dropped
    X = [[Fraction(1), Fraction(-1)], [Fraction(1, 2), Fraction(2)]]
    assert T.b != 0
    assert not exact_equal(plain.evaluate(X, "exact"), _reference(T, X))


def test_a_hidden_bias_exactly_at_the_kink_is_decided_exactly() -> None:
    # z = h - 1 with h = 1 exactly on [[1]] (length 1) and on two equal tokens: ReLU(0) = 0.
    T = OneLayerTransformer([[1]], [[1]], [[1]], [5], a=[-1], b=Fraction(1, 3))
    assert T.evaluate([[1]], "exact") == Fraction(1, 3)
    assert T.evaluate([[1], [1]], "exact") == Fraction(1, 3)
    lo, hi = arb_bounds(T.evaluate([[1], [1]], "certified"))
    assert lo <= Fraction(1, 3) <= hi and hi - lo < Fraction(1, 10**60)


def test_length_one_is_the_biased_ffn() -> None:
    T = _biased(11)
    g = T.ffn()
    assert g.biased and g.model_class == "relu-ffn-biased"
    for x in ([1, 2], [-3, Fraction(1, 2)], [0, 0]):
        xs = [Fraction(v) for v in x]
        assert T.evaluate([xs], "exact") == g.value(xs) == g.evaluate([xs], "exact")


def test_counts_classes_and_the_bias_free_model_unchanged() -> None:
    T = OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1])
    assert (T.biased, T.parameter_count, T.model_class) == (False, 6, "one-layer-transformer")
    assert T.a == sympy.zeros(2, 1) and T.b == 0
    Tb = OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1], b=0)
    assert (
        Tb.biased and Tb.parameter_count == 9 and repr(Tb).startswith("OneLayerTransformer(biased")
    )
    g = ReluFFN([[1, 2]], [3, 4], a=[1, -1])
    assert (g.parameter_count, g.b, list(g.a)) == (7, 0, [1, -1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": [1, 2, 3]}, "a must have length 2; got length 3"),
        ({"a": [[1, 2], [3, 4]]}, "a must be a vector"),
        ({"a": [1, "x"]}, "entry of a must be a real number"),
        ({"b": [1, 2]}, "b must be"),
        ({"b": float("nan")}, "b"),
    ],
)
def test_bad_biases_get_our_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1], **kwargs)
    with pytest.raises(InvalidArgument, match=message):
        ReluFFN([[1, -1]], [1, 1], **kwargs)


def test_biases_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        OneLayerTransformer([[1]], [[1]], [[1, -1]], [1, 1], [0, 0])  # type: ignore[misc]


def test_the_bias_free_canonical_form_refuses_a_biased_model() -> None:
    with pytest.raises(InvalidArgument, match="biased ReluFFN"):
        canonical_network(_biased(0))

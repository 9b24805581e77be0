"""SingleHeadAttention: the fast paths agree with the one definition, bad inputs are named.

The reference is :func:`verified_attn.models.attention_output` evaluated in SymPy
(``model.symbolic(X)``). Exact results must be equal to it, certified balls must contain it
(checked against a 300-digit evaluation), float results must be close.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.arithmetic import arb_bounds, exact_equal
from verified_attn.errors import InvalidArgument
from verified_attn.models import as_float_sequence, as_rational_sequence, attention_output

small = st.fractions(-4, 4, max_denominator=6)


@st.composite
def model_and_query(draw: st.DrawFn, *, max_d: int = 3, max_n: int = 4) -> tuple[Any, list]:
    d = draw(st.integers(1, max_d))
    W = [[draw(small) for _ in range(d)] for _ in range(d)]
    v = [draw(small) for _ in range(d)]
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):
        kwargs = {"c": [draw(small) for _ in range(d)], "beta": draw(small)}
    n = draw(st.integers(1, max_n))
    X = [[draw(small) for _ in range(d)] for _ in range(n)]
    return va.SingleHeadAttention(W, v, **kwargs), X


@settings(max_examples=15)
@given(case=model_and_query())
def test_exact_path_equals_the_definition(case: tuple[Any, list]) -> None:
    model, X = case
    fast = model.evaluate(X, "exact")
    ref = model.symbolic(X)
    assert exact_equal(fast, ref)


def test_exact_comparison_can_fail() -> None:
    model = va.SingleHeadAttention([[1, 2], [0, 1]], [1, -1])
    other = va.SingleHeadAttention([[1, 2], [0, 1]], [1, Fraction(-99, 100)])
    X = [[1, 0], [Fraction(1, 2), 1]]
    assert not exact_equal(model.evaluate(X, "exact"), other.symbolic(X))


@settings(max_examples=15)
@given(case=model_and_query(max_d=4, max_n=5), prec=st.sampled_from([64, 256]))
def test_certified_ball_contains_the_definition(case: tuple[Any, list], prec: int) -> None:
    model, X = case
    ball = model.evaluate(X, va.get_arithmetic("certified", prec))
    lo, hi = arb_bounds(ball)
    ref = model.symbolic(X)
    if ref.is_Rational:  # e.g. length 1, or v = 0: the ball must hold the exact value
        assert lo <= Fraction(int(ref.p), int(ref.q)) <= hi
        return
    # 120 digits (~400 bits) is far below the ball's radius (2^-64 or 2^-256 relative), so
    # the 120-digit interval around the value must lie inside the ball.
    truth = Fraction(str(sympy.N(ref, 120)))
    margin = Fraction(1, 10**110) * (1 + abs(truth))
    assert lo <= truth - margin and truth + margin <= hi


def test_ball_containment_check_can_fail() -> None:
    model = va.SingleHeadAttention([[1, 2], [0, 1]], [1, -1])
    X = [[1, 0], [Fraction(1, 2), 1]]
    lo, hi = arb_bounds(model.evaluate(X, "certified"))
    shifted = model.symbolic(X) + sympy.Rational(1, 10**70)
    truth = Fraction(str(sympy.N(shifted, 120)))
    assert not (lo <= truth <= hi)


@given(case=model_and_query(max_d=4, max_n=5))
def test_float_path_is_close_to_the_definition(case: tuple[Any, list]) -> None:
    model, X = case
    ref = float(sympy.N(model.symbolic(X), 30))
    assert math.isclose(model(X), ref, rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(model.evaluate(X, "float"), ref, rel_tol=1e-12, abs_tol=1e-12)


@given(
    d=st.integers(1, 5),
    n=st.integers(1, 6),
    b=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
)
def test_batch_equals_one_by_one(d: int, n: int, b: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = va.SingleHeadAttention(rng.integers(-5, 6, (d, d)), rng.integers(-3, 4, d))
    Xs = rng.standard_normal((b, n, d))
    batch = model.evaluate_batch(Xs)
    single = np.array([model(X) for X in Xs])
    assert batch.shape == (b,)
    # Equal up to BLAS summation order (a batched matmul may group sums differently).
    scale = np.abs(model.float_parameters()["v"]).sum() * np.abs(Xs).max()
    assert np.all(np.abs(batch - single) <= 1e-14 * scale)


def test_length_one_gives_x_dot_v() -> None:
    model = va.SingleHeadAttention([[7, -3], [2, 9]], [Fraction(1, 3), -2], beta=5)
    assert model.evaluate([[3, 1]], "exact") == sympy.Rational(1 - 2 + 5)
    assert model([[3, 1]]) == 4.0


def test_large_scores_do_not_overflow() -> None:
    model = va.SingleHeadAttention([[1000]], [1])
    X = [[1], [2]]
    assert model(X) == 2.0  # softmax puts all weight on the second token (score 4000)
    ball = model.evaluate(X, "certified")
    lo, hi = arb_bounds(ball)
    assert lo < 2 and 2 - lo < Fraction(1, 10**60) and hi - lo < Fraction(1, 10**60)


def test_definition_works_with_symbols() -> None:
    a, b, w, v1 = sympy.symbols("a b w v1")
    f = attention_output([[a], [b]], [[w]], [v1])
    expected = (sympy.exp(a * w * b) * a * v1 + sympy.exp(b * w * b) * b * v1) / (
        sympy.exp(a * w * b) + sympy.exp(b * w * b)
    )
    assert sympy.simplify(f - expected) == 0


def test_parameters_are_exact_and_counted() -> None:
    m = va.SingleHeadAttention([[0.5, 1], [1, 0]], [2, 3])
    assert m.W[0, 0] == sympy.Rational(1, 2) and not m.affine and m.parameter_count == 6
    assert set(m.parameters()) == {"W", "v"}
    a = va.SingleHeadAttention([[0, 1], [1, 0]], [2, 3], c=[1, 1])
    assert a.affine and a.parameter_count == 9 and a.beta == 0
    assert set(a.parameters()) == {"W", "v", "c", "beta"}
    w = va.SingleHeadAttention(sympy.Matrix([[sympy.Rational(1, 3)]]), sympy.Matrix([2]))
    assert w.W == sympy.Matrix([[sympy.Rational(1, 3)]])
    f = va.SingleHeadAttention([[flint.fmpq(1, 3)]], [flint.fmpz(2)])
    assert f.W == w.W


def test_high_precision_sympy_float_parameter_is_exact() -> None:
    x = sympy.Float("0.1", 100)
    m = va.SingleHeadAttention([[x]], [1])
    assert m.W[0, 0] == sympy.Rational(x)


# ---------------------------------------------------------------------------------------
# Bad inputs: InvalidArgument naming the argument, never a raw numpy/sympy error.
# ---------------------------------------------------------------------------------------

I2 = [[1, 0], [0, 1]]

BAD_MODELS = [
    ({"W": [[1, 2]], "v": [1]}, "W"),
    ({"W": [[1, 2], [3]], "v": [1, 2]}, "W"),
    ({"W": [], "v": []}, "W"),
    ({"W": [[]], "v": []}, "W"),
    ({"W": np.zeros((2, 2, 2)), "v": [1, 2]}, "W"),
    ({"W": 5, "v": [1]}, "W"),
    ({"W": None, "v": [1]}, "W"),
    ({"W": "ab", "v": [1]}, "W"),
    ({"W": [[1, math.nan], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": np.array([[1, np.inf], [0, 1]]), "v": [1, 2]}, "W"),
    ({"W": [[1, "a"], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": [[1, None], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": [[1, 1j], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": [[1, True], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": [[1, sympy.sqrt(2)], [0, 1]], "v": [1, 2]}, "W"),
    ({"W": I2, "v": [1, 2, 3]}, "v"),
    ({"W": I2, "v": [1]}, "v"),
    ({"W": I2, "v": [[1, 2], [3, 4]]}, "v"),
    ({"W": I2, "v": 5}, "v"),
    ({"W": I2, "v": None}, "v"),
    ({"W": I2, "v": [1, None]}, "v"),
    ({"W": I2, "v": [1, math.inf]}, "v"),
    ({"W": I2, "v": [1, False]}, "v"),
    ({"W": I2, "v": [1, "2"]}, "v"),
    ({"W": I2, "v": [1, 2], "c": [1]}, "c"),
    ({"W": I2, "v": [1, 2], "c": [1, math.nan]}, "c"),
    ({"W": I2, "v": [1, 2], "c": [[1, 2], [3, 4]]}, "c"),
    ({"W": I2, "v": [1, 2], "c": "xy"}, "c"),
    ({"W": I2, "v": [1, 2], "beta": [1]}, "beta"),
    ({"W": I2, "v": [1, 2], "beta": "1"}, "beta"),
    ({"W": I2, "v": [1, 2], "beta": math.inf}, "beta"),
    ({"W": I2, "v": [1, 2], "beta": True}, "beta"),
    ({"W": I2, "v": [1, 2], "beta": 1j}, "beta"),
]


@pytest.mark.parametrize(("kwargs", "name"), BAD_MODELS)
def test_bad_model_arguments(kwargs: dict, name: str) -> None:
    W, v = kwargs.pop("W"), kwargs.pop("v")
    with pytest.raises(InvalidArgument, match=f"(^| ){name} "):
        va.SingleHeadAttention(W, v, **kwargs)


MODEL = va.SingleHeadAttention(I2, [1, 2])

BAD_SEQUENCES = [
    [],
    [[]],
    np.zeros((0, 2)),
    [[1, 2], [3]],
    [[1, 2], 3],
    [[1, 2, 3]],
    [[1]],
    [[[1, 2]]],
    [1, 2],
    "ab",
    None,
    3,
    [[1, None]],
    [[1, "a"]],
    [[1, 1j]],
    [[True, 1]],
    [[math.nan, 1]],
    np.array([[np.inf, 1.0]]),
    [[sympy.pi, 1]],
]


@pytest.mark.parametrize("X", BAD_SEQUENCES, ids=lambda X: repr(X)[:20])
@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_bad_sequences(X: Any, arithmetic: str) -> None:
    with pytest.raises(InvalidArgument, match="X"):
        MODEL.evaluate(X, arithmetic)


def test_ragged_rows_are_named() -> None:
    with pytest.raises(InvalidArgument, match="unequal lengths \\[2, 1\\]"):
        MODEL([[1, 2], [3]])


@pytest.mark.parametrize(
    "Xs",
    [
        np.ones((2, 2)),
        np.ones((1, 0, 2)),
        np.ones((1, 1, 3)),
        [[["a", 1]]],
        np.full((1, 1, 2), np.nan),
    ],
    ids=["2-D", "N=0", "wrong d", "string", "nan"],
)
def test_bad_batches(Xs: Any) -> None:
    with pytest.raises(InvalidArgument, match="Xs"):
        MODEL.evaluate_batch(Xs)


def test_conversions() -> None:
    q = as_rational_sequence([[0.5, Fraction(1, 3)]], 2)
    assert q.entries() == [flint.fmpq(1, 2), flint.fmpq(1, 3)]
    f = as_float_sequence(q, 2)
    assert f.dtype == np.float64 and f.tolist() == [[0.5, 1 / 3]]
    with pytest.raises(InvalidArgument, match="d = 3 columns"):
        as_rational_sequence([[1, 2]], 3)

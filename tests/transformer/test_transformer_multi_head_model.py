"""The multi-head one-layer Transformer (MultiHeadTransformer): one definition, three
arithmetics, the shapes it refuses, and the exact ReLU decision it rests on."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from verified_attn.arithmetic import arb_bounds, exact_equal
from verified_attn.errors import InvalidArgument
from verified_attn.ffn_heads import MultiHeadTransformer, pre_activation_terms
from verified_attn.models import MultiHeadAttention, OneLayerTransformer

FLOAT_RTOL = 1e-12


def _random(seed: int, d: int = 2, H: int = 2, e: int = 2, m: int = 3, affine: bool = False):
    rng = np.random.default_rng(seed)
    heads = []
    for _ in range(H):
        W = [[Fraction(int(x), 2) for x in row] for row in rng.integers(-3, 4, (d, d))]
        V = rng.integers(-2, 3, (d, e)).tolist()
        heads.append((W, V, rng.integers(-2, 3, d).tolist()) if affine else (W, V))
    return MultiHeadTransformer(
        heads,
        rng.integers(-2, 3, (e, m)).tolist(),
        rng.integers(-3, 4, m).tolist(),
        a=[Fraction(int(x), 2) for x in rng.integers(-3, 4, m)],
        b=Fraction(int(rng.integers(-5, 6)), 3),
    )


def _q(x: Fraction) -> sympy.Rational:
    return sympy.Rational(x.numerator, x.denominator)


def _reference(T: MultiHeadTransformer, X: list[list[Fraction]]) -> sympy.Expr:
    """T from its definition in SymPy, head by head (the slow reference)."""
    Xs = sympy.Matrix([[_q(x) for x in row] for row in X])
    last = Xs.row(Xs.rows - 1).T
    h = sympy.zeros(T.e, 1)
    for head in T.heads:
        W, V = head[0], head[1]
        c = head[2] if len(head) == 3 else sympy.zeros(T.d, 1)
        w = [sympy.exp(s) for s in Xs * (W * last + c)]
        pooled = sum((w[i] * Xs.row(i).T for i in range(Xs.rows)), sympy.zeros(T.d, 1)) / sum(w)
        h += V.T * pooled
    z = T.A.T * h + T.a
    relu = [sympy.Integer(0) if exact_equal(zk, 0) or sympy.N(zk, 50) < 0 else zk for zk in z]
    return sum(T.w_o[k] * relu[k] for k in range(T.m)) + T.b


@settings(max_examples=6)
@given(st.integers(0, 10**6), st.integers(1, 3), st.booleans())
def test_every_arithmetic_is_the_reference(seed: int, n: int, affine: bool) -> None:
    T = _random(seed, affine=affine)
    rng = np.random.default_rng(seed + 1)
    X = [[Fraction(int(a), 2) for a in rng.integers(-3, 4, T.d)] for _ in range(n)]
    exact = T.evaluate(X, "exact")
    assert exact_equal(exact, _reference(T, X))
    lo, hi = arb_bounds(T.evaluate(X, "certified"))
    approx = Fraction(str(sympy.N(exact, 100)))
    assert lo - Fraction(1, 10**80) <= approx <= hi + Fraction(1, 10**80)
    assert abs(T(np.array(X, dtype=float)) - float(approx)) <= FLOAT_RTOL * max(1.0, abs(approx))


def test_the_reference_can_fail_when_two_heads_swap_values() -> None:
    T = _random(5)
    (W1, V1), (W2, V2) = T.heads
    swapped = MultiHeadTransformer([(W1, V2), (W2, V1)], T.A, T.w_o, a=T.a, b=T.b)
    X = [[Fraction(1), Fraction(-1, 2)], [Fraction(3, 2), Fraction(1)], [Fraction(-1), 2]]
    assert not exact_equal(swapped.evaluate(X, "exact"), _reference(T, X))
    assert exact_equal(T.evaluate(X, "exact"), _reference(T, X))


def test_one_head_is_the_single_head_transformer() -> None:
    rng = np.random.default_rng(3)
    W, V = rng.integers(-2, 3, (2, 2)).tolist(), rng.integers(-2, 3, (2, 3)).tolist()
    A, w, a = rng.integers(-2, 3, (3, 3)).tolist(), [1, -2, 3], [1, 0, -1]
    single = OneLayerTransformer(W, V, A, w, a=a, b=2)
    multi = OneLayerTransformer.from_heads([(W, V)], A, w, a=a, b=2)
    assert isinstance(multi, MultiHeadTransformer)
    for n in (1, 2, 4):
        X = [[Fraction(int(x), 4) for x in rng.integers(-8, 9, 2)] for _ in range(n)]
        assert exact_equal(multi.evaluate(X, "exact"), single.evaluate(X, "exact"))


def test_heads_sharing_w_add_their_values_exactly() -> None:
    """Two heads with one W are one head with V_1 + V_2: == on the expressions."""
    W = [[1, -1], [2, 0]]
    split = MultiHeadTransformer(
        [(W, [[1, 0], [2, 1]]), (W, [[0, 1], [-1, 1]])], [[1, 2], [1, -1]], [1, 1], a=[1, -1]
    )
    merged = MultiHeadTransformer([(W, [[1, 1], [1, 2]])], [[1, 2], [1, -1]], [1, 1], a=[1, -1])
    X = [[Fraction(1, 2), 1], [-1, Fraction(3, 4)], [2, -1]]
    assert split.evaluate(X, "exact") == merged.evaluate(X, "exact")
    assert split.ffn().value([Fraction(1), Fraction(2)]) == merged.ffn().value([1, 2])


def test_a_multi_head_attention_is_the_attention_part() -> None:
    """e = 1, V_h = v_h; its output bias beta enters every neuron through A."""
    mha = MultiHeadAttention(
        [([[1, 0], [0, 2]], [1, -1], [1, 0]), ([[0, 1], [1, 0]], [2, 1])], beta=Fraction(1, 2)
    )
    T = OneLayerTransformer.from_heads(mha, [[1, -2]], [3, 1], a=[0, 1], b=-1)
    X = [[1, 2], [Fraction(-1, 2), 1], [0, 1]]
    y = mha.evaluate(X, "exact")
    relu = [max(sympy.N(z, 50), 0) for z in (y, -2 * y + 1)]
    assert abs(sympy.N(T.evaluate(X, "exact"), 50) - (3 * relu[0] + relu[1] - 1)) < 1e-40
    assert T.affine and T.e == 1 and T.biased


def test_the_model_parameters_and_length_one_function() -> None:
    T = _random(1, d=2, H=3, e=2, m=2, affine=True)
    assert T.parameter_count == 3 * (4 + 4 + 2) + 2 * 2 + 2 + 3
    assert T.model_class == "one-layer-transformer-multi-head"
    g = T.ffn()
    for x in ([Fraction(1), Fraction(-2)], [Fraction(3, 2), Fraction(1, 3)]):
        assert T.evaluate([x], "exact") == sympy.Rational(g.value(x))


@pytest.mark.parametrize(
    ("heads", "A", "message"),
    [
        ([], [[1]], "non-empty list"),
        ("W", [[1]], "non-empty list"),
        ([([[1]],)], [[1]], r"heads\[0\] must be a pair"),
        ([([[1]], [[1]]), ([[1, 0], [0, 1]], [[1], [1]])], [[1]], r"heads\[1\]: W must"),
        ([([[1, 0]], [[1]])], [[1]], "must be square"),
        ([([[1]], [[1]]), ([[1]], [[1, 2]])], [[1]], r"heads\[1\]: V must have shape"),
        ([([[1]], [[1]], [1, 2])], [[1]], r"heads\[0\]: c must have length 1"),
        ([([[1]], [[1, 2]])], [[1]], "A must have shape"),
        ([([[1]], [[float("nan")]])], [[1]], "entry of V"),
    ],
)
def test_bad_shapes_get_our_errors(heads, A, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument, match=message):
        MultiHeadTransformer(heads, A, [1])


def test_bad_sequences_and_ffn_shapes_get_our_errors() -> None:
    T = _random(0)
    with pytest.raises(InvalidArgument):
        T.evaluate([[1, 2, 3]], "exact")
    with pytest.raises(InvalidArgument):
        T.evaluate_batch(np.zeros((1, 0, 2)))
    with pytest.raises(InvalidArgument, match="w_o must have length"):
        MultiHeadTransformer([([[1]], [[1]])], [[1, 2]], [1])


def test_pre_activation_terms_are_the_product_of_the_denominators() -> None:
    """sum_S c_S e^S = (sum_h N_h / Z_h + a) prod_h Z_h, checked in SymPy; dropping the
    token counts M_S (a wrong variant) breaks it."""
    q = flint.fmpq
    g1 = ([q(0), q(-1), q(0)], flint.fmpq_mat(3, 1, [1, -2, 3]))
    g2 = ([q(-1, 2), q(0)], flint.fmpq_mat(2, 1, [2, 5]))
    a = [q(-3)]
    keys, coeffs = pre_activation_terms([g1, g2], a)
    e = [sympy.exp(sympy.Rational(int(s.p), int(s.q))) for s in keys]
    lhs = sum(ei * sympy.Rational(int(c.p), int(c.q)) for ei, c in zip(e, coeffs[0], strict=True))
    Z1 = 2 + sympy.exp(-1)
    Z2 = sympy.exp(sympy.Rational(-1, 2)) + 1
    N1 = 1 - 2 * sympy.exp(-1) + 3
    N2 = 2 * sympy.exp(sympy.Rational(-1, 2)) + 5
    rhs = (N1 / Z1 + N2 / Z2 - 3) * Z1 * Z2
    assert sympy.simplify(lhs - rhs) == 0
    _, wrong = pre_activation_terms([g1, g2], [q(0)])  # a_k M_S left out
    lhs_wrong = sum(
        ei * sympy.Rational(int(c.p), int(c.q)) for ei, c in zip(e, wrong[0], strict=True)
    )
    assert sympy.simplify(lhs_wrong - rhs) != 0


def test_exact_equality_refutes_different_long_answers_by_balls() -> None:
    """Two three-head models at length 16: exact_equal says no from disjoint 128-bit
    balls (the symbolic cancel of such sums of exponentials does not finish); equal
    answers still compare equal, and a NaN ball proves nothing."""
    from verified_attn.arithmetic import _balls_apart

    T, U = _random(7, H=3), _random(8, H=3)
    rng = np.random.default_rng(9)
    X = [[Fraction(int(a), 4) for a in rng.integers(-8, 9, 2)] for _ in range(16)]
    y, z = T.evaluate(X, "exact"), U.evaluate(X, "exact")
    assert _balls_apart(y, z) and not exact_equal(y, z)
    assert exact_equal(y, T.evaluate(X, "exact")) and not _balls_apart(y, y)
    assert not _balls_apart(sympy.Integer(1) / (sympy.exp(sympy.Rational(0)) - 1), 0)

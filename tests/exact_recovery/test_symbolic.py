"""Theorem 4.1's symbolic derivations: each holds, and each deliberately wrong variant fails."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from verified_attn.errors import InvalidArgument
from verified_attn.exact_recovery import information, symbolic_base
from verified_attn.exact_recovery import symbolic as S

# ---------------------------------------------------------------------------------------
# The zero test and the ball evaluator the checks rely on.
# ---------------------------------------------------------------------------------------


def test_is_zero_decides_exp_identities() -> None:
    x, y, z = sympy.symbols("x y z", real=True)
    assert S.is_zero(sympy.exp(x * (y + z)) - sympy.exp(x * y) * sympy.exp(x * z))
    assert S.is_zero(sympy.exp(x) / (sympy.exp(x) + sympy.exp(y)) - 1 / (1 + sympy.exp(y - x)))
    # Wrong variants: a sign flipped in an exponent, a missing factor.
    assert not S.is_zero(sympy.exp(x) / (sympy.exp(x) + sympy.exp(y)) - 1 / (1 + sympy.exp(x - y)))
    assert not S.is_zero(sympy.exp(x * (y + z)) - sympy.exp(x * y))


def test_arb_value_encloses_closed_forms() -> None:
    import flint
    import mpmath

    e = sympy.exp(sympy.Rational(-7, 3)) * sympy.Rational(5, 2) / (1 + sympy.exp(1)) ** 2
    with mpmath.workdps(60):
        truth = mpmath.exp(mpmath.mpf(-7) / 3) * mpmath.mpf(5) / 2 / (1 + mpmath.e) ** 2
        old = flint.ctx.prec
        flint.ctx.prec = 128
        try:
            ball = S.arb_value(e)
            assert ball.contains(flint.arb(mpmath.nstr(truth, 50)))
            assert ball.rad() < flint.arb(10) ** -30
            # A different number is not in the ball.
            assert not ball.contains(
                flint.arb(mpmath.nstr(truth * (1 + mpmath.mpf(10) ** -20), 50))
            )
        finally:
            flint.ctx.prec = old


def test_arb_value_rejects_non_closed_forms() -> None:
    with pytest.raises(InvalidArgument, match="cannot evaluate"):
        S.arb_value(sympy.Symbol("x"))


# ---------------------------------------------------------------------------------------
# Step 1: length one.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("affine", [False, True])
def test_length_one_holds(d: int, affine: bool) -> None:
    check = S.length_one_identity(d, affine)
    assert check.holds, check.detail
    assert check.name == "thm-4.1/length-one"


def test_length_one_without_beta_fails_for_affine_model() -> None:
    def no_beta(ns: dict) -> sympy.Expr:
        return (ns["x"].T * ns["v"])[0]

    assert S.length_one_identity(2, affine=False, claimed=no_beta).holds  # beta = 0 there
    assert not S.length_one_identity(2, affine=True, claimed=no_beta).holds


def test_length_one_wrong_readout_fails() -> None:
    def twice(ns: dict) -> sympy.Expr:
        return 2 * (ns["x"].T * ns["v"])[0]

    assert not S.length_one_identity(2, claimed=twice).holds


# ---------------------------------------------------------------------------------------
# Step 2: sigmoid reduction.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("affine", [False, True])
def test_sigmoid_reduction_holds(d: int, affine: bool) -> None:
    check = S.sigmoid_reduction(d, affine)
    assert check.holds, check.detail


@pytest.mark.parametrize("affine", [False, True])
def test_sigmoid_reduction_with_a_and_b_swapped_fails(affine: bool) -> None:
    def swapped(ns: dict) -> sympy.Expr:
        return S.sigmoid_formula({**ns, "a": ns["b"], "b": ns["a"]})

    assert not S.sigmoid_reduction(2, affine, claimed=swapped).holds


def test_sigmoid_reduction_with_transposed_W_fails() -> None:
    # s_1 - s_2 = (a - b)^T W^T b is a different bilinear form.
    def transposed(ns: dict) -> sympy.Expr:
        return S.sigmoid_formula({**ns, "W": ns["W"].T})

    assert not S.sigmoid_reduction(2, claimed=transposed).holds


def test_sigmoid_reduction_without_beta_fails() -> None:
    def no_beta(ns: dict) -> sympy.Expr:
        return S.sigmoid_formula(ns) - ns["beta"]

    assert not S.sigmoid_reduction(2, affine=True, claimed=no_beta).holds


# ---------------------------------------------------------------------------------------
# Step 3: logit identity.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("affine", [False, True])
def test_logit_identity_holds(d: int, affine: bool) -> None:
    check = S.logit_identity(d, affine)
    assert check.holds, check.detail


def test_logit_identity_is_bilinear_in_W() -> None:
    check = S.logit_identity(2, affine=True)
    L = check.data["logit"]
    W = sympy.Matrix(2, 2, lambda i, j: sympy.Symbol(f"W{i}{j}", real=True))
    u = [sympy.Symbol(f"u{i}", real=True) for i in range(2)]
    b = [sympy.Symbol(f"b{i}", real=True) for i in range(2)]
    c = [sympy.Symbol(f"c{i}", real=True) for i in range(2)]
    t = sympy.Symbol("t", positive=True)
    expected = t * sum(u[i] * (W[i, 0] * b[0] + W[i, 1] * b[1] + c[i]) for i in range(2))
    assert sympy.expand(L - expected) == 0


def test_logit_identity_without_beta_fails() -> None:
    def no_beta(ns: dict, f: sympy.Expr) -> sympy.Expr:
        return (f - (ns["b"].T * ns["v"])[0]) / (ns["t"] * (ns["u"].T * ns["v"])[0])

    assert not S.logit_identity(2, affine=True, decode=no_beta).holds


def test_logit_identity_with_wrong_scale_fails() -> None:
    def no_t(ns: dict, f: sympy.Expr) -> sympy.Expr:
        return (f - (ns["b"].T * ns["v"])[0] - ns["beta"]) / (ns["u"].T * ns["v"])[0]

    assert not S.logit_identity(2, decode=no_t).holds


# ---------------------------------------------------------------------------------------
# Step 4: the linear system.
# ---------------------------------------------------------------------------------------


def test_linear_system_symbolic_U() -> None:
    check = S.linear_system(2)
    assert check.holds, check.detail
    U = check.data["U"]
    assert all(not x.is_number for x in U)  # really symbolic
    assert check.data["rank"] == 4


@pytest.mark.parametrize("d", [3, 5])
def test_linear_system_random_rational_U(d: int) -> None:
    check = S.linear_system(d, seed=d)
    assert check.holds, check.detail
    assert check.data["rank"] == d * d
    assert check.data["det_U"] != 0


def test_linear_system_singular_U_fails() -> None:
    check = S.linear_system(3, design=[[1, 2, 3], [0, 1, 1], [1, 3, 4]])
    assert not check.holds
    assert check.data["rank"] == 6  # d * rank(U) = 3 * 2
    assert "singular" in check.detail


def test_linear_system_blind_probe_fails_and_is_W_free() -> None:
    check = S.linear_system(2, design=[[1, 0], [1, 1]], v=[1, -1])
    assert not check.holds
    assert check.data["zero_columns"] == [0]
    assert check.data["W_free_columns"] == [0]
    assert "u_k^T v = 0" in check.detail


def _det(M: list[list[Fraction]]) -> Fraction:
    return M[0][0] * M[1][1] - M[0][1] * M[1][0]


@settings(max_examples=10)
@given(
    st.lists(st.integers(-2, 2), min_size=4, max_size=4),
    st.lists(st.integers(-2, 2), min_size=2, max_size=2),
)
def test_linear_system_holds_iff_invertible_and_sighted(entries: list[int], v: list[int]) -> None:
    U = [[Fraction(entries[0]), Fraction(entries[1])], [Fraction(entries[2]), Fraction(entries[3])]]
    uv = [U[0][k] * v[0] + U[1][k] * v[1] for k in range(2)]
    expected = _det(U) != 0 and all(x != 0 for x in uv)
    assert S.linear_system(2, design=U, v=v).holds == expected


def test_linear_system_rejects_bad_design_shape() -> None:
    with pytest.raises(InvalidArgument, match="design"):
        S.linear_system(2, design=[[1, 0, 0], [0, 1, 0]])
    with pytest.raises(InvalidArgument, match="d must be"):
        S.linear_system(0)


# ---------------------------------------------------------------------------------------
# Step 5: affine variant.
# ---------------------------------------------------------------------------------------


def test_affine_variant_symbolic_and_rational() -> None:
    symbolic_U = S.affine_variant(2)
    assert symbolic_U.holds, symbolic_U.detail
    assert symbolic_U.data["measurements"] == 9
    rational_U = S.affine_variant(3, seed=1)
    assert rational_U.holds, rational_U.detail
    assert rational_U.data["rank"] == 16


def test_affine_variant_singular_U_fails() -> None:
    check = S.affine_variant(2, design=[[1, 1], [1, 1]])
    assert not check.holds
    # beta, v (3 numbers) and one independent combination each of c and both columns of W.
    assert check.data["rank"] == 6


# ---------------------------------------------------------------------------------------
# Step 6: parameter count and the information limit.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [False, True])
def test_parameter_count_holds(affine: bool) -> None:
    check = S.parameter_count(3, affine)
    assert check.holds, check.detail
    n = 9 + (7 if affine else 3)
    assert check.data["parameters"] == check.data["count"] == check.data["queries"] == n


def test_parameter_count_one_query_fewer_fails() -> None:
    qs = S.probe_queries(2, True)
    check = S.parameter_count(2, True, queries=qs[:-1])
    assert not check.holds
    assert check.data["queries"] == 8


def test_parameter_count_repeated_query_fails() -> None:
    # Right number of queries, but one is asked twice: the Jacobian is singular.
    qs = S.probe_queries(2, False)
    check = S.parameter_count(2, queries=[*qs[:-1], qs[-2]])
    assert not check.holds


def test_parameter_count_blind_design_fails() -> None:
    point = {"W": [[1, 2], [-3, 1]], "v": [1, -1]}
    assert S.parameter_count(2, point=point).holds
    check = S.parameter_count(2, design=[[1, 0], [1, 1]], point=point)  # u_0^T v = 0
    assert not check.holds


def test_parameter_count_wrong_learner_count_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(information, "query_bound", lambda d, affine=False: d * d + d - 1)
    check = S.parameter_count(2)
    assert not check.holds
    assert "differs from the parameter count" in check.detail


@settings(max_examples=5)
@given(st.integers(0, 10_000))
def test_parameter_count_full_rank_at_random_points(seed: int) -> None:
    assert S.parameter_count(2, seed=seed).holds


def test_parameter_count_validates_point() -> None:
    with pytest.raises(InvalidArgument, match="missing"):
        S.parameter_count(2, affine=True, point={"W": [[1, 0], [0, 1]], "v": [1, 1]})


# ---------------------------------------------------------------------------------------
# A wrong model definition breaks the derivations that depend on it.
# ---------------------------------------------------------------------------------------


def test_transposed_model_breaks_the_bilinear_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    from verified_attn.models import attention_output

    def transposed(rows, W, v, c=None, beta=0, *, exp=sympy.exp):  # type: ignore[no-untyped-def]
        Wt = [[W[j][i] for j in range(len(W))] for i in range(len(W))]
        return attention_output(rows, Wt, v, c, beta, exp=exp)

    monkeypatch.setattr(symbolic_base, "attention_output", transposed)
    # The model-derived pieces are cached; derive them afresh from the wrong model, and
    # leave no wrong-model entry behind for other tests.
    S._measurement.cache_clear()
    S._gradient_identity.cache_clear()
    try:
        # Softmax over one token is still 1: the length-one step does not see W at all.
        assert S.length_one_identity(2).holds
        assert not S.sigmoid_reduction(2).holds
        assert not S.logit_identity(2).holds
        assert not S.linear_system(2).holds
        assert not S.affine_variant(2).holds
    finally:
        S._measurement.cache_clear()
        S._gradient_identity.cache_clear()


def test_all_checks_hold() -> None:
    checks = S.all_checks(2)
    assert len(checks) == 12
    assert all(c.holds for c in checks), [c.detail for c in checks if not c.holds]

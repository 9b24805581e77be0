"""The three arithmetics and rational reconstruction."""

from __future__ import annotations

import math
from fractions import Fraction

import flint
import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import assume, given
from hypothesis import strategies as st

from verified_attn.arithmetic import (
    CertifiedArithmetic,
    ExactArithmetic,
    FloatArithmetic,
    OutsideUnitInterval,
    arb_bounds,
    fraction_from_arb,
    get_arithmetic,
    reconstruct_rational,
    simplest_rational_between,
    to_fraction,
)
from verified_attn.errors import InvalidArgument, PrecisionExhausted

fractions = st.fractions(min_value=-1000, max_value=1000, max_denominator=10**6)


def _brute_simplest(lo: Fraction, hi: Fraction) -> Fraction:
    """The smallest-denominator rational in [lo, hi] by search (smallest |p| on ties)."""
    q = 1
    while True:
        p_lo, p_hi = math.ceil(lo * q), math.floor(hi * q)
        if p_lo <= p_hi:
            candidates = [p for p in range(p_lo, p_hi + 1)]
            return Fraction(min(candidates, key=abs), q)
        q += 1


# ---------------------------------------------------------------------------------------
# simplest_rational_between
# ---------------------------------------------------------------------------------------


@given(
    a=st.fractions(min_value=-50, max_value=50, max_denominator=300),
    w=st.fractions(0, 1, max_denominator=300),
)
def test_simplest_rational_matches_brute_force(a: Fraction, w: Fraction) -> None:
    lo, hi = a, a + w / 7
    q = simplest_rational_between(lo, hi)
    assert lo <= q <= hi
    assert q == _brute_simplest(lo, hi)


@given(a=fractions, b=fractions)
def test_simplest_rational_is_inside_and_minimal(a: Fraction, b: Fraction) -> None:
    lo, hi = min(a, b), max(a, b)
    q = simplest_rational_between(lo, hi)
    assert lo <= q <= hi
    # No rational with a smaller denominator lies in [lo, hi].
    for den in range(1, min(q.denominator, 200)):
        assert math.ceil(lo * den) > math.floor(hi * den)


def test_simplest_rational_examples() -> None:
    assert simplest_rational_between(Fraction(332, 1000), Fraction(334, 1000)) == Fraction(1, 3)
    assert simplest_rational_between(Fraction(-7, 2), Fraction(-3)) == -3
    assert simplest_rational_between(Fraction(-1), Fraction(1)) == 0
    assert simplest_rational_between(Fraction(5, 2), Fraction(5, 2)) == Fraction(5, 2)
    assert simplest_rational_between(Fraction(3, 10), Fraction(4, 10)) == Fraction(1, 3)


def test_simplest_rational_rejects_an_empty_interval() -> None:
    with pytest.raises(InvalidArgument, match="empty interval"):
        simplest_rational_between(Fraction(1), Fraction(0))


# ---------------------------------------------------------------------------------------
# reconstruct_rational: unique under width < 1/D^2, None otherwise
# ---------------------------------------------------------------------------------------


@given(
    p=st.integers(-(10**6), 10**6),
    q=st.integers(1, 1000),
    D=st.integers(1, 1000),
    left=st.fractions(0, 1, max_denominator=1000),
)
def test_reconstruct_is_unique_under_the_width_bound(
    p: int, q: int, D: int, left: Fraction
) -> None:
    truth = Fraction(p, q)
    assume(truth.denominator <= D)
    width = Fraction(1, D * D) * Fraction(999, 1000)  # strictly below 1/D^2
    lo = truth - left * width
    hi = lo + width
    assert reconstruct_rational(lo, hi, D) == truth


@given(D=st.integers(2, 10**4), mid=st.fractions(-10, 10, max_denominator=10**5))
def test_reconstruct_refuses_intervals_of_width_1_over_D2(D: int, mid: Fraction) -> None:
    w = Fraction(1, D * D)
    assert reconstruct_rational(mid - w / 2, mid + w / 2, D) is None
    assert reconstruct_rational(mid - w, mid + w, D) is None


@pytest.mark.parametrize("D", [2, 3, 10, 97, 1000])
def test_the_width_bound_is_needed(D: int) -> None:
    """Wrong variant: accepting intervals of width 1/(D(D-1)) would not be unique.

    1/D and 1/(D-1) both have denominator <= D and differ by exactly 1/(D(D-1)), so a
    closed interval that wide can hold two candidates; 1/D^2 is below it for every D.
    """
    lo, hi = Fraction(1, D), Fraction(1, D - 1)
    assert hi - lo == Fraction(1, D * (D - 1)) > Fraction(1, D * D)
    assert reconstruct_rational(lo, hi, D) is None  # refuses: two candidates
    assert simplest_rational_between(lo, hi).denominator <= D
    assert reconstruct_rational(lo, lo + Fraction(1, D * D) / 2, D) == lo


def test_reconstruct_returns_none_when_the_denominator_is_too_big() -> None:
    third = Fraction(1, 3)
    tiny = Fraction(1, 10**30)
    assert reconstruct_rational(third - tiny, third + tiny, 2) is None
    assert reconstruct_rational(third - tiny, third + tiny, 3) == third


def test_reconstruct_rejects_a_bad_bound() -> None:
    with pytest.raises(InvalidArgument, match="max_denominator"):
        reconstruct_rational(Fraction(0), Fraction(1), 0)


# ---------------------------------------------------------------------------------------
# to_fraction
# ---------------------------------------------------------------------------------------


@given(x=st.floats(allow_nan=False, allow_infinity=False))
def test_floats_convert_exactly(x: float) -> None:
    q = to_fraction(x)
    assert float(q) == x and q == Fraction(x)


def test_high_precision_sympy_floats_convert_exactly() -> None:
    """Bug fixed: a SymPy Float above 53 bits was converted via its decimal string."""
    x = sympy.Float("0.1", 100)
    q = to_fraction(x)
    assert q != Fraction(1, 10)  # 0.1 is not a binary rational
    with mpmath.workprec(400):
        assert mpmath.mpf(q.numerator) / q.denominator == x._to_mpmath(400)
    assert q.denominator & (q.denominator - 1) == 0  # a power of two: dyadic
    assert to_fraction(sympy.Float(0.1)) == Fraction(0.1)
    assert to_fraction(sympy.Float("1e-400", 30)) > 0


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (3, Fraction(3)),
        (np.int64(-4), Fraction(-4)),
        (np.float32(0.5), Fraction(1, 2)),
        (Fraction(2, 3), Fraction(2, 3)),
        (sympy.Rational(-5, 7), Fraction(-5, 7)),
        (sympy.Integer(9), Fraction(9)),
        (flint.fmpq(7, 9), Fraction(7, 9)),
        (flint.fmpz(-11), Fraction(-11)),
    ],
)
def test_to_fraction_accepts_real_numbers(x: object, expected: Fraction) -> None:
    assert to_fraction(x) == expected


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (True, "bool"),
        (np.bool_(False), "bool"),
        (math.nan, "finite"),
        (-math.inf, "finite"),
        (np.float64("inf"), "finite"),
        ("1/3", "real number"),
        (None, "real number"),
        (1j, "real number"),
        ([1], "real number"),
        (sympy.sqrt(2), "rational"),
        (sympy.oo, "rational"),
        (sympy.nan, "rational"),
        (sympy.Symbol("x"), "rational"),
    ],
)
def test_to_fraction_rejects_non_rationals(x: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        to_fraction(x, name="q")
    with pytest.raises(InvalidArgument, match=r"^q "):
        to_fraction(x, name="q")


# ---------------------------------------------------------------------------------------
# The three arithmetics: logit, sign, agree.
# ---------------------------------------------------------------------------------------


@given(s=st.one_of(st.fractions(-40, 40, max_denominator=50), st.integers(-(10**5), 10**5)))
def test_exact_logit_undoes_the_sigmoid(s: Fraction) -> None:
    s = Fraction(s)
    a = ExactArithmetic()
    r = sympy.Rational(s.numerator, s.denominator)
    assert a.logit(sympy.exp(r) / (1 + sympy.exp(r))) == r
    assert a.logit(1 / (1 + sympy.exp(-r))) == r
    assert a.logit(sympy.exp(-r) / (sympy.exp(-r) + sympy.exp(-2 * r))) == r


def test_exact_logit_of_a_non_sigmoid_is_irrational_and_fast() -> None:
    """Bug fixed: sympy.simplify on a non-sigmoid y ran for minutes (a two-head oracle)."""
    a = ExactArithmetic()
    assert a.logit(sympy.Rational(1, 3)) == -sympy.log(2)
    e = sympy.exp
    y = (e(1) / (1 + e(1)) + e(sympy.Rational(1, 2)) / (1 + e(sympy.Rational(1, 2)))) / 2
    out = a.logit(y)
    assert not out.is_Rational
    assert abs(float(out) - math.log(float(y) / (1 - float(y)))) < 1e-12


@pytest.mark.parametrize("y", [0, 1, -1, 2, sympy.Rational(3, 2)])
def test_exact_logit_outside_the_unit_interval(y: object) -> None:
    with pytest.raises(OutsideUnitInterval) as info:
        ExactArithmetic().logit(sympy.sympify(y))
    assert info.value.undecided is False


@given(s=st.fractions(-30, 30, max_denominator=50), prec=st.sampled_from([64, 128, 256]))
def test_certified_logit_contains_the_truth(s: Fraction, prec: int) -> None:
    a = CertifiedArithmetic(prec)
    with a.context():
        t = flint.arb(flint.fmpq(s.numerator, s.denominator))
        y = t.exp() / (1 + t.exp())
        out = a.logit(y)
    lo, hi = arb_bounds(out)
    assert lo <= s <= hi


def test_certified_logit_undecided_and_outside() -> None:
    a = CertifiedArithmetic(64)
    with a.context():
        with pytest.raises(OutsideUnitInterval) as info:
            a.logit(flint.arb(1, 0.5))  # [0.5, 1.5]: straddles 1
        assert info.value.undecided is True
        with pytest.raises(OutsideUnitInterval) as info:
            a.logit(flint.arb(2))
        assert info.value.undecided is False
        assert a.sign(flint.arb(0, 1)) is None
        assert a.sign(flint.arb(0)) == 0
        assert a.sign(flint.arb(-1)) == -1


def test_float_logit_and_agree() -> None:
    a = FloatArithmetic()
    assert a.logit(0.5) == 0.0
    assert abs(a.logit(1 / (1 + math.exp(-3))) - 3) < 1e-14
    with pytest.raises(OutsideUnitInterval):
        a.logit(1.0)
    assert a.agree(1.0, 1.0 + 1e-9)
    assert not a.agree(1.0, 1.0 + 1e-5)
    assert a.agree(0.0, 1e-7, scale=1.0) and not a.agree(0.0, 1e-5, scale=1.0)


def test_arb_bounds_of_a_non_finite_ball() -> None:
    with pytest.raises(PrecisionExhausted):
        arb_bounds(flint.arb("inf"))


@given(q=st.fractions(-100, 100, max_denominator=2**20))
def test_fraction_from_arb_is_exact_on_dyadics(q: Fraction) -> None:
    d = Fraction(math.floor(q * 2**30), 2**30)  # a dyadic rational
    assert fraction_from_arb(flint.arb(flint.fmpq(d.numerator, d.denominator))) == d


# ---------------------------------------------------------------------------------------
# Names and precision.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fuzzy", "", None, 3, "Exact"])
def test_unknown_arithmetic(name: object) -> None:
    with pytest.raises(InvalidArgument, match="arithmetic must be one of"):
        get_arithmetic(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", [0, 31, 10**7, 64.0, "256", True, None])
def test_bad_precision(precision: object) -> None:
    if precision is None:  # None means the default
        assert get_arithmetic("certified", None).precision == 256
        return
    with pytest.raises(InvalidArgument, match="precision"):
        get_arithmetic("certified", precision)  # type: ignore[arg-type]


def test_precision_is_a_context() -> None:
    before = flint.ctx.prec
    a = CertifiedArithmetic(1000)
    with a.context():
        assert flint.ctx.prec == 1000
    assert flint.ctx.prec == before
    with pytest.raises(ZeroDivisionError), a.context():
        raise ZeroDivisionError
    assert flint.ctx.prec == before


def test_apply_is_the_same_in_every_arithmetic() -> None:
    m = flint.fmpq_mat(2, 2, [1, flint.fmpq(1, 2), 0, -3])
    cols = [[Fraction(1, 3), 2], [5, Fraction(-1, 7)]]
    exact = ExactArithmetic().apply(m, sympy.Matrix(cols))
    truth = sympy.Matrix([[1, sympy.Rational(1, 2)], [0, -3]]) * sympy.Matrix(cols)
    assert exact == truth
    cert = CertifiedArithmetic(128)
    with cert.context():
        balls = cert.apply(
            m, flint.arb_mat([[flint.arb(flint.fmpq(1, 3)), 2], [5, flint.arb(flint.fmpq(-1, 7))]])
        )
    for i in range(2):
        for j in range(2):
            lo, hi = arb_bounds(balls[i, j])
            t = truth[i, j]
            assert lo <= Fraction(int(t.p), int(t.q)) <= hi
    flt = FloatArithmetic().apply(m, np.array([[1 / 3, 2], [5, -1 / 7]]))
    assert np.allclose(flt, np.array(truth.tolist(), dtype=float), rtol=1e-15, atol=0)

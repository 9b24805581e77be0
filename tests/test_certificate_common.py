"""The checks certificate kinds share (certificates/common_checks.py and elimination.py):
each accepts what is right and refuses a deliberately wrong variant."""

from __future__ import annotations

from fractions import Fraction

import flint
import pytest
import sympy

from verified_attn.arithmetic import get_arithmetic
from verified_attn.certificates.common_checks import (
    check_phases,
    check_seed,
    claimed_parameters,
    compare_parameters,
    matches_exact,
    rescales,
    result_exact,
)
from verified_attn.certificates.elimination import MAX_REDUCED, Elimination
from verified_attn.errors import CertificateError

EXACT = get_arithmetic("exact")
CERTIFIED = get_arithmetic("certified", 64)
FLOAT = get_arithmetic("float")


def test_rescales_counts_powers_of_sixteen_and_refuses_the_rest() -> None:
    assert [rescales(Fraction(1, 16**n), "t") for n in range(4)] == [0, 1, 2, 3]
    for t in (Fraction(1, 2), Fraction(2), Fraction(0), Fraction(-1, 16), Fraction(3, 16)):
        with pytest.raises(CertificateError, match="is not 16\\^-n"):
            rescales(t, "t")
    with pytest.raises(CertificateError, match="n <= 2"):
        rescales(Fraction(1, 16**3), "t", most=2)


def test_result_exact_follows_the_arithmetic() -> None:
    assert result_exact({"result": {"exact": False}}, CERTIFIED) is False
    assert result_exact({"result": {"exact": True}}, CERTIFIED) is True
    with pytest.raises(CertificateError, match="false in exact arithmetic"):
        result_exact({"result": {"exact": False}}, EXACT)
    with pytest.raises(CertificateError, match="must be true or false"):
        result_exact({"result": {"exact": 1}}, EXACT)


def test_phases_and_seed() -> None:
    check_phases({"v": 1, "W": 4, "verify": 8}, {"v", "W"})
    with pytest.raises(CertificateError, match="unknown phases \\['W'\\]"):
        check_phases({"v": 1, "W": 4}, {"v"})
    check_seed({"verification": {"seed": 9, "count": 0}}, 3, "why", when_verified=True)
    with pytest.raises(CertificateError, match="seed is 3"):
        check_seed({"verification": {"seed": 9, "count": 1}}, 3, "why", when_verified=True)


def test_claimed_parameters_reads_by_shape_and_wants_rationals_when_exact() -> None:
    data = {
        "result": {
            "parameters": {
                "W": [[{"rational": "1/2"}]],
                "v": [{"rational": "3/1"}],
                "beta": {"rational": "-1/1"},
            }
        }
    }
    shapes: dict[str, tuple[int, ...]] = {"W": (1, 1), "v": (1,), "beta": ()}
    got = claimed_parameters(data, EXACT, shapes, True)
    assert got == {
        "W": [("W[0][0]", Fraction(1, 2))],
        "v": [("v[0]", Fraction(3))],
        "beta": [("beta", Fraction(-1))],
    }
    data["result"]["parameters"]["v"] = [{"float": 3.0}]
    with pytest.raises(CertificateError, match="result v\\[0\\]: an exact result stores rationals"):
        claimed_parameters(data, EXACT, shapes, True)
    with pytest.raises(CertificateError, match=r"result\.parameters\.W has 1 entries, expected 2"):
        claimed_parameters(data, EXACT, {"W": (2, 2), "v": (1,), "beta": ()}, True)


def test_compare_parameters_refuses_each_wrong_variant() -> None:
    half = {"v": [("v[0]", Fraction(1, 2))]}
    with CERTIFIED.context():
        ball = flint.arb(0.5, 1e-6)
        assert "the only rational there" in compare_parameters(
            CERTIFIED, True, half, {"v": [ball]}, rtol=0
        )
        with pytest.raises(CertificateError, match="lies outside the ball"):
            compare_parameters(CERTIFIED, True, half, {"v": [flint.arb(0.75, 1e-6)]}, rtol=0)
        near = {"v": [("v[0]", Fraction(500001, 1000000))]}  # inside, but not the simplest
        with pytest.raises(CertificateError, match="not the only rational of its denominator"):
            compare_parameters(CERTIFIED, True, near, {"v": [ball]}, rtol=0)
        claimed_ball = {"v": [("v[0]", flint.arb(0.5, 1e-9))]}
        with pytest.raises(CertificateError, match="does not contain the ball"):
            compare_parameters(CERTIFIED, False, claimed_ball, {"v": [ball]}, rtol=0)
    floats = {"W": [("W[0][0]", 1.0)]}
    assert "agree" in compare_parameters(FLOAT, False, floats, {"W": [1.0 + 1e-13]}, rtol=1e-12)
    with pytest.raises(CertificateError, match="more than 1e-12 relative"):
        compare_parameters(FLOAT, False, floats, {"W": [1.0 + 1e-11]}, rtol=1e-12)
    with pytest.raises(CertificateError, match="claimed 1/2, the stored answers give 1/3"):
        compare_parameters(EXACT, True, half, {"v": [sympy.Rational(1, 3)]}, rtol=0)


def test_matches_exact_needs_the_value_and_a_small_denominator() -> None:
    with CERTIFIED.context():
        ball = flint.arb(0.5, 1e-6)
        assert matches_exact(ball, Fraction(1, 2), CERTIFIED, 10)
        assert not matches_exact(ball, Fraction(1, 2), CERTIFIED, 1)  # denominator too large
        assert not matches_exact(ball, Fraction(1, 3), CERTIFIED, 10)


def test_elimination_solves_exactly_and_refuses_singular_or_large_systems() -> None:
    one, two = Fraction(1), Fraction(2)
    r = EXACT.rational
    eqs = [({0: one, 1: two}, r(Fraction(5))), ({0: one, 1: -one}, r(Fraction(-1)))]
    x = Elimination(EXACT, eqs, 2, groups=(0, 2)).solve()
    assert x.known == {0: 1, 1: 2} and x.largest == 2
    singular = [({0: one, 1: two}, r(Fraction(5))), ({0: two, 1: 2 * two}, r(Fraction(10)))]
    with pytest.raises(CertificateError, match="singular"):
        Elimination(EXACT, singular, 2, groups=(0, 2)).solve()
    n = MAX_REDUCED + 1
    dense = [({u: Fraction(1 + (u == e)) for u in range(n)}, r(Fraction(e))) for e in range(n)]
    with pytest.raises(CertificateError, match=f"more than {MAX_REDUCED}"):
        Elimination(EXACT, dense, n, groups=(0, n)).solve()

"""Lossless JSON forms of numbers: Fractions, floats (bit-exact), arb balls, SymPy exprs."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from verified_attn.arithmetic import fraction_from_arb
from verified_attn.errors import CertificateError, InvalidArgument
from verified_attn.serialize import dump_number, dump_rational, load_number, load_rational


def _through_json(x: Any) -> Any:
    return load_number(json.loads(json.dumps(dump_number(x))))


@given(q=st.fractions())
def test_fraction_round_trip(q: Fraction) -> None:
    back = _through_json(q)
    assert isinstance(back, Fraction) and back == q
    assert load_rational(dump_rational(q)) == q


@given(x=st.floats(allow_nan=False, allow_infinity=False))
def test_float_round_trip_is_bit_exact(x: float) -> None:
    back = _through_json(x)
    assert isinstance(back, float)
    assert np.float64(back).tobytes() == np.float64(x).tobytes()  # -0.0 stays -0.0


def test_numpy_float_round_trip() -> None:
    assert _through_json(np.float64(0.1)) == 0.1
    assert _through_json(np.float32(0.1)) == float(np.float32(0.1))


@pytest.mark.parametrize(
    "q", [flint.fmpq(-7, 3), sympy.Rational(5, 11), sympy.Integer(-4), 12, Fraction(0)]
)
def test_other_rationals_load_as_fractions(q: Any) -> None:
    back = _through_json(q)
    assert isinstance(back, Fraction)
    assert back == Fraction(str(q))


@given(
    mid=st.fractions(-1000, 1000, max_denominator=10**9),
    prec=st.sampled_from([53, 128, 256, 1024]),
)
def test_arb_round_trip(mid: Fraction, prec: int) -> None:
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        ball = flint.arb(flint.fmpq(mid.numerator, mid.denominator)).exp()  # a real ball
        back = _through_json(ball)
        assert isinstance(back, flint.arb)
        assert fraction_from_arb(back.mid()) == fraction_from_arb(ball.mid())  # exact
        rad, rad_back = fraction_from_arb(ball.rad()), fraction_from_arb(back.rad())
        # Sound: the loaded ball contains the dumped one; at most one 30-bit ulp wider.
        assert back.contains(ball)
        assert rad <= rad_back <= rad * (1 + Fraction(1, 2**28))
    finally:
        flint.ctx.prec = old


def test_exact_arb_round_trip() -> None:
    ball = flint.arb(flint.fmpq(3, 8))
    back = _through_json(ball)
    assert back.is_exact() and fraction_from_arb(back.mid()) == Fraction(3, 8)


E = sympy.E
R = sympy.Rational


@pytest.mark.parametrize(
    "expr",
    [
        sympy.exp(R(2, 3)),
        (sympy.exp(R(-1, 2)) + 2) / (1 + sympy.exp(R(-1, 2))),
        (-1 + E ** (-2)) / (1 + E ** (-2)),
        R(3, 2) + (sympy.exp(-1) + 2) / (sympy.exp(-1) + 1),
        sympy.log(2),
        E,
        sympy.Float("0.1", 60),
    ],
    ids=str,
)
def test_sympy_round_trip(expr: sympy.Expr) -> None:
    back = _through_json(expr)
    assert isinstance(back, sympy.Basic)
    assert back == expr  # structurally identical
    assert sympy.srepr(back) == sympy.srepr(expr)


def test_sympy_round_trip_check_can_fail() -> None:
    assert _through_json(sympy.exp(R(2, 3))) != sympy.exp(R(2, 5))


@pytest.mark.parametrize(
    "obj",
    [
        5,
        "1/3",
        None,
        {},
        {"float": "0x1p0", "rational": "1/2"},
        {"rational": "1/0"},
        {"rational": "x"},
        {"float": "nonsense"},
        {"arb": ["1/2", "-1/4"]},
        {"arb": ["1/2"]},
        {"complex": "1"},
        {"sympy": "__import__('os')"},
        {"sympy": "Symbol('x').__class__"},
        {"sympy": "open('f')"},
        {"sympy": "Add(1,"},
    ],
    ids=repr,
)
def test_malformed_numbers_are_certificate_errors(obj: Any) -> None:
    with pytest.raises(CertificateError):
        load_number(obj)


@pytest.mark.parametrize("x", [1j, "1", None, [1], math.nan])
def test_unserialisable_numbers(x: Any) -> None:
    if isinstance(x, float):  # NaN serialises (as a float) and comes back as NaN
        assert math.isnan(_through_json(x))
        return
    with pytest.raises(InvalidArgument, match="cannot serialise"):
        dump_number(x)

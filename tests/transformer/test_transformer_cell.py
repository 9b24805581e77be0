"""The room's shared pieces: W's cell design (cell.py) and the learners' answers (common.py)."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
import sympy

from verified_attn.arithmetic import get_arithmetic
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.models import ReluFFN
from verified_attn.transformer.cell import _same_cell, as_biased, cell_design, cell_of
from verified_attn.transformer.common import rational_answer
from verified_attn.transformer.relu_biased import BiasedReluNetwork, canonical_biased_network
from verified_attn.transformer.relu_network import canonical_network


def _ffn(d: int, m: int, seed: int, *, biased: bool) -> ReluFFN:
    rng = np.random.default_rng(seed)
    A = [[Fraction(int(rng.integers(-4, 5)), 2) for _ in range(m)] for _ in range(d)]
    w = [Fraction(int(x), 2) for x in rng.integers(-4, 5, m)]
    if not biased:
        return ReluFFN(A, w)
    return ReluFFN(A, w, a=[Fraction(int(x), 3) for x in rng.integers(-6, 7, m)], b=1)


def _points(d: int, seed: int, count: int = 20) -> list[tuple[Fraction, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(Fraction(int(x), 4) for x in rng.integers(-20, 21, d)) for _ in range(count)]


@pytest.mark.parametrize("seed", range(4))
def test_as_biased_is_the_same_function(seed: int) -> None:
    net = canonical_network(_ffn(3, 4, seed, biased=False))
    same = as_biased(net)
    assert all(same.value(x) == net.value(x) for x in _points(3, seed))
    assert (same.d, same.width) == (net.d, net.width)


@pytest.mark.parametrize(("d", "seed"), [(1, 2), (2, 1), (3, 2), (4, 3)])
def test_the_design_lies_in_one_cell_where_g_is_its_affine_map(d: int, seed: int) -> None:
    net = canonical_biased_network(_ffn(d, 2 * d, seed, biased=True))
    G, beta, base, U, t = cell_design(net, d, seed)
    assert any(G) and all(sum(g * u for g, u in zip(G, uk, strict=True)) != 0 for uk in U)
    for b in base:
        for p in [b, *(tuple(bi + t * ui for bi, ui in zip(b, u, strict=True)) for u in U)]:
            assert cell_of(net, p) == (G, beta)
            assert net.value(p) == sum((g * x for g, x in zip(G, p, strict=True)), beta)


def test_a_point_across_a_hyperplane_is_not_in_the_cell() -> None:
    one = Fraction(1)
    net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))  # kink at x = 1
    y = (Fraction(3),)
    assert _same_cell(net, y, [(Fraction(2),), (Fraction(5, 4),)])
    assert not _same_cell(net, y, [(Fraction(2),), (Fraction(1, 2),)])  # wrong side
    assert not _same_cell(net, y, [(one,)])  # on the hyperplane: no open cell


def test_a_constant_g_has_no_design() -> None:
    flat = BiasedReluNetwork(Fraction(2), (Fraction(0), Fraction(0)), ())
    with pytest.raises(NotIdentifiable, match="g is constant"):
        cell_design(flat, 2, 0)


def test_rational_answers_exact_and_certified() -> None:
    exact, certified = get_arithmetic("exact"), get_arithmetic("certified")
    point = (Fraction(1, 2), Fraction(-3))
    assert rational_answer(exact, sympy.Rational(7, 3), point, 100) == Fraction(7, 3)
    with pytest.raises(ModelClassMismatch) as info:  # irrational: outside the class
        rational_answer(exact, sympy.sqrt(2), point, 100)
    assert info.value.query == point and info.value.observed == sympy.sqrt(2)
    ball = flint.arb(flint.fmpq(7, 3))
    assert rational_answer(certified, ball, point, 100) == Fraction(7, 3)
    with pytest.raises(PrecisionExhausted, match="denominator <= 2"):  # 7/3 needs 3
        rational_answer(certified, ball, point, 2)

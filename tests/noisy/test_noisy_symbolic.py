"""Lemma A.1 and the error propagation: derived expressions, and wrong variants failing."""

from __future__ import annotations

import math

import numpy as np
import sympy

from verified_attn.noisy import symbolic
from verified_attn.noisy.symbolic import LIPSCHITZ, Wbar, d, mu, sigmoid, tau


def test_lipschitz_constant_is_the_derived_sharp_value() -> None:
    check = symbolic.lipschitz_constant()
    assert check.holds
    assert check.data["L"] == LIPSCHITZ
    # Independent numeric check: 1/(s(1-s)) at s = sigmoid(1/2).
    s = 1 / (1 + math.exp(-0.5))
    assert math.isclose(float(LIPSCHITZ), 1 / (s * (1 - s)), rel_tol=1e-14)
    assert 4 < float(LIPSCHITZ) < 5


def test_a_smaller_lipschitz_constant_is_violated() -> None:
    """Difference quotients near the end exceed L - 1e-4 (so L is sharp) but never L."""
    s = 1 / (1 + math.exp(-0.5))
    logit = lambda y: math.log(y / (1 - y))  # noqa: E731
    ys = np.linspace(1 - s, s, 2001)
    quotients = np.diff([logit(y) for y in ys]) / np.diff(ys)
    L = float(LIPSCHITZ)
    assert quotients.max() <= L
    assert quotients.max() > L - 1e-3  # the wrong variant "L - 1e-3" fails
    assert quotients.max() > 4.0  # logit'(1/2) = 4 is not a Lipschitz constant here


def test_probe_identity_and_a_transposed_variant() -> None:
    assert symbolic.probe_identity().holds
    # The wrong variant (W_ji instead of W_ij) disagrees with the model numerically.
    import verified_attn as va

    m = va.SingleHeadAttention([[0, 1], [-1, 0]], [1, 2])
    a, b = 0.5, 0.5
    f = m([[b, a], [0, a]])  # i = 0, j = 1
    right = a * 2 + 1 / (1 + math.exp(-a * b * 1)) * b * 1
    wrong = a * 2 + 1 / (1 + math.exp(-a * b * -1)) * b * 1
    assert math.isclose(f, right, rel_tol=1e-12) and not math.isclose(f, wrong, rel_tol=1e-3)


def test_error_propagation_identity() -> None:
    check = symbolic.error_propagation()
    assert check.holds
    assert check.data["worst"] == tau * (1 + symbolic.a + symbolic.alpha * symbolic.b)


def test_paper_bound_has_the_explicit_constants() -> None:
    bounds = symbolic.error_bounds()
    s_plus = sigmoid(sympy.Rational(1, 2))
    by_hand = LIPSCHITZ * tau * Wbar * (3 * Wbar + 2 * s_plus) / (mu - tau)
    assert sympy.simplify(bounds["W_entry_paper"] - by_hand) == 0
    assert sympy.simplify(bounds["W_frobenius"] - d * by_hand) == 0
    # A variant that forgets the (1 + a) part of the numerator is smaller: not the bound.
    forgot = LIPSCHITZ * tau * Wbar * (2 * s_plus) / (mu - tau)
    point = {tau: sympy.Rational(1, 100), mu: 1, Wbar: 1}
    assert (bounds["W_entry_paper"] - forgot).subs(point).evalf() > 0


def test_a_priori_bounds_increase_with_tau_and_match_the_formula() -> None:
    small = symbolic.a_priori_bounds(1e-4, 1, 1, 3, probe_scale=1)
    big = symbolic.a_priori_bounds(1e-3, 1, 1, 3, probe_scale=1)
    assert small["W_entry"] < big["W_entry"]
    L = float(LIPSCHITZ)
    s = 1 / (1 + math.exp(-0.5))
    direct = L * 1e-3 * (3 + 2 * s) / (1 - 1e-3)
    assert math.isclose(big["W_entry"], direct, rel_tol=1e-11)
    assert big["W_frobenius"] == 3 * big["W_entry"]
    norm = symbolic.a_priori_bounds(1e-4, 1, 1, 3, probe_scale=0.5, design="norm")
    assert norm["W_entry"] > small["W_entry"]  # the price of the weaker assumption


def test_tolerance_constant() -> None:
    check = symbolic.tolerance_for()
    assert check.holds
    assert sympy.simplify(check.data["constant"] - 1 / (3 * LIPSCHITZ)) == 0
    assert sympy.simplify(check.data["constant"] - 1 / (6 * LIPSCHITZ)) != 0

"""THEORY §6 identities derived from attention_output; every wrong variant fails."""

from __future__ import annotations

import pytest
import sympy

from verified_attn.models import attention_output
from verified_attn.transformer import symbolic


@pytest.mark.parametrize(("d", "n", "m"), [(1, 2, 1), (2, 2, 2), (2, 3, 1), (3, 2, 2)])
def test_antisymmetry_holds(d: int, n: int, m: int) -> None:
    checks = symbolic.antisymmetry(d, n, m)
    assert [c.name for c in checks] == ["pre-activations-odd", "relu-odd-part", "antisymmetry"]
    assert all(c.holds for c in checks)


@pytest.mark.parametrize(("d", "n", "m"), [(1, 2, 2), (2, 2, 2), (2, 3, 1)])
def test_composition_holds(d: int, n: int, m: int) -> None:
    assert all(c.holds for c in symbolic.composition(d, n, m))


@pytest.mark.parametrize(
    "wrong",
    [
        symbolic.wrong_antisymmetry_sum,
        symbolic.wrong_v_eff_transposed,
        symbolic.wrong_antisymmetry_with_score_bias,
        symbolic.wrong_composition_last_token,
    ],
)
def test_wrong_variants_fail(wrong) -> None:
    check = wrong()
    assert not check.holds
    assert "residual" in check.detail


def test_the_true_identity_at_the_wrong_variants_point_is_exactly_zero() -> None:
    # Same point, same code path as the wrong variants: only the variant's change fails.
    p = symbolic._POINT
    neg = [[-x for x in r] for r in p["X"]]
    head = attention_output(
        p["X"], p["W"].tolist(), list(p["V"] * p["A"] * p["w"]), exp=symbolic._exp
    )
    residual = symbolic._T(p["X"]) - symbolic._T(neg) - head
    assert sympy.simplify(residual) == 0


def test_relu_odd_part_detects_a_wrong_relu() -> None:
    assert symbolic.relu_odd_part().holds
    assert not symbolic.relu_odd_part(lambda z: sympy.Max(z, 0) + z / 2).holds
    assert not symbolic.relu_odd_part(lambda z: sympy.Abs(z)).holds

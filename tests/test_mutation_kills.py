"""Tests written to kill mutants that survived benchmarks/mutation.py (see its JSON)."""

from __future__ import annotations

import sympy

import verified_attn as va
from verified_attn.arithmetic import exact_equal


def test_exact_equal_decides_equality_that_needs_cancellation() -> None:
    # Not structurally equal, equal after together/cancel (arithmetic.exact_equal's 2nd step).
    assert exact_equal((sympy.E + 1) ** 2, sympy.E**2 + 2 * sympy.E + 1)
    assert exact_equal(1 / (sympy.E + 1) + 1 / (sympy.E - 1), 2 * sympy.E / (sympy.E**2 - 1))
    assert not exact_equal((sympy.E + 1) ** 2, sympy.E**2 + 2 * sympy.E)


def test_oracle_model_class_of_plain_and_affine_heads() -> None:
    plain = va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact")
    affine = va.Oracle(va.SingleHeadAttention([[1]], [2], c=[1], beta=3), "exact")
    assert plain.model_class == "single-head"
    assert affine.model_class == "single-head-affine"

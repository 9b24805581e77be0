"""Theorem 5.1's derivation claims fail for deliberately wrong variants.

Each claim passes on the real derivation (``test_low_rank_symbolic_claims.py``); here a
wrong model, a wrong formula or a degenerate design is put in its place and the claim
itself (not a copy of its code) must then fail.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import sympy

from verified_attn.claims import get_claim, run_claim
from verified_attn.low_rank import claims as lr_claims
from verified_attn.low_rank import symbolic


def _passes(claim_id: str) -> bool:
    return bool(run_claim(get_claim(claim_id), 0, None).passed)


def test_rop_claim_fails_for_a_sign_flipped_score(monkeypatch: pytest.MonkeyPatch) -> None:
    real = symbolic.attention_output

    def flipped(rows: Any, W: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        return real(rows, [[-w for w in row] for row in W], v, *args, **kwargs)

    assert _passes("thm-5.1/rop-identity")
    monkeypatch.setattr(symbolic, "attention_output", flipped)
    assert not _passes("thm-5.1/rop-identity")


def test_skeleton_claim_fails_for_a_transposed_inverse(monkeypatch: pytest.MonkeyPatch) -> None:
    # (U^T C)^-T in place of (U^T C)^-1: the same at r = 1, wrong at r = 2.
    wrong = functools.partial(symbolic.skeleton_identity, adjugate=lambda M: M.adjugate().T)
    assert wrong(3, 1).holds and not wrong(3, 2).holds
    monkeypatch.setattr(lr_claims, "skeleton_identity", wrong)
    assert not _passes("thm-5.1/skeleton-identity")


def test_skeleton_claim_fails_for_a_singular_design(monkeypatch: pytest.MonkeyPatch) -> None:
    # B and U with equal columns: U^T C is singular at r = 2, det = 0, no reconstruction.
    def repeated(rng: Any, n: int, m: int) -> sympy.Matrix:
        col = sympy.Matrix(n, 1, [sympy.Rational(i + 1, 2) for i in range(n)])
        return sympy.Matrix.hstack(*([col] * m))

    monkeypatch.setattr(symbolic, "_rational_matrix", repeated)
    chk = symbolic.skeleton_identity(3, 2)
    assert not chk.holds
    assert not _passes("thm-5.1/skeleton-identity")


def test_dimension_claim_fails_for_the_naive_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2dr forgets the r^2-dimensional symmetry (K, Q) -> (G K, G^-T Q).
    naive = functools.partial(symbolic.rank_r_dimension, dimension=lambda d, r: 2 * d * r)
    monkeypatch.setattr(lr_claims, "rank_r_dimension", naive)
    assert not _passes("thm-5.1/dimension")


def test_dimension_claim_fails_for_one_too_many(monkeypatch: pytest.MonkeyPatch) -> None:
    # Off by one (a query floor one above the truth) is caught at every (d, r) checked.
    plus_one = functools.partial(
        symbolic.rank_r_dimension, dimension=lambda d, r: 2 * d * r - r * r + 1
    )
    monkeypatch.setattr(lr_claims, "rank_r_dimension", plus_one)
    assert not _passes("thm-5.1/dimension")

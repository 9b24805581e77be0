"""Symbolic identities and the room's claims."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from verified_attn.low_rank.claims import CLAIMS
from verified_attn.low_rank.symbolic import rank_r_dimension, rop_identity, skeleton_identity


@pytest.mark.parametrize("d", [1, 2])
def test_rop_identity(d: int) -> None:
    assert rop_identity(d).holds


def test_skeleton_identity() -> None:
    assert skeleton_identity(3, 1, seed=4).holds  # (3, 2) runs in the claim


@pytest.mark.parametrize(("d", "r"), [(3, 1), (4, 2), (5, 2), (4, 4)])
def test_dimension(d: int, r: int) -> None:
    chk = rank_r_dimension(d, r, seed=d + r)
    assert chk.holds and chk.data["rank"] == 2 * d * r - r * r
    # The naive count 2dr (ignoring the GL(r) symmetry) is wrong.
    assert chk.data["rank"] != 2 * d * r


def test_rop_identity_fails_for_wrong_model() -> None:
    # A deliberately wrong variant: with a score scaled by 2 the logit is 2 a^T W b.
    from verified_attn.models import attention_output

    a, b, w, v = sympy.symbols("a b w v", real=True)
    f = attention_output([[a + b], [b]], [[2 * w]], [v])
    y = (f - b * v) / (a * v)
    ratio = sympy.powsimp(sympy.cancel(sympy.together(y / (1 - y))))
    assert sympy.expand(sympy.expand_log(sympy.log(ratio), force=True) - a * w * b) != 0


def test_claim_ids_unique_and_prefixed() -> None:
    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids)) and all(i.startswith("thm-5.1/") for i in ids)
    for want in (
        "skeleton-count",
        "skeleton-exact",
        "rop-identity",
        "dimension",
        "nuclear-recovery",
        "over-rank",
    ):
        assert f"thm-5.1/{want}" in ids


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claims_pass(claim) -> None:  # type: ignore[no-untyped-def]
    res = claim.check(0)
    assert res.passed, res.detail


def test_skeleton_identity_fails_when_rank_exceeds_r() -> None:
    # Deliberately wrong variant: a rank-2 skeleton of a rank-3 W is not W.
    rng = np.random.default_rng(0)
    K = sympy.Matrix(rng.integers(-3, 4, (3, 5)))
    Q = sympy.Matrix(rng.integers(-3, 4, (3, 5)))
    W = K.T * Q
    assert W.rank() == 3
    B = sympy.Matrix(rng.integers(-3, 4, (5, 2)))
    U = sympy.Matrix(rng.integers(-3, 4, (5, 2)))
    C = W * B
    assert (U.T * C).det() != 0
    assert C * (U.T * C).inv() * (U.T * W) != W

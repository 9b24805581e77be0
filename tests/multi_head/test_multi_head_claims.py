"""Every Prop 7.1 claim passes, and the claim checks can fail."""

from __future__ import annotations

import pytest

from verified_attn.multi_head import claims_float, claims_recovery, claims_structure
from verified_attn.multi_head.claims import CLAIMS

EXPECTED = {
    "prop-7.1/permutation",
    "prop-7.1/shared-score-split",
    "prop-7.1/dead-head",
    "prop-7.1/cancelling-values",
    "prop-7.1/linearity-in-v",
    "prop-7.1/canonical-form",
    "prop-7.1/identifiability-dimension",
    "prop-7.1/collision-kernel",
    "prop-7.1/orthogonal-subspaces",
    "prop-7.1/single-head-canonical",
    "prop-7.1/canonical-recovery",
    "prop-7.1/affine-canonical-recovery",
    "prop-7.1/position-dependent",
    "prop-7.1/near-rational",
    "prop-7.1/float-head-count",
    "prop-7.1/float-precision",
    "prop-7.1/out-of-class",
    "prop-7.1/certificate-tamper",
}


def test_ids() -> None:
    ids = [c.id for c in CLAIMS]
    assert set(ids) == EXPECTED and len(ids) == len(EXPECTED)


# The float-precision claim learns float multi-head boxes for minutes: `pytest -m slow`
# (and `verified-attn check`, which runs every claim).
_SLOW_CLAIMS = {"prop-7.1/float-precision"}


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.id in _SLOW_CLAIMS else [])
        for c in CLAIMS
    ],
)
def test_claim_passes(claim: object) -> None:
    res = claim.check(0)  # type: ignore[attr-defined]
    assert res.passed, res.detail
    assert res.id == claim.id  # type: ignore[attr-defined]


def test_kind_claim_fails_when_the_proof_is_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    # Make perturb() a no-op: the "perturbed proof must fail" half of the claim then fails.
    monkeypatch.setattr(claims_structure, "perturb", lambda m, **kw: m)
    res = claims_structure._kind_check("permutation", "s").check(0)
    assert not res.passed


def test_orthogonal_claim_fails_with_a_wrong_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound minus one must not be met.
    monkeypatch.setattr(
        claims_structure, "orthogonal_query_bound", lambda r: sum(x * x + x for x in r) - 1
    )
    assert not claims_structure._orthogonal(0).passed


def test_dimension_claim_fails_if_collisions_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the collision directions the upper bracket is wrong and the ranks do not meet.
    from verified_attn.multi_head import identifiability

    real = identifiability.symmetry_null_vectors
    monkeypatch.setattr(
        identifiability, "symmetry_null_vectors", lambda m: (real(m)[0], [], real(m)[2])
    )
    assert not claims_structure._dimension(0).passed


def test_recovery_claim_fails_with_a_wrong_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        claims_recovery, "canonical_query_bound", lambda d, H: d + 2 * H * (d * d + d - 1) - 1
    )
    assert not claims_recovery._canonical_recovery(0).passed


def test_recovery_claim_fails_with_a_limit_one_too_low(monkeypatch: pytest.MonkeyPatch) -> None:
    # The equal-v instances attain the limit exactly: limit - 1 must not be claimed.
    real = claims_recovery.canonical_query_limit
    monkeypatch.setattr(claims_recovery, "canonical_query_limit", lambda d, H: real(d, H) - 1)
    assert not claims_recovery._canonical_recovery(0).passed


def test_affine_claim_fails_with_a_wrong_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    real = claims_recovery.canonical_query_bound
    monkeypatch.setattr(
        claims_recovery,
        "canonical_query_bound",
        lambda d, H, affine=False: real(d, H, affine=affine) - 1,
    )
    assert not claims_recovery._affine_recovery(0).passed


def test_float_head_count_claim_fails_with_a_wrong_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    # A floor far too low (the noise taken for heads) or far too high (heads missed): the
    # claim must fail, not pass or crash.
    from verified_attn.multi_head import head_count_float

    for factor in (1e-9, 1e9):
        monkeypatch.setattr(head_count_float, "NOISE_FACTOR", factor)
        res = claims_float._float_head_count(0)
        assert not res.passed, res.detail


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_float_precision_claim_fails_without_the_polish(monkeypatch: pytest.MonkeyPatch) -> None:
    # The precision polish never asked: the d = 8, H = 1, seed 13 box stays 1e-9 off.
    from verified_attn.multi_head.pipeline import budget

    monkeypatch.setattr(budget, "PRECISION_TARGET", float("inf"))
    monkeypatch.setattr(budget, "PRECISION_REQUIRED", float("inf"))
    # ... and no refinement (its own sequences would refit the heads).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.refine.refine_count", lambda *a, **k: 0)
    res = claims_float._float_precision(0)
    assert not res.passed and "H=1 seed 13: 166 queries (0 polish" in res.detail

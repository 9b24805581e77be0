"""The transformer room's claims pass, and each one's check can fail."""

from __future__ import annotations

import pytest

from verified_attn.transformer import claims


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_claim_passes(claim) -> None:
    result = claim.check(0)
    assert result.passed, result.detail
    assert result.id == claim.id and result.id.startswith("transformer/")


def test_count_claims_report_exact_figures() -> None:
    by_id = {c.id: c for c in claims.CLAIMS}
    paper = by_id["transformer/paper-reduction-count"].check(1)
    direct = by_id["transformer/direct-count"].check(1)
    assert (paper.queries, paper.bound) == (80, 80)  # sum of 2(d^2 + d), d = 1..4
    assert (direct.queries, direct.bound) == (30, 30)  # sum of d^2, d = 1..4


def test_a_wrong_identity_would_fail_the_antisymmetry_claim(monkeypatch) -> None:
    # Swap in the false 'T(X) + T(-X)' variant for the true derivation: the claim must fail.
    from verified_attn.transformer import symbolic

    monkeypatch.setattr(
        symbolic, "antisymmetry", lambda *a, **k: [symbolic.wrong_antisymmetry_sum()]
    )
    assert not claims.CLAIMS[0].check(0).passed


def test_a_wrong_count_would_fail_the_paper_claim(monkeypatch) -> None:
    monkeypatch.setattr(claims, "paper_attention_count", lambda d: 2 * (d * d + d) - 1)
    assert not claims.CLAIMS[3].check(0).passed

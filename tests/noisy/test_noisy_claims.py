"""The room's claims: every one passes, and the ids the theory names are all there."""

from __future__ import annotations

from verified_attn.noisy.claims import CLAIMS

REQUIRED = {
    "lemma-a.1/lipschitz",
    "thm-6.1/error-bound",
    "thm-6.1/query-count",
    "thm-6.1/adversarial",
    "thm-6.1/norm-margin-design",
    "app-b/label-bisection",
    "app-b/identifiability",
}


def test_claim_ids_are_unique_and_complete() -> None:
    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids)) and REQUIRED <= set(ids)


def test_every_claim_passes() -> None:
    failed = [(c.id, r.detail) for c in CLAIMS if not (r := c.check(0)).passed]
    assert failed == []

"""The proofs in proofs/*.md cite only registered claims, and Theorem 4.1's cited claims pass."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

import verified_attn as va

PROOFS = Path(__file__).resolve().parent.parent / "proofs"
# A claim id in backticks: kind-number/slug, e.g. `thm-4.1/logit-identity`, `prop-7.1/...`;
# appendix numbers may be letters (`app-b/...`, `lemma-a.1/...`).
CLAIM_ID = re.compile(
    r"`((?:[a-z]+-(?:[0-9][0-9.]*|[a-z](?:\.[0-9]+)*)|transformer|follow-up)"
    r"/[a-z0-9-]+(?:/[a-z0-9-]+)*)`"
)


def cited_claim_ids(text: str) -> list[str]:
    """Every backticked claim id in a proof text, in order of first appearance."""
    out: list[str] = []
    for match in CLAIM_ID.finditer(text):
        if match.group(1) not in out:
            out.append(match.group(1))
    return out


def unknown_claim_ids(text: str, known: Iterable[str]) -> list[str]:
    """The cited ids that are not in the registry ``known``."""
    registry = set(known)
    return [i for i in cited_claim_ids(text) if i not in registry]


def _registry() -> list[str]:
    return [c.id for c in va.claims.all_claims()]


PROOF_FILES = sorted(PROOFS.glob("*.md"))


def test_there_are_proofs() -> None:
    assert PROOFS / "thm_4_1.md" in PROOF_FILES


@pytest.mark.parametrize("path", PROOF_FILES, ids=lambda p: p.name)
def test_every_cited_claim_is_registered(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert cited_claim_ids(text), f"{path.name} cites no claim"
    assert unknown_claim_ids(text, _registry()) == []


def test_helper_finds_a_nonexistent_id() -> None:
    text = (
        "1. Length one, checked by `thm-4.1/length-one`.\n"
        "2. A step nobody checks, citing `thm-4.1/no-such-claim` and `prop-7.1/ghost`.\n"
        "Code such as `oracle.query` and paths like `a/b` are not claim ids."
    )
    assert cited_claim_ids(text) == [
        "thm-4.1/length-one",
        "thm-4.1/no-such-claim",
        "prop-7.1/ghost",
    ]
    assert unknown_claim_ids(text, _registry()) == ["thm-4.1/no-such-claim", "prop-7.1/ghost"]


def test_id_pattern_covers_every_room_prefix() -> None:
    text = "`thm-5.1/a` `prop-7.1/b-2` `app-a.1/c` `lemma-a.1/d` `app-b/e` `thm-4.1` `x/y`"
    assert cited_claim_ids(text) == [
        "thm-5.1/a",
        "prop-7.1/b-2",
        "app-a.1/c",
        "lemma-a.1/d",
        "app-b/e",
    ]


def test_thm_4_1_cites_every_thm_4_1_claim() -> None:
    cited = set(cited_claim_ids((PROOFS / "thm_4_1.md").read_text(encoding="utf-8")))
    room = {i for i in _registry() if i.startswith("thm-4.1/")}
    assert room <= cited, f"claims not placed in the proof: {sorted(room - cited)}"


def test_claims_cited_by_thm_4_1_pass() -> None:
    ids = cited_claim_ids((PROOFS / "thm_4_1.md").read_text(encoding="utf-8"))
    results = va.check_claims(ids, seed=0)
    assert [r.id for r in results] == ids
    failed = {r.id: r.detail for r in results if not r.passed}
    assert failed == {}

"""The phase glossary: every phase a learner counts is explained, in the result's text and
in ``verified-attn learn --help``; a name it lacks is reported, not silently passed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import verified_attn as va
import verified_attn.phases as phases
from tests.test_progress import CASES
from verified_attn.cli import main
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.multi_head.counterexamples import random_multi_head
from verified_attn.phases import PHASES, describe_phase, glossary_text, phase_glossary
from verified_attn.recovery_report import recovery_text

ROOT = Path(__file__).resolve().parents[1] / "verified_attn"

# Phase names written as literals in the learners: oracle.phase("X"), phase="X", and the
# low-rank prober's measure(..., "X") / measure_ids(..., "X").
LITERALS = [
    re.compile(r"\.phase\(\s*\"([^\"]+)\""),
    re.compile(r"\bphase=\"([^\"]+)\""),
    re.compile(r"\.measure(?:_ids)?\([^\n]*?,\s*\"([^\"]+)\"(?:,|\))"),
    re.compile(r"^RANK_CHECK = \"([^\"]+)\"", re.M),
]


def _missing(names: set[str]) -> list[str]:
    return sorted(n for n in names if describe_phase(n) is None)


def _reported_phases() -> set[str]:
    """The phases small runs of every learner report, and of runs that need more: a
    saturated probe (rescale), equal-v heads (tie links), too few heads (diagnosis)."""
    names: set[str] = set()
    for _, make, learn in CASES:
        oracle = make()
        learn(oracle)
        names |= set(oracle.queries_by_phase)
    saturated = va.Oracle(va.SingleHeadAttention([[40, -2], [3, 0]], [0, 5]), "float")
    names |= set(va.learn_single_head(saturated).queries_by_phase)
    tied = va.MultiHeadAttention([([[1, 0], [0, 2]], [1, -1]), ([[0, 1], [-1, 0]], [1, -1])])
    names |= set(va.learn_multi_head(va.Oracle(tied, "exact"), heads=2).queries_by_phase)
    three = va.Oracle(random_multi_head(2, 3, 7), "certified")
    with pytest.raises((ModelClassMismatch, PrecisionExhausted)):
        va.learn_multi_head(three, heads=2)
    return names | set(three.queries_by_phase)


def test_every_phase_a_learner_reports_is_explained() -> None:
    names = _reported_phases()
    # The runs reach every room's phases (a smaller set would make this test weak).
    assert {"v", "W", "verify", "beta", "rescale", "C", "R", "rank", "rop", "ffn",
            "ffn-verify", "attention-v", "attention-W", "attention-direct", "F(0)", "F(k)",
            "F(t)", "redundancy", "pilot", "head-count", "tie links", "diagnosis", "signs",
            "head1/v", "head2/W"} <= names
    assert _missing(names) == []


def test_every_phase_named_in_the_code_is_explained() -> None:
    names: set[str] = set()
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        for pattern in LITERALS:
            names |= set(pattern.findall(text))
    names -= {"demo", "check", "a", "b", "x", "v_ok"}  # doctest and test phases
    assert {"F(t)", "redundancy", "polish", "conditioning", "refine", "rank-check", "C"} <= names
    assert _missing(names) == []


def test_a_missing_entry_is_caught(monkeypatch) -> None:
    # The wrong variant: a glossary without "F(t)" leaves it unexplained, and says so.
    monkeypatch.setattr(phases, "PHASES", {k: v for k, v in PHASES.items() if k != "F(t)"})
    assert _missing({"F(t)", "v"}) == ["F(t)"]
    assert phase_glossary(["F(t)"]) == ["phases:", "  F(t): no description"]
    assert describe_phase("head3/F(t)") is None and describe_phase("F(t)-rescale") is None


def test_composed_names() -> None:
    assert describe_phase("head12/rescale") == (
        "head 12, restricted to its known subspace (learn_orthogonal_heads): rescale: "
        + PHASES["rescale"]
    )
    assert describe_phase("attention-verify").endswith("verify: " + PHASES["verify"])
    assert describe_phase("rank-rescale") == f"re-asks of rank probes at a smaller scale ({PHASES['rank']})"
    assert describe_phase("attention-nonsense") is None and describe_phase("head/v") is None


def test_result_text_and_help_explain_the_phases(capsys, tmp_path) -> None:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    text = recovery_text(rec)
    assert "phases:\n  v: " + PHASES["v"] in text
    assert "  verify: " + PHASES["verify"] in text
    assert text.index("phases:") < text.index("parameters:")  # before the parameters
    assert "phases:" not in recovery_text(rec, parameters=False).split("by phase")[0]

    assert main(["learn", "multi-head", "--d", "3", "--heads", "2", "--arithmetic", "float",
                 "--certificate", str(tmp_path / "c.json")]) == 0
    out, err = capsys.readouterr()
    assert "  F(t): " in out and "  redundancy: " in out
    assert err == ""  # standard error is not a terminal here: no bar

    for argv in (["learn", "--help"], ["learn", "multi-head", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "query phases" in out and "  F(t): multi-head (float)" in out
        assert "  redundancy: " in out and "headK/X" in out
    assert len(glossary_text().splitlines()) > len(PHASES)

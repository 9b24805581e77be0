"""Export of certified affine canonical multi-head runs (score biases c_h, output bias
beta): parts 1 to 3 proved, tampering fails.

``formal/CertMultiHeadAffine.v`` proves, for every d and H0, that the certified heads with
beta answer every learning query of the affine design (d + 1 probes) inside its recorded
interval, that their scores u^T (W_h b + c_h) and residues u^T v_h at the pairs have
denominators at most D, and that exact answers to the design fix every affine model's
score masses at every pair (whatever its output bias). The Coq tests use the run with
every answer widened to a 256-bit oracle's intervals (:func:`coq_text.widened_answers`), whose file checks in seconds; a
changed W, c or beta, an interval that misses the answer, a dropped query, a narrower D,
another run's answers and ``Admitted`` must each fail.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from coq_text import needs_coq, replace_entry, set_field, widened_answers

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

HEADS = [([[1, 0], [0, -1]], [1, 2], [1, 0]), ([[0, 1], [1, 0]], [-1, 1], [0, -1])]


def _model() -> va.MultiHeadAttention:
    return va.MultiHeadAttention(HEADS, beta=1)


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    rec = va.learn_multi_head(va.Oracle(_model(), "certified"), heads=2)
    assert rec.certificate()["affine"] is True and rec.exact
    return widened_answers(rec.certificate(), 250)


@pytest.fixture(scope="module")
def text(cert: dict[str, Any]) -> str:
    return va.export_coq(cert)


def test_affine_export_states_the_run(cert: dict[str, Any], text: str) -> None:
    # d + 1 + 2 H0 (d (d + 1) + d - 1) = 3 + 4 * 7 learning queries, no ties
    assert cert["queries"]["learning"] == 31
    listed = re.search(r"Definition recs : list mh_rec := \[(.*)\]\.", text)
    assert listed is not None and listed.group(1).count("rec_") == 31
    assert "(answers_amh run (raheads heads_c) (Q2R beta_c) /\\ apairs_den_le run) /\\" in text
    assert "Definition beta_c : Q := (1)%Q." in text
    # part 3: exact answers fix the score masses at every pair, whatever the output bias
    assert "asame_answers run hs' beta' (raheads heads_c) (Q2R beta_c) ->" in text
    assert "apply (amh_masses_determined run hs' (raheads heads_c) beta' (Q2R beta_c) L)" in text
    assert "(W_0, c_0, v_0); (W_1, c_1, v_1)" in text
    head = text.split("*)")[0]
    assert "does NOT state" in head and "Admitted" not in text


def test_affine_export_refuses_what_it_cannot_state(cert: dict[str, Any]) -> None:
    exact = va.learn_multi_head(va.Oracle(_model(), "exact"), heads=2).certificate()
    with pytest.raises(CertificateError, match="bias-free"):
        va.export_coq(exact)  # exact affine runs: not exported
    for key, value, match in [
        ("affine", False, "design.B has 3 entries, expected 2"),
        ("method", "orthogonal", "certified canonical"),
        ("denominator_bound", 2**22, "denominator"),
    ]:
        bad = copy.deepcopy(cert)
        bad[key] = value
        with pytest.raises(CertificateError, match=match):
            va.export_coq(bad)


@needs_coq
def test_affine_run_is_proved_on_whitelisted_axioms(text: str) -> None:
    check = compile_exported(text)
    assert check.ok, check.log[-2000:]
    assert check.theorem == "run_consistent"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


def _drop_last_query(text: str) -> str:
    m = re.search(r"Definition recs : list mh_rec := \[(.*); (rec_\d+)\]\.", text)
    assert m is not None
    return text[: m.start(2) - 2] + text[m.end(2) :]


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: replace_entry(t, "W_0", "1%nat, 1%nat", "(-2)"),  # terms not the heads' own
        lambda t: replace_entry(t, "c_1", "0%nat", "(1 # 2)"),  # a score bias changed
        lambda t: t.replace("Definition beta_c : Q := (1)%Q.", "Definition beta_c : Q := (2)%Q."),
        lambda t: set_field(t, "rec_7", "ahi", field_value(t, "rec_7", "alo")),  # misses it
        _drop_last_query,  # one interval fewer than the design's queries
    ],
    ids=["W", "c", "beta", "interval", "dropped-query"],
)
def test_tampered_affine_file_fails_coqc(text: str, tamper: Any) -> None:
    bad = tamper(text)
    assert bad != text
    assert not compile_exported(bad).ok


def field_value(text: str, definition: str, name: str) -> str:
    m = re.search(rf"Definition {definition} : \w+ := .*?{name} := (.*?);", text, re.S)
    assert m is not None
    return m.group(1)


@needs_coq
def test_admitted_affine_file_is_caught(text: str) -> None:
    proof = text[text.index("Proof.", text.index("Theorem run_consistent")) :]
    check = compile_exported(text.replace(proof[: proof.index("Qed.") + 4], "Admitted."))
    assert not check.ok and "run_consistent" in check.log


@needs_coq
def test_narrower_bound_fails(text: str) -> None:
    """D = 2^20 is below the denominators of the certified scores at the pairs (the
    design's u and b have denominators up to 2^11 each)."""
    stated = "Definition D : positive := 18446744073709551616%positive."
    assert stated in text
    assert not compile_exported(
        text.replace(stated, "Definition D : positive := 1048576%positive.")
    ).ok


@needs_coq
def test_another_runs_answers_fail(cert: dict[str, Any]) -> None:
    """The answers of a run on another model (beta = 2) with this run's heads: the same
    design (same seed), intervals that miss these heads' answers."""
    other = va.MultiHeadAttention(HEADS, beta=2)
    answers = va.learn_multi_head(va.Oracle(other, "certified"), heads=2).certificate()
    spliced = copy.deepcopy(cert)
    spliced["answers"] = widened_answers(answers, 250)["answers"]
    assert spliced["design"] == answers["design"]
    assert not compile_exported(va.export_coq(spliced)).ok

"""Export of exact canonical multi-head certificates to Coq: ``run_identified`` from
``formal/CertMultiHeadExact.v``.

The file proves that the certified heads give exactly each recorded answer (a rational or
a closed form in exp of rationals) and, from the general interpolation and labelling
theorems, that every model of at most H0 heads giving those answers is the certified
model; every tampered variant must fail ``coqc``.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from typing import Any

import pytest
from coq_text import needs_coq, real_definition, replace_entry, set_real_definition

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.cli_coq import cmd_verify_coq
from verified_attn.formal.coq_check import compile_exported

HEADS = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])]


def _cert(heads: list[Any], H0: int) -> dict[str, Any]:
    """An exact run; H0 above the head count is a stated maximum (``max_heads``)."""
    oracle = va.Oracle(va.MultiHeadAttention(heads), "exact")
    if H0 > len(heads):
        return va.learn_multi_head(oracle, max_heads=H0).certificate()
    return va.learn_multi_head(oracle, heads=H0).certificate()


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return _cert(HEADS, 2)


@pytest.fixture(scope="module")
def text(run: dict[str, Any]) -> str:
    return va.export_coq(run)


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_export_states_the_recorded_answers(run: dict[str, Any], text: str) -> None:
    d, H0 = 2, 2
    n = d + (d * d + d - 1) * 2 * H0  # 22: F(0) at each b_j, F(1..4) at each of 5 pairs
    assert run["queries"]["learning"] == n
    assert text.count("Lemma hold_") == n and f"hold_{n - 1}" in text and f"hold_{n}" not in text
    assert "Admitted" not in text and "admit" not in text
    header = text.split("*)")[0]
    assert "sha256" in header and "no denominator bound" in header
    assert "Definition D " not in text  # exact answers: no denominator assumption
    assert "apply (mh_exact_identified run" in text and "3. (the run's certified" in header
    # F(0) at b_0 is a rational; F(k) a closed form in exp of the pair's scores
    assert re.fullmatch(r"Q2R \(-?\d+( # \d+)?\)%Q", real_definition(text, "ans_0").group(1))
    assert "exp (Q2R (" in real_definition(text, "ans_5").group(1)


def test_fewer_heads_than_h0_states_the_masses_only() -> None:
    data = _cert(HEADS, 3)
    text = va.export_coq(data)
    assert text.count("Lemma hold_") == data["queries"]["learning"] == 2 + 5 * 6
    assert "mh_exact_identified" not in text.split("*)", 1)[1]
    assert "It does NOT state that such a model is the certified model" in text


def test_export_refuses_what_it_cannot_state(run: dict[str, Any]) -> None:
    bad = copy.deepcopy(run)
    bad["answers"]["F"][0][0] = {"float": "0x1.0p+0"}
    with pytest.raises(CertificateError, match="exact answer"):
        va.export_coq(bad)
    other = dict(run, method="orthogonal")
    with pytest.raises(CertificateError, match="exact canonical multi-head"):
        va.export_coq(other)
    short = copy.deepcopy(run)
    short["answers"]["F"] = short["answers"]["F"][:-1]
    with pytest.raises(CertificateError, match=r"answers\.F"):
        va.export_coq(short)


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_cli_checks_an_exact_multi_head_certificate(
    run: dict[str, Any], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "exact_mh.json"
    path.write_text(json.dumps(run))
    assert cmd_verify_coq(argparse.Namespace(path=path)) == 0
    out = capsys.readouterr().out
    assert "Coq checked run_identified" in out
    axioms = out.split("axioms: ")[1].rstrip(")\n").split(", ")
    assert set(axioms) <= formal.ALLOWED_AXIOMS


def _drop_last_query(text: str) -> str:
    out = text.replace("; ans_21]", "]").replace("; xrec_21]", "]")
    start = out.index("Lemma hold_21")
    out = out[:start] + out[out.index("Qed.", start) + 4 :]
    return out.replace("  - exact hold_21.\n", "")


@needs_coq
@pytest.mark.parametrize("tamper", ["head", "answer", "dropped-query", "another-run"])
def test_tampered_file_fails_coqc(text: str, tamper: str) -> None:
    out = text
    if tamper == "head":  # a certified W entry changed (the per-head numbers stay)
        out = replace_entry(text, "W_0", "0%nat, 1%nat", "(2)")
    elif tamper == "answer":  # a recorded closed form's constant changed
        ans = real_definition(text, "ans_5").group(1)
        q = re.search(r"Q2R \((-?\d+ # \d+)\)%Q", ans)
        assert q is not None
        out = set_real_definition(text, "ans_5", ans.replace(q.group(1), f"({q.group(1)}) + 1", 1))
    elif tamper == "dropped-query":  # the last answer removed, with its lemma
        out = _drop_last_query(text)
    else:  # another run's answer to the same query (same design, another v_1)
        theirs = va.export_coq(_cert([HEADS[0], (HEADS[1][0], [-1, 2])], 2))
        value = real_definition(theirs, "ans_5").group(1)
        assert value != real_definition(text, "ans_5").group(1)
        out = set_real_definition(text, "ans_5", value)
    assert out != text
    assert not compile_exported(out).ok, tamper


@needs_coq
def test_admitted_is_caught_by_print_assumptions(text: str) -> None:
    start = text.index("Proof.", text.index("Lemma hold_7"))
    cheat = text[:start] + "Admitted." + text[text.index("Qed.", start) + 4 :]
    check = compile_exported(cheat)
    assert not check.ok and "hold_7" in check.log  # an axiom outside the whitelist


@needs_coq
def test_fewer_heads_file_compiles() -> None:
    check = compile_exported(va.export_coq(_cert(HEADS, 3)))
    assert check.ok, check.log[-2000:]
    assert set(check.axioms) <= formal.ALLOWED_AXIOMS

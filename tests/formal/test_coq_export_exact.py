"""Export of exact single-head certificates to Coq: ``run_identified`` from ``formal/CertExact.v``.

The file proves that the certified rational head gives exactly each recorded answer (a
rational or a closed form in exp of rationals) and, by Theorem 4.1 for every invertible
design, that every head giving those answers is the certified one; every tampered
variant must fail ``coqc``.
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

import pytest
import sympy
from coq_text import needs_coq, real_definition, replace_entry

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.cli_coq import cmd_verify_coq
from verified_attn.formal.coq_check import compile_exported
from verified_attn.formal.export_exact import coq_real


def _cert(W: list[list[Any]], v: list[Any], **affine: Any) -> dict[str, Any]:
    model = va.SingleHeadAttention(W, v, **affine)
    return va.learn_single_head(va.Oracle(model, "exact"), seed=0).certificate()


@pytest.fixture(scope="module")
def plain() -> dict[str, Any]:
    """d = 2; the probe (0, 1) has score -2 and answer (5 + 10 e^-2) / (1 + e^-2)."""
    return _cert([[1, -2], [3, 0]], [0, 5])


@pytest.fixture(scope="module")
def plain_text(plain: dict[str, Any]) -> str:
    return va.export_coq(plain)


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_export_states_the_recorded_answers(plain_text: str) -> None:
    assert plain_text.index("Theorem run_identified") < plain_text.index("Print Assumptions")
    assert "Admitted" not in plain_text and "admit" not in plain_text
    header = plain_text.split("*)")[0]
    assert "sha256" in header and "no denominator bound" in header
    assert "Definition D " not in plain_text  # exact answers: no denominator assumption
    assert "exact_plain_identified" in plain_text
    # the recorded closed form, transcribed as recorded
    ans = real_definition(plain_text, "ans_w_0_1").group(1)
    assert "exp (Q2R (-2)%Q)" in ans and "Q2R (10)%Q" in ans
    assert real_definition(plain_text, "ans_w_1_1").group(1) == "Q2R (15 # 2)%Q"


def test_coq_real_transcribes_and_refuses() -> None:
    exps: set[Any] = set()
    e = (sympy.Rational(3, 2) + (1 + sympy.exp(sympy.Rational(-1, 3))) ** 2) / (1 + sympy.E)
    text = coq_real(e, exps)
    assert "exp (Q2R (-1 # 3)%Q)" in text and "exp (Q2R (1)%Q)" in text and ") ^ 2" in text
    assert len(exps) == 2
    with pytest.raises(CertificateError, match="closed form"):
        coq_real(sympy.log(3), set())
    with pytest.raises(CertificateError, match="closed form"):
        coq_real(sympy.sqrt(2), set())


def test_export_refuses_non_exact_answers(plain: dict[str, Any]) -> None:
    bad = copy.deepcopy(plain)
    bad["answers"]["W"][0][0] = {"float": "0x1.0p+0"}
    with pytest.raises(CertificateError, match="exact answer"):
        va.export_coq(bad)
    floats = va.learn_single_head(
        va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), seed=0
    ).certificate()
    with pytest.raises(CertificateError, match="exact and certified single heads"):
        va.export_coq(floats)


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_cli_checks_an_exact_certificate(
    plain: dict[str, Any], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "exact.json"
    path.write_text(json.dumps(plain))
    assert cmd_verify_coq(argparse.Namespace(path=path)) == 0
    out = capsys.readouterr().out
    assert "Coq checked run_identified" in out
    axioms = out.split("axioms: ")[1].rstrip(")\n").split(", ")
    assert set(axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize("tamper", ["rational", "answer", "dropped-query", "dropped-v-query"])
def test_tampered_file_fails_coqc(plain_text: str, tamper: str) -> None:
    text = plain_text
    if tamper == "rational":  # a certified W entry changed
        text = replace_entry(text, "W_c", "0%nat, 1%nat", "(-3)")
    elif tamper == "answer":  # a recorded closed form changed (10 e^-2 -> 11 e^-2)
        ans = real_definition(text, "ans_w_0_1")
        text = text[: ans.start(1)] + ans.group(1).replace("(10)%Q", "(11)%Q") + text[ans.end(1) :]
    elif tamper == "dropped-query":  # a recorded answer removed from its table
        text = text.replace("  | 0%nat, 1%nat => ans_w_0_1\n", "")
    elif tamper == "dropped-v-query":
        text = text.replace("  | 1%nat => ans_v_1\n", "")
    assert text != plain_text
    assert not compile_exported(text).ok, tamper


@needs_coq
def test_admitted_is_caught_by_print_assumptions(plain_text: str) -> None:
    start = plain_text.index("Proof.", plain_text.index("Lemma ans_w_0_1_ok"))
    cheat = plain_text[:start] + "Admitted." + plain_text[plain_text.index("Qed.", start) + 4 :]
    check = compile_exported(cheat)
    assert not check.ok and "ans_w_0_1_ok" in check.log  # an axiom outside the whitelist


@needs_coq
@pytest.mark.slow
def test_tampered_certificate_and_another_run_fail(plain: dict[str, Any], plain_text: str) -> None:
    # The exporter transcribes (its auxiliary numbers follow the tampered head); Coq checks.
    bad = copy.deepcopy(plain)
    bad["result"]["parameters"]["W"][0][1] = {"rational": "-3/1"}
    assert not compile_exported(va.export_coq(bad)).ok
    # another run's recorded answer (same design, W_01 = -1) in place of this run's
    other = va.export_coq(_cert([[1, -1], [3, 0]], [0, 5]))
    theirs = real_definition(other, "ans_w_0_1").group(1)
    ours = real_definition(plain_text, "ans_w_0_1")
    assert theirs != ours.group(1)
    text = plain_text[: ours.start(1)] + theirs + plain_text[ours.end(1) :]
    assert not compile_exported(text).ok


@needs_coq
@pytest.mark.slow
def test_affine_run_is_proved_and_tampering_fails() -> None:
    data = _cert([[1, 2], [0, -1]], [2, -1], c=[1, 0], beta=3)
    text = va.export_coq(data)
    assert "exact_affine_identified" in text and "ans_c_0" in text
    check = compile_exported(text)
    assert check.ok, check.log[-2000:]
    assert set(check.axioms) <= formal.ALLOWED_AXIOMS
    for tampered in (
        replace_entry(text, "c_c", "0%nat", "(2)"),  # a certified c entry
        text.replace("Definition beta_c : Q := (3)%Q.", "Definition beta_c : Q := (4)%Q."),
        text.replace("  | 0%nat => ans_c_0\n", ""),  # a dropped [tc u_0; 0] answer
    ):
        assert tampered != text
        assert not compile_exported(tampered).ok

"""Export of single-head certificates to Coq: the file proves its run, a tampered one fails.

Tests that compile need ``coqc`` and Coq Interval and skip with the install command when
they are missing; the export itself (text, refusals) is tested everywhere.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
from coq_text import drop_entry, entry, needs_coq, replace_entry

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.cli_coq import cmd_verify_coq
from verified_attn.formal.coq_check import CoqCheck, compile_exported


def _cert(W: list[list[Any]], v: list[Any]) -> dict[str, Any]:
    model = va.SingleHeadAttention(W, v)
    return va.learn_single_head(va.Oracle(model, "certified"), seed=0).certificate()


@pytest.fixture(scope="module")
def one() -> dict[str, Any]:
    """d = 1 with a non-integer entry (W = 1/3): fast to compile."""
    return _cert([[Fraction(1, 3)]], [Fraction(5, 2)])


@pytest.fixture(scope="module")
def one_text(one: dict[str, Any]) -> str:
    return va.export_coq(one)


def _rational(coq: str) -> Fraction:
    num, _, den = coq.strip("()").partition(" # ")
    return Fraction(int(num), int(den or 1))


K00 = "0%nat, 0%nat"

# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_export_states_the_run(one_text: str) -> None:
    assert one_text.index("Theorem run_identified") < one_text.index("Print Assumptions")
    assert "(1 # 3)%Q" in entry(one_text, "W_c", K00).group(0)
    assert "Definition D : positive := 18446744073709551616%positive." in one_text
    assert "Admitted" not in one_text and "admit" not in one_text
    assert "sha256" in one_text.split("*)")[0]  # the header names the certificate


def test_export_refuses_what_it_cannot_state(one: dict[str, Any]) -> None:
    floats = va.learn_single_head(
        va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), seed=0
    ).certificate()
    with pytest.raises(CertificateError, match="exact and certified single heads"):
        va.export_coq(floats)
    no_d = copy.deepcopy(one)
    no_d["assumptions"] = []
    with pytest.raises(CertificateError, match="denominator bound D"):
        va.export_coq(no_d)
    other = copy.deepcopy(one)
    other["kind"] = "multi-head"
    with pytest.raises(CertificateError, match="covers"):
        va.export_coq(other)


def test_cli_without_coq_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    monkeypatch.setattr(formal, "coqc_path", lambda: None)
    import argparse

    assert cmd_verify_coq(argparse.Namespace(path=tmp_path / "c.json")) == 1
    err = capsys.readouterr().err
    assert "Coq is not available" in err and "libcoq-interval" in err


def test_coq_check_string() -> None:
    bad = CoqCheck(ok=False, theorem="run_identified", seconds=2.0, log="Error: boom")
    assert "did NOT prove" in str(bad) and "boom" in str(bad)


# ---------------------------------------------------------------------------------------
# With Coq: the run's theorem is proved, on the standard axioms only.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_d2_certificate_is_proved_on_whitelisted_axioms() -> None:
    check = compile_exported(va.export_coq(_cert([[1, -2], [3, 0]], [0, 5])))
    assert check.ok, check.log[-2000:]
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
def test_admitted_is_caught_by_print_assumptions(one_text: str) -> None:
    proof = one_text[one_text.index("Proof.", one_text.index("Theorem run_identified")) :]
    cheat = one_text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    check = compile_exported(cheat)
    assert not check.ok and "run_identified" in check.log


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "rational",  # the certified W entry changed
        "interval",  # the recorded answer interval moved off the answer
        "narrower-D",  # D below a certified denominator (3)
        "wider-D",  # D too large for the intervals to pin one rational
        "dropped-query",  # a recorded answer removed from its table
        "dropped-v-query",
    ],
)
def test_tampered_file_fails_coqc(one_text: str, tamper: str) -> None:
    text = one_text
    if tamper == "rational":
        text = replace_entry(text, "W_c", K00, "(2 # 3)")
    elif tamper == "interval":
        for table in ("w_lo", "w_hi"):
            q = _rational(entry(text, table, K00).group(1)) + Fraction(1, 1000)
            text = replace_entry(text, table, K00, f"({q.numerator} # {q.denominator})")
    elif tamper == "narrower-D":
        text = text.replace("18446744073709551616%positive", "2%positive")
    elif tamper == "wider-D":
        text = text.replace("18446744073709551616%positive", f"{2**300}%positive")
    elif tamper == "dropped-query":
        text = drop_entry(drop_entry(text, "w_lo", K00), "w_hi", K00)
    elif tamper == "dropped-v-query":
        text = drop_entry(drop_entry(text, "v_lo", "0%nat"), "v_hi", "0%nat")
    assert text != one_text
    check = compile_exported(text)
    assert not check.ok, tamper


@needs_coq
def test_another_runs_answers_fail(one_text: str) -> None:
    other = va.export_coq(_cert([[Fraction(1, 2)]], [Fraction(5, 2)]))
    text = one_text
    for table in ("w_lo", "w_hi"):
        text = replace_entry(text, table, K00, entry(other, table, K00).group(1))
    assert text != one_text
    assert not compile_exported(text).ok


@needs_coq
def test_tampered_certificate_exports_a_file_coq_refuses(one: dict[str, Any]) -> None:
    # The exporter transcribes; Coq is the checker: a wrong claimed result is not proved.
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["W"][0][0] = {"rational": "1/4"}
    assert not compile_exported(va.export_coq(bad)).ok

"""Export of certified skeleton (low-rank) runs to Coq: the file proves its run, a tampered
one fails.

The file's ``run_identified`` instantiates ``CertLowRankCert.lowrank_cert_identified``: a
changed certified rational, a moved answer ball, a D below a certified denominator, a D
too large for the logit brackets to pin one rational, a dropped probe and another run's
answer balls must each fail ``coqc``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import replace_entry
from test_coq_export_low_rank import RANK1, _cert

import verified_attn as va
from verified_attn import formal
from verified_attn.formal.coq_check import compile_exported

needs_coq = pytest.mark.skipif(
    not formal.coq_available(), reason=f"needs Coq and Coq Interval ({formal.COQ_INSTALL_HINT})"
)

V = [Fraction(3, 2), 0, 1]
BOUND = "18446744073709551616%positive"


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return _cert(RANK1, V, "certified")


@pytest.fixture(scope="module")
def cert_text(cert: dict[str, Any]) -> str:
    return va.export_coq(cert)


def _field(text: str, i: int, name: str) -> re.Match[str]:
    m = re.search(rf"Definition cp_{i} : cprobe := .*?{name} := (.*?);", text, re.S)
    assert m is not None, (i, name)
    return m


def _set_field(text: str, i: int, name: str, value: str) -> str:
    m = _field(text, i, name)
    return text[: m.start(1)] + value + text[m.end(1) :]


def test_certified_low_rank_export_states_the_run(cert: dict[str, Any], cert_text: str) -> None:
    assert cert["arithmetic"] == "certified" and cert["rank"] == 1
    assert "Admitted" not in cert_text and "admit" not in cert_text
    assert "apply (lowrank_cert_identified run D v_lo v_hi cprobes)" in cert_text
    assert f"Definition D : positive := {BOUND}." in cert_text
    # 2dr - r^2 = 5 learning probes, each with its answer ball
    listed = re.search(r"Definition cprobes : list cprobe := \[(.*)\]\.", cert_text)
    assert listed is not None and listed.group(1).count("cp_") == 5
    assert "measures_den_le D 3 W' cprobes" in cert_text


@needs_coq
def test_certified_rank_one_run_is_proved_on_whitelisted_axioms(cert_text: str) -> None:
    check = compile_exported(cert_text)
    assert check.ok, check.log[-2000:]
    assert check.theorem == "run_identified"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "rational",  # a certified W entry changed
        "interval",  # a probe's answer ball shrunk to its lower end, off the answer
        "narrower-D",  # D below v's certified denominator (2)
        "wider-D",  # D too large for the logit brackets to pin one rational
        "dropped-probe",  # a learning probe removed from the recorded list
    ],
)
def test_tampered_certified_low_rank_file_fails_coqc(cert_text: str, tamper: str) -> None:
    text = cert_text
    if tamper == "rational":
        text = replace_entry(text, "W_c", "1%nat, 1%nat", "(3)")
    elif tamper == "interval":
        text = _set_field(text, 1, "cphi", _field(text, 1, "cplo").group(1))
    elif tamper == "narrower-D":
        text = text.replace(BOUND, "1%positive")
    elif tamper == "wider-D":
        text = text.replace(BOUND, f"{2**300}%positive")
    elif tamper == "dropped-probe":
        text = re.sub(r"(Definition cprobes : list cprobe := \[)cp_\d+; ", r"\1", text)
    assert text != cert_text, tamper
    assert not compile_exported(text).ok, tamper


@needs_coq
def test_another_certified_runs_balls_fail(cert_text: str) -> None:
    other = va.export_coq(_cert([[2, 4, 0], [1, 2, 0], [1, 2, 0]], V, "certified"))
    text = cert_text
    for i in range(5):
        for name in ("cplo", "cphi"):
            text = _set_field(text, i, name, _field(other, i, name).group(1))
    assert text != cert_text
    assert not compile_exported(text).ok

"""Export of exact skeleton (low-rank) runs to Coq: the file proves its run, a tampered one fails.

The file's ``run_identified`` instantiates ``CertLowRank.lowrank_identified`` (from
``Skeleton.skeleton_determines``); a changed rational, measurement, answer or role, a
dropped probe, another run's measurements and ``Admitted`` must each fail ``coqc`` or
``Print Assumptions``.
"""

from __future__ import annotations

import copy
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import entry, needs_coq, replace_entry

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

RANK1 = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]
RANK2 = [[1, 0, 1, 2], [0, 1, 1, -1], [1, 1, 2, 1], [2, -1, 1, 5]]


def _cert(W: list[list[Any]], v: list[Any], arithmetic: str = "exact") -> dict[str, Any]:
    oracle = va.Oracle(va.SingleHeadAttention(W, v), arithmetic)
    return va.learn_low_rank(oracle, seed=0).certificate()


@pytest.fixture(scope="module")
def one() -> dict[str, Any]:
    return _cert(RANK1, [1, 0, 1])


@pytest.fixture(scope="module")
def one_text(one: dict[str, Any]) -> str:
    return va.export_coq(one)


def _measurement(text: str, i: int) -> re.Match[str]:
    m = re.search(rf"Definition probe_{i} : probe := .*?pm := (.*?)%Q \|\}}\.", text)
    assert m is not None, i
    return m


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_low_rank_export_states_the_run(one: dict[str, Any], one_text: str) -> None:
    assert one_text.index("Theorem run_identified") < one_text.index("Print Assumptions")
    assert "Admitted" not in one_text and "admit" not in one_text
    assert "apply (lowrank_identified run)" in one_text and "spanned 3 1 (rmat B)" in one_text
    assert "sha256" in one_text.split("*)")[0]
    # 2dr - r^2 = 5 learning probes with their roles, and one rank check
    learning = re.search(r"Definition learning : list \(probe \* role\) := \[(.*)\]\.", one_text)
    assert learning is not None and learning.group(1).count("probe_") == 5
    assert "Definition rank_checks : list probe := [probe_5]." in one_text
    assert entry(one_text, "W_c", "0%nat, 1%nat").group(1) == "(4)"


def test_low_rank_export_refuses_what_it_cannot_state(one: dict[str, Any]) -> None:
    floating = _cert(RANK1, [1, 0, 1], "float")
    with pytest.raises(CertificateError, match="exact skeleton runs here, not float"):
        va.export_coq(floating)
    bad = copy.deepcopy(one)
    bad["method"] = "nuclear"
    with pytest.raises(CertificateError, match="nuclear"):
        va.export_coq(bad)
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["W"][0][0] = {"arb": ["2", "0"]}
    with pytest.raises(CertificateError, match="exact rationals"):
        va.export_coq(bad)


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_rank_one_run_is_proved_on_whitelisted_axioms(one_text: str) -> None:
    check = compile_exported(one_text)
    assert check.ok, check.log[-2000:]
    assert check.theorem == "run_identified"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
def test_rank_two_run_is_proved() -> None:
    data = _cert(RANK2, [1, 2, 0, -1])
    assert data["rank"] == 2
    check = compile_exported(va.export_coq(data))
    assert check.ok, check.log[-2000:]


@needs_coq
def test_admitted_low_rank_is_caught(one_text: str) -> None:
    proof = one_text[one_text.index("Proof.", one_text.index("Theorem run_identified")) :]
    cheat = one_text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    check = compile_exported(cheat)
    assert not check.ok and "run_identified" in check.log


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "rational",  # a certified W entry changed
        "measurement",  # a recorded measurement moved
        "rank-check",  # the rank check's measurement moved: W_c no longer has it
        "v-answer",  # a recorded answer to [e_i] changed
        "dropped-probe",  # a learning probe removed from the list
        "role",  # a basis-column probe declared a pivot-row probe
        "pivot-inverse",  # the pivot block's inverse zeroed
    ],
)
def test_tampered_low_rank_file_fails_coqc(one_text: str, tamper: str) -> None:
    text = one_text
    if tamper == "rational":
        text = replace_entry(text, "W_c", "1%nat, 1%nat", "(3)")
    elif tamper in ("measurement", "rank-check"):
        m = _measurement(text, 1 if tamper == "measurement" else 5)
        text = text[: m.start(1)] + "(7 # 3)" + text[m.end(1) :]
    elif tamper == "v-answer":
        text = replace_entry(text, "v_ans", "1%nat", "(1 # 2)")
    elif tamper == "dropped-probe":
        text = text.replace("(probe_1, inl 0%nat); ", "")
    elif tamper == "role":
        text = text.replace("(probe_1, inl 0%nat)", "(probe_1, inr 0%nat)")
    elif tamper == "pivot-inverse":
        text = replace_entry(text, "N_inv", "0%nat, 0%nat", "(0)")
    assert text != one_text, tamper
    check = compile_exported(text)
    assert not check.ok, tamper


@needs_coq
def test_another_runs_measurements_fail(one_text: str) -> None:
    other = va.export_coq(_cert([[2, 4, 0], [1, 2, 0], [1, 2, 0]], [1, 0, 1]))
    text = one_text
    for i in range(5):
        value = _measurement(other, i).group(1)
        m = _measurement(text, i)
        text = text[: m.start(1)] + value + text[m.end(1) :]
    assert text != one_text
    assert not compile_exported(text).ok


@needs_coq
def test_tampered_low_rank_certificate_exports_a_file_coq_refuses(one: dict[str, Any]) -> None:
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["W"][2][2] = {"rational": "1/4"}
    assert not compile_exported(va.export_coq(bad)).ok
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["v"][0] = {"rational": str(Fraction(3, 2))}
    assert not compile_exported(va.export_coq(bad)).ok


def test_low_rank_export_refuses_too_many_unknowns() -> None:
    full = _cert([[1 if i == j else 0 for j in range(6)] for i in range(6)], [1] * 6)
    assert full["rank"] == 6  # 2dr = 72 unknowns
    with pytest.raises(CertificateError, match="2dr <= 64"):
        va.export_coq(full)

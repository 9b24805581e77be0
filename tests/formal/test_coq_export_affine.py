"""Export of affine single-head certificates to Coq: the run is proved, a tampered one fails.

The affine head's file states (W, c, v, beta), the d^2 + 2d + 1 recorded answers and proves
``run_identified`` from ``formal/CertAffine.v``; every tampered variant must fail ``coqc``.
"""

from __future__ import annotations

import copy
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import drop_entry, entry, needs_coq, replace_entry

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

K0 = "0%nat"
K00 = "0%nat, 0%nat"
D_BOUND = "18446744073709551616%positive"


def _cert(W: list[list[Any]], v: list[Any], c: list[Any], beta: Any) -> dict[str, Any]:
    model = va.SingleHeadAttention(W, v, c=c, beta=beta)
    return va.learn_single_head(va.Oracle(model, "certified"), seed=0).certificate()


@pytest.fixture(scope="module")
def one() -> dict[str, Any]:
    """d = 1 with non-integer entries: fast to compile."""
    return _cert([[Fraction(1, 3)]], [Fraction(5, 2)], [Fraction(-1, 2)], Fraction(1, 4))


@pytest.fixture(scope="module")
def one_text(one: dict[str, Any]) -> str:
    return va.export_coq(one)


def _rational(coq: str) -> Fraction:
    num, _, den = coq.strip("()").partition(" # ")
    return Fraction(int(num), int(den or 1))


def _coq(q: Fraction) -> str:
    return f"({q.numerator} # {q.denominator})"


def _shift(text: str, table: str, key: str, by: Fraction) -> str:
    return replace_entry(text, table, key, _coq(_rational(entry(text, table, key).group(1)) + by))


def _scalar(text: str, name: str) -> re.Match[str]:
    m = re.search(rf"Definition {name} : Q := (.*?)%Q\.", text)
    assert m is not None, name
    return m


def _set_scalar(text: str, name: str, value: str) -> str:
    m = _scalar(text, name)
    return text[: m.start(1)] + value + text[m.end(1) :]


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_affine_export_states_the_run(one_text: str) -> None:
    assert one_text.index("Theorem run_identified") < one_text.index("Print Assumptions")
    assert "(1 # 3)%Q" in entry(one_text, "W_c", K00).group(0)
    assert "(-1 # 2)%Q" in entry(one_text, "c_c", K0).group(0)
    assert _scalar(one_text, "beta_c").group(1) == "(1 # 4)"
    assert "apply (affine_identified run)" in one_text
    assert "Admitted" not in one_text and "admit" not in one_text
    assert "\n       4 recorded queries ([0]" in one_text  # d^2 + 2d + 1 = 4 at d = 1


def test_affine_export_refuses_a_certificate_without_c(one: dict[str, Any]) -> None:
    bad = copy.deepcopy(one)
    del bad["answers"]["c"]
    with pytest.raises(CertificateError, match=r"answers\.c"):
        va.export_coq(bad)
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["beta"] = {"arb": ["1/4", "0/1"]}
    with pytest.raises(CertificateError, match="exact rationals"):
        va.export_coq(bad)


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_affine_d2_is_proved_on_whitelisted_axioms() -> None:
    check = compile_exported(va.export_coq(_cert([[1, -2], [3, 0]], [0, 5], [1, 2], 3)))
    assert check.ok, check.log[-2000:]
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
def test_affine_d1_is_proved(one_text: str) -> None:
    check = compile_exported(one_text)
    assert check.ok, check.log[-2000:]


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "W",  # the certified W entry changed
        "c",  # the certified c entry changed
        "beta",  # the certified beta changed
        "v",  # the certified v changed
        "beta-interval",  # the answer to [0] moved off the answer
        "c-interval",  # the answer to [tc u; 0] moved off the answer
        "w-interval",  # the answer to [e_j + t u_k; e_j] moved off the answer
        "narrower-D",  # D below a certified denominator (3)
        "wider-D",  # D too large for the intervals to pin one rational
        "dropped-c-query",  # a recorded answer to [tc u_k; 0] removed
        "admitted",  # the proof replaced by Admitted (caught by Print Assumptions)
    ],
)
def test_tampered_affine_file_fails_coqc(one_text: str, tamper: str) -> None:
    text = one_text
    if tamper == "W":
        text = replace_entry(text, "W_c", K00, "(2 # 3)")
    elif tamper == "c":
        text = replace_entry(text, "c_c", K0, "(-1 # 3)")
    elif tamper == "beta":
        text = _set_scalar(text, "beta_c", "(1 # 5)")
    elif tamper == "v":
        text = replace_entry(text, "v_c", K0, "(5 # 3)")
    elif tamper == "beta-interval":
        for name in ("b_lo", "b_hi"):
            q = _rational(_scalar(text, name).group(1)) + Fraction(1, 1000)
            text = _set_scalar(text, name, _coq(q))
    elif tamper == "c-interval":
        text = _shift(_shift(text, "c_lo", K0, Fraction(1, 1000)), "c_hi", K0, Fraction(1, 1000))
    elif tamper == "w-interval":
        text = _shift(_shift(text, "w_lo", K00, Fraction(1, 1000)), "w_hi", K00, Fraction(1, 1000))
    elif tamper == "narrower-D":
        text = text.replace(D_BOUND, "2%positive")
    elif tamper == "wider-D":
        text = text.replace(D_BOUND, f"{2**300}%positive")
    elif tamper == "dropped-c-query":
        text = drop_entry(drop_entry(text, "c_lo", K0), "c_hi", K0)
    elif tamper == "admitted":
        proof = text[text.index("Proof.", text.index("Theorem run_identified")) :]
        text = text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    assert text != one_text
    check = compile_exported(text)
    assert not check.ok, tamper


@needs_coq
def test_another_runs_c_answers_fail(one_text: str) -> None:
    # Same W, v, beta, another c: its recorded answers to [tc u; 0] pin another c.
    other = va.export_coq(
        _cert([[Fraction(1, 3)]], [Fraction(5, 2)], [Fraction(1, 2)], Fraction(1, 4))
    )
    text = one_text
    for table in ("c_lo", "c_hi"):
        text = replace_entry(text, table, K0, entry(other, table, K0).group(1))
    assert text != one_text
    assert not compile_exported(text).ok


@needs_coq
def test_tampered_affine_certificate_exports_a_file_coq_refuses(one: dict[str, Any]) -> None:
    bad = copy.deepcopy(one)
    bad["result"]["parameters"]["c"][0] = {"rational": "-1/3"}
    assert not compile_exported(va.export_coq(bad)).ok

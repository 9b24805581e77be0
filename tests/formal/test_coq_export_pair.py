"""Export of Prop 7.1 counterexample pairs to Coq: the pair is one map, a tampered one fails.

Each family's file proves ``pair_same_function`` (the parameter lists differ; the outputs
agree for every N and X) from ``formal/CertPair.v``; edited rationals, a wrong family, two
identical models and ``Admitted`` must all fail ``coqc`` or ``Print Assumptions``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from coq_text import needs_coq

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

KINDS = ("permutation", "shared-score-split", "dead-head", "cancelling-values")


def _pair(kind: str, d: int = 2) -> dict[str, Any]:
    heads = 1 if kind == "dead-head" else 3
    return va.counterexample("multi-head", d=d, heads=heads, kind=kind, seed=1).certificate()


def _set(text: str, table: str, key: str, value: str) -> str:
    block = re.search(rf"Definition {table} : q(?:mat|vec) := .*?end\.", text, re.S)
    assert block is not None, table
    m = re.compile(rf"  \| {key} => (.*?)%Q\n").search(text, block.start(), block.end())
    assert m is not None, (table, key)
    return text[: m.start(1)] + value + text[m.end(1) :]


def test_pair_export_states_both_models() -> None:
    text = va.export_coq(_pair("shared-score-split"))
    assert "Theorem pair_same_function" in text and "Admitted" not in text
    assert "Definition S1_v : qvec" in text and "apply (pair_shared_split 2 " in text
    assert text.index("Theorem pair_same_function") < text.index("Print Assumptions")


def test_pair_export_refuses_what_it_cannot_state() -> None:
    data = _pair("permutation")
    bad = copy.deepcopy(data)
    bad["counterexample_kind"] = "rotation"
    with pytest.raises(CertificateError, match="kinds"):
        va.export_coq(bad)
    bad = copy.deepcopy(data)
    bad["first"][0]["c"] = ["0/1", "0/1"]
    with pytest.raises(CertificateError, match="bias-free"):
        va.export_coq(bad)
    bad = copy.deepcopy(data)
    bad["model_class"] = "single-head"
    with pytest.raises(CertificateError, match="multi-head"):
        va.export_coq(bad)


@needs_coq
@pytest.mark.parametrize("kind", KINDS)
def test_each_family_is_proved_on_whitelisted_axioms(kind: str) -> None:
    check = compile_exported(va.export_coq(_pair(kind)))
    assert check.ok, check.log[-2000:]
    assert check.theorem == "pair_same_function"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize(
    ("kind", "tamper"),
    [
        ("permutation", "S0_W"),  # a rotated head's W no longer the first model's
        ("shared-score-split", "S1_v"),  # v1' + v2' no longer v1 + v2
        ("shared-score-split", "S1_W"),  # the second split head reads another W
        ("dead-head", "F0_v"),  # the dead head is alive
        ("cancelling-values", "S1_v"),  # -u2 no longer the negation of u2
        ("cancelling-values", "F2_v"),  # the shared rest differs
    ],
)
def test_tampered_pair_fails_coqc(kind: str, tamper: str) -> None:
    text = va.export_coq(_pair(kind))
    key = "0%nat, 0%nat" if tamper.endswith("_W") else "0%nat"
    bad = _set(text, tamper, key, "(1234 # 7)")
    assert bad != text
    assert not compile_exported(bad).ok, (kind, tamper)


@needs_coq
def test_wrong_family_fails_coqc() -> None:
    data = _pair("shared-score-split")
    data["counterexample_kind"] = "permutation"
    assert not compile_exported(va.export_coq(data)).ok


@needs_coq
def test_two_identical_models_are_not_a_counterexample() -> None:
    data = _pair("shared-score-split")
    data["second"] = copy.deepcopy(data["first"])  # every family check still holds (v' = v)
    text = va.export_coq(data)
    assert not compile_exported(text).ok
    # Without the conjunct "the parameter lists differ" the same file is proved: that
    # conjunct is what fails.
    same_map_only = text.replace("  qheads_agree 2 first_model second_model = false /\\\n", "")
    same_map_only = same_map_only.replace("  split; [vm_compute; reflexivity|].\n", "")
    assert "first_model second_model = false" not in same_map_only
    check = compile_exported(same_map_only)
    assert check.ok, check.log[-1500:]


@needs_coq
def test_admitted_pair_is_caught() -> None:
    text = va.export_coq(_pair("dead-head"))
    proof = text[text.index("Proof.", text.index("Theorem pair_same_function")) :]
    cheat = text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    check = compile_exported(cheat)
    assert not check.ok and "pair_same_function" in check.log

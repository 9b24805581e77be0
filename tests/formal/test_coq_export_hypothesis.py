"""Export of the hypothesis counterexamples that hold on every sequence: proved, tampering fails.

``thm-4.1`` v-zero, ``app-b`` positive-scale and ``transformer`` v-eff-zero export as
theorems of ``formal/CertHyp.v`` applied to the pair's rationals; an edited W, v, scale,
FFN weight or ray, two identical models and ``Admitted`` must each fail.
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

PAIRS = {
    "v-zero": ("thm-4.1", "pair_same_function"),
    "positive-scale": ("app-b", "pair_same_sign"),
    "v-eff-zero": ("transformer", "pair_same_function"),
}


def _data(kind: str, d: int = 2) -> dict[str, Any]:
    return va.counterexample(PAIRS[kind][0], kind=kind, d=d, seed=1).certificate()


def _set(text: str, table: str, key: str, value: str) -> str:
    block = re.search(rf"Definition {table} : q(?:mat|vec) := .*?end\.", text, re.S)
    assert block is not None, table
    m = re.compile(rf"  \| {key} => (.*?)%Q\n").search(text, block.start(), block.end())
    assert m is not None, (table, key)
    return text[: m.start(1)] + value + text[m.end(1) :]


def test_hypothesis_export_states_the_pair() -> None:
    text = va.export_coq(_data("positive-scale"))
    assert "Theorem pair_same_sign" in text and "Admitted" not in text
    assert "Definition c_scale : Q := (3 # 2)%Q." in text  # the certificate's 3/2 v
    assert text.index("Theorem pair_same_sign") < text.index("Print Assumptions")
    text = va.export_coq(_data("v-eff-zero"))
    assert "transformer 2 2 2 N X (rmat S_W)" in text


def test_hypothesis_export_refuses_pairs_within_a_tolerance() -> None:
    data = va.counterexample("thm-6.1", kind="margin", d=2, seed=1).certificate()
    with pytest.raises(CertificateError, match="within a tolerance"):
        va.export_coq(data)
    bad = _data("v-zero")
    bad["first"]["class"] = "one-layer-transformer"
    with pytest.raises(CertificateError, match="single-head"):
        va.export_coq(bad)


@needs_coq
@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_each_hypothesis_pair_is_proved_on_whitelisted_axioms(kind: str) -> None:
    check = compile_exported(va.export_coq(_data(kind, d=3)))
    assert check.ok, check.log[-2000:]
    assert check.theorem == PAIRS[kind][1]
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize(
    ("kind", "table", "key", "value"),
    [
        ("v-zero", "F_v", "0%nat", "(1 # 2)"),  # v no longer 0: the heads differ
        ("positive-scale", "S_v", "1%nat", "(5)"),  # v2 no longer c v1
        ("positive-scale", "S_W", "0%nat, 1%nat", "(9)"),  # the two W differ
        ("v-eff-zero", "F_A", "0%nat, 1%nat", "(7)"),  # a neuron off the ray
        ("v-eff-zero", "S_w", "1%nat", "(1)"),  # the neurons no longer cancel
        ("v-eff-zero", "F_s", "1%nat", "(5)"),  # a wrong auxiliary scale
    ],
)
def test_tampered_hypothesis_pair_fails_coqc(kind: str, table: str, key: str, value: str) -> None:
    text = va.export_coq(_data(kind))
    bad = _set(text, table, key, value)
    assert bad != text
    assert not compile_exported(bad).ok, (kind, table)


@needs_coq
def test_wrong_or_negative_scale_fails() -> None:
    text = va.export_coq(_data("positive-scale"))
    assert not compile_exported(text.replace("c_scale : Q := (3 # 2)%Q", "c_scale : Q := (2)%Q")).ok
    data = _data("positive-scale")
    data["second"]["v"] = [
        f"{-2 * int(x.split('/')[0])}/{x.split('/')[1]}" for x in data["first"]["v"]
    ]
    assert not compile_exported(va.export_coq(data)).ok  # v2 = -2 v1: the signs flip


@needs_coq
def test_identical_models_are_not_a_counterexample() -> None:
    data = _data("v-eff-zero")
    data["second"] = copy.deepcopy(data["first"])
    assert not compile_exported(va.export_coq(data)).ok


@needs_coq
def test_admitted_hypothesis_pair_is_caught() -> None:
    text = va.export_coq(_data("v-zero"))
    proof = text[text.index("Proof.", text.index("Theorem pair_same_function")) :]
    cheat = text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    check = compile_exported(cheat)
    assert not check.ok and "pair_same_function" in check.log


@needs_coq
def test_another_runs_second_model_fails() -> None:
    data = _data("positive-scale")
    other = va.counterexample("app-b", kind="positive-scale", d=2, seed=2).certificate()
    assert other["second"]["W"] != data["first"]["W"]
    data["second"] = other["second"]  # another run's (W, c v): W differs
    assert not compile_exported(va.export_coq(data)).ok

"""Export of the multi-head Transformer's canonical-form pairs: proved, tampering fails.

The four ``transformer`` counterexamples (dead-neuron, always-on-neuron, killed-head,
colliding-heads) export as theorems of ``formal/CertTransformerHyp.v`` applied to the
pair's rationals. Each tamper below breaks the one condition its family rests on (a
neuron no longer dead, a constant no longer in b, a head the FFN now sees, heads that no
longer share W, a value that is no longer the sum), and must fail ``coqc``; so must two
identical models, a wrong head index and ``Admitted``. The ffn-bias witness (a biased
FFN whose odd part is no single head's) exports with ``hyp_ffn_bias``; a wrong value of D
and biases set to 0 (D is then linear) must fail.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from coq_text import needs_coq, replace_entry

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

KINDS = ("dead-neuron", "always-on-neuron", "killed-head", "colliding-heads")


def _data(kind: str, d: int = 2, seed: int = 1) -> dict[str, Any]:
    return va.counterexample("transformer", kind=kind, d=d, seed=seed).certificate()


def test_transformer_pair_export_states_the_pair() -> None:
    text = va.export_coq(_data("dead-neuron"))
    assert "tf_agree 2 2 2 3 2 2 F G = false" in text  # 2 neurons against 3, two heads each
    assert "tf 2 2 2 2 N X F = tf 2 2 3 2 N X G" in text
    assert "apply (tf_dead_neuron 2 2 2 2 F G)" in text and "Admitted" not in text
    text = va.export_coq(_data("colliding-heads"))
    assert "tf 2 2 2 2 N X F = tf 2 2 2 1 N X G" in text  # two heads against one
    assert "apply (tf_colliding_heads 2 2 2 1 0 F G)" in text
    assert text.index("Theorem pair_same_function") < text.index("Print Assumptions")


def test_transformer_pair_export_refuses_other_shapes() -> None:
    bad = _data("killed-head")
    bad["first"]["class"] = "one-layer-transformer"
    with pytest.raises(CertificateError, match="one-layer-transformer-multi-head"):
        va.export_coq(bad)
    big = _data("dead-neuron")
    big["second"]["A"] = [row + ["0/1"] * 7 for row in big["second"]["A"]]  # m = 10
    with pytest.raises(CertificateError, match="m <= 8"):
        va.export_coq(big)
    witness = _data("ffn-bias")
    witness["sequences"][2] = witness["sequences"][0]  # [x] where [2x] belongs
    with pytest.raises(CertificateError, match=r"\[x\], \[-x\], \[2x\], \[-2x\]"):
        va.export_coq(witness)


@needs_coq
@pytest.mark.parametrize("kind", KINDS)
def test_each_transformer_pair_is_proved_on_whitelisted_axioms(kind: str) -> None:
    check = compile_exported(va.export_coq(_data(kind, d=3, seed=4)))
    assert check.ok, check.log[-2000:]
    assert check.theorem == "pair_same_function"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.parametrize(
    ("kind", "edits"),
    [
        ("dead-neuron", [("G_A", "1%nat, 2%nat", "(1)")]),  # the neuron now has an input
        ("dead-neuron", [("G_a", "2%nat", "(1)")]),  # a positive bias: always active
        ("dead-neuron", [("G_w", "0%nat", "(5)")]),  # a shared neuron's weight differs
        ("always-on-neuron", [("F_w", "2%nat", "(4)")]),  # 4 * 2 is not the 6 in b
        ("always-on-neuron", [("F_a", "2%nat", "(-2)")]),  # never active: no constant
        ("killed-head", [("F1_V", "0%nat, 0%nat", "(5)"), ("G1_V", "0%nat, 0%nat", "(5)")]),
        ("killed-head", [("G0_W", "0%nat, 1%nat", "(9)")]),  # a seen head's W differs
        ("colliding-heads", [("F1_W", "1%nat, 0%nat", "(9)")]),  # two softmaxes now
        ("colliding-heads", [("G0_V", "0%nat, 0%nat", "(9)")]),  # not V_1 + V_2
    ],
)
def test_tampered_transformer_pair_fails_coqc(kind: str, edits: list[tuple[str, str, str]]) -> None:
    text = va.export_coq(_data(kind))
    bad = text
    for table, key, value in edits:
        bad = replace_entry(bad, table, key, value)
    assert bad != text
    assert not compile_exported(bad).ok, (kind, edits)


@needs_coq
def test_identical_transformers_are_not_a_counterexample() -> None:
    data = _data("killed-head")
    data["second"] = copy.deepcopy(data["first"])
    assert not compile_exported(va.export_coq(data)).ok


@needs_coq
def test_wrong_head_index_and_admitted_fail() -> None:
    text = va.export_coq(_data("killed-head"))
    assert "apply (tf_killed_head 2 2 2 2 1 F G)" in text
    assert not compile_exported(text.replace("2 2 2 2 1 F G", "2 2 2 2 0 F G")).ok
    proof = text[text.index("Proof.", text.index("Theorem pair_same_function")) :]
    check = compile_exported(text.replace(proof[: proof.index("Qed.") + 4], "Admitted."))
    assert not check.ok and "pair_same_function" in check.log


def test_ffn_bias_witness_states_its_values() -> None:
    text = va.export_coq(_data("ffn-bias"))
    # the certificate's own statement: D(x) = 1 and D(2x) = 5/2
    assert "Qeq_bool (qodd 2 2 A_ffn a_ffn w_ffn x_w) (1)%Q = true" in text
    assert "Qeq_bool (qodd 2 2 A_ffn a_ffn w_ffn (qtwice x_w)) (5 # 2)%Q = true" in text


@needs_coq
def test_ffn_bias_witness_is_proved_and_tampering_fails() -> None:
    text = va.export_coq(_data("ffn-bias", d=3, seed=4))
    check = compile_exported(text)
    assert check.ok, check.log[-2000:]
    assert check.theorem == "ffn_bias_witness" and set(check.axioms) <= formal.ALLOWED_AXIOMS
    text = va.export_coq(_data("ffn-bias"))
    wrong = text.replace("(qtwice x_w)) (5 # 2)%Q = true", "(qtwice x_w)) (3)%Q = true")
    assert wrong != text and not compile_exported(wrong).ok
    data = _data("ffn-bias")
    data["first"]["c"] = ["0/1"] * len(data["first"]["c"])  # values restated by the exporter
    unbiased = va.export_coq(data)
    assert "Qeq_bool (qodd 2 2 A_ffn a_ffn w_ffn (qtwice x_w)) (5 # 2)" not in unbiased
    assert not compile_exported(unbiased).ok  # g positively homogeneous: D(2x) = 2 D(x)
    proof = text[text.index("Proof.", text.index("Theorem ffn_bias_witness")) :]
    assert not compile_exported(text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")).ok

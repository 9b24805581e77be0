"""The several-head, biased-FFN reduction in Coq: the proofs stand, and wrong statements fail.

``transformer_heads_reduction`` (formal/TransformerHeads.v) gives each head the effective
value V_h A_s w_o and adds sum_{k in s} w_k a_k + b; the same statement with the value V_h w_o
(no A), with the unmasked w_o (inactive neurons kept) or without the FFN bias a is rejected
by ``coqc``, and so is a length-1 identity that drops the bias a or keeps only one head.
The first of these is also refuted in Coq: on one token, one head and one neuron (A = 2)
the value V_h w_o gives 1 where T is 2.
"""

from __future__ import annotations

import re

import pytest
from coq_text import compiles, needs_coq

from verified_attn import formal

PRELUDE = (
    "From Coq Require Import Reals Lra Lia.\n"
    "From VerifiedAttn Require Import Defs Softmax Transformer TransformerHeads.\n"
    "Open Scope R_scope.\n"
)


def _statement(name: str) -> str:
    """The theorem's statement (up to its Proof.), renamed ``variant``."""
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "TransformerHeads.v").read_text()
    m = re.search(rf"Theorem {name}\b.*?Proof\.", text, re.S)
    assert m is not None, name
    return m.group(0).replace(f"Theorem {name}", "Theorem variant")


def _compiles(statement: str, proof: str) -> bool:
    return compiles(PRELUDE, statement + "\n" + proof + "\n")


# Applying the proved theorem: closes the goal iff the variant says the same thing.
REDUCTION_PROOF = "  intros. apply (transformer_heads_reduction d e m H N X Ws cs Vs A a w_o b s).\n  assumption.\nQed."
LENGTH1_PROOF = "  intros. apply transformer_heads_length1.\nQed."


@needs_coq
def test_the_statements_compile_as_written() -> None:
    assert _compiles(_statement("transformer_heads_reduction"), REDUCTION_PROOF)
    assert _compiles(_statement("transformer_heads_length1"), LENGTH1_PROOF)


@needs_coq
@pytest.mark.parametrize(
    ("part", "wrong"),
    [
        # The effective value without the gradient's factor A (V_h w_o, not V_h A_s w_o).
        (
            "(v_eff e m (Vs h) A (mask s w_o))",
            "(fun i => sum e (fun j => Vs h i j * mask s w_o j))",
        ),
        # The inactive neurons' weights kept: V_h A w_o.
        ("(v_eff e m (Vs h) A (mask s w_o))", "(v_eff e m (Vs h) A w_o)"),
        # The constant without the active neurons' biases.
        ("+ piece_const m s a w_o b.", "+ b."),
    ],
)
def test_a_wrong_reduction_is_rejected(part: str, wrong: str) -> None:
    statement = _statement("transformer_heads_reduction")
    assert statement.count(part) == 1
    assert not _compiles(statement.replace(part, wrong), REDUCTION_PROOF)


@needs_coq
@pytest.mark.parametrize(
    ("part", "wrong"),
    [
        ("ffn_biased e m A a w_o b", "ffn_biased e m A zero_vec w_o b"),  # the bias a dropped
        ("sum H (fun h => sum d (fun i => x i * Vs h i j))", "sum d (fun i => x i * Vs O i j)"),
    ],
)
def test_a_wrong_length1_identity_is_rejected(part: str, wrong: str) -> None:
    statement = _statement("transformer_heads_length1")
    assert statement.count(part) == 1
    assert not _compiles(statement.replace(part, wrong), LENGTH1_PROOF)


SOFTMAX_ONE = """
Lemma softmax_one : forall s, softmax 1 s O = 1.
Proof. intros. unfold softmax. rewrite sum_one. pose proof (exp_pos (s O)). field. lra. Qed.
"""

# One token x = 1, one head (W = 0, c = 0, V = 1), one active neuron A = 2, a = 0, w_o = 1,
# b = 0: T = 2 = the true value V A w_o; the variant's value V w_o gives 1.
REFUTE = """
Lemma refute : ~ ({BODY}).
Proof.
  intro Hv.
  set (one := fun (_ : nat) => 1). set (Ws := fun (_ : nat) (_ _ : nat) => 0).
  set (Vs := fun (_ : nat) (_ _ : nat) => 1). set (A := fun (_ _ : nat) => 2).
  set (s := fun (_ : nat) => true).
  assert (Hp : in_piece 1 1 A zero_vec s
                 (heads_readout 1 1 1 (seq1 one) Ws (fun _ => zero_vec) Vs)).
  { intros k Hk. unfold s, pre_activation, heads_readout, head_readout.
    rewrite !sum_one, softmax_one. unfold A, Vs, seq1, one, zero_vec. simpl. lra. }
  pose proof (Hv 1%nat 1%nat 1%nat 1%nat 1%nat (seq1 one) Ws (fun _ => zero_vec) Vs A
                zero_vec one 0 s Hp) as H1.
  pose proof (transformer_heads_reduction 1 1 1 1 1 (seq1 one) Ws (fun _ => zero_vec) Vs A
                zero_vec one 0 s Hp) as H2.
  rewrite H1 in H2. apply Rplus_eq_reg_r in H2. rewrite !sum_one in H2.
  unfold attention_affine in H2. rewrite !sum_one, !softmax_one in H2.
  unfold dot, v_eff, mask, s, seq1, one, Vs, A in H2. simpl in H2. lra.
Qed.
"""


@needs_coq
def test_the_value_without_the_gradient_is_refuted() -> None:
    statement = _statement("transformer_heads_reduction")
    body = statement.removeprefix("Theorem variant : ").removesuffix(".\nProof.")
    assert body != statement and body.startswith("forall")
    part = "(v_eff e m (Vs h) A (mask s w_o))"
    wrong = "(fun i => sum e (fun j => Vs h i j * mask s w_o j))"
    assert _compiles(SOFTMAX_ONE, REFUTE.replace("{BODY}", body.replace(part, wrong)))
    # The same script cannot refute the true statement.
    assert not _compiles(SOFTMAX_ONE, REFUTE.replace("{BODY}", body))

"""The several-head, biased-FFN reduction in Coq: the proofs stand, and wrong statements fail.

``transformer_heads_reduction`` (formal/TransformerHeads.v) gives each head the effective
value V_h A_s w_o and adds sum_{k in s} w_k a_k + b; the same statement with the value V_h w_o
(no A), with the unmasked w_o (inactive neurons kept) or without the FFN bias a is rejected
by ``coqc``, and so is a length-1 identity that drops the bias a or keeps only one head.
"""

from __future__ import annotations

import re

import pytest

from verified_attn import formal

needs_coq = pytest.mark.skipif(
    not formal.coq_available(), reason=f"needs Coq and Coq Interval ({formal.COQ_INSTALL_HINT})"
)

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
    directory = formal.build().directory
    assert directory is not None
    proc = formal.run_coq(PRELUDE + statement + "\n" + proof + "\n", directory)
    out = proc.stdout + proc.stderr
    # Rejected for being false, not for a typo in the variant.
    assert "Syntax error" not in out and "was not found" not in out, out
    return proc.returncode == 0


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

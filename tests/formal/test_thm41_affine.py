"""Theorem 4.1's affine form in Coq: the proof stands, and fails without its hypotheses.

``thm41_affine_identifiable`` (formal/Thm41Affine.v) needs an invertible design, nonzero
scales and u_k^T v != 0; the same proof script run on a statement missing one of them
must be rejected by ``coqc``.
"""

from __future__ import annotations

import re

import pytest
from coq_text import compiles, needs_coq

from verified_attn import formal

PRELUDE = (
    "From Coq Require Import Reals Lra Lia.\n"
    "From VerifiedAttn Require Import Defs Softmax CertHead Thm41Affine.\n"
    "Open Scope R_scope.\n"
)


def _variant() -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "Thm41Affine.v").read_text()
    m = re.search(r"Theorem thm41_affine_identifiable.*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace("thm41_affine_identifiable", "variant")


def _compiles(body: str) -> bool:
    return compiles(PRELUDE, body)


@needs_coq
@pytest.mark.parametrize(
    ("hypothesis", "weaker"),
    [
        ("tc k <> 0 /\\ dot d (col U k) v <> 0", "tc k <> 0 /\\ True"),  # u_k^T v may be 0
        ("tc k <> 0 /\\ dot d (col U k) v <> 0", "True /\\ dot d (col U k) v <> 0"),  # tc = 0
        ("(j < d)%nat -> t k j <> 0", "(j < d)%nat -> True"),  # t_kj may be 0
    ],
)
def test_the_proof_needs_each_hypothesis(hypothesis: str, weaker: str) -> None:
    proof = _variant()
    assert _compiles(proof)  # the unchanged statement and script are accepted
    assert hypothesis in proof
    assert not _compiles(proof.replace(hypothesis, weaker))

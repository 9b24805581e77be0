"""Theorem 6.1's entry bound in Coq: the proof stands, and fails without its hypotheses.

``thm61_entry_bound`` (formal/Thm61.v) needs the margin |v_i| >= mu and the denominator
mu - tau; the same proof on a statement without the margin or with the smaller bound
(mu for mu - tau) is rejected by ``coqc``.
"""

from __future__ import annotations

import re

import pytest
from coq_text import compiles, needs_coq

from verified_attn import formal

PRELUDE = (
    "From Coq Require Import Reals Lra Lia.\n"
    "From VerifiedAttn Require Import Defs Softmax LemmaA1 CertHead Thm61.\n"
    "Open Scope R_scope.\n"
)


def _variant() -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "Thm61.v").read_text()
    m = re.search(r"Theorem thm61_entry_bound.*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace("thm61_entry_bound", "variant")


def _compiles(body: str) -> bool:
    return compiles(PRELUDE, body)


@needs_coq
@pytest.mark.parametrize(
    ("part", "wrong"),
    [
        ("mu <= Rabs vi ->", "True ->"),  # no margin on v_i
        ("(a * b ^ 2 * (mu - tau))", "(a * b ^ 2 * mu)"),  # a smaller, false bound
        ("Rabs ei <= tau ->", "True ->"),  # the answer to [e_i] unbounded
    ],
)
def test_the_bound_needs_each_hypothesis(part: str, wrong: str) -> None:
    proof = _variant()
    assert _compiles(proof)
    assert part in proof
    assert not _compiles(proof.replace(part, wrong))

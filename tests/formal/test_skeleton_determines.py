"""Theorem 5.1's recovery in Coq: the measurements determine W; without one, the proof fails.

``skeleton_determines`` (formal/Skeleton.v) needs both measured blocks (the columns W B and
the pivot rows U_S^T W) and an inverse of the pivot block; the same proof on a statement
missing one of them is rejected by ``coqc``.
"""

from __future__ import annotations

import re

import pytest
from coq_text import compiles, needs_coq

from verified_attn import formal

PRELUDE = (
    "From Coq Require Import Reals Lra Lia.\n"
    "From VerifiedAttn Require Import Defs Skeleton.\nOpen Scope R_scope.\n"
)
COLUMNS = "mat_mul d W B i b = mat_mul d W' B i b"
ROWS = "mat_mul d (transpose US) W a j = mat_mul d (transpose US) W' a j"


def _variant() -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "Skeleton.v").read_text()
    m = re.search(r"Theorem skeleton_determines.*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace("skeleton_determines", "variant")


def _compiles(body: str) -> bool:
    return compiles(PRELUDE, body)


@needs_coq
@pytest.mark.parametrize("measurement", [COLUMNS, ROWS])
def test_recovery_needs_both_measured_blocks(measurement: str) -> None:
    proof = _variant()
    assert _compiles(proof)
    assert measurement in proof
    assert not _compiles(proof.replace(measurement, "True"))

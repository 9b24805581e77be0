"""The canonical learner's interpolation step in Coq: 2 H0 + 1 answers at a pair fix the
score masses; the same proofs of weaker statements are refused by ``coqc``.

``kprobe_identifies`` (formal/CertMultiHeadId.v) needs F(0 .. 2 H0); with F(0 .. 2 H0 - 1)
the statement is false (``kprobe_fewer_fails``, checked here numerically too), and its proof
on that statement fails. ``cauchy_groups_zero`` needs at most n poles for n points; the
same proof with n + 1 poles fails. ``kprobe_pairs`` needs the reference model's scores
distinct and residues nonzero; the same proof without either fails.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest

from verified_attn import formal

needs_coq = pytest.mark.skipif(
    not formal.coq_available(), reason=f"needs Coq and Coq Interval ({formal.COQ_INSTALL_HINT})"
)

PRELUDE = (
    "From Coq Require Import Reals QArith Lra Lia List.\n"
    "From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId.\n"
    "Import ListNotations.\nOpen Scope R_scope.\n"
)
SAMPLES = "(k <= 2 * H0)%nat -> kanswer"
FEWER = "(k <= 2 * H0 - 1)%nat -> kanswer"
POLES = "(length L <= n)%nat ->\n  (forall i j"
MORE_POLES = "(length L <= S n)%nat ->\n  (forall i j"


def _variant(name: str) -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "CertMultiHeadId.v").read_text()
    m = re.search(rf"Theorem {name} .*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace(name, "variant", 1)


def _compiles(body: str) -> bool:
    directory = formal.build().directory
    assert directory is not None
    proc = formal.run_coq(PRELUDE + body, directory)
    out = proc.stdout + proc.stderr
    assert "Syntax error" not in out, out
    return proc.returncode == 0


def _answer(k: int, residue: Fraction, pole: Fraction) -> Fraction:
    """F(k) - F(0) of one head with residue u^T v and pole exp(-u^T W b)."""
    return residue * k / (k + pole)


def test_two_samples_do_not_fix_one_head() -> None:
    """The counterexample of kprobe_fewer_fails: (score 0, residue 2) and (score -ln 2,
    residue 3) agree at k = 0, 1 and differ at k = 2 = 2 H0."""
    a, b = (Fraction(2), Fraction(1)), (Fraction(3), Fraction(2))  # pole exp(-score)
    assert math.isclose(math.exp(math.log(2)), 2)
    assert [_answer(k, *a) for k in (0, 1)] == [_answer(k, *b) for k in (0, 1)]
    assert _answer(2, *a) == Fraction(4, 3) != _answer(2, *b) == Fraction(3, 2)


@needs_coq
def test_identification_needs_2_H0_plus_1_samples() -> None:
    proof = _variant("kprobe_identifies")
    assert SAMPLES in proof
    assert _compiles(proof)
    assert not _compiles(proof.replace(SAMPLES, FEWER))


@needs_coq
def test_cauchy_lemma_needs_as_many_points_as_poles() -> None:
    proof = _variant("cauchy_groups_zero")
    assert POLES in proof
    assert _compiles(proof)
    assert not _compiles(proof.replace(POLES, MORE_POLES))


DISTINCT = "NoDup (map snd (score_pairs d u b hs)) ->"
NONZERO = "(forall c s, In (c, s) (score_pairs d u b hs) -> c <> 0) ->"


@needs_coq
@pytest.mark.parametrize("premise", [DISTINCT, NONZERO])
def test_pairs_need_distinct_scores_and_nonzero_residues(premise: str) -> None:
    """Without distinct scores (two heads may merge) or nonzero residues (a head may be
    invisible) the multiset of pairs is not fixed; the proof on that statement fails."""
    proof = _variant("kprobe_pairs")
    assert premise in proof
    assert _compiles(proof)
    assert not _compiles(proof.replace(premise, "True ->"))

"""The canonical learner's interpolation step in Coq: 2 H0 + 1 answers at a pair fix the
score masses; the same proofs of weaker statements are refused by ``coqc``.

``kprobe_identifies`` (formal/CertMultiHeadId.v) needs F(0 .. 2 H0); with F(0 .. 2 H0 - 1)
the statement is false (``kprobe_fewer_fails``, checked here numerically too), and its proof
on that statement fails. ``cauchy_groups_zero`` needs at most n poles for n points; the
same proof with n + 1 poles fails. ``kprobe_pairs`` needs the reference model's scores
distinct and residues nonzero; the same proof without either fails. ``labels_determine``
(formal/CertMultiHeadLabel.v) needs unambiguous links and no ties; without either premise
its proof fails, and the exporter states it only when its checks pass.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import compiles, needs_coq

from verified_attn import formal
from verified_attn.formal.export_multi_head import labelling_checks

PRELUDE = (
    "From Coq Require Import Reals QArith Qreals Lra Lia List Permutation FinFun.\n"
    "From VerifiedAttn Require Import Defs Prop71 CertHead CertPair CertMultiHead\n"
    "  CertMultiHeadId CertMultiHeadLabel.\n"
    "Import ListNotations.\nOpen Scope R_scope.\n"
)
SAMPLES = "(k <= 2 * H0)%nat -> kanswer"
FEWER = "(k <= 2 * H0 - 1)%nat -> kanswer"
POLES = "(length L <= n)%nat ->\n  (forall i j"
MORE_POLES = "(length L <= S n)%nat ->\n  (forall i j"


def _variant(name: str, module: str = "CertMultiHeadId") -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / f"{module}.v").read_text()
    m = re.search(rf"Theorem {name} .*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace(name, "variant", 1)


def _compiles(body: str) -> bool:
    return compiles(PRELUDE, body)


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


DISTINCT = "NoDup (map snd (score_pairs d u b hs)) ->"
NONZERO = "(forall c s, In (c, s) (score_pairs d u b hs) -> c <> 0) ->"
LINKS = "link_ok d U B hs -> row_ok d U B hs ->"

#: (theorem, its file, a premise of the statement, the same premise weakened)
WEAKER = [
    ("kprobe_identifies", "CertMultiHeadId", SAMPLES, FEWER),  # F(0 .. 2 H0 - 1) only
    ("cauchy_groups_zero", "CertMultiHeadId", POLES, MORE_POLES),  # n + 1 poles, n points
    ("kprobe_pairs", "CertMultiHeadId", DISTINCT, "True ->"),  # two heads may merge
    ("kprobe_pairs", "CertMultiHeadId", NONZERO, "True ->"),  # a head may be invisible
    ("labels_determine", "CertMultiHeadLabel", LINKS, "True -> row_ok d U B hs ->"),
    ("labels_determine", "CertMultiHeadLabel", LINKS, "link_ok d U B hs -> True ->"),  # ties
]


@needs_coq
@pytest.mark.parametrize(("name", "module", "premise", "weaker"), WEAKER)
def test_the_proof_of_a_weaker_statement_is_refused(
    name: str, module: str, premise: str, weaker: str
) -> None:
    proof = _variant(name, module)
    assert premise in proof
    assert _compiles(proof)
    assert not _compiles(proof.replace(premise, weaker))


def _run(heads: list[tuple[list[list[int]], list[int]]], ties: list[Any]) -> dict[str, Any]:
    eye = [[Fraction(int(i == j)) for j in range(2)] for i in range(2)]
    exact = [([[Fraction(x) for x in r] for r in W], [Fraction(x) for x in v]) for W, v in heads]
    return {"d": 2, "H0": len(heads), "U": eye, "B": eye, "heads": exact, "ties": ties}


def test_exporter_states_the_labelling_only_when_its_checks_pass() -> None:
    """U = B = I: residues are v, scores the entries of W. Heads a, b, c with
    r0_a + r1_b = r0_c + r1_c (1 + 2 = -1 + 4) and W_a[0][0] + W_b[1][0] = W_c[0][0] +
    W_c[1][0] (0 + 3 = 1 + 2): the link (u_0 + u_1, b_0) cannot tell a-then-b from c."""
    W_a, W_b, W_c = [[0, 7], [5, 11]], [[4, 13], [3, 17]], [[1, 19], [2, 23]]
    ambiguous = _run([(W_a, [1, 1]), (W_b, [5, 2]), (W_c, [-1, 4])], [])
    assert labelling_checks(ambiguous) == (True, False)
    W_c[1][0] = 8  # the score sum moves off: the link is unambiguous
    assert labelling_checks(_run([(W_a, [1, 1]), (W_b, [5, 2]), (W_c, [-1, 4])], [])) == (
        True,
        True,
    )
    W_c[1][0] = 2
    # a tie (equal residues on row 1) or a tie link: no labelling statement
    assert labelling_checks(_run([(W_a, [1, 1]), (W_b, [5, 1]), (W_c, [-1, 4])], [])) == (
        True,
        False,
    )
    assert labelling_checks(_run([(W_a, [1, 1]), (W_b, [5, 2]), (W_c, [-1, 4])], [(1, 1, 0)])) == (
        True,
        False,
    )
    # two heads with one score at a pair, or a zero residue: neither part
    assert labelling_checks(_run([(W_a, [1, 1]), (W_a, [5, 2]), (W_c, [-1, 4])], []))[0] is False
    assert labelling_checks(_run([(W_a, [1, 1]), (W_b, [0, 2]), (W_c, [-1, 4])], []))[0] is False
    # fewer certified heads than H0: neither part
    fewer = _run([(W_a, [1, 1]), (W_b, [5, 2])], [])
    fewer["H0"] = 3
    assert labelling_checks(fewer) == (False, False)

"""The canonical learner's interpolation step from answers known to eps, in Coq
(formal/CertMultiHeadBound.v), and parts 7 and 8 of the exported multi-head files.

``cauchy_groups_bound``: |sum_j c_j / (x_i + z_j)| <= eps at n points g apart, poles delta
apart, 0 < x_i + z_j <= A give every group sum at most A (1 + 2 A^2 / (delta g))^n eps;
checked here on exact instances, and a constant without delta fails on close poles. The
same proofs without the pole separation, or with one elimination step fewer, are refused.
A run at 384 bits with D = 2^22 states parts 7 and 8 (every model meeting the assumption
and answering inside the intervals is the certified one); the default D of a 256-bit run
is too large and its file omits them. ``check_close`` refuses a widened interval, a wider
or narrower D, a smaller eps and a smaller score bound Sm.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import (
    assert_proved_but_admitted,
    close_checks_pass,
    compiles,
    field,
    hold_admitted,
    needs_coq,
    replace_entry,
    set_field,
    widened_answers,
)

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.cli_coq import cmd_verify_coq
from verified_attn.formal.coq_check import compile_exported
from verified_attn.formal.export_multi_head_close import close_bound, close_params
from verified_attn.multi_head.canonical_bounds import answer_precision

TWO = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])]
D22 = 2**22


def _groups(terms: list[tuple[Fraction, Fraction]]) -> dict[Fraction, Fraction]:
    out: dict[Fraction, Fraction] = {}
    for c, z in terms:
        out[z] = out.get(z, Fraction(0)) + c
    return out


def _eps(xs: list[Fraction], terms: list[tuple[Fraction, Fraction]]) -> Fraction:
    return max(abs(sum((c / (x + z) for c, z in terms), Fraction(0))) for x in xs)


def _kbound(A: Fraction, g: Fraction, delta: Fraction, n: int) -> Fraction:
    return A * (1 + 2 * A * A / (delta * g)) ** n


def test_cauchy_bound_holds_on_exact_instances() -> None:
    """Random lists of at most n terms (repeated poles included), points 1..n: every group
    sum is within the bound, and the bound is within a factor 10^6 of tight for n = 1."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 4)
        xs = [Fraction(i + 1) for i in range(n)]
        poles = sorted({Fraction(rng.randint(1, 40), 8) for _ in range(n)})
        terms = [(Fraction(rng.randint(-9, 9), rng.randint(1, 5)), rng.choice(poles))]
        terms += [
            (Fraction(rng.randint(-9, 9), rng.randint(1, 5)), rng.choice(poles))
            for _ in range(rng.randint(0, n - 1))
        ]
        eps = _eps(xs, terms)
        A = max(x + z for x in xs for _, z in terms)
        zs = sorted({z for _, z in terms})
        delta = min((b - a for a, b in itertools.pairwise(zs)), default=Fraction(1))
        K = _kbound(A, Fraction(1), delta, n)
        assert all(abs(s) <= K * eps for s in _groups(terms).values())
    # n = 1: |c| = (x + z) |psum| exactly, so K_1 >= A is needed and A (1 + 2 A^2 / delta) holds
    assert _eps([Fraction(1)], [(Fraction(3), Fraction(2))]) * 3 == 3


def test_a_bound_without_the_pole_separation_fails() -> None:
    """c / (x + z) - c / (x + z + delta) is about c delta / (x + z)^2 at every point: a
    constant that does not grow as delta shrinks, A (1 + 2 A^2 / g)^n, is exceeded."""
    xs = [Fraction(1), Fraction(2)]
    delta = Fraction(1, 10**6)
    terms = [(Fraction(1), Fraction(1)), (Fraction(-1), 1 + delta)]
    eps = _eps(xs, terms)
    A = 3 + delta
    wrong = A * (1 + 2 * A * A) ** 2
    assert wrong * eps < 1  # the group sum at z = 1 is 1
    assert _kbound(A, Fraction(1), delta, 2) * eps >= 1


def test_close_params_pick_Sm_and_eps() -> None:
    """Sm the smallest natural above the scores, eps the smallest power of two above the
    widest interval; None when kz 2 eps D^(2 H0) >= 1 (one bit too wide fails)."""
    assert close_bound(2, 1, D22) == 7 * (1 + 2 * 49 * 3 * D22 * D22) ** 4
    scores = [Fraction(-1, 3), Fraction(106791, 524288)]
    assert close_params(2, scores, [Fraction(3, 2**381)], D22) == (1, Fraction(1, 2**379))
    assert close_params(2, [Fraction(3, 2)], [Fraction(1, 2**379)], D22) == (2, Fraction(1, 2**379))
    need = close_bound(2, 1, D22) * 2 * D22**4
    eps = Fraction(1, 2 ** (need.bit_length()))  # 2 K eps D^4 < 1
    assert close_params(2, scores, [eps], D22) is not None
    assert close_params(2, scores, [eps * 2], D22) is None
    assert close_params(2, scores, [Fraction(1, 2**250)], 2**64) is None


@pytest.fixture(scope="module")
def narrow() -> dict[str, Any]:
    oracle = va.Oracle(va.MultiHeadAttention(TWO), "certified", precision=384)
    return va.learn_multi_head(oracle, heads=2, denominator_bound=D22).certificate()


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    oracle = va.Oracle(va.MultiHeadAttention(TWO), "certified")
    return va.learn_multi_head(oracle, heads=2).certificate()


@pytest.fixture(scope="module")
def default_text(default: dict[str, Any]) -> str:
    return va.export_coq(default)


@pytest.fixture(scope="module")
def narrow_text(narrow: dict[str, Any]) -> str:
    return va.export_coq(narrow)


def test_narrow_run_states_parts_7_and_8(narrow_text: str) -> None:
    head = narrow_text.split("*)")[0]
    assert "7. every model of at most 2 heads that meets the assumption" in head
    assert "8. every such model gives the certified model's output" in head
    assert "does NOT state" not in head
    assert "Definition Sm : nat := 1." in narrow_text
    assert "meets run Sm hs' ->\n     answers_mh run hs' ->" in narrow_text
    assert "apply (mh_pairs_close run Sm eps hs')" in narrow_text
    assert "apply (mh_identified_close run Sm eps U_inv B_inv hs')" in narrow_text
    assert narrow_text.count("interval with") == 1  # the interval calls once, in [hold]


def test_default_run_states_parts_7_and_8(default: dict[str, Any], default_text: str) -> None:
    """A default certified run (256 bits, D = 2^64) asks its 22 learning queries at the
    873 bits check_close needs (no query more) and its file states parts 7 and 8; the same
    answers widened to 256-bit intervals are too wide and the file omits them."""
    assert default["queries"]["learning"] == 22 and default["denominator_bound"] == 2**64
    assert (default["working_precision"], default["answer_precision"]) == (256, 873)
    assert answer_precision(2, 2**64, 256) == 873
    head = default_text.split("*)")[0]
    assert "7. every model of at most 2 heads that meets the assumption" in head
    assert "8. every such model gives the certified model's output" in head
    assert "does NOT state" not in head and "Definition Sm : nat := 1." in default_text
    assert "apply (mh_identified_close run Sm eps U_inv B_inv hs')" in default_text
    wide = va.export_coq(widened_answers(default, 250))
    head = wide.split("*)")[0]
    assert "does NOT state" in head and "[check_close]" in head
    assert "mh_pairs_close" not in wide and "Definition Sm" not in wide


def _misstated(narrow: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's certificate with a stated assumption that is not the theorem's: another Sm,
    the magnitude part dropped, another D."""
    (stated,) = narrow["assumptions"]
    wrong = [
        stated.replace("[-1, 1] (Sm = 1,", "[-2, 2] (Sm = 2,"),
        re.sub(r" and every score lies in \[-1, 1\] \(Sm = 1, [^)]*\)", "", stated),
        stated.replace(f"<= {D22} ", f"<= {D22 // 2} "),
    ]
    out = []
    for text in wrong:
        assert text != stated
        bad = copy.deepcopy(narrow)
        bad["assumptions"] = [text]
        out.append(bad)
    return out


def test_stated_assumption_is_the_theorems(narrow: dict[str, Any], narrow_text: str) -> None:
    """The certificate states what [meets] assumes (D and Sm of the file); a certificate
    stating anything else is refused."""
    (stated,) = narrow["assumptions"]
    assert f"denominator <= {D22} " in stated and "every score lies in [-1, 1] (Sm = 1," in stated
    header = " ".join(narrow_text.split("*)")[0].split())
    assert f"the one [meets] states (parts 7, 8): {stated}." in header
    for bad in _misstated(narrow):
        with pytest.raises(CertificateError, match="stated assumption differs"):
            va.export_coq(bad)


@needs_coq
def test_cli_refuses_a_misstated_assumption(
    narrow: dict[str, Any], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "misstated.json"
    path.write_text(json.dumps(_misstated(narrow)[1]))
    assert cmd_verify_coq(argparse.Namespace(path=path)) == 1
    assert "stated assumption differs" in capsys.readouterr().err


def test_answer_precision_is_what_check_close_needs() -> None:
    """Intervals 2^-(bits - 16) wide pass check_close for scores up to Sm = 4, not for a
    score of 5, and intervals twice the widest the bound allows fail."""
    for H0, D in ((1, 2**64), (2, 2**64), (3, 2**30), (2, 2**22)):
        bits = answer_precision(H0, D, 0)
        eps = Fraction(1, 2 ** (bits - 16))
        assert close_params(H0, [Fraction(4)], [eps], D) == (4, eps)
        assert close_params(H0, [Fraction(5)], [eps], D) is None
        need = close_bound(H0, 4, D) * 2 * D ** (2 * H0)
        assert close_params(H0, [Fraction(4)], [Fraction(2, 2 ** need.bit_length())], D) is None
    assert answer_precision(2, 2**22, 384) == 384  # enough already: not lowered


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------

PRELUDE = (
    "From Coq Require Import Reals QArith Qabs Qreals Lra Lia List Permutation FinFun ZArith.\n"
    "From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId\n"
    "  CertMultiHeadLabel CertMultiHeadBound.\n"
    "Import ListNotations.\nOpen Scope R_scope.\n"
)
SEPARATED = "z <> z' -> delta <= Rabs (z - z')) ->"
SIGMA = "hscore d u b h <> hscore d u b h' ->\n     sigma <= Rabs (hscore d u b h - hscore d u b h')) ->"
CONCLUSION = "forall w, Rabs (csum w L) <= kbound A g delta n * eps."
ONE_FEWER = "forall w, Rabs (csum w L) <= kbound A g delta (n - 1) * eps."

#: (theorem, a premise or conclusion, the same weakened or strengthened)
WEAKER = [
    ("cauchy_groups_bound", SEPARATED, "True) ->"),  # close poles: no bound
    pytest.param(  # one elimination step fewer
        "cauchy_groups_bound", CONCLUSION, ONE_FEWER, marks=pytest.mark.slow
    ),
    pytest.param(  # scores not separated
        "kprobe_masses_close", SIGMA, "True) ->", marks=pytest.mark.slow
    ),
]


def _variant(name: str) -> str:
    directory = formal.formal_dir()
    assert directory is not None
    text = (directory / "CertMultiHeadBound.v").read_text()
    m = re.search(rf"Theorem {name} .*?Qed\.", text, re.S)
    assert m is not None
    return m.group(0).replace(name, "variant", 1)


@needs_coq
@pytest.mark.parametrize(("name", "premise", "weaker"), WEAKER)
def test_the_proof_of_a_weaker_statement_is_refused(name: str, premise: str, weaker: str) -> None:
    proof = _variant(name)
    assert premise in proof
    assert compiles(PRELUDE, proof)
    assert not compiles(PRELUDE, proof.replace(premise, weaker))


def _widened(text: str) -> str:
    """rec_5's lower end moved down by 2^-300 (the certified answer stays inside)."""
    m = re.fullmatch(r"\((-?\d+) # (\d+)\)%Q", field(text, "rec_5", "alo").group(1))
    assert m is not None
    lo = Fraction(int(m.group(1)), int(m.group(2))) - Fraction(1, 2**300)
    return set_field(text, "rec_5", "alo", f"({lo.numerator} # {lo.denominator})%Q")


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "widened",
        "wider-D",
        *(pytest.param(t, marks=pytest.mark.slow) for t in ("none", "narrower-D", "eps", "Sm")),
    ],
)
def test_checks_refuse_a_tampered_file(narrow_text: str, tamper: str) -> None:
    text = narrow_text
    bound = f"Definition D : positive := {D22}%positive."
    if tamper == "widened":  # one interval 2^-300 wider: above eps
        text = _widened(text)
    elif tamper == "wider-D":  # 2^40: the intervals are too wide for it
        text = text.replace(bound, f"Definition D : positive := {2**40}%positive.")
    elif tamper == "narrower-D":  # 2^10: below the certified scores' denominators (check_mh)
        text = text.replace(bound, f"Definition D : positive := {2**10}%positive.")
    elif tamper == "eps":  # eps halved: below the widest interval
        m = re.search(r"Definition eps : Q := \(1 # (\d+)\)%Q\.", text)
        assert m is not None
        text = text.replace(m.group(0), f"Definition eps : Q := (1 # {2 * int(m.group(1))})%Q.")
    elif tamper == "Sm":  # 0: a certified score is 106791/524288
        text = text.replace("Definition Sm : nat := 1.", "Definition Sm : nat := 0.")
    assert (text == narrow_text) == (tamper == "none")
    assert close_checks_pass(text) == (tamper == "none")


@pytest.mark.slow
@needs_coq
def test_narrow_run_is_proved_and_a_widened_interval_fails(narrow_text: str) -> None:
    """The whole file: run_consistent with parts 7 and 8 on whitelisted axioms; the same
    file with one interval 2^-300 wider fails (at check_close, its certified answer still
    inside)."""
    check = compile_exported(narrow_text)
    assert check.ok, check.log[-2000:]
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS
    bad = compile_exported(hold_admitted(_widened(narrow_text)))  # it fails after [hold]
    assert not bad.ok
    step = next(
        i
        for i, line in enumerate(narrow_text.splitlines(), 1)
        if "apply (mh_pairs_close run Sm eps hs')" in line
    )
    assert f"line {step + 1}," in bad.log, bad.log[-2000:]


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "none",
        "wider-D",
        *(
            pytest.param(t, marks=pytest.mark.slow)
            for t in ("rational", "narrower-D", "dropped-query")
        ),
    ],
)
def test_default_run_checks_refuse_a_tampered_file(default_text: str, tamper: str) -> None:
    """The default run's checks over Q (parts 1, 7, 8) pass; a changed certified W entry, D
    = 2^21 (below the certified scores' denominators 2^22), a dropped recorded answer or D
    = 2^72 (the 873-bit intervals are too wide for it) each fail them."""
    bound = f"Definition D : positive := {2**64}%positive."
    assert bound in default_text
    text = default_text
    if tamper == "rational":
        text = replace_entry(text, "W_0", "1%nat, 1%nat", "(1 # 2)")
    elif tamper == "narrower-D":
        text = text.replace(bound, f"Definition D : positive := {2**21}%positive.")
    elif tamper == "dropped-query":
        text = text.replace("rec_3; ", "", 1)
    elif tamper == "wider-D":
        text = text.replace(bound, f"Definition D : positive := {2**72}%positive.")
    assert (text == default_text) == (tamper == "none")
    assert close_checks_pass(text) == (tamper == "none")


@pytest.mark.slow
@needs_coq
def test_default_run_is_proved_with_parts_7_and_8(default_text: str) -> None:
    """The default file: run_consistent with parts 7 and 8, with its lemma [hold] (the 20
    records' 896-bit interval calls) admitted, so that the theorem rests on whitelisted
    axioms and [hold] alone. The same calls at 384 bits are proved by the narrow run's file
    (above); the whole default file, [hold] proved, is compiled by benchmarks/coq_export.py
    (its multi-head certified rows; docs/formal.md)."""
    assert_proved_but_admitted(default_text, "run_consistent")

"""The Coq proofs in formal/: names, assumptions, no escape hatches, and false variants fail.

Tests that need ``coqc`` skip with the install command when it is missing; the rest (the
registry, the sources, the docs table, the skip path) run everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from coq_text import needs_coq

import verified_attn.models as models
from verified_attn import formal
from verified_attn.checks import ClaimResult
from verified_attn.claims import check_claims
from verified_attn.formal.claims import CLAIMS, THEOREMS, check_formal
from verified_attn.report import claims_table

ROOT = Path(__file__).resolve().parents[2]
FORMAL = ROOT / "formal"
DOCS = ROOT / "docs" / "formal.md"

REQUIRED = {
    "softmax2_sigmoid": "Softmax",
    "logit_sigmoid": "Softmax",
    "probe_identity": "Softmax",
    "design_invertible": "Thm41",
    "thm41_identifiable": "Thm41",
    "lemmaA1_lipschitz": "LemmaA1",
    "lipschitz_constant_lt_5": "LemmaA1",
    "prop71_permutation": "Prop71",
    "prop71_shared_split": "Prop71",
    "prop71_dead_head": "Prop71",
    "prop71_cancelling": "Prop71",
    "transformer_antisymmetry": "Transformer",
    "transformer_heads_reduction": "TransformerHeads",
    "transformer_heads_length1": "TransformerHeads",
    "skeleton_identity": "Skeleton",
}

FORBIDDEN = (
    "Admitted",
    "admit",
    "Axiom",
    "Axioms",
    "Parameter",
    "Parameters",
    "Hypothesis",
    "Hypotheses",
    "Conjecture",
    "Variable",
    "Variables",
)


def _forbidden_words(text: str) -> list[str]:
    return [w for w in FORBIDDEN if re.search(rf"(?<![\w.]){w}(?![\w'])", text)]


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_every_required_theorem_is_a_registered_claim() -> None:
    registered = {(t.module, n) for t in THEOREMS for n in t.names}
    missing = {n for n, m in REQUIRED.items() if (m, n) not in registered}
    assert not missing, f"required theorems without a formal claim: {missing}"
    firsts = {t.names[0] for t in THEOREMS}
    assert set(REQUIRED) <= firsts  # each required theorem heads its own claim
    assert all(
        c.id.startswith("formal/") and c.level.startswith("proved for all d") for c in CLAIMS
    )


def test_every_registered_theorem_is_stated_in_its_file() -> None:
    for t in THEOREMS:
        text = (FORMAL / f"{t.module}.v").read_text()
        for name in t.names:
            assert re.search(rf"^(Theorem|Lemma|Corollary) {name}\b", text, re.M), (
                f"{name} is not stated in formal/{t.module}.v"
            )


def test_coq_project_lists_every_file_in_dependency_order() -> None:
    files = formal.source_files(FORMAL)
    assert files[0] == "Defs.v"
    assert sorted(files) == sorted(p.name for p in FORMAL.glob("*.v"))
    for n, f in enumerate(files):
        imports = re.findall(r"Require Import ([^.]*)\.", (FORMAL / f).read_text())
        ours = {m for line in imports for m in line.split() if (FORMAL / f"{m}.v").exists()}
        assert ours <= {Path(g).stem for g in files[:n]}, f"{f} imports a later file"


def test_no_forbidden_keyword_in_formal() -> None:
    found = {
        p.name: _forbidden_words(p.read_text())
        for p in sorted(FORMAL.iterdir())
        if p.is_file() and p.suffix in {".v", ""} | {".md", ".sh"} and p.name != "README.md"
    }
    assert {k: v for k, v in found.items() if v} == {}
    # The scan can fail: it finds each keyword in a line that uses it.
    assert _forbidden_words("Proof. admit. Admitted.") == ["Admitted", "admit"]
    assert _forbidden_words("Axiom ax : False.") == ["Axiom"]
    assert _forbidden_words("Hypothesis H : 1 = 2.") == ["Hypothesis"]
    assert _forbidden_words("apply sigmoid_admittance. Parameter_x.") == []


def test_parse_assumptions() -> None:
    out = (
        "Axioms:\nClassicalDedekindReals.sig_forall_dec\n  : forall P : nat -> Prop,\n"
        "    (forall n : nat, {P n} + {~ P n}) -> {n : nat | ~ P n} + {forall n, P n}\n"
        "Classical_Prop.classic : forall P : Prop, P \\/ ~ P\n"
        "Closed under the global context\n"
        "Axioms:\nmy_axiom : 1 = 2\n"
    )
    assert formal.parse_assumptions(out) == [
        ["ClassicalDedekindReals.sig_forall_dec", "Classical_Prop.classic"],
        [],
        ["my_axiom"],
    ]


def test_without_coq_a_formal_claim_is_skipped_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formal, "coqc_path", lambda: None)
    res = check_formal(THEOREMS[0])
    assert res.skipped and not res.passed
    assert res.detail.startswith("skipped: needs Coq (apt-get install coq")
    table = claims_table([res, ClaimResult("x/y", "Thm", "s", True)])
    assert "SKIP" in table
    assert "1 passed, 0 failed, 1 skipped (1 formal claim needs Coq" in table
    results = check_claims(["formal/"])
    assert len(results) == len(CLAIMS) and all(r.skipped for r in results)


def test_cli_check_counts_skipped_formal_claims(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from verified_attn.cli import main

    monkeypatch.setattr(formal, "coqc_path", lambda: None)
    assert main(["check", "formal/"]) == 0
    out = capsys.readouterr().out
    assert f"0 passed, 0 failed, {len(CLAIMS)} skipped ({len(CLAIMS)} formal claims need Coq" in out


def test_docs_table_names_existing_definitions() -> None:
    text = DOCS.read_text()
    rows = re.findall(r"^\| `([A-Za-z_0-9]+)` \| (.*?) \|", text, re.M)
    assert len(rows) >= 8, "docs/formal.md lacks the side-by-side definitions table"
    defs = (FORMAL / "Defs.v").read_text()
    for coq_name, python in rows:
        assert re.search(rf"^(Definition|Fixpoint) {coq_name}\b", defs, re.M), (
            f"docs/formal.md names {coq_name}, which formal/Defs.v does not define"
        )
        for py in re.findall(r"`([A-Za-z_][A-Za-z_0-9.]*)`", python):
            obj = models
            for part in py.split("."):
                assert hasattr(obj, part), f"docs/formal.md names {py}, not in verified_attn.models"
                obj = getattr(obj, part)
    for name in REQUIRED:
        assert f"`{name}`" in text, f"docs/formal.md does not mention {name}"


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@needs_coq
def test_formal_builds_and_every_claim_passes() -> None:
    result = formal.build()
    assert result.ok, result.log[-3000:]
    assert result.files == formal.source_files(FORMAL)
    for res in check_claims(["formal/"]):
        assert res.passed and not res.skipped, f"{res.id}: {res.detail}"


@needs_coq
def test_required_theorems_rest_only_on_the_real_number_axioms() -> None:
    groups = [(m, (n,)) for n, m in REQUIRED.items()]
    found = formal.assumptions(groups)
    for (module, names), axioms in found.items():
        assert set(axioms) <= formal.ALLOWED_AXIOMS, f"{module}.{names[0]}: {axioms}"
        # Every one of them really uses the reals (the checker sees axioms at all).
        assert "ClassicalDedekindReals.sig_forall_dec" in axioms


@needs_coq
def test_an_axiom_would_be_reported() -> None:
    src = (
        "From Coq Require Import Reals.\nOpen Scope R_scope.\n"
        "Axiom cheat : forall x : R, x = 0.\n"
        "Lemma one_is_zero : 1 = 0. Proof. apply cheat. Qed.\n"
        "Print Assumptions one_is_zero.\n"
    )
    proc = formal.run_coq(src, formal.build().directory)
    assert proc.returncode == 0, proc.stderr
    [axioms] = formal.parse_assumptions(proc.stdout)
    assert "cheat" in axioms and not set(axioms) <= formal.ALLOWED_AXIOMS


def _coq(body: str) -> tuple[int, str]:
    src = (
        "From Coq Require Import Reals Lra List.\n"
        "From Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs Softmax LemmaA1 Prop71.\n"
        "Open Scope R_scope.\n" + body
    )
    proc = formal.run_coq(src, formal.build().directory)
    return proc.returncode, proc.stdout + proc.stderr


def _assert_rejected(body: str) -> None:
    code, out = _coq(body)
    assert code != 0, f"a false statement was accepted:\n{body}"
    # Rejected for being false, not for a typo in the test.
    assert "Syntax error" not in out and "was not found" not in out, out


LIP4 = """
Theorem lemmaA1_with_4 : forall y1 y2,
  sigmoid (- (1/2)) <= y1 <= sigmoid (1/2) ->
  sigmoid (- (1/2)) <= y2 <= sigmoid (1/2) ->
  Rabs (logit y1 - logit y2) <= {C} * Rabs (y1 - y2).
Proof.
  intros y1 y2 H1 H2.
  apply (Rle_trans _ _ _ (lemmaA1_lipschitz y1 y2 H1 H2)).
  apply Rmult_le_compat_r; [apply Rabs_pos|].
  unfold lipschitz_L. interval.
Qed.
"""


@needs_coq
def test_lemma_a1_with_constant_4_is_rejected() -> None:
    code, out = _coq(LIP4.replace("{C}", "5"))  # the same script proves the constant 5
    assert code == 0, out
    _assert_rejected(LIP4.replace("{C}", "4"))
    _assert_rejected("Lemma L_lt_4 : lipschitz_L < 4.\nProof. unfold lipschitz_L. interval. Qed.\n")


SPLIT = """
Theorem split_variant : forall d W (v1 v2 s : vec) (rest : list head) N X,
  multi_head d N X ((W, v1) :: (W, v2) :: rest) =
  multi_head d N X ((W, vadd v1 s) :: (W, {SECOND}) :: rest).
Proof.
  intros. apply prop71_shared_split. intros i Hi. unfold vadd, vopp. lra.
Qed.
"""


@needs_coq
def test_prop71_pair_with_a_perturbed_entry_is_rejected() -> None:
    code, out = _coq(SPLIT.replace("{SECOND}", "vadd v2 (vopp s)"))
    assert code == 0, out
    _assert_rejected(SPLIT.replace("{SECOND}", "vadd v2 (vopp (vadd s (unit_vec 0)))"))
    _assert_rejected(SPLIT.replace("{SECOND}", "v2"))
    # A dead-head pair whose "dead" head has a live value is no pair.
    _assert_rejected(
        "Theorem not_dead : forall d W W' (v : vec) rest N X,\n"
        "  multi_head d N X ((W, v) :: rest) = multi_head d N X ((W', v) :: rest).\n"
        "Proof. intros. apply prop71_dead_head. intros i Hi. lra. Qed.\n"
    )


@needs_coq
def test_a_false_lemma_a1_is_refuted_in_coq_itself() -> None:
    # lemmaA1_constant_4_fails proves the negation of the constant-4 statement.
    code, out = _coq("Check lemmaA1_constant_4_fails.\n")
    assert code == 0 and "4 * Rabs" in out, out


def _coq_theorem_names() -> set[str]:
    names: set[str] = set()
    for p in FORMAL.glob("*.v"):
        names |= set(re.findall(r"^(?:Theorem|Lemma|Corollary) (\w+)", p.read_text(), re.M))
    return names


def test_proofs_name_existing_coq_theorems() -> None:
    theorems = _coq_theorem_names()
    texts = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "proofs").glob("*.md")}
    for name in REQUIRED:
        assert any(f"`{name}`" in t for t in texts.values()), f"no proof step names {name}"
    for fname, text in texts.items():
        for para in re.split(r"\n\s*\n", text):
            if "in Coq" not in para:
                continue
            cited = re.findall(r"`([A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_']*)`", para)
            assert cited, f"{fname}: a paragraph says 'in Coq' but names no theorem"
            unknown = [c for c in cited if c not in theorems]
            assert not unknown, f"{fname} names Coq theorems that formal/ lacks: {unknown}"

"""Export of certified canonical multi-head runs to Coq: the file proves its run, a tampered
one fails.

The learner asks its queries at the bits parts 7 and 8 need (``answer_precision``); these
tests of parts 1-6 use the same runs with every answer widened to a 256-bit oracle's
intervals (:func:`coq_text.widened_answers`), whose files omit parts 7 and 8 and check
in seconds (parts 7 and 8: ``test_multi_head_bound.py``).

The file's ``run_consistent`` instantiates ``CertMultiHead.mh_answers_in``,
``grid_determines_model`` and ``CertMultiHeadId.mh_masses_determined``: a changed certified
rational, an answer interval moved off the answer, a D below a certified score's
denominator, a dropped recorded answer, a wrong inverse of U, the masses claimed for models
of H0 + 1 heads, ``Admitted`` and another run's intervals must each fail ``coqc``;
``verify-certificate --coq`` checks the new kind.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from coq_text import field, needs_coq, replace_entry, set_field, widened_answers

import verified_attn as va
from verified_attn import formal
from verified_attn.errors import CertificateError
from verified_attn.formal.cli_coq import cmd_verify_coq
from verified_attn.formal.coq_check import compile_exported

TWO = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])]
BOUND = "18446744073709551616%positive"


def _cert(heads: list[Any], **kw: Any) -> dict[str, Any]:
    """A certified run of ``heads``, its answers widened to 2^-250 (a 256-bit oracle's)."""
    oracle = va.Oracle(va.MultiHeadAttention(heads), "certified")
    return widened_answers(va.learn_multi_head(oracle, **{"heads": 2, **kw}).certificate(), 250)


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return _cert(TWO)


@pytest.fixture(scope="module")
def cert_text(cert: dict[str, Any]) -> str:
    return va.export_coq(cert)


# ---------------------------------------------------------------------------------------
# Without Coq.
# ---------------------------------------------------------------------------------------


def test_export_states_the_run(cert: dict[str, Any], cert_text: str) -> None:
    assert cert["queries"]["learning"] == 22  # d + 2 H0 (d^2 + d - 1), no ties
    assert cert_text.index("Theorem run_consistent") < cert_text.index("Print Assumptions")
    assert "(answers_mh run (rheads heads_c) /\\ pairs_den_le run) /\\" in cert_text
    assert "Forall2 (grid_same 2 U B) hs' (rheads heads_c)" in cert_text
    assert "(length hs' <= 2)%nat ->" in cert_text
    assert "apply (mh_pairs_determined run hs')" in cert_text  # H = H0: part 5
    assert "apply (mh_identified run U_inv B_inv hs')" in cert_text  # no ties: part 6
    assert "same_answers run hs' (rheads heads_c) -> same_masses run hs' (rheads heads_c)" in (
        cert_text
    )
    assert f"Definition D : positive := {BOUND}." in cert_text
    listed = re.search(r"Definition recs : list mh_rec := \[(.*)\]\.", cert_text)
    assert listed is not None and listed.group(1).count("rec_") == 22
    assert "Admitted" not in cert_text and "admit" not in cert_text
    head = cert_text.split("*)")[0]
    assert "sha256" in head and "does NOT state" in head


def test_export_refuses_what_it_cannot_state(cert: dict[str, Any]) -> None:
    for key, value, match in [
        ("arithmetic", "exact", "an exact answer is"),  # read as an exact run: balls refused
        ("arithmetic", "float", "certified canonical"),
        ("method", "orthogonal", "certified canonical"),
        ("affine", True, "design.B has 2 entries, expected 3"),  # an affine run has d + 1 probes
        ("H0", 7, "H0 = 7"),
    ]:
        bad = copy.deepcopy(cert)
        bad[key] = value
        with pytest.raises(CertificateError, match=match):
            va.export_coq(bad)
    short = copy.deepcopy(cert)
    short["answers"]["F"].pop()
    with pytest.raises(CertificateError):
        va.export_coq(short)


def test_max_heads_run_states_2_H0_samples_per_pair() -> None:
    """With max_heads = 3 (H0 = 3) and 2 heads found: 2 + 6 (d^2 + d - 1) = 32 queries,
    each record with the 2 certified heads' terms."""
    oracle = va.Oracle(va.MultiHeadAttention(TWO), "certified")
    cert = va.learn_multi_head(oracle, max_heads=3).certificate()
    assert (cert["H0"], len(cert["result"]["heads"]), cert["queries"]["learning"]) == (3, 2, 32)
    text = va.export_coq(cert)
    assert text.count("Definition rec_") == 32
    assert "mH0 := 3" in text and "(W_1, v_1)" in text and "W_2" not in text
    # fewer certified heads than H0: parts 5-8 about run_h (read with H0 = 2), not the run
    assert "mh_pairs_determined run hs'" not in text and "same_masses run hs'" in text
    assert "mh_identified run U_inv" not in text and "mh_identified run_h U_inv" in text
    assert "mh_identified_close run_h" in text and "mH0 := 2" in text


# ---------------------------------------------------------------------------------------
# With Coq.
# ---------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_coq
def test_run_with_tie_links_is_proved() -> None:
    """Two heads sharing v tie at (u_k, b_j), j > 0: d (d - 1) = 2 tie links, also proved."""
    cert = _cert([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [1, 2])])
    assert len(cert["answers"]["ties"]) == 2
    text = va.export_coq(cert)
    assert "mh_pairs_determined run" in text and "mh_identified" not in text  # ties: no 6.
    assert text.count("Definition rec_") == 24
    check = compile_exported(text)
    assert check.ok, check.log[-2000:]


#: The proof step each tamper must fail at (a line of the file).
FAILS_AT = {
    "rational": "+ vm_compute. reflexivity.",
    "narrower-D": "+ vm_compute. reflexivity.",
    "dropped-query": "+ vm_compute. reflexivity.",
    "interval": "repeat apply Forall2_cons",
    "F0-interval": "repeat apply Forall2_cons",
    "U_inv": "[vm_compute; reflexivity | vm_compute; reflexivity | exact F]",
    "more-heads": "apply (mh_masses_determined run",
}


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "rational",  # a certified W entry changed
        "interval",  # an answer interval shrunk to its lower end, off the answer
        "F0-interval",  # the answer to [b_0] moved
        "narrower-D",  # D below the scores' denominators
        "dropped-query",  # a recorded answer removed from the list
        "admitted",  # the proof replaced by Admitted
        "U_inv",  # a wrong inverse of U: the linear solve's check fails
        "more-heads",  # part 4 claimed for models of H0 + 1 heads: 2 H0 samples too few
    ],
)
def test_tampered_multi_head_file_fails_coqc(cert_text: str, tamper: str) -> None:
    text = cert_text
    if tamper == "rational":
        text = replace_entry(text, "W_0", "1%nat, 1%nat", "(1 # 2)")
    elif tamper == "interval":
        text = set_field(text, "rec_5", "ahi", field(text, "rec_5", "alo").group(1))
    elif tamper == "F0-interval":
        text = set_field(set_field(text, "rec_0", "alo", "(1000)%Q"), "rec_0", "ahi", "(1000)%Q")
    elif tamper == "narrower-D":
        text = text.replace(BOUND, "1%positive")
    elif tamper == "dropped-query":
        text = text.replace("rec_3; ", "", 1)
    elif tamper == "U_inv":
        text = replace_entry(text, "U_inv", "0%nat, 0%nat", "(0)")
    elif tamper == "more-heads":
        text = text.replace("(length hs' <= 2)%nat", "(length hs' <= 3)%nat")
    elif tamper == "admitted":
        proof = text[text.index("Proof.", text.index("Theorem run_consistent")) :]
        text = text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    assert text != cert_text, tamper
    check = compile_exported(text)
    assert not check.ok, tamper
    # each fails where it should: the checks over Q, an interval, the linear solve's check
    if tamper == "admitted":
        assert "run_consistent" in check.log, check.log
    else:
        marker = FAILS_AT[tamper]
        step = next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)
        assert f"line {step}," in check.log, (tamper, check.log)


@needs_coq
def test_tampered_certificate_exports_a_file_coq_refuses(cert: dict[str, Any]) -> None:
    """A claimed W entry moved by 1/1024 in the certificate: the exporter's per-head terms
    are the tampered heads' own, so the checks over Q pass and the intervals fail."""
    bad = copy.deepcopy(cert)
    bad["result"]["heads"][0]["W"][0][0] = {"rational": "1/1024"}
    text = va.export_coq(bad)
    check = compile_exported(text)
    assert not check.ok
    # the failure is in the per-query interval step (the checks over Q passed)
    step = next(
        i for i, line in enumerate(text.splitlines(), 1) if "repeat apply Forall2_cons" in line
    )
    assert f"line {step}," in check.log, check.log


@needs_coq
def test_another_runs_intervals_fail(cert_text: str) -> None:
    other = va.export_coq(_cert(TWO, seed=1))
    text = cert_text
    for i in range(22):
        for name in ("alo", "ahi"):
            text = set_field(text, f"rec_{i}", name, field(other, f"rec_{i}", name).group(1))
    assert text != cert_text
    assert not compile_exported(text).ok


@needs_coq
def test_cli_verify_certificate_coq(
    cert: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mh.json"
    path.write_text(json.dumps(cert))
    assert cmd_verify_coq(argparse.Namespace(path=path)) == 0
    out = capsys.readouterr().out
    # The CLI compiles the exported file: the certified two-head run's theorem, proved on
    # whitelisted axioms (the same file as cert_text's; coqc once for both).
    found = re.search(r"Coq checked run_consistent in [0-9.]+ s \(axioms: ([^)]*)\)", out)
    assert found, out
    axioms = set(found.group(1).split(", "))
    assert axioms and "none" not in axioms and axioms <= formal.ALLOWED_AXIOMS

"""Certified canonical multi-head runs other than two generic heads, exported to Coq.

(ii) Fewer heads found than the stated maximum H0 (``max_heads=3``, two heads): the file
states parts 1-4 (no per-pair multiset, no identification from the intervals), is proved,
and a changed rational, a narrower D or a dropped query fails. (iii) Two heads sharing v
(ties at the grid pairs, resolved by tie links): the default run's file states parts 1-5
and 7 (the intervals determine every model's (residue, score) pairs at every pair) but not
6 or 8 (the labelling across pairs with ties is not formalised); its checks over Q pass
and fail on the same three tampers. (i) Affine heads (score biases c_h): the learner
accepts them, the exporter refuses them with a CertificateError (not formalised).

The tests with Coq are marked slow (a fewer-heads file's failure at its checks over Q takes
20 to 30 s of coqc CPU on a loaded machine, its proof more). Files proved whole here use the runs' answers widened to a 256-bit oracle's intervals
(:func:`coq_text.widened_answers`), which check in seconds; parts 7 and 8 are tested on
the checks over Q they rest on (:func:`coq_text.close_checks_pass`, no interval calls).
"""

from __future__ import annotations

from typing import Any

import pytest
from coq_text import close_checks_pass, needs_coq, replace_entry, widened_answers

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported

TWO = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])]
TIED = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [1, 2])]
D64 = "18446744073709551616%positive"


def _tampered(text: str, tamper: str) -> str:
    """``text`` with a certified W entry changed, D narrowed to 2^21 (below the certified
    scores' denominators 2^22) or the fourth recorded answer dropped from the list."""
    if tamper == "rational":
        out = replace_entry(text, "W_0", "1%nat, 1%nat", "(1 # 2)")
    elif tamper == "narrower-D":
        out = text.replace(D64, f"{2**21}%positive")
    else:
        out = text.replace("rec_3; ", "", 1)
    assert out != text, tamper
    return out


def _run(model: list[Any], **kw: Any) -> dict[str, Any]:
    """The certificate of a default certified run (256 bits, D = 2^64) of ``model``'s heads."""
    return va.learn_multi_head(
        va.Oracle(va.MultiHeadAttention(model), "certified"), **kw
    ).certificate()


@pytest.fixture(scope="module")
def fewer() -> dict[str, Any]:
    return _run(TWO, max_heads=3)


@pytest.fixture(scope="module")
def fewer_text(fewer: dict[str, Any]) -> str:
    return va.export_coq(widened_answers(fewer, 250))


@pytest.fixture(scope="module")
def tied() -> dict[str, Any]:
    return _run(TIED, heads=2)


@pytest.fixture(scope="module")
def tied_text(tied: dict[str, Any]) -> str:
    return va.export_coq(tied)


def test_fewer_heads_states_parts_1_to_4(fewer: dict[str, Any], fewer_text: str) -> None:
    assert (fewer["H0"], len(fewer["result"]["heads"]), fewer["queries"]["learning"]) == (3, 2, 32)
    assert fewer["answer_precision"] == 1297  # sized for H0 = 3 before the count is known
    for text in (fewer_text, va.export_coq(fewer)):
        assert "same_masses run" in text and "(length hs' <= 3)%nat" in text
        assert "mh_pairs_determined" not in text and "mh_pairs_close" not in text
        assert "does NOT state" in text.split("*)")[0]


def test_ties_state_part_7_not_8(tied: dict[str, Any], tied_text: str) -> None:
    assert len(tied["answers"]["ties"]) == 2 and tied["queries"]["learning"] == 24
    head = tied_text.split("*)")[0]
    assert "5. (the run has H0 = 2 certified heads)" in head
    assert "7. every model of at most 2 heads that meets the assumption" in head
    assert "6. (no ties" not in head and "8. every such model" not in head
    assert "apply (mh_pairs_close run Sm eps hs')" in tied_text
    assert "mh_identified" not in tied_text  # neither 6. nor 8.


def test_affine_run_is_refused() -> None:
    """Two heads with score biases c_h and an output bias: learned, not exported."""
    model = va.MultiHeadAttention(
        [([[1, 0], [0, -1]], [1, 2], [1, 0]), ([[0, 1], [1, 0]], [-1, 1], [0, -1])], beta=1
    )
    rec = va.learn_multi_head(va.Oracle(model, "certified"), heads=2)
    cert = rec.certificate()
    assert cert["affine"] is True and rec.exact
    with pytest.raises(CertificateError, match="bias-free"):
        va.export_coq(cert)


@needs_coq
@pytest.mark.slow
def test_fewer_heads_run_is_proved(fewer_text: str) -> None:
    check = compile_exported(fewer_text)
    assert check.ok, check.log[-2000:]


@needs_coq
@pytest.mark.slow
@pytest.mark.parametrize("tamper", ["rational", "narrower-D", "dropped-query"])
def test_fewer_heads_tampered_fails(fewer_text: str, tamper: str) -> None:
    text = _tampered(fewer_text, tamper)
    check = compile_exported(text)
    assert not check.ok, tamper
    # each fails at the checks over Q of part 1 (check_mh), before any interval call
    step = next(i for i, line in enumerate(text.splitlines(), 1) if "+ vm_compute." in line)
    assert f"line {step}," in check.log, (tamper, check.log[-2000:])


@needs_coq
@pytest.mark.slow
@pytest.mark.parametrize("tamper", ["none", "rational", "narrower-D", "dropped-query"])
def test_tied_run_checks_and_tampers(tied_text: str, tamper: str) -> None:
    text = tied_text if tamper == "none" else _tampered(tied_text, tamper)
    assert close_checks_pass(text) == (tamper == "none")

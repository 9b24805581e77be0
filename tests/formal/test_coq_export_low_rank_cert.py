"""Export of certified skeleton (low-rank) runs to Coq: the file proves its run under the
entry-level assumption, a tampered one fails.

The file's ``run_identified`` instantiates ``CertLowRankCert.lowrank_cert_entries``: every
head whose entries have denominators at most D (and that answers inside the balls) is the
certified one. A changed certified rational, a moved answer ball, a D below a certified
denominator, a D too large for the logit brackets, a dropped probe, a wrong denominator-
clearing integer, brackets sized for the wrong bound D (instead of D_m), ``Admitted`` and
another run's answer balls must each fail ``coqc``; a run whose balls are too wide for D_m
is refused with the precision it needs.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

import pytest
from coq_text import field, needs_coq, replace_entry, set_field
from hypothesis import given
from hypothesis import strategies as st
from test_coq_export_low_rank import RANK1, RANK2

import verified_attn as va
from verified_attn import formal
from verified_attn.certificates.kernel import parse_header
from verified_attn.certificates.low_rank_cross import Cross
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_check import compile_exported
from verified_attn.formal.coq_tables import bracket_delta, coq_q
from verified_attn.formal.export_low_rank_cert import measurement_bound

V = [Fraction(3, 2), 0, 1]
D = 16
BOUND = f"{D}%positive"


def _cert(W: list[list[Any]], v: list[Any], **kw: Any) -> dict[str, Any]:
    oracle = va.Oracle(va.SingleHeadAttention(W, v), "certified", **kw)
    return va.learn_low_rank(oracle, seed=0, denominator_bound=D).certificate()


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return _cert(RANK1, V)


@pytest.fixture(scope="module")
def cert_text(cert: dict[str, Any]) -> str:
    return va.export_coq(cert)


def _field(text: str, i: int, name: str) -> re.Match[str]:
    """Field ``name`` of the probe record ``cp_i`` (a value ends at ``;`` or ``|``)."""
    return field(text, f"cp_{i}", name, "[;|]")


def _set_field(text: str, i: int, name: str, value: str) -> str:
    return set_field(text, f"cp_{i}", name, value, "[;|]")


def _learning(cert: dict[str, Any]) -> list[Any]:
    """The learning probes (u, b) of the run, as the checker reads them."""
    cross = Cross(cert, parse_header(cert, "low-rank"))
    return [p for i, p in enumerate(cross.probes) if i not in cross.checks]


# ---------------------------------------------------------------------------------------
# The measurement bound D_m = D^K cu cb (the formula CertLowRankCert.measure_den_le proves).
# ---------------------------------------------------------------------------------------


def _measure(W: list[list[Fraction]], u: list[Fraction], b: list[Fraction]) -> Fraction:
    n = len(u)
    return sum((u[i] * W[i][j] * b[j] for i in range(n) for j in range(n)), Fraction(0))


@given(st.data())
def test_measurement_bound_holds_for_heads_with_entry_denominators_at_most_D(
    cert: dict[str, Any], data: st.DataObject
) -> None:
    entry = st.builds(Fraction, st.integers(-50, 50), st.integers(1, D))
    W = [[data.draw(entry) for _ in range(3)] for _ in range(3)]
    for p in _learning(cert):
        Dm, cu, cb = measurement_bound(D, p.u, p.b)
        assert all((cu * x).denominator == 1 for x in p.u)
        assert all((cb * y).denominator == 1 for y in p.b)
        assert _measure(W, p.u, p.b).denominator <= Dm


def test_the_entry_bound_itself_is_a_wrong_measurement_bound(cert: dict[str, Any]) -> None:
    # The wrong formula D_m = D: a head whose entries have denominators <= D = 16 (two of
    # 5, 7, 11, 13) has, on the run's own probe, a measurement of denominator above D.
    p = next(p for p in _learning(cert) if sum(1 for x in p.u if x) >= 2)
    i, k = [a for a, x in enumerate(p.u) if x][:2]
    j = next(c for c, y in enumerate(p.b) if y)
    found = []
    for q1, q2 in ((13, 11), (7, 5), (11, 7), (13, 5)):
        W = [[Fraction(0)] * 3 for _ in range(3)]
        W[i][j], W[k][j] = Fraction(1, q1), Fraction(1, q2)
        m = _measure(W, p.u, p.b)
        assert max(x.denominator for row in W for x in row) <= D
        assert m.denominator <= measurement_bound(D, p.u, p.b)[0]
        if m.denominator > D:
            found.append(m)
    assert found, "no counterexample to the wrong bound D"


def test_measurement_bound_counts_only_nonzero_pairs() -> None:
    F = Fraction
    assert measurement_bound(5, [F(1), F(0)], [F(0), F(1, 3)]) == (5 * 3, 1, 3)
    assert measurement_bound(5, [F(0), F(0)], [F(1), F(1)]) == (1, 1, 1)
    assert measurement_bound(5, [F(1, 2), F(1, 3)], [F(1), F(1)]) == (5**4 * 6, 6, 1)


# ---------------------------------------------------------------------------------------
# The file.
# ---------------------------------------------------------------------------------------


def test_certified_low_rank_export_states_the_entry_level_run(
    cert: dict[str, Any], cert_text: str
) -> None:
    assert cert["arithmetic"] == "certified" and cert["rank"] == 1
    assert "Admitted" not in cert_text and "admit" not in cert_text
    assert "apply (lowrank_cert_entries run D v_lo v_hi cprobes)" in cert_text
    assert f"Definition D : positive := {BOUND}." in cert_text
    # 2dr - r^2 = 5 learning probes, each with its answer ball
    listed = re.search(r"Definition cprobes : list cprobe := \[(.*)\]\.", cert_text)
    assert listed is not None and listed.group(1).count("cp_") == 5
    assert "entries_den_le D 3 W' -> (forall i, (i < 3)%nat -> den_le D (v' i))" in cert_text
    assert "measures_den_le" not in cert_text
    header = cert_text.split("*)")[0]
    assert "The assumption that makes the answer exact is on the entries" in header


def test_a_run_too_coarse_for_the_entry_bound_is_refused_with_the_precision_it_needs() -> None:
    # the default bound D = 2^(256 / 4) needs D_m = D^K cu cb: far beyond 256 bits
    oracle = va.Oracle(va.SingleHeadAttention(RANK1, V), "certified")
    coarse = va.learn_low_rank(oracle, seed=0).certificate()
    with pytest.raises(CertificateError, match=r"about (\d+) are needed") as info:
        va.export_coq(coarse)
    need = int(re.search(r"about (\d+) are needed", str(info.value)).group(1))  # type: ignore[union-attr]
    assert 256 < need and f"denominator_bound={2**64}" in str(info.value)
    # at the named precision, with the same bound, the run exports
    oracle = va.Oracle(va.SingleHeadAttention(RANK1, V), "certified", precision=need)
    fine = va.learn_low_rank(oracle, seed=0, denominator_bound=2**64).certificate()
    assert "lowrank_cert_entries" in va.export_coq(fine)
    # a little below it, it does not
    oracle = va.Oracle(va.SingleHeadAttention(RANK1, V), "certified", precision=need - 48)
    short = va.learn_low_rank(oracle, seed=0, denominator_bound=2**64).certificate()
    with pytest.raises(CertificateError, match="are needed"):
        va.export_coq(short)


@needs_coq
def test_certified_rank_one_run_is_proved_on_whitelisted_axioms(cert_text: str) -> None:
    check = compile_exported(cert_text)
    assert check.ok, check.log[-2000:]
    assert check.theorem == "run_identified"
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


@needs_coq
@pytest.mark.slow
def test_certified_rank_two_run_is_proved() -> None:
    cert = _cert(RANK2, [1, 2, 0, Fraction(1, 2)])
    assert cert["rank"] == 2
    check = compile_exported(va.export_coq(cert))
    assert check.ok, check.log[-2000:]
    assert check.axioms and set(check.axioms) <= formal.ALLOWED_AXIOMS


def _wrong_bound_brackets(text: str) -> str:
    """Every logit bracket sized for the entry bound D instead of D_m."""
    for i in range(5):
        pm = re.search(rf"Definition probe_{i} : probe := .*?pm := \((.*?)\)%Q", text, re.S)
        assert pm is not None, i
        m = Fraction(pm.group(1).replace(" # ", "/"))
        delta = bracket_delta([[Fraction(1)]], D, m.denominator)
        text = _set_field(text, i, "cpmlo", coq_q(m - delta))
        text = _set_field(text, i, "cpmhi", coq_q(m + delta))
    return text


@needs_coq
@pytest.mark.parametrize(
    "tamper",
    [
        "rational",  # a certified W entry changed
        "interval",  # a probe's answer ball shrunk to its lower end, off the answer
        "narrower-D",  # D below v's certified denominator (2)
        "wider-D",  # D too large for the logit brackets to pin one rational
        "dropped-probe",  # a learning probe removed from the recorded list
        "clearing-integer",  # cb no longer clears b's denominators
        "wrong-bound",  # brackets sized for D, not for D_m = D^K cu cb
        "admitted",  # the proof replaced by Admitted
    ],
)
def test_tampered_certified_low_rank_file_fails_coqc(
    cert: dict[str, Any], cert_text: str, tamper: str
) -> None:
    text = cert_text
    if tamper == "rational":
        text = replace_entry(text, "W_c", "1%nat, 1%nat", "(3)")
    elif tamper == "interval":
        text = _set_field(text, 1, "cphi", _field(text, 1, "cplo").group(1))
    elif tamper == "narrower-D":
        text = text.replace(
            f"Definition D : positive := {BOUND}", "Definition D : positive := 1%positive"
        )
    elif tamper == "wider-D":
        text = text.replace(
            f"Definition D : positive := {BOUND}", "Definition D : positive := 256%positive"
        )
    elif tamper == "dropped-probe":
        text = re.sub(r"(Definition cprobes : list cprobe := \[)cp_\d+; ", r"\1", text)
    elif tamper == "clearing-integer":
        cb = _field(text, 1, "cpcb").group(1)
        assert cb != "1%positive"
        text = _set_field(text, 1, "cpcb", "1%positive")
    elif tamper == "wrong-bound":
        text = _wrong_bound_brackets(text)
    elif tamper == "admitted":
        proof = text[text.index("Proof.", text.index("Theorem run_identified")) :]
        text = text.replace(proof[: proof.index("Qed.") + 4], "Admitted.")
    assert text != cert_text, tamper
    assert not compile_exported(text).ok, tamper


@needs_coq
def test_another_certified_runs_balls_fail(cert_text: str) -> None:
    other = va.export_coq(_cert([[2, 4, 0], [1, 2, 0], [1, 2, 0]], V))
    text = cert_text
    for i in range(5):
        for name in ("cplo", "cphi"):
            text = _set_field(text, i, name, _field(other, i, name).group(1))
    assert text != cert_text
    assert not compile_exported(text).ok


def test_cli_learns_with_a_denominator_bound_that_exports(tmp_path: Any, capsys: Any) -> None:
    from verified_attn.cli import main

    learn = ["learn", "low-rank", "--d", "3", "--rank", "1", "--arithmetic", "certified"]
    cert = tmp_path / "cert.json"
    assert main([*learn, "--denominator-bound", "16", "--certificate", str(cert)]) == 0
    assert "denominator <= 16 " in " ".join(json.loads(cert.read_text())["assumptions"])
    capsys.readouterr()
    assert main(["export-coq", str(cert), "-o", str(tmp_path / "cert.v")]) == 0
    assert "Definition D : positive := 16%positive." in (tmp_path / "cert.v").read_text()

"""Shared pieces of the formal tests: the Coq skip marker, and edits of an exported Coq
file's rational tables for the tamper tests."""

from __future__ import annotations

import copy
import re
from fractions import Fraction
from typing import Any

import pytest

from verified_attn import formal
from verified_attn.serialize import dump_rational

needs_coq = pytest.mark.skipif(
    not formal.coq_available(), reason=f"needs Coq and Coq Interval ({formal.COQ_INSTALL_HINT})"
)
"""Skip a test where ``coqc`` (with Coq Interval) is not installed."""


def entry(text: str, table: str, key: str) -> re.Match[str]:
    """The ``| key => value%Q`` line of ``Definition table``, its value as group 1."""
    block = re.search(rf"Definition {table} : q(?:mat|vec) := .*?end\.", text, re.S)
    assert block is not None, table
    m = re.compile(rf"  \| {key} => (.*?)%Q\n").search(text, block.start(), block.end())
    assert m is not None, (table, key)
    return m


def replace_entry(text: str, table: str, key: str, value: str) -> str:
    """``text`` with that entry's value replaced by ``value``."""
    m = entry(text, table, key)
    return text[: m.start(1)] + value + text[m.end(1) :]


def drop_entry(text: str, table: str, key: str) -> str:
    """``text`` without that entry's line."""
    m = entry(text, table, key)
    return text[: m.start()] + text[m.end() :]


def real_definition(text: str, name: str) -> re.Match[str]:
    """The ``Definition name : R := value.`` of an exported file, its value as group 1."""
    m = re.search(rf"Definition {name} : R := (.*?)\.\n", text)
    assert m is not None, name
    return m


def set_real_definition(text: str, name: str, value: str) -> str:
    """``text`` with that real definition's value replaced by ``value``."""
    m = real_definition(text, name)
    return text[: m.start(1)] + value + text[m.end(1) :]


def field(text: str, definition: str, name: str, end: str = ";") -> re.Match[str]:
    """The ``name := value;`` field of the record ``Definition definition``, value as group 1
    (``end``: the pattern that ends the value)."""
    m = re.search(rf"Definition {definition} : \w+ := .*?{name} := (.*?){end}", text, re.S)
    assert m is not None, (definition, name)
    return m


def set_field(text: str, definition: str, name: str, value: str, end: str = ";") -> str:
    """``text`` with that record field's value replaced by ``value``."""
    m = field(text, definition, name, end)
    return text[: m.start(1)] + value + text[m.end(1) :]


def compiles(prelude: str, body: str) -> bool:
    """Whether ``prelude + body`` compiles against the built ``formal/``; a syntax error or
    an unknown name fails the test instead (a variant must be refused for being false, not
    for a typo)."""
    from verified_attn import formal

    directory = formal.build().directory
    assert directory is not None
    proc = formal.run_coq(prelude + body, directory)
    out = proc.stdout + proc.stderr
    assert "Syntax error" not in out and "was not found" not in out, out
    return proc.returncode == 0


def widened_answers(cert: dict[str, Any], bits: int) -> dict[str, Any]:
    """A copy of a certified canonical multi-head certificate whose every recorded answer
    ball has radius at least 2^-bits (same midpoints): the intervals an oracle answering at
    about ``bits`` bits would give. The balls still hold the true answers."""
    out = copy.deepcopy(cert)
    floor = Fraction(1, 2**bits)

    def widen(ball: dict[str, Any]) -> None:
        mid, rad = ball["arb"]
        ball["arb"] = [mid, dump_rational(max(Fraction(rad), floor))]

    answers = out["answers"]
    for ball in answers["F0"]:
        widen(ball)
    for row in answers["F"]:
        for ball in row:
            widen(ball)
    for tie in answers["ties"]:
        widen(tie["answer"])
    return out


def close_checks_pass(text: str) -> bool:
    """An exported multi-head file's definitions, then ``check_mh run`` and ``check_close
    run Sm eps`` by computation (the checks over Q parts 1, 7 and 8 rest on; no interval
    calls, so seconds even for a file whose intervals are 900 bits narrow)."""
    defs = text[: text.index("Lemma hold")]
    goal = "Goal check_mh run = true /\\ check_close run Sm eps = true.\n"
    return compiles("", defs + goal + "split; vm_compute; reflexivity. Qed.\n")


def _admit(text: str, name: str, keep: frozenset[str] = frozenset()) -> tuple[str, dict[str, str]]:
    """``text`` with each lemma whose name matches the pattern ``name`` (those in ``keep``
    aside) admitted line for line, so that the failing line of a later step keeps its
    number; and the proofs admitted, by lemma."""
    admitted: dict[str, str] = {}

    def admit(m: re.Match[str]) -> str:
        if m.group(2) in keep:
            return m.group(0)
        admitted[m.group(2)] = m.group(3)
        return m.group(1) + "\n".join("  idtac." for _ in m.group(3).splitlines()) + "\nAdmitted."

    pattern = rf"(Lemma ({name}) : [^\n]*\nProof\.\n)(.*?)\nQed\."
    return re.sub(pattern, admit, text, flags=re.S), admitted


def intervals_admitted(text: str, keep: frozenset[int] = frozenset()) -> str:
    """``text`` with every per-record interval lemma ``in_i`` but those numbered in ``keep``
    admitted, line for line. For tamper tests, and for files whose intervals are proved in a
    sample: a tamper that fails after those lemmas (the checks over Q, [hold], a theorem's
    proof) fails there whether or not they were proved, and a file of the same kind is
    proved in full elsewhere; this spares each test the minutes of [interval] calls before
    its step."""
    out, admitted = _admit(text, r"in_\d+", frozenset(f"in_{i}" for i in keep))
    assert admitted, "no interval lemma in_i to admit"
    return out


def interval_lemmas(text: str) -> list[int]:
    """The numbers i of the per-record interval lemmas ``in_i`` of ``text``."""
    return [int(i) for i in re.findall(r"Lemma in_(\d+) : ", text)]


def hold_admitted(text: str) -> str:
    """``text`` with its lemma [hold] (every recorded interval, by one [interval] call per
    record) admitted, line for line."""
    out, admitted = _admit(text, "hold")
    assert list(admitted) == ["hold"] and "interval with" in admitted["hold"], "no [hold] to admit"
    return out


def assert_proved_but_admitted(text: str, theorem: str) -> None:
    """Compile ``text`` with its [interval] calls admitted (in a file with per-record lemmas
    ``in_i``, all but the first and the last; otherwise the lemma [hold] that makes them):
    ``theorem`` must be checked on the whitelisted axioms and exactly the admitted lemmas."""
    from verified_attn import formal
    from verified_attn.formal.coq_check import compile_exported

    lemmas = interval_lemmas(text)
    keep = frozenset({lemmas[0], lemmas[-1]}) if lemmas else frozenset()
    admitted = {f"in_{i}" for i in lemmas if i not in keep} or {"hold"}
    check = compile_exported(intervals_admitted(text, keep) if lemmas else hold_admitted(text))
    assert check.theorem == theorem, check.log[-2000:]
    outside = {a.rsplit(".", 1)[-1] for a in set(check.axioms) - formal.ALLOWED_AXIOMS}
    assert outside == admitted, check.log[-2000:]

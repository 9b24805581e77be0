"""Shared pieces of the formal tests: the Coq skip marker, and edits of an exported Coq
file's rational tables for the tamper tests."""

from __future__ import annotations

import re

import pytest

from verified_attn import formal

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

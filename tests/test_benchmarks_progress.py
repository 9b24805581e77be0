"""Progress bars of the command line and the benchmarks: drawn on a terminal, silent
otherwise (logs, pipes, CI), through one shared helper in benchmarks/_common.py."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

from verified_attn.cli import main

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


class _Terminal(io.StringIO):
    """A standard error that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _common() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_common_progress", BENCHMARKS / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_bars_only_on_a_terminal(monkeypatch) -> None:
    common = _common()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert list(common.progress(range(3), "cells")) == [0, 1, 2]
    assert quiet.getvalue() == "" and common.learner_progress() is False

    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert list(common.progress(range(3), "cells", unit="size")) == [0, 1, 2]
    assert "cells:" in tty.getvalue() and "/3" in tty.getvalue()
    assert common.show_progress() is True and common.learner_progress() is True


def test_every_benchmark_script_uses_the_shared_helper() -> None:
    # Private modules (``_common.py``, ``_coq_export_kinds.py``) are parts of a script.
    scripts = [p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")]
    assert len(scripts) >= 12
    missing = [
        p.name
        for p in scripts
        if not any(f"{name}(" in p.read_text() for name in ("progress", "show_progress"))
    ]
    assert missing == []


def test_the_cli_draws_a_bar_on_a_terminal_only(monkeypatch, tmp_path) -> None:
    argv = ["learn", "single-head", "--d", "2", "--certificate", str(tmp_path / "c.json")]
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(argv) == 0
    assert "learn_single_head" in tty.getvalue() and "query" in tty.getvalue()

    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert main(argv) == 0
    assert quiet.getvalue() == ""

    sweep = ["sweep", "thm-4.1/query-count", "--sizes", "2", "--seeds", "0,1"]
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(sweep) == 0
    assert "thm-4.1/query-count" in tty.getvalue() and "cell" in tty.getvalue()

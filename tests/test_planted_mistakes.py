"""The planted-mistake benchmark (benchmarks/planted_mistakes.py): its anchors, its planting
and its bookkeeping. The run itself (an hour of ``verified-attn check``) is the benchmark's.

Every mistake's anchor must occur exactly once in the current code, so a refactoring that
moves or rewrites a planted line fails here, and the list is brought up to date instead of
silently planting nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "planted_mistakes.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_planted_mistakes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_every_anchor_occurs_once_in_the_code(bench: ModuleType) -> None:
    package = SCRIPT.parents[1] / "verified_attn"
    for m in bench.MISTAKES:
        assert (package / m.path).read_text().count(m.old) == 1, m.id
        assert m.old != m.new, m.id
    assert bench.main(["--list"]) == 0


def test_the_mistakes_cover_every_room_the_issue_names(bench: ModuleType) -> None:
    rooms = {m.room for m in bench.MISTAKES}
    assert {"certificates", "validation", "boxes", "adapters", "sweeps"} <= rooms
    assert {"exact", "noisy", "transformer", "multi_head", "oracle"} <= rooms
    assert rooms <= set(bench.ROOM_TESTS)
    root = SCRIPT.parents[1]
    for paths in bench.ROOM_TESTS.values():
        assert all((root / p).exists() for p in paths), paths
    assert len({m.id for m in bench.MISTAKES}) == len(bench.MISTAKES)


def test_planting_changes_exactly_the_anchor(bench: ModuleType, tmp_path: Path) -> None:
    m = bench.MISTAKES[0]
    target = tmp_path / m.path
    target.parent.mkdir(parents=True)
    target.write_text(f"before\n{m.old}after\n")
    bench.apply(m, tmp_path)
    assert target.read_text() == f"before\n{m.new}after\n"


@pytest.mark.parametrize("times", [0, 2])
def test_an_anchor_that_is_missing_or_repeated_is_refused(
    bench: ModuleType, tmp_path: Path, times: int
) -> None:
    m = bench.MISTAKES[0]
    target = tmp_path / m.path
    target.parent.mkdir(parents=True)
    target.write_text("x\n" + m.old * times)
    with pytest.raises(SystemExit, match=f"occurs {times} times"):
        bench.apply(m, tmp_path)


def test_the_summary_counts_main_job_tests_and_neither(bench: ModuleType) -> None:
    results = {
        "a": {"room": "boxes", "main_job": "caught"},
        "b": {"room": "boxes", "main_job": "missed", "tests": "caught"},
        "c": {"room": "sweeps", "main_job": "missed", "tests": "missed"},
        "d": {"room": "sweeps", "main_job": "missed"},
    }
    summary = bench.summarise(results)
    assert summary["rooms"]["boxes"] == {"mistakes": 2, "main_job": 1, "tests_only": 1, "neither": 0}
    assert summary["rooms"]["sweeps"] == {"mistakes": 2, "main_job": 0, "tests_only": 0, "neither": 2}
    assert summary["total"] == {"mistakes": 4, "main_job": 1, "tests_only": 1, "neither": 2}
    assert summary["neither"] == ["c", "d"]

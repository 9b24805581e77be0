"""The benchmarks' child-process rows (benchmarks/_transformer_heads.py ``child_row``): a row
read back from a fresh process, a timeout that kills it, and the float multi-head rows'
refusal row when their child runs out of time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _transformer_heads
import _transformer_heads_float


def test_a_child_row_is_read_back() -> None:
    assert _transformer_heads.child_row("math", "hypot", [3, 4], timeout=60) == 5.0


def test_a_child_past_its_timeout_is_killed() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        _transformer_heads.child_row("time", "sleep", [30], timeout=0.5)


def test_a_float_row_past_its_timeout_is_a_refusal_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transformer_heads_float, "TIMEOUT", 0.01)
    row = _transformer_heads_float.in_child_float("random", 2, 2, 0)
    assert row == {
        "source": "random",
        "d": 2,
        "H": 2,
        "seed": 0,
        "kind": "multi-head-float",
        "arithmetic": "float",
        "refused": "not finished within 0.01 s",
    }

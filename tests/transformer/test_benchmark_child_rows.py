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


def test_float_rows_rerun_only_the_rows_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--float-rows source:d:H:seed`` replaces those float rows alone, in FLOAT_SIZES
    order among the float rows kept; the other kinds' rows stay. Without it (the wrong
    variant) every float row would be replaced by the ones run."""
    import json

    import transformer

    def fake(source: str, d: int, H: int, seed: int) -> dict:
        return {"source": source, "d": d, "H": H, "seed": seed, "kind": "multi-head-float",
                "new": True}

    monkeypatch.setattr(transformer, "in_child_float", fake)
    old = [
        {"kind": "biased", "d": 4},
        *({**fake(*spec), "new": False} for spec in (("random", 2, 2, 0), ("torch", 16, 2, 0))),
        {**fake("random", 16, 2, 0), "new": False},
    ]
    (tmp_path / "transformer.json").write_text(json.dumps({"rows": old}))
    args = ["--multi-head-float-only", "--out", str(tmp_path), "--float-rows"]
    data = transformer.main([*args, "random:16:2:0"])
    floats = [r for r in data["rows"] if r.get("kind") == "multi-head-float"]
    keys = [(r["source"], r["d"], r["new"]) for r in floats]
    assert keys == [("random", 2, False), ("random", 16, True), ("torch", 16, False)]
    assert data["rows"][0] == {"kind": "biased", "d": 4}
    with pytest.raises(SystemExit, match="not source:d:H:seed"):
        transformer.main([*args, "random:16:2"])

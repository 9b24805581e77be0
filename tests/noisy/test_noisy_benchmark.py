"""Smoke test of benchmarks/noisy.py at its --quick size: JSON written, checks pass."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "noisy.py"


def test_quick_run_writes_json_and_passes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_noisy", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path), "--no-plots", "--seed", "2"])
    data = json.loads((tmp_path / "noisy.json").read_text())
    assert data["benchmark"] == "noisy" and data["all_checks_passed"] is True
    assert data["metadata"]["seed"] == 2
    # Golden counts: d = 2 learning queries d^2 + d = 6; labels 2d + (d - 1 + d^2) bits, d = 3.
    assert {r["queries"] for r in data["error_vs_tau"]} == {6}
    assert [r["queries"] for r in data["labels"]] == [6 + 11 * 4, 6 + 11 * 12]
    assert all(r["actual_over_bound"] <= 1 for r in data["error_vs_tau"])
    paper, norm = data["designs"][-1]["largest_tau_paper"], data["designs"][-1]["largest_tau_norm"]
    assert norm > paper  # a tiny |v_i| hurts the paper's design, not the norm design

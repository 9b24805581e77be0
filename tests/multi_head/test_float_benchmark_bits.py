"""The float benchmark's bits columns and precision goals (benchmarks/multi_head_float_bits.py)."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCH / "results" / "multi_head_float.json"


def _module() -> Any:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("multi_head_float_bits", BENCH / "multi_head_float_bits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bits_bench = _module()


def _run(seed: int, perr: float | None, *, kind: str = "random", dtype: str = "float64",
         d: int = 8, H: int = 6) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": kind, "dtype": dtype, "d": d, "H": H, "seed": seed}
    if perr is None:
        return {**row, "learned": False, "refusal": "PrecisionExhausted"}
    return {**row, "learned": True, "parameter_error": perr, "prediction_error": perr * 4}


def test_goals_are_the_issues() -> None:
    goal = bits_bench.goal_bits
    assert goal("random", "float64", 8, 6) == 51
    assert goal("random", "float64", 8, 5) == goal("random", "float64", 16, 6) == 48
    assert goal("torch", "float64", 16, 4) == 46
    assert goal("torch", "float32", 8, 2) == 20  # float32's 24 bits less 4


def test_a_cell_counts_the_seeds_meeting_its_goal() -> None:
    rows = [
        _run(0, 2.0**-52),
        _run(1, 2.0**-51),  # exactly at the goal: met
        _run(2, 2.0**-50.9),  # a tenth of a bit short: not met
        _run(3, None),  # a refusal never meets a goal
    ]
    (cell,) = bits_bench.precision_rows(rows)
    assert (cell["goal_bits"], cell["seeds"], cell["met_goal"]) == (51, 4, 2)
    assert cell["fraction"] == 0.5
    assert cell["min_parameter_bits"] == pytest.approx(50.9)
    assert cell["median_parameter_bits"] == pytest.approx(51.0)
    assert cell["min_prediction_bits"] == pytest.approx(48.9)
    # One goal for every cell (--precision-goal BITS / --goal BITS).
    (lower,) = bits_bench.precision_rows(rows, 50)
    assert (lower["goal_bits"], lower["met_goal"]) == (50, 3)


def test_a_run_stating_more_bits_than_measured_is_counted() -> None:
    honest = _run(0, 2.0**-45) | {"reported_parameter_bits": 44.0}
    over = _run(1, 2.0**-45) | {"reported_parameter_bits": 45.5}
    old = _run(2, 2.0**-45)  # recorded before the figure was: not counted
    assert bits_bench.bits_columns([honest, old])["overclaimed"] == 0
    assert bits_bench.bits_columns([honest, over, old])["overclaimed"] == 1


def test_bits_are_minus_log2_of_the_runs_errors() -> None:
    row = bits_bench.add_bits(_run(0, 3e-15))
    assert row["parameter_bits"] == pytest.approx(-math.log2(3e-15))
    assert row["prediction_bits"] == pytest.approx(-math.log2(1.2e-14))
    refused = bits_bench.add_bits(_run(1, None) | {"parameter_error": None, "prediction_error": None})
    assert refused["parameter_bits"] is None and refused["prediction_bits"] is None


def test_the_recorded_json_carries_the_bits_its_runs_give() -> None:
    data = json.loads(RESULTS.read_text())
    again = bits_bench.recompute(copy.deepcopy(data))
    assert again["precision"] == data["precision"]
    assert again["summary"] == data["summary"]
    assert again["runs"] == data["runs"]
    # A wrong figure in the recorded rows is told apart.
    data["precision"][0]["median_parameter_bits"] += 1
    assert bits_bench.recompute(copy.deepcopy(data))["precision"] != data["precision"]


def test_recompute_and_plot_from_a_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [_run(s, 2.0 ** -(44 + s)) for s in range(3)] + [_run(0, 1e-6, kind="torch", dtype="float32", d=8, H=2)]
    summary = [
        {"kind": k, "dtype": t, "d": d, "H": H}
        for k, t, d, H in sorted({(r["kind"], r["dtype"], r["d"], r["H"]) for r in rows})
    ]
    (tmp_path / "multi_head_float.json").write_text(json.dumps({"runs": rows, "summary": summary}))
    bits_bench.main(["--out", str(tmp_path)])
    data = json.loads((tmp_path / "multi_head_float.json").read_text())
    random_cell = next(p for p in data["precision"] if p["kind"] == "random")
    assert random_cell["min_parameter_bits"] == pytest.approx(44)
    assert data["summary"][0]["median_parameter_bits"] == pytest.approx(45)
    assert (tmp_path / "multi_head_float_bits.png").stat().st_size > 1000


def test_quick_run_with_a_precision_goal(tmp_path: Path) -> None:
    """The benchmark's --precision-goal path, quick mode, random cells only (a few seconds)."""
    import os
    import subprocess

    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    cmd = [sys.executable, str(BENCH / "multi_head_float.py"), "--quick", "--out", str(tmp_path),
           "--cells", "random", "--precision-goal", "40"]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    data = json.loads((tmp_path / "multi_head_float.json").read_text())
    assert [p["goal_bits"] for p in data["precision"]] == [40.0, 40.0]
    assert all(cell["overclaimed"] == 0 for cell in data["summary"])
    for run in data["runs"]:
        assert run["parameter_bits"] == pytest.approx(-math.log2(run["parameter_error"]))
        assert run["reported_parameter_bits"] <= run["parameter_bits"]
        assert run["parameter_abs_error"] == pytest.approx(
            run["parameter_error"] * run["max_parameter_magnitude"]
        )
    for cell, prec in zip(data["summary"], data["precision"], strict=True):
        assert cell["min_parameter_bits"] == prec["min_parameter_bits"]
        runs = [r for r in data["runs"] if (r["d"], r["H"]) == (cell["d"], cell["H"])]
        assert prec["met_goal"] == sum(r["parameter_bits"] >= 40 for r in runs)
    assert (tmp_path / "multi_head_float_bits.png").exists()


def test_the_option_without_bits_takes_the_issues_goals() -> None:
    rows = [_run(0, 2.0**-49, d=16, H=2), _run(0, 2.0**-47, kind="torch", d=8, H=2)]
    goals = {p["kind"]: (p["goal_bits"], p["met_goal"]) for p in bits_bench.goal_rows("issue", rows)}
    assert goals == {"random": (48.0, 1), "torch": (46.0, 1)}
    assert [p["goal_bits"] for p in bits_bench.goal_rows("50", rows)] == [50.0, 50.0]

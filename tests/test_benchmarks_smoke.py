"""Smoke test of benchmarks/exact_recovery.py at its --quick size.

>>> GOLDEN[5]
30

Runs the script's ``main`` once into a temporary directory and checks the JSON it writes:
the figures are there, every learning-query count is exactly d^2 + d (golden values), the
verification queries are listed separately, and the target bookkeeping can say "miss".
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "exact_recovery.py"

# Golden learning-query counts d^2 + d for the --quick sweep sizes (written out, not computed).
GOLDEN = {1: 2, 2: 6, 3: 12, 5: 30, 8: 72}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_exact_recovery", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _load()


@pytest.fixture(scope="module")
def quick_run(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("bench")
    returned = bench.main(["--quick", "--out", str(out), "--seed", "3"])
    return out, returned


def test_writes_json_and_plots(quick_run: tuple[Path, Any]) -> None:
    out, returned = quick_run
    data = json.loads((out / "exact_recovery.json").read_text())
    assert data["benchmark"] == "exact_recovery"
    assert data["quick"] is True
    assert data["metadata"]["seed"] == 3
    assert data["metadata"]["settings"]["precision"] == 256
    assert data["all_checks_passed"] is True
    assert returned["all_checks_passed"] is True
    pytest.importorskip("matplotlib")
    assert sorted(data["figures"]) == ["exact_recovery_queries.png", "exact_recovery_times.png"]
    for name in data["figures"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_queries_equal_d2_plus_d_exactly(quick_run: tuple[Path, Any]) -> None:
    out, _ = quick_run
    rows = json.loads((out / "exact_recovery.json").read_text())["queries"]["rows"]
    float_rows = {r["d"]: r for r in rows if r["arithmetic"] == "float"}
    assert sorted(float_rows) == sorted(GOLDEN)
    assert any(r["arithmetic"] == "certified" for r in rows)
    for r in rows:
        assert r["queries"] == GOLDEN[r["d"]]
        assert r["recovery_reports"] == GOLDEN[r["d"]]
        assert r["parameter_count"] == GOLDEN[r["d"]]
        assert r["queries_by_phase"] == {"v": r["d"], "W": r["d"] ** 2, "verify": 8}
        assert r["verification_queries"] == 8
        # Verification sequences have the lengths 1, 2, 3, 4, 6, 8, 12, 16 (one each): the
        # longest is 16 and they send 52 tokens (4 and 2 * (1 + 2 + 3 + 4) = 20 before the
        # result contract's verification lengths).
        assert r["max_length"] == 16
        # d length-1 queries + d^2 length-2 queries + the verification tokens.
        # (the seventh is the eighth, length 16, with its context reversed)
        assert r["tokens_sent"] == r["d"] + 2 * r["d"] ** 2 + (1 + 2 + 3 + 4 + 6 + 8 + 16 + 16)


def test_timings_recorded_without_targets_in_quick_mode(quick_run: tuple[Path, Any]) -> None:
    out, _ = quick_run
    data = json.loads((out / "exact_recovery.json").read_text())
    rows = data["times"]["rows"]
    assert {r["mode"] for r in rows} == {"certified", "float"}
    for r in rows:
        assert r["repeats"] == len(r["times_s"]) >= 1
        assert min(r["times_s"]) <= r["median_s"] <= max(r["times_s"])
        assert len(r["cpu_s"]) == r["repeats"] and r["median_cpu_s"] > 0
        assert 0 < r["median_black_box_s"] < r["median_s"]
        assert r["queries"] == r["d"] ** 2 + r["d"]
        if r["mode"] == "certified":
            assert r["W_equals_truth"] is True
        else:
            assert r["max_rel_error_W"] < 1e-10
    assert data["targets"] == [] and data["targets_evaluated"] is False


def test_a_count_off_by_one_is_flagged(bench: ModuleType) -> None:
    run = bench.float_run(3, 0)()
    assert bench.query_row(run)["equals_d2_plus_d"] is True
    phases = dict(run.queries_by_phase, W=run.queries_by_phase["W"] + 1)
    extra = replace(run, oracle_queries=run.oracle_queries + 1, queries_by_phase=phases)
    assert bench.query_row(extra)["equals_d2_plus_d"] is False


def test_target_ratio_and_verdict(bench: ModuleType) -> None:
    run = replace(bench.certified_run(2, 0)(), d=64)
    hit = bench.time_row("certified", run, 10.0, [9.0, 10.0, 30.0])
    assert (hit["target_s"], hit["ratio"], hit["passed"]) == (20.0, 0.5, True)
    miss = bench.time_row("certified", run, 25.0, [25.0])
    assert (miss["ratio"], miss["passed"]) == (1.25, False)
    off_target = bench.time_row("float", run, 25.0, [25.0])
    assert (off_target["target_s"], off_target["passed"]) == (None, None)

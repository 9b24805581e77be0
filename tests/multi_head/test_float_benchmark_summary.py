"""The float benchmark's summary (benchmarks/multi_head_float.py): what each cell counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "multi_head_float.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("multi_head_float_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _summarise() -> Any:
    return _bench().summarise


def _row(seed: int, queries: int | None, *, perr: float = 1e-12, prtol: float = 1e-6) -> dict:
    row: dict[str, Any] = {
        "kind": "random",
        "dtype": "float64",
        "d": 8,
        "H": 8,
        "seed": seed,
        "follow_up": 2033,
        "bound": 4346,
        "parameters": 576,
        "seconds": 1.0,
    }
    if queries is None:
        return {**row, "learned": False, "refusal": "PrecisionExhausted"}
    return {
        **row,
        "learned": True,
        "queries": queries,
        "u_scale": 1.0,
        "rtol": 1e-6,
        "parameter_rtol": prtol,
        "parameter_error": perr,
        "prediction_error": 1e-12,
    }


def test_a_cell_counts_learned_wrong_and_past_the_follow_up() -> None:
    rows = [
        _row(0, 1626),
        _row(1, 2033),  # at the follow-up's count: not under it
        _row(2, 2034, perr=2e-6),  # off by more than its stated parameter tolerance: wrong
        _row(3, None),
    ]
    (cell,) = _summarise()(rows)
    assert (cell["runs"], cell["learned"], cell["learned_1e-10"]) == (4, 3, 2)
    assert cell["wrong"] == 1 and cell["over_follow_up"] == 2
    assert cell["max_queries"] == 2034 and cell["refusals"] == ["PrecisionExhausted"]
    # One query fewer is under the follow-up's count: no longer counted.
    rows[1] = _row(1, 2032)
    assert _summarise()(rows)[0]["over_follow_up"] == 1


def test_a_cell_counts_runs_within_1e_12_and_polished() -> None:
    rows = [_row(0, 1680, perr=1e-12), _row(1, 1626, perr=3e-12), _row(2, None)]
    rows[0]["polish"] = 54  # the precision polish's queries
    (cell,) = _summarise()(rows)
    assert (cell["learned_1e-10"], cell["learned_1e-12"], cell["polished"]) == (2, 1, 1)
    # A run without the field (or with 0) asked no polish; a refusal is never counted.
    rows[1]["polish"] = 0
    rows[2]["polish"] = 54
    assert _summarise()(rows)[0]["polished"] == 1


def test_a_cell_reports_its_largest_peak_memory() -> None:
    rows = [{**_row(0, 1626), "peak_rss_mib": 300.0}, {**_row(1, None), "peak_rss_mib": 900.5}]
    rows.append(_row(2, 1700))  # a row from a run before the memory was measured
    (cell,) = _summarise()(rows)
    assert cell["max_peak_rss_mib"] == 900.5  # refused runs' memory counts too
    (old,) = _summarise()([_row(3, 1626)])
    assert old["max_peak_rss_mib"] is None


def test_a_run_of_some_cells_keeps_the_earlier_records_and_their_note() -> None:
    # --keep-other-cells rewrites the JSON: the float32 cells' earlier design
    # (float32_before) and the note on how the kept rows were run must survive a random-only
    # rerun (a rerun once dropped both).
    old = {
        "meta": {"settings": {"note": "torch32 rows one module at a time"}},
        "summary": [],
        "float32_before": [{"kind": "torch", "dtype": "float32"}],
        "runs": [_row(0, 1900)],
    }
    kept, note = _bench()._kept_records(old)
    assert kept == {"float32_before": old["float32_before"]}
    assert note == "torch32 rows one module at a time"
    assert _bench()._kept_records({"meta": {}, "runs": []}) == ({}, None)

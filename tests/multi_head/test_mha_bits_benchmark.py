"""The nn.MultiheadAttention grid of the precision benchmark (benchmarks/_mha_bits.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name: str) -> Any:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


grid = _module("_mha_bits")


def _row(E: int, H: int, seed: int, bits: float) -> dict[str, Any]:
    return {"d": E, "H": H, "seed": seed, "parameter_bits": bits, "floor_bits": bits,
            "before_refine_bits": bits - 2, "once_rounded_floor_bits": 50.0,
            "once_rounded_start": "learner", "answer_rounding_bits": 50.0, "queries": 508,
            "follow_up": 509, "refinement": 64, "seconds": 1.0}


def test_a_cell_meets_46_bits_only_at_46_or_more() -> None:
    rows = [_row(8, 2, 20, 46.0), _row(8, 2, 21, 45.99), _row(8, 2, 22, 48.0)]
    (cell,) = grid.mha_summary(rows)
    assert (cell["met_46"], cell["seeds"], cell["min_parameter_bits"]) == (2, 3, 45.99)
    assert cell["median_parameter_bits"] == 46.0


def test_a_row_replaces_the_same_module_only(tmp_path: Path) -> None:
    import json

    path = tmp_path / "m.json"
    path.write_text(json.dumps({"runs": [_row(8, 2, 20, 40.0), _row(8, 2, 21, 41.0)]}))
    rows = grid.merge_rows(path, [_row(8, 2, 20, 47.0)])
    assert sorted((r["seed"], r["parameter_bits"]) for r in rows) == [(20, 47.0), (21, 41.0)]


def test_the_exact_heads_are_the_adapters_to_its_rounding() -> None:
    """The 200-bit mapping agrees with the adapter's float64 one to a few units of rounding
    (a wrong variant, the score scale left out, is off by a factor)."""
    from multi_head_float import torch_box

    from verified_attn.adapters.torch import attention_parameters

    mha, r = torch_box(8, 2, 20)
    mha = mha.double()
    heads, beta = grid.exact_heads(mha, r)
    p = attention_parameters(mha, r)
    ref = max(float(np.abs(h[0]).max()) for h in heads)
    err = max(float(np.abs(heads[k][0] - p.W[k]).max()) for k in range(2)) / ref
    err = max(err, *(float(np.abs(heads[k][1] - p.v[k]).max()) for k in range(2)))
    assert err < 2.0**-48
    assert abs(beta - p.beta) <= 2.0**-48 * max(1.0, abs(beta))
    assert float(np.abs(2 * heads[0][0] - p.W[0]).max()) > 0.1 * ref  # sqrt(4) = 2 left in

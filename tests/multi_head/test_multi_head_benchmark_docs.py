"""Smoke test of benchmarks/multi_head.py (--quick) and the python blocks of docs/multi_head.md."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "multi_head.py"
DOC = ROOT / "docs" / "multi_head.md"

# Learning queries d + 2H(d^2 + d - 1) for the --quick sizes, written out.
GOLDEN = {(1, 1): 3, (2, 2): 22, (3, 2): 47}
# Variants (d, H, equal v, affine): equal v adds d(d - 1) tie links (plain) or d^2 (affine);
# affine is d + 1 + 2H(d^2 + 2d - 1).
VARIANTS = {
    (2, 2, True, False): 24,
    (2, 2, False, True): 31,
    (2, 2, True, True): 35,
    (3, 2, True, False): 53,
    (3, 2, False, True): 60,
    (3, 2, True, True): 69,
}


def test_quick_benchmark_writes_golden_counts(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_multi_head", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path), "--seed", "1"])
    data = json.loads((tmp_path / "multi_head.json").read_text())
    got = {(r["d"], r["H"]): r["queries"] for r in data["canonical"]}
    assert got == GOLDEN
    assert all(r["exact"] and r["queries"] <= r["follow_up"] for r in data["canonical"])
    assert all(r["certificate_ok"] for r in data["canonical"] + data["orthogonal"])
    assert [r["queries"] for r in data["orthogonal"]] == [8]
    variants = {(r["d"], r["H"], r["equal_v"], r["affine"]): r for r in data["variants"]}
    assert {k: r["queries"] for k, r in variants.items()} == VARIANTS
    for r in variants.values():
        assert r["exact"] and r["queries"] <= r["limit"]
        if not r["affine"]:  # the follow-up's count is for the bias-free model
            assert r["limit"] <= r["follow_up"]
    assert data["meta"]["seed"] == 1


def test_doc_python_blocks_run() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = [
        b for k, b in re.findall(r"^```(\w+)[^\n]*\n(.*?)^```", text, re.S | re.M) if k == "python"
    ]
    assert len(blocks) >= 5
    ns: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), ns)
    assert ns["rec"].queries == 47 and ns["proof"].holds

"""The docs' results tables are what the benchmark JSON gives (docs/_doc_tables.py), and the
pipeline picture lists the stages the float learner runs, in its order (docs/_pipeline_figure.py).
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = DOCS / "multi_head.md"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tables = _load("_doc_tables")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of every JSON file the tables are generated from."""
    out = tmp_path / "results"
    out.mkdir()
    for source, _ in tables.TABLES.values():
        shutil.copy(tables.RESULTS / source, out / source)
    return out


def test_the_pages_tables_are_what_the_json_gives() -> None:
    assert tables.main(["--check"]) == 0, "run: python docs/_doc_tables.py"
    text = PAGE.read_text(encoding="utf-8")
    shown = [n for p in tables.PAGES for n in tables.tables_in((ROOT / p).read_text("utf-8"))]
    assert shown == list(tables.TABLES)  # every table, once, in order, over the pages
    assert "| random float64 | 8 |" in text and "| `pilot` | " in text  # filled, not empty


def test_a_hand_edited_table_is_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = PAGE.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| random float64 | 8 |"))
    cells = row.split(" | ")
    cells[3] = "131/132"  # one run fewer learned than the JSON says
    page = tmp_path / "multi_head.md"
    page.write_text(text.replace(row, " | ".join(cells)), encoding="utf-8")
    assert tables.main(["--check", str(page)]) == 1
    assert "tables differ" in capsys.readouterr().err
    # Writing restores exactly what the repository's page holds.
    assert tables.main([str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text


def test_a_changed_json_makes_the_page_stale(tmp_path: Path, results: Path) -> None:
    path = results / "multi_head_ablation.json"
    data = json.loads(path.read_text())
    data["summary"][1]["rescued"] += 1  # a stage that rescued one more run
    path.write_text(json.dumps(data))
    page = tmp_path / "multi_head.md"
    shutil.copy(PAGE, page)
    assert tables.main(["--check", "--results", str(results), str(page)]) == 1
    tables.main(["--results", str(results), str(page)])
    switch = data["summary"][1]["switch"]
    assert f"`{switch}` (" in page.read_text(encoding="utf-8")  # named in the sentence
    assert tables.main(["--check", "--results", str(results), str(page)]) == 0


def test_a_float_cell_changed_in_the_json_is_seen(tmp_path: Path, results: Path) -> None:
    path = results / "multi_head_float.json"
    data = json.loads(path.read_text())
    data["summary"][0]["max_parameter_error"] *= 1000
    path.write_text(json.dumps(data))
    page = tmp_path / "multi_head.md"
    shutil.copy(PAGE, page)
    assert tables.main(["--check", "--results", str(results), str(page)]) == 1


def test_new_switches_and_cells_get_rows(results: Path) -> None:
    # The ablation may grow: a new switch and a new cell appear without any code change.
    ablation = json.loads((results / "multi_head_ablation.json").read_text())
    new = dict(ablation["summary"][-1], switch="new_stage", rescued=2, queries_ratio=1.5)
    ablation["summary"].append(new)
    ablation["meta"]["settings"]["runs"][0]["cells"].append(["torch", "float64", 32, 8, 2])
    table = tables.ablation_table(ablation)
    assert "| `new_stage` | " in table
    assert "nn.MHA float64 d = 32, H = 8 (2 seeds)" in table
    together = dict(ablation["summary"][-1], switch="new_stage+pilot", learned=1, runs=3)
    ablation["summary"].append(together)
    assert "| `new_stage+pilot` |" not in tables.ablation_table(ablation)
    assert "learned" in tables.ablation_table(ablation).split("Switched off together")[1]
    assert "`new_stage` (queries x1.5, rescued 2)" in table
    floats = json.loads((results / "multi_head_float.json").read_text())
    cell = dict(floats["summary"][0], d=128, H=3, learned=1, runs=2)
    floats["summary"].append(cell)
    assert "| random float64 | 128 | 3 | 1/2 |" in tables.float_table(floats)


def test_a_lost_marker_or_an_unknown_table_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = PAGE.read_text(encoding="utf-8")
    page = tmp_path / "multi_head.md"
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    monkeypatch.setattr(
        tables, "PAGES", ["multi_head.md", "multi_head_float_benchmark.md", "transformer.md"]
    )
    shutil.copy(DOCS / "multi_head_float_benchmark.md", tmp_path)
    shutil.copy(DOCS / "transformer.md", tmp_path)
    page.write_text(text, encoding="utf-8")
    assert tables.main(["--check"]) == 0
    # Without its end marker the float table is no longer generated: the check says so.
    page.write_text(text.replace("<!-- table:multi_head_float:end -->", ""), encoding="utf-8")
    assert tables.main(["--check"]) == 1
    page.write_text("no markers\n", encoding="utf-8")
    assert tables.main(["--check"]) == 1
    with pytest.raises(KeyError, match="no generator"):
        tables.render("<!-- table:nope:begin -->\n<!-- table:nope:end -->\n")


def test_the_pipeline_picture_lists_the_learners_stages_in_order() -> None:
    figure = _load("_pipeline_figure")
    learner = ROOT / "verified_attn" / "multi_head" / "pipeline" / "learner.py"
    fn = next(
        node
        for node in ast.parse(learner.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "learn_float"
    )
    called = [
        node.func.id
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (node.func.id.endswith("_stage") or node.func.id.startswith(("ask_", "plan")))
    ]
    # ast.walk is breadth-first: order the calls by their line in the source.
    lines = {
        node.func.id: node.lineno
        for node in ast.walk(fn)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    called.sort(key=lines.__getitem__)
    assert [stage[1] for stage in figure.STAGES] == called
    for _, _, module, _ in figure.STAGES:
        assert (learner.parent / f"{module}.py").is_file(), module
    shown = [line for line in PAGE.read_text().splitlines() if line.startswith("### ")]
    assert "![the float pipeline](multi_head_pipeline.svg)" in PAGE.read_text()
    assert len(shown) >= len({s[2] for s in figure.STAGES})  # a section per stage module


@pytest.mark.parametrize("name", ["_doc_tables", "_pipeline_figure"])
def test_the_doc_scripts_doctests(name: str) -> None:
    result = doctest.testmod(_load(name))
    assert result.attempted > 0 and result.failed == 0


def test_the_bits_table_follows_the_precision_rows(tmp_path: Path, results: Path) -> None:
    bench = DOCS / "multi_head_float_benchmark.md"
    assert tables.main(["--check", str(bench)]) == 0
    assert "| random float64 | 8 | 6 | " in bench.read_text(encoding="utf-8")
    path = results / "multi_head_float.json"
    data = json.loads(path.read_text())
    data["precision"][0]["met_goal"] -= 1  # one seed fewer met its goal
    path.write_text(json.dumps(data))
    page = tmp_path / "bench.md"
    shutil.copy(bench, page)
    assert tables.main(["--check", "--results", str(results), str(page)]) == 1
    # The float table's bits are -log2 of its worst errors: a wrong figure is seen there too.
    data["summary"][0]["max_parameter_error"] = 1e-6  # random float64 d = 8, H = 1
    assert "| 1.8e-15 | 49.0 |" in tables.float_table(json.loads(path.read_text()))
    assert "| 1.0e-06 | 19.9 |" in tables.float_table(data)


def test_the_page_stays_short() -> None:
    assert len(PAGE.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_multi_head_transformer_table_follows_its_rows(tmp_path: Path, results: Path) -> None:
    """docs/transformer.md's multi-head table is made from the rows ``kind: "multi-head"``
    of transformer.json: one more query in a row makes the page stale, and rewriting it
    shows the new count."""
    path = results / "transformer.json"
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if r.get("kind") == "multi-head"]
    assert rows and all("peak_rss_mib" in r and r["certificate_ok"] for r in rows)
    page = tmp_path / "transformer.md"
    shutil.copy(ROOT / "docs" / "transformer.md", page)
    assert tables.main(["--check", "--results", str(results), str(page)]) == 0
    rows[0]["queries"] += 1
    path.write_text(json.dumps(data))
    assert tables.main(["--check", "--results", str(results), str(page)]) == 1
    tables.main(["--results", str(results), str(page)])
    r = rows[0]
    assert f"| {r['queries']} ({r['ffn_queries']} + {r['attention_queries']}) |" in page.read_text(
        encoding="utf-8"
    )

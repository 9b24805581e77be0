"""What a reader of the package and its docs sees stands on its own.

* No user-facing text (README, CLAIMS.md, docs/, the package's docstrings, claim
  statements and CLI strings, benchmarks/ and examples/) names the internal theory notes:
  the theory is ``docs/theory.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Where user-facing text lives: files and whole folders, relative to the repository root.
USER_FACING = ["README.md", "CLAIMS.md", "docs", "verified_attn", "benchmarks", "examples"]
_TEXT_SUFFIXES = {".md", ".py", ".txt", ".toml", ".cfg", ".json", ".v"}
_INTERNAL_NOTES = re.compile(r"THEORY")


def internal_mentions(root: Path, entries: list[str]) -> list[str]:
    """``path:line: text`` for every line naming the internal notes under these entries."""
    hits = []
    for entry in entries:
        base = root / entry
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in files:
            if not path.is_file() or path.suffix not in _TEXT_SUFFIXES:
                continue
            if "results" in path.relative_to(root).parts:
                continue  # benchmark outputs: data, not prose
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if _INTERNAL_NOTES.search(line):
                    hits.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return hits


def test_no_user_facing_text_names_the_internal_notes() -> None:
    hits = internal_mentions(ROOT, USER_FACING)
    assert not hits, "point to docs/theory.md instead:\n" + "\n".join(hits)


def test_the_mention_scan_finds_a_mention(tmp_path: Path) -> None:
    # The scan must be able to fail: a planted mention in a doc page and a docstring.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\nSee THEORY §3.\n")
    (tmp_path / "pkg.py").write_text('"""Clean."""\n')
    (tmp_path / "mod.py").write_text('"""As in THEORY §2."""\n')
    hits = internal_mentions(tmp_path, ["docs", "pkg.py", "mod.py"])
    assert hits == ["docs/page.md:3: See THEORY §3.", 'mod.py:1: """As in THEORY §2."""']


def test_no_claim_names_the_internal_notes() -> None:
    from verified_attn.claims import all_claims

    bad = [
        c.id
        for c in all_claims()
        if _INTERNAL_NOTES.search(c.paper_ref) or _INTERNAL_NOTES.search(c.statement)
    ]
    assert not bad, f"claims whose reference or statement names the internal notes: {bad}"


# ---------------------------------------------------------------------------------------
# Typing: py.typed ships, mypy runs in CI
# ---------------------------------------------------------------------------------------


def test_package_is_marked_typed_and_ships_the_marker() -> None:
    import subprocess
    import tomllib

    marker = ROOT / "verified_attn" / "py.typed"
    assert marker.is_file(), "verified_attn/py.typed (PEP 561) is missing"
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(marker)], cwd=ROOT, capture_output=True
    )
    assert tracked.returncode == 0, "verified_attn/py.typed is not tracked by git"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(marker)], cwd=ROOT)
    assert ignored.returncode != 0, "py.typed is gitignored, so hatch would leave it out"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # hatch's wheel takes every non-ignored file of the listed package directories.
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["verified_attn"]


def test_ci_runs_mypy_over_the_package() -> None:
    import tomllib

    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if not line.lstrip().startswith("#")]
    assert "python -m mypy verified_attn" in commands, ".ci/run lost its mypy step"
    # After the test command (ruff first), as its own step.
    assert commands.index("python -m mypy verified_attn") > commands.index(
        'run_command "$TEST_COMMAND"'
    )
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["mypy"]["files"] == ["verified_attn"]
    extras = config["project"]["optional-dependencies"]["test"]
    assert any(dep.startswith("mypy") for dep in extras), "CI installs .[test]: add mypy"


def test_public_signatures_name_their_types() -> None:
    import inspect

    import verified_attn as va
    from verified_attn import types

    # The oracle's and the models' entry points take named types, not a bare Any.
    for fn, arg in [
        (va.Oracle.query, "X"),
        (va.Oracle.query_many, "Xs"),
        (va.SingleHeadAttention.evaluate, "X"),
    ]:
        annotation = inspect.signature(fn).parameters[arg].annotation
        assert annotation in {"SequenceLike", "Queries"}, (fn.__qualname__, annotation)
        assert hasattr(types, annotation)


# ---------------------------------------------------------------------------------------
# The site: maths rendered by a bundled KaTeX, benchmark figures on each theorem page
# ---------------------------------------------------------------------------------------

DOCS = ROOT / "docs"
KATEX = DOCS / "assets" / "katex"
# Pages whose key formulas are written as $...$ / $$...$$.
MATH_PAGES = ["theory.md", "theorem-4-1.md", "low_rank.md", "noisy.md", "transformer.md",
              "multi_head.md"]
# Each theorem page and the benchmark figures it shows (copies of benchmarks/results/).
THEOREM_FIGURES = {
    "theorem-4-1.md": ["exact_recovery_queries.png", "exact_recovery_times.png"],
    "low_rank.md": ["low_rank_phase.png", "low_rank_queries.png"],
    "noisy.md": ["noisy_error_vs_tau.png", "noisy_designs.png", "noisy_stochastic.png",
                 "noisy_labels.png"],
    "transformer.md": ["transformer.png"],
    "multi_head.md": ["multi_head_queries.png", "multi_head_float_scale.png"],
    "multi_head_float_benchmark.md": ["multi_head_float_success.png",
                                      "multi_head_float_error.png", "multi_head_float_bits.png"],
}
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _mkdocs_config() -> dict:
    import pytest

    yaml = pytest.importorskip("yaml")  # the docs extra (mkdocs) brings it

    class _Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may use !!python/name tags (none today); keep them as plain strings.
    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)


def test_maths_is_rendered_by_the_bundled_katex() -> None:
    config = _mkdocs_config()
    extensions = {}
    for item in config["markdown_extensions"]:
        extensions.update(item if isinstance(item, dict) else {item: None})
    assert extensions.get("pymdownx.arithmatex") == {"generic": True}
    assets = [*config["extra_javascript"], *config["extra_css"]]
    remote = [a for a in assets if "//" in str(a)]
    assert not remote, f"assets fetched at view time: {remote}"
    for asset in assets:
        assert (DOCS / asset).is_file(), f"mkdocs.yml names a missing asset docs/{asset}"
    assert {"assets/katex/katex.min.js", "assets/katex/auto-render.min.js",
            "assets/katex/katex.min.css"} <= set(assets)
    # Every font the stylesheet asks for first (woff2) is bundled.
    css = (KATEX / "katex.min.css").read_text()
    fonts = sorted(set(re.findall(r"url\((fonts/[^)]+\.woff2)\)", css)))
    assert fonts, "katex.min.css names no woff2 fonts"
    missing = [f for f in fonts if not (KATEX / f).is_file()]
    assert not missing, f"fonts missing from docs/assets/katex: {missing}"


def _formulas(page_text: str) -> list[tuple[str, bool]]:
    """(TeX, display) for every formula arithmatex finds in a page, as the site sees it."""
    import html

    import pytest

    markdown = pytest.importorskip("markdown")  # the docs extra (mkdocs) brings it

    out = markdown.markdown(
        page_text,
        extensions=["pymdownx.arithmatex", "pymdownx.superfences", "tables"],
        extension_configs={"pymdownx.arithmatex": {"generic": True}},
    )
    found = []
    for _, body in re.findall(r'<(span|div) class="arithmatex">(.*?)</\1>', out, re.S):
        tex = html.unescape(body).strip()
        found.append((tex[2:-2], tex.startswith("\\[")))
    return found


_KATEX_CHECK = """
const katex = require(process.argv[1]);
const items = JSON.parse(require("fs").readFileSync(0, "utf8"));
const bad = [];
for (const [tex, display] of items) {
  try { katex.renderToString(tex, {displayMode: display, throwOnError: true}); }
  catch (e) { bad.push(tex + ": " + e.message); }
}
process.stdout.write(JSON.stringify(bad));
"""


def _katex_errors(items: list[tuple[str, bool]]) -> list[str]:
    import json
    import shutil
    import subprocess

    import pytest

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed: the formulas are not parsed with KaTeX here")
    proc = subprocess.run(
        [node, "-e", _KATEX_CHECK, str(KATEX / "katex.min.js")],
        input=json.dumps(items), capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(proc.stdout)


def test_every_formula_on_the_maths_pages_parses_in_katex() -> None:
    items = []
    for page in MATH_PAGES:
        found = _formulas((DOCS / page).read_text())
        assert len(found) >= 2, f"docs/{page} has no $...$ formulas"
        items += found
    errors = _katex_errors(items)
    assert not errors, "\n".join(errors)


def test_every_formula_on_the_proof_pages_parses_in_katex() -> None:
    # proofs/*.md are included into the site (docs/proofs/) and read on GitHub.
    items = []
    for page in sorted((ROOT / "proofs").glob("*.md")):
        found = _formulas(page.read_text(encoding="utf-8"))
        assert len(found) >= 20, f"proofs/{page.name} has almost no $...$ formulas"
        items += found
    errors = _katex_errors(items)
    assert not errors, "\n".join(errors)


def test_every_formula_on_any_docs_page_parses_in_katex() -> None:
    items = []
    for page in sorted(DOCS.rglob("*.md")):
        items += _formulas(page.read_text(encoding="utf-8"))
    assert len(items) > 100
    errors = _katex_errors(items)
    assert not errors, "\n".join(errors)


def test_the_katex_check_rejects_a_broken_formula() -> None:
    items = _formulas("Fine $x^2$ and broken $\\frac{1}{$ here.\n\n$$\n\\sum_i \\alpha_i\n$$\n")
    assert [display for _, display in items] == [False, False, True]
    assert len(_katex_errors(items)) == 1


def test_every_theorem_page_shows_its_benchmark_figures() -> None:
    results = ROOT / "benchmarks" / "results"
    for page, figures in THEOREM_FIGURES.items():
        shown = _IMAGE.findall((DOCS / page).read_text())
        for figure in figures:
            assert figure in shown, f"docs/{page} does not show {figure}"
            copy, source = DOCS / figure, results / figure
            assert source.is_file(), f"benchmarks/results/{figure} is gone"
            # a bool, not the bytes: pytest's diff of two PNGs runs for many minutes
            same = copy.read_bytes() == source.read_bytes()
            assert same, f"docs/{figure} differs from benchmarks/results/{figure}: copy it again"


def test_every_image_a_page_shows_exists() -> None:
    for page in sorted(DOCS.rglob("*.md")):
        for target in _IMAGE.findall(page.read_text()):
            if "//" in target:
                raise AssertionError(f"{page.name} shows a remote image {target}")
            assert (page.parent / target).is_file(), f"{page.name} shows missing {target}"


# ---------------------------------------------------------------------------------------
# Jupyter reprs
# ---------------------------------------------------------------------------------------


def test_claim_result_markdown_says_the_verdict_and_escapes_the_statement() -> None:
    from verified_attn.checks import ClaimResult

    ok = ClaimResult("a/b", "Thm 4.1", "W_h and v_h for *all* X", True, "fine", 30, 30, 1.25)
    failed = ClaimResult("a/b", "Thm 4.1", "s", False, "count 31 != 30", 31, 30)
    skipped = ClaimResult("a/c", "Coq", "s", False, "needs Coq", skipped=True)
    md = ok._repr_markdown_()
    assert md.startswith("**PASS** `a/b` (Thm 4.1), 1.25 s")
    assert "> W\\_h and v\\_h for \\*all\\* X" in md  # no stray italics in Jupyter
    assert "queries 30 (bound 30)" in md and "```\nfine\n```" in md
    assert failed._repr_markdown_().startswith("**FAIL**")
    assert "count 31 != 30" in failed._repr_markdown_()
    assert skipped._repr_markdown_().startswith("**SKIP**")
    assert "queries" not in skipped._repr_markdown_()


def test_counterexample_markdown_shows_both_models_and_the_verdict() -> None:
    import dataclasses

    from verified_attn.multi_head.counterexamples import counterexample

    pair = counterexample(d=2, heads=2, kind="shared-score-split", seed=1)  # the Prop 7.1 pair
    md = pair._repr_markdown_()
    assert md.startswith("**Prop 7.1 counterexample (shared-score-split)**")
    assert "the same map (proved)" in md and md.endswith("holds: True\n```")
    assert "first model:" in md and "second model:" in md
    broken = dataclasses.replace(pair, proof=dataclasses.replace(pair.proof, holds=False))
    assert "does **not** hold" in broken._repr_markdown_()


# ---------------------------------------------------------------------------------------
# benchmarks/: every script listed; --quick runs leave the checkout as it was
# ---------------------------------------------------------------------------------------

BENCHMARKS = ROOT / "benchmarks"


def _scripts() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_benchmarks_readme_lists_every_script() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    table = re.findall(r"^\| `([\w.]+\.py)` \|", readme, re.M)
    assert _scripts(), "no benchmark scripts found"
    assert sorted(table) == _scripts(), (
        f"benchmarks/README.md's table lists {sorted(table)}, the folder has {_scripts()}"
    )


def _load_common():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_common", BENCHMARKS / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_quick_runs_write_outside_the_checkout(tmp_path: Path) -> None:
    common = _load_common()
    quick = common.output_dir(None, True, "demo")
    assert quick.is_dir() and ROOT not in quick.resolve().parents
    quick.rmdir()
    assert common.output_dir(None, False, "demo") == common.RESULTS
    assert common.output_dir(tmp_path, True, "demo") == tmp_path
    # Every script routes its output through output_dir and defaults --out to it.
    for name in _scripts():
        source = (BENCHMARKS / name).read_text()
        assert "output_dir(" in source, f"benchmarks/{name} does not use _common.output_dir"
        assert '"--out", type=Path, default=RESULTS' not in source, name


def _git_state() -> str:
    import subprocess

    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout


def test_a_quick_run_leaves_the_checkout_as_it_was() -> None:
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("matplotlib")  # the plots are files too: make sure they are written
    before = _git_state()
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "exact_recovery.py"), "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "writing to" in proc.stderr
    out = Path(proc.stderr.split("writing to", 1)[1].split()[0])
    assert (out / "exact_recovery.json").is_file()  # it did write, elsewhere
    import shutil

    shutil.rmtree(out)
    assert _git_state() == before, "a --quick run changed or added files in the checkout"


# ---------------------------------------------------------------------------------------
# Errors that point the right way
# ---------------------------------------------------------------------------------------

_THREE_HEADS = [
    ([[1, 0], [0, -1]], [1, 2]),
    ([[0, 1], [1, 0]], [-1, 1]),
    ([[2, 0], [1, 1]], [1, -1]),
]


def test_too_small_a_head_count_is_named_with_its_residual() -> None:
    import pytest

    import verified_attn as va
    from verified_attn.models import MultiHeadAttention
    from verified_attn.multi_head import learn_multi_head

    box = MultiHeadAttention(_THREE_HEADS)
    for arith in ["exact", "certified", "float"]:
        oracle = va.Oracle(box, arith)
        with pytest.raises(va.ModelClassMismatch, match=r"more than 2 heads") as info:
            learn_multi_head(oracle, heads=2)
        message = str(info.value)
        assert "residual" in message and "try heads=3" in message, message
        assert "another seed" not in message
        # The extra sample that shows it is asked on the oracle and counted, by phase.
        assert oracle.queries_by_phase.get("diagnosis", 0) >= 1, (arith, oracle.queries_by_phase)


def test_the_right_head_count_asks_no_diagnosis() -> None:
    import verified_attn as va
    from verified_attn.models import MultiHeadAttention
    from verified_attn.multi_head import learn_multi_head

    oracle = va.Oracle(MultiHeadAttention(_THREE_HEADS[:2]), "certified")
    rec = learn_multi_head(oracle, heads=2)
    assert "diagnosis" not in rec.queries_by_phase
    assert len(rec.parameters["heads"]) == 2


def test_a_float32_box_is_not_called_float64() -> None:
    from verified_attn.arithmetic import FloatArithmetic
    from verified_attn.multi_head.canonical_float import box_precision

    assert box_precision(FloatArithmetic(1e-3, 2.0**-24)) == "float32"
    assert box_precision(FloatArithmetic()) == "float64"
    assert box_precision(FloatArithmetic(1e-2, 2.0**-20)).startswith("float (unit roundoff")

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
        'bash -euo pipefail -c "$TEST_COMMAND"'
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

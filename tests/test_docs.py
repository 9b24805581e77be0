"""The documentation cannot drift from the code: CLAIMS.md, README and docs snippets, CI.

* CLAIMS.md is generated from the claim registry; every registered id must appear in it,
  and the whole table must be what the registry renders today. Regenerate with::

      python tests/test_docs.py --write-claims

* The README's Python tour and every ``python`` code block of the tutorial pages run.
* The README's first two commands are the ones ``.ci/run`` runs.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import itertools
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CLAIMS_MD = ROOT / "CLAIMS.md"
CI_RUN = ROOT / ".ci" / "run"
REGENERATE = "python tests/test_docs.py --write-claims"

# Tutorial pages whose ``python`` blocks run in order, in one namespace per page.
DOC_PAGES_WITH_CODE = [
    "getting-started.md",
    "arithmetic.md",
    "theorem-4-1.md",
    "certificates.md",
    "errors.md",
    "sweeps.md",
    "claims.md",
]

_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


def fenced_blocks(text: str, lang: str) -> list[str]:
    """The contents of the fenced code blocks of a language, in document order."""
    return [body for kind, body in _FENCE.findall(text) if kind == lang]


# ---------------------------------------------------------------------------------------
# CLAIMS.md
# ---------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _check_functions(func: Any, depth: int = 0) -> list[str]:
    """Dotted names of the functions a claim's check really runs.

    A check is often a closure or lambda made by a helper (``_symbolic_claim(id, ..., lambda
    seed: [symbolic.f(3)])``); its own name says nothing, so look through closure cells and
    a lambda's attribute references (``module.function``) for the named functions it calls.
    """
    func = getattr(func, "func", func)  # functools.partial
    name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    if ("<locals>" not in name and "<lambda>" not in name) or depth > 3:
        return [name]
    found: list[str] = []
    for cell in getattr(func, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            if callable(cell.cell_contents) and hasattr(cell.cell_contents, "__code__"):
                found += _check_functions(cell.cell_contents, depth + 1)
    code, env = getattr(func, "__code__", None), getattr(func, "__globals__", {})
    if code is not None:
        names = code.co_names
        for owner, attr in itertools.pairwise(names):
            target = getattr(env.get(owner), attr, None)
            if isinstance(env.get(owner), types.ModuleType) and callable(target):
                found.append(f"{env[owner].__name__}.{attr}")
        found += [
            f"{env[n].__module__}.{n}"
            for n in names
            if isinstance(env.get(n), types.FunctionType) and not n.startswith("_")
        ]
    return list(dict.fromkeys(found)) or [name]


def _how_checked(check: Any) -> str:
    return ", ".join(f"`{name}`" for name in _check_functions(check))


def render_claims_md() -> str:
    """CLAIMS.md as the registry renders it now."""
    from verified_attn.claims import all_claims

    lines = [
        "# Claims",
        "",
        "Every checkable statement of the theory, one row per registered claim. This file is",
        "generated from the claim registry (`verified_attn.claims.all_claims()`) by",
        f"`{REGENERATE}`; `tests/test_docs.py` fails when it is out of date.",
        "",
        "Check them all with `verified-attn check` (exit status 1 if any fails), one theorem",
        "with `verified-attn check thm-4.1`, one claim by its id. A check runs the learner or",
        "a symbolic derivation and can fail; the last column names the function that does it.",
        "",
        "| id | paper | statement | how it is checked |",
        "|---|---|---|---|",
    ]
    for claim in all_claims():
        lines.append(
            f"| `{claim.id}` | {_cell(claim.paper_ref)} | {_cell(claim.statement)} "
            f"| {_how_checked(claim.check)} |"
        )
    return "\n".join(lines) + "\n"


def test_every_registered_claim_is_in_claims_md() -> None:
    from verified_attn.claims import all_claims

    text = CLAIMS_MD.read_text()
    ids = [claim.id for claim in all_claims()]
    assert ids, "the registry is empty"
    missing = [i for i in ids if f"`{i}`" not in text]
    assert not missing, f"CLAIMS.md lacks {missing}; regenerate it with `{REGENERATE}`"


def test_claims_md_is_what_the_registry_renders() -> None:
    assert CLAIMS_MD.read_text() == render_claims_md(), (
        f"CLAIMS.md is out of date with the claim registry; regenerate it with `{REGENERATE}`"
    )


def test_claims_md_check_detects_a_missing_claim() -> None:
    # The drift check must be able to fail: drop one row and it no longer matches.
    rendered = render_claims_md()
    first_row = next(line for line in rendered.splitlines() if line.startswith("| `"))
    assert rendered.replace(first_row + "\n", "") != render_claims_md()


# ---------------------------------------------------------------------------------------
# Runnable snippets
# ---------------------------------------------------------------------------------------


def _run_blocks(blocks: list[str], where: str, tmp_path: Path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            code = compile(block, f"{where} [python block {i + 1}]", "exec")
            exec(code, namespace)
    return out.getvalue()


def test_readme_tour_runs(tmp_path: Path, monkeypatch) -> None:
    blocks = fenced_blocks(README.read_text(), "python")
    assert blocks, "README.md has no ```python tour snippet"
    printed = _run_blocks(blocks[:1], "README.md", tmp_path, monkeypatch)
    # The tour prints one line per arithmetic: name, queries, bound, ...
    for arithmetic in ("exact", "certified", "float"):
        assert re.search(rf"^{arithmetic} 12 12 ", printed, re.M), printed


@pytest.mark.parametrize("page", DOC_PAGES_WITH_CODE)
def test_docs_page_snippets_run(page: str, tmp_path: Path, monkeypatch) -> None:
    path = ROOT / "docs" / page
    blocks = fenced_blocks(path.read_text(), "python")
    assert blocks, f"docs/{page} has no ```python blocks; update DOC_PAGES_WITH_CODE"
    _run_blocks(blocks, f"docs/{page}", tmp_path, monkeypatch)


def test_docs_griffe_extension_doctests() -> None:
    # The API reference's docstring converter (docs extra only).
    pytest.importorskip(
        "griffe", reason="griffe comes with the docs extra: pip install -e '.[docs]'"
    )
    spec = importlib.util.spec_from_file_location("_griffe_rst", ROOT / "docs" / "_griffe_rst.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------------------
# README commands == CI commands
# ---------------------------------------------------------------------------------------


def readme_commands(text: str) -> tuple[str, str]:
    """The README's first two ```bash blocks: (install + main job, install + tests)."""
    blocks = [b.strip() for b in fenced_blocks(text, "bash")]
    assert len(blocks) >= 2, "README.md must start with two ```bash command blocks"
    return blocks[0], blocks[1]


def ci_settings(text: str) -> dict[str, str]:
    """The NAME="value" assignments of .ci/run (TEST_COMMAND, MAIN_COMMAND, EXTRAS)."""
    return {
        m.group(1): shlex.split(m.group(2))[0]
        for m in re.finditer(r'^([A-Z_]+)=("[^"\n]*")\s*$', text, re.M)
    }


def commands_match(readme: str, ci: str) -> list[str]:
    """Differences between the README's two commands and what .ci/run runs ([] if none)."""
    main, tests = readme_commands(readme)
    settings = ci_settings(ci)
    problems = []
    if main != f"pip install . && {settings.get('MAIN_COMMAND')}":
        problems.append(f"README main command {main!r} != 'pip install . && ' + MAIN_COMMAND")
    if main != settings.get("FRONT_DOOR"):
        problems.append(f"README main command {main!r} != .ci/run's FRONT_DOOR (run verbatim)")
    m = re.fullmatch(r"pip install -e '\.\[([\w,]+)\]' && (.*)", tests)
    if m is None:
        problems.append(f"README test command {tests!r} is not `pip install -e '.[..]' && ...`")
    else:
        if m.group(2) != settings.get("TEST_COMMAND"):
            problems.append(
                f"README runs {m.group(2)!r}, .ci/run runs {settings.get('TEST_COMMAND')!r}"
            )
        extras = set(m.group(1).split(","))
        ci_extras = set(settings.get("EXTRAS", "").split(","))
        if not extras <= ci_extras:
            problems.append(f"README installs extras {extras}, .ci/run only {ci_extras}")
    for name in ("FRONT_DOOR", "TEST_COMMAND", "SLOW_COMMAND", "MAIN_COMMAND"):
        if f'run_command "${name}"' not in ci:
            problems.append(f".ci/run defines {name} but does not run it")
    return problems


def test_readme_commands_are_the_ci_commands() -> None:
    problems = commands_match(README.read_text(), CI_RUN.read_text())
    assert not problems, problems


def test_command_check_detects_a_changed_readme() -> None:
    readme, ci = README.read_text(), CI_RUN.read_text()
    changed = readme.replace("HYPOTHESIS_PROFILE=ci python -m pytest", "python -m pytest", 1)
    assert changed != readme
    assert commands_match(changed, ci)
    assert commands_match(readme, ci.replace('run_command "$MAIN_COMMAND"', "true"))
    assert commands_match(readme, ci.replace('run_command "$FRONT_DOOR"', "true"))
    plain = ci.replace('FRONT_DOOR="pip install . &&', 'FRONT_DOOR="pip install -e . &&')
    assert commands_match(readme, plain), "an editable front door is not the README's"


def test_ci_run_fails_on_errors_and_installs_what_it_needs() -> None:
    ci = CI_RUN.read_text()
    assert "set -euo pipefail" in ci
    assert re.search(r"pip install --quiet -c \.ci/constraints\.txt -e \"\.\[\$EXTRAS\]\"", ci)
    assert "mkdocs build --strict" in ci
    assert re.search(r'"\$rc" -eq 5', ci), ".ci/run must treat pytest's exit 5 as failure"


def test_readme_cli_tour_runs(tmp_path: Path) -> None:
    # The README's CLI lines (every ```bash block after the first two), run as
    # `python -m verified_attn ...`.
    blocks = [b for b in fenced_blocks(README.read_text(), "bash")[2:] if "verified-attn" in b]
    assert blocks, "README.md has no block of verified-attn commands"
    ran = 0
    for line in "\n".join(blocks).splitlines():
        argv = shlex.split(line, comments=True)
        if not argv:
            continue
        assert argv[0] == "verified-attn", line
        proc = subprocess.run(
            [sys.executable, "-m", "verified_attn", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (
            f"{line!r} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
        ran += 1
    assert ran >= 3


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-claims"]:
        CLAIMS_MD.write_text(render_claims_md())
        print(f"wrote {CLAIMS_MD}")
    else:
        sys.exit(f"usage: {REGENERATE}")

"""Every runtime import is a declared dependency, or an optional one that names its extra.

Two checks, one static and one live:

* From the package's own AST: each import of a third-party module either comes from a
  distribution in ``[project] dependencies``, or stands inside a ``try`` whose
  ``except ImportError`` raises an ImportError naming ``verified-attn[EXTRA]`` for an extra
  that declares that distribution.
* In a fresh interpreter where every undeclared distribution is made unimportable: the
  package, every module outside the optional adapters and the command line's ``--version``
  and ``claims`` work, and each optional module fails with an ImportError naming its extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "verified_attn"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Modules that are an optional extra's front door: importing them without the extra must
# raise an ImportError that names the extra.
OPTIONAL_MODULES = {
    "verified_attn.adapters.torch": "torch",
    "verified_attn.adapters.torch_block": "torch",
    "verified_attn.adapters.hf": "hf",
}


def _requirement_name(spec: str) -> str:
    """The normalised distribution name of a requirement string ('torch>=2; ...' -> 'torch')."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec.strip())
    assert name is not None, f"unparsable requirement {spec!r}"
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _declared() -> set[str]:
    return {_requirement_name(s) for s in PYPROJECT["project"]["dependencies"]}


def _extras() -> dict[str, set[str]]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    return {extra: {_requirement_name(s) for s in specs} for extra, specs in extras.items()}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    # One scan of the installed distributions (it reads every RECORD: seconds, not per import).
    return dict(importlib.metadata.packages_distributions())


def _distribution_of(top_level: str) -> str:
    """The installed distribution that provides an importable top-level name."""
    dists = _packages_distributions().get(top_level)
    assert dists, f"no installed distribution provides {top_level!r}"
    return re.sub(r"[-_.]+", "-", dists[0]).lower()


def _third_party(name: str) -> str | None:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in {"verified_attn", "__future__"}:
        return None
    return top


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = []
    if isinstance(handler.type, ast.Name):
        names = [handler.type.id]
    elif isinstance(handler.type, ast.Tuple):
        names = [e.id for e in handler.type.elts if isinstance(e, ast.Name)]
    return bool({"ImportError", "ModuleNotFoundError"} & set(names))


def _guard_extras(node: ast.Try) -> set[str]:
    """The extras named by the ImportError this try's ImportError handler raises."""
    named: set[str] = set()
    for handler in node.handlers:
        if not _catches_import_error(handler):
            continue
        for sub in ast.walk(handler):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                named |= set(re.findall(r"verified-attn\[([a-z0-9_-]+)\]", sub.value))
    return named


def _imports(path: Path) -> list[tuple[int, str, set[str]]]:
    """(line, top-level module, extras its try-guard names) for every third-party import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str, set[str]]] = []

    def visit(node: ast.AST, guard: set[str]) -> None:
        if isinstance(node, ast.Try):
            inner = guard | _guard_extras(node)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guard)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = _third_party(name)
            if top is not None:
                found.append((node.lineno, top, guard))
        for child in ast.iter_child_nodes(node):
            visit(child, guard)

    visit(tree, set())
    return found


def _undeclared_imports() -> list[str]:
    declared, extras = _declared(), _extras()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, top, guard in _imports(path):
            dist = _distribution_of(top)
            if dist in declared:
                continue
            if any(dist in extras.get(extra, set()) for extra in guard):
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            problems.append(f"{where} imports {top} ({dist}): not a dependency, no guarded extra")
    return problems


def test_every_runtime_import_is_declared_or_guarded() -> None:
    problems = _undeclared_imports()
    assert not problems, "\n".join(problems)


def test_the_static_check_fails_on_an_undeclared_import(tmp_path: Path) -> None:
    """Wrong variants: an unguarded optional import, and a guard naming the wrong extra."""
    bare = tmp_path / "bare.py"
    bare.write_text("import torch\n")
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        textwrap.dedent(
            """
            try:
                import torch
            except ImportError as exc:
                raise ImportError("pip install 'verified-attn[docs]'") from exc
            """
        )
    )
    good = tmp_path / "good.py"
    good.write_text(wrong.read_text().replace("[docs]", "[torch]"))
    extras = _extras()
    for path, ok in ((bare, False), (wrong, False), (good, True)):
        [(_, top, guard)] = _imports(path)
        dist = _distribution_of(top)
        accepted = dist in _declared() or any(dist in extras[e] for e in guard)
        assert accepted is ok, f"{path.name}: accepted={accepted}"


# A fresh interpreter in which only the declared dependencies (and the standard library)
# can be imported: a meta-path finder refuses every other top-level name that is installed.
_BLOCKED_RUN = """
import importlib, importlib.abc, json, subprocess, sys
BLOCKED = set(json.loads(sys.argv[1]))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, Block())
import pkgutil, verified_attn
failures, optional = [], json.loads(sys.argv[2])
for info in pkgutil.walk_packages(verified_attn.__path__, 'verified_attn.'):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        if info.name not in optional or f"verified-attn[{optional[info.name]}]" not in str(exc):
            failures.append(f"{info.name}: {exc}")
    else:
        if info.name in optional:
            failures.append(f"{info.name} imported without its extra")
from verified_attn.cli import main
for argv in (['--version'], ['claims']):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    if rc not in (0, None):
        failures.append(f"verified-attn {' '.join(argv)} exited {rc}")
print(json.dumps(failures))
"""


def _installed_undeclared() -> list[str]:
    """Top-level names installed here whose distribution is not a runtime dependency."""
    declared = _declared()
    blocked = set()
    for top, dists in importlib.metadata.packages_distributions().items():
        names = {re.sub(r"[-_.]+", "-", d).lower() for d in dists}
        if top.isidentifier() and top not in sys.stdlib_module_names and not names & declared:
            blocked.add(top)
    return sorted(blocked - {"verified_attn", "_distutils_hack", "pip", "setuptools"})


@pytest.mark.slow
def test_the_package_works_without_any_extra() -> None:
    import json

    blocked = _installed_undeclared()
    assert {"torch", "pytest"} <= set(blocked) or "torch" not in sys.modules
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, json.dumps(blocked), json.dumps(OPTIONAL_MODULES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(failures)

"""The package's structural rules, measured from its own source (AST and imports).

* No file of ``verified_attn`` is over :data:`MAX_FILE_LINES` lines.
* No function body is over :data:`MAX_BODY_LINES` lines. A body is counted from its first
  statement after the docstring (the first statement if there is no docstring) to the
  function's ``end_lineno``, both included: the signature, decorators and docstring do not
  count; blank and comment lines inside the body do. Nested functions count in their own
  right and as part of the function that holds them.
* No import circle among ``verified_attn`` modules.
* No module imports a module of a higher layer. The layers are the table under
  "### Layers" in the README's Architecture section (the one place they are defined; this
  test parses it): a module may import from its own layer and the layers listed above it.
* ``duplicates --repo verified_attn`` lists at most :data:`MAX_DUPLICATE_PAIRS` pairs.

What counts as an import. Both import rules look at the imports a module runs when it is
loaded: its module-level ``import`` statements, including those under a module-level
``if``/``try`` (a fallback import still runs). Not counted: imports inside a function or
class body, which run at call time, after every module has loaded, so they cannot close a
circle at import time (the package uses them on purpose to bind late, e.g.
``Recovery.certificate`` reaching the checker of its kind); and imports under
``if TYPE_CHECKING:``, which never run. ``from P import name`` depends on the module
``P.name`` when that is a module, and on ``P`` otherwise; the import of a module's own
parent packages is implicit in Python and not counted.

Each checker is a plain function of a source tree, and each is also run on a small tree
written to ``tmp_path`` that breaks its rule, which it must report.

While other parts of the package are being split, the offenders there are listed in
:data:`ALLOWED_LONG_FILES` and :data:`ALLOWED_LONG_FUNCTIONS`, each with its reason; an
entry that no longer offends fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "verified_attn"
README = ROOT / "README.md"

MAX_FILE_LINES = 600
MAX_BODY_LINES = 80
MAX_DUPLICATE_PAIRS = 20


# Files and functions allowed past the limits, with the reason (none today). Paths are
# relative to verified_attn/.
ALLOWED_LONG_FILES: dict[str, str] = {}
# "path::qualified.name" -> reason.
ALLOWED_LONG_FUNCTIONS: dict[str, str] = {}


# ---------------------------------------------------------------------------------------
# Measures
# ---------------------------------------------------------------------------------------


def python_files(package: Path) -> list[Path]:
    """Every ``.py`` file below ``package``, sorted."""
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path, package: Path) -> str:
    return path.relative_to(package).as_posix()


def long_files(package: Path, limit: int = MAX_FILE_LINES) -> dict[str, int]:
    """``{relative path: line count}`` of the files over ``limit`` lines."""
    counts = {rel(p, package): len(p.read_text().splitlines()) for p in python_files(package)}
    return {path: n for path, n in counts.items() if n > limit}


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to ``end_lineno``, inclusive."""
    body = node.body[1:] if _is_docstring(node.body[0]) else node.body
    if not body:
        return 0
    assert node.end_lineno is not None
    return node.end_lineno - body[0].lineno + 1


def _functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, child
            yield from _functions(child, prefix + child.name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")
        else:
            yield from _functions(child, prefix)


def long_functions(package: Path, limit: int = MAX_BODY_LINES) -> dict[str, int]:
    """``{"path::qualified.name": body lines}`` of the functions whose body is over ``limit``."""
    found = {}
    for path in python_files(package):
        for name, node in _functions(ast.parse(path.read_text())):
            n = body_lines(node)
            if n > limit:
                found[f"{rel(path, package)}::{name}"] = n
    return found


def module_names(package: Path) -> dict[str, Path]:
    """``{dotted module name: path}``; a package is named by its ``__init__.py``."""
    names = {}
    for path in python_files(package):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _load_time_imports(stmts: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements run when the module loads (see the module docstring)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        elif isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            yield from _load_time_imports(stmt.orelse)
        else:
            for field in ("body", "orelse", "finalbody"):
                yield from _load_time_imports(getattr(stmt, field, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _load_time_imports(handler.body)


def import_graph(package: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports at load time}``."""
    modules = module_names(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for stmt in _load_time_imports(ast.parse(path.read_text()).body):
            if isinstance(stmt, ast.Import):
                candidates = [alias.name for alias in stmt.names]
            else:
                if stmt.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (stmt.level - 1)]
                    source = ".".join([*base, *([stmt.module] if stmt.module else [])])
                else:
                    source = stmt.module or ""
                candidates = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    for alias in stmt.names
                ]
            for target in candidates:
                # The longest prefix that is a module of the package (import a.b.c loads a.b.c).
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    targets.add(target)
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


# ---------------------------------------------------------------------------------------
# Layers: parsed from the README
# ---------------------------------------------------------------------------------------

_ROW = re.compile(r"^\|\s*(\d+)\s+([\w -]+?)\s*\|(.*)\|\s*$")


def parse_layers(readme_text: str) -> list[tuple[str, list[str]]]:
    """``[(layer name, module patterns)]``, lowest layer first, from "### Layers".

    Each row of the section's table is ``| <n> <name> | `pattern` `pattern` ... |``; a
    pattern is a module name relative to ``verified_attn`` (``oracle``, ``noisy.claims``)
    or a package's modules (``noisy.*``, the package itself included); ``verified_attn``
    names the package's own ``__init__``.
    """
    section = readme_text.split("\n### Layers\n", 1)
    if len(section) != 2:
        raise ValueError('the README has no "### Layers" section')
    body = re.split(r"\n#{1,3} ", section[1], maxsplit=1)[0]
    layers = []
    for line in body.splitlines():
        match = _ROW.match(line)
        if match:
            number, name, cell = match.groups()
            if int(number) != len(layers) + 1:
                raise ValueError(f"layer {number} out of order")
            layers.append((name, re.findall(r"`([^`]+)`", cell)))
    if not layers:
        raise ValueError('the "### Layers" section has no table rows')
    return layers


def _matches(module: str, pattern: str, top: str) -> bool:
    if pattern == top:
        return module == top
    full = f"{top}.{pattern}"
    if full.endswith(".*"):
        return module == full[:-2] or fnmatch.fnmatchcase(module, full)
    return module == full


def assign_layers(
    modules: list[str], layers: list[tuple[str, list[str]]], top: str
) -> tuple[dict[str, int], list[str]]:
    """``({module: layer index}, problems)``.

    An exact name wins over a ``pkg.*`` pattern; among patterns the longest wins. A module
    no pattern names, and a pattern that names no module, are problems: the table must
    place every module, and only modules that exist.
    """
    assigned: dict[str, int] = {}
    problems: list[str] = []
    used: set[str] = set()
    for module in modules:
        best: tuple[int, int, str] | None = None
        for i, (_, patterns) in enumerate(layers):
            for pattern in patterns:
                if _matches(module, pattern, top):
                    rank = 10_000 if not pattern.endswith("*") else len(pattern)
                    if best is None or rank > best[0]:
                        best = (rank, i, pattern)
        if best is None:
            problems.append(f"{module} is in no layer of the README's table")
        else:
            assigned[module] = best[1]
            used.add(best[2])
    for _, patterns in layers:
        problems += [f"pattern `{p}` names no module" for p in patterns if p not in used]
    return assigned, problems


def upward_imports(
    graph: dict[str, set[str]], assigned: dict[str, int], layers: list[tuple[str, list[str]]]
) -> list[str]:
    """Every import of a module of a higher layer, as readable lines."""
    found = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            if module in assigned and target in assigned and assigned[target] > assigned[module]:
                found.append(
                    f"{module} ({layers[assigned[module]][0]}) imports "
                    f"{target} ({layers[assigned[target]][0]})"
                )
    return found


# ---------------------------------------------------------------------------------------
# Duplicates
# ---------------------------------------------------------------------------------------


def duplicate_pairs(folder: Path) -> int:
    """How many pairs ``duplicates --repo folder`` lists (its first line)."""
    out = subprocess.run(
        ["duplicates", "--repo", str(folder), "--seconds", "120"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    first = out.splitlines()[0] if out else ""
    if first.startswith("no duplicates"):
        return 0
    match = re.match(r"(\d+) pairs? ", first)
    if not match or "incomplete:" in out:
        raise RuntimeError(f"cannot read the output of duplicates: {out[:300]!r}")
    return int(match.group(1))


needs_duplicates = pytest.mark.skipif(
    shutil.which("duplicates") is None,
    reason="the `duplicates` command is not installed (a developer tool, not a dependency)",
)


# ---------------------------------------------------------------------------------------
# The rules on the package
# ---------------------------------------------------------------------------------------


def test_no_file_over_the_limit() -> None:
    found = long_files(PACKAGE)
    unexpected = {p: n for p, n in found.items() if p not in ALLOWED_LONG_FILES}
    assert not unexpected, f"files over {MAX_FILE_LINES} lines: {unexpected}"
    stale = sorted(set(ALLOWED_LONG_FILES) - set(found))
    assert not stale, f"allowed long files that are no longer long (remove them): {stale}"


def test_no_function_body_over_the_limit() -> None:
    found = long_functions(PACKAGE)
    unexpected = {f: n for f, n in found.items() if f not in ALLOWED_LONG_FUNCTIONS}
    assert not unexpected, f"function bodies over {MAX_BODY_LINES} lines: {unexpected}"
    stale = sorted(set(ALLOWED_LONG_FUNCTIONS) - set(found))
    assert not stale, f"allowed long functions that are no longer long (remove them): {stale}"


def test_allowlists_name_only_multi_head_and_certificates() -> None:
    """Only multi_head/ and certificates/ may have allowlisted offenders."""
    rooms = ("multi_head/", "certificates/")
    outside = [k for k in [*ALLOWED_LONG_FILES, *ALLOWED_LONG_FUNCTIONS] if not k.startswith(rooms)]
    assert not outside, outside


def test_no_import_cycle() -> None:
    assert import_cycles(import_graph(PACKAGE)) == []


def test_no_module_imports_a_higher_layer() -> None:
    layers = parse_layers(README.read_text())
    graph = import_graph(PACKAGE)
    assigned, problems = assign_layers(sorted(graph), layers, PACKAGE.name)
    assert not problems, problems
    assert upward_imports(graph, assigned, layers) == []


@needs_duplicates
def test_duplicates_at_most_the_limit() -> None:
    assert duplicate_pairs(PACKAGE) <= MAX_DUPLICATE_PAIRS


# ---------------------------------------------------------------------------------------
# Each checker reports a tree that breaks its rule
# ---------------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_long_file_is_reported(tmp_path: Path) -> None:
    package = _tree(tmp_path, {"short.py": "x = 1\n" * 600, "long.py": "x = 1\n" * 601})
    assert long_files(package) == {"long.py": 601}


def test_long_body_is_reported_and_docstring_does_not_count(tmp_path: Path) -> None:
    doc = '    """' + "\n" * 30 + '    """\n'
    ok = "def ok():\n" + doc + "    x = 1\n" * 80
    long = "def f():\n" + doc + "    x = 1\n" * 81
    nested = "class C:\n    def m(self):\n        def inner():\n" + "            x = 1\n" * 82
    package = _tree(tmp_path, {"a.py": ok + long, "b.py": nested})
    assert long_functions(package) == {"a.py::f": 81, "b.py::C.m": 83, "b.py::C.m.inner": 82}


def test_cycle_is_reported_and_late_imports_are_not(tmp_path: Path) -> None:
    package = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "try:\n    from pkg.c import X\nexcept ImportError:\n    pass\n",
            "c.py": "from . import a\n",
            "d.py": "from pkg import e\n",
            "e.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n"
                "def f():\n    from pkg import d\n"
            ),
        },
    )
    graph = import_graph(package)
    assert graph["pkg.e"] == set()
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_upward_import_is_reported(tmp_path: Path) -> None:
    readme = (
        "## Architecture\n\n### Layers\n\n| layer | modules |\n|---|---|\n"
        "| 1 base | `errors` `room.low` |\n| 2 rooms | `room.*` |\n| 3 front | `pkg` `cli` |\n"
        "\n### Next\n| 4 ignored | `x` |\n"
    )
    layers = parse_layers(readme)
    assert [name for name, _ in layers] == ["base", "rooms", "front"]
    package = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "from pkg.room import learner\n",
            "room/__init__.py": "",
            "room/low.py": "from pkg import errors\n",
            "room/learner.py": "from pkg.room import low\nfrom pkg import cli\n",
            "cli.py": "from pkg.room import learner\n",
        },
    )
    graph = import_graph(package)
    assigned, problems = assign_layers(sorted(graph), layers, "pkg")
    assert problems == []
    assert assigned["pkg.room.low"] == 0 and assigned["pkg.room"] == 1
    assert upward_imports(graph, assigned, layers) == [
        "pkg.errors (base) imports pkg.room.learner (rooms)",
        "pkg.room.learner (rooms) imports pkg.cli (front)",
    ]


def test_layer_table_must_place_every_module_and_only_real_ones() -> None:
    layers = [("base", ["errors", "gone"]), ("front", ["cli.*"])]
    _, problems = assign_layers(["pkg.errors", "pkg.cli", "pkg.extra"], layers, "pkg")
    assert problems == ["pkg.extra is in no layer of the README's table", "pattern `gone` names no module"]


@needs_duplicates
def test_duplicates_are_counted(tmp_path: Path) -> None:
    body = "".join(f"    total_{i} = value * {i} + offset - {i}\n" for i in range(10))
    package = _tree(
        tmp_path,
        {"a.py": f"def f(value, offset):\n{body}    return 0\n", "b.py": "x = 1\n"},
    )
    assert duplicate_pairs(package) == 0
    (package / "c.py").write_text(f"def g(value, offset):\n{body}    return 1\n")
    assert duplicate_pairs(package) == 1

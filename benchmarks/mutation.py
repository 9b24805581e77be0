"""Mutation testing of the core modules: do the tests and the claims catch wrong code?

Not part of the default test run (it takes minutes to hours). Run from the repository root:

    python benchmarks/mutation.py --budget 1200 --sample 40 --seed 0

A small runner of our own (mutmut and cosmic-ray are not installed here and nothing may
reach the network): it parses each core module with :mod:`ast`, enumerates the standard
mutations (arithmetic operator swaps, comparison swaps and negations, ``and``/``or``,
``not`` removed, integer constants +1, ``True``/``False`` swapped, a ``return x`` made
``return None``), draws a seeded sample, and for each mutant writes the mutated module into
a scratch copy of the repository, then runs that module's fast tests (and the listed
``verified-attn check`` ids) there with ``pytest -x``. A mutant is *killed* when a test or a
claim fails (or the run exceeds its timeout), *survives* otherwise. Results go to
``benchmarks/results/mutation.json``: per module and in total, with every survivor's
location and mutation, for triage (a survivor may be equivalent: it changes no behaviour;
the goal is <= 10 % surviving non-equivalent mutants).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import output_dir  # noqa: E402  (the benchmarks' shared helpers, by path)

#: Each core module and the fast tests (and claim ids) run against its mutants.
TARGETS: dict[str, dict[str, list[str]]] = {
    "verified_attn/arithmetic.py": {
        "tests": ["tests/test_arithmetic.py", "tests/test_mutation_kills.py"],
        "claims": [],
    },
    "verified_attn/oracle.py": {
        "tests": ["tests/test_oracle.py", "tests/test_mutation_kills.py"],
        "claims": [],
    },
    "verified_attn/verification.py": {
        "tests": [
            "tests/test_core_contract.py",
            "tests/test_soundness_positions.py",
            "tests/test_mutation_kills.py",
        ],
        "claims": ["thm-4.1/position-dependent"],
    },
    "verified_attn/probing.py": {
        "tests": ["tests/test_soundness_exactness.py", "tests/exact_recovery/test_learner.py"],
        "claims": ["thm-4.1/exact-recovery", "thm-4.1/certified-recovery"],
    },
    "verified_attn/certificates/kernel.py": {
        "tests": ["tests/test_certificate.py"],
        "claims": ["thm-4.1/certificate-tamper"],
    },
}

_BINOPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_CMPOPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass
class Mutant:
    module: str
    index: int
    line: int
    description: str
    status: str = "pending"  # killed | survived | timeout | invalid
    seconds: float = 0.0
    killed_by: str = ""


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def mutation_points(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every (node, description) that one mutation can change, in a fixed order."""
    skip = _docstring_nodes(tree)
    points: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            new = _BINOPS[type(node.op)].__name__
            points.append((node, f"{type(node.op).__name__} -> {new}"))
        elif isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in _CMPOPS:
                    new = _CMPOPS[type(op)].__name__
                    points.append((node, f"compare[{k}] {type(op).__name__} -> {new}"))
        elif isinstance(node, ast.BoolOp):
            new = "Or" if isinstance(node.op, ast.And) else "And"
            points.append((node, f"{type(node.op).__name__} -> {new}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            points.append((node, "not x -> x"))
        elif isinstance(node, ast.Constant) and id(node) not in skip:
            if isinstance(node.value, bool):
                points.append((node, f"{node.value} -> {not node.value}"))
            elif isinstance(node.value, int):
                points.append((node, f"{node.value} -> {node.value + 1}"))
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                points.append((node, "return x -> return None"))
    return points


def mutate(source: str, index: int) -> tuple[str, int, str]:
    """The source with mutation ``index`` applied; its line and description."""
    tree = ast.parse(source)
    node, desc = mutation_points(tree)[index]
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.BinOp):
        node.op = _BINOPS[type(node.op)]()
    elif isinstance(node, ast.Compare):
        k = int(desc.split("[")[1].split("]")[0])
        ops = list(node.ops)
        ops[k] = _CMPOPS[type(ops[k])]()
        node.ops = ops
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.UnaryOp):
        _replace(tree, node, node.operand)
    elif isinstance(node, ast.Constant):
        node.value = (not node.value) if isinstance(node.value, bool) else node.value + 1
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), line, desc


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return


def _scratch() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="va-mutation-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for name in ("verified_attn", "tests"):
        shutil.copytree(ROOT / name, tmp / name, ignore=ignore)
    for name in ("pyproject.toml",):
        shutil.copy2(ROOT / name, tmp / name)
    return tmp


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[bool, bool]:
    """(passed, timed out)."""
    env = dict(os.environ, PYTHONPATH=str(cwd), HYPOTHESIS_PROFILE="ci")
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True, check=False
        )
    except subprocess.TimeoutExpired:
        return False, True
    return proc.returncode == 0, False


def run(budget: float, sample: int, seed: int, timeout: float, modules: list[str]) -> dict:
    rng = random.Random(seed)
    candidates: list[Mutant] = []
    totals: dict[str, int] = {}
    for module in modules:
        source = (ROOT / module).read_text()
        n = len(mutation_points(ast.parse(source)))
        totals[module] = n
        candidates += [Mutant(module, i, 0, "") for i in range(n)]
    chosen = rng.sample(candidates, min(sample, len(candidates)))
    # Round robin over the modules (seeded order within each), so that a budget cut
    # leaves every module sampled.
    by_module = [[m for m in chosen if m.module == mod] for mod in modules]
    chosen = [m for group in zip_longest(*by_module) for m in group if m is not None]
    tmp = _scratch()
    start = time.monotonic()
    done: list[Mutant] = []
    try:
        for m in chosen:
            if time.monotonic() - start > budget:
                break
            original = (ROOT / m.module).read_text()
            mutated, m.line, m.description = mutate(original, m.index)
            if ast.dump(ast.parse(mutated)) == ast.dump(ast.parse(original)):
                m.status = "invalid"
                done.append(m)
                continue
            target = tmp / m.module
            target.write_text(mutated)
            t0 = time.monotonic()
            try:
                spec = TARGETS[m.module]
                cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
                passed, timed_out = _run(cmd + spec["tests"], tmp, timeout)
                m.killed_by = "tests" if not passed else ""
                if passed and spec["claims"]:
                    claim_cmd = [sys.executable, "-m", "verified_attn", "check", *spec["claims"]]
                    passed, timed_out = _run(claim_cmd, tmp, timeout)
                    m.killed_by = "claims" if not passed else ""
                m.status = "timeout" if timed_out else ("survived" if passed else "killed")
            finally:
                target.write_text(original)
                m.seconds = round(time.monotonic() - t0, 1)
            done.append(m)
            print(f"{m.status:8s} {m.module}:{m.line} {m.description} ({m.seconds}s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    valid = [m for m in done if m.status != "invalid"]
    survived = [m for m in valid if m.status == "survived"]
    per_module = {}
    for module in modules:
        mine = [m for m in valid if m.module == module]
        per_module[module] = {
            "mutation_points": totals[module],
            "run": len(mine),
            "killed": sum(m.status in ("killed", "timeout") for m in mine),
            "survived": sum(m.status == "survived" for m in mine),
        }
    return {
        "runner": "benchmarks/mutation.py (ast-based; mutmut/cosmic-ray not installed)",
        "seed": seed,
        "sample_requested": sample,
        "budget_seconds": budget,
        "timeout_seconds": timeout,
        "mutation_points": sum(totals.values()),
        "mutants_run": len(valid),
        "killed": len(valid) - len(survived),
        "survived": len(survived),
        "survival_rate": round(len(survived) / len(valid), 4) if valid else None,
        "goal": "<= 10 % surviving non-equivalent mutants (survivors are listed for triage)",
        "seconds": round(time.monotonic() - start, 1),
        "per_module": per_module,
        "survivors": [asdict(m) for m in survived],
        "mutants": [asdict(m) for m in done],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1800, help="total seconds")
    parser.add_argument("--sample", type=int, default=60, help="mutants drawn (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant run")
    parser.add_argument("--module", action="append", choices=sorted(TARGETS), default=None)
    parser.add_argument("--out", type=Path, default=None, help="output folder")
    parser.add_argument("--quick", action="store_true", help="two mutants, a short budget")
    args = parser.parse_args(argv)
    if args.quick:
        args.sample, args.budget = 2, min(args.budget, 300)
    modules = args.module or list(TARGETS)
    result = run(args.budget, args.sample, args.seed, args.timeout, modules)
    folder = output_dir(args.out, args.quick, "mutation")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mutation.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    rate = result["survival_rate"]
    print(
        f"{result['mutants_run']} mutants run, {result['survived']} survived "
        f"({'n/a' if rate is None else f'{100 * rate:.1f} %'}); wrote {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["TARGETS", "Mutant", "main", "mutate", "mutation_points", "run"]

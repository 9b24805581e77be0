"""The package as users meet it: the public API, the metadata, the command line.

DESIGN.md's API contract names the public entry points; each one that exists must be
exported from ``verified_attn`` (and listed in ``__all__``), and every name in ``__all__``
must exist.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import verified_attn as va

ROOT = Path(__file__).resolve().parent.parent

# DESIGN.md's API contract and error hierarchy, as far as they are implemented now.
REQUIRED = [
    "Oracle",
    "SingleHeadAttention",
    "learn_single_head",
    "Recovery",
    "check_claims",
    "VerifiedAttnError",
    "InvalidArgument",
    "QueryBudgetExceeded",
    "NotIdentifiable",
    "ModelClassMismatch",
    "PrecisionExhausted",
    "OracleError",
    "CertificateError",
]
# Named by DESIGN.md and implemented by the rooms: each room exports its learner, and the
# top-level package must export it too.
LATER = {
    "learn_low_rank": "verified_attn.low_rank",
    "learn_noisy": "verified_attn.noisy",
    "learn_transformer": "verified_attn.transformer",
    "learn_relu_ffn": "verified_attn.transformer",
    "learn_multi_head": "verified_attn.multi_head",
    "canonical_form": "verified_attn.multi_head",
    "equivalent": "verified_attn.multi_head",
    "counterexample": "verified_attn.hypotheses",
    "hypotheses": "verified_attn.hypotheses",
    "Counterexample": "verified_attn.counterexample",
}


def test_all_names_exist() -> None:
    assert len(va.__all__) == len(set(va.__all__)), "duplicate names in __all__"
    missing = [name for name in va.__all__ if not hasattr(va, name)]
    assert not missing, f"verified_attn.__all__ lists names that do not exist: {missing}"


@pytest.mark.parametrize("name", REQUIRED)
def test_design_api_is_exported(name: str) -> None:
    assert name in va.__all__, f"{name} (DESIGN.md API) is not in verified_attn.__all__"
    assert getattr(va, name) is not None


@pytest.mark.parametrize("name", sorted(LATER))
def test_room_api_is_exported(name: str) -> None:
    room = LATER[name]
    module = importlib.import_module(room)
    assert hasattr(module, name), f"the room {room} does not define {name} (DESIGN.md API)"
    assert name in va.__all__, f"{room}.{name} exists but verified_attn does not export it"
    assert getattr(va, name) is getattr(module, name)


def test_error_hierarchy() -> None:
    errors = [
        getattr(va, n)
        for n in REQUIRED
        if n.endswith(("Error", "Argument", "Exceeded", "Identifiable", "Mismatch", "Exhausted"))
    ]
    assert va.VerifiedAttnError in errors and len(errors) == 8
    for cls in errors:
        assert issubclass(cls, va.VerifiedAttnError), cls
    assert issubclass(va.InvalidArgument, ValueError)
    assert not issubclass(va.QueryBudgetExceeded, ValueError)


def test_public_callables_have_docstrings_with_examples() -> None:
    # Every public function and class opens its docstring with a runnable example
    # (the module's, for names whose own docstring has none).
    lacking = []
    for name in va.__all__:
        obj = getattr(va, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = inspect.getdoc(obj) or ""
        module_doc = inspect.getdoc(sys.modules[obj.__module__]) or ""
        if ">>>" not in doc and ">>>" not in module_doc:
            lacking.append(name)
    assert not lacking, f"no doctest example for {lacking}"


def test_version_matches_metadata() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert va.__version__ == meta["version"]
    assert importlib.metadata.version("verified-attn") == meta["version"]


def test_metadata_extras_and_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"test", "docs", "torch"} <= set(extras)
    # A range, never a pin that fights a user's own torch; CI pins its build by constraints.
    assert extras["torch"] == ["torch>=2.4,<3"]
    assert "torch==2.13.0" in (ROOT / ".ci" / "constraints.txt").read_text().split()
    assert project["scripts"]["verified-attn"] == "verified_attn.cli:main"
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_citation_names_the_papers() -> None:
    text = (ROOT / "CITATION.cff").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"version: {version}" in text
    for needle in (
        "2601.16873",
        "2608.03294",
        "Provably Learning Attention with Queries",
        "Provably Learning Multi-Head Attention with Queries",
        "license: MIT",
    ):
        assert needle in text, needle


def test_python_m_verified_attn_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verified_attn", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("check", "claims", "learn", "counterexample", "verify-certificate"):
        assert command in proc.stdout, f"`{command}` missing from --help:\n{proc.stdout}"


def test_bad_command_line_is_an_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verified_attn", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0

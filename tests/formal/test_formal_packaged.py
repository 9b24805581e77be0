"""The Coq sources ship in the wheel, and an installed package finds and uses them.

A wheel is built from the checkout with ``pip wheel --no-deps --no-build-isolation`` (the
build backend from the test extras, so nothing is fetched) into a temporary directory;
it must hold every file of ``formal/_CoqProject`` (and no build product) under
``verified_attn/formal/coq/``. Unpacked elsewhere and imported from there (the checkout off
``sys.path``), ``formal.formal_dir()`` is that copy, and with Coq an exported certificate
compiles against it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from coq_text import needs_coq

from verified_attn import formal

ROOT = Path(__file__).resolve().parents[2]
FORMAL = ROOT / "formal"

PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [*PIP_WHEEL, "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-2000:]
    (found,) = out.glob("verified_attn-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def _run(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERIFIED_ATTN_FORMAL_DIR")
    }
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=site, env=env, timeout=900
    )


def test_wheel_holds_every_coq_source_and_no_build_product(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    shipped = {n.removeprefix("verified_attn/formal/coq/") for n in names if "/formal/coq/" in n}
    needed = {"_CoqProject", *formal.source_files(FORMAL)}
    assert needed <= shipped, f"missing from the wheel: {sorted(needed - shipped)}"
    assert "CertLowRank.v" in shipped and "Defs.v" in shipped
    assert not [n for n in shipped if n.endswith((".vo", ".vok", ".vos", ".glob", ".aux"))]
    assert not [n for n in names if n.startswith("formal/")], "formal/ outside the package"


def test_installed_package_finds_its_coq_sources(installed: Path) -> None:
    proc = _run(
        installed,
        "import verified_attn, verified_attn.formal as f\n"
        "print(verified_attn.__file__)\nprint(f.formal_dir())\nprint(' '.join(f.source_files()))",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    module, directory, files = proc.stdout.strip().splitlines()
    assert Path(module).is_relative_to(installed), module  # not the checkout
    assert Path(directory) == installed / "verified_attn" / "formal" / "coq"
    assert files.split() == formal.source_files(FORMAL)


@needs_coq
def test_installed_package_exports_and_checks_with_its_own_sources(installed: Path) -> None:
    code = (
        "import verified_attn as va\n"
        "from verified_attn import formal\n"
        "from verified_attn.formal.coq_check import compile_exported\n"
        "model = va.SingleHeadAttention([[2, 4], [1, 2]], [1, 1])\n"
        "data = va.learn_low_rank(va.Oracle(model, 'exact')).certificate()\n"
        "check = compile_exported(va.export_coq(data))\n"
        "print(formal.formal_dir(), check.ok, check.axioms)\n"
        "print(check.log[-1500:])\n"
    )
    proc = _run(installed, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith(str(installed / "verified_attn" / "formal" / "coq") + " True"), (
        proc.stdout[-2000:]
    )

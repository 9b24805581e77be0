"""``import verified_attn`` loads its public names on first use (PEP 562), and every one
of them is what it was when the package imported everything at once."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import verified_attn as va
from verified_attn import errors

ROOT = Path(__file__).resolve().parent.parent


def _fresh(script: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_loads_nothing_heavy() -> None:
    out = _fresh(
        "import sys, verified_attn\n"
        "print([m for m in ('numpy', 'sympy', 'scipy', 'flint', 'mpmath') if m in sys.modules])"
    )
    assert out == "[]"


def test_every_public_name_is_lazy_or_an_error_class() -> None:
    eager = {name for name in va.__all__ if isinstance(getattr(errors, name, None), type)}
    assert set(va._LAZY) | eager | {"__version__"} == set(va.__all__)
    assert set(va.__all__) <= set(dir(va))


@pytest.mark.parametrize("name", ["sweep", "hypotheses", "counterexample"])
def test_a_function_named_like_its_module_stays_the_function(name: str) -> None:
    # The submodule imported first (as the CLI does): the package attribute is still the
    # function, and `from verified_attn import NAME` gives it too.
    out = _fresh(
        f"import verified_attn.{name}\n"
        "import verified_attn as va\n"
        f"from verified_attn import {name} as f\n"
        f"print(f is va.{name}, type(va.{name}).__name__)\n"
    )
    assert out == "True function"


def test_claims_is_the_module_and_unknown_names_raise() -> None:
    assert isinstance(va.claims, types.ModuleType) and va.claims.__name__ == "verified_attn.claims"
    assert va.check_claims is va.claims.check_claims
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        va.no_such_name  # noqa: B018

"""Check a certificate with Coq's kernel: export it, compile it, read its assumptions.

>>> from verified_attn.formal.coq_check import CoqCheck
>>> print(CoqCheck(ok=True, theorem="run_identified", seconds=1.5, axioms=[]))
Coq checked run_identified in 1.5 s (axioms: none)

:func:`check_with_coq` needs ``coqc`` and Coq Interval (see
:data:`~verified_attn.formal.COQ_INSTALL_HINT`); without them it raises
:class:`~verified_attn.formal.FormalError` saying what to install.
"""

from __future__ import annotations

import re
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verified_attn import formal
from verified_attn.formal.export import export_coq

__all__ = ["THEOREM", "CoqCheck", "check_with_coq", "compile_exported", "theorem_of"]

#: The theorem an exported run's file proves (a counterexample pair's: ``pair_same_function``).
THEOREM = "run_identified"
_PRINTED = re.compile(r"^Print Assumptions (\w+)\.$", re.M)


def theorem_of(text: str) -> str:
    r"""The theorem an exported file proves: the one its ``Print Assumptions`` names.

    >>> theorem_of("Theorem t : True.\nProof. exact I. Qed.\nPrint Assumptions t.\n")
    't'
    """
    found = _PRINTED.findall(text)
    return found[-1] if found else THEOREM


@dataclass(frozen=True)
class CoqCheck:
    """One coqc run on an exported certificate: whether the theorem was proved, and on what."""

    ok: bool
    theorem: str
    seconds: float
    axioms: list[str] = field(default_factory=list)
    log: str = ""
    #: coqc's CPU time (user + system), less sensitive than ``seconds`` to a busy machine.
    cpu_seconds: float | None = None

    def __str__(self) -> str:
        if not self.ok:
            return f"Coq did NOT prove {self.theorem} ({self.seconds:.1f} s):\n{self.log[-1500:]}"
        ax = ", ".join(self.axioms) if self.axioms else "none"
        return f"Coq checked {self.theorem} in {self.seconds:.1f} s (axioms: {ax})"


def compile_exported(text: str) -> CoqCheck:
    """Compile an exported Coq file against ``formal/``; ok iff it compiles and its
    ``Print Assumptions`` lists only :data:`~verified_attn.formal.ALLOWED_AXIOMS`."""
    theorem = theorem_of(text)
    built = formal.build()
    if not built.ok or built.directory is None:
        raise formal.FormalError(f"formal/ does not build:\n{built.log[-2000:]}")
    t0, c0 = time.perf_counter(), _child_cpu()
    proc = formal.run_coq(text, built.directory, name="Run.v")
    seconds, cpu = time.perf_counter() - t0, _child_cpu() - c0
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return CoqCheck(False, theorem, seconds, log=log, cpu_seconds=cpu)
    blocks = formal.parse_assumptions(proc.stdout)
    if len(blocks) != 1:
        return CoqCheck(False, theorem, seconds, log="no Print Assumptions output\n" + log)
    axioms = blocks[0]
    outside = sorted(set(axioms) - formal.ALLOWED_AXIOMS)
    if outside:
        return CoqCheck(False, theorem, seconds, axioms, f"axioms outside the whitelist: {outside}")
    return CoqCheck(True, theorem, seconds, axioms, log, cpu)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_with_coq(certificate: str | Path | Mapping[str, Any]) -> CoqCheck:
    """Export ``certificate`` (path or dict) to Coq and compile it (see the module doc)."""
    if formal.coqc_path() is None:
        raise formal.FormalError(
            f"coqc not found: install Coq and Coq Interval ({formal.COQ_INSTALL_HINT})"
        )
    return compile_exported(export_coq(certificate))

"""The Coq proofs in ``formal/``: find ``coqc``, build them once, read ``Print Assumptions``.

>>> from verified_attn.formal import parse_assumptions
>>> parse_assumptions("Closed under the global context")
[[]]
>>> parse_assumptions("Axioms:\\nClassical_Prop.classic : forall P : Prop, P \\\\/ ~ P\\n")
[['Classical_Prop.classic']]
>>> 'Classical_Prop.classic' in ALLOWED_AXIOMS
True

Nothing here needs Coq to import: without ``coqc`` on the PATH, :func:`coq_available` is
False and the formal claims report themselves skipped (see ``docs/formal.md``). The build
runs at most once per process, in a temporary copy of ``formal/``, so the checkout is never
written to and parallel test workers do not race.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from verified_attn.errors import InvalidArgument, VerifiedAttnError

__all__ = [
    "ALLOWED_AXIOMS",
    "COQ_INSTALL_HINT",
    "PACKAGED",
    "BuildResult",
    "FormalError",
    "assumptions",
    "build",
    "coq_available",
    "coqc_path",
    "formal_dir",
    "parse_assumptions",
    "run_coq",
    "source_files",
]

#: The axioms Coq's standard real-number library rests on; ``Print Assumptions`` of every
#: required theorem must list only these. The reals are built (Coq >= 8.12,
#: ``ClassicalDedekindReals``) from the first two plus functional extensionality; the
#: library's analysis (e.g. ``exp_increasing``, the mean value theorem) also uses the
#: excluded middle.
ALLOWED_AXIOMS = frozenset(
    {
        "ClassicalDedekindReals.sig_forall_dec",
        "ClassicalDedekindReals.sig_not_dec",
        "FunctionalExtensionality.functional_extensionality_dep",
        "Classical_Prop.classic",
    }
)

COQ_INSTALL_HINT = "apt-get install coq libcoq-mathcomp-ssreflect libcoq-coquelicot libcoq-interval"

#: The logical name ``formal/_CoqProject`` maps the directory to (``-R . VerifiedAttn``).
LOGICAL_ROOT = "VerifiedAttn"

_TIMEOUT = 900  # seconds for one coqc run; the whole build takes about ten


class FormalError(VerifiedAttnError):
    """The Coq sources are missing, do not build, or a query on them failed."""


@dataclass(frozen=True)
class BuildResult:
    """One build of ``formal/``: where the compiled files are, how long it took, the log."""

    ok: bool
    directory: Path | None
    seconds: float
    log: str = ""
    files: list[str] = field(default_factory=list)


#: Where a built wheel puts the Coq sources of ``formal/`` (pyproject.toml maps them there).
PACKAGED = Path(__file__).resolve().parent / "coq"


def formal_dir() -> Path | None:
    """The Coq sources: ``$VERIFIED_ATTN_FORMAL_DIR`` if set, else the checkout's ``formal/``,
    else the copy an installed wheel ships (:data:`PACKAGED`); None if none is present.

    >>> d = formal_dir()
    >>> d is None or (d / "_CoqProject").is_file()
    True
    """
    env = os.environ.get("VERIFIED_ATTN_FORMAL_DIR")
    if env:
        candidates = [Path(env)]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "formal", PACKAGED]
    return next((c for c in candidates if (c / "_CoqProject").is_file()), None)


def coqc_path() -> str | None:
    """The ``coqc`` executable on the PATH, or None."""
    return shutil.which("coqc")


def coq_available() -> bool:
    """Whether proofs can be built here: ``coqc`` found and ``formal/`` present."""
    return coqc_path() is not None and formal_dir() is not None


def source_files(directory: Path | None = None) -> list[str]:
    """The ``.v`` files of ``_CoqProject``, in build order (each after what it imports).

    >>> files = source_files()
    >>> not files or files[0] == "Defs.v"
    True
    """
    directory = directory or formal_dir()
    if directory is None:
        return []
    lines = (directory / "_CoqProject").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip().endswith(".v")]


def run_coq(source: str, directory: Path, *, name: str = "Query.v") -> subprocess.CompletedProcess:
    """Compile one Coq file with ``-R directory VerifiedAttn`` in a fresh temporary dir.

    The file is written outside ``directory``; the result (stdout, stderr, returncode) is
    returned, never raised on, so that callers can assert that a false statement fails.
    """
    coqc = coqc_path()
    if coqc is None:
        raise FormalError(f"coqc not found; install Coq ({COQ_INSTALL_HINT})")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*\.v", name):
        raise InvalidArgument(f"name must be a Coq file name like Query.v, got {name!r}")
    with tempfile.TemporaryDirectory(prefix="verified-attn-coq-") as tmp:
        path = Path(tmp) / name
        path.write_text(source)
        return subprocess.run(
            [coqc, "-q", "-R", str(directory), LOGICAL_ROOT, str(path)],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            cwd=tmp,
        )


@functools.cache
def _build_once(source: str) -> BuildResult:
    coqc = coqc_path()
    if coqc is None:  # build() checked; coqc may have left the PATH since
        raise FormalError(f"coqc not found; install Coq ({COQ_INSTALL_HINT})")
    src = Path(source)
    out = Path(tempfile.mkdtemp(prefix="verified-attn-formal-"))
    files = source_files(src)
    for f in ["_CoqProject", *files]:
        shutil.copy2(src / f, out / f)
    log: list[str] = []
    t0 = time.perf_counter()
    for f in files:
        proc = subprocess.run(
            [coqc, "-q", "-R", ".", LOGICAL_ROOT, f],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            cwd=out,
        )
        log.append(f"coqc {f}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            return BuildResult(False, out, time.perf_counter() - t0, "\n".join(log), files)
    return BuildResult(True, out, time.perf_counter() - t0, "\n".join(log), files)


def build() -> BuildResult:
    """Build every file of ``formal/`` (once per process; later calls return the same result).

    Raises :class:`FormalError` when ``coqc`` or ``formal/`` is missing; a failing build is
    returned with ``ok=False`` and the compiler's messages in ``log``.
    """
    if coqc_path() is None:
        raise FormalError(f"coqc not found; install Coq ({COQ_INSTALL_HINT})")
    directory = formal_dir()
    if directory is None:
        raise FormalError("formal/ (the Coq sources) not found next to the package")
    return _build_once(str(directory))


_HEADER = re.compile(r"^(Axioms:|Closed under the global context)\s*$", re.M)


def parse_assumptions(output: str) -> list[list[str]]:
    """The axiom names of each ``Print Assumptions`` block in a coqc output, in order.

    A block is ``Closed under the global context`` (no axioms) or ``Axioms:`` followed by
    one entry per axiom: its qualified name at the start of a line, then `` : type``
    (continued on indented lines).
    """
    heads = list(_HEADER.finditer(output))
    blocks: list[list[str]] = []
    for n, head in enumerate(heads):
        if head.group(1).startswith("Closed"):
            blocks.append([])
            continue
        end = heads[n + 1].start() if n + 1 < len(heads) else len(output)
        names = []
        for line in output[head.end() : end].splitlines():
            if line and not line[0].isspace():
                names.append(line.split(" :", 1)[0].strip())
        blocks.append(names)
    return blocks


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_']*")


@functools.cache
def _assumptions_cached(
    groups: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[tuple[str, ...], ...]:
    result = build()
    if not result.ok or result.directory is None:
        raise FormalError(f"formal/ does not build:\n{result.log[-2000:]}")
    modules = sorted({m for m, _ in groups})
    lines = [f"From {LOGICAL_ROOT} Require Import {' '.join(modules)}."]
    # Print Assumptions walks the whole real-number library each time (about a second):
    # one pair of proofs per group halves the runs and still names every theorem.
    for n, (module, names) in enumerate(groups):
        terms = [f"{module}.{name}" for name in names]
        if len(terms) == 1:
            lines.append(f"Print Assumptions {terms[0]}.")
        else:
            pair = terms[-1]
            for t in reversed(terms[:-1]):
                pair = f"({t}, {pair})"
            lines.append(f"Definition group_{n} := {pair}.")
            lines.append(f"Print Assumptions group_{n}.")
    pairs = groups
    proc = run_coq("\n".join(lines) + "\n", result.directory)
    if proc.returncode != 0:
        raise FormalError(f"Print Assumptions failed: {(proc.stdout + proc.stderr)[-2000:]}")
    blocks = parse_assumptions(proc.stdout)
    if len(blocks) != len(pairs):
        raise FormalError(
            f"expected {len(pairs)} Print Assumptions blocks, read {len(blocks)}:\n"
            f"{proc.stdout[-2000:]}"
        )
    return tuple(tuple(b) for b in blocks)


def assumptions(
    groups: list[tuple[str, tuple[str, ...]]],
) -> dict[tuple[str, tuple[str, ...]], list[str]]:
    """The axioms a group of theorems of one module rests on (the union of their
    ``Print Assumptions``), e.g. ``[("Thm41", ("thm41_identifiable",))]``.

    One coqc run for the whole list (cached per list). Raises :class:`FormalError` if a
    theorem does not exist or the build fails.
    """
    for module, names in groups:
        if not names or not all(_IDENT.fullmatch(x) for x in (module, *names)):
            raise InvalidArgument(f"not a Coq module and theorem names: {module!r}, {names!r}")
    key = tuple((m, tuple(names)) for m, names in groups)
    blocks = _assumptions_cached(key)
    return {group: list(block) for group, block in zip(key, blocks, strict=True)}

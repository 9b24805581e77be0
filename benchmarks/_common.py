"""Shared helpers for benchmark scripts: metadata, JSON output, medians, plots, progress.

Every benchmark writes ``benchmarks/results/<name>.json`` with the seed, versions, machine
and arithmetic settings next to its figures, and (if matplotlib is installed) PNG plots.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from verified_attn.recovery import versions

RESULTS = Path(__file__).resolve().parent / "results"

T = TypeVar("T")


def show_progress() -> bool:
    """Whether benchmarks draw progress bars: standard error is a terminal (silent in logs,
    pipes and CI)."""
    return sys.stderr.isatty()


def learner_progress() -> bool:
    """``progress=`` for a learner call in a benchmark: a bar over its queries when standard
    error is a terminal and this is the main process (worker processes stay silent: their
    bars would interleave with the cells' bar)."""
    import multiprocessing

    return show_progress() and multiprocessing.parent_process() is None


def progress(
    items: Iterable[T], desc: str, *, total: int | None = None, unit: str = "cell"
) -> Iterator[T]:
    """``items`` with a tqdm bar over them on standard error when it is a terminal, else
    ``items`` as they are (nothing is written)."""
    if not show_progress():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(
        items, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True
    )


def metadata(seed: int, **settings: Any) -> dict[str, Any]:
    """Seed, versions, machine and the run's settings (arithmetic, precision, ...)."""
    return {
        "seed": seed,
        "versions": versions(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "settings": settings,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def timed(fn: Callable[[], Any], repeats: int = 3) -> tuple[Any, float, list[float]]:
    """(last result, median seconds, all seconds) over ``repeats`` runs."""
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times), times


def output_dir(out: Path | None, quick: bool, name: str) -> Path:
    """Where a run writes: ``--out`` if given, else ``results/`` for a full run and a fresh
    temporary directory for a ``--quick`` one (printed on stderr), so that smoke runs
    neither overwrite the recorded results nor leave untracked files in the checkout."""
    if out is not None:
        return out
    if not quick:
        return RESULTS
    tmp = Path(tempfile.mkdtemp(prefix=f"verified-attn-{name}-quick-"))
    print(f"--quick without --out: writing to {tmp}", file=sys.stderr)
    return tmp


def write_json(name: str, data: dict[str, Any], out: Path = RESULTS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def plot_path(name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}.png"

"""Run one claim over a grid of sizes and seeds, on any ``concurrent.futures.Executor``.

>>> import verified_attn as va
>>> out = va.sweep("thm-4.1/query-count", sizes=[2, 3], seeds=[0, 1])
>>> [(c["d"], c["seed"], c["passed"]) for c in out["cells"]]
[(2, 0, True), (2, 1, True), (3, 0, True), (3, 1, True)]
>>> out["cells"][0]["detail"], out["executor"], out["all_passed"]
('d = 2: 6 queries, bound d^2 + d = 6; float: 6', 'in-process', True)

Each cell is the claim's sized check (:attr:`~verified_attn.checks.Claim.check_at`) at one
size with one seed, run by a top-level function that looks the claim up by id where it
runs. A cell depends on nothing but its size and seed, so ``passed`` and ``detail`` are
the same whichever executor runs it (only ``seconds`` differ):

>>> from concurrent.futures import ThreadPoolExecutor
>>> with ThreadPoolExecutor(2) as pool:
...     threaded = va.sweep("thm-4.1/query-count", sizes=[2, 3], seeds=[0, 1], executor=pool)
>>> same = lambda c: (c["d"], c["seed"], c["passed"], c["detail"])
>>> [same(c) for c in threaded["cells"]] == [same(c) for c in out["cells"]]
True

A process pool (``ProcessPoolExecutor(N)``) uses the cores of one machine; a Dask cluster
(``distributed.Client(ADDRESS).get_executor()``) uses many machines, each worker needing
the same verified-attn installed (``versions_agree`` says whether the workers reported the
versions of the caller). See docs/sweeps.md.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import CancelledError, Executor, Future, as_completed, wait
from typing import Any

from verified_attn.arithmetic import PRECISION_LOCK
from verified_attn.checks import Claim
from verified_attn.claims import all_claims, get_claim, run_claim
from verified_attn.errors import InvalidArgument
from verified_attn.progress import Reporter, check_progress
from verified_attn.recovery import versions
from verified_attn.validation import check_int, check_real, check_seed, is_int

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_WORKERS",
    "check_scheduler",
    "check_workers",
    "dask_client",
    "describe_executor",
    "sweep",
]

#: The most local worker processes a sweep starts (each cell runs in one process; more
#: than a few per core only adds memory).
MAX_WORKERS = max(4, 4 * (os.cpu_count() or 1))
#: How long a sweep waits for all its cells, in seconds, before the rest are failed cells.
DEFAULT_TIMEOUT = 24 * 3600.0
_ADDRESS = re.compile(
    r"^(?:(tcp|tls|inproc|ws|wss|ucx)://)?[A-Za-z0-9_.\-\[\]:]*[A-Za-z0-9\]](?::\d{1,5})?$"
)


def check_workers(workers: Any) -> int:
    """The number of local worker processes: an int in 1..:data:`MAX_WORKERS`.

    >>> check_workers(2)
    2
    >>> check_workers(10**6)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: workers must be an int in 1..., got 1000000
    """
    return int(check_int(workers, "workers", low=1, high=MAX_WORKERS))


def check_scheduler(address: Any) -> str:
    """A Dask scheduler address (``tcp://host:port``, ``host:port``), checked for form only.

    >>> check_scheduler("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> check_scheduler("::::")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: scheduler must be an address like tcp://host:8786, got '::::'
    """
    if not isinstance(address, str) or len(address) > 256 or not _ADDRESS.match(address):
        raise InvalidArgument(
            f"scheduler must be an address like tcp://host:8786, got {str(address)[:80]!r}"
        )
    host = re.sub(r":\d{1,5}$", "", address.split("://")[-1])
    if not host.strip(":[]"):
        raise InvalidArgument(f"scheduler must be an address like tcp://host:8786, got {address!r}")
    return address


def _run_cell(claim_id: str, params: dict[str, int | float], seed: int) -> dict[str, Any]:
    """One cell, run where the executor puts it (a top-level function: it pickles by name).

    Cells in one process run one at a time (:data:`~verified_attn.arithmetic.PRECISION_LOCK`:
    python-flint's working precision is process-wide), so a thread pool, or a Dask worker
    with several threads, gives the same cells as one process but no speed-up: use
    processes (``--workers``, Dask workers started with ``--nthreads 1``) for that.
    """
    with PRECISION_LOCK:
        res = run_claim(get_claim(claim_id), seed, params)
    return {
        "d": params.get("d"),
        "seed": seed,
        "size": dict(params),
        "passed": bool(res.passed),
        "detail": res.detail,
        "queries": res.queries,
        "bound": res.bound,
        "seconds": res.seconds,
        "versions": versions(),
    }


def dask_client(address: Any, *, timeout: float = 30.0) -> Any:
    """A ``distributed.Client`` connected to ``address``; InvalidArgument naming the address
    if Dask is not installed, the address is malformed, or what answers there is not a
    Dask scheduler (or nothing answers within ``timeout`` seconds)."""
    address = check_scheduler(address)
    try:
        import distributed
    except ImportError:
        raise InvalidArgument(
            "a Dask scheduler needs Dask distributed: pip install 'verified-attn[dask]'"
        ) from None
    try:
        return distributed.Client(address, timeout=timeout)
    except Exception as exc:  # refused, timed out, or not speaking Dask's protocol
        raise InvalidArgument(
            f"cannot use the Dask scheduler {address}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc


def _cell_label(params: Mapping[str, int | float], seed: int) -> str:
    """A cell for people: ``"d = 8, seed 0"``."""
    return ", ".join(f"{k} = {v}" for k, v in params.items()) + f", seed {seed}"


def _run_in_process(
    claim_id: str, grid: list[tuple[dict[str, Any], int]], reporter: Reporter | None
) -> list[dict[str, Any] | BaseException]:
    """Every cell's outcome, one after another in this process."""
    outcomes: list[dict[str, Any] | BaseException] = []
    for p, s in grid:
        outcomes.append(_run_cell(claim_id, p, s))
        if reporter is not None:
            reporter.advance(1, _cell_label(p, s))
    return outcomes


def _collect(
    executor: Executor,
    claim_id: str,
    grid: list[tuple[dict[str, Any], int]],
    timeout: float,
    reporter: Reporter | None = None,
) -> list[dict[str, Any] | BaseException]:
    """Every cell's outcome from an executor: its dict, or the exception that failed it."""
    futures: list[Future[Any] | BaseException] = []
    for p, s in grid:
        try:
            futures.append(executor.submit(_run_cell, claim_id, p, s))
        except Exception as exc:  # a shut-down or broken pool: the cell fails, as documented
            futures.append(exc)
    pending = {f: cell for f, cell in zip(futures, grid, strict=True) if isinstance(f, Future)}
    if reporter is None:
        wait(pending, timeout=timeout)
    else:
        try:
            for future in as_completed(pending, timeout=timeout):
                reporter.advance(1, _cell_label(*pending[future]))
        except TimeoutError:  # the cells still pending are failed below
            pass
    outcomes: list[dict[str, Any] | BaseException] = []
    for entry in futures:
        if isinstance(entry, BaseException):
            outcomes.append(entry)
        elif not entry.done():
            entry.cancel()
            outcomes.append(TimeoutError(f"no answer within the sweep's timeout {timeout:g} s"))
        else:
            try:
                outcomes.append(entry.result())
            except (Exception, CancelledError) as exc:  # a lost worker: a failed cell
                outcomes.append(exc)
    return outcomes


def describe_executor(executor: Any) -> str:
    """A short name for the executor that ran a sweep (what ``sweep`` reports).

    >>> from concurrent.futures import ProcessPoolExecutor
    >>> with ProcessPoolExecutor(2) as pool:
    ...     describe_executor(None), describe_executor(pool)
    ('in-process', 'ProcessPoolExecutor(max_workers=2)')
    """
    if executor is None:
        return "in-process"
    name = type(executor).__name__
    workers = getattr(executor, "_max_workers", None)
    return f"{name}(max_workers={workers})" if is_int(workers) else name


def _sized_claim(claim_id: Any) -> Claim:
    if not isinstance(claim_id, str):
        raise InvalidArgument(f"claim_id must be a claim id (a string), got {claim_id!r}")
    claim = get_claim(claim_id)  # unknown: InvalidArgument naming the known ids
    if not claim.sized:
        sized = ", ".join(c.id for c in all_claims() if c.sized)
        raise InvalidArgument(
            f"claim {claim_id!r} has no size support, so it cannot be swept; "
            f"claims with size support: {sized}"
        )
    return claim


def _grid(claim: Claim, sizes: Any, seeds: Any) -> tuple[list[dict[str, int | float]], list[int]]:
    for name, value in (("sizes", sizes), ("seeds", seeds)):
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
            raise InvalidArgument(f"{name} must be a sequence, got {type(value).__name__}")
    params: list[dict[str, int | float]] = []
    for size in sizes:
        if isinstance(size, Mapping):
            p = claim.size_params(**size)
        elif is_int(size):
            p = claim.size_params(d=size)  # d validated (an int >= 1) and named there
        else:
            raise InvalidArgument(
                f"an entry of sizes must be an int d or a dict of size parameters, got "
                f"{type(size).__name__} {size!r}"
            )
        if p in params:
            raise InvalidArgument(f"sizes lists {p} twice")
        params.append(p)
    seed_list = [check_seed(s, "an entry of seeds") for s in seeds]
    if not params:
        raise InvalidArgument("sizes must not be empty")
    if not seed_list:
        raise InvalidArgument("seeds must not be empty")
    if len(set(seed_list)) != len(seed_list):
        raise InvalidArgument(f"seeds lists a seed twice: {seed_list}")
    order = list(claim.sizes or {})
    params.sort(key=lambda p: tuple(p[k] for k in order))  # "d" first where declared first
    return params, sorted(seed_list)


def sweep(
    claim_id: str,
    *,
    sizes: Iterable[int | Mapping[str, int | float]],
    seeds: Iterable[int],
    executor: Executor | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Any = False,
) -> dict[str, Any]:
    """Check ``claim_id`` at every size and seed; one JSON-ready dict of cells.

    ``sizes``: ints (the size ``d``, the claim's other size parameters at their defaults)
    or dicts of size parameters (``{"d": 16, "r": 2, "c": 1.5}``). ``seeds``: ints >= 0.
    ``executor``: any :class:`concurrent.futures.Executor` (default: in this process, one
    cell after another). Cells come back ordered by size (``d`` first) and then seed, each
    ``{"d", "seed", "size", "passed", "detail", "queries", "bound", "seconds"}``; a cell
    whose check raises, or whose worker fails, is a failed cell with the error in
    ``detail``. The dict also has the claim's reference and statement, the grid, pass
    counts, ``versions`` (of this process), ``versions_agree`` (every worker reported the
    same versions), ``executor`` and the wall ``seconds``. ``timeout``: seconds to wait for
    all cells of an executor; a cell not done by then (a lost worker, a pool that never
    answers) is a failed cell, as is one the executor refuses to start (a shut-down or
    broken pool). ``progress``: a bar or callback over the cells as they finish
    (:mod:`verified_attn.progress`; a callback's label is the cell, e.g. ``"d = 8, seed 0"``).

    Raises InvalidArgument for an unknown claim id (naming the known ones), a claim
    without size support, or a bad size or seed (naming the entry).
    """
    claim = _sized_claim(claim_id)
    params, seed_list = _grid(claim, sizes, seeds)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise InvalidArgument(
            f"executor must be a concurrent.futures.Executor (with submit), got "
            f"{type(executor).__name__}"
        )
    timeout = float(check_real(timeout, "timeout", low=0, low_open=True))
    progress = check_progress(progress)
    grid = [(p, s) for p in params for s in seed_list]
    t0 = time.perf_counter()
    reporter: Reporter | None = None
    if progress is not False:
        reporter = Reporter(progress, desc=claim.id, total=len(grid), unit="cell", kind="cell")
    try:
        if executor is None:
            outcomes = _run_in_process(claim.id, grid, reporter)
        else:
            outcomes = _collect(executor, claim.id, grid, timeout, reporter)
    finally:
        if reporter is not None:
            reporter.close()
    seconds = time.perf_counter() - t0
    here = versions()
    cells: list[dict[str, Any]] = []
    seen: list[Any] = []
    for (p, s), out in zip(grid, outcomes, strict=True):
        if isinstance(out, BaseException):
            cell = {
                "d": p.get("d"),
                "seed": s,
                "size": dict(p),
                "passed": False,
                "detail": f"cell raised {type(out).__name__}: {out}",
                "queries": None,
                "bound": None,
                "seconds": 0.0,
            }
        else:
            cell = dict(out)
            worker = cell.pop("versions")
            if worker not in seen:
                seen.append(worker)
        cells.append(cell)
    passed = sum(bool(c["passed"]) for c in cells)
    return {
        "tool": "verified-attn sweep",
        "claim": claim.id,
        "paper_ref": claim.paper_ref,
        "statement": claim.statement,
        "size_parameters": dict(claim.sizes or {}),
        "sizes": params,
        "seeds": seed_list,
        "cells": cells,
        "passed": passed,
        "failed": len(cells) - passed,
        "all_passed": passed == len(cells),
        "versions": here,
        "versions_agree": all(v == here for v in seen),
        "worker_versions": [v for v in seen if v != here],
        "executor": describe_executor(executor),
        "seconds": seconds,
    }

"""Benchmark of ``va.sweep``: the nuclear-norm phase transition of Thm 5.1, 1 vs 2 workers.

Run ``python benchmarks/sweep.py`` (full) or ``--quick`` (smoke sizes); ``--out DIR``
(default ``benchmarks/results/``), ``--seed N`` (offset of the trial seeds), ``--no-plots``,
``--scheduler ADDRESS`` (also run the grid on a Dask cluster and time it there). Writes
``sweep.json`` (``sweep_quick.json`` with ``--quick``) and ``sweep.png``.

The grid is the claim ``thm-5.1/nuclear-recovery`` at sizes ``{"d", "r", "c"}``, with
``m = ceil(c * 2rd)`` rank-one measurements of a random rank-r W, and one cell per trial
seed: a cell passes when nuclear-norm ADMM (tol 1e-9) converges to relative Frobenius
error <= 1e-6, the claim's own criterion. The success rate per (d, r, c) is the fraction
of passing seeds; the claim is c = 3, and the transition sits below it.

The same sweep runs on ``ProcessPoolExecutor(1)`` and ``ProcessPoolExecutor(2)`` (spawned
workers with one BLAS thread each, started and warmed before the clock starts), in the
order 1, 2, 2, 1 so that a drift in the machine's other load falls on both equally; the
speed-up is (sum of the 1-worker wall times) / (sum of the 2-worker wall times), measured
in one run, and every run's cells must agree exactly (``cells_agree``). Each run also
records its workers' CPU seconds, and the load average is recorded before and after: a
speed-up far from 2 on a busy 2-core machine measures the other load.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir

import verified_attn as va

CLAIM = "thm-5.1/nuclear-recovery"
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def grid(quick: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """The sizes (d, r, c) and the number of trial seeds."""
    ds = (8,) if quick else (16, 32, 64)
    rs = (1, 2)
    cs = (1.0, 2.0, 3.0) if quick else (1.0, 1.5, 2.0, 2.5, 3.0)
    sizes = [{"d": d, "r": r, "c": c} for d in ds for r in rs for c in cs]
    return sizes, list(range(4 if quick else 8))


def _warm(_: int) -> int:
    """Import every room in a worker (and hold it briefly, so each worker gets one)."""
    va.claims.all_claims()
    time.sleep(0.5)
    return os.getpid()


def _pool(workers: int) -> ProcessPoolExecutor:
    for name in _ONE_THREAD:  # spawned workers read these before numpy loads BLAS
        os.environ[name] = "1"
    ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(workers, mp_context=ctx)


def timed_sweep(executor: Executor, sizes: list[dict[str, Any]], seeds: list[int]) -> Any:
    t0 = time.perf_counter()
    out = va.sweep(CLAIM, sizes=sizes, seeds=seeds, executor=executor)
    return out, time.perf_counter() - t0


def on_pool(workers: int, sizes: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with _pool(workers) as pool:
        pids = set(pool.map(_warm, range(workers)))
        startup = time.perf_counter() - t0
        out, seconds = timed_sweep(pool, sizes, seeds)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, joined on exit
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    print(f"{workers} worker(s): {seconds:.2f} s ({startup:.2f} s startup)", flush=True)
    return {
        "workers": workers,
        "distinct_pids": len(pids),
        "startup_seconds": startup,
        "seconds": seconds,
        "worker_cpu_seconds": cpu,
        "load_average_after": os.getloadavg(),
        "sweep": out,
    }


def success_rates(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for size in out["sizes"]:
        cells = [c for c in out["cells"] if c["size"] == size]
        m = min(size["d"] ** 2, math.ceil(size["c"] * 2 * size["r"] * size["d"]))
        rows.append(
            {
                **size,
                "m": m,
                "trials": len(cells),
                "success_rate": sum(c["passed"] for c in cells) / len(cells),
                "seconds": sum(c["seconds"] for c in cells),
            }
        )
    return rows


def _key(c: dict[str, Any]) -> tuple[Any, ...]:
    return (c["d"], c["seed"], c["size"], c["passed"], c["detail"])


def plot(data: dict[str, Any], out_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return []
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    rows = data["phase_transition"]
    for d, r in sorted({(x["d"], x["r"]) for x in rows}):
        pts = [(x["c"], x["success_rate"]) for x in rows if x["d"] == d and x["r"] == r]
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"d={d}, r={r}")
    ax.axvline(3.0, color="grey", ls=":", label="the claim: c = 3")
    ax.set_xlabel("c = m / (2 r d)")
    ax.set_ylabel(f"success rate over {data['trials']} seeds")
    ax.set_title("thm-5.1/nuclear-recovery swept over (d, r, c)")
    ax.legend(fontsize=7)
    runs = data["runs"]
    bx.bar(
        [
            f"run {i + 1}: {r['workers']} worker{'s' * (r['workers'] > 1)}"
            for i, r in enumerate(runs)
        ],
        [r["seconds"] for r in runs],
        color=["tab:blue" if r["workers"] == 1 else "tab:orange" for r in runs],
    )
    bx.tick_params(axis="x", labelsize=7)
    bx.set_ylabel("wall seconds (warm pool)")
    bx.set_title(f"speed-up 2 over 1: {data['speedup_2_over_1']:.2f}x")
    fig.tight_layout()
    path = out_dir / "sweep.png"
    fig.savefig(path)
    return [path.name]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="offset added to the trial seeds")
    parser.add_argument("--out", type=Path, default=None, help="output folder")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="also run on this Dask cluster")
    args = parser.parse_args(argv)
    args.out = output_dir(args.out, args.quick, "sweep")
    sizes, seeds = grid(args.quick)
    seeds = [args.seed + s for s in seeds]
    load_start = os.getloadavg()
    runs = [on_pool(n, sizes, seeds) for n in (1, 2, 2, 1)]
    sweeps = [r.pop("sweep") for r in runs]
    one = sweeps[0]
    agree = all([_key(c) for c in s["cells"]] == [_key(c) for c in one["cells"]] for s in sweeps)
    wall = {n: sum(r["seconds"] for r in runs if r["workers"] == n) for n in (1, 2)}
    data: dict[str, Any] = {
        "benchmark": "sweep",
        "quick": args.quick,
        "metadata": metadata(
            args.seed,
            claim=CLAIM,
            sizes=sizes,
            seeds=seeds,
            blas_threads_per_worker=1,
            start_method="spawn",
        ),
        "claim": CLAIM,
        "trials": len(seeds),
        "cells": len(one["cells"]),
        "runs": runs,
        "speedup_2_over_1": wall[1] / wall[2],
        "run_order": [r["workers"] for r in runs],
        "cells_agree": agree,
        "phase_transition": success_rates(one),
        "cell_seconds_total": sum(c["seconds"] for c in one["cells"]),
    }
    if args.scheduler:
        import distributed

        with distributed.Client(args.scheduler) as client:
            out, seconds = timed_sweep(client.get_executor(), sizes, seeds)
            data["dask"] = {
                "scheduler": args.scheduler,
                "workers": len(client.scheduler_info()["workers"]),
                "seconds": seconds,
                "cells_agree": [_key(c) for c in out["cells"]] == [_key(c) for c in one["cells"]],
            }
    data["metadata"]["load_average_1_5_15min"] = {"start": load_start, "end": os.getloadavg()}
    data["figures"] = [] if args.no_plots else plot(data, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("sweep_quick.json" if args.quick else "sweep.json")

    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(f"speed-up 2 over 1 workers: {data['speedup_2_over_1']:.2f}; cells agree: {agree}")
    print(path)
    return data


if __name__ == "__main__":
    main()

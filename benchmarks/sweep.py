"""Benchmark of ``va.sweep``: the nuclear-norm phase transition of Thm 5.1, 1 vs 2 workers.

Run ``python benchmarks/sweep.py`` (full) or ``--quick`` (smoke sizes); ``--out DIR``
(default ``benchmarks/results/``), ``--seed N`` (offset of the trial seeds), ``--pairs N``
(paired timing runs, default 5), ``--grid-workers 2,1`` (the pools the grid runs on),
``--no-plots``, ``--scheduler ADDRESS`` (also run the grid
on a Dask cluster and time it there). Writes ``sweep.json`` (``sweep_quick.json`` with
``--quick``) and ``sweep.png``.

The grid is the claim ``thm-5.1/nuclear-recovery`` at sizes ``{"d", "r", "c"}``, with
``m = ceil(c * 2rd)`` rank-one measurements of a random rank-r W, and one cell per trial
seed: a cell passes when nuclear-norm ADMM (tol 1e-9) converges to relative Frobenius
error <= 1e-6, the claim's own criterion. The success rate per (d, r, c) is the fraction
of passing seeds.

Two local pools, ``ProcessPoolExecutor(1)`` and ``ProcessPoolExecutor(2)`` (spawned workers
with one BLAS thread each), are started and warmed before any clock starts and kept for
the whole run. The phase-transition grid runs once on each (every cell must agree
exactly: ``cells_agree``), or only on those ``--grid-workers`` names. The speed-up is then measured on a smaller timing grid in
``--pairs`` paired runs, each pair one 1-worker and one 2-worker sweep back to back (the
order alternating, 1-2 then 2-1, so that a drift in the machine's other load falls on both
alike); each pair gives the ratio of its wall times, the reported ``speedup_2_over_1`` is
the median of the pairs' ratios, with every pair's ratio, its workers' CPU seconds and the
load average (``os.getloadavg()``) before and after it: on a busy 2-core machine a ratio
far from 2 measures the other load.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, show_progress

import verified_attn as va

CLAIM = "thm-5.1/nuclear-recovery"
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def grid(quick: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """The sizes (d, r, c) and the trial seeds of the phase-transition grid."""
    ds = (8,) if quick else (16, 32, 64)
    rs = (1, 2)
    cs = (1.0, 2.0, 3.0) if quick else (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)
    sizes = [{"d": d, "r": r, "c": c} for d in ds for r in rs for c in cs]
    return sizes, list(range(4 if quick else 6))


def timing_grid(quick: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """The smaller grid the paired 1- vs 2-worker timings run (a few seconds per run)."""
    if quick:
        return [{"d": 8, "r": 1, "c": 3.0}, {"d": 8, "r": 2, "c": 3.0}], [0, 1]
    return [{"d": 32, "r": r, "c": c} for r in (1, 2) for c in (2.0, 3.0, 4.0)], [0, 1, 2, 3]


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
    out = va.sweep(CLAIM, sizes=sizes, seeds=seeds, executor=executor, progress=show_progress())
    return out, time.perf_counter() - t0


class WarmPool:
    """A started, warmed process pool, with its workers' CPU time readable at any moment."""

    def __init__(self, workers: int) -> None:
        t0 = time.perf_counter()
        self.workers = workers
        self.pool = _pool(workers)
        self.pids = sorted(set(self.pool.map(_warm, range(workers))))
        self.startup_seconds = time.perf_counter() - t0

    def cpu_seconds(self) -> float:
        import psutil

        total = 0.0
        for pid in self.pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:  # pragma: no cover - a worker that died
                continue
            total += t.user + t.system
        return total

    def run(self, sizes: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
        load = os.getloadavg()
        cpu0 = self.cpu_seconds()
        out, seconds = timed_sweep(self.pool, sizes, seeds)
        print(f"{self.workers} worker(s): {seconds:.2f} s", flush=True)
        return {
            "workers": self.workers,
            "distinct_pids": len(self.pids),
            "seconds": seconds,
            "worker_cpu_seconds": self.cpu_seconds() - cpu0,
            "load_average_before": load,
            "load_average_after": os.getloadavg(),
            "sweep": out,
        }


def paired_speedups(
    pools: dict[int, WarmPool], sizes: list[dict[str, Any]], seeds: list[int], pairs: int
) -> list[dict[str, Any]]:
    """``pairs`` back-to-back 1- and 2-worker runs of one grid (order alternating)."""
    rows = []
    for i in range(pairs):
        order = (1, 2) if i % 2 == 0 else (2, 1)
        runs = {n: pools[n].run(sizes, seeds) for n in order}
        keys = {n: [_key(c) for c in runs[n].pop("sweep")["cells"]] for n in order}
        rows.append(
            {
                "pair": i,
                "order": list(order),
                "seconds": {str(n): runs[n]["seconds"] for n in (1, 2)},
                "worker_cpu_seconds": {str(n): runs[n]["worker_cpu_seconds"] for n in (1, 2)},
                "speedup": runs[1]["seconds"] / runs[2]["seconds"],
                "load_average_before": runs[order[0]]["load_average_before"],
                "load_average_after": runs[order[1]]["load_average_after"],
                "cells_agree": keys[1] == keys[2],
            }
        )
        print(f"pair {i}: speed-up {rows[-1]['speedup']:.2f}", flush=True)
    return rows


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
    from verified_attn.low_rank.nuclear import DEFAULT_OVERSAMPLING

    ax.axvline(DEFAULT_OVERSAMPLING, color="grey", ls=":",
               label=f"the claim: c = {DEFAULT_OVERSAMPLING:g}")
    ax.set_xlabel("c = m / (2 r d)")
    ax.set_ylabel(f"success rate over {data['trials']} seeds")
    ax.set_title("thm-5.1/nuclear-recovery swept over (d, r, c)")
    ax.legend(fontsize=7)
    pairs = data["pairs"]
    labels = [f"pair {p['pair'] + 1}" for p in pairs]
    bx.bar(labels, [p["speedup"] for p in pairs], color="tab:orange")
    for i, p in enumerate(pairs):
        bx.annotate(f"load {p['load_average_before'][0]:.1f}", (i, p["speedup"]),
                    ha="center", va="bottom", fontsize=7)
    bx.axhline(2.0, color="grey", ls=":", label="ideal on 2 cores")
    bx.tick_params(axis="x", labelsize=7)
    bx.set_ylabel("wall(1 worker) / wall(2 workers)")
    med = data["speedup_2_over_1"]
    bx.set_title(f"paired speed-ups: median {med:.2f}x" if med else "speed-up")
    bx.legend(fontsize=7)
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
    parser.add_argument("--pairs", type=int, default=5, help="paired 1- vs 2-worker timings")
    parser.add_argument(
        "--grid-workers", type=lambda t: [int(x) for x in t.split(",")], default=[2, 1],
        help="the pools the phase-transition grid runs on (default 2,1: both, compared; "
        "'2' alone on a loaded machine, the pairs still compare the pools cell by cell)",
    )
    parser.add_argument("--scheduler", metavar="ADDRESS", help="also run on this Dask cluster")
    args = parser.parse_args(argv)
    args.out = output_dir(args.out, args.quick, "sweep")
    sizes, seeds = grid(args.quick)
    seeds = [args.seed + s for s in seeds]
    t_sizes, t_seeds = timing_grid(args.quick)
    t_seeds = [args.seed + s for s in t_seeds]
    load_start = os.getloadavg()
    pools = {n: WarmPool(n) for n in (1, 2)}
    try:
        runs = [pools[n].run(sizes, seeds) for n in args.grid_workers]
        pairs = paired_speedups(pools, t_sizes, t_seeds, args.pairs)
    finally:
        for p in pools.values():
            p.pool.shutdown()
    sweeps = [r.pop("sweep") for r in runs]
    one = sweeps[-1]  # the last run of the grid (the 1-worker one by default)
    agree = all([_key(c) for c in s["cells"]] == [_key(c) for c in one["cells"]] for s in sweeps)
    ratios = [p["speedup"] for p in pairs]
    data: dict[str, Any] = {
        "benchmark": "sweep",
        "quick": args.quick,
        "metadata": metadata(
            args.seed,
            claim=CLAIM,
            sizes=sizes,
            seeds=seeds,
            timing_sizes=t_sizes,
            timing_seeds=t_seeds,
            blas_threads_per_worker=1,
            start_method="spawn",
        ),
        "claim": CLAIM,
        "trials": len(seeds),
        "cells": len(one["cells"]),
        "startup_seconds": {str(n): p.startup_seconds for n, p in pools.items()},
        "runs": runs,
        "pairs": pairs,
        "speedup_2_over_1": statistics.median(ratios) if ratios else None,
        "speedups": ratios,
        "cells_agree": agree and all(p["cells_agree"] for p in pairs),
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
    args.out.mkdir(parents=True, exist_ok=True)
    data["figures"] = [] if args.no_plots else plot(data, args.out)
    path = args.out / ("sweep_quick.json" if args.quick else "sweep.json")

    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(f"speed-up 2 over 1 workers: {data['speedup_2_over_1']:.2f}; cells agree: {agree}")
    print(path)
    return data


if __name__ == "__main__":
    main()

"""Queries per second of a PyTorch attention layer as a box: in process vs Dask workers.

The box is ``nn.MultiheadAttention(E, H)`` in float64 read out by an ``nn.Linear(E, 1)`` at
the last position (E = 128, H = 8 by default; one torch thread per worker and in process).
One batch of B sequences of length N is answered by :class:`verified_attn.executor_batches.ExecutorBatches`
on a loopback ``distributed.LocalCluster`` with 1, 2 and 4 worker processes (started
and stopped here; the box is scattered to the workers before any clock starts), and in
process without an executor. Every answer must equal the in-process answer bit for bit.
Per setting: the median wall time of ``--repeats`` runs, queries per second, and the
ratio to the in-process rate measured in the same run. The machine is shared and has
2 cores, so 4 workers measure the overhead of oversubscription, not a speed-up. Run::

    /work/venv/bin/python benchmarks/oracle_executor.py            # B = 4096, N = 8
    /work/venv/bin/python benchmarks/oracle_executor.py --quick    # B = 512, 1 and 2 workers
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, write_json

from verified_attn.executor_batches import ExecutorBatches

NAME = "oracle_executor"
ROOT = Path(__file__).resolve().parents[1]


class TorchBox:
    """The layer as a picklable batch function (torch modules pickle; one torch thread)."""

    def __init__(self, E: int, H: int, seed: int) -> None:
        import torch

        torch.manual_seed(seed)
        self.mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        self.readout = torch.nn.Linear(E, 1, dtype=torch.float64)

    def __call__(self, Xs: np.ndarray) -> np.ndarray:
        import torch

        torch.set_num_threads(1)
        X = torch.from_numpy(np.ascontiguousarray(Xs))
        with torch.no_grad():
            out = self.mha(X, X, X, need_weights=False)[0][:, -1]
            return self.readout(out).numpy()[:, 0]


def _timed(fn: Any, Xs: np.ndarray, repeats: int) -> tuple[np.ndarray, float]:
    times, answers = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        answers = fn(Xs)
        times.append(time.perf_counter() - start)
    assert answers is not None
    return answers, statistics.median(times)


def _on_dask(box: TorchBox, Xs: np.ndarray, workers: int, repeats: int) -> tuple[Any, float]:
    import distributed

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])
    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        batches = ExecutorBatches(box, client, min_rows=16)
        batches(Xs[: 16 * workers])  # ship the box and warm the workers
        return _timed(batches, Xs, repeats)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--E", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = output_dir(args.out, args.quick, NAME)
    B, N = (512, 8) if args.quick else (4096, 8)
    box = TorchBox(args.E, args.heads, args.seed)
    Xs = np.random.default_rng(args.seed).standard_normal((B, N, args.E))
    reference, serial = _timed(box, Xs, args.repeats)
    rows = [{"workers": 0, "seconds": serial, "queries_per_second": B / serial, "ratio": 1.0}]
    worker_counts = (1, 2) if args.quick else (1, 2, 4)
    for workers in progress(worker_counts, "dask workers", total=len(worker_counts)):
        answers, seconds = _on_dask(box, Xs, workers, args.repeats)
        rows.append({
            "workers": workers,
            "seconds": seconds,
            "queries_per_second": B / seconds,
            "ratio": serial / seconds,
            "answers_identical": bool(np.array_equal(answers, reference)),
        })
        print(rows[-1], file=sys.stderr)
    data = {
        "benchmark": NAME,
        "meta": metadata(args.seed, arithmetic="float", E=args.E, heads=args.heads, B=B, N=N,
                         repeats=args.repeats, loadavg=os.getloadavg()),
        "rows": rows,
    }
    write_json(NAME, data, out)
    if not all(r.get("answers_identical", True) for r in rows):
        raise SystemExit(1)
    return data


if __name__ == "__main__":
    main()

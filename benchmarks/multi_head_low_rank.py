"""Low-rank float multi-head extraction (``learn_multi_head(..., rank=)``) on real heads.

``nn.MultiheadAttention(E, H)`` in float64 (default initialisation, biases N(0, 1), readout
r ~ N(0, I): :func:`multi_head_float.torch_box`), whose heads have rank r = E/H. Per cell,
in its own subprocess (its peak RSS is that cell's): the learning queries against the
parameter count ``H (2rd - r^2 + d)`` and the follow-up's ``4Hd^2 - 2H + 1``, the
parameter error (largest entry error over the largest true entry, best head order; and in
bits), the prediction error on 16 fresh sequences against the float64 module, wall time.

    python benchmarks/multi_head_low_rank.py            # writes results/multi_head_low_rank.json
    python benchmarks/multi_head_low_rank.py --cells 16x4 32x4
    python benchmarks/multi_head_low_rank.py --cells 64x4 --profile /tmp  # + cProfile stats
    python benchmarks/multi_head_low_rank.py --products 64x4 128x8 256x8  # refinement only
    python benchmarks/multi_head_low_rank.py --plot   # results/multi_head_low_rank.png from the JSON

Each row also states the child's CPU seconds (user + system) beside its wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's package

from _common import output_dir, progress

NAME = "multi_head_low_rank.json"
CELLS = ["16x4", "16x8", "32x4", "32x8", "64x8"]


def child(E: int, H: int, seed: int, rank: str, profile: str | None = None) -> dict[str, Any]:
    """One cell, profiled into ``profile``/low_rank_ExH.pstats when asked."""
    if profile is None:
        return _cell(E, H, seed, rank)
    import cProfile

    prof = cProfile.Profile()
    row = prof.runcall(_cell, E, H, seed, rank)
    prof.dump_stats(str(Path(profile) / f"low_rank_{E}x{H}.pstats"))
    return row


def _cell(E: int, H: int, seed: int, rank: str) -> dict[str, Any]:
    from multi_head_float import parameter_error, prediction_error, torch_box

    import verified_attn as va
    from verified_attn.adapters.torch import attention_oracle, attention_parameters
    from verified_attn.multi_head.canonical_bounds import follow_up_query_bound
    from verified_attn.multi_head.pipeline.low_rank_design import (
        low_rank_parameter_count,
        low_rank_query_count,
    )

    r = E // H
    mha, readout = torch_box(E, H, seed)
    row: dict[str, Any] = {"E": E, "H": H, "r": r, "seed": seed, "rank": rank}
    row["parameters_low_rank"] = low_rank_parameter_count(E, H, r)
    row["follow_up"] = follow_up_query_bound(E, H)
    row["formula"] = low_rank_query_count(E, H, r, affine=True, found=rank == "find")
    t0 = time.perf_counter()
    box = attention_oracle(mha, readout, dtype="float64")
    try:
        rec = va.learn_multi_head(box, heads=H, rank=r if rank == "given" else "find", seed=seed)
    except va.VerifiedAttnError as exc:
        row.update(learned=False, refusal=type(exc).__name__, message=str(exc)[:300])
        row.update(queries_asked=box.queries, by_phase=box.queries_by_phase)
    else:
        truth = attention_parameters(mha, readout)
        got = [(W, v) for W, v, _ in rec.parameters["heads"]]
        err = parameter_error(got, list(zip(truth.W, truth.v, strict=True)))
        ref = attention_oracle(mha, readout, dtype="float64")
        model = rec.model
        pred = prediction_error(
            lambda X: float(model.evaluate_batch(X[None])[0]), ref.query, E, seed
        )
        row.update(
            learned=True,
            queries=rec.queries,
            by_phase=rec.queries_by_phase,
            parameter_error=err["parameter_error"],
            parameter_bits=-math.log2(max(err["parameter_error"], 2.0**-60)),
            parameter_error_estimate=rec.parameter_error_estimate,
            prediction_error=pred,
            verification_error=rec.verification_error,
        )
    row["seconds"] = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    row["cpu_seconds"] = use.ru_utime + use.ru_stime
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def products(E: int, H: int) -> dict[str, Any]:
    """One product pair (J x, J^T y) of the refinement's Jacobian operator at the skeleton
    design's rows for E, H (rank E/H, affine, random factors; no module, no queries): CPU
    milliseconds and the process's peak RSS (the design rows and the factors)."""
    import numpy as np

    from verified_attn.multi_head.pipeline.budget import float_ratios
    from verified_attn.multi_head.pipeline.design import float_design
    from verified_attn.multi_head.pipeline.low_rank_design import skeleton_pairs, skeleton_sizes
    from verified_attn.multi_head.pipeline.skeleton_refine import _Theta, design_rows

    r, rng = E // H, np.random.default_rng(0)
    t = np.array([k / m for k, m in float_ratios(H)])
    U, B, _ = float_design(E, 0, True)
    m, J = skeleton_sizes(E, r, True)
    pairs = skeleton_pairs(E, r, m, J)[:-1]  # the rank check pair is not fitted
    T = len(t)
    zeros = (np.zeros(J), np.zeros((len(pairs), T)), np.zeros((E - 1, T)))
    rows = design_rows(U, B, True, pairs, t, zeros)
    th = _Theta(
        [rng.normal(0, 0.1, (E, r)) for _ in range(H)],
        [rng.normal(0, 0.1, (J, r)) for _ in range(H)],
        [rng.normal(size=E) for _ in range(H)],
        0.3,
    )
    A = rows.operator(th)
    x, y = rng.normal(size=A.shape[1]), rng.normal(size=A.shape[0])
    c0 = time.process_time()
    A @ x
    c1 = time.process_time()
    A.rmatvec(y)
    c2 = time.process_time()
    return {
        "E": E,
        "H": H,
        "r": r,
        "answers": A.shape[0],
        "unknowns": A.shape[1],
        "matvec_ms": 1e3 * (c1 - c0),
        "rmatvec_ms": 1e3 * (c2 - c1),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _products(cells: list[str], out: Path) -> None:
    """The --products rows, each cell in its own subprocess, into the results' "products"."""
    rows = []
    for cell in progress(cells, "products"):
        E, H = (int(x) for x in cell.split("x"))
        spec = json.dumps({"E": E, "H": H, "products": True})
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", spec],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    old = json.loads(out.read_text()) if out.exists() else {"rows": []}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**old, "products": rows}, indent=1) + "\n")


def plot(data: dict[str, Any], path: Path) -> None:
    """Queries and peak RSS against E (seed-0 rows, rank given, one line per H): the learned
    cells' counts against the parameter count ``H (2rd - r^2 + d)`` and the follow-up's
    ``4Hd^2 - 2H + 1``; refused cells drawn hollow at their design's count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r for r in data["rows"] if r.get("seed") == 0 and r.get("rank") == "given"]
    for H in sorted({r["H"] for r in rows}):
        cells = sorted((r for r in rows if r["H"] == H), key=lambda r: r["E"])
        Es = [r["E"] for r in cells]
        line = ax1.plot(
            Es,
            [r.get("queries", r["formula"]) for r in cells],
            marker="o",
            label=f"H = {H}: queries (hollow: refused, design count)",
        )[0]
        for r in cells:
            if not r.get("learned"):
                ax1.scatter(
                    [r["E"]],
                    [r["formula"]],
                    s=90,
                    facecolors="white",
                    edgecolors=line.get_color(),
                    zorder=3,
                )
        ax1.plot(
            Es,
            [r["parameters_low_rank"] for r in cells],
            ls=":",
            color=line.get_color(),
            label=f"H = {H}: H(2rd - r^2 + d)",
        )
        ax1.plot(
            Es,
            [r["follow_up"] for r in cells],
            ls="--",
            color=line.get_color(),
            label=f"H = {H}: 4Hd^2 - 2H + 1",
        )
        ax2.plot(Es, [r["peak_rss_mib"] for r in cells], marker="o", label=f"H = {H}")
    ax1.set_ylabel("learning queries")
    ax2.set_ylabel("peak RSS (MiB, torch import included)")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("E (nn.MultiheadAttention float64, r = E / H)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", nargs="*", default=CELLS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rank", choices=["given", "find"], default="given")
    ap.add_argument("--child")
    ap.add_argument("--products", nargs="*", default=None, help="ExH cells: operator only")
    ap.add_argument("--profile", default=None, help="folder for each cell's cProfile stats")
    ap.add_argument("--out", type=Path, default=None, help="folder (default: results/)")
    ap.add_argument("--plot", action="store_true", help="only the plot, from the JSON")
    args = ap.parse_args()
    if args.plot:
        out = output_dir(args.out, False, "multi-head-low-rank")
        plot(json.loads((out / NAME).read_text()), out / "multi_head_low_rank.png")
        return
    if args.child:
        spec = json.loads(args.child)
        if spec.pop("products", False):
            print(json.dumps(products(**spec)))
        else:
            print(json.dumps(child(**spec)))
        return
    if args.products is not None:
        _products(args.products, output_dir(args.out, False, "multi-head-low-rank") / NAME)
        return
    rows = []
    for cell in progress(args.cells, "cells"):
        E, H = (int(x) for x in cell.split("x"))
        spec = {"E": E, "H": H, "seed": args.seed, "rank": args.rank}
        task = {**spec, "profile": args.profile}
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(task)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode:
            rows.append({**spec, "learned": False, "error": proc.stderr[-500:]})
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    out = output_dir(args.out, False, "multi-head-low-rank") / NAME
    old = json.loads(out.read_text()) if out.exists() else {"rows": []}
    keep = [
        r
        for r in old["rows"]
        if not any(
            (r["E"], r["H"], r.get("seed"), r.get("rank"))
            == (n["E"], n["H"], n.get("seed"), n.get("rank"))
            for n in rows
        )
    ]
    out.parent.mkdir(parents=True, exist_ok=True)  # a new --out folder
    out.write_text(json.dumps({**old, "rows": keep + rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

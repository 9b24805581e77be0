"""Benchmark of the float multi-head path (issue 12): success, errors and queries vs H and d.

Run ``python benchmarks/multi_head_float.py`` (full) or ``--quick`` (a few seeds, small
sizes). Writes ``benchmarks/results/multi_head_float.json``,
``multi_head_float_success.png``, ``multi_head_float_error.png``,
``multi_head_float_scale.png`` and ``multi_head_float_bits.png`` (parameter bits per cell
beside the anchors: ``multi_head_float_bits.py``). ``--precision-goal [BITS]`` adds the
``precision`` rows: per cell the fraction of seeds meeting a goal in parameter bits (the
issue's goals without BITS).

1. Random float64 boxes: W_h ~ N(0, 1/d), v_h ~ N(0, 1) (seed s: ``default_rng(s)``, heads
   drawn in order), ``learn_multi_head(Oracle(model, "float"), heads=H, seed=s)``.
2. ``torch.nn.MultiheadAttention(E, H)`` (default initialisation, biases N(0, 1), readout
   r ~ N(0, I)) read through ``attention_oracle`` in float64 and float32.

Per run: learned or the refusal's class and message; the parameter error (largest entry
error of the canonical heads against the truth, best head order, relative to the largest
true entry; with the two, ``parameter_abs_error`` and ``max_parameter_magnitude``); the
prediction error on 16 independent fresh sequences of lengths 1..16 (another generator
than the learner's, relative to max(|answer|, 1)); both in bits (``parameter_bits``,
``prediction_bits``: -log2 of the relative error), beside the bits the result states
(``reported_parameter_bits``, ``reported_prediction_bits``: ``rec.error_figures``); the
learning queries
against the follow-up's ``4Hd^2 - 2H + 1`` and the parameter count ``H (d^2 + d)``; the
pilot's u scale and discarded rounds; seconds; the peak resident memory (``peak_rss_mib``:
with ``--jobs`` >= 2 each run has a fresh worker process, so it is the run's own peak,
the box and the interpreter included; with ``--jobs 1`` the process's peak so far).

3. The conditioning sweep (no learning): the first-order parameter error of the pooled fit
   at the *true* heads, ``|U^-1| |M^-1| sqrt(sum_k (floor_k / sigma_min_k)^2)`` relative
   (floor_k: the u-group's float64 rounding, sigma_min_k: the smallest singular value of
   its Jacobian in (r, s)), against the u scale, with the scale the pilot picks.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import learner_progress, metadata, output_dir, progress, write_json
from multi_head_float_bits import (
    add_bits,
    add_precision_goal,
    bits_columns,
    goal_rows,
    plot_bits,
    precision_rows,
    reported_bits,
)

import verified_attn as va
from verified_attn.errors import VerifiedAttnError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_float import (
    float_design,
    float_query_limit,
    float_ratios,
)
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.precision import relative_parameter_error
from verified_attn.serialize import load_number


def random_box(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]


def parameter_error(got: list[Any], truth: list[Any]) -> dict[str, float]:
    """The metric of :mod:`verified_attn.precision` (largest entry error over the largest
    true entry, best head order) with the two figures it is the ratio of."""
    largest = max(float(np.abs(np.asarray(x)).max()) for h in truth for x in h)
    rel = relative_parameter_error(got, truth)
    return {
        "parameter_error": rel,
        "parameter_abs_error": rel * largest,
        "max_parameter_magnitude": largest,
    }


def prediction_error(predict: Any, answer: Any, d: int, seed: int) -> float:
    rng = np.random.default_rng(10_000 + seed)
    worst = 0.0
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, size=(n, d))
        a = float(answer(X))
        worst = max(worst, abs(float(predict(X)) - a) / max(abs(a), 1.0))
    return worst


def pilot_info(rec: Any, d: int, H: int) -> dict[str, Any]:
    """The pilot's kept u scale and discarded rounds (from the certificate and the counts),
    and the sequence polish's queries."""
    design = rec.certificate()["design"]
    rounds = rec.queries_by_phase["pilot"] // (d * len(design["ratios"]))  # a pair's queries
    scale = float(load_number(design["u_scale"]))
    return {
        "u_scale": scale,
        "pilot_rounds_discarded": rounds - 1,
        "polish": rec.queries_by_phase.get("polish", 0),
    }


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_random(d: int, H: int, seed: int) -> dict[str, Any]:
    heads = random_box(d, H, seed)
    model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])
    row: dict[str, Any] = {"kind": "random", "d": d, "H": H, "seed": seed, "dtype": "float64"}
    t0 = time.perf_counter()
    try:
        oracle = va.Oracle(model, "float")
        rec = learn_multi_head(oracle, heads=H, seed=seed, progress=learner_progress())
    except VerifiedAttnError as exc:
        row.update(learned=False, refusal=type(exc).__name__, message=str(exc)[:300])
    else:
        learned = rec.model

        def predict(X: np.ndarray) -> float:
            return float(learned.evaluate_batch(X[None])[0])

        def answer(X: np.ndarray) -> float:
            return float(model.evaluate_batch(X[None])[0])

        row.update(
            learned=True,
            queries=rec.queries,
            **pilot_info(rec, d, H),
            rtol=rec.verification.rtol,
            parameter_rtol=rec.parameter_rtol,
            **parameter_error(rec.parameters["heads"], heads),
            prediction_error=prediction_error(predict, answer, d, seed),
            **reported_bits(rec),
        )
    add_bits(row)
    row["seconds"] = time.perf_counter() - t0
    row["follow_up"] = follow_up_query_bound(d, H)
    row["bound"] = float_query_limit(d, H)
    row["parameters"] = H * (d * d + d)
    row["peak_rss_mib"] = peak_rss_mib()
    return row


def torch_box(E: int, H: int, seed: int) -> tuple[Any, np.ndarray]:
    """``nn.MultiheadAttention(E, H)``, default initialisation, biases N(0, 1); readout r."""
    import torch

    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha, np.random.default_rng(seed + 100).standard_normal(E)


def run_torch(E: int, H: int, seed: int, dtype: str) -> dict[str, Any]:
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    mha, r = torch_box(E, H, seed)
    row: dict[str, Any] = {"kind": "torch", "d": E, "H": H, "seed": seed, "dtype": dtype}
    t0 = time.perf_counter()
    try:
        box = attention_oracle(mha, r, dtype=dtype)
        rec = learn_multi_head(box, heads=H, seed=seed, progress=learner_progress())
    except VerifiedAttnError as exc:
        row.update(learned=False, refusal=type(exc).__name__, message=str(exc)[:300])
    else:
        truth = attention_parameters(mha, r)
        got = [(W, v) for W, v, _ in rec.parameters["heads"]]
        ref = attention_oracle(mha, r, dtype="float64")
        learned = rec.model

        def predict(X: np.ndarray) -> float:
            return float(learned.evaluate_batch(X[None])[0])

        row.update(
            learned=True,
            queries=rec.queries,
            **pilot_info(rec, E, H),
            rtol=box.arithmetic.rtol,
            parameter_rtol=rec.parameter_rtol,
            **parameter_error(got, list(zip(truth.W, truth.v, strict=True))),
            prediction_error=prediction_error(predict, ref.query, E, seed),
            **reported_bits(rec),
        )
    add_bits(row)
    row["seconds"] = time.perf_counter() - t0
    row["follow_up"] = follow_up_query_bound(E, H)
    unit = 2.0**-24 if dtype == "float32" else 2.0**-53  # the adapter's declared unit roundoff
    row["bound"] = float_query_limit(E, H, affine=True, unit=unit)
    row["parameters"] = H * (E * E + 2 * E) + 1
    row["peak_rss_mib"] = peak_rss_mib()
    return row


def true_heads(
    kind: str, d: int, H: int, seed: int
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, float]:
    """(oracle, W (H, d, d), c (H, d), v (H, d), beta) of a benchmark box, float64."""
    if kind == "random":
        heads = random_box(d, H, seed)
        model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])
        W = np.array([h[0] for h in heads])
        return va.Oracle(model, "float"), W, np.zeros((H, d)), np.array([h[1] for h in heads]), 0.0
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    mha, r = torch_box(d, H, seed)
    p = attention_parameters(mha, r)
    return attention_oracle(mha, r, dtype="float64"), p.W, p.c, p.v, p.beta


def conditioning(kind: str, d: int, H: int, seed: int, scales: list[float]) -> dict[str, Any]:
    """The pooled fit's first-order parameter error at the true heads vs the u scale, and
    the scale the pilot picks (its own queries on the box)."""
    from verified_attn.multi_head import canonical_float as cf

    oracle, W, c, v, beta = true_heads(kind, d, H, seed)
    affine = kind != "random"
    ratios = float_ratios(H)
    lt = np.log([k / m for k, m in ratios])
    unit = 2.0**-53
    heads = [(W[h], v[h], c[h]) if affine else (W[h], v[h]) for h in range(H)]
    extra = cf.extra_columns(d, H, affine)
    t = np.array([k / m for k, m in ratios])
    errors = []
    for a in scales:
        # The learner's own figure (heads_error_estimate) on the design's exact answers at
        # the true heads: no residual, only the rounding floor.
        U, B, _ = float_design(d, seed, affine, a, extra)
        S = np.einsum("ki,hij,nj->knh", U, W, B) + (U @ c.T)[:, None, :]  # (d, ncols, H)
        F0 = B @ v.sum(axis=0) + beta
        sig = 0.5 * (1.0 + np.tanh(0.5 * (S[:, :, None, :] + lt[None, None, :, None])))
        F = F0[None, :, None] + np.einsum("kjth,kh->kjt", sig, U @ v.T)
        ans = F.reshape(-1, len(lt))
        errors.append(cf.heads_error_estimate(U, B, F0, ans, t, heads, beta, unit, affine))
    with oracle.phase("F(0)"):
        _, B, _ = float_design(d, seed, affine, extra=extra)
        f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
    picked, _, _ = cf._pilot(oracle, f0, ratios, H, seed, affine)
    return {
        "kind": kind,
        "d": d,
        "H": H,
        "seed": seed,
        "scales": scales,
        "estimate": errors,
        "pilot_scale": picked,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["kind"], r["dtype"], r["d"], r["H"]) for r in rows})
    for kind, dtype, d, H in keys:
        group = [r for r in rows if (r["kind"], r["dtype"], r["d"], r["H"]) == (kind, dtype, d, H)]
        ok = [r for r in group if r["learned"]]
        out.append(
            {
                "kind": kind,
                "dtype": dtype,
                "d": d,
                "H": H,
                "runs": len(group),
                "learned": len(ok),
                "learned_1e-10": sum(r["parameter_error"] <= 1e-10 for r in ok),
                "learned_1e-12": sum(r["parameter_error"] <= 1e-12 for r in ok),
                # Learned runs that asked the sequence polish (float32: all; float64: the
                # precision polish where the decoded estimate was above its target).
                "polished": sum(r.get("polish", 0) > 0 for r in ok),
                # A returned result off by more than a tolerance it states (must be 0): its
                # parameters against its parameter tolerance, its predictions against rtol.
                "wrong": sum(
                    r["parameter_error"] > r["parameter_rtol"] or r["prediction_error"] > r["rtol"]
                    for r in ok
                ),
                "max_parameter_error": max((r["parameter_error"] for r in ok), default=None),
                "max_prediction_error": max((r["prediction_error"] for r in ok), default=None),
                **bits_columns(group),
                "queries": ok[0]["queries"] if ok else None,
                "max_queries": max((r["queries"] for r in ok), default=None),
                # Learned runs whose conditioning rounds took them to the follow-up's count.
                "over_follow_up": sum(r["queries"] >= r["follow_up"] for r in ok),
                "bound": group[0]["bound"],
                "u_scales": sorted({round(r["u_scale"], 4) for r in ok}),
                "follow_up": group[0]["follow_up"],
                "parameters": group[0]["parameters"],
                "refusals": sorted({r["refusal"] for r in group if not r["learned"]}),
                "median_seconds": float(np.median([r["seconds"] for r in group])),
                # Rows of runs before it was measured have no figure.
                "max_peak_rss_mib": max(
                    (r["peak_rss_mib"] for r in group if "peak_rss_mib" in r), default=None
                ),
            }
        )
    return out


def plot(summary: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for kind, dtype, d in sorted({(s["kind"], s["dtype"], s["d"]) for s in summary}):
        rows = [s for s in summary if (s["kind"], s["dtype"], s["d"]) == (kind, dtype, d)]
        Hs = [s["H"] for s in rows]
        rate = [s["learned"] / s["runs"] for s in rows]
        ax.plot(Hs, rate, marker="o", label=f"{kind} {dtype} d={d}")
    ax.set_xlabel("heads H")
    ax.set_ylabel("learned (fraction of seeds)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    ax.set_title("float multi-head: success rate (returned results all within rtol)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "multi_head_float_success.png", dpi=120)
    plt.close(fig)
    # The worst parameter error of the returned results, against the 1e-10 goal.
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for kind, dtype, d in sorted({(s["kind"], s["dtype"], s["d"]) for s in summary}):
        rows = [
            s
            for s in summary
            if (s["kind"], s["dtype"], s["d"]) == (kind, dtype, d) and s["max_parameter_error"]
        ]
        if rows:
            Hs = [s["H"] for s in rows]
            ax.semilogy(
                Hs,
                [s["max_parameter_error"] for s in rows],
                marker="o",
                label=f"{kind} {dtype} d={d}",
            )
    ax.axhline(1e-10, color="grey", ls="--", lw=0.8)
    ax.axhline(1e-12, color="grey", ls=":", lw=0.8)  # canonical_float.PRECISION_TARGET
    labels = ("heads H", "worst relative parameter error")
    title = "float multi-head: parameter error of returned results"
    _finish(fig, ax, labels, title, out / "multi_head_float_error.png", 7)


def _finish(fig: Any, ax: Any, labels: tuple[str, str], title: str, path: Path, size: int) -> None:
    """Axis labels, legend and title; save and close."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.legend(fontsize=size)
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_conditioning(sweep: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for c in sweep:
        label = (
            f"{'nn.MHA' if c['kind'] == 'torch' else 'random'} d={c['d']} H={c['H']} s={c['seed']}"
        )
        (line,) = ax.loglog(c["scales"], c["estimate"], label=label, lw=1)
        at = int(np.argmin(np.abs(np.log(np.array(c["scales"]) / c["pilot_scale"]))))
        ax.plot(c["scales"][at], c["estimate"][at], "o", color=line.get_color())
    ax.axhline(1e-6, color="grey", ls="--", lw=0.8)
    labels = ("u scale (1 = the fixed design)", "first-order parameter error at the truth")
    title = "float multi-head: conditioning vs u scale (dots: the pilot's pick)"
    _finish(fig, ax, labels, title, out / "multi_head_float_scale.png", 6)


FAMILIES = ("random", "torch64", "torch32", "sweep")


def _call(task: tuple[Any, ...]) -> Any:
    """Run one benchmark task ``(function, *args)``."""
    return task[0](*task[1:])


class _Serial:
    """The ``--jobs 1`` stand-in for a process pool: ``map`` in this process, in order."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Any, items: list[Any]) -> Any:
        return map(fn, items)


def _pool(jobs: int) -> Any:
    """Worker processes for the runs; results come back in task order either way."""
    if jobs <= 1:
        return _Serial()
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    # Fresh (spawned) single-threaded workers: jobs processes each with its own BLAS and
    # torch thread pools would compete for the same cores and distort the seconds.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    ctx = multiprocessing.get_context("spawn")
    # One run per worker process: its peak RSS (peak_rss_mib) is then the run's own.
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, max_tasks_per_child=1)


def _family(row: dict[str, Any]) -> str:
    """The cell family (``--cells``) a run row belongs to."""
    if row["kind"] == "random":
        return "random"
    return "torch32" if row["dtype"] == "float32" else "torch64"


def _random_cells(option: str | None) -> set[tuple[int, int]] | None:
    """``--random-cells 8x6,8x7``: the (d, H) of the random cells to run (None: all)."""
    if option is None:
        return None
    return {(int(d), int(H)) for d, H in (c.split("x") for c in option.split(","))}


def _rerun(row: dict[str, Any], families: set[str], only: set[tuple[int, int]] | None) -> bool:
    """Whether this run's row is replaced by the run (its family is run, and for a random
    row its cell is one of ``--random-cells``)."""
    if _family(row) not in families:
        return False
    return only is None or row["kind"] != "random" or (row["d"], row["H"]) in only


def _kept_records(old: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """What a ``--keep-other-cells`` run carries over from the JSON it rewrites besides the
    rows: the records of earlier runs (``float32_before``) and the note on how the kept
    rows were run.

    >>> _kept_records({"meta": {"settings": {"note": "n"}}, "float32_before": [1], "runs": []})
    ({'float32_before': [1]}, 'n')
    """
    kept = {k: old[k] for k in ("float32_before",) if k in old}
    return kept, old.get("meta", {}).get("settings", {}).get("note")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..n-1 per size at d = 8")
    p.add_argument(
        "--seeds-many", type=int, default=None, help="seeds at d = 8, H >= 7 (default --seeds)"
    )
    p.add_argument("--seeds-large", type=int, default=4, help="seeds at d = 16 and modules")
    p.add_argument("--seeds-huge", type=int, default=2, help="seeds at d >= 32")
    p.add_argument("--max-d", type=int, default=64, help="skip the cells with a larger d")
    p.add_argument("--plot-only", action="store_true", help="redraw the plots from the JSON")
    p.add_argument(
        "--jobs", type=int, default=1, help="worker processes for the runs (each single-threaded)"
    )
    p.add_argument(
        "--cells",
        default=",".join(FAMILIES),
        help=f"comma-separated cell families to run, of {', '.join(FAMILIES)}",
    )
    p.add_argument(
        "--keep-other-cells",
        action="store_true",
        help="keep the rows (and sweep) of the families not run from the existing JSON",
    )
    p.add_argument(
        "--random-cells",
        default=None,
        metavar="DxH,...",
        help="run only these random cells (e.g. 8x6,8x7,8x8); with --keep-other-cells the "
        "other random cells' rows stay",
    )
    add_precision_goal(p)
    args = p.parse_args()
    families = set(args.cells.split(","))
    if not families <= set(FAMILIES):
        p.error(f"--cells: unknown families {sorted(families - set(FAMILIES))}")
    out = output_dir(args.out, args.quick, "multi_head_float")
    if args.plot_only:
        import json

        data = json.loads((out / "multi_head_float.json").read_text())
        plot(data["summary"], out)
        plot_conditioning(data["conditioning"], out)
        plot_bits(precision_rows(data["runs"]), out / "multi_head_float_bits.png")
        return
    seeds = range(3) if args.quick else range(args.seeds)
    few = range(3) if args.quick else range(args.seeds_large)
    huge = range(1) if args.quick else range(args.seeds_huge)
    many = seeds if args.quick or args.seeds_many is None else range(args.seeds_many)
    rows = []
    random_sizes = [(8, H, seeds if H <= 6 else many) for H in range(1, 9)]
    random_sizes += [(16, H, few) for H in (2, 4, 6, 8)]
    random_sizes += [(32, H, huge) for H in (2, 4, 6, 8)]
    # nn.MultiheadAttention: E/H from 2 to 16 (E = 16: H = 2, 4, 8; E = 32, H = 8: 4;
    # E = 64, H = 4: 16).
    torch_sizes = [(8, 2, few), (8, 4, few), (16, 2, few), (16, 4, few), (16, 8, huge)]
    torch_sizes += [(32, 4, huge), (32, 8, huge), (64, 4, huge)]
    # E = 12 for three heads (nn.MultiheadAttention needs H | E).
    torch32_sizes = [(8, 2, few), (8, 4, few), (12, 3, few), (16, 2, few), (16, 4, few)]
    sweep_boxes = [("random", 8, 4, 0), ("random", 8, 6, 0)]
    sweep_boxes += [("torch", 16, 4, s) for s in range(3)] + [("torch", 16, 8, 0)]
    scales = [2.0 ** (i / 4) for i in range(-8, 21)]
    if args.quick:
        random_sizes = [(4, 2, seeds), (8, 3, seeds)]
        torch_sizes = torch32_sizes = [(4, 2, few)]
        sweep_boxes = [("random", 4, 2, 0), ("torch", 8, 2, 0)]
        scales = [2.0 ** (i / 2) for i in range(-2, 9)]
    random_sizes = [c for c in random_sizes if c[0] <= args.max_d]
    only = _random_cells(args.random_cells)
    if only is not None:
        random_sizes = [c for c in random_sizes if (c[0], c[1]) in only]
    torch_sizes = [c for c in torch_sizes if c[0] <= args.max_d]
    started = time.perf_counter()
    tasks: list[tuple[Any, ...]] = []
    if "random" in families:
        tasks += [(run_random, d, H, s) for d, H, ss in random_sizes for s in ss]
    if "torch64" in families:
        tasks += [(run_torch, E, H, s, "float64") for E, H, ss in torch_sizes for s in ss]
    if "torch32" in families:
        tasks += [(run_torch, E, H, s, "float32") for E, H, ss in torch32_sizes for s in ss]
    if "sweep" not in families:
        sweep_boxes = []
    sweep_tasks = [(conditioning, kind, d, H, s, scales) for kind, d, H, s in sweep_boxes]
    # The costliest runs first (about d^2 H^2 each), so that the workers finish together;
    # the rows are put back in the cells' order.
    order = sorted(range(len(tasks)), key=lambda i: -(tasks[i][1] ** 2) * tasks[i][2] ** 2)
    with _pool(args.jobs) as pool:
        sweep = list(progress(pool.map(_call, sweep_tasks), "sweep", total=len(sweep_tasks)))
        done = {}
        rows_done = progress(pool.map(_call, [tasks[i] for i in order]), "cells", total=len(order))
        for i, row in zip(order, rows_done, strict=True):
            done[i] = row
            print(
                {k: row.get(k) for k in ("kind", "dtype", "d", "H", "seed", "learned", "seconds")},
                flush=True,
            )
        rows += [done[i] for i in range(len(tasks))]
    other_cells_from = None
    kept: dict[str, Any] = {}
    kept_note: str | None = None
    if args.keep_other_cells:
        # A run of some families only (e.g. --cells torch32 after a change to the float32
        # path): the other families' rows and the sweep come from the last full run.
        import json

        old = json.loads((out / "multi_head_float.json").read_text())
        rows = [r for r in old["runs"] if not _rerun(r, families, only)] + rows
        other_cells_from = old["meta"].get("date")
        kept, kept_note = _kept_records(old)
        if "sweep" not in families:
            sweep = old["conditioning"]
    summary = summarise(rows)
    for s in summary:
        print(s)
    precision = goal_rows(args.precision_goal, rows)
    write_json(
        "multi_head_float",
        {
            "meta": metadata(
                0,
                quick=args.quick,
                seeds=len(seeds),
                seeds_large=len(few),
                seeds_huge=len(huge),
                seeds_many=len(many),
                jobs=args.jobs,
                cells=sorted(families),
                other_cells_from=other_cells_from,
                **({"note": kept_note} if kept_note else {}),
                total_seconds=time.perf_counter() - started,
            ),
            "summary": summary,
            **({"precision": precision} if precision is not None else {}),
            **kept,
            "conditioning": sweep,
            "runs": rows,
        },
        out,
    )
    plot(summary, out)
    plot_conditioning(sweep, out)
    plot_bits(precision or precision_rows(rows), out / "multi_head_float_bits.png")


if __name__ == "__main__":
    main()

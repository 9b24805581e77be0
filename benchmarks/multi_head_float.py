"""Benchmark of the float multi-head path (issue 12): success, errors and queries vs H and d.

Run ``python benchmarks/multi_head_float.py`` (full) or ``--quick`` (a few seeds, small
sizes). Writes ``benchmarks/results/multi_head_float.json`` and
``multi_head_float_success.png``.

1. Random float64 boxes: W_h ~ N(0, 1/d), v_h ~ N(0, 1) (seed s: ``default_rng(s)``, heads
   drawn in order), ``learn_multi_head(Oracle(model, "float"), heads=H, seed=s)``.
2. ``torch.nn.MultiheadAttention(E, H)`` (default initialisation, biases N(0, 1), readout
   r ~ N(0, I)) read through ``attention_oracle`` in float64 and float32.

Per run: learned or the refusal's class and message; the parameter error (largest entry
error of the canonical heads against the truth, best head order, relative to the largest
true entry); the prediction error on 16 independent fresh sequences of lengths 1..16
(another generator than the learner's, relative to max(|answer|, 1)); the learning queries
against the follow-up's ``4Hd^2 - 2H + 1`` and the parameter count ``H (d^2 + d)``; seconds.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, write_json

import verified_attn as va
from verified_attn.errors import VerifiedAttnError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head


def random_box(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]


def parameter_error(got: list[Any], truth: list[Any]) -> float:
    g = [np.concatenate([np.ravel(x) for x in h]) for h in got]
    t = [np.concatenate([np.ravel(x) for x in h]) for h in truth]
    ref = max(float(np.abs(x).max()) for x in t)
    return (
        min(
            max(float(np.abs(g[p[h]] - t[h]).max()) for h in range(len(t)))
            for p in itertools.permutations(range(len(t)))
        )
        / ref
    )


def prediction_error(predict: Any, answer: Any, d: int, seed: int) -> float:
    rng = np.random.default_rng(10_000 + seed)
    worst = 0.0
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, size=(n, d))
        a = float(answer(X))
        worst = max(worst, abs(float(predict(X)) - a) / max(abs(a), 1.0))
    return worst


def run_random(d: int, H: int, seed: int) -> dict[str, Any]:
    heads = random_box(d, H, seed)
    model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])
    row: dict[str, Any] = {"kind": "random", "d": d, "H": H, "seed": seed, "dtype": "float64"}
    t0 = time.perf_counter()
    try:
        rec = learn_multi_head(va.Oracle(model, "float"), heads=H, seed=seed)
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
            rtol=1e-6,
            parameter_error=parameter_error(rec.parameters["heads"], heads),
            prediction_error=prediction_error(predict, answer, d, seed),
        )
    row["seconds"] = time.perf_counter() - t0
    row["follow_up"] = follow_up_query_bound(d, H)
    row["parameters"] = H * (d * d + d)
    return row


def run_torch(E: int, H: int, seed: int, dtype: str) -> dict[str, Any]:
    import torch

    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    r = np.random.default_rng(seed + 100).standard_normal(E)
    row: dict[str, Any] = {"kind": "torch", "d": E, "H": H, "seed": seed, "dtype": dtype}
    t0 = time.perf_counter()
    try:
        box = attention_oracle(mha, r, dtype=dtype)
        rec = learn_multi_head(box, heads=H, seed=seed)
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
            rtol=box.arithmetic.rtol,
            parameter_error=parameter_error(got, list(zip(truth.W, truth.v, strict=True))),
            prediction_error=prediction_error(predict, ref.query, E, seed),
        )
    row["seconds"] = time.perf_counter() - t0
    row["follow_up"] = follow_up_query_bound(E, H)
    row["parameters"] = H * (E * E + 2 * E) + 1
    return row


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
                # A returned result off by more than the tolerance it states (must be 0).
                "wrong": sum(
                    r["parameter_error"] > r["rtol"] or r["prediction_error"] > r["rtol"]
                    for r in ok
                ),
                "max_parameter_error": max((r["parameter_error"] for r in ok), default=None),
                "max_prediction_error": max((r["prediction_error"] for r in ok), default=None),
                "queries": ok[0]["queries"] if ok else None,
                "follow_up": group[0]["follow_up"],
                "parameters": group[0]["parameters"],
                "refusals": sorted({r["refusal"] for r in group if not r["learned"]}),
                "median_seconds": float(np.median([r["seconds"] for r in group])),
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
    ax.set_xlabel("heads H")
    ax.set_ylabel("worst relative parameter error")
    ax.legend(fontsize=7)
    ax.set_title("float multi-head: parameter error of returned results")
    fig.tight_layout()
    fig.savefig(out / "multi_head_float_error.png", dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..n-1 per size at d = 8")
    p.add_argument("--seeds-large", type=int, default=4, help="seeds at d >= 16 and modules")
    p.add_argument("--plot-only", action="store_true", help="redraw the plots from the JSON")
    args = p.parse_args()
    out = output_dir(args.out, args.quick, "multi_head_float")
    if args.plot_only:
        import json

        plot(json.loads((out / "multi_head_float.json").read_text())["summary"], out)
        return
    seeds = range(3) if args.quick else range(args.seeds)
    few = range(3) if args.quick else range(args.seeds_large)
    rows = []
    random_sizes = [(8, H, seeds) for H in range(1, 9)] + [(16, H, few) for H in (2, 4, 6)]
    torch_sizes = [(8, 2), (8, 4), (16, 2), (16, 4), (16, 8)]
    torch32_sizes = [(8, 2), (8, 4), (16, 4)]
    if args.quick:
        random_sizes = [(4, 2, seeds), (8, 3, seeds)]
        torch_sizes = torch32_sizes = [(4, 2)]
    for d, H, ss in random_sizes:
        rows += [run_random(d, H, s) for s in ss]
        print(summarise([r for r in rows if (r["d"], r["H"]) == (d, H)]), flush=True)
    for E, H in torch_sizes:
        rows += [run_torch(E, H, s, "float64") for s in few]
    for E, H in torch32_sizes:
        rows += [run_torch(E, H, s, "float32") for s in few]
    summary = summarise(rows)
    for s in summary:
        print(s)
    write_json(
        "multi_head_float",
        {
            "meta": metadata(0, quick=args.quick, seeds=len(seeds), seeds_large=len(few)),
            "summary": summary,
            "runs": rows,
        },
        out,
    )
    plot(summary, out)


if __name__ == "__main__":
    main()

"""Exact extraction vs distillation: queries and time to learn a PyTorch attention head.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> data = main(["--quick", "--out", str(out), "--no-plots"])
>>> [(r["d"], r["ours"]["queries"]) for r in data["rows"]]        # d^2 + 2d + 1
[(4, 25)]
>>> (out / "vs_distillation.json").exists()
True

The black box is a ``torch.nn.MultiheadAttention(d, 1, batch_first=True)`` (PyTorch's
default initialisation, biases drawn N(0, 1) because PyTorch starts them at 0) read out at
the last position by an ``nn.Linear(d, 1)``, evaluated in float64 through
:func:`verified_attn.adapters.torch.attention_oracle`; every query of both methods is
counted on an :class:`~verified_attn.Oracle` object.

- **ours**: :func:`verified_attn.learn_single_head` (d^2 + 2d + 1 learning queries, plus 8
  fresh verification queries, reported apart). The float32 box is also learned and its
  errors recorded.
- **distillation** (what a practitioner would otherwise do): a student
  ``nn.MultiheadAttention(d, 1)`` + ``nn.Linear(d, 1)`` in float64 trained by Adam on
  fresh random queries (x ~ N(0, I), lengths cycling 1..8), mean squared error on the
  teacher's answers. Caps: at most ``STEPS`` steps of batch ``BATCH`` (``STEPS * BATCH``
  queries), learning rate ``LR0`` decaying exponentially to ``LR1`` over the cap; the run
  stops early once the finest target is reached.

Relative function error = RMS(model - box) / RMS(box) over a fixed held-out set of 2048
sequences (256 of each length 1..8, x ~ N(0, I)); those evaluation queries are not charged
to either method. Times: training wall time without the evaluations (student),
oracle construction + learning + verification (ours). Run from the repository root::

    /tmp/venv/bin/python benchmarks/vs_distillation.py          # full size, ~5-8 min
    /tmp/venv/bin/python benchmarks/vs_distillation.py --quick  # seconds
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, metadata, output_dir, plot_path, progress

import verified_attn as va

NAME = "vs_distillation"
TARGETS = (1e-2, 1e-4, 1e-6)
BATCH = 256
LR0, LR1 = 3e-2, 1e-5
EVAL_EVERY = 100
MAX_LEN = 8
EVAL_PER_LENGTH = 256
THREADS = 1  # one thread per run: faster than 2 on a shared 2-core machine (measured)
FULL = {"dims": [8, 16, 32], "steps": 6000}
QUICK = {"dims": [4], "steps": 200}


def _teacher(d: int, seed: int) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(seed * 1000 + d)
    mha = torch.nn.MultiheadAttention(d, 1, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha, torch.nn.Linear(d, 1)


def _eval_set(d: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, d, 1])
    return [rng.standard_normal((EVAL_PER_LENGTH, n, d)) for n in range(1, MAX_LEN + 1)]


def _function_error(predict: Any, truth: list[np.ndarray], xs: list[np.ndarray]) -> float:
    num = sum(float(((predict(x) - y) ** 2).sum()) for x, y in zip(xs, truth, strict=True))
    den = sum(float((y**2).sum()) for y in truth)
    return math.sqrt(num / den)


def _rel(a: Any, b: Any, ref: float) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b))) / ref)


def _param_errors(rec: va.Recovery, truth: Any) -> dict[str, float]:
    w_ref = float(np.abs(truth.W[0]).max())
    v_ref = float(np.abs(truth.v[0]).max())
    return {
        "W": _rel(rec.W, truth.W[0], w_ref),
        "c": _rel(rec.c, truth.c[0], max(float(np.abs(truth.c[0]).max()), w_ref)),
        "v": _rel(rec.v, truth.v[0], v_ref),
        "beta": _rel(rec.beta, truth.beta, max(abs(truth.beta), v_ref)),
    }


def _ours(d: int, seed: int, xs: list[np.ndarray], ys: list[np.ndarray]) -> dict[str, Any]:
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    mha, readout = _teacher(d, seed)
    truth = attention_parameters(mha, readout)
    t0 = time.perf_counter()
    oracle = attention_oracle(mha, readout, dtype="float64", record=False)
    rec = va.learn_single_head(oracle, seed=seed)
    wall = time.perf_counter() - t0
    model = rec.model
    out: dict[str, Any] = {
        "queries": rec.queries,
        "oracle_queries_total": oracle.queries,
        "verification_queries": rec.verification_queries,
        "bound_d2_2d_1": d * d + 2 * d + 1,
        "wall_s": wall,
        "verified": rec.verified,
        "verification_error": rec.verification_error,
        "function_error": _function_error(model.evaluate_batch, ys, xs),
        "param_errors": _param_errors(rec, truth),
    }
    out["float32"] = _ours_float32(d, seed, truth, xs, ys)
    return out


def _ours_float32(
    d: int, seed: int, truth: Any, xs: list[np.ndarray], ys: list[np.ndarray]
) -> dict[str, Any]:
    """The float32 box: the verification outcome, then the unverified errors (verify=0)."""
    from verified_attn.adapters.torch import attention_oracle

    mha, readout = _teacher(d, seed)
    res: dict[str, Any] = {}
    try:
        rec = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), seed=seed)
        res["verification"] = "passed"
        res["verification_error"] = rec.verification_error
    except va.ModelClassMismatch as exc:
        res["verification"] = "rejected (ModelClassMismatch)"
        res["rejected_observed"] = float(exc.observed)
        res["rejected_expected"] = float(exc.expected)
        res["rejected_abs_discrepancy"] = abs(float(exc.observed) - float(exc.expected))
    except va.PrecisionExhausted as exc:
        res["verification"] = "refused (PrecisionExhausted)"
        res["refused"] = str(exc)
    # Box noise: how far the float32 answers are from the float64 truth (relative RMS).
    box32 = attention_oracle(mha, readout, dtype="float32", record=False)
    res["box_function_error"] = _function_error(lambda x: np.asarray(box32.query_many(x)), ys, xs)
    rec = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), verify=0)
    res["unverified_queries"] = rec.queries
    res["unverified_queries_by_phase"] = rec.queries_by_phase
    res["unverified_param_errors"] = _param_errors(rec, truth)
    res["unverified_function_error"] = _function_error(rec.model.evaluate_batch, ys, xs)
    return res


def _student(
    d: int, seed: int, steps: int, xs: list[np.ndarray], ys: list[np.ndarray]
) -> dict[str, Any]:
    import torch

    from verified_attn.adapters.torch import attention_oracle

    mha, readout = _teacher(d, seed)
    oracle = attention_oracle(mha, readout, dtype="float64", record=False)
    torch.manual_seed(seed * 1000 + d + 500)
    student = torch.nn.MultiheadAttention(d, 1, batch_first=True, dtype=torch.float64)
    head = torch.nn.Linear(d, 1, dtype=torch.float64)
    params = list(student.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=LR0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: (LR1 / LR0) ** (k / steps))
    rng = np.random.default_rng([seed, d, 2])

    def predict(x: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(x)
        with torch.no_grad():
            return head(student(t, t, t, need_weights=False)[0][:, -1]).squeeze(-1).numpy()

    reached: dict[str, Any] = {f"{t:.0e}": None for t in TARGETS}
    curve = [[0, _function_error(predict, ys, xs)]]
    train_s = 0.0
    step = 0
    for step in progress(range(1, steps + 1), f"student d = {d}", total=steps, unit="step"):
        t0 = time.perf_counter()
        x_np = rng.standard_normal((BATCH, 1 + (step - 1) % MAX_LEN, d))
        y = torch.tensor(oracle.query_many(x_np), dtype=torch.float64)
        x = torch.from_numpy(x_np)
        pred = head(student(x, x, x, need_weights=False)[0][:, -1]).squeeze(-1)
        loss = ((pred - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        train_s += time.perf_counter() - t0
        if step % EVAL_EVERY == 0 or step == steps:
            err = _function_error(predict, ys, xs)
            curve.append([oracle.queries, err])
            for t in TARGETS:
                key = f"{t:.0e}"
                if reached[key] is None and err <= t:
                    reached[key] = {"queries": oracle.queries, "steps": step, "wall_s": train_s}
            if reached[f"{TARGETS[-1]:.0e}"] is not None:
                break
    return {
        "reached": reached,
        "final_error": curve[-1][1],
        "steps_run": step,
        "queries_total": oracle.queries,
        "train_wall_s": train_s,
        "curve": curve,
    }


def _table(rows: list[dict[str, Any]], steps: int) -> str:
    cap = steps * BATCH
    lines = [
        "| d | method | queries to 1e-2 | 1e-4 | 1e-6 | time to 1e-2 (s) | 1e-4 | 1e-6 | "
        "final rel. function error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        o = r["ours"]
        q = f"{o['queries']} (+{o['verification_queries']} verify)"
        t = f"{o['wall_s']:.2f}"
        lines.append(
            f"| {r['d']} | ours (float64) | {q} | {q} | {q} | {t} | {t} | {t} | "
            f"{o['function_error']:.1e} |"
        )
        s = r["student"]
        qs, ts = [], []
        for key in (f"{t:.0e}" for t in TARGETS):
            hit = s["reached"][key]
            qs.append(f"{hit['queries']:,}" if hit else f"not within {cap:,}")
            ts.append(f"{hit['wall_s']:.1f}" if hit else f"> {s['train_wall_s']:.0f}")
        lines.append(
            f"| {r['d']} | Adam distillation | {' | '.join(qs)} | {' | '.join(ts)} | "
            f"{s['final_error']:.1e} |"
        )
    return "\n".join(lines)


def _plots(rows: list[dict[str, Any]], steps: int, out: Path) -> list[str]:
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    cap = steps * BATCH
    dims = [r["d"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_q, ax_t = axes
    ax_q.plot(dims, [r["ours"]["queries"] for r in rows], "ko-", label="ours: d²+2d+1 (any target)")
    ax_t.plot(dims, [r["ours"]["wall_s"] for r in rows], "ko-", label="ours")
    for t, marker in zip(TARGETS, ("s", "^", "D"), strict=True):
        key = f"{t:.0e}"
        hits = [r["student"]["reached"][key] for r in rows]
        qd = [(d, h["queries"]) for d, h in zip(dims, hits, strict=True) if h]
        td = [(d, h["wall_s"]) for d, h in zip(dims, hits, strict=True) if h]
        miss = [d for d, h in zip(dims, hits, strict=True) if not h]
        if qd:
            ax_q.plot(*zip(*qd, strict=True), marker=marker, ls="--", label=f"Adam to {key}")
            ax_t.plot(*zip(*td, strict=True), marker=marker, ls="--", label=f"Adam to {key}")
        if miss:
            ax_q.plot(
                miss,
                [cap] * len(miss),
                marker=marker,
                ls="none",
                mfc="none",
                color="r",
                label=f"Adam: {key} not reached (cap)",
            )
    ax_q.set(
        xscale="log",
        yscale="log",
        xlabel="d",
        ylabel="queries",
        title="queries to reach a relative function error",
    )
    ax_t.set(xscale="log", yscale="log", xlabel="d", ylabel="seconds", title="wall time (1 thread)")
    for ax in axes:
        ax.set_xticks(dims, [str(d) for d in dims])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out1 = plot_path(NAME) if out == RESULTS else out / f"{NAME}.png"
    fig.savefig(out1, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in rows:
        c = np.array(r["student"]["curve"][1:])  # evaluations after training steps
        line = ax.plot(c[:, 0], c[:, 1], ".-", ms=3, label=f"Adam, d={r['d']}")[0]
        ax.plot(
            [r["ours"]["queries"]],
            [max(r["ours"]["function_error"], 1e-17)],
            "*",
            ms=12,
            color=line.get_color(),
            label=f"ours, d={r['d']}",
        )
    for t in TARGETS:
        ax.axhline(t, color="grey", lw=0.6, ls=":")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="queries",
        ylabel="relative function error",
        title="distillation learning curves vs exact extraction (float64)",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    out2 = plot_path(f"{NAME}_curves") if out == RESULTS else out / f"{NAME}_curves.png"
    fig.savefig(out2, dpi=110)
    plt.close(fig)
    return [str(out1), str(out2)]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--replot", action="store_true", help="redraw the PNGs from <out>/vs_distillation.json"
    )
    args = parser.parse_args(argv)
    args.out = output_dir(args.out, args.quick and not args.replot, NAME)
    if args.replot:
        data = json.loads((args.out / f"{NAME}.json").read_text())
        steps = int(data["metadata"]["settings"]["student"]["step_cap"])
        data["figures"] = _plots(data["rows"], steps, args.out)
        return data

    import torch

    torch.set_num_threads(THREADS)
    size = QUICK if args.quick else FULL
    steps = size["steps"]
    rows = []
    for d in progress(size["dims"], "dims", unit="d"):
        xs = _eval_set(d, args.seed)
        from verified_attn.adapters.torch import attention_oracle

        box = attention_oracle(*_teacher(d, args.seed), record=False)
        ys = [np.asarray(box.query_many(x)) for x in xs]
        row = {"d": d, "ours": _ours(d, args.seed, xs, ys)}
        row["student"] = _student(d, args.seed, steps, xs, ys)
        rows.append(row)
        print(
            f"d={d}: ours {row['ours']['queries']} queries, error "
            f"{row['ours']['function_error']:.1e}; student {row['student']['reached']}",
            flush=True,
        )
    data: dict[str, Any] = {
        "benchmark": NAME,
        "metadata": metadata(
            args.seed,
            arithmetic="float64 box (float32 also learned by ours)",
            targets=list(TARGETS),
            student={
                "model": "nn.MultiheadAttention(d, 1) + nn.Linear(d, 1), float64",
                "optimizer": "Adam",
                "lr": f"{LR0} decaying exponentially to {LR1} over the step cap",
                "batch": BATCH,
                "step_cap": steps,
                "query_cap": steps * BATCH,
                "inputs": f"x ~ N(0, I), lengths cycling 1..{MAX_LEN}, fresh each step",
                "eval_every_steps": EVAL_EVERY,
            },
            eval_set=f"{EVAL_PER_LENGTH} sequences of each length 1..{MAX_LEN}, x ~ N(0, I)",
            error="RMS(model - box) / RMS(box) on the eval set",
            torch_threads=THREADS,
            torch_version=torch.__version__,
        ),
        "rows": rows,
    }
    data["table_markdown"] = _table(rows, steps)
    args.out.mkdir(parents=True, exist_ok=True)
    data["figures"] = [] if args.no_plots else _plots(rows, steps, args.out)
    (args.out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
    print(data["table_markdown"])
    return data


if __name__ == "__main__":
    main()

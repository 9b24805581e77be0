"""Ablation of the float multi-head learner's heuristic stages: each switch off in turn.

Run ``python benchmarks/multi_head_ablation.py`` (the ablation cells below) or ``--quick``
(two small cells). Writes ``benchmarks/results/multi_head_ablation.json``.

The cells are a subset of ``benchmarks/multi_head_float.py``'s (the same boxes, seeds and
error measures): random float64 boxes d = 8, H = 2..6 (seeds 0-3) and d = 16, H = 4 (seeds
0-1); ``nn.MultiheadAttention`` float64 E = 8, H = 2 and 4, E = 16, H = 4 and float32 E = 8,
H = 2 and 4 (seeds 0-1). For the options of
:class:`verified_attn.multi_head.pipeline.state.Options` (the learner as shipped, then each
switch off alone) every cell is learned by ``learn_float`` and recorded: learned or refused,
wrong results (parameters off by more than the stated parameter tolerance or predictions by
more than rtol: must stay 0), queries against the follow-up's ``4Hd^2 - 2H + 1``, the
parameter and prediction errors, seconds.

A stage "rescues" a run when the learner as shipped learns it and the learner without that
stage does not; it "improves a figure" when, over the runs both learn, it lowers the worst
parameter or prediction error or the queries.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, write_json
from multi_head_float import parameter_error, prediction_error, random_box, torch_box

import verified_attn as va
from verified_attn.errors import VerifiedAttnError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_bounds import follow_up_query_bound
from verified_attn.multi_head.pipeline.learner import learn_float
from verified_attn.multi_head.pipeline.state import SWITCHES, Options
from verified_attn.verification import DEFAULT_LENGTHS, DEFAULT_VERIFY

#: (kind, dtype, d, H, seeds): the ablation's cells.
CELLS = [("random", "float64", 8, H, range(4)) for H in range(2, 7)]
CELLS += [("random", "float64", 16, 4, range(2))]
CELLS += [("torch", "float64", E, H, range(2)) for E, H in ((8, 2), (8, 4), (16, 4))]
CELLS += [("torch", "float32", 8, H, range(2)) for H in (2, 4)]
QUICK_CELLS = [("random", "float64", 4, 2, range(2)), ("torch", "float32", 4, 2, range(1))]


def _box(kind: str, dtype: str, d: int, H: int, seed: int) -> tuple[Any, Any, Any, Any]:
    """(oracle, truth heads, the float64 answer function, affine) of a benchmark box."""
    if kind == "random":
        heads = random_box(d, H, seed)
        model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])
        return va.Oracle(model, "float"), heads, lambda X: model.evaluate_batch(X[None])[0], False
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    mha, r = torch_box(d, H, seed)
    truth = attention_parameters(mha, r)
    ref = attention_oracle(mha, r, dtype="float64")
    heads = list(zip(truth.W, truth.v, strict=True))
    return attention_oracle(mha, r, dtype=dtype), heads, ref.query, True


def run(switch: str, kind: str, dtype: str, d: int, H: int, seed: int) -> dict[str, Any]:
    """One cell with the stage ``switch`` off (``"none"``: the learner as shipped)."""
    options = Options() if switch == "none" else Options(**{switch: False})
    oracle, heads, answer, affine = _box(kind, dtype, d, H, seed)
    row: dict[str, Any] = {"switch": switch, "kind": kind, "dtype": dtype, "d": d, "H": H}
    row.update(seed=seed, follow_up=follow_up_query_bound(d, H))
    t0 = time.perf_counter()
    try:
        rec = learn_float(
            oracle,
            H,
            verify=DEFAULT_VERIFY,
            seed=seed,
            lengths=DEFAULT_LENGTHS,
            affine=affine,
            options=options,
        )
    except VerifiedAttnError as exc:
        row.update(learned=False, refusal=type(exc).__name__)
    else:
        got = [(h[0], h[1]) for h in rec.parameters["heads"]]
        learned = rec.model
        row.update(
            learned=True,
            queries=rec.queries,
            parameter_error=parameter_error(got, heads),
            prediction_error=prediction_error(
                lambda X: float(learned.evaluate_batch(X[None])[0]), answer, d, seed
            ),
            parameter_rtol=rec.parameter_rtol,
            rtol=rec.verification.rtol,
        )
    row["seconds"] = time.perf_counter() - t0
    return row


def _call(task: tuple[Any, ...]) -> dict[str, Any]:
    return run(*task)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per switch: learned, wrong, rescued (learned as shipped, refused without the stage),
    gained (refused as shipped, learned without it), the worst figures and the queries."""
    key = ("kind", "dtype", "d", "H", "seed")
    shipped = {tuple(r[k] for k in key): r for r in rows if r["switch"] == "none"}
    out = []
    for switch in ["none", *SWITCHES]:
        group = [r for r in rows if r["switch"] == switch]
        ok = [r for r in group if r["learned"]]
        base = [shipped[tuple(r[k] for k in key)] for r in group]
        both = [(r, b) for r, b in zip(group, base, strict=True) if r["learned"] and b["learned"]]
        out.append(
            {
                "switch": switch,
                "runs": len(group),
                "learned": len(ok),
                "wrong": sum(
                    r["parameter_error"] > r["parameter_rtol"] or r["prediction_error"] > r["rtol"]
                    for r in ok
                ),
                "rescued": sum(
                    b["learned"] and not r["learned"] for r, b in zip(group, base, strict=True)
                ),
                "gained": sum(
                    r["learned"] and not b["learned"] for r, b in zip(group, base, strict=True)
                ),
                "max_parameter_error": max((r["parameter_error"] for r in ok), default=None),
                "max_prediction_error": max((r["prediction_error"] for r in ok), default=None),
                # Over the runs both learn: the stage's effect on the figures (> 1: it helps).
                "parameter_error_ratio": _ratio(both, "parameter_error"),
                "queries_ratio": _ratio(both, "queries"),
                "over_follow_up": sum(r["queries"] >= r["follow_up"] for r in ok),
                "seconds": float(sum(r["seconds"] for r in group)),
            }
        )
    return out


def _ratio(both: list[tuple[dict[str, Any], dict[str, Any]]], what: str) -> float | None:
    """Worst over best: the max of the figure without the stage over the max as shipped."""
    if not both:
        return None
    off = max(r[what] for r, _ in both)
    on = max(b[what] for _, b in both)
    return float(off / on) if on > 0 else None


def table(summary: list[dict[str, Any]]) -> str:
    """The Markdown table of the summary (docs/multi_head_float_benchmark.md)."""
    lines = [
        "| stage off | learned | wrong | rescued | gained | worst parameter error "
        "| parameter error ratio | queries ratio | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        pe = s["max_parameter_error"]
        lines.append(
            f"| {s['switch']} | {s['learned']}/{s['runs']} | {s['wrong']} | {s['rescued']} "
            f"| {s['gained']} | {'-' if pe is None else f'{pe:.1e}'} "
            f"| {_fmt(s['parameter_error_ratio'])} | {_fmt(s['queries_ratio'])} "
            f"| {s['seconds']:.0f} |"
        )
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--switches", nargs="*", default=None, help="only these switches")
    args = p.parse_args(argv)
    out = output_dir(args.out, args.quick, "multi_head_ablation")
    cells = QUICK_CELLS if args.quick else CELLS
    switches = ["none", *(args.switches if args.switches is not None else SWITCHES)]
    unknown = set(switches) - {"none", *SWITCHES}
    if unknown:
        p.error(f"--switches: unknown {sorted(unknown)}; known: {', '.join(SWITCHES)}")
    tasks = [(sw, kind, dt, d, H, s) for sw in switches for kind, dt, d, H, ss in cells for s in ss]
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(progress(pool.map(_call, tasks), "runs", total=len(tasks)))
    else:
        rows = list(progress(map(_call, tasks), "runs", total=len(tasks)))
    summary = summarise(rows)
    print(table(summary))
    write_json(
        "multi_head_ablation",
        {
            "meta": metadata(
                0,
                quick=args.quick,
                jobs=args.jobs,
                cells=[[k, dt, d, H, len(ss)] for k, dt, d, H, ss in cells],
                options=[dataclasses.asdict(Options())],
                total_seconds=time.perf_counter() - started,
            ),
            "summary": summary,
            "runs": rows,
        },
        out,
    )


if __name__ == "__main__":
    main()

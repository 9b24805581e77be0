"""Ablation of the float multi-head learner's heuristic stages: each switch off in turn.

Run ``python benchmarks/multi_head_ablation.py`` (the ``subset`` cells below), ``--cells
extended`` (the larger cells where the float benchmark's runs used restarts, rounds and
polish) or ``--quick`` (two small cells). Writes ``benchmarks/results/multi_head_ablation.json``;
``--merge`` keeps the rows of that file's other cells (each cell's rows come from one run).

The cells are a subset of ``benchmarks/multi_head_float.py``'s (the same boxes, seeds and
error measures). ``subset``: random float64 boxes d = 8, H = 2..6 (seeds 0-3) and d = 16,
H = 4 (seeds 0-1); ``nn.MultiheadAttention`` float64 E = 8, H = 2 and 4, E = 16, H = 4 and
float32 E = 8, H = 2 and 4 (seeds 0-1). ``extended``: the float benchmark's seeds where
a restart, a conditioning round or the precision polish was recorded or measured: random
float64 d = 8, H = 5 (seed 12), H = 6 (seeds 4, 12), H = 7 (seeds 1, 4), H = 8 (seed 4),
d = 16, H = 8 (seed 1), ``nn.MultiheadAttention`` float64 E = 16, H = 8 (seed 0). There the
learner as shipped runs first, recording which stages changed each run
(``Options.fired``), and a switch is turned off only in the runs its stage changed (a stage
that changed nothing leaves the run as it is). d = 32 and E = 32 (4-10 minutes a run on
this machine, more under load) are not ablated. ``lowrank``: a box of rank-2 heads,
d = 8, H = 8, seed 6 (:func:`rank_two_box`), likewise. ``square``: the square design's cells
(random float64 d = 8, H = 2, seeds 4-19; ``nn.MultiheadAttention`` float64 E = 8, H = 2,
seeds 2-5; random float64 d = 4, H = 2 and 3, seeds 0-9), likewise. ``refine``: the
refinement's cells, seeds no other cell list has (random float64 d = 8, H = 3 seeds 4-5
and H = 6 seeds 5-6; ``nn.MultiheadAttention`` float64 E = 8, H = 2 seeds 6-7), likewise
(run with ``--switches refine``: every recorded row of them has the refinement). For the options of
:class:`verified_attn.multi_head.pipeline.state.Options` (the learner as shipped, then each
switch off alone) every cell is learned by ``learn_float`` and recorded: learned or refused,
wrong results (parameters off by more than the stated parameter tolerance or predictions by
more than rtol: must stay 0), queries against the follow-up's ``4Hd^2 - 2H + 1``, the
parameter and prediction errors, seconds.

A stage "rescues" a run when the learner as shipped learns it and the learner without that
stage does not; it "improves a figure" of a run both learn when without it the run asks more
queries, or its parameter or prediction error is over ``FACTOR`` (2) x the shipped run's
(each such run is listed in the summary's ``helped``, with its cell and seed). Switches
joined by ``+`` are off together (stages that may stand in for each other).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
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
#: Where consensus_start and linear_rounds both changed the run: the two off together.
PAIR_CELLS = [("random", "float64", 8, 6, (4, 12))]
EXTENDED_CELLS = [("random", "float64", 8, 5, (12,)), ("random", "float64", 8, 6, (4, 12))]
EXTENDED_CELLS += [("random", "float64", 8, 7, (1, 4)), ("random", "float64", 16, 8, (1,))]
EXTENDED_CELLS += [("random", "float64", 8, 8, (4,)), ("torch", "float64", 16, 8, (0,))]
#: The square design's cells (no redundant columns: where the swaps can fire), further seeds.
SQUARE_CELLS = [("random", "float64", 8, 2, range(4, 20)), ("torch", "float64", 8, 2, range(2, 6))]
SQUARE_CELLS += [("random", "float64", 4, H, range(10)) for H in (2, 3)]
#: A rank-2 box where a u-group stalls after the fits (the low-rank restarts' golden run).
LOW_RANK_CELLS = [("rank2", "float64", 8, 8, (6,))]
#: The refinement's own cells (new seeds, so no recorded row predates the refinement): the
#: learner as shipped, then the refinement off where it ran.
REFINE_CELLS = [("random", "float64", 8, H, seeds) for H, seeds in ((3, (4, 5)), (6, (5, 6)))]
REFINE_CELLS += [("torch", "float64", 8, 2, (6, 7))]
QUICK_CELLS = [("random", "float64", 4, 2, range(2)), ("torch", "float32", 4, 2, range(1))]


def rank_two_box(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """H heads with rank-2 W_h (entries of the variance of W ~ N(0, 1/d)), v ~ N(0, 1): the
    low-rank box of ``tests/multi_head/test_low_rank_restarts.py``."""
    rng = np.random.default_rng(seed)
    sig = (1.0 / np.sqrt(2 * d)) ** 0.5
    return [
        (rng.normal(0, sig, (d, 2)) @ rng.normal(0, sig, (2, d)), rng.normal(size=d))
        for _ in range(H)
    ]


def _box(kind: str, dtype: str, d: int, H: int, seed: int) -> tuple[Any, Any, Any, Any]:
    """(oracle, truth heads, the float64 answer function, affine) of a benchmark box."""
    if kind in ("random", "rank2"):
        heads = random_box(d, H, seed) if kind == "random" else rank_two_box(d, H, seed)
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
    fired: dict[str, int] = {}
    off = {} if switch == "none" else dict.fromkeys(switch.split("+"), False)
    options = Options(fired=fired, **off)
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
            **parameter_error(got, heads),
            prediction_error=prediction_error(
                lambda X: float(learned.evaluate_batch(X[None])[0]), answer, d, seed
            ),
            parameter_rtol=rec.parameter_rtol,
            rtol=rec.verification.rtol,
            **_used(rec),
        )
    row["seconds"] = time.perf_counter() - t0
    if switch == "none":
        row["fired"] = fired  # the stages that changed the run (each counted per change)
    return row


def _used(rec: Any) -> dict[str, Any]:
    """What the run's adaptive stages did (from its certificate and query counts)."""
    design = rec.certificate()["design"]
    return {
        "pilot_rounds_discarded": len(design["pilot"]),
        "conditioning_groups": len(design["conditioning"]),
        "restarted_groups": len(design["low_rank_restarts"]["groups"]),
        "polish": rec.queries_by_phase.get("polish", 0),
    }


def _call(task: tuple[Any, ...]) -> dict[str, Any]:
    row = run(*task)
    print(json.dumps(row), file=sys.stderr, flush=True)  # each row as it ends (a long run)
    return row


_KEY = ("kind", "dtype", "d", "H", "seed")
#: A figure "improved" by a stage: without it the run's error is over this factor of the
#: shipped run's (float noise between two fitting paths stays well under it).
FACTOR = 2.0


def _cell(r: dict[str, Any]) -> str:
    return f"{r['kind']} {r['dtype']} d={r['d']} H={r['H']} seed={r['seed']}"


def _effects(r: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What the stage did for the run ``b`` (shipped) over ``r`` (the stage off)."""
    if b["learned"] and not r["learned"]:
        return [f"rescued ({r['refusal']} without it)"]
    if not (b["learned"] and r["learned"]):
        return []
    out = []
    if r["queries"] > b["queries"]:
        out.append(f"queries {b['queries']} instead of {r['queries']}")
    for what in ("parameter_error", "prediction_error"):
        if r[what] > FACTOR * b[what]:
            out.append(f"{what} {b[what]:.2e} instead of {r[what]:.2e}")
    return out


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per switch: learned, wrong, rescued (learned as shipped, refused without the stage),
    gained (refused as shipped, learned without it), the worst figures and the queries, and
    the runs the stage rescued or improved (``helped``: cell, seed and figure)."""
    shipped = {tuple(r[k] for k in _KEY): r for r in rows if r["switch"] == "none"}
    out = []
    # The switches of the learner as it is, then any a recorded run had that it no longer has.
    gone = sorted({r["switch"] for r in rows} - {"none", *SWITCHES})  # and switches together
    for switch in ["none", *SWITCHES, *gone]:
        group = [r for r in rows if r["switch"] == switch and tuple(r[k] for k in _KEY) in shipped]
        ok = [r for r in group if r["learned"]]
        base = [shipped[tuple(r[k] for k in _KEY)] for r in group]
        pairs = list(zip(group, base, strict=True))
        both = [(r, b) for r, b in pairs if r["learned"] and b["learned"]]
        out.append(
            {
                "switch": switch,
                "runs": len(group),
                "learned": len(ok),
                "wrong": sum(
                    r["parameter_error"] > r["parameter_rtol"] or r["prediction_error"] > r["rtol"]
                    for r in ok
                ),
                "rescued": sum(b["learned"] and not r["learned"] for r, b in pairs),
                "gained": sum(r["learned"] and not b["learned"] for r, b in pairs),
                "max_parameter_error": max((r["parameter_error"] for r in ok), default=None),
                "max_prediction_error": max((r["prediction_error"] for r in ok), default=None),
                # Over the runs both learn: the stage's effect on the figures (> 1: it helps).
                "parameter_error_ratio": _ratio(both, "parameter_error"),
                "queries_ratio": _ratio(both, "queries"),
                "over_follow_up": sum(r["queries"] >= r["follow_up"] for r in ok),
                "helped": [f"{_cell(b)}: {e}" for r, b in pairs for e in _effects(r, b)],
                "costs_queries": sum(
                    r["queries"] < b["queries"] for r, b in both if switch != "none"
                ),
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


def _runs(tasks: list[tuple[Any, ...]], args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            return list(progress(pool.map(_call, tasks), "runs", total=len(tasks)))
    return list(progress(map(_call, tasks), "runs", total=len(tasks)))


def _merged(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` and ``new`` rows, a new row replacing an old one of the same switch and run."""
    ids = {(r["switch"], *(r[k] for k in _KEY)) for r in new}
    return [r for r in old if (r["switch"], *(r[k] for k in _KEY)) not in ids] + new


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--cells",
        choices=("subset", "extended", "square", "lowrank", "pair", "refine", "none"),
        default="subset",
    )
    p.add_argument("--merge", action="store_true", help="keep the JSON's other cells' rows")
    p.add_argument("--add", nargs="*", type=Path, default=[], help="rows of other runs' JSON")
    p.add_argument("--resume", type=Path, default=None, help="rows already run (JSON lines)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--switches", nargs="*", default=None, help="only these switches (a+b: both off at once)"
    )
    args = p.parse_args(argv)
    out = output_dir(args.out, args.quick, "multi_head_ablation")
    cells = (
        QUICK_CELLS
        if args.quick
        else {
            "subset": CELLS,
            "extended": EXTENDED_CELLS,
            "square": SQUARE_CELLS,
            "lowrank": LOW_RANK_CELLS,
            "pair": PAIR_CELLS,
            "refine": REFINE_CELLS,
            "none": [],
        }[args.cells]
    )
    switches = ["none", *(args.switches if args.switches is not None else SWITCHES)]
    unknown = {x for sw in switches for x in sw.split("+")} - {"none", *SWITCHES}
    if unknown:
        p.error(f"--switches: unknown {sorted(unknown)}; known: {', '.join(SWITCHES)}")
    started = time.perf_counter()
    if cells is not CELLS and not args.quick:
        # The learner as shipped first, then each switch only where its stage changed the
        # run: a stage that changed nothing leaves the run as it is when switched off.
        # --resume: rows already run (as a JSON row a line, the run's standard error).
        done = [json.loads(x) for x in args.resume.read_text().splitlines()] if args.resume else []
        have = {(r["switch"], *(r[k] for k in _KEY)) for r in done}
        todo = [("none", k, dt, d, H, s) for k, dt, d, H, ss in cells for s in ss]
        rows = done + _runs([t for t in todo if t not in have], args)
        tasks = [
            (sw, r["kind"], r["dtype"], r["d"], r["H"], r["seed"])
            for sw in switches[1:]
            for r in rows
            if r["switch"] == "none"
            and any(part in r.get("fired", {}) for part in sw.split("+"))
            and (sw, *(r[k] for k in _KEY)) not in have
        ]
        rows += _runs(tasks, args)
    else:  # the subset's cells run every switch, as recorded
        tasks = [
            (sw, kind, dt, d, H, s) for sw in switches for kind, dt, d, H, ss in cells for s in ss
        ]
        rows = _runs(tasks, args)
    run_meta = {
        "quick": args.quick,
        "jobs": args.jobs,
        "cells": [[k, dt, d, H, list(ss)] for k, dt, d, H, ss in cells],
        "switches": switches,
        "total_seconds": time.perf_counter() - started,
    }
    runs_meta = [run_meta] if cells else []  # --cells none: only merging
    path = out / "multi_head_ablation.json"
    if args.merge and path.exists():
        old = json.loads(path.read_text())
        rows = _merged(old["runs"], rows)
        runs_meta = old["meta"]["settings"].get("runs", [old["meta"]["settings"]]) + runs_meta
    for extra in args.add:  # another run's rows (its cells replace these cells' rows)
        more = json.loads(extra.read_text())
        rows = _merged(rows, more["runs"])
        runs_meta += more["meta"]["settings"]["runs"]
    summary = summarise(rows)
    print(table(summary))
    for s in summary:
        for line in s["helped"]:
            print(f"{s['switch']}: {line}")
    write_json(
        "multi_head_ablation",
        {
            "meta": metadata(0, runs=runs_meta, options=[dataclasses.asdict(Options())]),
            "summary": summary,
            "runs": rows,
        },
        out,
    )


if __name__ == "__main__":
    main()

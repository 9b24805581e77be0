"""The float multi-head benchmark's figures in bits (issue 39), and the precision goals.

Run ``python benchmarks/multi_head_float_bits.py`` to recompute the bits columns of an
existing ``benchmarks/results/multi_head_float.json`` from its runs (no learning: each
run's ``parameter_error`` is already the metric of :mod:`verified_attn.precision`, the
largest entry error over the largest true entry after matching the heads, and
``prediction_error`` is relative to ``max(|answer|, 1)``), add the per-cell precision rows
against the goals, write the JSON back and draw ``multi_head_float_bits.png``: the median
and worst parameter bits per cell beside the anchors' 2^-51 (IACR ePrint 2026/1678, d = 8,
six heads) and CJM20's 2^-40.4. ``--goal BITS`` holds every cell to one goal instead of
the issue's; ``--out DIR`` reads and writes there.

``--mha`` learns the ``nn.MultiheadAttention`` float64 grid of
:mod:`_mha_bits` (E / H 2 to 16, H 2 to 8, E <= 64; truth mapped exactly from
the weights) into ``multi_head_mha_bits.json`` and draws its cells on the plot;
``--mha-cells E,H,SEED ...`` learns only those modules (merged into the JSON's rows).

``--refine-seeds A-B`` learns the anchor's cell (random float64 d = 8, H = 6) for those
seeds with the refinement's per-seed figures (:mod:`_refine_bits`: bits, the stated error
over the true one, and the floors that say where the error comes from) into
``multi_head_refine_bits.json``.

The goals (issue 39), in bits of the relative parameter error: random float64 d = 8, H = 6
(the anchor's cell) 51; the other random float64 cells 48; ``nn.MultiheadAttention``
float64 46; float32 20 (within 4 bits of float32's 24-bit significand, 2^-20).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import output_dir, progress

from verified_attn.precision import bits

#: The anchors drawn as horizontal lines: (label, bits).
ANCHORS = (("ePrint 2026/1678 (d = 8, H = 6): 2^-51", 51.0), ("CJM20: 2^-40.4", 40.4))


def goal_bits(kind: str, dtype: str, d: int, H: int) -> float:
    """The issue's precision goal of a cell, in bits of the relative parameter error.

    >>> goal_bits("random", "float64", 8, 6), goal_bits("random", "float64", 16, 6)
    (51.0, 48.0)
    >>> goal_bits("torch", "float64", 8, 2), goal_bits("torch", "float32", 8, 2)
    (46.0, 20.0)
    """
    if dtype == "float32":
        return 24.0 - 4.0
    if kind == "torch":
        return 46.0
    return 51.0 if (d, H) == (8, 6) else 48.0


def _json_bits(error: float | None) -> float | None:
    """bits(error) as JSON holds it: None for no figure or an exact 0 (infinite bits)."""
    return _finite(bits(error))


def add_bits(row: dict[str, Any]) -> dict[str, Any]:
    """A run row with ``parameter_bits`` and ``prediction_bits`` (learned runs; None else)."""
    learned = row.get("learned")
    row["parameter_bits"] = _json_bits(row["parameter_error"]) if learned else None
    row["prediction_bits"] = _json_bits(row["prediction_error"]) if learned else None
    return row


def reported_bits(rec: Any) -> dict[str, float | None]:
    """What a learned result states (``rec.error_figures``): its parameter and prediction
    bits, beside the measured ones (``overclaimed`` counts runs stating more parameter bits
    than measured)."""
    figures = rec.error_figures
    return {
        "reported_parameter_bits": _finite(figures.parameter_bits),
        "reported_prediction_bits": _finite(figures.prediction_bits),
    }


def _finite(b: float | None) -> float | None:
    return b if b is not None and math.isfinite(b) else None


def _cells(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int, int], list[dict[str, Any]]]:
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["dtype"], r["d"], r["H"]), []).append(r)
    return dict(sorted(groups.items()))


def _low(values: list[float]) -> float | None:
    return min(values) if values else None


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def bits_columns(group: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell's bits columns over its learned runs: the worst (min) and median parameter
    bits and the worst prediction bits (an exact 0 error counts as 53 bits, past float64)."""
    ok = [add_bits(dict(r)) for r in group if r["learned"]]
    pb = [53.0 if r["parameter_bits"] is None else r["parameter_bits"] for r in ok]
    qb = [53.0 if r["prediction_bits"] is None else r["prediction_bits"] for r in ok]
    overclaimed = sum(
        r.get("reported_parameter_bits") is not None
        and r["parameter_bits"] is not None
        and r["reported_parameter_bits"] > r["parameter_bits"]
        for r in ok
    )
    return {
        # Runs whose result stated more parameter bits than measured (must be 0; rows of
        # runs before the figure was recorded count as not).
        "overclaimed": overclaimed,
        "min_parameter_bits": _low(pb),
        "median_parameter_bits": _median(pb),
        "min_prediction_bits": _low(qb),
        "median_prediction_bits": _median(qb),
    }


def precision_rows(rows: list[dict[str, Any]], goal: float | None = None) -> list[dict[str, Any]]:
    """One row per cell: its goal in bits (``goal``, else :func:`goal_bits`), the seeds run,
    how many met it (learned with at least that many parameter bits; a refusal does not),
    the fraction, and the cell's bits columns."""
    out = []
    for (kind, dtype, d, H), group in _cells(rows).items():
        want = goal_bits(kind, dtype, d, H) if goal is None else float(goal)
        met = sum(
            r["learned"] and (r["parameter_error"] == 0 or bits(r["parameter_error"]) >= want)
            for r in group
        )
        out.append(
            {
                "kind": kind,
                "dtype": dtype,
                "d": d,
                "H": H,
                "goal_bits": want,
                "seeds": len(group),
                "met_goal": met,
                "fraction": met / len(group),
                **bits_columns(group),
            }
        )
    return out


def add_precision_goal(parser: argparse.ArgumentParser) -> None:
    """The benchmark's ``--precision-goal [BITS]`` option."""
    parser.add_argument(
        "--precision-goal",
        nargs="?",
        const="issue",
        default=None,
        help="add a row per cell: the fraction of seeds meeting a goal in parameter bits "
        "(BITS for every cell; without it the issue's goals, multi_head_float_bits.goal_bits)",
    )


def goal_rows(option: str | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The ``precision`` rows ``--precision-goal`` asks for (printed), else None.

    >>> goal_rows(None, []) is None
    True
    """
    if option is None:
        return None
    out = precision_rows(rows, None if option == "issue" else float(option))
    for row in out:
        print(row)
    return out


def recompute(data: dict[str, Any], goal: float | None = None) -> dict[str, Any]:
    """The benchmark JSON with the bits columns recomputed from its runs: each run's
    bits, each summary cell's bits columns, and the ``precision`` rows."""
    for row in data["runs"]:
        add_bits(row)
    cells = _cells(data["runs"])
    for cell in progress(data["summary"], "cells"):
        cell.update(bits_columns(cells[(cell["kind"], cell["dtype"], cell["d"], cell["H"])]))
    data["precision"] = precision_rows(data["runs"], goal)
    return data


def plot_bits(
    precision: list[dict[str, Any]], path: Path, mha: list[dict[str, Any]] | None = None
) -> None:
    """Median parameter bits per cell (bars: the worst seed to the best median), one line per
    box and d, beside the anchors' horizontal lines; with ``mha`` (the ``--mha`` grid's
    cells, :func:`_mha_bits.mha_summary`) one dashed line per head size E / H."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, dtype, d in sorted({(p["kind"], p["dtype"], p["d"]) for p in precision}):
        cells = [
            p
            for p in precision
            if (p["kind"], p["dtype"], p["d"]) == (kind, dtype, d) and p["median_parameter_bits"]
        ]
        if not cells:
            continue
        Hs = np.array([p["H"] for p in cells], dtype=float)
        med = np.array([p["median_parameter_bits"] for p in cells])
        low = np.array([p["min_parameter_bits"] for p in cells])
        box = "nn.MHA" if kind == "torch" else kind
        ax.errorbar(Hs, med, yerr=[med - low, np.zeros_like(med)], marker="o", capsize=2,
                    lw=1, label=f"{box} {dtype} d={d}")
    for hd in sorted({c["head_dim"] for c in mha or []}):
        cells = [c for c in mha or [] if c["head_dim"] == hd]
        Hs = np.array([c["H"] for c in cells], dtype=float)
        med = np.array([c["median_parameter_bits"] for c in cells])
        low = np.array([c["min_parameter_bits"] for c in cells])
        ax.errorbar(Hs, med, yerr=[med - low, np.zeros_like(med)], marker="s", ls="--",
                    capsize=2, lw=1, label=f"nn.MHA float64 grid E/H={hd} (exact truth)")
    ax.axhline(46.0, color="grey", ls="-.", lw=0.9, label="nn.MHA goal: 2^-46")
    for (label, b), style in zip(ANCHORS, ("--", ":"), strict=True):
        ax.axhline(b, color="black", ls=style, lw=0.9, label=label)
    ax.set_xlabel("heads H")
    ax.set_ylabel("parameter bits, -log2(relative error)")
    ax.set_ylim(15, 54)
    ax.set_title("float multi-head: parameter bits per cell (median; bar: worst seed)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="folder of multi_head_float.json")
    p.add_argument("--goal", type=float, default=None, help="one goal in bits for every cell")
    p.add_argument("--mha", action="store_true", help="learn the nn.MultiheadAttention grid")
    p.add_argument("--mha-cells", nargs="*", default=None, metavar="E,H,SEED",
                   help="learn only these nn.MultiheadAttention modules (into the grid's rows)")
    p.add_argument("--refine-seeds", default=None, metavar="A-B",
                   help="learn random float64 d = 8, H = 6 for seeds A..B (per-seed figures)")
    args = p.parse_args(argv)
    out = output_dir(args.out, False, "multi_head_float_bits")
    if args.refine_seeds:
        refine_cell(out, args.refine_seeds)
        return
    path = out / "multi_head_float.json"
    data = recompute(json.loads(path.read_text()), args.goal)
    path.write_text(json.dumps(data, indent=1, default=str))
    mha = mha_grid(out, args.mha, args.mha_cells)
    plot_bits(data["precision"], out / "multi_head_float_bits.png", mha)
    for row in data["precision"]:
        print(row)


def mha_grid(out: Path, run: bool, cells: list[str] | None) -> list[dict[str, Any]] | None:
    """The ``--mha`` grid's cell rows: learned now (all of :data:`_mha_bits.GRID`,
    or ``cells``), each row merged into ``multi_head_mha_bits.json`` as it ends; else read
    from that file (None when there is none)."""
    import _mha_bits as grid
    from _common import metadata

    path = out / "multi_head_mha_bits.json"
    todo = [tuple(int(x) for x in c.split(",")) for c in cells or []]
    if run and not todo:
        todo = [(E, H, s) for E, H, seeds in grid.GRID for s in seeds]
    for E, H, seed in progress(todo, "nn.MHA modules"):
        row = grid.run_cell(E, H, seed)
        print(row, flush=True)
        rows = grid.merge_rows(path, [row])
        data = {"meta": metadata(0, grid=grid.GRID), "summary": grid.mha_summary(rows), "runs": rows}
        path.write_text(json.dumps(data, indent=1, default=str))
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    summary: list[dict[str, Any]] = grid.mha_summary(data["runs"])
    data["summary"] = summary
    path.write_text(json.dumps(data, indent=1, default=str))
    for cell in summary:
        print(cell)
    return summary


def refine_cell(out: Path, seeds: str) -> dict[str, Any]:
    """The anchor's cell learned for seeds ``A-B`` (:mod:`_refine_bits`), each row merged
    into ``multi_head_refine_bits.json`` as it ends, with the cell's summary."""
    import _refine_bits as cell
    from _common import metadata

    lo, hi = (int(x) for x in seeds.split("-"))
    path = out / "multi_head_refine_bits.json"
    data: dict[str, Any] = {}
    for seed in progress(range(lo, hi + 1), "seeds"):
        row = cell.run_seed(seed)
        print(row, flush=True)
        rows = cell.merge(path, [row])
        data = {"meta": metadata(0), "summary": cell.summary(rows), "runs": rows}
        path.write_text(json.dumps(data, indent=1, default=str))
    print(data.get("summary"))
    return data


if __name__ == "__main__":
    main()

"""Peak memory and wall time of the float multi-head learner on its largest cells.

Run ``python benchmarks/multi_head_memory.py`` (the cells below, this tree, label
``matrix-free``) or ``--tree DIR --label NAME`` to measure another source tree (a checkout
of an earlier commit) under its own label; ``--cells`` picks cells by name. Each run is
its own subprocess (``python -c`` with the tree first on ``sys.path``), so its peak
resident memory (``ru_maxrss``) and CPU seconds are that run's alone; the rows of
:mod:`multi_head_float` (``run_random`` / ``run_torch``: queries, parameter and prediction
errors, seconds, peak MiB) are merged into ``benchmarks/results/multi_head_memory.json``
under the label, and ``--plot`` draws ``multi_head_memory.png`` from every label there.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import output_dir, progress  # noqa: E402

NAME = "multi_head_memory.json"

#: name: (kind, d or E, H, seed). The cells the docs name: random d = 8, H = 6; random
#: d = 16, H = 8 seed 1 (the precision polish at 2176 parameters, dense: under
#: ``DENSE_FIGURE_PARAMETERS``); random d = 32, H = 8 seed 1 (the precision polish at 8448
#: parameters, matrix-free); nn.MultiheadAttention float64 E = 64, H = 4 seed 0; E = 128,
#: H = 8 (once, long).
CELLS: dict[str, tuple[str, int, int, int]] = {
    "random-d8-H6": ("random", 8, 6, 0),
    "random-d16-H8": ("random", 16, 8, 1),
    "random-d32-H8": ("random", 32, 8, 1),
    "mha-E64-H4": ("torch", 64, 4, 0),
    "mha-E128-H8": ("torch", 128, 8, 0),
}
DEFAULT = ("random-d8-H6", "random-d32-H8", "mha-E64-H4")

_CHILD = """
import json, sys
sys.path[:0] = [{tree!r}, {bench!r}]
from multi_head_float import run_random, run_torch
kind, d, H, seed = {cell!r}
row = run_random(d, H, seed) if kind == "random" else run_torch(d, H, seed, "float64")
print("ROW " + json.dumps(row, default=float))
"""


def child_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cell(tree: Path, name: str) -> dict[str, Any]:
    """One cell in a fresh interpreter on ``tree``: its row, with the cell's name and the
    child's CPU seconds (``cpu_seconds``: wall ``seconds`` counts waits for shared cores)."""
    code = _CHILD.format(tree=str(tree), bench=str(tree / "benchmarks"), cell=CELLS[name])
    cpu0 = child_cpu_seconds()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=False
    )
    cpu = child_cpu_seconds() - cpu0
    rows = [ln[4:] for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
    if not rows:
        return {"cell": name, "failed": proc.stderr[-2000:], "cpu_seconds": cpu}
    return {"cell": name, **json.loads(rows[-1]), "cpu_seconds": cpu}


def merge(label: str, rows: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Rows into ``out`` under ``label`` (a row replaces that label's row of its cell)."""
    data = json.loads(out.read_text()) if out.exists() else {}
    kept = {r["cell"]: r for r in data.get(label, [])}
    kept.update({r["cell"]: r for r in rows})
    data[label] = [kept[c] for c in CELLS if c in kept]
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def plot(data: dict[str, Any], out: Path) -> None:
    """Peak RSS (GiB) and seconds per cell, one bar per label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(data)
    cells = [c for c in CELLS if any(r["cell"] == c for rows in data.values() for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, scale, title in (
        (axes[0], "peak_rss_mib", 1 / 1024, "peak RSS (GiB)"),
        (axes[1], "seconds", 1.0, "wall (s)"),
    ):
        width = 0.8 / max(len(labels), 1)
        for i, label in enumerate(labels):
            got = {r["cell"]: r.get(key, 0.0) * scale for r in data[label]}
            xs = [j + i * width for j in range(len(cells))]
            ax.bar(xs, [got.get(c, 0.0) for c in cells], width, label=label)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))], cells, fontsize=8)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", type=Path, default=HERE.parent, help="source tree to measure")
    p.add_argument("--label", default="matrix-free", help="the rows' label in the JSON")
    p.add_argument("--cells", nargs="*", default=list(DEFAULT), choices=list(CELLS))
    p.add_argument("--plot", action="store_true", help="draw the PNG from the JSON")
    p.add_argument("--out", type=Path, default=None, help="folder (default: results/)")
    args = p.parse_args(argv)
    rows = []
    for name in progress(args.cells, "cells"):
        row = run_cell(args.tree.resolve(), name)
        print(json.dumps(row, default=float), flush=True)
        rows.append(row)
    out = output_dir(args.out, False, "multi-head-memory") / NAME
    data = merge(args.label, rows, out) if rows else json.loads(out.read_text())
    if args.plot:
        plot(data, out.with_suffix(".png"))


if __name__ == "__main__":
    main()

"""Issue 39's single-head target: a float64 head recovered to 2^-50 relative, d = 64..1024.

The box is the scale benchmark's (:func:`scale.float_box`: one d x d product per batch,
then the softmax, all in float64, timed inside itself), on its random heads
(:func:`scale.float_instance`: W ~ N(0, 1/d), v ~ N(0, 1)), learned by
``va.learn_single_head`` with the default d^2 + d queries. Each head is learned three times:

- ``runs``: the learner as it is (probes [a e_j + (t / a) u_k; a e_j], a = 1/8, W
  decoded in extended precision, :mod:`verified_attn.exact_recovery.extended_decode`);
- ``float64_decode_runs``: the same probes, W decoded in float64;
- ``plain_runs``: probes [e_j + t u_k; e_j] (anchor 1) decoded in float64, the
  reference both are measured against.

The figure is :mod:`verified_attn.precision`'s metric: the largest entry error of W and v
over their largest entry magnitude, ``bits = -log2`` of it, the truth being the box's own
float64 parameters (differences of nearby float64 numbers are exact). Also recorded: the
bits the result states (its first-order estimate), the learner's time overhead over the
box's (``overhead_ratio``, as in ``scale.py``) and the query count. Run from the
repository root (``OPENBLAS_NUM_THREADS=1`` is set for the run)::

    python benchmarks/single_head_bits.py            # d = 64..1024 (about 10 minutes)
    python benchmarks/single_head_bits.py --quick    # seconds; d = 8, 16

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> data = main(["--quick", "--out", str(out)])
>>> all(r["queries"] == r["d"] ** 2 + r["d"] for r in data["runs"])
True
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads BLAS

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from _common import metadata, output_dir, progress, write_json
from scale import _Clock, float_box, float_instance

NAME = "single_head_bits"
TARGET_BITS = 50.0
#: (d, seeds): a few seeds at small d, fewer where a run takes minutes.
FULL = ((64, 4), (128, 4), (256, 4), (512, 2), (1024, 1))
QUICK = ((8, 2), (16, 1))


def measure(d: int, seed: int, anchor: Fraction | None, extended: bool = True) -> dict[str, Any]:
    """One run on the scale benchmark's head (d, seed); ``anchor`` overrides the learner's,
    ``extended=False`` decodes in float64."""
    import verified_attn as va
    from verified_attn.exact_recovery import extended_decode, learner
    from verified_attn.precision import bits, relative_parameter_error

    W, v = float_instance(d, seed)
    clock = type("Clock", (_Clock,), {})
    fn, batch_fn = float_box(W, v, clock)
    oracle = va.Oracle.from_callable(fn, d, batch_fn=batch_fn, model_class="single-head")
    kept = learner.FLOAT_ANCHOR, extended_decode.EXTENDED
    if anchor is not None:
        learner.FLOAT_ANCHOR = anchor
    if not extended:
        extended_decode.EXTENDED = None
    try:
        t0 = time.perf_counter()
        rec = va.learn_single_head(oracle)
        total = time.perf_counter() - t0
    finally:
        learner.FLOAT_ANCHOR, extended_decode.EXTENDED = kept
    error = relative_parameter_error([(rec.W, rec.v)], [(W, v)], ordered=True)
    return {
        "d": d,
        "seed": seed,
        "anchor": str(anchor if anchor is not None else kept[0]),
        "extended_decode": extended and kept[1] is not None,
        "relative_error": error,
        "bits": bits(error),
        "stated_bits": rec.error_figures.parameter_bits,
        "queries": rec.queries,
        "seconds": total,
        "box_seconds": clock.seconds,
        "overhead_ratio": (total - clock.seconds) / clock.seconds,
    }


def run(sizes: Sequence[tuple[int, int]], seed0: int = 0) -> dict[str, Any]:
    from verified_attn.exact_recovery.learner import FLOAT_ANCHOR

    runs, f64, plain = [], [], []
    jobs = [(d, seed0 + i) for d, n in sizes for i in range(n)]
    for d, seed in progress(jobs, "runs", unit="run"):
        runs.append(measure(d, seed, None))
        f64.append(measure(d, seed, None, extended=False))
        plain.append(measure(d, seed, Fraction(1), extended=False))
        print(f"d={d} seed={seed}: {runs[-1]['bits']:.2f} bits (float64 decoding "
              f"{f64[-1]['bits']:.2f}, anchor 1 {plain[-1]['bits']:.2f}), overhead "
              f"{runs[-1]['overhead_ratio']:.2f} ({f64[-1]['overhead_ratio']:.2f}, "
              f"{plain[-1]['overhead_ratio']:.2f})", file=sys.stderr, flush=True)
    per_d = []
    for d, _ in sizes:
        row: dict[str, Any] = {"d": d, "seeds": sum(r["d"] == d for r in runs)}
        for name, rows in (("", runs), ("float64_decode_", f64), ("plain_", plain)):
            mine = [r for r in rows if r["d"] == d]
            row[f"{name}worst_bits"] = min(r["bits"] for r in mine)
            row[f"{name}best_bits"] = max(r["bits"] for r in mine)
            row[f"{name}median_overhead_ratio"] = statistics.median(
                r["overhead_ratio"] for r in mine)
        row["target_met"] = all(r["bits"] >= TARGET_BITS for r in runs if r["d"] == d)
        per_d.append(row)
    return {
        "benchmark": NAME,
        **metadata(seed0, arithmetic="float", blas_threads=os.environ["OPENBLAS_NUM_THREADS"],
                   anchor=str(FLOAT_ANCHOR)),
        "target_bits": TARGET_BITS,
        "per_d": per_d,
        "runs": runs,
        "float64_decode_runs": f64,
        "plain_runs": plain,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0, help="the first seed (then seed + 1, ...)")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    args = p.parse_args(argv)
    data = run(QUICK if args.quick else FULL, args.seed)
    data["quick"] = args.quick
    write_json(NAME, data, output_dir(args.out, args.quick, NAME))
    return data


if __name__ == "__main__":
    main()

"""What float32 answers allow: the learner's parameters against the least-squares floor of its own answers.

For each float32 ``nn.MultiheadAttention`` module of the float benchmark
(``multi_head_float.torch_box(E, H, seed)``, read through ``attention_oracle(...,
dtype="float32")``) the learner runs as shipped (``learn_multi_head``); its answers (the
design's and the polish's random sequences) are kept from the run. Per module:

* ``learned_bits``: -log2 of the learned heads' relative parameter error (the float
  benchmark's metric: ``(W, v)``, largest entry error over the largest true entry, best head
  order; ``with_c_bits`` adds each head's ``c``), against the module's weights mapped in float64;
* ``floor_bits``: the same for the sequence polish's fit (:func:`~.sequence_blocks.polish_fit`)
  started from the *true* heads on the very answers the learner had: what any fit of those
  answers reaches (the box's float32 rounding through that design's Jacobian);
* ``gauss_newton_bits``: the learned heads after four Gauss-Newton steps with
  extended-precision residuals (:func:`~.pipeline.refine.gauss_newton`, the refinement's
  steps, no query): what the refinement stage would add without new answers;
* ``cost_truth`` / ``cost_learned``: the squared residual of the true and the learned heads
  on those answers (extended precision), and ``answer_gap_median``: the median relative gap
  between the module's answers and the true heads' (its float32 rounding).

``python benchmarks/multi_head_float32_floor.py --cells 8,2 8,4 --seeds 0-5`` writes
``results/multi_head_float32_floor.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, write_json
from multi_head_float import torch_box

from verified_attn.multi_head.pipeline import learner
from verified_attn.multi_head.pipeline.refine import extended_residuals, gauss_newton
from verified_attn.multi_head.pipeline.verify import _design_answers
from verified_attn.multi_head.sequence_blocks import polish_fit
from verified_attn.multi_head.sequence_fit import compress
from verified_attn.precision import relative_parameter_error


def _bits(got: list[Any], truth: list[Any]) -> tuple[float, float]:
    """(W, v) bits and (W, v, c) bits."""
    wv = relative_parameter_error([h[:2] for h in got], [h[:2] for h in truth])
    return -math.log2(wv), -math.log2(relative_parameter_error(got, truth))


def run_module(E: int, H: int, seed: int) -> dict[str, Any]:
    """One module: the learner as shipped, its state kept at the refinement stage."""
    from verified_attn.adapters.torch import attention_oracle, attention_parameters
    from verified_attn.multi_head.canonical_learner import learn_multi_head

    mha, r = torch_box(E, H, seed)
    box = attention_oracle(mha, r, dtype="float32")
    kept: list[Any] = []
    shipped = learner.refine_stage

    def keep(st: Any, learning: int) -> None:
        kept.append(st)
        shipped(st, learning)

    t0 = time.perf_counter()
    learner.refine_stage = keep
    try:
        rec = learn_multi_head(box, heads=H, seed=seed)
    finally:
        learner.refine_stage = shipped
    st = kept[-1]
    p = attention_parameters(mha, r)
    truth = [(p.W[h], p.v[h], p.c[h]) for h in range(H)]
    seqs, ys = _design_answers(st.U, st.B, st.f0, st.ans, st.tie_answers, st.H, st.unit)
    rows = compress([*seqs, *st.polish_seqs], [*ys, *st.polish_ans])
    floor = polish_fit(truth, p.beta, rows, affine=True)
    stepped, _ = gauss_newton(st.heads, st.beta_fit, rows, True, steps=4)
    gap_truth = extended_residuals(truth, p.beta, rows, True)
    gap_learned = extended_residuals(st.heads, st.beta_fit, rows, True)
    learned, with_c = _bits(st.heads, truth)
    return {
        "E": E,
        "H": H,
        "seed": seed,
        "queries": rec.queries,
        "answers": len(rows),
        "learned_bits": learned,
        "with_c_bits": with_c,
        "floor_bits": _bits(floor.heads, truth)[0],
        "gauss_newton_bits": _bits(stepped, truth)[0],
        "estimate_bits": -math.log2(rec.parameter_error_estimate),
        "cost_truth": float(gap_truth @ gap_truth),
        "cost_learned": float(gap_learned @ gap_learned),
        "answer_gap_median": float(
            np.median(np.abs(gap_truth) / np.maximum(np.abs(rows.answers), 1.0))
        ),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cells", nargs="+", default=["8,2", "8,4"], help="E,H per cell")
    p.add_argument("--seeds", default="0-5", help="module seeds, a-b")
    p.add_argument("--quick", action="store_true", help="E = 8, H = 2, seed 0")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    args = p.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    cells = [tuple(int(x) for x in c.split(",")) for c in args.cells]
    tasks = [(E, H, s) for E, H in cells for s in range(lo, hi + 1)]
    if args.quick:
        tasks = [(8, 2, 0)]
    out = output_dir(args.out, args.quick, "multi_head_float32_floor")
    rows = []
    for E, H, s in progress(tasks, "modules", total=len(tasks)):
        rows.append(run_module(E, H, s))
        print(
            {k: rows[-1][k] for k in ("E", "H", "seed", "learned_bits", "floor_bits")}, flush=True
        )
    write_json("multi_head_float32_floor", {"meta": metadata(0, tasks=tasks), "runs": rows}, out)


if __name__ == "__main__":
    main()

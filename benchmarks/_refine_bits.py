"""The refinement's per-seed figures at the anchor's cell (issue 39): random float64 d = 8, H = 6.

Run through ``python benchmarks/multi_head_float_bits.py --refine-seeds 0-19``. Each seed
is the float benchmark's ``random_box(8, 6, seed)`` learned by
``learn_multi_head(Oracle(model, "float"), heads=6, seed=seed)``; rows go to
``benchmarks/results/multi_head_refine_bits.json`` (a row replaces the row of its seed).

Per row: the queries against the follow-up's count, ``parameter_bits`` (the metric of
:mod:`verified_attn.precision` in bits, best head order), ``stated_bits`` and
``stated_over_true`` (the result's stated parameter error as the metric's figure, over the
true error: never under 1 for an honest figure), the estimate's kind, and where the error
comes from: ``before_refine_bits`` (the heads the refinement started from),
``floor_bits`` (the least-squares solution of the learner's own answers linearised at the
*true* heads, residuals in extended precision, dense solve: what any fit of those answers
reaches; the learner at it means the solver, the Gauss-Newton arithmetic and the matching
cost nothing), ``once_rounded_floor_bits`` (the same with every answer replaced by the true
heads' answer rounded once to float64: the box without its intermediate roundings),
``cond`` (the column-scaled Jacobian's condition number), ``box_noise_units`` (the rms of
answer minus exact answer, in units of 2^-53) and ``all_random_floor_bits`` (the floor of
as many answers on random sequences of the refinement's kind instead of the design's:
what another design with the same count could reach on this box).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

D, HEADS = 8, 6
_STREAM = 0x4242  # the all-random floor's sequences (no learner stream)


def _bits(error: float) -> float:
    return 60.0 if error == 0 else -math.log2(error)


def _floor(truth: list[Any], rows: Any, answers: np.ndarray) -> tuple[float, float]:
    """(bits, condition): the least-squares solution linearised at the true heads."""
    from verified_attn.multi_head.pipeline import refine
    from verified_attn.multi_head.sequence_fit import _jacobian

    r = refine.extended_residuals(truth, 0.0, dataclasses.replace(rows, answers=answers), False)
    J = _jacobian(truth, rows, False)[1]
    scale = np.linalg.norm(J, axis=0)
    step = np.linalg.lstsq(J / scale, r, rcond=None)[0] / scale
    largest = max(float(np.abs(x).max()) for h in truth for x in h)
    return _bits(float(np.abs(step).max()) / largest), float(np.linalg.cond(J / scale))


def run_seed(seed: int) -> dict[str, Any]:
    """One seed of the cell, learned and measured (see the module's docstring)."""
    from multi_head_float import random_box

    import verified_attn as va
    from verified_attn.models import MultiHeadAttention
    from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
    from verified_attn.multi_head.pipeline import refine
    from verified_attn.multi_head.sequence_fit import compress, polish_sequences
    from verified_attn.precision import relative_parameter_error, stated_relative_error

    truth = random_box(D, HEADS, seed)
    model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in truth])
    spied: dict[str, Any] = {}
    real = refine.gauss_newton

    def spy(heads: Any, beta: float, rows: Any, affine: bool, **kw: Any) -> Any:
        spied.update(start=[tuple(np.array(x) for x in h) for h in heads], rows=rows)
        return real(heads, beta, rows, affine, **kw)

    refine.gauss_newton = spy
    t0 = time.perf_counter()
    try:
        rec = learn_multi_head(va.Oracle(model, "float"), heads=HEADS, seed=seed)
    finally:
        refine.gauss_newton = real
    seconds = time.perf_counter() - t0
    got = [tuple(h[:2]) for h in rec.parameters["heads"]]
    true = relative_parameter_error(got, truth)
    stated = stated_relative_error(rec.parameter_error_estimate, got)
    row: dict[str, Any] = {
        "seed": seed, "d": D, "H": HEADS, "queries": rec.queries,
        "follow_up": follow_up_query_bound(D, HEADS),
        "refinement": rec.queries_by_phase.get("refinement", 0),
        "polish": rec.queries_by_phase.get("polish", 0), "seconds": seconds,
        "parameter_error": true, "parameter_bits": _bits(true),
        "stated_bits": _bits(stated), "stated_over_true": stated / true if true else None,
        "kind": rec.certificate()["result"].get("parameter_error_estimate_kind"),
    }
    if "rows" in spied:
        rows = spied["rows"]
        exact = refine.extended_values(truth, 0.0, rows, False)
        seqs = polish_sequences(D, len(rows), seed, stream=_STREAM)
        ys = np.array([float(model.evaluate_batch(X[None])[0]) for X in seqs])
        floor, cond = _floor(truth, rows, rows.answers)
        row.update(
            before_refine_bits=_bits(relative_parameter_error(spied["start"], truth)),
            floor_bits=floor,
            once_rounded_floor_bits=_floor(truth, rows, np.asarray(exact, dtype=np.float64))[0],
            cond=cond,
            box_noise_units=float(np.sqrt(np.mean(
                (np.asarray(rows.answers - exact, dtype=np.float64) / 2.0**-53) ** 2))),
            all_random_floor_bits=_floor(truth, compress(seqs, ys), ys)[0],
        )
    return row


def summary(rows: list[dict[str, Any]], goal: float = 51.0) -> dict[str, Any]:
    """The cell: seeds, how many meet ``goal`` bits, the median and worst bits, the stated
    figure over the true error (smallest, median, largest: never under 1), and the medians
    of the floors."""
    pb = [r["parameter_bits"] for r in rows]
    ratio = [r["stated_over_true"] for r in rows if r["stated_over_true"] is not None]

    def med(key: str) -> float | None:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return float(np.median(vals)) if vals else None

    return {
        "d": D, "H": HEADS, "seeds": len(rows), "goal_bits": goal,
        "met_goal": sum(b >= goal for b in pb),
        "missed": [r["seed"] for r in rows if r["parameter_bits"] < goal],
        "median_parameter_bits": float(np.median(pb)), "min_parameter_bits": min(pb),
        "min_stated_over_true": min(ratio), "median_stated_over_true": float(np.median(ratio)),
        "max_stated_over_true": max(ratio),
        "median_floor_bits": med("floor_bits"),
        "median_once_rounded_floor_bits": med("once_rounded_floor_bits"),
        "median_all_random_floor_bits": med("all_random_floor_bits"),
        "all_random_met_goal": sum(r.get("all_random_floor_bits", 0) >= goal for r in rows),
        "max_queries": max(r["queries"] for r in rows), "follow_up": rows[0]["follow_up"],
    }


def merge(path: Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``path`` (if any) with ``new`` replacing those of the same seed, sorted."""
    old = json.loads(path.read_text())["runs"] if path.exists() else []
    seeds = {r["seed"] for r in new}
    return sorted([r for r in old if r["seed"] not in seeds] + new, key=lambda r: r["seed"])

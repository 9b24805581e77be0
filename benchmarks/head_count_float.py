"""Benchmark of the float head count (issue 12): how often the Loewner rule finds the number
of heads from ``max_heads=``, never more than there are, and what it costs.

Run ``python benchmarks/head_count_float.py`` (full: about 5 minutes on 2 cores) or
``--quick`` (smoke sizes). Writes ``benchmarks/results/head_count_float.json`` and
``head_count_float.png``.

1. Random boxes, d in (4, 8, 16), true H in 1..8, max_heads in H..8: W_h ~ N(0, 1/d),
   v_h ~ N(0, 1) (``default_rng([seed, d, H])``), answered in float64 (``Oracle(model,
   "float")``) and in float32 (every head computed in float32, declared
   ``unit_roundoff=2^-24``, rtol 1e-4).
2. ``torch.nn.MultiheadAttention(E, H)`` for E in (4, 8, 16) and H | E, H <= 8 (default
   initialisation, biases N(0, 1), readout r ~ N(0, I)), through
   ``verified_attn.adapters.torch.attention_oracle`` in float64 and float32, max_heads in
   (H, 8).
3. End to end: ``learn_multi_head(max_heads=H + 2)`` against ``learn_multi_head(heads=H)``
   on random float64 boxes (d = 4, H = 1..4; d = 8, H = 1..3): does counting first cost
   any successes?

Per count (the JSON keeps the summary per box kind, d and H, and every miss): the count or
the refusal's class; ``over`` (count > H: must never happen),
``under``; the queries (``4 (2 max_heads + 6)``); the deciding pair's margin
``sigma_H / floor`` and the largest ``sigma_(H + 1) / floor`` over the pairs (the tail:
how far under the floor the singular values beyond the truth stay); seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, write_json

import verified_attn as va
from verified_attn.errors import VerifiedAttnError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.head_count_float import (
    count_rule,
    head_count_queries,
    probe_spectra,
)
from verified_attn.oracle_wrappers import float32_multi_head_oracle


def random_heads(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng([seed, d, H])
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]


def float64_oracle(heads: list[tuple[np.ndarray, np.ndarray]]) -> va.Oracle:
    return va.Oracle(MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads]), "float")


def float32_oracle(heads: list[tuple[np.ndarray, np.ndarray]], d: int) -> va.Oracle:
    """Every head's scores, softmax and values in float32; declared as a float32 box."""
    return float32_multi_head_oracle(heads)


def torch_oracle(E: int, H: int, seed: int, dtype: str) -> va.Oracle:
    import torch

    from verified_attn.adapters.torch import attention_oracle

    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    r = np.random.default_rng(seed + 100).standard_normal(E)
    return attention_oracle(mha, r, dtype=dtype)


def count_row(oracle: va.Oracle, H: int, H0: int, seed: int, **info: Any) -> dict[str, Any]:
    row: dict[str, Any] = {**info, "H": H, "max_heads": H0, "seed": seed}
    t0 = time.perf_counter()
    try:
        sp = probe_spectra(oracle, H0, seed=seed)
    except VerifiedAttnError as exc:  # refused while measuring (not a count)
        row.update(count=None, refusal=type(exc).__name__, message=str(exc)[:200])
        row["seconds"] = time.perf_counter() - t0
        return row
    floors = sp.floors()
    row["queries"] = sp.queries
    # The tail: singular values beyond the truth, relative to their floor (< 1 is the
    # requirement; how far under it is the margin of the noise model).
    row["tail"] = max(
        (
            max(sv[H:], default=0.0) / tau
            for sv, tau in zip(sp.singular_values, floors, strict=True)
        ),
        default=0.0,
    )
    row["signal"] = max(sv[H - 1] / tau for sv, tau in zip(sp.singular_values, floors, strict=True))
    row["noise_over_unit"] = sp.noise / sp.unit_noise if sp.unit_noise else None
    try:
        count, _, gap, per_pair = count_rule(sp.singular_values, floors, max_heads=H0)
    except VerifiedAttnError as exc:
        row.update(count=None, refusal=type(exc).__name__, message=str(exc)[:200])
    else:
        row.update(count=count, gap=gap, per_pair=per_pair, refusal=None)
    row["seconds"] = time.perf_counter() - t0
    return row


def end_to_end(d: int, H: int, seed: int) -> dict[str, Any]:
    heads = random_heads(d, H, seed)
    row: dict[str, Any] = {"d": d, "H": H, "max_heads": H + 2, "seed": seed}
    for key, kwargs in (("known", {"heads": H}), ("counted", {"max_heads": H + 2})):
        oracle = float64_oracle(heads)
        t0 = time.perf_counter()
        try:
            rec = learn_multi_head(oracle, seed=seed, **kwargs)
        except VerifiedAttnError as exc:
            row[key] = {"learned": False, "refusal": type(exc).__name__}
        else:
            row[key] = {
                "learned": True,
                "H": rec.H,
                "queries": rec.queries,
                "head_count_queries": rec.queries_by_phase.get("head-count", 0),
                "verification_error": rec.verification_error,
            }
        row[key]["seconds"] = time.perf_counter() - t0
        row[key]["asked"] = oracle.queries
    return row


def misses(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["count"] != r["H"]]


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["kind"], r["dtype"], r["d"], r["H"]) for r in rows})
    for kind, dtype, d, H in keys:
        group = [r for r in rows if (r["kind"], r["dtype"], r["d"], r["H"]) == (kind, dtype, d, H)]
        counted = [r for r in group if r["count"] is not None]
        tails = [r["tail"] for r in group if "tail" in r]
        out.append(
            {
                "kind": kind,
                "dtype": dtype,
                "d": d,
                "H": H,
                "runs": len(group),
                "correct": sum(r["count"] == H for r in counted),
                "under": sum(r["count"] < H for r in counted),
                "over": sum(r["count"] > H for r in counted),
                "refused": sorted({r["refusal"] for r in group if r["count"] is None}),
                "refusals": sum(r["count"] is None for r in group),
                "max_tail_over_floor": max(tails, default=None),
                # sigma_H / floor at the best pair: how far above the floor the weakest
                # true head showed (< 1: not counted)
                "min_signal_over_floor": min(
                    (r["signal"] for r in group if "signal" in r), default=None
                ),
                "queries": sorted({r["queries"] for r in group if "queries" in r}),
                "median_seconds": float(np.median([r["seconds"] for r in group])),
            }
        )
    return out


def plot(summary: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(s["kind"], s["dtype"]) for s in summary})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (kind, dtype) in zip(axes, panels, strict=True):
        for d in sorted({s["d"] for s in summary if (s["kind"], s["dtype"]) == (kind, dtype)}):
            rows = [s for s in summary if (s["kind"], s["dtype"], s["d"]) == (kind, dtype, d)]
            ax.plot(
                [s["H"] for s in rows],
                [s["correct"] / s["runs"] for s in rows],
                marker="o",
                label=f"d={d}",
            )
            over = [s for s in rows if s["over"]]
            ax.scatter([s["H"] for s in over], [1.02] * len(over), marker="x", color="red")
        ax.set_title(f"{kind} {dtype}", fontsize=9)
        ax.set_xlabel("true heads H")
        ax.set_ylim(-0.05, 1.08)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("count == H (fraction)")
    fig.suptitle("float head count (Loewner rule): found == truth; overcounts: none", fontsize=9)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "head_count_float.png", dpi=120)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--seeds", type=int, default=5, help="seeds per size")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    out = output_dir(args.out, args.quick, "head_count_float")
    seeds = range(args.seed, args.seed + (2 if args.quick else args.seeds))
    dims = (4,) if args.quick else (4, 8, 16)
    max_H = 3 if args.quick else 8
    rows: list[dict[str, Any]] = []
    for d in progress(dims, "random boxes", unit="d"):
        for H in range(1, max_H + 1):
            for H0 in range(H, max_H + 1):
                for s in seeds:
                    heads = random_heads(d, H, s)
                    rows.append(
                        count_row(
                            float64_oracle(heads), H, H0, s, kind="random", dtype="float64", d=d
                        )
                    )
                    rows.append(
                        count_row(
                            float32_oracle(heads, d), H, H0, s, kind="random", dtype="float32", d=d
                        )
                    )
    try:
        import torch  # noqa: F401
    except ImportError:  # pragma: no cover - the torch extra is optional
        pass
    else:
        for E in progress(dims, "torch modules", unit="E"):
            for H in [h for h in range(1, max_H + 1) if E % h == 0]:
                for dtype in ("float64", "float32"):
                    for H0 in sorted({H, max_H}):
                        for s in seeds:
                            rows.append(
                                count_row(
                                    torch_oracle(E, H, s, dtype),
                                    H,
                                    H0,
                                    s,
                                    kind="torch",
                                    dtype=dtype,
                                    d=E,
                                )
                            )
    e2e_sizes = (
        [(4, 1), (4, 2)]
        if args.quick
        else [(4, H) for H in (1, 2, 3, 4)] + [(8, H) for H in (1, 2, 3)]
    )
    e2e_cells = [(d, H, s) for d, H in e2e_sizes for s in seeds]
    e2e = [end_to_end(d, H, s) for d, H, s in progress(e2e_cells, "end to end")]
    summary = summarise(rows)
    for s in summary:
        print(s)
    over = [r for r in rows if r["count"] is not None and r["count"] > r["H"]]
    data = {
        "meta": metadata(args.seed, quick=args.quick, seeds=len(seeds), pairs=4),
        "rule": (
            "count = the largest number of Loewner singular values above tau = 64 * noise * "
            "||K||_F at one of 4 seeded pairs, accepted with a gap sigma_count / "
            "sigma_(count + 1) >= 8 (verified_attn/multi_head/head_count_float.py)"
        ),
        "queries_formula": "4 (2 max_heads + 6)",
        "queries": {H0: head_count_queries(H0) for H0 in range(1, max_H + 1)},
        "overcounts": len(over),
        "counts": len(rows),
        "summary": summary,
        "end_to_end": e2e,
        # every run whose count is not the truth (undercounts, refusals); the others are
        # in the summary (the full list would be 20x the size of the other results)
        "misses": misses(rows),
    }
    write_json("head_count_float", data, out)
    if not args.no_plots:
        try:
            plot(summary, out)
        except ImportError as exc:  # pragma: no cover - matplotlib is optional
            print(f"no plot: {exc}", file=sys.stderr)
    if over:
        print(f"OVERCOUNT in {len(over)} runs: {over[:3]}", file=sys.stderr)
        sys.exit(1)
    return data


if __name__ == "__main__":
    main()

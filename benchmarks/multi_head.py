"""Benchmark of the multi-head room: query counts against bounds, times, precision needs.

Run ``python benchmarks/multi_head.py`` (full) or ``--quick`` (smoke sizes). Writes
``benchmarks/results/multi_head.json`` and ``multi_head_queries.png``.

1. Canonical recovery (``learn_multi_head``, certified, 256 bits, then 512 if needed):
   for each (d, H), the learning queries measured on the oracle against ours
   ``d + 2H(d^2 + d - 1)``, the follow-up's ``4Hd^2 - 2H + 1`` and ``H (d^2 + d)``;
   exactness (``==`` the canonical form), seconds, precision used, and the certificate
   re-checked (``verify_certificate``, seconds) without the oracle.
   Variants: heads with equal v (every residue ties: the worst case, one tie-link query
   per pair, against the limit ``d + 2H(d^2 + d - 1) + d(d - 1)``) and affine heads
   (score biases c_h, output bias beta: ``d + 1 + 2H(d^2 + 2d - 1)``, + d^2 tie links).
2. Orthogonal subspaces (``learn_orthogonal_heads``): queries against ``sum (r^2 + r)``.
3. ``local_dimension`` seconds, exact vs certified, for the counterexample kinds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, plot_path, progress, write_json

from verified_attn.certificates import verify_certificate
from verified_attn.errors import PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head import (
    canonical_form,
    canonical_query_bound,
    canonical_query_limit,
    counterexample,
    follow_up_query_bound,
    learn_multi_head,
    learn_orthogonal_heads,
    local_dimension,
    orthogonal_heads_model,
    orthogonal_query_bound,
    random_multi_head,
)
from verified_attn.oracle import Oracle


def canonical_sweep(sizes: list[tuple[int, int]], seed: int) -> list[dict[str, Any]]:
    rows = []
    for d, H in progress(sizes, "canonical"):
        model = random_multi_head(d, H, seed + 31 * d + H)
        for prec in (256, 512, 1024):
            t0 = time.perf_counter()
            try:
                rec = learn_multi_head(
                    Oracle(model, "certified", precision=prec), heads=H, seed=seed
                )
            except PrecisionExhausted as exc:
                rows.append({"d": d, "H": H, "precision": prec, "error": str(exc)[:200]})
                continue
            learned = time.perf_counter() - t0
            t1 = time.perf_counter()
            check = verify_certificate(rec.certificate())
            rows.append(
                {
                    "d": d,
                    "H": H,
                    "precision": prec,
                    "queries": rec.queries,
                    "verification_queries": rec.verification_queries,
                    "ours": canonical_query_bound(d, H),
                    "limit": canonical_query_limit(d, H),
                    "follow_up": follow_up_query_bound(d, H),
                    "parameters": H * (d * d + d),
                    "by_phase": rec.queries_by_phase,
                    "max_length": rec.max_length,  # the call's, verification included
                    "exact": rec.heads == canonical_form(model).heads,
                    "certificate_ok": check.ok,
                    "seconds": learned,
                    "certificate_seconds": time.perf_counter() - t1,
                }
            )
            break
    return rows


def _variant(d: int, H: int, seed: int, *, equal_v: bool, affine: bool) -> MultiHeadAttention:
    base = random_multi_head(d, H, seed)
    shift = random_multi_head(d, H, seed + 1)  # its v's serve as score biases c_h
    v0 = base.head_models[0].v
    heads = [
        (m.W, v0 if equal_v else m.v, *((s.v,) if affine else ()))
        for m, s in zip(base.head_models, shift.head_models, strict=True)
    ]
    return MultiHeadAttention(heads, beta=-2 if affine else None)


def variant_sweep(sizes: list[tuple[int, int]], seed: int) -> list[dict[str, Any]]:
    """Equal-v (worst case: all tie links) and affine heads, certified, 256 bits."""
    rows = []
    for d, H in progress(sizes, "variants"):
        for equal_v, affine in ((True, False), (False, True), (True, True)):
            model = _variant(d, H, seed + 31 * d + H, equal_v=equal_v, affine=affine)
            t0 = time.perf_counter()
            rec = learn_multi_head(Oracle(model, "certified"), heads=H, seed=seed)
            form = canonical_form(model)
            rows.append(
                {
                    "d": d,
                    "H": H,
                    "equal_v": equal_v,
                    "affine": affine,
                    "queries": rec.queries,
                    "tie_links": rec.queries_by_phase.get("tie links", 0),
                    "ours": canonical_query_bound(d, H, affine=affine),
                    "limit": canonical_query_limit(d, H, affine=affine),
                    "follow_up": follow_up_query_bound(d, H),
                    "parameters": rec.parameter_count,
                    "exact": rec.heads == form.heads and (rec.beta or 0) == form.beta,
                    "seconds": time.perf_counter() - t0,
                }
            )
    return rows


def orthogonal_sweep(cases: list[tuple[int, list[int]]], seed: int) -> list[dict[str, Any]]:
    rows = []
    for d, ranks in progress(cases, "orthogonal"):
        model, bases = orthogonal_heads_model(d, ranks, seed + d)
        t0 = time.perf_counter()
        rec = learn_orthogonal_heads(Oracle(model, "certified"), bases, seed=seed)
        rows.append(
            {
                "d": d,
                "ranks": ranks,
                "queries": rec.queries,
                "bound": orthogonal_query_bound(ranks),
                "unrestricted": len(ranks) * (d * d + d),
                "by_phase": rec.queries_by_phase,
                "exact": rec.heads == model.heads,
                "seconds": time.perf_counter() - t0,
                "certificate_ok": verify_certificate(rec.certificate()).ok,
            }
        )
    return rows


def dimension_times(sizes: list[tuple[int, int]], seed: int) -> list[dict[str, Any]]:
    rows = []
    kinds = ("permutation", "shared-score-split", "dead-head", "cancelling-values")
    for kind in progress(kinds, "dimension times", unit="kind"):
        for d, H in sizes:
            pair = counterexample("multi-head", d=d, heads=H, kind=kind, seed=seed)
            for arith in ("exact", "certified"):
                t0 = time.perf_counter()
                r = local_dimension(pair.first, arithmetic=arith, seed=seed)
                rows.append(
                    {
                        "kind": kind,
                        "d": d,
                        "H": H,
                        "arithmetic": arith,
                        "rank": r.rank,
                        "kernel": r.kernel_dimension,
                        "fibre": r.dimension,
                        "seconds": time.perf_counter() - t0,
                    }
                )
    return rows


def plot(rows: list[dict[str, Any]], out: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ok = [r for r in rows if "queries" in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    for H in sorted({r["H"] for r in ok}):
        sub = sorted((r for r in ok if r["H"] == H), key=lambda r: r["d"])
        ds = [r["d"] for r in sub]
        (line,) = ax.plot(ds, [r["queries"] for r in sub], "o-", label=f"measured, H={H}")
        ax.plot(
            ds,
            [r["follow_up"] for r in sub],
            "--",
            color=line.get_color(),
            label=f"4Hd²-2H+1, H={H}",
        )
        ax.plot(
            ds, [r["parameters"] for r in sub], ":", color=line.get_color(), label=f"H(d²+d), H={H}"
        )
    ax.set_xlabel("d")
    ax.set_ylabel("learning queries")
    ax.set_title("Canonical multi-head recovery (certified, exact result)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return str(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:  # never over the recorded results, never untracked files in the checkout
        args.out = output_dir(args.out, True, "multi_head")
    if args.quick:
        sizes = [(1, 1), (2, 2), (3, 2)]
        ortho = [(3, [1, 2])]
        dims = [(2, 2)]
        variants = [(2, 2), (3, 2)]
    else:
        sizes = [(d, H) for H in (1, 2, 3) for d in (1, 2, 3, 4, 6, 8)] + [(4, 4), (8, 4), (16, 2)]
        ortho = [(3, [1, 2]), (4, [2, 2]), (5, [1, 1, 2]), (8, [2, 3, 3])]
        dims = [(2, 2), (3, 2), (2, 3)]
        variants = [(2, 2), (3, 2), (4, 2), (2, 3), (3, 3), (6, 2)]
    rows = canonical_sweep(sizes, args.seed)
    data = {
        "meta": metadata(args.seed, arithmetic="certified", precision="256, then 512, 1024"),
        "canonical": rows,
        "variants": variant_sweep(variants, args.seed),
        "orthogonal": orthogonal_sweep(ortho, args.seed),
        "local_dimension": dimension_times(dims, args.seed),
    }
    if args.out is not None:
        import json

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "multi_head.json").write_text(json.dumps(data, indent=1, default=str))
        data["plot"] = plot(rows, args.out / "multi_head_queries.png")
    else:
        write_json("multi_head", data)
        data["plot"] = plot(rows, plot_path("multi_head_queries"))
    return data


if __name__ == "__main__":
    result = main()
    for r in result["canonical"]:
        print(r)
    for r in result["variants"]:
        print(r)
    for r in result["orthogonal"]:
        print(r)

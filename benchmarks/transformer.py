"""One-layer Transformer benchmark: queries of "paper" vs "direct" vs parameter counts, times.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> data = main(["--quick", "--out", str(out), "--no-plots"])
>>> all(r["attention_queries"] == 2 * (r["d"] ** 2 + r["d"]) for r in data["rows"]
...     if r.get("method") == "paper")
True
>>> all(r["exact"] and r["certificate_ok"] and r["counts_add_up"] for r in data["rows"]
...     if "kind" not in r)
True
>>> all(r["equal"] and r["queries"] == r["formula"] for r in data["rows"]
...     if r.get("kind") == "bias-free-ffn")
True

For each (d, m) a random rational Transformer (value dimension e = d, entries with small
denominators) is learned with both methods in certified arithmetic at 256 bits; every run
checks W and the canonical FFN with ``==``. Recorded per run: learning queries (FFN part,
attention part), verification queries, the raw parameter count d^2 + d e + e m + m, the
functional count d^2 + m'(d + 1) (m' = canonical width), ``rec.bound`` (the attention
formula plus the FFN learner's worst case at m'), the median wall time, and the time to
re-check the run's certificate without the oracle. The bias-free FFN rows (kind
``bias-free-ffn``, seeds 0, 1, 2 per size) learn the same Transformers' FFNs alone in exact
arithmetic: learning queries, the :func:`~verified_attn.transformer.relu.ffn_query_count`
of their counts, and the ratio to the canonical parameter count m'(d + 1). Rows of other
kinds already in the JSON are kept.
Target (issue 5): d = 16, m = 32 certified-exact under 30 s on 2 cores. Run::

    /tmp/venv/bin/python benchmarks/transformer.py            # full (~1 min)
    /tmp/venv/bin/python benchmarks/transformer.py --quick    # seconds
    /tmp/venv/bin/python benchmarks/transformer.py --multi-head-only   # the multi-head rows
                                     # (benchmarks/_transformer_heads.py), merged into the JSON

Exit status 1 if a correctness check fails; a missed time target is recorded, not fatal.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, metadata, output_dir, plot_path, progress, timed, write_json
from _transformer_biased import biased_rows
from _transformer_heads import (  # run_multi_head: the rows, for the tests
    MULTI_HEAD_SIZES,
    QUICK_SIZES,
    in_child,
    merge,
    run_multi_head,  # noqa: F401
)
from _transformer_heads_float import FLOAT_SIZES, in_child_float

import verified_attn as va
from verified_attn.transformer import learn_transformer
from verified_attn.transformer.claims import random_transformer
from verified_attn.transformer.relu import canonical_network, ffn_query_count, learn_relu_ffn

NAME = "transformer"
PRECISION = 256
TARGET = ((16, 32), 30.0)
FULL = [(2, 4), (4, 8), (8, 16), (12, 24), (16, 32)]
QUICK = [(2, 4), (3, 6)]
#: Seeds of the bias-free FFN rows (kind "bias-free-ffn"), per size.
FFN_SEEDS = (0, 1, 2)


def run_one(d: int, m: int, method: str, seed: int, repeats: int) -> dict[str, Any]:
    """Learn one random instance; counts from the oracle object, times median of repeats."""
    T = random_transformer(d, m, np.random.default_rng([seed, d, m]))
    oracles: list[va.Oracle] = []

    def go() -> Any:
        oracle = va.Oracle(T, "certified", precision=PRECISION)
        oracles.append(oracle)
        return learn_transformer(oracle, method=method, seed=seed)

    rec, median, times = timed(go, repeats)
    exact = rec.W == T.W and rec.network == canonical_network(T)
    width = rec.network.width
    # The certificate is re-checked without the oracle; its time is recorded too.
    check, cert_seconds, _ = timed(lambda: va.verify_certificate(rec.certificate()), 1)
    return {
        "d": d,
        "m": m,
        "method": method,
        "exact": bool(exact),
        "learning_queries": rec.queries,
        "ffn_queries": rec.ffn_queries,
        "attention_queries": rec.attention_queries,
        "attention_formula": rec.attention_bound,
        "verification_queries": rec.verification_queries,
        "oracle_queries": oracles[-1].queries,
        "counts_add_up": oracles[-1].queries == rec.queries + rec.verification_queries,
        "bound": rec.bound,
        "certificate_ok": bool(check.ok),
        "certificate_seconds": cert_seconds,
        "queries_by_phase": rec.queries_by_phase,
        "canonical_width": width,
        "raw_parameter_count": T.parameter_count,
        "functional_parameter_count": d * d + width * (d + 1),
        "ffn_reference_count": width * (d + 1),
        "ffn_ratio": rec.ffn_queries / (width * (d + 1)) if width else None,
        "median_seconds": median,
        "seconds": times,
    }


def run_ffn(d: int, m: int, seed: int) -> dict[str, Any]:
    """The bias-free FFN learner alone (exact) on the FFN of :func:`run_one`'s Transformer:
    its learning queries against the formula of its counts and the canonical parameter
    count m'(d + 1); the learned network compared with ``==``."""
    g = random_transformer(d, m, np.random.default_rng([seed, d, m])).ffn()
    rec, seconds, _ = timed(lambda: learn_relu_ffn(va.Oracle(g, "exact"), seed=seed), 1)
    params = rec.parameter_count
    return {
        "d": d,
        "m": m,
        "seed": seed,
        "kind": "bias-free-ffn",
        "arithmetic": "exact",
        "equal": bool(rec.network == canonical_network(g)),
        "verified": bool(rec.verified),
        "attempts": rec.attempts,
        "canonical_width": rec.network.width,
        "queries": rec.queries,
        "line_counts": rec.line_counts,
        "formula": ffn_query_count(d, **rec.line_counts) if rec.attempts == 1 else None,
        "parameter_count": params,
        "ratio": rec.queries / params,
        "seconds": seconds,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--biased", action="store_true", help="also the FFN-bias rows")
    parser.add_argument(
        "--biased-only",
        action="store_true",
        help="only the FFN-bias rows (seeds 0, 1, 2), replacing those of the JSON",
    )
    parser.add_argument("--multi-head", action="store_true", help="also the multi-head rows")
    parser.add_argument(
        "--multi-head-only",
        action="store_true",
        help="only the multi-head rows, replacing those of the JSON (the others kept)",
    )
    parser.add_argument(
        "--multi-head-float-only",
        action="store_true",
        help="only the float multi-head rows (random boxes, torch blocks), replacing those",
    )
    parser.add_argument(
        "--float-rows",
        default=None,
        help="with --multi-head-float-only: only these rows, as source:d:H:seed separated by "
        "commas (e.g. random:16:2:0), replacing those rows alone",
    )
    args = parser.parse_args(argv)
    args.out = output_dir(args.out, args.quick, NAME)
    if args.biased_only:
        return _biased_only(args)
    if args.multi_head_only:
        return _multi_head_only(args)
    if args.multi_head_float_only:
        return _multi_head_float_only(args)
    sizes = QUICK if args.quick else FULL
    cells = [(d, m, method) for d, m in sizes for method in ("paper", "direct")]
    rows = [
        run_one(d, m, method, args.seed, 1 if args.quick else 3)
        for d, m, method in progress(cells, "cells")
    ]
    ffn_specs = [(d, m, s) for d, m in sizes for s in ((0,) if args.quick else FFN_SEEDS)]
    rows += [run_ffn(*spec) for spec in progress(ffn_specs, "bias-free FFN rows")]
    if args.biased:
        rows += biased_rows(args.quick)
    if args.multi_head:
        rows += [in_child(*spec) for spec in (QUICK_SIZES if args.quick else MULTI_HEAD_SIZES)]
    plain = [r for r in rows if r.get("kind") is None]
    target_rows = [r for r in plain if (r["d"], r["m"]) == TARGET[0]]
    # Rows of the kinds not run now (and their meta) are kept from the JSON written before.
    path = args.out / f"{NAME}.json"
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    run = {r.get("kind") for r in rows}
    data = {
        **{k: v for k, v in old.items() if k.endswith("_meta")},
        "benchmark": NAME,
        "meta": metadata(args.seed, arithmetic="certified", precision=PRECISION),
        "rows": [r for r in old["rows"] if r.get("kind") not in run] + rows,
        "target": {
            "size": {"d": TARGET[0][0], "m": TARGET[0][1]},
            "seconds": TARGET[1],
            "met": {r["method"]: r["median_seconds"] <= TARGET[1] for r in target_rows},
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if args.out == RESULTS:
        write_json(NAME, data)
    else:
        (args.out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
    if not args.no_plots:
        _plot(plain, args.out)
    return data


def _biased_only(args: argparse.Namespace) -> dict[str, Any]:
    """The FFN-bias rows (``benchmarks/_transformer_biased.py``), merged into the JSON."""
    rows = biased_rows(args.quick)
    meta = metadata(args.seed, arithmetic="exact and float64", boxes="random_biased_ffn")
    args.out.mkdir(parents=True, exist_ok=True)
    data = merge(args.out / f"{NAME}.json", rows, meta, kind="biased")
    write_json(NAME, data, args.out)
    return data


def _multi_head_only(args: argparse.Namespace) -> dict[str, Any]:
    """The multi-head rows (each in its own process), merged into ``transformer.json``."""
    specs = QUICK_SIZES if args.quick else MULTI_HEAD_SIZES
    rows = [in_child(*spec) for spec in progress(specs, "multi-head rows")]
    meta = metadata(
        args.seed, arithmetic="exact and certified", boxes="random_multi_head_transformer"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    data = merge(args.out / f"{NAME}.json", rows, meta)
    write_json(NAME, data, args.out)
    return data


def _multi_head_float_only(args: argparse.Namespace) -> dict[str, Any]:
    """The float multi-head rows (each in its own process), merged into ``transformer.json``
    (rows of kind ``multi-head-float`` replaced, the others and their meta kept)."""
    specs = FLOAT_SIZES[:1] if args.quick else FLOAT_SIZES
    if args.float_rows:  # e.g. "random:16:2:0,torch:16:4:0"
        specs = [_float_spec(x) for x in args.float_rows.split(",")]
    rows = [in_child_float(*spec) for spec in progress(specs, "float multi-head rows")]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{NAME}.json"
    data = json.loads(path.read_text()) if path.exists() else {"benchmark": NAME, "rows": []}
    run = {tuple(spec) for spec in specs}

    def rerun(r: dict[str, Any]) -> bool:  # a float row of this run (all of them without --float-rows)
        key = (r.get("source"), r.get("d"), r.get("H"), r.get("seed"))
        return r.get("kind") == "multi-head-float" and (not args.float_rows or key in run)

    kept = [r for r in data["rows"] if not rerun(r)]
    if args.float_rows:  # in FLOAT_SIZES order among the float rows kept
        order = {tuple(spec): k for k, spec in enumerate(FLOAT_SIZES)}
        floats = sorted(
            [r for r in kept if r.get("kind") == "multi-head-float"] + rows,
            key=lambda r: order.get((r["source"], r["d"], r["H"], r["seed"]), len(order)),
        )
        kept = [r for r in kept if r.get("kind") != "multi-head-float"]
        rows = floats
    data["rows"] = kept + rows
    data["multi_head_float_meta"] = metadata(
        args.seed, arithmetic="float64", boxes="Gaussian MultiHeadTransformer, torch blocks"
    )
    write_json(NAME, data, args.out)
    return data


def _float_spec(text: str) -> tuple[str, int, int, int]:
    """``source:d:H:seed`` (``--float-rows``) as a FLOAT_SIZES entry."""
    parts = text.strip().split(":")
    if len(parts) != 4 or parts[0] not in ("random", "torch"):
        raise SystemExit(f"--float-rows: {text!r} is not source:d:H:seed (source random or torch)")
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


def _plot(rows: list[dict[str, Any]], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plots are optional
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for method, style in (("paper", "o-"), ("direct", "s-")):
        sel = [r for r in rows if r["method"] == method]
        ds = [r["d"] for r in sel]
        ax1.plot(ds, [r["learning_queries"] for r in sel], style, label=f"{method}: learning")
        ax2.plot(ds, [r["median_seconds"] for r in sel], style, label=method)
    sel = [r for r in rows if r["method"] == "paper"]
    ax1.plot(
        [r["d"] for r in sel],
        [r["functional_parameter_count"] for r in sel],
        "k--",
        label="d^2 + m'(d+1)",
    )
    ax1.set(xlabel="d (m = 2d)", ylabel="queries", title="queries vs parameters")
    ax2.axhline(TARGET[1], color="r", ls=":", label="target (d=16, m=32)")
    ax2.set(xlabel="d (m = 2d)", ylabel="median seconds", title="certified, 256 bits")
    for ax in (ax1, ax2):
        ax.legend()
    fig.tight_layout()
    target = plot_path(NAME) if out == RESULTS else out / f"{NAME}.png"
    fig.savefig(target, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    result = main()
    if "--multi-head-float-only" in sys.argv:
        floats = [r for r in result["rows"] if r.get("kind") == "multi-head-float"]
        for r in floats:
            print({k: r.get(k) for k in ("source", "d", "H", "queries", "refused", "seconds")})
        # a refusal is a result; a learned row must meet the float rule on fresh sequences
        # (a row the extra fresh sequences refute has no ratio: it fails the run)
        met = [r.get("fresh_max_ratio", math.inf) <= 1 for r in floats if "refused" not in r]
        sys.exit(0 if all(met) else 1)
    if "--biased-only" in sys.argv:
        biased = [r for r in result["rows"] if r.get("kind") == "biased"]
        for r in biased:
            print({k: r.get(k) for k in ("d", "m", "arithmetic", "seed", "ffn_queries",
                                         "transformer_queries", "transformer_refused")})
        # exact rows must be equal where the truth meets the window the result assumes; a
        # refusal is a result
        sys.exit(
            0
            if all(
                (r.get("ffn_equal") is not False or not r.get("window_holds"))
                and r.get("transformer_W_equal") is not False
                for r in biased
            )
            else 1
        )
    if "--multi-head-only" in sys.argv:
        heads = [r for r in result["rows"] if r.get("kind") == "multi-head"]
        for r in heads:
            print(
                {
                    k: r.get(k)
                    for k in (
                        "arithmetic",
                        "d",
                        "H",
                        "m",
                        "seed",
                        "queries",
                        "parameter_count",
                        "seconds",
                        "peak_rss_mib",
                    )
                }
            )
        sys.exit(
            0 if all(r.get("equal_on_fresh") and r.get("certificate_ok") for r in heads) else 1
        )
    plain = [r for r in result["rows"] if r.get("kind") is None]
    ffn_rows = [r for r in result["rows"] if r.get("kind") == "bias-free-ffn"]
    ok = all(
        r["exact"]
        and r["counts_add_up"]
        and r["certificate_ok"]
        and r["attention_queries"] == r["attention_formula"]
        for r in plain
    ) and all(
        r["equal"] and r["verified"] and r["formula"] in (None, r["queries"]) for r in ffn_rows
    )
    for r in ffn_rows:
        print(
            f"bias-free FFN d={r['d']:>2} m={r['m']:>2} seed {r['seed']}: {r['queries']:>4} "
            f"queries / {r['parameter_count']:>4} parameters = {r['ratio']:.3f} "
            f"(width {r['canonical_width']}, equal {r['equal']})"
        )
    for r in plain:
        print(
            f"d={r['d']:>2} m={r['m']:>2} {r['method']:>6}: {r['learning_queries']:>5} learning "
            f"({r['ffn_queries']} FFN + {r['attention_queries']} attention), "
            f"params {r['functional_parameter_count']} functional / {r['raw_parameter_count']} raw, "
            f"bound {r['bound']}, {r['median_seconds']:.2f} s (certificate check "
            f"{r['certificate_seconds']:.2f} s), exact {r['exact']}"
        )
    sys.exit(0 if ok else 1)

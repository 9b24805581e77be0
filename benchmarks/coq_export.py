"""Coq check of exported single-head certificates: seconds of coqc per d.

For each d a random rational head (entries k/q, |k| <= 3q, q in 1..4, seeded) is learned in
certified arithmetic at 256 bits, its certificate exported with ``va.export_coq`` and
compiled with ``coqc`` against a built ``formal/`` (``Print Assumptions`` must list only
the whitelisted axioms). Recorded per d: the learning queries, the interval precision the
file uses, the file's size, the export time, coqc's wall time and its CPU time (one run each; the
machine is shared, so the wall times are upper bounds of an idle machine's).
Targets (issue 38): d = 4 in at most 60 s, d = 8 in at most 300 s. Run::

    /work/venv/bin/python benchmarks/coq_export.py            # d = 2, 4, 8
    /work/venv/bin/python benchmarks/coq_export.py --quick    # d = 2 only
    /work/venv/bin/python benchmarks/coq_export.py --low-rank-certified-only
    /work/venv/bin/python benchmarks/coq_export.py --exact-single-head-only
    /work/venv/bin/python benchmarks/coq_export.py --multi-head-fewer-only
    /work/venv/bin/python benchmarks/coq_export.py --multi-head-exact-only
    /work/venv/bin/python benchmarks/coq_export.py --transformer-pairs-only
    /work/venv/bin/python benchmarks/coq_export.py --multi-head-affine-only

The other exported kinds (exact single heads, exact and certified low-rank runs, hypothesis
and Prop 7.1 pairs, certified multi-head runs) are timed by ``_coq_export_kinds.py`` into
``kind_rows``; ``--exact-single-head-only`` runs only the exact single-head rows and puts
them in place of those rows of an existing ``coq_export.json`` (the other rows kept);
``--multi-head-fewer-only`` does the same for the row of a multi-head run that finds fewer
heads than ``max_heads``, ``--multi-head-exact-only`` for the exact multi-head rows,
``--transformer-pairs-only`` for the multi-head Transformer's canonical-form pairs and
the ffn-bias witness, ``--multi-head-affine-only`` for the certified affine multi-head rows.

Exit status 1 if a check fails or Coq is missing; a missed time target is recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, write_json
from _coq_export_kinds import (
    EXACT_HEAD,
    FEWER_KIND,
    LOW_RANK_CERT,
    LOW_RANK_CERT_QUICK,
    MULTI_HEAD,
    MULTI_HEAD_AFFINE,
    MULTI_HEAD_AFFINE_KIND,
    MULTI_HEAD_EXACT,
    MULTI_HEAD_EXACT_KIND,
    MULTI_HEAD_KIND,
    TRANSFORMER_PAIRS,
    exact_head_row,
    fewer_heads_row,
    hypothesis_row,
    multi_head_affine_row,
    multi_head_exact_row,
    multi_head_row,
    random_head,
    run_kinds,
    run_low_rank_cert,
)

import verified_attn as va
from verified_attn import formal
from verified_attn.formal.coq_check import compile_exported

NAME = "coq_export"
FULL = (2, 4, 8)
QUICK = (2,)
TARGETS = {4: 60.0, 8: 300.0}


def run_one(d: int, seed: int) -> dict[str, Any]:
    rec = va.learn_single_head(va.Oracle(random_head(d, seed), "certified"), seed=seed)
    t0 = time.perf_counter()
    text = va.export_coq(rec.certificate())
    export_s = time.perf_counter() - t0
    check = compile_exported(text)
    prec = re.search(r"i_prec (\d+)\)\.\n", text)
    return {
        "d": d,
        "learning_queries": rec.queries,
        "interval_precision": int(prec.group(1)) if prec else None,
        "file_bytes": len(text.encode()),
        "export_seconds": round(export_s, 3),
        "coqc_seconds": round(check.seconds, 2),
        "coqc_cpu_seconds": round(check.cpu_seconds or 0.0, 2),
        "ok": check.ok,
        "axioms": check.axioms,
        "target_seconds": TARGETS.get(d),
        "target_met": None if d not in TARGETS else check.seconds <= TARGETS[d],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--low-rank-certified-only",
        action="store_true",
        help="only the certified low-rank rows, into coq_export_low_rank_cert.json",
    )
    parser.add_argument(
        "--exact-single-head-only",
        action="store_true",
        help="only the exact single-head rows, in place of those of coq_export.json",
    )
    parser.add_argument(
        "--multi-head-fewer-only",
        action="store_true",
        help="only the fewer-heads multi-head row, in place of that row of coq_export.json",
    )
    parser.add_argument(
        "--multi-head-exact-only",
        action="store_true",
        help="only the exact multi-head rows, in place of those of coq_export.json",
    )
    parser.add_argument(
        "--multi-head-certified-only",
        action="store_true",
        help="only the default certified multi-head rows, in place of those of coq_export.json",
    )
    parser.add_argument(
        "--transformer-pairs-only",
        action="store_true",
        help="only the Transformer pairs and witness, in place of those of coq_export.json",
    )
    parser.add_argument(
        "--multi-head-affine-only",
        action="store_true",
        help="only the certified affine multi-head rows, in place of those of coq_export.json",
    )
    args = parser.parse_args(argv)
    if not formal.coq_available():
        print(f"Coq missing: {formal.COQ_INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(1)
    out = output_dir(args.out, args.quick, NAME)
    built = formal.build()
    if args.low_rank_certified_only:
        return _low_rank_cert_only(args, out)
    if args.exact_single_head_only:
        sizes = EXACT_HEAD[:1] if args.quick else EXACT_HEAD
        return _replace_rows(
            out, "single-head exact", [(exact_head_row, (d, args.seed)) for d in sizes]
        )
    if args.multi_head_certified_only:
        sizes = MULTI_HEAD[:1] if args.quick else MULTI_HEAD
        jobs = [(multi_head_row, (d, H, args.seed)) for d, H in sizes]
        return _replace_rows(out, MULTI_HEAD_KIND, jobs)
    if args.multi_head_exact_only:
        sizes = MULTI_HEAD_EXACT[:1] if args.quick else MULTI_HEAD_EXACT
        jobs = [(multi_head_exact_row, (d, H, args.seed)) for d, H in sizes]
        return _replace_rows(out, MULTI_HEAD_EXACT_KIND, jobs)
    if args.transformer_pairs_only:
        for theorem, kind in TRANSFORMER_PAIRS:
            data = _replace_rows(
                out, f"{theorem} {kind}", [(hypothesis_row, (theorem, kind, args.seed))]
            )
        return data
    if args.multi_head_affine_only:
        sizes = MULTI_HEAD_AFFINE[:1] if args.quick else MULTI_HEAD_AFFINE
        jobs = [(multi_head_affine_row, (d, H, args.seed)) for d, H in sizes]
        return _replace_rows(out, MULTI_HEAD_AFFINE_KIND, jobs)
    if args.multi_head_fewer_only:
        return _replace_rows(out, FEWER_KIND, [(fewer_heads_row, (args.seed,))])
    rows = []
    sizes = QUICK if args.quick else FULL
    for d in progress(sizes, "coqc per d", total=len(sizes)):
        rows.append(run_one(d, args.seed))
        print(rows[-1], file=sys.stderr)
    data = {
        "benchmark": NAME,
        "meta": metadata(args.seed, arithmetic="certified", precision=256),
        "formal_build_seconds": round(built.seconds, 1),
        "rows": rows,
        "kind_rows": run_kinds(args.quick, args.seed),
    }
    for row in data["kind_rows"]:
        print(row, file=sys.stderr)
    write_json(NAME, data, out)
    if not all(r["ok"] for r in rows + data["kind_rows"]):
        raise SystemExit(1)
    return data


def _low_rank_cert_only(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    specs = LOW_RANK_CERT_QUICK if args.quick else LOW_RANK_CERT
    rows = []
    for spec in progress(specs, "certified low-rank", total=len(specs)):
        rows += run_low_rank_cert([spec], args.seed)
        print(rows[-1], file=sys.stderr)
    data = {"benchmark": f"{NAME}_low_rank_cert", "meta": metadata(args.seed), "kind_rows": rows}
    write_json(f"{NAME}_low_rank_cert", data, out)
    if not all(r["ok"] for r in rows):
        raise SystemExit(1)
    return data


def _replace_rows(out: Path, kind: str, jobs: list[tuple[Any, tuple[Any, ...]]]) -> dict[str, Any]:
    """The rows of ``kind`` (one per job: function, arguments), in place of those of the
    existing results (else a new file)."""
    path = out / f"{NAME}.json"
    data = json.loads(path.read_text()) if path.exists() else {"benchmark": NAME, "rows": []}
    kept = [r for r in data.get("kind_rows", []) if r["kind"] != kind]
    rows = []
    for fn, fn_args in progress(jobs, kind, total=len(jobs)):
        rows.append(fn(*fn_args))
        print(rows[-1], file=sys.stderr)
    data["kind_rows"] = rows + kept
    write_json(NAME, data, out)
    if not all(r["ok"] for r in rows):
        raise SystemExit(1)
    return data


if __name__ == "__main__":
    main()

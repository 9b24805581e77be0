"""The multi-head rows of ``benchmarks/transformer.py``: va.learn_transformer(max_heads=H)
on random multi-head Transformers with FFN biases, each run in its own subprocess.

>>> row = run_multi_head(2, 2, 3, 0)
>>> row["equal_on_fresh"], row["certificate_ok"], row["queries"] == row["ffn_queries"] + row["attention_queries"]
(True, True, True)

Per row: the learning queries (FFN + cells) against the learned form's free parameters
(``rec.parameter_count``, ``H'(d^2 + d) + (H' - 1) d (m' + 1) + (m' + 1)(d + 1)``), the
bound, the verification queries, the learner's wall time, the certificate's build and
re-check times (``transformer-heads``, without the oracle) and the child process's peak
RSS (``ru_maxrss``, so that size's alone). The learned model is compared with ``==`` (exact
arithmetic, even for a certified run) with the box on three sequences it never asked.
Run from the repository root::

    python benchmarks/transformer.py --multi-head-only     # these rows only, merged into
                                                           # results/transformer.json
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: (arithmetic, d, H, m, seed) of the multi-head rows (V_h d x d, no score bias). Exact
#: and certified evaluation of H heads at length 16 grows like 16^H (H = 4 only at d = 2).
MULTI_HEAD_SIZES = [
    ("exact", 2, 2, 4, 0),
    ("exact", 3, 2, 6, 0),
    ("exact", 4, 3, 8, 0),
    ("exact", 8, 2, 8, 0),
    ("certified", 2, 4, 4, 0),
    ("certified", 8, 2, 16, 0),
    ("certified", 4, 2, 32, 0),
    ("certified", 16, 2, 8, 0),
]
QUICK_SIZES = MULTI_HEAD_SIZES[:1]


def run_multi_head(
    d: int, H: int, m: int, seed: int, arithmetic: str = "exact"
) -> dict[str, Any]:
    """One multi-head row, in this process (see the module doc)."""
    import verified_attn as va
    from verified_attn.errors import VerifiedAttnError
    from verified_attn.transformer.multi_head_hypotheses import random_multi_head_transformer

    T = random_multi_head_transformer(d, H, m, seed)
    row: dict[str, Any] = {
        "d": d, "H": H, "m": m, "seed": seed, "arithmetic": arithmetic, "kind": "multi-head",
        "raw_parameter_count": T.parameter_count,
    }
    oracle = va.Oracle(T, arithmetic)
    t0 = time.perf_counter()
    try:
        rec = va.learn_transformer(oracle, max_heads=H)
    except VerifiedAttnError as exc:
        return {**row, "refused": f"{type(exc).__name__}: {str(exc)[:200]}"}
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    cert = rec.certificate()
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    check = va.verify_certificate(cert)
    check_seconds = time.perf_counter() - t0
    rng = np.random.default_rng([seed, 5])
    fresh = [(rng.integers(-8, 9, (n, d)) / 4).tolist() for n in (2, 3, 5)]
    return {
        **row,
        "width": rec.network.width,
        "heads_found": len([h for h in rec.parameters["heads"] if any(h[1])]),
        **count_fields(rec),
        "counts_add_up": oracle.queries == rec.queries + rec.verification_queries,
        "seconds": seconds,
        "certificate_ok": bool(check.ok),
        "certificate_bytes": len(json.dumps(cert)),
        "certificate_build_seconds": build,
        "certificate_check_seconds": check_seconds,
        "equal_on_fresh": all(
            rec.model.evaluate(X, "exact") == T.evaluate(X, "exact") for X in fresh
        ),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_child(arithmetic: str, d: int, H: int, m: int, seed: int) -> dict[str, Any]:
    """:func:`run_multi_head` in a fresh Python process (its peak RSS that row's alone)."""
    return child_row("_transformer_heads", "run_multi_head", [d, H, m, seed, arithmetic])


def child_row(module: str, function: str, args: list[Any]) -> dict[str, Any]:
    """``benchmarks/<module>.py``'s ``function(*args)`` in a fresh Python process, its row
    read back as JSON (so that the row's ``ru_maxrss`` is its own peak RSS)."""
    spec = json.dumps(args)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); "
        f"from {module} import {function}; "
        f"print(json.dumps({function}(*json.loads({spec!r}))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {function}{spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def merge(
    path: Path, rows: list[dict[str, Any]], meta: dict[str, Any], kind: str = "multi-head"
) -> dict[str, Any]:
    """The JSON at ``path`` with its rows of ``kind`` replaced by ``rows`` (the other rows,
    and their ``meta``, as they were); ``<kind>_meta`` (dashes as underscores) describes the
    new rows."""
    data = json.loads(path.read_text()) if path.exists() else {"benchmark": "transformer",
                                                              "rows": []}
    data["rows"] = [r for r in data["rows"] if r.get("kind") != kind] + rows
    data[f"{kind.replace('-', '_')}_meta"] = meta
    return data


def count_fields(rec: Any) -> dict[str, Any]:
    """A Transformer result's query figures as the rows hold them (exact and float rows)."""
    return {
        "queries": rec.queries,
        "ffn_queries": rec.ffn_queries,
        "attention_queries": rec.attention_queries,
        "bound": rec.bound,
        "parameter_count": rec.parameter_count,
        "queries_per_parameter": rec.queries / rec.parameter_count,
        "verification_queries": rec.verification_queries,
    }

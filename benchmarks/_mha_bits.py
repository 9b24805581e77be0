"""The ``nn.MultiheadAttention`` float64 grid of the precision benchmark (issue 39).

Run through ``python benchmarks/multi_head_float_bits.py --mha`` (the grid below) or
``--mha-cells E,H,SEED ...``. Each module is ``multi_head_float.torch_box(E, H, seed)``
in float64 (PyTorch's default initialisation, biases N(0, 1), readout r ~ N(0, I)),
learned by ``learn_multi_head(attention_oracle(module, r), heads=H, seed=seed)``. Rows go
to ``benchmarks/results/multi_head_mha_bits.json`` (a row replaces the row of the same
E, H and seed; the others stay).

The truth is the module's weights mapped to heads *exactly*: ``W = W_k^T W_q / sqrt(h)``,
``c = W_k^T b_q / sqrt(h)``, ``v = W_v^T W_o^T r``, ``beta = r^T (W_o b_v + b_o)`` in
200-bit arithmetic (mpmath) from the stored float64 weights, then rounded once to
float64; not the adapter's float64 mapping, whose own rounding is 2^-51 to 2^-53 relative
(``mapping_bits``). The module's *answers* are its float64 evaluation (in_proj, the
scores, the softmax, out_proj, the readout), each rounded along the way; the metric is
:func:`verified_attn.precision.relative_parameter_error` over every head's ``(W, c, v)``,
best head order.

Per row, besides the queries, the follow-up's count ``4Hd^2 - 2H + 1`` and the phases'
queries (``refinement``, ``polish``): ``parameter_bits`` (the learned heads), ``before_refine_bits``
(the heads the refinement started from), ``floor_bits`` (the refinement's Gauss-Newton
from the *exact* heads on the very answers the learner had: what any fit of those answers
reaches; the learner at it means the floor is the module's rounding, not the learner's),
``once_rounded_floor_bits`` (the refinement's Gauss-Newton from the heads it started from,
on the same sequences answered by the exact heads rounded once to float64: a box without
the module's intermediate roundings; ``once_rounded_start`` says where it started, and
rows with ``"exact"`` started from the exact heads, where a step that does not lower the
residual is not kept and the figure can read 53), ``answer_rounding_bits`` (the median relative gap between the module's answers
and the exact heads' answers on those sequences).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

#: (E, H, seeds): E / H in {2, 4, 8, 16}, H in {2, 4, 8}, E <= 64. The seeds are not the
#: tests' (they use 0-5 and 11).
GRID: list[tuple[int, int, tuple[int, ...]]] = [
    (4, 2, (20, 21, 22)),
    (8, 2, (20, 21, 22)),
    (16, 2, (20, 21, 22)),
    (32, 2, (20, 21)),
    (8, 4, (20, 21, 22)),
    (16, 4, (20, 21, 22)),
    (32, 4, (20, 21)),
    (64, 4, (20,)),
    (16, 8, (20, 21)),
    (32, 8, (20,)),
    (64, 8, (20,)),
]
_PRECISION = 200  # mpmath bits for the exact mapping


def exact_heads(module: Any, r: np.ndarray) -> tuple[list[tuple[np.ndarray, ...]], float]:
    """The module's heads ``(W, v, c)`` and beta, mapped in 200-bit arithmetic from its
    float64 weights and rounded once to float64."""
    import mpmath

    mpmath.mp.prec = _PRECISION
    E, H = int(module.embed_dim), int(module.num_heads)
    hd = E // H

    def M(t: Any) -> Any:
        return mpmath.matrix(np.asarray(t, dtype=np.float64).tolist())

    Win = module.in_proj_weight.detach().double().numpy()
    bin_ = module.in_proj_bias.detach().double().numpy()
    Wo = module.out_proj.weight.detach().double().numpy()
    bo = module.out_proj.bias.detach().double().numpy()
    scale = 1 / mpmath.sqrt(hd)
    R = M(r.reshape(E, 1))
    heads = []
    for k in range(H):
        rows = slice(k * hd, k * hd + hd)
        Wq, Wk, Wv = M(Win[:E][rows]), M(Win[E : 2 * E][rows]), M(Win[2 * E :][rows])
        bq = M(bin_[:E][rows].reshape(hd, 1))
        W = scale * (Wk.T * Wq)
        c = scale * (Wk.T * bq)
        v = Wv.T * (M(Wo[:, rows]).T * R)
        f = lambda A: np.array(A.tolist(), dtype=np.float64)  # noqa: E731
        heads.append((f(W), f(v).ravel(), f(c).ravel()))
    beta = (R.T * (M(Wo) * M(bin_[2 * E :].reshape(E, 1)) + M(bo.reshape(E, 1))))[0]
    return heads, float(beta)


def _bits(got: list[Any], truth: list[Any]) -> float:
    from verified_attn.precision import bits, relative_parameter_error

    b = bits(relative_parameter_error([tuple(h[:3]) for h in got], truth))
    return 53.0 if b is None or math.isinf(b) else float(b)


def _diagnostics(spied: dict[str, Any], truth: list[Any], beta: float) -> dict[str, Any]:
    """The refinement's start and floors (module's answers, once-rounded answers)."""
    from verified_attn.multi_head.pipeline import refine

    if "rows" not in spied:
        return {"before_refine_bits": None, "floor_bits": None,
                "once_rounded_floor_bits": None, "once_rounded_start": None,
                "answer_rounding_bits": None}
    rows = spied["rows"]
    exact = refine.extended_values(truth, beta, rows, True)
    gap = np.abs(rows.answers - np.asarray(exact, dtype=np.float64))
    rel = float(np.median(gap / np.maximum(np.abs(rows.answers), 1.0)))
    once = dataclasses.replace(rows, answers=np.asarray(exact, dtype=np.float64))
    return {
        "before_refine_bits": _bits(spied["start"], truth),
        "floor_bits": _bits(spied["gauss_newton"](truth, beta, rows, True)[0], truth),
        "once_rounded_floor_bits": _bits(
            spied["gauss_newton"](spied["start"], spied["start_beta"], once, True)[0], truth
        ),
        "once_rounded_start": "learner",
        "answer_rounding_bits": 53.0 if rel == 0 else -math.log2(rel),
    }


def run_cell(E: int, H: int, seed: int) -> dict[str, Any]:
    """One module of the grid, learned and measured (see the module's docstring)."""
    from multi_head_float import torch_box

    from verified_attn.adapters.torch import attention_oracle, attention_parameters
    from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
    from verified_attn.multi_head.pipeline import refine
    from verified_attn.precision import bits, relative_parameter_error

    mha, r = torch_box(E, H, seed)
    mha = mha.double()
    truth, beta = exact_heads(mha, r)
    spied: dict[str, Any] = {"gauss_newton": refine.gauss_newton}

    def spy(heads: Any, b: float, rows: Any, affine: bool, **kw: Any) -> Any:
        spied.update(start=[tuple(np.array(x) for x in h) for h in heads], start_beta=b, rows=rows)
        return spied["gauss_newton"](heads, b, rows, affine, **kw)

    row: dict[str, Any] = {"kind": "torch", "dtype": "float64", "d": E, "H": H, "seed": seed}
    row.update(head_dim=E // H, follow_up=follow_up_query_bound(E, H))
    refine.gauss_newton = spy
    t0 = time.perf_counter()
    try:
        rec = learn_multi_head(attention_oracle(mha, r, dtype="float64"), heads=H, seed=seed)
    finally:
        refine.gauss_newton = spied["gauss_newton"]
    row["seconds"] = time.perf_counter() - t0
    got = rec.parameters["heads"]
    mapped = attention_parameters(mha, r)
    mapping = relative_parameter_error(
        list(zip(mapped.W, mapped.v, mapped.c, strict=True)), truth, ordered=True
    )
    row.update(
        learned=True,
        queries=rec.queries,
        refinement=rec.queries_by_phase.get("refinement", 0),
        polish=rec.queries_by_phase.get("polish", 0),
        parameter_error=relative_parameter_error([tuple(h[:3]) for h in got], truth),
        parameter_bits=_bits(got, truth),
        beta_error=abs(float(rec.parameters.get("beta", 0.0)) - beta) / max(abs(beta), 1.0),
        mapping_bits=bits(mapping) if mapping else 53.0,
        reported_parameter_bits=rec.error_figures.parameter_bits,
        **_diagnostics(spied, truth, beta),
    )
    return row


def merge_rows(path: Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``path`` (if any) with ``new`` replacing those of the same E, H, seed,
    sorted; written back to ``path``."""
    key = ("d", "H", "seed")
    old = json.loads(path.read_text())["runs"] if path.exists() else []
    ids = {tuple(r[k] for k in key) for r in new}
    rows = [r for r in old if tuple(r[k] for k in key) not in ids] + new
    rows.sort(key=lambda r: (r["H"], r["d"], r["seed"]))
    return rows


def mha_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (E, H): seeds, how many met 46 bits, the worst and median parameter bits,
    the worst floor (the exact heads' fit of the learner's answers), the medians of the
    bits before the refinement, of the once-rounded floor and of the answers' rounding,
    the queries against the follow-up's count and the refinement's queries."""
    cells: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["d"], r["H"]), []).append(r)
    out = []
    for (E, H), group in sorted(cells.items(), key=lambda c: (c[0][1], c[0][0])):
        pb = [r["parameter_bits"] for r in group]
        floors = [r["floor_bits"] for r in group if r["floor_bits"] is not None]
        once = [r["once_rounded_floor_bits"] for r in group
                if r.get("once_rounded_start") == "learner"]
        start = [r["before_refine_bits"] for r in group if r["before_refine_bits"] is not None]
        rounding = [r["answer_rounding_bits"] for r in group
                    if r["answer_rounding_bits"] is not None]
        out.append(
            {
                "d": E,
                "H": H,
                "head_dim": E // H,
                "seeds": len(group),
                "met_46": sum(b >= 46.0 for b in pb),
                "min_parameter_bits": min(pb),
                "median_parameter_bits": float(np.median(pb)),
                "min_floor_bits": min(floors) if floors else None,
                "median_before_refine_bits": float(np.median(start)) if start else None,
                "median_once_rounded_floor_bits": float(np.median(once)) if once else None,
                "median_answer_rounding_bits": float(np.median(rounding)) if rounding else None,
                "queries": max(r["queries"] for r in group),
                "follow_up": group[0]["follow_up"],
                "refinement": min(r["refinement"] for r in group),
                "seconds": float(np.median([r["seconds"] for r in group])),
            }
        )
    return out

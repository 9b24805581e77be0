"""The ``transformer-heads-float`` certificate of a float multi-head Transformer run.

>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0]),
...                           ([[0, -1], [1, 0]], [[1, 1], [-1, 0]], [0, 1])],
...                          [[1, -1], [0, 1]], [1, 2], a=[1, -1], b=-1)
>>> data = va.learn_transformer(va.Oracle(T, "float"), max_heads=2).certificate()
>>> data["kind"], data["arithmetic"], data["max_heads"], len(data["cells"])
('transformer-heads-float', 'float', 2, 3)

What it holds (checker :mod:`verified_attn.certificates.transformer_heads_float`): the
run's header (:class:`~verified_attn.certificates.writer.RunRecord`: seed, float rtol and
unit roundoff, counts by phase, bound, the final verification's count, seed, lengths and
answers, assumptions); ``parameter_rtol``, the box's parameter tolerance the result is
stated to; ``tolerances``, the constants the learner decided with (``match_rtol``,
``share_rtol``, ``cell_rtol``, ``margin``); ``ffn``, the float FFN g in canonical form
(``constant``, ``linear``, ``neurons``) with its counts and its length-1 verification;
``answers``, every query the cell stages sent (``phase``, the sequence ``X``, the
answer ``y``; cells passed over included); ``cells``, each cell used (its phase label, activation pattern, centre, margin, the
fit (scores, values or none) and runs, the box's answer at the centre and the heads its fit gave, unscaled, with
their absolute error estimates); ``skipped``, the labels of the cells passed over;
``matching``, per learned head the index of its head in every cell (null: absent) and the
spread of the matches; ``shares_residual``; and ``result``, the learned Transformer (heads
(W_h, V_h, c_h), g's ``A`` = I, ``w_o``, ``a``, ``b``), its ``parameter_error_estimate``
and ``error_figures`` (numbers and bits). Every number is a float stored exactly (hex).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verified_attn.certificates.writer import RunRecord, dump_floats, fresh_section
from verified_attn.errors import CertificateError
from verified_attn.multi_head.head_count_float import head_count_queries
from verified_attn.multi_head.pipeline.budget import float_query_limit
from verified_attn.precision import ErrorFigures, figures_record, stated_relative_error
from verified_attn.serialize import dump_number

__all__ = ["KIND", "THEOREM", "float_heads_certificate"]

KIND = "transformer-heads-float"
THEOREM = "transformer/multi-head-cells"


def _network(net: Any) -> dict[str, Any]:
    return {
        "constant": dump_number(float(net.constant)),
        "linear": dump_floats(np.array(net.linear, dtype=np.float64)),
        "neurons": [
            {
                "n": dump_floats(np.array(n, dtype=np.float64)),
                "c": dump_number(float(c)),
                "gamma": dump_number(float(g)),
            }
            for (n, c), g in net.neurons
        ],
    }


def _labels(by_phase: dict[str, int]) -> list[str]:
    """The cell labels ``cell<i>`` in the order the run asked them (their centre phases)."""
    return [
        p[: -len("-center")] for p in by_phase if p.startswith("cell") and p.endswith("-center")
    ]


def _centre_answers(
    transcript: Sequence[Any], labels: list[str], by_phase: dict[str, int]
) -> dict[str, tuple[Any, float]]:
    """Each label's centre query and the box's answer there, from the run's transcript
    (which must hold every query of the cell phases)."""
    found: dict[str, tuple[Any, float]] = {}
    for entry in transcript:
        label = entry.phase[: -len("-center")] if entry.phase.endswith("-center") else None
        if label in labels:
            found[label] = (np.asarray(entry.raw, dtype=np.float64)[-1], float(entry.answer))
    asked = sum(n for p, n in by_phase.items() if p.startswith("cell"))
    if len(found) != len(labels) or len(transcript) != asked:
        raise CertificateError(
            "the oracle's transcript does not hold every query of the cells (record=False, "
            "or it grew past the automatic limit): create the oracle with record=True"
        )
    return found


def _fit_kind(
    label: str, by_phase: dict[str, int], cell: Any, fit: Any, setting: tuple[Any, int, float]
) -> tuple[str, int]:
    """How the cell was fitted and the learn_multi_head runs made: ``none`` (no head shows:
    the head count alone), ``values`` (the known heads' values, ``2 H d`` probes) or
    ``scores`` (the full learner; its runs are those its bound term counts, each run at
    half the scale of the one before, after the values probes if they were tried)."""
    arith, H0, y0 = setting
    heads, _, term = fit[:3]
    if not heads:
        return "none", 0
    inner = [p for p in by_phase if p.startswith((label + "/", label + "."))]
    if inner == [label + "/values"]:
        return "values", 0
    rest = term - (1 + by_phase[label + "/values"] if label + "/values" in by_phase else 0)
    d = len(cell.center)
    t = 2.0 ** math.floor(math.log2(min(0.5, cell.margin / (2 * d))))
    for runs in range(1, 65):
        unit = min(float(arith.rtol), float(arith.unit_roundoff) * max(1.0, abs(y0)) / t)
        if rest == 1 + runs * (
            head_count_queries(H0) + float_query_limit(d, H0, affine=True, unit=unit)
        ):
            return "scores", runs
        t /= 2
    raise CertificateError(f"the bound term {term} of {label} is no count of learn_multi_head runs")


def _cell(cell: Any, label: str, answer: float, fit: Any, kind: tuple[str, int]) -> dict:
    heads, inner = fit[0], fit[3]
    return {
        "label": label,
        "pattern": [bool(x) for x in cell.pattern],
        "center": dump_floats(np.asarray(cell.center, dtype=np.float64)),
        "margin": dump_number(float(cell.margin)),
        "fit": kind[0],
        "runs": kind[1],
        "center_answer": dump_number(answer),
        "heads": [
            {
                "W": dump_floats(W),
                "c": dump_floats(c),
                "v": dump_floats(v),
                "error_Wc": dump_number(float(e_wc)),
                "error_v": dump_number(float(e_v)),
            }
            for W, c, v, e_wc, e_v in heads
        ],
        # A scores cell's inner figures: its scale t, the inner heads' scale and the float
        # learn_multi_head's error figures per parameter group (relative to that scale).
        **({} if inner is None else {"inner": _inner(inner)}),
    }


def _inner(inner: dict[str, Any]) -> dict[str, Any]:
    groups = {
        k: [dump_number(float(x)) for x in v] if isinstance(v, list) else dump_number(float(v))
        for k, v in inner["groups"].items()
    }
    return {"t": dump_number(inner["t"]), "scale": dump_number(inner["scale"]), "groups": groups}


def float_heads_certificate(
    run: RunRecord,
    stages: tuple[Any, Any, Sequence[Any], Sequence[Any]],
    matching: tuple[Sequence[Sequence[Any]], float, float],
    learned: tuple[Any, Sequence[Any], float],
    settings: tuple[int, float, dict[str, float]],
    transcript: Sequence[Any],
) -> dict[str, Any]:
    # ``transcript``: the run's entries of the cell phases (centres, fits, cell verifies).
    """The certificate of one run (see the module doc). ``stages``: the FFN recovery, g,
    the cells used and their fits' heads; ``matching``: the match table (per head, its
    head in each cell or None), the spread and the shares' residual; ``learned``: the
    model, its heads as (W_h, c_h, shares) and their estimate; ``settings``: max_heads,
    the box's parameter_rtol and the learner's tolerances."""
    ffn, net, cells, fits = stages
    table, spread, residual = matching
    model, shared, estimate = learned
    H0, prtol, tolerances = settings
    by_phase = dict(run.counts.by_phase)
    labels = _labels(by_phase)
    centres = _centre_answers(transcript, labels, by_phase)
    used = []
    for cell, fit in zip(cells, fits, strict=True):
        label = next(k for k in labels if np.array_equal(centres[k][0], cell.center))
        kind = _fit_kind(label, by_phase, cell, fit, (run.arith, H0, centres[label][1]))
        used.append(_cell(cell, label, centres[label][1], fit, kind))
    fits = [f[0] for f in fits]
    index = [
        [
            None if h is None else next(k for k, x in enumerate(fit) if x is h)
            for h, fit in zip(row, fits, strict=True)
        ]
        for row in table
    ]
    checked = run.verification
    gap = checked.max_gap if checked is not None and checked.count else None
    figures = ErrorFigures(stated_relative_error(estimate, shared), gap)
    data = run.header(KIND, THEOREM, model.d)
    data.update(
        {
            "max_heads": H0,
            "parameter_rtol": dump_number(float(prtol)),
            "tolerances": {k: dump_number(float(v)) for k, v in tolerances.items()},
            "ffn": {
                **_network(net),
                "queries": {"learning": ffn.queries, "bound": ffn.bound},
                "verification": fresh_section(
                    "float",
                    ffn.verification,
                    run.seed,
                    [dump_number(float(a)) for a in getattr(ffn.verification, "answers", [])],
                ),
            },
            "cells": used,
            "answers": [
                {
                    "phase": e.phase,
                    "X": dump_floats(np.asarray(e.raw, dtype=np.float64)),
                    "y": dump_number(float(e.answer)),
                }
                for e in transcript
                if e.phase.split("/")[0].split(".")[0].removesuffix("-center") in labels
            ],
            "skipped": [k for k in labels if k not in {c["label"] for c in used}],
            "matching": {"table": index, "spread": dump_number(float(spread))},
            "shares_residual": dump_number(float(residual)),
            "result": {
                "exact": False,
                "heads": [
                    {"W": dump_floats(W), "V": dump_floats(V), "c": dump_floats(c)}
                    for W, V, c in zip(model._W_float, model._V_float, model._c_float, strict=True)
                ],
                "A": dump_floats(model._A_float),
                "w_o": dump_floats(np.array(model._w_float)),
                "a": dump_floats(model._a_float),
                "b": dump_number(float(model._b)),
                "parameter_error_estimate": dump_number(float(estimate)),
                "error_figures": figures_record(figures),
            },
        }
    )
    return data

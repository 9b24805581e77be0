"""The ``transformer-heads`` certificate of a multi-head Transformer run, written from the run.

>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[1]], [[1]]), ([[-1]], [[2]])], [[1]], [1], a=[1], b=2)
>>> data = va.learn_transformer(va.Oracle(T, "certified"), max_heads=2).certificate()
>>> data["kind"], data["max_heads"], len(data["result"]["heads"])
('transformer-heads', 2, 2)
>>> len(data["answers"]) == data["queries"]["learning"] + data["queries"]["verification"] - (
...     data["queries"]["by_phase"]["ffn"] + data["queries"]["by_phase"]["ffn-verify"]
...     + data["queries"]["by_phase"]["verify"])
True

What it holds (checker :mod:`verified_attn.certificates.transformer_heads`): the run's
header (:class:`~verified_attn.certificates.writer.RunRecord`: seed, counts by phase,
bound, the final verification's count, lengths and answers, assumptions); ``ffn``, the
length-1 stage's whole ``relu-ffn-biased`` certificate (the canonical FFN g and every
length-1 answer); ``cells``, each cell's activation pattern and centre; ``answers``, every query the cell stages sent to the box (``phase``, the sequence
``X`` as exact rationals, the answer ``y`` exactly as the box gave it: a closed form in
exact arithmetic, a ball in certified arithmetic, at ``cell_precision`` bits when the
cells asked at a raised precision); and ``result``, the learned Transformer in canonical
form: the heads (W_h, V_h, c_h or null) in canonical order and g's ``A`` (= I), ``w_o``,
``a``, ``b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verified_attn.certificates.writer import RunRecord
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.multi_head_cells import Cell, CellOracle

__all__ = ["THEOREM", "heads_certificate"]

THEOREM = "transformer/multi-head-cells"


def _rows(M: Any) -> list[list[str]]:
    return [[dump_rational(q) for q in row] for row in M.tolist()]


def heads_certificate(
    run: RunRecord,
    ffn: Any,
    cells: Sequence[Cell],
    adapters: Sequence[CellOracle],
    model: Any,
    max_heads: int,
    cell_precision: int | None,
) -> dict[str, Any]:
    """The ``transformer-heads`` certificate of one run (see the module doc)."""
    data = run.header("transformer-heads", THEOREM, model.d)
    sub = dict(ffn.certificate())
    sub.pop("versions", None)
    answers = []
    for adapter in adapters:
        for phase, (X, y) in zip(adapter.phases, adapter.asked, strict=True):
            rows = [[dump_rational(X[i, j]) for j in range(X.ncols())] for i in range(X.nrows())]
            answers.append({"phase": phase, "X": rows, "y": dump_number(y)})
    heads = []
    for part in model.heads:
        W, V = part[0], part[1]
        c = [dump_rational(q) for q in part[2]] if len(part) > 2 else None
        heads.append({"W": _rows(W), "V": _rows(V), "c": c})
    data.update(
        {
            "max_heads": max_heads,
            "cell_precision": cell_precision,
            "ffn": sub,
            "cells": [
                {
                    "pattern": list(cell.pattern),
                    "center": [dump_rational(q) for q in cell.center],
                }
                for cell in cells
            ],
            "answers": answers,
            "result": {
                "exact": True,
                "heads": heads,
                "A": _rows(model.A),
                "w_o": [dump_rational(q) for q in model.w_o],
                "a": [dump_rational(q) for q in model.a],
                "b": dump_rational(model.b),
            },
        }
    )
    return data

"""The certificate data of a learned ReLU FFN: the queries, every answer as given, the network.

The checker :mod:`verified_attn.certificates.transformer` re-derives the network from
these answers with its own code.
"""

from __future__ import annotations

from typing import Any

from verified_attn.certificates.writer import RunRecord
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.relu_network import THEOREM, ReluNetwork, Vec

__all__ = ["relu_certificate_data"]


def relu_certificate_data(
    run: RunRecord,
    net: ReluNetwork,
    raw: dict[Vec, Any],
    grid: int,
    attempts: int,
    denominator_bound: int,
    *,
    kind: str = "relu-ffn",
) -> dict[str, Any]:
    """The ``relu-ffn`` certificate: every length-1 answer exactly as given, and the result.

    Sections beyond the common ones (:meth:`~verified_attn.certificates.writer.RunRecord.header`;
    ``run.bound`` is the query bound of ``grid`` and ``attempts``):
    ``grid``, ``attempts``, ``denominator_bound``; ``answers``: a list of ``{"x": [d
    rationals], "y": number}``, one per learning query; ``result``: the canonical form
    (``linear``, ``neurons`` as ``{"n", "gamma"}``) and the ReluFFN ``A`` (d x m nested
    list) and ``w_o`` (list) built from it. The checker is
    :func:`verified_attn.certificates.transformer.verify_relu_ffn`.
    """
    model = net.model()
    data = run.header(kind, THEOREM, net.d)
    data.update(
        {
            "grid": grid,
            "attempts": attempts,
            "denominator_bound": denominator_bound,
            "answers": [
                {"x": [dump_rational(q) for q in x], "y": dump_number(y)} for x, y in raw.items()
            ],
            "result": {
                "exact": True,
                "linear": [dump_rational(q) for q in net.linear],
                "neurons": [
                    {"n": [dump_rational(q) for q in n], "gamma": dump_rational(g)}
                    for n, g in net.neurons
                ],
                "A": [[dump_rational(q) for q in row] for row in model.A.tolist()],
                "w_o": [dump_rational(q) for q in model.w_o],
            },
        }
    )
    return data

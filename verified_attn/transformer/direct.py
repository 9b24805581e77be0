"""The ``direct`` attention method: W from d^2 plain two-token queries in one linear piece of g.

Once the FFN g is known, a two-token query whose pooled point stays inside one linear
piece of g answers an affine function of the attention weight; a design of d base points
and d probes in one cell of g's hyperplane arrangement gives W exactly.

>>> from verified_attn.arithmetic import get_arithmetic
>>> direct_denominator_bound(get_arithmetic("certified"), None) == 2**64   # 256 bits / 4
True
"""

from __future__ import annotations

from typing import Any

import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.oracle import Oracle
from verified_attn.transformer.cell import as_biased, cell_attention
from verified_attn.transformer.relu import ReluNetwork

__all__ = ["direct_attention", "direct_denominator_bound"]


def direct_denominator_bound(arith: Arithmetic, denominator_bound: int | None) -> int:
    return (
        denominator_bound if denominator_bound is not None else 2 ** ((arith.precision or 256) // 4)
    )


def direct_attention(
    oracle: Oracle, net: ReluNetwork, seed: int, denominator_bound: int | None
) -> tuple[sympy.Matrix, dict[str, Any]]:
    """W from d^2 queries [b_j + t u_k; b_j]: alpha_1 = (T - G^T b_j) / (t G^T u_k) and
    logit(alpha_1) = t u_k^T W b_j; then ``W = U^{-T} M B^{-1}`` with exact U, B
    (:func:`~verified_attn.transformer.cell.cell_attention` on g, whose biases are 0).

    Returns W and the design with the answers (row k: direction u_k, column j: base b_j).
    """
    d = oracle.d
    D = direct_denominator_bound(oracle.arithmetic, denominator_bound)
    W, design = cell_attention(oracle, as_biased(net), seed, D)
    flat = design.pop("answers")
    design["answers"] = [flat[k * d : (k + 1) * d] for k in range(d)]
    return W, design

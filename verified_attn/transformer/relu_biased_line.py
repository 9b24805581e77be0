"""One line's network: the cells between the kinks the line search found, and the neurons
their differences are (see :mod:`verified_attn.transformer.relu_biased`).

>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> from verified_attn.transformer.relu_biased import Answers
>>> g = ReluFFN([[1, -2], [3, 1]], [2, -1], a=[1, 4], b=-3)
>>> net, search = learn_line(Answers(va.Oracle(g, "exact"), None), 2, np.random.default_rng(0),
...                          radius=64, grid=1, shrink=0)
>>> net.width, search.found
(2, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.transformer.relu_biased import (
    CELL_BITS,
    FLOAT_TOL,
    STEP_BITS,
    Answers,
    LineSearch,
    Num,
    Piece,
    Retry,
    Vec,
    _between,
    _small,
)
from verified_attn.transformer.relu_biased_canonical import BiasedReluNetwork, _dot, _leading

__all__ = ["FloatLineSearch", "assemble", "learn_line"]


@dataclass
class FloatLineSearch(LineSearch):
    """Float mode's line search, with the cells re-measured at wider points after a
    refutation (:mod:`verified_attn.transformer.relu_biased_refine`): d + 1 queries each."""

    #: Cells re-measured (d + 1 queries each).
    refined: int = 0
    #: The kinks and the cells' affine maps (G, beta) the network was assembled from.
    line_kinks: list[Num] = field(default_factory=list)
    cell_maps: list[tuple[Vec, Num]] = field(default_factory=list)

    def queries(self) -> int:
        return super().queries() + (len(self.u) + 1) * self.refined


def _cell(search: LineSearch, piece: Piece, lo: Num, hi: Num, shrink: int) -> tuple[Vec, Num]:
    """(G, beta) with g = G^T x + beta on the cell of the piece (lo, hi): d - 1 queries."""
    ans, u, x0 = search.answers, search.u, search.x0
    d = len(u)
    t = _between(lo, hi, ans.float)
    y = search.point(t)
    gy = piece.at(t)
    scale = max(max(abs(x) for x in u), 1)
    delta = _small((hi - lo) / scale, (CELL_BITS if ans.float else 12) + shrink, ans.float)
    p = max(range(d), key=lambda i: abs(u[i]))  # G_p from the slope G^T u
    others = [i for i in range(d) if i != p]
    probes = [tuple(yj + (delta if j == i else 0) for j, yj in enumerate(y)) for i in others]
    G: list[Num] = [0] * d
    search.cells += 1
    for i, val in zip(others, ans.many(probes), strict=True):
        G[i] = (val - gy) / delta
    G[p] = (piece.slope - sum((G[i] * u[i] for i in others), 0 * gy)) / u[p]
    beta = piece.intercept - _dot(tuple(G), x0)
    return tuple(G), beta


def learn_line(
    answers: Answers, d: int, rng: np.random.Generator, *, radius: int, grid: int, shrink: int
) -> tuple[BiasedReluNetwork, LineSearch]:
    """One line's network (unverified) and its search record (for the count)."""
    fl = answers.float
    x0 = tuple(_coord(int(x), fl) for x in rng.integers(-(2**10), 2**10, d))
    u = tuple(_coord(int(x), fl) for x in rng.integers(-(2**10), 2**10, d))
    if not any(u):
        raise Retry("the line's direction is 0")
    R = radius if fl else Fraction(radius)
    bits = (STEP_BITS if fl else 12) + shrink
    make = FloatLineSearch if fl else LineSearch
    search = make(answers, x0, u, R, grid=grid, eps_bits=bits)
    try:
        return _network(search, shrink), search
    except Retry as exc:
        exc.search = search  # its queries count in the bound
        raise


def _network(search: LineSearch, shrink: int) -> BiasedReluNetwork:
    """The network from the line's kinks and the cells between them."""
    R = search.radius
    kinks, pieces = search.kinks()
    bounds = [-R, *kinks, R]
    cells = [_cell(search, pc, bounds[i], bounds[i + 1], shrink) for i, pc in enumerate(pieces)]
    if isinstance(search, FloatLineSearch):  # kept for a re-measurement after a refutation
        search.line_kinks, search.cell_maps = kinks, cells
    return assemble(search, kinks, cells)


def assemble(search: LineSearch, kinks: list[Num], cells: list[tuple[Vec, Num]]) -> BiasedReluNetwork:
    """The network from the line's kinks and the affine maps (G, beta) of the cells
    between them: each kink's neuron is the difference of its two cells' maps."""
    fl, u, R = search.answers.float, search.u, search.radius
    bounds = [-R, *kinks, R]
    neurons: list[tuple[tuple[Vec, Num], Num]] = []
    for i, t in enumerate(kinks):
        dG = tuple(x - y for x, y in zip(cells[i + 1][0], cells[i][0], strict=True))
        lead = _leading(dG, FLOAT_TOL if fl else 0)
        if lead is None:
            raise Retry(f"the gradient does not change across the kink at t = {t}")
        sigma = dG[lead]
        n = tuple(0 * x if j < lead else x / sigma for j, x in enumerate(dG))
        n = tuple(1 if j == lead else x for j, x in enumerate(n))
        c = (cells[i + 1][1] - cells[i][1]) / sigma
        gamma = sigma if _dot(n, u) > 0 else -sigma
        neurons.append(((n, c), gamma))
    y0 = search.point(_between(bounds[0], bounds[1], fl))
    G0, beta0 = cells[0]
    linear, constant = list(G0), beta0
    for (n, c), gamma in neurons:
        if _dot(n, y0) + c > 0:
            linear = [x - gamma * y for x, y in zip(linear, n, strict=True)]
            constant -= gamma * c
    if fl:
        neurons = _merge_float(neurons)
    return BiasedReluNetwork(constant, tuple(linear), tuple(sorted(neurons)))


def _merge_float(neurons: list[tuple[tuple[Vec, Num], Num]]) -> list:
    """Float mode: hyperplanes equal within FLOAT_TOL are one (weights added); a weight
    within FLOAT_TOL of the largest is dropped (a piece measured across a kink shows up
    as such a pair, +gamma and -gamma on one hyperplane)."""
    merged: list[list[Any]] = []
    for (n, c), gamma in neurons:
        key = (*n, c)
        for item in merged:
            if all(
                abs(x - y) <= FLOAT_TOL * (1 + abs(x)) for x, y in zip(item[0], key, strict=True)
            ):
                item[1] += gamma
                break
        else:
            merged.append([key, gamma])
    top = max((abs(g) for _, g in merged), default=0.0)
    return [((k[:-1], k[-1]), g) for k, g in merged if abs(g) > FLOAT_TOL * (1 + top)]


def _coord(k: int, is_float: bool) -> Num:
    return k / 256 if is_float else Fraction(k, 256)

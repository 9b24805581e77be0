"""Float cells of a learned FFN for the multi-head Transformer, and one cell's float oracle.

>>> from verified_attn.transformer.relu_biased import BiasedReluNetwork
>>> net = BiasedReluNetwork(1.0, (1.0,), ((((1.0,), -1.0), 2.0),))   # 1 + x + 2 ReLU(x - 1)
>>> cells = ranked_cells(net, seed=0)
>>> sorted(c.pattern for c in cells), [bool(c.margin > 0.1) for c in cells]
([(False,), (True,)], [True, True])

The float analogue of :mod:`verified_attn.transformer.multi_head_cells`: m' + 1 cells of
the float FFN g whose patterns (with a constant column) are independent, each with a
center far from every learned hyperplane (``margin``: the center's least Euclidean
distance to one), preferring wide cells (a float query must not cross a kink by
rounding, and the probe scale t, hence the heads' accuracy, grows with the margin).
:class:`FloatCellOracle` is the cell's function ``Y -> (T(c + t Y) - T([c])) / t`` as a
float model, with ``T([c]) = g_S(c)`` measured from the box, so the answers' error is
the box's own rounding over t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument
from verified_attn.oracle import Oracle
from verified_attn.oracle_subbox import SubBox
from verified_attn.transformer.relu_biased import BiasedReluNetwork

__all__ = [
    "FAR_REACH",
    "CellLeft",
    "FloatCell",
    "FloatCellOracle",
    "far_cells",
    "float_pattern_matrix",
    "independent",
    "ranked_cells",
]

#: Random dyadic candidate points per round (besides two per hyperplane).
CANDIDATES = 64
#: Far cells (:func:`far_cells`) are sampled at this many times (1 + the largest hyperplane
#: offset) from the origin: there the unbounded cells of g open into wide cones.
FAR_REACH = 8.0


class CellLeft(Exception):
    """A strict :class:`FloatCellOracle`'s query would have left the cell (not asked):
    the run is cut short, to be redone at a smaller scale. Internal, never raised to users."""


@dataclass(frozen=True)
class FloatCell:
    """An open cell of a float g: its activation ``pattern``, a ``center`` inside it, the
    center's least distance to a learned hyperplane (``margin``), g's gradient ``G`` there."""

    pattern: tuple[bool, ...]
    center: np.ndarray
    margin: float
    G: np.ndarray


def _planes(net: BiasedReluNetwork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit normals (rows), offsets and weights of g's hyperplanes, and g's linear part."""
    N = np.array([n for (n, _), _ in net.neurons], dtype=np.float64).reshape(-1, net.d)
    c = np.array([c for (_, c), _ in net.neurons], dtype=np.float64)
    norms = np.linalg.norm(N, axis=1) if len(N) else np.ones(0)
    return N / norms[:, None], c / norms, norms


def _cell_at(net: BiasedReluNetwork, y: np.ndarray) -> FloatCell:
    units, offsets, _ = _planes(net)
    z = units @ y + offsets
    gammas = np.array([g for _, g in net.neurons], dtype=np.float64)
    N = np.array([n for (n, _), _ in net.neurons], dtype=np.float64).reshape(-1, net.d)
    G = np.array(net.linear, dtype=np.float64) + (gammas * (z > 0)) @ N
    margin = float(np.abs(z).min()) if len(z) else math.inf
    return FloatCell(tuple(bool(x) for x in z > 0), y, margin, G)


def float_pattern_matrix(cells: list[FloatCell]) -> np.ndarray:
    """Rows ``[1, [j in S]]`` (0 or 1): a cell's head values are this row times
    ``[L_h; gamma_j M_hj]``. (The weights gamma_j are kept out of the matrix: a neuron
    with a small weight would make it ill-conditioned, while its products gamma_j M_hj,
    all the predictions use, are as well determined as any.)

    >>> net = BiasedReluNetwork(1.0, (1.0,), ((((1.0,), -1.0), 2.0),))
    >>> sorted(float_pattern_matrix(ranked_cells(net, 0)).tolist())
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return np.array([[1.0, *(float(x) for x in c.pattern)] for c in cells])


def _candidates(net: BiasedReluNetwork, rng: np.random.Generator) -> list[np.ndarray]:
    """Random dyadic points, and per hyperplane a point on it pushed to both sides by half
    its distance to the nearest other hyperplane (the two cells it borders)."""
    d = net.d
    units, offsets, _ = _planes(net)
    out = [rng.integers(-64, 65, d) / 16.0 for _ in range(CANDIDATES)]
    for j in range(len(units)):
        y = rng.integers(-64, 65, d) / 16.0
        p = y - (units[j] @ y + offsets[j]) * units[j]  # on hyperplane j
        others = np.abs(np.delete(units, j, axis=0) @ p + np.delete(offsets, j))
        step = min(1.0, float(others.min()) / 2) if len(others) else 1.0
        out += [p + s * step * units[j] for s in (1.0, -1.0)]
    return out


def ranked_cells(net: BiasedReluNetwork, seed: int, rounds: int = 8) -> list[FloatCell]:
    """Every sampled cell of g, one per pattern at its widest sampled center, widest first."""
    rng = np.random.default_rng(seed + 32452843)
    best: dict[tuple[bool, ...], FloatCell] = {}
    for _ in range(rounds):
        for y in _candidates(net, rng):
            cell = _cell_at(net, y)
            if cell.margin > 0 and (
                cell.pattern not in best or cell.margin > best[cell.pattern].margin
            ):
                best[cell.pattern] = cell
    return sorted(best.values(), key=lambda c: -c.margin)


def far_cells(net: BiasedReluNetwork, seed: int, rounds: int = 8) -> list[FloatCell]:
    """The unbounded cells of g met at ``FAR_REACH (1 + largest offset)`` from the origin
    in random directions, one per pattern at its widest sampled center, widest first.
    Their margins grow with the reach, and with them the spread the heads' scores can take
    on probes inside the cell (for heads with small W_h, as in PyTorch's initialisation,
    the bounded cells leave them too close together for the float decoding).

    >>> net = BiasedReluNetwork(1.0, (1.0,), ((((1.0,), -1.0), 2.0),))
    >>> [(c.pattern, c.margin) for c in far_cells(net, 0)]   # reach 8 (1 + 1) = 16
    [((False,), 17.0), ((True,), 15.0)]
    """
    rng = np.random.default_rng(seed + 49979687)
    _, offsets, _ = _planes(net)
    reach = FAR_REACH * (1.0 + float(np.abs(offsets).max(initial=0.0)))
    best: dict[tuple[bool, ...], FloatCell] = {}
    for _ in range(rounds * CANDIDATES):
        u = rng.normal(size=net.d)
        cell = _cell_at(net, np.round(reach * 16 * u / np.linalg.norm(u)) / 16)  # dyadic
        if cell.margin > 0 and (
            cell.pattern not in best or cell.margin > best[cell.pattern].margin
        ):
            best[cell.pattern] = cell
    return sorted(best.values(), key=lambda c: -c.margin)


def independent(chosen: list[FloatCell], cell: FloatCell) -> bool:
    """Whether ``cell``'s pattern row is independent of the chosen ones' (the pattern
    matrix's smallest singular value above 1e-6 of its largest)."""
    s = np.linalg.svd(float_pattern_matrix([*chosen, cell]), compute_uv=False)
    return bool(s[-1] > 1e-6 * s[0])


class FloatCellOracle(SubBox):
    """One cell's float function of Y, ``(T(c + t Y) - offset) / t``, for an inner float
    :class:`~verified_attn.oracle.Oracle`; queries counted on the outer oracle under
    ``<label>/<inner phase>`` (``<label>/<phase>`` if ``phase`` is given). ``floor``: the least distance every lifted token must keep
    from every learned hyperplane; :attr:`left` is set when one did not (``strict``: and
    :class:`CellLeft` raised before that batch is asked)."""

    model_class = "multi-head-affine"

    def __init__(
        self,
        outer: Oracle,
        net: BiasedReluNetwork,
        cell: FloatCell,
        t: float,
        offset: float,
        label: str,
        floor: float,
        phase: str | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(outer, label)
        self.cell, self.t, self.offset, self.floor = cell, t, offset, floor
        self.phase, self.strict = phase, strict
        self.units, self.offsets, _ = _planes(net)
        self.left: np.ndarray | None = None  # the first lifted query that left the cell
        self.largest = 0.0  # the largest |answer| of the outer box asked

    def evaluate_batch(self, Ys: np.ndarray) -> np.ndarray:
        Xs = self.cell.center[None, None, :] + self.t * np.asarray(Ys, dtype=np.float64)
        z = Xs @ self.units.T + self.offsets  # (B, N, m'): every token's pre-activations
        same = (z > 0) == np.array(self.cell.pattern, dtype=bool)
        bad = ~(same & (np.abs(z) >= self.floor)).all(axis=(1, 2))
        if self.left is None and bad.any():
            self.left = Xs[int(np.argmax(bad))]
        if self.strict and bad.any():
            raise CellLeft(f"a probe came within {self.floor:.3g} of a learned hyperplane")
        with self.forward():
            answers = np.asarray(self.outer.query_many(Xs), dtype=np.float64)
        self.largest = max(self.largest, float(np.abs(answers).max(initial=0.0)))
        return (answers - self.offset) / self.t

    @property
    def inner_phase(self) -> str:
        return self.phase or super().inner_phase

    def evaluate_rational(self, Yq: Any, arith: Any) -> Any:
        raise InvalidArgument("a float cell oracle answers in float arithmetic only")

    def lifted(self, Y: Any) -> np.ndarray | None:
        """The outer query c + t Y of an inner query Y (None stays None)."""
        if Y is None:
            return None
        return self.cell.center[None, :] + self.t * np.asarray(Y, dtype=np.float64)

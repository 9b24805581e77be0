"""Cells of a learned FFN for the multi-head Transformer learner, and one cell's oracle.

>>> one = Fraction(1)
>>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))  # 1 + x + 2 ReLU(x - 1)
>>> cells = spanning_cells(net, seed=0)
>>> [c.pattern for c in cells], [c.margin > 0 for c in cells]
([(False,), (True,)], [True, True])

In the open cell with activation pattern S the FFN is affine, ``g = G_S^T x + beta_S``.
Near a point c of the cell, the sequence ``X = c + t Y`` (every token c + t y_i) keeps the
FFN's input in the cell when t is small, and there

    (T(c + t Y) - g_S(c)) / t = sum_h softmax(Y (t^2 W_h y_N + t (W_h c + c_h)))^T Y v_h^S

(the terms of the scores that do not depend on the token cancel in the softmax): an
affine multi-head attention function of Y with no output bias, whose values
``v_h^S = L_h + sum_{j in S} gamma_j M_hj`` are each head's share of the cell's
gradient. :class:`CellOracle` is that function as a model for an inner
:class:`~verified_attn.oracle.Oracle`, every query counted on the outer one.
:func:`spanning_cells` picks cells whose patterns (with a constant column) form an
invertible matrix, so the shares L_h, M_hj follow from the v_h^S by one exact solve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import InvalidArgument, NotIdentifiable
from verified_attn.models import as_rational_sequence
from verified_attn.oracle import Oracle
from verified_attn.oracle_subbox import SubBox
from verified_attn.rational_interpolation import to_arb
from verified_attn.transformer.relu_biased import BiasedReluNetwork, Vec

__all__ = ["Cell", "CellOracle", "pattern_matrix", "spanning_cells"]

Pattern = tuple[bool, ...]
Rows = list[list[Fraction]]


def _rows(X: flint.fmpq_mat) -> Rows:
    return [
        [Fraction(int(X[i, j].p), int(X[i, j].q)) for j in range(X.ncols())]
        for i in range(X.nrows())
    ]


@dataclass(frozen=True)
class Cell:
    """An open cell of g: its activation ``pattern``, a ``center`` inside it, the smallest
    |pre-activation| there (``margin``), and g's affine map on it (``G``, ``beta``)."""

    pattern: Pattern
    center: Vec
    margin: Fraction
    G: Vec
    beta: Fraction


def _cell_at(net: BiasedReluNetwork, y: Vec) -> Cell | None:
    """The cell of y, or None if y lies on a hyperplane."""
    G, beta = list(net.linear), net.constant
    pattern, margin = [], None
    for (n, c), gamma in net.neurons:
        z = sum((a * b for a, b in zip(n, y, strict=True)), c)
        if z == 0:
            return None
        margin = abs(z) if margin is None else min(margin, abs(z))
        pattern.append(z > 0)
        if z > 0:
            G = [g + gamma * x for g, x in zip(G, n, strict=True)]
            beta += gamma * c
    return Cell(tuple(pattern), tuple(y), margin or Fraction(1), tuple(G), beta)


def pattern_matrix(cells: Sequence[Cell], net: BiasedReluNetwork) -> flint.fmpq_mat:
    """Rows ``[1, gamma_j [j in S]]``: the cell's values are this row times ``[L; M_j]``.

    >>> one = Fraction(1)
    >>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))
    >>> pattern_matrix(spanning_cells(net, seed=0), net).rank()
    2
    """
    gammas = [g for _, g in net.neurons]
    rows = [
        [Fraction(1)] + [g if on else Fraction(0) for g, on in zip(gammas, c.pattern, strict=True)]
        for c in cells
    ]
    return flint.fmpq_mat([[flint.fmpq(q.numerator, q.denominator) for q in r] for r in rows])


def _candidates(net: BiasedReluNetwork, rng: np.random.Generator) -> list[Vec]:
    """Random points, and per hyperplane a point on it pushed to both sides (adjacent
    cells, which make the pattern matrix full rank)."""
    d = net.d
    out: list[Vec] = []
    for _ in range(8):
        out.append(tuple(Fraction(int(x), 8) for x in rng.integers(-32, 33, d)))
    for (n, c), _ in net.neurons:
        y = [Fraction(int(x), 8) for x in rng.integers(-32, 33, d)]
        nn = sum((x * x for x in n), Fraction(0))
        z = sum((a * b for a, b in zip(n, y, strict=True)), c)
        p = [yi - z / nn * ni for yi, ni in zip(y, n, strict=True)]  # on the hyperplane
        step = Fraction(1, 2)
        for (n2, c2), _ in net.neurons:
            z2 = sum((a * b for a, b in zip(n2, p, strict=True)), c2)
            slope = abs(sum((a * b for a, b in zip(n2, n, strict=True)), Fraction(0)))
            if n2 != n and slope and z2:
                step = min(step, abs(z2) / (2 * slope))
        out += [tuple(pi + s * step * ni for pi, ni in zip(p, n, strict=True)) for s in (1, -1)]
    return out


def spanning_cells(net: BiasedReluNetwork, seed: int) -> list[Cell]:
    """m' + 1 cells of g (m' its width) whose :func:`pattern_matrix` is invertible, each
    with its center; the first is a random cell. Raises NotIdentifiable if none are found
    (every hyperplane of a canonical network borders two cells differing in it alone, so
    this only happens when the sampled points all fall on hyperplanes)."""
    rng = np.random.default_rng(seed + 32452843)
    chosen: list[Cell] = []
    for _ in range(16):
        for y in _candidates(net, rng):
            cell = _cell_at(net, y)
            if cell is None or any(c.pattern == cell.pattern for c in chosen):
                continue
            if pattern_matrix([*chosen, cell], net).rank() == len(chosen) + 1:
                chosen.append(cell)
            if len(chosen) == net.width + 1:
                return chosen
    raise NotIdentifiable(
        f"found {len(chosen)} cells of g with independent patterns, {net.width + 1} needed"
    )


class CellOracle(SubBox):
    """One cell's function of Y, ``(T(c + t Y) - g_S(c)) / t``, as a model (``d``,
    ``evaluate_rational``) for an inner :class:`~verified_attn.oracle.Oracle`. An exact
    outer answer is enclosed in a ball when the inner oracle is certified.

    Queries are counted on the outer oracle under ``<label>/<inner phase>``, declared
    verification there exactly when the inner phase is.
    """

    model_class = "multi-head-affine"

    def __init__(
        self, outer: Oracle, cell: Cell, t: Fraction, label: str, precision: int | None = None
    ) -> None:
        super().__init__(outer, label)
        self.cell, self.t = cell, t
        self.precision = precision  # bits to ask a certified outer oracle at (None: its own)
        self.answers: list[Any] = []
        self.arith: Arithmetic = outer.arithmetic  # the inner oracle's, once it asks
        self.asked: list[tuple[flint.fmpq_mat, Any]] = []
        self.phases: list[str] = []  # the outer phase each of ``asked`` was counted under
        self.offset = sum((g * x for g, x in zip(cell.G, cell.center, strict=True)), cell.beta)
        q = [flint.fmpq(x.numerator, x.denominator) for x in cell.center]
        self._center = q

    def _lift(self, Yq: flint.fmpq_mat) -> flint.fmpq_mat:
        tq = flint.fmpq(self.t.numerator, self.t.denominator)
        n = Yq.nrows()
        return flint.fmpq_mat(
            n, self.d, [self._center[j] + tq * Yq[i, j] for i in range(n) for j in range(self.d)]
        )

    def evaluate_rational(self, Yq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        X = self._lift(Yq)
        with self.forward():
            phase = self.outer.phase_name
            answer = self.outer.query_many([X], precision=self.precision)[0]
        if arith.name == "certified" and self.outer.arithmetic.name == "exact":
            answer_in = to_arb(answer)  # an exact answer, enclosed at the inner precision
        else:
            answer_in = answer
        out = (answer_in - arith.rational(self.offset)) / arith.rational(self.t)
        self.arith = arith
        self.answers.append(out)
        self.asked.append((X, answer))
        self.phases.append(phase)
        return out

    def all_zero(self) -> bool:
        """Whether every answer so far is 0 (certified: every ball contains 0)."""
        arith = self.arith
        return all(arith.agree(y, arith.rational(Fraction(0))) for y in self.answers)

    def witness(self) -> tuple[Rows | None, Any]:
        """The first outer query whose answer less g is not 0 (else the first), as rows of
        Fractions, and its outer answer."""
        arith = self.arith
        zero = arith.rational(Fraction(0))
        for (X, y), out in zip(self.asked, self.answers, strict=True):
            if not arith.agree(out, zero):
                return _rows(X), y
        return (_rows(self.asked[0][0]), self.asked[0][1]) if self.asked else (None, None)

    def lifted(self, Y: Any) -> tuple[Rows | None, Any]:
        """The outer query c + t Y of an inner query Y, as rows, with its answer if asked."""
        if Y is None:
            return None, None
        X = self._lift(as_rational_sequence(np.asarray(Y, dtype=object), self.d))
        return _rows(X), next((y for Z, y in self.asked if Z == X), None)

    def evaluate_batch(self, Ys: np.ndarray) -> np.ndarray:
        raise InvalidArgument("a cell oracle answers in exact or certified arithmetic only")

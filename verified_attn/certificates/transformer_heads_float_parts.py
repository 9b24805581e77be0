"""The stated parts of a ``transformer-heads-float`` certificate, read and re-derived.

>>> import numpy as np
>>> P = pattern_rows([[True, False], [False, False], [True, True]])
>>> P.tolist(), independent_rows(P)
([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], True)

Used by :mod:`verified_attn.certificates.transformer_heads_float` (which documents what is
re-checked): the float FFN g from its canonical form, the cells (each centre inside its
pattern's cell at its stated margin), the per-cell heads, their matching to the claimed
heads (recomputed with the stated tolerance), and the shares of g's directions (recomputed
by least squares on the stated cells' patterns). Every number is a float read exactly;
nothing here imports a learner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from verified_attn.agreement import agree
from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates import kernel
from verified_attn.errors import CertificateError

__all__ = [
    "CellHead",
    "FloatNetwork",
    "StatedCell",
    "cell_answers",
    "floats",
    "independent_rows",
    "match_rows",
    "pattern_rows",
    "read_cells",
    "read_network",
    "scalar",
    "shares_of",
]

#: Most neurons, cells' heads and attempts a certificate may state (each read in full).
MAX_WIDTH = 1 << 12
MAX_ATTEMPTS = 64
#: The float rule's floor for the cell-stage answers (see :func:`cell_answers`).
CELL_FLOOR = 1.0


def scalar(raw: Any, path: str, arith: Arithmetic) -> float:
    """One stored float, finite."""
    return float(kernel.number(raw, path, arith))


def floats(raw: Any, path: str, arith: Arithmetic, shape: tuple[int, ...]) -> np.ndarray:
    """A stored nested list of floats of exactly ``shape``."""
    if len(shape) == 1:
        return np.array(kernel.numbers(raw, path, arith, shape[0]), dtype=np.float64)
    rows = kernel.as_list(raw, path, shape[0])
    return np.array(
        [floats(r, f"{path}[{i}]", arith, shape[1:]) for i, r in enumerate(rows)],
        dtype=np.float64,
    ).reshape(shape)


@dataclass(frozen=True)
class FloatNetwork:
    """g = constant + linear . x + sum_j gamma_j ReLU(n_j . x + c_j), as float arrays."""

    constant: float
    linear: np.ndarray
    N: np.ndarray  # (width, d)
    c: np.ndarray
    gamma: np.ndarray

    @property
    def width(self) -> int:
        return len(self.c)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """g's FFN (A, w_o, a) as the canonical form gives it: the neurons, then l and -l
        when l != 0 (one dead column when g is constant)."""
        cols = list(self.N)
        w, a = list(self.gamma), list(self.c)
        if np.any(self.linear != 0):
            cols += [self.linear, -self.linear]
            w += [1.0, -1.0]
            a += [0.0, 0.0]
        if not cols:
            cols, w, a = [np.zeros(len(self.linear))], [0.0], [0.0]
        return np.array(cols).T, np.array(w), np.array(a)

    def value(self, x: np.ndarray) -> float:
        return float(
            self.constant + self.linear @ x + self.gamma @ np.maximum(self.N @ x + self.c, 0.0)
        )

    def gradient(self, pattern: list[bool]) -> np.ndarray:
        return np.asarray(self.linear + (self.gamma * np.array(pattern, dtype=bool)) @ self.N)


def read_network(raw: Any, d: int, arith: Arithmetic) -> FloatNetwork:
    """``ffn``'s canonical form: every n_j's first nonzero entry 1, gamma_j != 0, the
    (n_j, c_j) distinct."""
    items = kernel.as_objects(
        kernel.as_list(kernel.get(raw, "neurons"), "ffn.neurons"), "ffn.neurons"
    )
    if len(items) > MAX_WIDTH:
        raise CertificateError(f"ffn.neurons: more than {MAX_WIDTH} neurons")
    N, c, gamma = [], [], []
    for path, item in items:
        n = floats(kernel.get(item, "n"), f"ffn.{path[4:]}.n", arith, (d,))
        lead = next((x for x in n if x != 0), None)
        if lead != 1.0:
            raise CertificateError(f"ffn.{path[4:]}.n: the first nonzero entry must be 1")
        g = scalar(kernel.get(item, "gamma"), f"ffn.{path[4:]}.gamma", arith)
        if g == 0:
            raise CertificateError(f"ffn.{path[4:]}.gamma is 0 (a canonical neuron has gamma != 0)")
        N.append(n)
        c.append(scalar(kernel.get(item, "c"), f"ffn.{path[4:]}.c", arith))
        gamma.append(g)
    keys = [(tuple(n), b) for n, b in zip(N, c, strict=True)]
    if len(set(keys)) != len(keys):
        raise CertificateError("ffn.neurons: two neurons have one (n_j, c_j)")
    return FloatNetwork(
        scalar(kernel.get(raw, "constant"), "ffn.constant", arith),
        floats(kernel.get(raw, "linear"), "ffn.linear", arith, (d,)),
        np.array(N, dtype=np.float64).reshape(len(N), d),
        np.array(c, dtype=np.float64),
        np.array(gamma, dtype=np.float64),
    )


@dataclass(frozen=True)
class CellHead:
    """A head a cell's fit gave: (W_h, c_h, v_h) and the absolute error estimates."""

    W: np.ndarray
    c: np.ndarray
    v: np.ndarray
    error_Wc: float
    error_v: float

    @property
    def key(self) -> np.ndarray:
        return np.concatenate([self.W.ravel(), self.c])


@dataclass(frozen=True)
class StatedCell:
    label: str
    pattern: list[bool]
    center: np.ndarray
    margin: float
    fit: str  # "scores" (the full learner), "values" (the known heads' values), "none"
    runs: int  # the full learner's runs (0 unless "scores")
    center_answer: float
    heads: list[CellHead]


def _heads(raw: Any, path: str, d: int, arith: Arithmetic) -> list[CellHead]:
    out = []
    for where, item in kernel.as_objects(kernel.as_list(raw, path), path):
        errors = [
            scalar(kernel.get(item, k), f"{where}.{k}", arith) for k in ("error_Wc", "error_v")
        ]
        if not all(e >= 0 for e in errors):
            raise CertificateError(f"{where}: the error estimates must be >= 0")
        out.append(
            CellHead(
                floats(kernel.get(item, "W"), f"{where}.W", arith, (d, d)),
                floats(kernel.get(item, "c"), f"{where}.c", arith, (d,)),
                floats(kernel.get(item, "v"), f"{where}.v", arith, (d,)),
                *errors,
            )
        )
    return out


def read_cells(
    data: dict[str, Any], g: FloatNetwork, d: int, arith: Arithmetic
) -> list[StatedCell]:
    """The m' + 1 stated cells; each centre strictly inside its pattern's open cell with
    the stated margin (its least distance to a hyperplane of g, recomputed to 1e-9)."""
    raw = kernel.as_list(kernel.get(data, "cells"), "cells", g.width + 1)
    out: list[StatedCell] = []
    norms = np.linalg.norm(g.N, axis=1)
    for path, item in kernel.as_objects(raw, "cells"):
        label = kernel.get(item, "label")
        if not isinstance(label, str) or not label.startswith("cell") or not label[4:].isdigit():
            raise CertificateError(f"{path}.label must be 'cell<i>'")
        pattern = kernel.as_list(kernel.get(item, "pattern"), f"{path}.pattern", g.width)
        if not all(isinstance(p, bool) for p in pattern):
            raise CertificateError(f"{path}.pattern must be a list of booleans")
        center = floats(kernel.get(item, "center"), f"{path}.center", arith, (d,))
        z = g.N @ center + g.c
        if np.any((z > 0) != np.array(pattern, dtype=bool)) or np.any(z == 0):
            raise CertificateError(f"{path}.center is not strictly inside the cell of its pattern")
        margin = scalar(kernel.get(item, "margin"), f"{path}.margin", arith)
        again = float(np.min(np.abs(z) / norms)) if g.width else math.inf
        if not (margin == again or abs(margin - again) <= 1e-9 * again):
            raise CertificateError(
                f"{path}.margin {margin:.6g} is not the centre's least distance to a "
                f"hyperplane of g ({again:.6g}, recomputed)"
            )
        fit = kernel.get(item, "fit")
        if fit not in ("scores", "values", "none"):
            raise CertificateError(f"{path}.fit must be 'scores', 'values' or 'none'")
        runs = kernel.as_int(kernel.get(item, "runs"), f"{path}.runs", high=MAX_ATTEMPTS)
        if (runs > 0) != (fit == "scores"):
            raise CertificateError(f"{path}.runs must be >= 1 for a 'scores' fit, else 0")

        y0 = scalar(kernel.get(item, "center_answer"), f"{path}.center_answer", arith)
        heads = _heads(kernel.get(item, "heads"), f"{path}.heads", d, arith)
        if (fit == "none") != (not heads):
            raise CertificateError(f"{path}: a cell has no heads exactly when its fit is 'none'")
        if fit == "scores":
            where = (center, margin, runs)
            _inner_errors(kernel.get(item, "inner"), f"{path}.inner", where, heads, arith)
        out.append(StatedCell(label, list(pattern), center, margin, fit, runs, y0, heads))
    if len({c.label for c in out}) != len(out):
        raise CertificateError("cells: two cells have one label")
    return out


def _inner_errors(
    raw: Any,
    path: str,
    cell: tuple[np.ndarray, float, int],
    heads: list[CellHead],
    arith: Arithmetic,
) -> None:
    """A scores cell's stated head errors from its inner record: t recomputed from the
    margin and the runs, the inner scale at least the inner heads' largest entry
    (t^2 W_h, v_h, t (W_h c + c_h)), and per head error_Wc = (e_W (1 + |c|_1) / t^2 +
    e_c / t) scale and error_v = e_v scale from the inner group figures (to 1e-9)."""
    center, margin, runs = cell
    d = len(center)
    t = 2.0 ** math.floor(math.log2(min(0.5, margin / (2 * d)))) / 2 ** (runs - 1)
    stated_t = scalar(kernel.get(raw, "t"), f"{path}.t", arith)
    if stated_t != t:
        raise CertificateError(f"{path}.t {stated_t:g} is not the run's scale {t:g}")
    scale = scalar(kernel.get(raw, "scale"), f"{path}.scale", arith)
    inner = [np.concatenate([(t * t * h.W).ravel(), h.v, t * (h.W @ center + h.c)]) for h in heads]
    least = max([1.0] + [float(np.abs(x).max()) for x in inner])
    if not scale >= least * (1 - 1e-9):
        raise CertificateError(f"{path}.scale {scale:.6g} is below the inner heads' {least:.6g}")
    groups = kernel.get(raw, "groups")
    for name in ("W", "c", "v"):
        kernel.as_list(kernel.get(groups, name), f"{path}.groups.{name}", len(heads))
    l1 = float(np.abs(center).sum())
    for h, head in enumerate(heads):
        e_w, e_c, e_v = (
            scalar(kernel.get(groups, name)[h], f"{path}.groups.{name}[{h}]", arith)
            for name in ("W", "c", "v")
        )
        want = (scale * e_w * (1 + l1) / (t * t) + scale * e_c / t, scale * e_v)
        got = (head.error_Wc, head.error_v)
        for k, (x, y) in enumerate(zip(got, want, strict=True)):
            if not (x >= 0 and abs(x - y) <= 1e-9 * y):
                name = ("error_Wc", "error_v")[k]
                raise CertificateError(
                    f"{path}: heads[{h}].{name} {x:.6g} is not the inner group figures "
                    f"unscaled ({y:.6g}: W's over t^2 and through the centre, c's over t)"
                )


def pattern_rows(patterns: list[list[bool]]) -> np.ndarray:
    """Rows ``[1, [j in S]]`` of the cells' patterns."""
    return np.array([[1.0, *(float(x) for x in p)] for p in patterns])


def independent_rows(P: np.ndarray) -> bool:
    """The smallest singular value above 1e-6 of the largest."""
    s = np.linalg.svd(P, compute_uv=False)
    return bool(s[-1] > 1e-6 * s[0])


def match_rows(
    cells: list[StatedCell], table: list[list[int | None]], match_rtol: float
) -> tuple[list[list[CellHead | None]], float]:
    """The stated matching, held to the stated tolerance: every cell head in exactly one
    row; within a row, every head within ``match_rtol max(1, largest entry)`` plus both
    estimates of the row's reference (its head in the cell with the smallest largest
    estimate, cells taken in that order); returns the rows and the largest distance."""
    order = sorted(
        range(len(cells)), key=lambda i: max([h.error_Wc for h in cells[i].heads], default=0.0)
    )
    used = [[False] * len(c.heads) for c in cells]
    rows: list[list[CellHead | None]] = []
    spread = 0.0
    for r, raw in enumerate(table):
        row: list[CellHead | None] = []
        for i, k in enumerate(raw):
            if k is not None and not 0 <= k < len(cells[i].heads):
                raise CertificateError(f"matching.table[{r}][{i}] names no head of cell {i + 1}")
            if k is not None and used[i][k]:
                raise CertificateError(f"matching.table: head {k} of cell {i + 1} is in two rows")
            if k is not None:
                used[i][k] = True
            row.append(None if k is None else cells[i].heads[k])
        rows.append(row)
        ref = next((row[i] for i in order if row[i] is not None), None)
        if ref is None:
            raise CertificateError(f"matching.table[{r}] names no head in any cell")
        for i, h in enumerate(row):
            if h is None:
                continue
            dist = float(np.abs(h.key - ref.key).max())
            tol = match_rtol * max(1.0, float(np.abs(h.key).max())) + h.error_Wc + ref.error_Wc
            if not dist <= tol:
                raise CertificateError(
                    f"matching.table[{r}]: the head of cell {i + 1} is {dist:.3g} from its "
                    f"row's reference, beyond the matching tolerance {tol:.3g} (match_rtol "
                    f"{match_rtol:g} plus both estimates)"
                )
            spread = max(spread, dist)
    missing = [(i, k) for i, u in enumerate(used) for k, x in enumerate(u) if not x]
    if missing:
        raise CertificateError(
            f"matching.table omits head {missing[0][1]} of cell {missing[0][0] + 1}"
        )
    return rows, spread


def shares_of(
    g: FloatNetwork, cells: list[StatedCell], rows: list[list[CellHead | None]]
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], float, float]:
    """Per row (W_h, c_h of its most accurate cell, the shares [L_h; M_hj] by least squares
    on the patterns), the absolute estimate, and the shares' relative residual against g's
    l and gamma_j n_j."""
    Pi = np.linalg.pinv(pattern_rows([c.pattern for c in cells]))
    gammas = np.concatenate([[1.0], g.gamma])
    d = len(g.linear)
    out = []
    err = 0.0
    for row in rows:
        present = [h for h in row if h is not None]
        V = np.array([np.zeros(d) if h is None else h.v for h in row])
        best = min(present, key=lambda h: h.error_Wc)
        shares = Pi @ V / gammas[:, None]
        out.append((best.W, best.c, shares))
        e_v = max(h.error_v for h in present)
        err = max(err, best.error_Wc, float(np.abs(Pi).sum(axis=1).max()) * e_v)
    target = np.vstack([g.linear[None, :], g.N]) * gammas[:, None]
    total = sum((s * gammas[:, None] for _, _, s in out), np.zeros_like(target))
    residual = float(np.abs(total - target).max()) / max(1.0, float(np.abs(target).max()))
    # The learner's final step: the least-norm change that makes the shares' sums g's
    # directions exactly, split over the heads.
    fix = (target - total) / (max(1, len(out)) * gammas[:, None])
    return [(W, c, s + fix) for W, c, s in out], err, residual


def cell_answers(
    data: dict[str, Any], arith: Arithmetic, d: int, predict: Any
) -> tuple[dict[str, int], dict[str, tuple[np.ndarray, float]], float]:
    """Every stored cell-stage answer against the claimed model under the float rule with
    the floor 1 (rtol relative to ``max(1, |answer|)``: the scale ``max(1, |T([c])|)`` the
    learner's cell oracle states its rounding in; a cell near a zero of T has answers far
    below the fresh sequences' floor, whose absolute error the parameters' does not
    shrink with); the count per phase, each centre phase's query and answer, and the
    largest gap relative to ``max(1, |answer|)``."""
    from verified_attn.validation import MAX_LENGTH

    raw = kernel.as_list(kernel.get(data, "answers"), "answers")
    items = kernel.as_objects(raw, "answers")
    rows = []
    for path, item in items:
        phase = kernel.get(item, "phase")
        if not isinstance(phase, str) or not phase.startswith("cell") or len(phase) > 80:
            raise CertificateError(f"{path}.phase must be a cell phase 'cell<i>...'")
        tokens = kernel.as_list(kernel.get(item, "X"), f"{path}.X")
        if not 1 <= len(tokens) <= MAX_LENGTH:
            raise CertificateError(f"{path}.X must have 1 to {MAX_LENGTH} tokens")
        X = floats(tokens, f"{path}.X", arith, (len(tokens), d))
        rows.append((path, phase, X, scalar(kernel.get(item, "y"), f"{path}.y", arith)))
    floor = CELL_FLOOR
    counts: dict[str, int] = {}
    centres: dict[str, tuple[np.ndarray, float]] = {}
    worst = 0.0
    for path, phase, X, y in rows:
        counts[phase] = counts.get(phase, 0) + 1
        if phase.endswith("-center"):
            centres[phase] = (X, y)
        want = predict(X)
        ok, gap = agree(arith, y, want, bias=0.0, floor=floor)
        if not ok or not math.isfinite(want):
            raise CertificateError(
                f"{path}: the stored answer {y} ({phase}) is not the claimed model's {want} "
                f"within rtol {arith.rtol:g} of max(1, |answer|) (gap {gap:.3e})"
            )
        worst = max(worst, gap)
    return counts, centres, worst

"""Float mode of the biased FFN learner: a line's thin cells re-measured at wide points.

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> from verified_attn.transformer.relu_biased import Answers
>>> from verified_attn.transformer.relu_biased_line import learn_line
>>> g = ReluFFN([[1, 1, 0], [2, 2, 1]], [3, -3, 1], a=[1, 1.000001, -1], b=2)
>>> answers = Answers(va.Oracle(g, "float"), None)
>>> net, search = learn_line(answers, 2, np.random.default_rng(0), radius=64, grid=1, shrink=0)
>>> better = refine_line(search)         # parallel hyperplanes 1e-6 apart: thin everywhere
>>> search.refined, better.width, better == net          # nothing to gain, nothing asked
(0, 3, True)

A cell between two kinks close together on the line is thin *along the line*, and its
gradient, measured by coordinate probes a fraction of that width apart
(:func:`~verified_attn.transformer.relu_biased_line.learn_line`), carries the answers'
rounding divided by that small step: the neurons on either side of it err by as much (up
to 3e-6 on an ``nn.MultiheadAttention(16, 2)`` block's length-1 function, m = 32, enough
for the fresh sequences to refute the network at rtol 1e-6). The cell is in general wide
in other directions. Once the line's network is known to that accuracy, each cell is the
polyhedron of points with its sign pattern on the learned hyperplanes; its Chebyshev
centre z (the point farthest from them, radius r, within :data:`BOX` of the cell's point
y on the line in every coordinate; a linear program) lets g be probed at z and
z + s e_i, s the largest power of two at most r / 2 (d + 1 queries: g(z) and d probes;
they stay r / 2 from every learned hyperplane, far beyond its error). A cell is
re-measured when s is :data:`GAIN` times its old step or more. The two measurements must
agree within the old one's rounding error
(:data:`~verified_attn.transformer.relu_biased.AGREE` times its bound), else a hyperplane
the line did not show passes between them:
:class:`~verified_attn.transformer.relu_biased.Retry`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog

from verified_attn.transformer.relu_biased import (
    AGREE,
    CELL_BITS,
    STEP_BITS,
    BiasedReluNetwork,
    Num,
    Retry,
    Vec,
    _between,
    _small,
)
from verified_attn.transformer.relu_biased_line import FloatLineSearch, assemble

__all__ = ["BOX", "GAIN", "refine_line"]

#: A cell is re-measured when the wide point's step is at least GAIN times its old one.
GAIN = 16
#: The centre stays within BOX of the cell's point on the line (each coordinate): a
#: hyperplane the line never met may lie farther off it (measured: with max(1, |y|), up
#: to 20 here, a d = 16 block's centre crossed one; with 1, none did).
BOX = 1.0


def refine_line(search: FloatLineSearch) -> BiasedReluNetwork:
    """The line's network with its thin cells re-measured (``search.refined`` counts them;
    phase ``ffn``)."""
    kinks, cells = search.line_kinks, search.cell_maps
    R = search.radius
    bounds = [-R, *kinks, R]
    planes = [_plane(cells[i], cells[i + 1]) for i in range(len(kinks))]
    eta = search.answers.noise()
    scale = max(max(abs(float(x)) for x in search.u), 1.0)
    new: list[tuple[Vec, Num]] = []
    for i, (G, beta) in enumerate(cells):
        lo, hi = bounds[i], bounds[i + 1]
        y = np.array(search.point(_between(lo, hi, True)), dtype=np.float64)
        old = float(_small((hi - lo) / scale, CELL_BITS + search.eps_bits - STEP_BITS, True))
        z, r = _centre(planes, y)
        s = 2.0 ** math.floor(math.log2(r / 2)) if r > 0 else 0.0
        if s < GAIN * old:
            new.append((G, beta))
            continue
        new.append(_measure(search, z, s, (G, beta), AGREE * 2 * (len(y) + 1) * eta / old))
    return assemble(search, kinks, new)


def _plane(left: tuple[Vec, Num], right: tuple[Vec, Num]) -> tuple[np.ndarray, float]:
    """The hyperplane of the kink between two cells: where their affine maps agree."""
    n = np.array(right[0], dtype=np.float64) - np.array(left[0], dtype=np.float64)
    return n, float(right[1]) - float(left[1])


def _centre(planes: list[tuple[np.ndarray, float]], y: np.ndarray) -> tuple[np.ndarray, float]:
    """The Chebyshev centre of y's cell (y's signs on ``planes``) within :data:`BOX` of y
    in every coordinate, and its radius (0 when the program fails)."""
    d = len(y)
    L = BOX
    rows, rhs = [], []
    for n, c in planes:
        norm = float(np.linalg.norm(n))
        side = 1.0 if float(n @ y) + c > 0 else -1.0
        # side (n^T x + c) >= r |n|  <=>  -side n^T x + |n| r <= side c
        rows.append([*(-side * n), norm])
        rhs.append(side * c)
    box = [(float(v) - L, float(v) + L) for v in y] + [(0.0, L)]
    cost = np.zeros(d + 1)
    cost[-1] = -1.0
    if not rows:
        return y, L
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=box, method="highs")
    if not res.success:
        return y, 0.0
    return np.asarray(res.x[:d], dtype=np.float64), float(res.x[-1])


def _measure(
    search: FloatLineSearch, z: np.ndarray, s: float, old: tuple[Vec, Num], tol: float
) -> tuple[Vec, Num]:
    """(G, beta) of the cell from g at z and at z + s e_i (d + 1 queries), checked against
    the old measurement within ``tol``: AGREE times the old one's rounding error, 2 eta / step
    per probed entry and up to d times that on the entry the line's slope gave."""
    d = len(z)
    pts = [tuple(float(v) for v in z)]
    steps = []
    for i in range(d):
        p = list(pts[0])
        p[i] = p[i] + s
        steps.append(p[i] - pts[0][i])  # the step float64 actually took
        pts.append(tuple(p))
    vals = search.answers.many(pts)
    search.refined += 1
    G = np.array([(vals[i + 1] - vals[0]) / steps[i] for i in range(d)])
    beta = float(vals[0]) - float(G @ z)
    G_old = np.array(old[0], dtype=np.float64)
    if float(np.abs(G - G_old).max()) > tol:
        raise Retry(
            f"a cell's gradient re-measured at {pts[0]} ({G.tolist()}) disagrees with the "
            f"one measured on the line ({G_old.tolist()}): a hyperplane the line did not "
            "show passes between them"
        )
    return tuple(float(x) for x in G), beta

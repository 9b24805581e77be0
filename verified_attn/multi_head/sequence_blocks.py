"""The sequence polish without a P x P matrix: a matrix-free fit and per-head block figures.

>>> import numpy as np
>>> from verified_attn.multi_head import sequence_fit as sf
>>> gen = np.random.default_rng(0)
>>> truth = [(gen.normal(0, 0.5, (2, 2)), gen.normal(0, 1, 2)) for _ in range(2)]
>>> X = sf.polish_sequences(2, 40, seed=0)
>>> rows = sf.compress(X, sf.model_values(truth, 0.0, sf.compress(X, [0.0] * 40), False))
>>> fit = fit_matrix_free([(W + 0.01, v) for W, v in truth], 0.0, rows, affine=False)
>>> bool(np.abs(fit.heads[0][0] - truth[0][0]).max() < 1e-10)
True
>>> figs = block_figures(fit.heads, 0.0, rows, affine=False)
>>> bool(0 < figs.sigma_min and figs.sensitivity < np.inf)
True

Past :data:`DENSE_FIGURE_PARAMETERS` canonical parameters P the sequence polish holds no
P x P matrix (memory ``O(n L d + n H d + H (d^2 + 2d)^2)``: the answers' rows, the heads'
per-row terms and one Gram block per head):

* **The fit**: Levenberg-Marquardt with Marquardt's diagonal scaling, as the dense
  :func:`~.sequence_fit.fit_sequences`, each step ``argmin |J s + r|^2 + mu |D s|^2`` solved
  by lsqr on the Jacobian as an operator (:mod:`.sequence_operator`), right-preconditioned
  by the Cholesky factors of the start's per-head Gram blocks
  (:func:`~.sequence_operator.block_damped_step`).
* **The figures** bound the dense ones from above. With ``G`` the block diagonal of
  ``A = J^T J`` (one ``(d^2 + 2d)`` block per head, beta its own block) and ``lambda`` the
  smallest eigenvalue of ``G^-1/2 A G^-1/2`` (the heads' coupling; 1 for uncoupled heads),
  ``A >= lambda G``, so ``A^-1 <= G^-1 / lambda``: each parameter's sensitivity
  ``|row_i J^+| = ((A^-1)_ii)^(1/2) <= ((G^-1)_ii / lambda)^(1/2)``, a prediction's
  ``|g^T J^+| <= (g^T G^-1 g / lambda)^(1/2)``, and ``sigma_min(J)^2 >= lambda min_h
  lambda_min(G_h)``. ``lambda`` is bounded below by Lanczos on ``G^-1/2 A G^-1/2`` with
  Kuczynski and Wozniakowski's bound for a random start on both ends of its spectrum
  (:func:`_lanczos_floor`; the number of blocks bounds its largest eigenvalue: each block's
  columns are orthonormal after ``G_h^-1/2``); :data:`FAILURE_PROBABILITY` is the chance,
  over the start, that the bound is wrong. The start is seeded (the certificate checker
  recomputes the same figure). Since also ``(A^-1)_ii >= (G^-1)_ii`` (a principal block's
  inverse), the stated sensitivity is at most ``lambda^-1/2`` times the dense one (measured,
  random d = 4 - 16, H = 3 - 8 with 3 random answers per parameter: ``lambda`` 0.09 - 0.12,
  the figures 2.3 - 2.8 x the dense; on the learner's own answers, random d = 16, H = 8
  seed 1: ``lambda`` 5.1e-5, bounded by 2.5e-5 after about 5000 Lanczos steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigvalsh_tridiagonal
from scipy.sparse.linalg import LinearOperator

from verified_attn.multi_head.sequence_fit import (
    _CHUNK,
    _LM_ITERATIONS,
    SequenceFit,
    SequenceRows,
    _head_terms,
    cost_noise,
    evaluation_floor,
    fit_sequences,
    model_values,
    pack_parameters,
    unpack_parameters,
)
from verified_attn.multi_head.sequence_operator import block_damped_step, jacobian_operator

__all__ = [
    "DENSE_FIGURE_PARAMETERS",
    "FAILURE_PROBABILITY",
    "BlockFigures",
    "block_figures",
    "coupling_floor",
    "fit_matrix_free",
    "gram_blocks",
    "polish_fit",
]

#: Up to this many canonical parameters the polish keeps its dense normal equations and
#: their exact figures (``J^T J`` at most 46 MB, about four P x P arrays at its peak);
#: past it, this module's. It is the coarse (float32) polish's own limit
#: (``pipeline.budget.POLISH_PARAMETERS``), so every float32 polish keeps the exact figures:
#: its tolerance 1e-3 leaves little room for the block bounds (measured with the limit at
#: 1200, nn.MultiheadAttention float32 E = 16, H = 8 seed 0, P = 2305: stated 8.9e-4
#: against 5.7e-5 dense). Below it the dense path is also the faster (random d = 16, H = 8
#: seed 1, P = 2176: 40 against 100 CPU-s for the whole run).
DENSE_FIGURE_PARAMETERS = 2400
#: The probability, over the Lanczos start, that the coupling's lower bound is wrong.
FAILURE_PROBABILITY = 1e-6
#: Lanczos steps at most; the steps stop earlier once the bound is at least
#: :data:`_CLOSE` of the Ritz estimate, or cannot turn positive within this many. About
#: ``13 (lambda_max / lambda)^1/2`` are needed: random d = 16, H = 8 seed 1 (``lambda``
#: 5.1e-5, ``lambda_max`` 7.6) takes about 5000.
_LANCZOS_STEPS = 8000
_CLOSE = 0.5
_LANCZOS_SEED = 0x6C61

Head = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class BlockFigures:
    """The residuals (model minus answers), ``rows`` with ``|rows g| >= |g^T J^+|`` for every
    g (``G^-1/2 / lambda^1/2``, an operator), the lower bound on ``sigma_min(J)``, the upper
    bound on ``max_i |row_i J^+|`` and the coupling's lower bound ``lambda``."""

    residuals: np.ndarray
    rows: LinearOperator
    sigma_min: float
    sensitivity: float
    coupling: float


def fit_matrix_free(
    heads: Sequence[Head], beta: float, rows: SequenceRows, *, affine: bool
) -> SequenceFit:
    """:func:`~.sequence_fit.fit_sequences` with each Levenberg-Marquardt step solved by lsqr
    on the column-scaled Jacobian operator (``damp = mu^1/2`` is Marquardt's ``mu diag(J^T
    J)``): no P x P matrix; the iterate with the smallest residual is kept."""
    H, d = len(heads), rows.queries.shape[1]
    theta = pack_parameters(heads, beta, affine)

    def residual(th: np.ndarray) -> np.ndarray:
        hs, bt = unpack_parameters(th, H, d, affine)
        return model_values(hs, bt, rows, affine) - rows.answers

    res = residual(theta)
    cost = float(res @ res)
    floor = evaluation_floor(rows.answers)
    op, D = jacobian_operator(unpack_parameters(theta, H, d, affine)[0], rows, affine)
    # The preconditioner's blocks once, at the start: the polish moves the heads little,
    # and any blocks give the same steps (only lsqr's iteration count depends on them).
    grams = gram_blocks(heads, rows, affine)
    mu = 1e-3
    for _ in range(_LM_ITERATIONS):
        step = block_damped_step(op, D, grams, -res, mu)
        # Below the cost's own rounding noise a decrease, measured or predicted by the
        # linear model, is no evidence of a better fit (as the dense fit).
        noise = cost_noise(cost, floor)
        trial = theta + step
        t_res = residual(trial)
        t_cost = float(t_res @ t_res)
        if math.isfinite(t_cost) and t_cost < cost:
            small = cost - t_cost <= max(1e-6 * cost, noise)
            theta, res, cost = trial, t_res, t_cost
            op, D = jacobian_operator(unpack_parameters(theta, H, d, affine)[0], rows, affine)
            mu = max(mu / 10.0, 1e-12)
            if small:
                break
        else:
            Js = op.matvec(D * step)
            predicted = -float(2.0 * (res @ Js) + Js @ Js)
            mu *= 10.0
            if mu > 1e10 or predicted <= noise:
                break
    hs, bt = unpack_parameters(theta, H, d, affine)
    return SequenceFit([tuple(np.array(x) for x in h) for h in hs], bt, res)


def polish_fit(
    heads: Sequence[Head], beta: float, rows: SequenceRows, *, affine: bool
) -> SequenceFit:
    """The sequence polish's fit: the dense normal equations
    (:func:`~.sequence_fit.fit_sequences`) up to :data:`DENSE_FIGURE_PARAMETERS` parameters,
    :func:`fit_matrix_free` past it."""
    if len(pack_parameters(heads, beta, affine)) > DENSE_FIGURE_PARAMETERS:
        return fit_matrix_free(heads, beta, rows, affine=affine)
    return fit_sequences(heads, beta, rows, affine=affine)


def _head_gram(head: Head, rows: SequenceRows, affine: bool) -> np.ndarray:
    """One head's block of ``J^T J`` ((d^2 + d) or (d^2 + 2d) square), in chunks of rows."""
    n, d = len(rows), rows.queries.shape[1]
    m = d * d + (2 * d if affine else d)
    G = np.zeros((m, m))
    step = max(1, _CHUNK // m)
    for lo in range(0, n, step):
        part = rows.take(slice(lo, lo + step))
        _, p, xa = _head_terms(head, part, affine)
        k = len(part)
        cols = [(xa[:, :, None] * part.queries[:, None, :]).reshape(k, d * d)]
        cols.append(np.einsum("nl,nld->nd", p, part.tokens))
        if affine:
            cols.append(xa)
        Jh = np.hstack(cols)
        G += Jh.T @ Jh
    return G


def gram_blocks(heads: Sequence[Head], rows: SequenceRows, affine: bool) -> list[np.ndarray]:
    """The block diagonal of ``J^T J``: one block per head, and beta's (1 x 1) if affine."""
    blocks = [_head_gram(hd, rows, affine) for hd in heads]
    if affine:
        blocks.append(np.array([[float(len(rows))]]))  # d y / d beta = 1 on every row
    return blocks


def _inverse_roots(
    heads: Sequence[Head], rows: SequenceRows, affine: bool
) -> tuple[list[np.ndarray], float, float] | None:
    """Per block ``G_b^-1/2``, the largest diagonal entry of ``G^-1`` and the smallest
    eigenvalue of any block; None if a block is singular to working precision."""
    blocks = gram_blocks(heads, rows, affine)
    roots, diag_max, low = [], 0.0, math.inf
    for G in blocks:
        lam, V = np.linalg.eigh(G)
        if not lam[0] > lam[-1] * 1e-15 * len(lam):
            return None
        roots.append((V / np.sqrt(lam)) @ V.T)
        diag_max = max(diag_max, float(np.einsum("ij,ij->i", V / lam, V).max()))
        low = min(low, float(lam[0]))
    return roots, diag_max, low


def _lanczos_floor(
    apply: Callable[[np.ndarray], np.ndarray], P: int, c: float, delta: float
) -> float:
    """A lower bound, wrong with probability at most ``delta`` over the seeded start, on the
    smallest eigenvalue of a positive semidefinite ``M`` whose largest is at most ``c``
    (``apply``: x -> M x), from k Lanczos steps on M. Kuczynski and Wozniakowski's bound for
    a random start, on the positive semidefinite ``M - lambda_min I`` and ``lambda_max I -
    M`` (fixed matrices with M's Krylov spaces; ``delta / 2`` each): with ``eps_k =
    (ln(1.648 P^1/2 / (delta / 2)) / (2k - 1))^2``, the largest Ritz value ``theta_max >=
    (1 - eps_k) lambda_max`` and the smallest ``theta_min - lambda_min <= eps_k (lambda_max -
    lambda_min)``, so with ``c' = min(c, theta_max / (1 - eps_k)) >= lambda_max``:
    ``lambda_min >= (theta_min - eps_k c') / (1 - eps_k)``. The three-term recurrence keeps
    three vectors (memory O(P), no reorthogonalisation): in floating point the Ritz values
    stay inside the spectrum up to rounding (Paige) and behave as exact Lanczos on a matrix
    with eigenvalues clustered at M's (Greenbaum), so the bound is the exact-arithmetic one to
    that extent. Stops once the bound is :data:`_CLOSE` of ``theta_min``, or as soon as it
    cannot turn positive within :data:`_LANCZOS_STEPS` steps (``theta_min`` only falls,
    ``c'`` stays at least ``theta_max``); 0 if it is not positive.

    >>> 0 < _lanczos_floor(lambda x: np.array([1.0, 2.0, 3.0] * 40) * x, 120, 3.0, 1e-6) <= 1
    True
    """
    rng = np.random.default_rng(_LANCZOS_SEED)
    v = rng.normal(size=P)
    v /= np.linalg.norm(v)
    prev = np.zeros(P)
    alpha: list[float] = []
    beta: list[float] = []
    log_term = math.log(1.648 * math.sqrt(P) / (delta / 2))
    last_eps = (log_term / (2 * _LANCZOS_STEPS - 1)) ** 2
    best = 0.0
    for j in range(_LANCZOS_STEPS):
        w = apply(v) - (beta[-1] * prev if beta else 0.0)
        alpha.append(float(v @ w))
        w -= alpha[-1] * v
        beta.append(float(np.linalg.norm(w)))
        # The Krylov space holds the start and k = j products (the conservative count).
        if (j % 8 == 7 or beta[-1] == 0.0) and j >= 1:
            low, high = (
                float(eigvalsh_tridiagonal(a, b, select="i", select_range=(i, i))[0])
                for a, b in [(np.array(alpha), np.array(beta[:-1]))]
                for i in (0, j)
            )
            eps = (log_term / (2 * j - 1)) ** 2
            if eps < 1.0:
                top = min(c, high / (1.0 - eps))
                best = max(best, (low - eps * top) / (1.0 - eps))
                if best >= _CLOSE * low or last_eps * high >= low:
                    break
        if beta[-1] == 0.0:
            break
        prev, v = v, w / beta[-1]
    return max(best, 0.0)


def coupling_floor(
    heads: Sequence[Head], rows: SequenceRows, affine: bool, roots: Sequence[np.ndarray]
) -> float:
    """The lower bound on ``lambda_min(G^-1/2 J^T J G^-1/2)`` (:func:`_lanczos_floor`, c =
    the number of blocks, with a relative margin for the blocks' rounding)."""
    op, D = jacobian_operator(heads, rows, affine)
    precondition = _block_diagonal(roots)

    def apply(x: np.ndarray) -> np.ndarray:
        y = precondition(x)
        return precondition(D * op.rmatvec(op.matvec(D * y)))

    P = sum(len(R) for R in roots)
    return _lanczos_floor(apply, P, len(roots) * (1 + 2.0**-20), FAILURE_PROBABILITY)


def _block_diagonal(roots: Sequence[np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """x -> the block diagonal matrix of ``roots`` times x."""
    cuts = np.cumsum([len(R) for R in roots])[:-1]

    def apply(x: np.ndarray) -> np.ndarray:
        parts = np.split(np.ravel(x), cuts)
        return np.concatenate([R @ part for R, part in zip(roots, parts, strict=True)])

    return apply


def block_figures(
    heads: Sequence[Head], beta: float, rows: SequenceRows, *, affine: bool
) -> BlockFigures:
    """The residuals and the per-head block figures (upper bounds on the dense ones, see the
    module's text); sensitivity inf and sigma_min 0 when a block is singular or the coupling
    bound is not positive."""
    residuals = model_values(heads, beta, rows, affine) - rows.answers
    P = len(pack_parameters(heads, beta, affine))
    found = _inverse_roots(heads, rows, affine)
    coupling = 0.0 if found is None else coupling_floor(heads, rows, affine, found[0])
    if found is None or not coupling > 0:
        empty = LinearOperator((0, P), matvec=lambda x: np.zeros(0), dtype=np.float64)
        return BlockFigures(residuals, empty, 0.0, math.inf, coupling)
    roots, diag_max, low = found
    blocks, scale = _block_diagonal(roots), 1.0 / math.sqrt(coupling)

    def matvec(g: np.ndarray) -> np.ndarray:
        return blocks(g) * scale

    op = LinearOperator((P, P), matvec=matvec, rmatvec=matvec, dtype=np.float64)
    return BlockFigures(
        residuals, op, math.sqrt(coupling * low), math.sqrt(diag_max / coupling), coupling
    )

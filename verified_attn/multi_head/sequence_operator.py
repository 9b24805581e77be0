"""The sequence fits' Jacobian as an operator that never holds it (the refinement's steps).

>>> import numpy as np
>>> from verified_attn.multi_head.sequence_fit import compress
>>> rows = compress([np.eye(2), np.array([[1.0, 2.0], [0.5, 0.0], [1.0, 1.0]])], [0.0, 0.0])
>>> op, D = jacobian_operator([(np.eye(2), np.ones(2))], rows, False)  # one head, d = 2
>>> op.shape, D.shape, op.matvec(np.zeros(6)).tolist()
((2, 6), (6,), [0.0, 0.0])

The refinement's Gauss-Newton steps never hold the Jacobian ``J`` (n x P) or ``J^T J``
(P x P): per head its rows are rank one in ``W_h`` (``a x_N^T``), so ``J D^-1``
(column-scaled) is applied from the heads' ``a`` and p-means, kept side by side (n, H d):
memory ``O(n H d + P)``, each step a ``scipy.sparse.linalg.lsqr`` solve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.linalg import LinAlgError, cholesky, solve_triangular
from scipy.sparse.linalg import LinearOperator, lsqr

from verified_attn.multi_head.sequence_fit import SequenceRows, _head_terms

__all__ = [
    "LSQR_TOL",
    "block_damped_step",
    "damped_step",
    "jacobian_operator",
]

#: lsqr's stopping tolerances (measured, d = 8, H = 6 seeds 0-3: 1e-12, 1e-8 and 1e-6 give
#: the refinement the same heads to the bit, in 590, 400 and 290 iterations).
LSQR_TOL = 1e-8
#: lsqr's iterations at most, per parameter.
_ITERATIONS_PER_PARAMETER = 20
#: The block-preconditioned lsqr's iterations at most (measured, random d = 16, H = 8:
#: two steps of 622 and over 1000 iterations, 300 gives the same heads to 5e-15; a step
#: cut short is still judged by the fit's cost).
_PRECONDITIONED_ITERATIONS = 300

Head = tuple[np.ndarray, ...]


def jacobian_operator(
    heads: Sequence[Head], rows: SequenceRows, affine: bool
) -> tuple[LinearOperator, np.ndarray]:
    """The Jacobian of the answers in the packed parameters, column-scaled (``J D^-1``), as
    an operator that never holds it, and the column norms D (a zero column's 1). Per row and
    head it is ``d f / d W_h = a x_N^T`` (a = ``sum_l p_l (v^T x_l - f_h) x_l``), ``d f / d
    v_h = sum_l p_l x_l`` (and ``d f / d c_h = a``, ``d f / d beta = 1``): the heads' a and
    p-means are kept side by side, (n, H d), so each product is one matrix product."""
    n, d = len(rows), rows.queries.shape[1]
    H, Q = len(heads), rows.queries
    terms = [_head_terms(hd, rows, affine) for hd in heads]
    XA = np.hstack([xa for _, _, xa in terms])  # (n, H d)
    PM = np.hstack([np.einsum("nl,nld->nd", p, rows.tokens) for _, p, _ in terms])
    cols = [np.sqrt((XA**2).T @ Q**2).reshape(H, d * d), np.sqrt(np.sum(PM**2, 0)).reshape(H, d)]
    if affine:
        cols.append(np.sqrt(np.sum(XA**2, 0)).reshape(H, d))
    D = np.concatenate([np.hstack(cols).ravel(), [math.sqrt(n)] if affine else []])
    D[D == 0] = 1.0
    per = d * d + (2 * d if affine else d)

    def matvec(x: np.ndarray) -> np.ndarray:
        x = np.ravel(x) / D
        blocks = x[: H * per].reshape(H, per)
        W = blocks[:, : d * d].reshape(H, d, d)
        out = np.einsum("nk,nk->n", XA, Q @ W.transpose(2, 0, 1).reshape(d, H * d))
        out += PM @ blocks[:, d * d : d * d + d].ravel()
        if affine:
            out += XA @ blocks[:, d * d + d :].ravel() + x[-1]
        return out

    def rmatvec(r: np.ndarray) -> np.ndarray:
        r = np.ravel(r)
        parts = [((XA * r[:, None]).T @ Q).reshape(H, d * d), (PM.T @ r).reshape(H, d)]
        if affine:
            parts.append((XA.T @ r).reshape(H, d))
        return np.concatenate([np.hstack(parts).ravel(), [r.sum()] if affine else []]) / D

    return LinearOperator((n, len(D)), matvec=matvec, rmatvec=rmatvec, dtype=np.float64), D


def damped_step(op: LinearOperator, D: np.ndarray, rhs: np.ndarray, mu: float = 0.0) -> np.ndarray:
    """The least-squares step ``argmin |J s - rhs|^2 + mu |D s|^2`` (Marquardt's diagonal
    scaling; Gauss-Newton for ``mu = 0``) from the column-scaled operator ``J D^-1``, by
    lsqr (``damp = sqrt(mu)``).

    >>> op = LinearOperator((2, 1), matvec=lambda x: np.array([x[0], x[0]]),
    ...                     rmatvec=lambda r: np.array([r[0] + r[1]]), dtype=np.float64)
    >>> float(damped_step(op, np.array([2.0]), np.array([1.0, 3.0]))[0])  # J = [[2], [2]]
    1.0
    """
    iters = _ITERATIONS_PER_PARAMETER * op.shape[1]
    out = lsqr(op, rhs, damp=math.sqrt(mu), atol=LSQR_TOL, btol=LSQR_TOL, iter_lim=iters)[0]
    return np.asarray(out / D, dtype=np.float64)


def block_damped_step(
    op: LinearOperator, D: np.ndarray, grams: Sequence[np.ndarray], rhs: np.ndarray, mu: float
) -> np.ndarray:
    """:func:`damped_step` right-preconditioned by the blocks of ``J^T J`` (``grams``, one
    per head and beta's, unscaled, possibly at nearby parameters): lsqr on ``[J D^-1;
    mu^1/2 I] R^-1`` with ``R_b^T R_b = D_b^-1 G_b D_b^-1 + mu I`` per block (Cholesky), so
    each head's own conditioning is taken out and lsqr's iterations follow the heads'
    coupling alone (tens to hundreds instead of thousands). The same damped problem, so the
    same step up to lsqr's tolerance; :func:`damped_step` if a block is not positive
    definite.

    >>> op = LinearOperator((2, 1), matvec=lambda x: np.array([x[0], x[0]]),
    ...                     rmatvec=lambda r: np.array([r[0] + r[1]]), dtype=np.float64)
    >>> J = np.array([[2.0], [2.0]])
    >>> float(block_damped_step(op, np.array([2.0]), [J.T @ J], np.array([1.0, 3.0]), 0.0)[0])
    1.0
    """
    n, P = op.shape
    cuts = np.cumsum([len(G) for G in grams])[:-1]
    try:
        factors = [
            cholesky(G / np.outer(s, s) + mu * np.eye(len(G)))
            for G, s in zip(grams, np.split(D, cuts), strict=True)
        ]
    except LinAlgError:
        return damped_step(op, D, rhs, mu)
    root = math.sqrt(mu)

    def solve(y: np.ndarray, trans: str) -> np.ndarray:
        parts = np.split(np.ravel(y), cuts)
        return np.concatenate(
            [solve_triangular(R, p, trans=trans) for R, p in zip(factors, parts, strict=True)]
        )

    def matvec(y: np.ndarray) -> np.ndarray:
        z = solve(y, "N")
        return np.concatenate([op.matvec(z), root * z])

    def rmatvec(u: np.ndarray) -> np.ndarray:
        u = np.ravel(u)
        return solve(op.rmatvec(u[:n]) + root * u[n:], "T")

    K = LinearOperator((n + P, P), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    rhs_aug = np.concatenate([rhs, np.zeros(P)])
    y = lsqr(K, rhs_aug, atol=LSQR_TOL, btol=LSQR_TOL, iter_lim=_PRECONDITIONED_ITERATIONS)[0]
    return np.asarray(solve(y, "N") / D, dtype=np.float64)

"""The low-rank joint fit's parameter error estimate past the dense limit, without its SVD.

>>> import numpy as np
>>> from verified_attn.multi_head.pipeline.skeleton_refine import _Theta, design_rows
>>> W = np.array([[1.0, 0.0], [0.0, 0.0]])
>>> U, t = np.array([[1.0, 0.0], [0.5, 1.0]]), np.array([0.5, 2.0])
>>> pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]
>>> x = design_rows(U, np.eye(2), False, pairs, t, (np.zeros(2), np.zeros((4, 2)), np.zeros((1, 2))))
>>> th = _Theta([W[:, :1]], [W[:1].T], [np.array([1.0, 0.5])], 0.0)
>>> x.y = x.model(th)
>>> bool(0 <= block_estimate(x, th, np.zeros(len(x.y)), 2.0**-53) < 1e-12)
True
>>> bool(0 <= reduced_estimate(x, th, np.zeros(len(x.y)), 2.0**-53) < 1e-12)
True

The dense estimate (:func:`.skeleton_refine.low_rank_estimate`) takes the Jacobian's SVD,
up to 4e7 entries. Past it :func:`reduced_estimate` computes the same figure from the
reduced unknowns' preconditioned Gram matrix M (n x n, n about the low-rank parameter
count; no N x n array), and past :data:`GRAM_LIMIT` entries of M :func:`block_estimate`
bounds it from above with the per-head block bound of
:mod:`verified_attn.multi_head.sequence_blocks`:

* **Gauge.** Head h's factors move as ``dW = dP Q^T + P dQ^T``, unchanged by
  ``(P X, -Q X^T)``; written ``dP = P_perp A`` (``P_perp`` an orthonormal basis of P's
  complement) every move of W is ``P_perp A Q^T + P dQ^T`` for exactly one (A, dQ), so
  the reduced Jacobian ``J T`` (T: (A, dQ, dv, beta) to the factors) has full column rank
  and ``L J^+ = L T (J T)^+`` for L the map to ``W_h, c_h, v_h, beta``, which kills the
  gauge.
* **Blocks.** With ``A = (J T)^T (J T)``, G its block diagonal (one block per head's
  (A, dQ), one for every v_h with beta) and ``lambda`` a lower bound on the smallest eigenvalue of ``G^-1/2 A G^-1/2``
  (:func:`~verified_attn.multi_head.sequence_blocks._lanczos_floor`, seeded, wrong with
  probability at most :data:`~verified_attn.multi_head.sequence_blocks.FAILURE_PROBABILITY`),
  ``A >= lambda G``, so each parameter's row of ``L J^+`` has norm at most
  ``(L_a G_h^-1 L_a^T / lambda)^1/2``: head h's own block, formed in chunks of rows.
* **Residual.** ``|(L J^+ r)_a| <= |row a of L J^+| |r|`` and the noise
  ``(|r_perp|^2 + |unit y|^2)^1/2 <= (|r|^2 + |unit y|^2)^1/2``: each parameter's figure is
  its row norm times ``|r| + (|r|^2 + |unit y|^2)^1/2``, at least the dense one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
from scipy.linalg import cho_factor, cho_solve, null_space

from verified_attn.multi_head.pipeline.skeleton_refine import _Rows, _start, _Theta, _to_heads
from verified_attn.multi_head.sequence_blocks import FAILURE_PROBABILITY, _lanczos_floor

__all__ = ["block_estimate", "heads_reduced_estimate", "reduced_estimate"]

_CHUNK = 1 << 22  # Jacobian entries per chunk of rows when a head's Gram block is formed
#: A block's columns as a function of a slice of rows, and their number.
_Columns = tuple[Callable[[slice], np.ndarray], int]
#: Up to this many entries of the reduced unknowns' preconditioned Gram matrix (n x n, n the
#: low-rank parameter count; 800 MB) the estimate is the dense one, exactly
#: (:func:`reduced_estimate`); past it the per-head bound (:func:`block_estimate`).
GRAM_LIMIT = 100_000_000
#: Largest condition number of a block's columns taken from their triangular factor when
#: their Gram matrix is singular to working precision (E = 64, H = 4 module seed 1: one
#: head's block is at 2^32.1).
TRIANGLE_CONDITION = 2.0**36


def _complements(th: _Theta) -> list[np.ndarray]:
    """Each head's ``P_perp`` (d, d - p)."""
    return [null_space(P.T) for P in th.P]


def _head_columns(rows: _Rows, th: _Theta, h: int, perp: np.ndarray) -> _Columns:
    """Head h's columns of ``J T`` (its (A, dQ)), by chunks of rows, and their number."""
    _, _, r, _, ds = rows.parts(th)
    w = r[h] * ds[h]
    Ua, Pa = rows.Uu @ perp, rows.Uu @ th.P[h]  # distinct rows' (d - p) and p coordinates
    Bq = rows.Mu @ th.Q[h]
    n = perp.shape[1] * Bq.shape[1] + Pa.shape[1] * rows.Mu.shape[1]
    iu, im = np.asarray(rows.iu), np.asarray(rows.im)

    def columns(sl: slice) -> np.ndarray:
        u, m, ww = iu[sl], im[sl], w[sl][:, None, None]
        return np.hstack(
            [
                (ww * Ua[u][:, :, None] * Bq[m][:, None, :]).reshape(len(u), -1),
                (ww * rows.Mu[m][:, :, None] * Pa[u][:, None, :]).reshape(len(u), -1),
            ]
        )

    return columns, n


def _value_columns(rows: _Rows, th: _Theta) -> _Columns:
    """The columns of every head's dv_h and beta (affine), and their number: the heads'
    values share their ``m_b^T sum_h v_h`` term, so they are one block, not H."""
    _, _, _, sig, _ = rows.parts(th)
    H, d = sig.shape[0], rows.Uu.shape[1]
    iu, im = np.asarray(rows.iu), np.asarray(rows.im)
    n = H * d + (1 if rows.affine else 0)

    def columns(sl: slice) -> np.ndarray:
        u, m = iu[sl], im[sl]
        lin = rows.Mu[m][:, :d]
        cols = [lin + rows.Uu[u] * sig[h][sl][:, None] for h in range(H)]
        if rows.affine:
            cols.append(np.ones((len(u), 1)))
        return np.hstack(cols)

    return columns, n


def _gram(columns: Callable[[slice], np.ndarray], N: int, n: int) -> np.ndarray:
    """``C^T C`` for the N x n matrix C whose rows ``sl`` are ``columns(sl)``, in chunks."""
    G = np.zeros((n, n))
    step = max(1, _CHUNK // n)
    for lo in range(0, N, step):
        C = columns(slice(lo, lo + step))
        G += C.T @ C
    return G


def _block_root(block: _Columns, N: int) -> np.ndarray | None:
    """A block's ``G^-1/2``: from its Gram matrix, else (singular to working precision
    there, which squares the columns' condition number) from the columns' own triangular
    factor ``C = Q R``, accumulated chunk by chunk (``G = R^T R``, so with ``R = U S V^T``,
    ``G^-1/2 = V S^-1 V^T``); None when the columns' condition number is over
    :data:`TRIANGLE_CONDITION`. (Any symmetric positive definite root gives the same figure
    in exact arithmetic; this one keeps M near the identity on the block, and M's products
    through it carry about u times the block's condition number: at most 2^-17.)"""
    columns, n = block
    root = _inverse_root(_gram(columns, N, n))
    if root is not None:
        return root
    R: np.ndarray = np.zeros((0, n))
    step = max(1, _CHUNK // n)
    for lo in range(0, N, step):  # mode "r": the triangular factor alone, an array
        R = cast(np.ndarray, np.linalg.qr(np.vstack([R, columns(slice(lo, lo + step))]), mode="r"))
    _, s, Vt = np.linalg.svd(R)
    if not s[-1] > s[0] / TRIANGLE_CONDITION:
        return None
    return (Vt.T / s) @ Vt


def _inverse_root(G: np.ndarray) -> np.ndarray | None:
    """``G^-1/2``; None when G is singular to working precision. Any symmetric positive
    definite R serves where ``G^-1/2`` is used (``J^+ = T R (R A R)^-1 R (J T)^T``, and the
    bound uses R itself), so a block as ill-conditioned as E = 64, H = 4's (4.7e-14 from
    its smallest eigenvalue to its largest) is taken as it comes."""
    lam, V = np.linalg.eigh(G)
    if not lam[0] > lam[-1] * 2.0**-52:
        return None
    return (V / np.sqrt(lam)) @ V.T


def _reduced_operator(
    rows: _Rows, th: _Theta, perps: list[np.ndarray]
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """x -> (J T) x and y -> (J T)^T y on the reduced unknowns (A_h, dQ_h, dv_h per head,
    then beta if affine), through the refinement's matrix-free Jacobian."""
    op = rows.operator(th)
    H, (d, p), J = len(th.P), th.P[0].shape, th.Q[0].shape[0]
    dp = d - p
    nA, nQ, nv = H * dp * p, H * J * p, H * d
    extra = 1 if rows.affine else 0

    def to_full(x: np.ndarray) -> np.ndarray:
        A = x[:nA].reshape(H, dp, p)
        dP = np.stack([perps[h] @ A[h] for h in range(H)])
        beta = x[nA + nQ + nv :] if extra else np.zeros(1)
        return np.concatenate([dP.ravel(), x[nA : nA + nQ + nv], beta])

    def from_full(g: np.ndarray) -> np.ndarray:
        dP = g[: H * d * p].reshape(H, d, p)
        A = np.stack([perps[h].T @ dP[h] for h in range(H)])
        rest = g[H * d * p :]
        return np.concatenate([A.ravel(), rest[: nQ + nv], rest[nQ + nv :][:extra]])

    return (lambda x: op.matvec(to_full(x))), (lambda y: from_full(op.rmatvec(y)))


def _block_layout(th: _Theta, affine: bool) -> list[np.ndarray]:
    """Each block's indices in the reduced unknowns (:func:`_reduced_operator`'s order):
    head h's (A_h, dQ_h), then every dv_h with beta."""
    H, (d, p), J = len(th.P), th.P[0].shape, th.Q[0].shape[0]
    dp = d - p
    nA, nQ = H * dp * p, H * J * p
    out = [
        np.concatenate(
            [np.arange(h * dp * p, (h + 1) * dp * p), nA + np.arange(h * J * p, (h + 1) * J * p)]
        )
        for h in range(H)
    ]
    out.append(nA + nQ + np.arange(H * d + (1 if affine else 0)))
    return out


def coupling(rows: _Rows, th: _Theta, roots: list[np.ndarray], perps: list[np.ndarray]) -> float:
    """The lower bound on ``lambda_min(G^-1/2 (J T)^T (J T) G^-1/2)`` (:func:`_lanczos_floor`,
    c = the number of blocks with a relative margin for the blocks' rounding)."""
    mv, rmv = _reduced_operator(rows, th, perps)
    layout = _block_layout(th, rows.affine)
    n = sum(len(ix) for ix in layout)
    pre = _preconditioner(roots, layout, n)

    def apply(x: np.ndarray) -> np.ndarray:
        return pre(rmv(mv(pre(x))))

    return _lanczos_floor(apply, n, len(roots) * (1 + 2.0**-20), FAILURE_PROBABILITY)


def block_estimate(rows: _Rows, th: _Theta, residuals: np.ndarray, unit: float) -> float:
    """The joint fit's first-order error of one parameter, relative to max(1, largest
    parameter), bounded per head (see the module's text); inf when a block is singular or
    the coupling bound is not positive."""
    found = _blocks(rows, th)
    if found is None:
        return math.inf
    perps, roots, layout = found
    lam = coupling(rows, th, roots, perps)
    if not lam > 0:
        return math.inf
    # each block's rows of L G_b^-1/2 (no step: noise 1 gives the row norms)
    zero = [np.zeros(len(ix)) for ix in layout]
    sens = max(_entry_figures(th, b, perps, roots[b], zero[b], 1.0) for b in range(len(layout)))
    sens /= math.sqrt(lam)
    res = float(np.linalg.norm(residuals))
    noise = math.sqrt(res**2 + float(np.sum((unit * rows.y) ** 2)))
    heads = _to_heads(th, rows.affine)
    size = max(1.0, abs(th.beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    return sens * (res + noise) / size


def _blocks(
    rows: _Rows, th: _Theta
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] | None:
    """Each head's ``P_perp``, the blocks' ``G^-1/2`` (heads, then the values' block) and
    their indices; None when a block is singular."""
    perps = _complements(th)
    blocks = [_head_columns(rows, th, h, perps[h]) for h in range(len(th.P))]
    roots = [_block_root(b, len(rows.y)) for b in [*blocks, _value_columns(rows, th)]]
    if any(R is None for R in roots):
        return None
    return perps, [R for R in roots if R is not None], _block_layout(th, rows.affine)


def reduced_estimate(rows: _Rows, th: _Theta, residuals: np.ndarray, unit: float) -> float:
    """:func:`.skeleton_refine.low_rank_estimate`'s figure without the N x n Jacobian's SVD:
    ``J^+ = T G^-1/2 M^-1 G^-1/2 (J T)^T`` with ``M = G^-1/2 (J T)^T (J T) G^-1/2`` (n x n,
    formed by n products with the matrix-free Jacobian, Cholesky-factored: G's blocks
    leave M well conditioned where ``J^T J`` would square J's condition), so each
    parameter's row of ``L J^+`` and the step still to go are the dense estimate's. Past
    :data:`GRAM_LIMIT` entries of M, :func:`block_estimate`; inf when a block or M is
    singular (the module's example).
    """
    found = _blocks(rows, th)
    if found is None:
        return math.inf
    perps, roots, layout = found
    n = sum(len(ix) for ix in layout)
    if n * n > GRAM_LIMIT:
        return block_estimate(rows, th, residuals, unit)
    mv, rmv = _reduced_operator(rows, th, perps)
    pre = _preconditioner(roots, layout, n)
    M = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = 1.0
        M[:, j] = pre(rmv(mv(pre(e))))
    M = (M + M.T) / 2
    try:
        C = cho_factor(M, overwrite_a=True)
    except np.linalg.LinAlgError:
        return math.inf
    del M
    step = pre(cho_solve(C, pre(rmv(residuals))))  # J^+ r in the reduced unknowns
    r_perp = residuals - mv(step)
    noise = math.sqrt(float(r_perp @ r_perp) + float(np.sum((unit * rows.y) ** 2)))
    worst = 0.0
    for b, ix in enumerate(layout):
        # rows of L G^-1/2 (M^-1)_bb^1/2: M^-1's diagonal block b, by solves on its columns
        E = np.zeros((n, len(ix)))
        E[ix, np.arange(len(ix))] = 1.0
        S = cho_solve(C, E)[ix]
        lam, V = np.linalg.eigh((S + S.T) / 2)
        Z = roots[b] @ (V * np.sqrt(np.clip(lam, 0.0, None)))
        worst = max(worst, _entry_figures(th, b, perps, Z, step[ix], noise))
    heads = _to_heads(th, rows.affine)
    size = max(1.0, abs(th.beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    return worst / size


def _preconditioner(
    roots: list[np.ndarray], layout: list[np.ndarray], n: int
) -> Callable[[np.ndarray], np.ndarray]:
    """x -> G^-1/2 x (block diagonal)."""

    def pre(x: np.ndarray) -> np.ndarray:
        out = np.empty(n)
        for ix, R in zip(layout, roots, strict=True):
            out[ix] = R @ x[ix]
        return out

    return pre


def _entry_figures(
    th: _Theta,
    b: int,
    perps: list[np.ndarray],
    Z: np.ndarray,
    step: np.ndarray,
    noise: float,
) -> float:
    """The largest ``|(L step)_a| + noise |row a of L Z|`` over block b's parameters (a
    head's W and c entries, or every v_h and beta); Z = G_b^-1/2 (M^-1)_bb^1/2."""
    H = len(th.P)
    if b == H:
        return float((np.abs(step) + noise * np.sqrt((Z**2).sum(-1))).max())
    d, p = th.P[b].shape
    J, dp = th.Q[b].shape[0], perps[b].shape[1]
    both = np.column_stack([step, Z])  # column 0 the step, then Z's
    A = both[: dp * p].reshape(dp, p, -1)
    Q = both[dp * p :].reshape(J, p, -1)
    PA = np.einsum("ia,akn->ikn", perps[b], A)
    worst = 0.0
    for i in range(d):  # row i of dW = P_perp A Q^T + P dQ^T
        dW = np.einsum("kn,jk->jn", PA[i], th.Q[b]) + np.einsum("k,jkn->jn", th.P[b][i], Q)
        fig = np.abs(dW[:, 0]) + noise * np.sqrt((dW[:, 1:] ** 2).sum(-1))
        worst = max(worst, float(fig.max()))
    return worst


def heads_reduced_estimate(
    rows: _Rows, heads: list[tuple[np.ndarray, ...]], beta: float, p: int, unit: float
) -> float:
    """:func:`reduced_estimate` at given heads (balanced rank-p factors), their residuals
    against ``rows``: what the certificate checker recomputes past the dense limit, as
    :func:`.skeleton_refine.heads_estimate` below it."""
    facs = _start(heads, p, rows.affine)
    th = _Theta([f[0] for f in facs], [f[1] for f in facs], [hd[1].copy() for hd in heads], beta)
    return reduced_estimate(rows, th, rows.model(th) - rows.y, unit)

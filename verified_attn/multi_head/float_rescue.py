"""Starts for a stalled u-group from the other groups' heads when the box's heads have low rank.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> bases = [np.linalg.qr(rng.normal(size=(9, 2)))[0].T for _ in range(3)]  # 3 heads, rank 2
>>> planes = np.stack([np.stack([rng.normal(size=2) @ b for b in bases], axis=1)[:, rng.permutation(3)]
...                    for _ in range(6)])   # 6 u-groups' planes (6, 9, 3), heads in any order
>>> found = head_subspaces(planes)
>>> found.rank, found.bases.shape
(2, (3, 2, 9))

A u-group's scores are ``s_jh = u^T (W_h b_j + c_h) = m_j^T w_h`` with ``m_j = (b_j, 1)`` and
the group's plane ``w_h = (W_h^T u, c_h^T u)``. Real attention modules have heads of low
rank: ``nn.MultiheadAttention``'s ``W_h = W_q,h^T W_k,h / sqrt(E/H)`` has rank E/H (2 at
E = 16, H = 8). Then every group's plane of head h lies in one rank-E/H subspace (the row
space of ``[W_h | c_h]``), and a group whose own fit stalls in a local minimum (its pairs'
scores, 8 unknowns from 17 answers each, in wrong basins) has only E/H unknowns per head
left once that subspace is known from the groups that did converge.

:func:`head_subspaces` finds the subspaces from the converged groups' planes alone (no
query, no assumption): it looks for the smallest rank rho at which, for every head of one
group, exactly one choice of a head in each of rho more groups spans rho dimensions with it,
and every other converged group then has one head in each subspace. Full-rank heads (random
``W ~ N(0, 1/d)``) have no such rho and nothing changes. :func:`subspace_starts` then gives
the stalled group's starts: per subspace, the plane through rho of its single-pair scores
that the most pairs meet (a consensus: one wrong-basin score does not bend it), and the
same with one head's rho coefficients searched on a grid (the head too few pairs agree
on). A start is only a start: the group's fit from it must meet its own answers at its
rounding floor like any other (:mod:`.canonical_float`), and the result is verified as
always; a box whose heads only look low-rank costs the fit's time, not a wrong answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["GRID_STARTS", "HeadSubspaces", "head_subspaces", "subspace_starts"]

# Relative distance (of a unit plane vector to a subspace) under which it lies in it: the
# converged groups' planes are accurate to their first-order error, 1e-11 - 1e-8 relative in
# float64 (nn.MultiheadAttention E = 16, H = 8: 1e-10), and a plane of another head is
# 0.1 - 1 away. A float32 box's planes (1e-4) never pass: no restarts there.
SUBSPACE_TOL = 1e-6
# The largest rank tried (the combinations tried grow like H^rank).
MAX_RANK = 4
_MAX_COMBINATIONS = 4096
# Converged groups beyond the rho + 1 that span a subspace, each of which must then have
# one head in every subspace (the evidence that the rank is the heads', not a coincidence).
_CHECK_GROUPS = 2
# A pair's score within this (log t units) of a consensus plane agrees with it. Measured
# (nn.MultiheadAttention E = 16, H = 8, seed 9002, three stalled groups): the single-pair
# scores of 8 - 25 of the 25 pairs per head are within 0.05 of the truth, and planes through
# them are 1e-4 - 1e-2 off; the group fit converges from 0.3.
INLIER = 0.05
# Random rho-tuples of single-pair scores tried per head when not every tuple is (rho > 2).
_TUPLES = 20_000
# Grid points per coefficient of the searched head, and its range over the converged
# groups' coefficients (x this margin).
_GRID = 61
_GRID_MARGIN = 1.5
_GRID_CHUNK = 512
#: Grid points per searched head whose fits are run (one batch).
GRID_STARTS = 32


@dataclass(frozen=True)
class HeadSubspaces:
    """Each head's plane subspace: ``bases`` (H, rank, p), orthonormal rows, and the largest
    coefficient a converged group has in each (``reach`` (H,)), which sizes a grid."""

    rank: int
    bases: np.ndarray
    reach: np.ndarray


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)


def head_subspaces(
    planes: np.ndarray, *, max_rank: int = MAX_RANK, tol: float = SUBSPACE_TOL
) -> HeadSubspaces | None:
    """The heads' plane subspaces from converged groups' planes ``planes`` (G, p, H), each
    group's heads in its own order; None where no rank up to ``max_rank`` explains them.

    A rank rho is accepted when (1) for every head of group 1, exactly one choice of a head
    in each of groups 2 .. rho + 1 spans rho dimensions with it (relative smallest singular
    value under ``tol``), the choices forming one head each; (2) every further group (at
    least ``_CHECK_GROUPS`` of them) has exactly one head within ``tol`` of each subspace.

    >>> rng = np.random.default_rng(1)
    >>> head_subspaces(rng.normal(size=(8, 9, 3))) is None   # full-rank heads
    True
    """
    G, p, H = planes.shape
    X = _unit(np.moveaxis(planes, 1, 2))  # (G, H, p) unit plane vectors
    for rho in range(1, min(max_rank, p - 1) + 1):
        if G < rho + 1 + _CHECK_GROUPS or H**rho > _MAX_COMBINATIONS:
            break
        combos = np.array(list(itertools.product(range(H), repeat=rho)))  # (C, rho)
        chosen = np.empty((H, rho + 1), dtype=int)
        ok = True
        for h in range(H):
            rows = np.concatenate(
                [
                    np.repeat(X[0, h][None, None], len(combos), axis=0),
                    X[np.arange(1, rho + 1)[None, :], combos],
                ],
                axis=1,
            )  # (C, rho + 1, p)
            sv = np.linalg.svd(rows, compute_uv=False)
            small = np.flatnonzero(sv[:, rho] <= tol * sv[:, 0])
            if len(small) != 1:
                ok = False
                break
            chosen[h] = [h, *combos[small[0]]]
        if not ok or any(len(set(chosen[:, g])) != H for g in range(rho + 1)):
            continue
        bases = np.empty((H, rho, p))
        members = [[X[g, chosen[h, g]] for g in range(rho + 1)] for h in range(H)]
        for h in range(H):
            bases[h] = np.linalg.svd(np.array(members[h]))[2][:rho]
        for g in range(rho + 1, G):
            # Distance of each of group g's heads to each subspace (H heads x H subspaces).
            dist = np.linalg.norm(
                X[g][:, None, :] - np.einsum("lp,hrp,hrq->lhq", X[g], bases, bases), axis=-1
            )
            near = dist <= tol
            if not (near.sum(axis=0) == 1).all() or not (near.sum(axis=1) == 1).all():
                ok = False
                break
            for h in range(H):
                members[h].append(X[g, int(np.flatnonzero(near[:, h])[0])])
        if not ok:
            continue
        reach = np.empty(H)
        for h in range(H):
            bases[h] = np.linalg.svd(np.array(members[h]))[2][:rho]
        # The coefficients of the groups' own (unnormalised) planes in each basis.
        for h in range(H):
            coef = np.einsum("rp,gpl->grl", bases[h], planes)
            fit = np.linalg.norm(np.einsum("rp,grl->gpl", bases[h], coef) - planes, axis=1)
            inside = fit <= tol * np.maximum(np.linalg.norm(planes, axis=1), 1e-300)
            reach[h] = float(np.max(np.abs(coef).max(axis=1)[inside], initial=0.0))
        return HeadSubspaces(rho, bases, reach)
    return None


def _consensus(
    Z: np.ndarray, cand_s: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """The coefficients a (rho,) of the plane ``s_j = Z_j a`` that the most pairs meet within
    :data:`INLIER` with one of their single-pair scores ``cand_s`` (J, H), refitted on those;
    and which score of each pair (J,) and how many pairs met it."""
    J, H = cand_s.shape
    rho = Z.shape[1]
    flat = [(j, h) for j in range(J) for h in range(H)]
    if rho <= 2:
        tuples = np.array([t for t in itertools.combinations(range(len(flat)), rho)])
    else:
        tuples = rng.integers(0, len(flat), size=(_TUPLES, rho))
    pair = np.array([f[0] for f in flat])[tuples]  # (N, rho)
    head = np.array([f[1] for f in flat])[tuples]
    distinct = np.array([len(set(t)) == rho for t in pair]) if rho > 1 else np.ones(len(pair), bool)
    pair, head = pair[distinct], head[distinct]
    A = Z[pair]  # (N, rho, rho)
    det = np.abs(np.linalg.det(A))
    good = det > 1e-6 * np.prod(np.linalg.norm(A, axis=2), axis=1)
    pair, head, A = pair[good], head[good], A[good]
    a = np.linalg.solve(A, cand_s[pair, head][..., None])[..., 0]  # (N, rho)
    pred = a @ Z.T  # (N, J)
    miss = np.abs(pred[:, :, None] - cand_s[None]).min(axis=2)
    # A soft count (each pair 1 - (miss / INLIER)^2, at least 0): a plane that a few
    # wrong-basin scores happen to meet within INLIER does not outvote the pairs that meet
    # the true one almost exactly (synthetic: 8 chance meetings against 7 exact ones).
    support = np.clip(1.0 - (miss / INLIER) ** 2, 0.0, None).sum(axis=1)
    best = int(np.argmax(support))
    which = np.abs(pred[best][:, None] - cand_s).argmin(axis=1)
    inl = np.flatnonzero(miss[best] <= INLIER)
    coef = np.linalg.lstsq(Z[inl], cand_s[inl, which[inl]], rcond=None)[0]
    return coef, which, len(inl)


def _residues(lt: np.ndarray, s: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residues r (N, H) that fit the answers ``Y`` (J, T) best for scores ``s``
    (N, J, H), by linear least squares (normal equations), and the residual norms (N,)."""
    sig = 0.5 * (1.0 + np.tanh(0.5 * (s[:, :, None, :] + lt[None, None, :, None])))
    X = sig.reshape(len(s), -1, s.shape[-1])  # (N, J T, H)
    y = Y.reshape(-1)
    A = np.einsum("nie,nif->nef", X, X)
    b = np.einsum("nie,i->ne", X, y)
    with np.errstate(all="ignore"):
        r = np.linalg.solve(
            A + 1e-14 * np.trace(A, axis1=1, axis2=2)[:, None, None] * np.eye(A.shape[1]),
            b[..., None],
        )[..., 0]
    res = np.linalg.norm(np.einsum("nie,ne->ni", X, r) - y[None], axis=1)
    return r, np.where(np.isfinite(res), res, np.inf)


def subspace_starts(
    lt: np.ndarray,
    Y: np.ndarray,
    Mt: np.ndarray,
    cand_s: np.ndarray,
    found: HeadSubspaces,
    rng: np.random.Generator,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches of starts ``(r (N, H), w (N, p, H))`` for one stalled group's fit: the
    consensus planes in the subspaces ``found`` through its single-pair scores ``cand_s``
    (J, H) (N = 1), then (rank <= 2), head by head, the heads fewest pairs agree on first,
    the same with that head's coefficients at the :data:`GRID_STARTS` grid points whose
    residues fit the answers ``Y`` (J, T) best. Residues by least squares on ``Y``.

    Several grid points, not the best: with the other heads' planes off by their consensus
    error (1e-3 - 1e-2), the least-squares misfit hardly tells a head's coefficients apart
    where its scores leave the ratio window (measured: nn.MultiheadAttention E = 16, H = 8,
    module seed 9008, u_14's head with scores 6.5 - 13.1: the grid point nearest its truth
    ranks 365th of 3721, the best point sits at 0, and of the best 32 points' fits one meets
    the group's floor)."""
    H = cand_s.shape[1]
    Zs = np.einsum("jp,hrp->hjr", Mt, found.bases)  # (H, J, rho)
    w = np.empty((Mt.shape[1], H))
    support = np.empty(H, dtype=int)
    for h in range(H):
        coef, _, support[h] = _consensus(Zs[h], cand_s, rng)
        w[:, h] = found.bases[h].T @ coef
    r, _ = _residues(lt, (Mt @ w)[None], Y)
    yield r, w[None]
    if found.rank > 2:
        return
    for h in np.argsort(support, kind="stable"):
        axis = np.linspace(-1.0, 1.0, _GRID) * _GRID_MARGIN * found.reach[h]
        grid = np.array(list(itertools.product(axis, repeat=found.rank)))  # (N, rho)
        misfit = np.empty(len(grid))
        for lo in range(0, len(grid), _GRID_CHUNK):
            s = np.repeat((Mt @ w)[None], len(grid[lo : lo + _GRID_CHUNK]), axis=0)
            s[:, :, h] = grid[lo : lo + _GRID_CHUNK] @ Zs[h].T
            misfit[lo : lo + _GRID_CHUNK] = _residues(lt, s, Y)[1]
        best = np.argsort(misfit, kind="stable")[:GRID_STARTS]
        ws = np.repeat(w[None], len(best), axis=0)
        ws[:, :, h] = grid[best] @ found.bases[h]
        rs, _ = _residues(lt, np.einsum("jp,nph->njh", Mt, ws), Y)
        yield rs, ws

"""The redundant design's u-group fit in (r, w), ``s = M^T w``: its Jacobian, the
Gauss-Newton steps, the starts (least squares on the free scores, consensus planes) and the
score weights.

>>> import numpy as np
>>> lt = np.log([0.25, 1.0, 4.0])
>>> Mt = np.eye(2)
>>> linear_jacobian(lt, Mt, np.ones((1, 1)), np.zeros((1, 2, 1))).shape[0]
1
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from verified_attn.multi_head.float_fit import (
    _MAX_SCORE_STEP,
    GroupFit,
    _parts,
    _sigmoid,
    group_model,
    linear_jacobian,
)

__all__ = [
    "consensus_start",
    "fit_linear_groups",
    "linear_jacobian",
    "linear_start",
    "plane_scores",
    "score_weights",
    "sigma_min_linear",
]


def plane_scores(Mt: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The scores ``s = Mt w`` (G, J, H) of plane coordinates ``w`` (G, p, H): ``Mt`` (J, p)
    one plane for every head (the probe columns), or (J, p, H) a plane per head (a partial
    u-group's scores in the row space of the full groups' rows, :mod:`.pipeline.skeleton_rows`).

    >>> Mt = np.arange(6.0).reshape(3, 2); w = np.ones((1, 2, 2))
    >>> bool((plane_scores(Mt, w) == plane_scores(np.stack([Mt, Mt], axis=2), w)).all())
    True
    """
    if Mt.ndim == 2:
        return np.einsum("ja,gah->gjh", Mt, w)
    return np.einsum("jah,gah->gjh", Mt, w)


def fit_linear_groups(
    lt: np.ndarray,
    Y: np.ndarray,
    Mt: np.ndarray,
    r0: np.ndarray,
    w0: np.ndarray,
    *,
    steps: int = 100,
    qr_steps: int = 8,
    floor: np.ndarray | float = 0.0,
) -> GroupFit:
    """Levenberg-Marquardt in (r, w) on every group at once, then Gauss-Newton steps by QR.

    ``Y`` (G, J, T), ``Mt`` (J, p) with J > p, starts ``r0`` (G, H) and ``w0`` (G, p, H).
    The damped steps solve the normal equations (Marquardt's diagonal scaling); the
    closing steps solve the least-squares problem by QR (the conditioning not squared),
    each accepted only where it lowers the group's residual. Returns the scores
    ``s = Mt w`` (G, J, H), so that the result is a :class:`GroupFit` like the free fit's.

    >>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0]))
    >>> Mt = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])   # 3 pairs, p = 2
    >>> r = np.array([[1.0, -2.0]]); w = np.array([[[0.5, -1.0], [1.5, 0.25]]])
    >>> Y = group_model(lt, r, np.einsum("ja,gah->gjh", Mt, w))
    >>> fit = fit_linear_groups(lt, Y, Mt, r + 0.05, w - 0.05)
    >>> bool(np.abs(fit.s - np.einsum("ja,gah->gjh", Mt, w)).max() < 1e-12)
    True
    """
    r, w = r0.astype(np.float64).copy(), w0.astype(np.float64).copy()
    G, p, H = w.shape
    floor_g = np.broadcast_to(np.asarray(floor, dtype=np.float64), (G,))

    def residual(rv: np.ndarray, wv: np.ndarray, yv: np.ndarray) -> np.ndarray:
        sv = np.clip(plane_scores(Mt, wv), -40.0, 40.0)
        return (group_model(lt, rv, sv) - yv).reshape(len(rv), -1)

    R = residual(r, w, Y)
    norm = np.linalg.norm(R, axis=1)
    mu = np.full(G, 1e-3)
    act = np.flatnonzero(norm > 0)
    n = H + p * H
    eye = np.eye(n)
    for _ in range(steps):
        if not len(act):
            break
        A, g = _linear_normal(lt, Mt, R[act], r[act], w[act])
        diag = np.diagonal(A, axis1=1, axis2=2) + 1e-30
        with np.errstate(all="ignore"):
            try:
                step = -np.linalg.solve(
                    A + mu[act][:, None, None] * diag[:, None, :] * eye, g[..., None]
                )[..., 0]
            except np.linalg.LinAlgError:
                step = -np.einsum(
                    "gab,gb->ga",
                    np.linalg.pinv(A + mu[act][:, None, None] * diag[:, None, :] * eye),
                    g,
                )
        step = np.where(np.isfinite(step), step, 0.0)
        dr, dw = step[:, :H], step[:, H:].reshape(-1, p, H)
        # The scores move at most _MAX_SCORE_STEP (the free fit's trust region).
        ds = np.abs(plane_scores(Mt, dw)).max(axis=(1, 2))
        shrink = np.minimum(1.0, _MAX_SCORE_STEP / np.maximum(ds, 1e-300))
        tr, tw = r[act] + dr * shrink[:, None], w[act] + dw * shrink[:, None, None]
        tR = residual(tr, tw, Y[act])
        tnorm = np.linalg.norm(tR, axis=1)
        old = norm[act]
        better = np.isfinite(tnorm) & (tnorm < old)
        small = better & (old - tnorm <= 1e-3 * old) & (tnorm <= floor_g[act])
        i = act[better]
        r[i], w[i], R[i], norm[i] = tr[better], tw[better], tR[better], tnorm[better]
        mu[act] = np.where(better, np.maximum(mu[act] / 10.0, 1e-16), mu[act] * 10.0)
        act = act[~small & (mu[act] < 1e10) & (norm[act] > 0)]
    for _ in range(qr_steps):  # Gauss-Newton by QR: below what the normal equations reach
        idx = np.flatnonzero(~(norm <= floor_g))  # the groups at their floor are done
        if not len(idx):
            break
        found = _gauss_newton_steps(lt, Mt, r[idx], w[idx], R[idx])
        if found is None:
            break
        step = np.where(np.isfinite(found), found, 0.0)
        tr, tw = r[idx] + step[:, :H], w[idx] + step[:, H:].reshape(-1, p, H)
        tR = residual(tr, tw, Y[idx])
        tnorm = np.linalg.norm(tR, axis=1)
        ok = np.isfinite(tnorm) & (tnorm < norm[idx])
        if not ok.any():
            break
        i = idx[ok]
        r[i], w[i], R[i], norm[i] = tr[ok], tw[ok], tR[ok], tnorm[ok]
    return GroupFit(r=r, s=plane_scores(Mt, w), residual=norm)


#: Numbers in the dense group Jacobians formed at once by the Gauss-Newton steps
#: (:func:`_gauss_newton_steps`): at nn.MultiheadAttention E = 64, H = 4 all 64 groups' are
#: 157 MB each (the QR's Q as large again), 2 - 3 GB with the temporaries.
_JACOBIAN_ENTRIES = 1 << 23


def _gauss_newton_steps(
    lt: np.ndarray, Mt: np.ndarray, r: np.ndarray, w: np.ndarray, R: np.ndarray
) -> np.ndarray | None:
    """Each group's Gauss-Newton step in (r, w) by QR of its column-scaled Jacobian
    (:func:`linear_jacobian`), (G, H + p H); formed for blocks of groups of at most
    :data:`_JACOBIAN_ENTRIES` numbers (each group's step is its own). None if a triangular
    factor is singular. ``R`` (G, J T): the residuals."""
    G, p, H = w.shape
    size = max(1, _JACOBIAN_ENTRIES // (Mt.shape[0] * len(lt) * (H + p * H)))
    out = np.empty((G, H + p * H))
    for start in range(0, G, size):
        part = slice(start, start + size)
        J = linear_jacobian(lt, Mt, r[part], w[part])
        cn = np.linalg.norm(J, axis=1, keepdims=True)
        cn = np.where(cn > 0, cn, 1.0)
        Q, Rm = np.linalg.qr(J / cn)
        with np.errstate(all="ignore"):
            try:
                rhs = -(Q.swapaxes(1, 2) @ R[part][..., None])
                out[part] = np.linalg.solve(Rm, rhs)[..., 0] / cn[:, 0, :]
            except np.linalg.LinAlgError:
                return None
    return out


def _linear_normal(
    lt: np.ndarray, Mt: np.ndarray, R: np.ndarray, r: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """J^T J (G, n, n) and J^T R (G, n) of :func:`linear_jacobian` without forming J: its
    w-block is ``Mt[j, a] Js[j, t, h]``, so the products reduce to the pairs' H x H blocks
    (p^2 H^2 J work a group instead of (J T) (H + pH)^2: 18x less at d = 32, H = 8).
    ``R`` (G, J T): the residuals."""
    G, p, H = w.shape
    J, T = Mt.shape[0], len(lt)
    s = plane_scores(Mt, w)
    _, Js, Jr = _parts(lt, np.zeros((G, J, T)), r, s)
    Rj = R.reshape(G, J, T)
    ss = Js.swapaxes(-1, -2) @ Js  # (G, J, H, H)
    rs = Jr.swapaxes(-1, -2) @ Js
    a, b = ("ja", "jb") if Mt.ndim == 2 else ("jah", "jbk")
    ww = np.einsum(f"{a},{b},gjhk->gahbk", Mt, Mt, ss).reshape(G, p * H, p * H)
    rw = np.einsum(f"{b},gjhk->ghbk", Mt, rs).reshape(G, H, p * H)
    rr = (Jr.swapaxes(-1, -2) @ Jr).sum(axis=1)
    A = np.block([[rr, rw], [rw.swapaxes(1, 2), ww]])
    g_r = np.einsum("gjth,gjt->gh", Jr, Rj)
    g_w = np.einsum(f"{a},gjh->gah", Mt, np.einsum("gjth,gjt->gjh", Js, Rj)).reshape(G, p * H)
    return A, np.concatenate([g_r, g_w], axis=1)


def sigma_min_linear(lt: np.ndarray, Mt: np.ndarray, r: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The smallest singular value of each group's Jacobian in (r, w) (G,): the conditioning
    figure of the redundant design (:func:`fit_linear_groups`), as :func:`sigma_min_groups`
    is the free fit's."""
    J = linear_jacobian(lt, Mt, r, w)
    return np.linalg.svd(J, compute_uv=False)[:, -1]


def linear_start(
    Mt: np.ndarray, s: np.ndarray, weight: np.ndarray | None = None, tol: float = 1e-6
) -> np.ndarray:
    """w (G, p, H) from free scores ``s`` (G, J, H) by least squares on ``s = Mt w``, with
    the pairs that miss the plane left out one by one (worst first, while more than p + 1
    are left): a pair of the free fit in a wrong basin (two heads' scores swapped, a pole
    moved) must not bias the others.

    ``weight`` (G, J, H): how much each score is seen (the norm of its Jacobian column,
    ``|r_h| |sigmoid'(s_jh + log t)|``; default 1). Each head's plane is fitted with these
    weights and a pair's miss is its largest weighted one: a saturated head (its score far
    outside the ratio window) has a free fit anywhere and must neither bend the plane nor
    count as a wrong basin. (Not measured apart: at nn.MultiheadAttention E = 16, H = 8 the
    failing groups had 10 - 17 of 25 pairs in wrong basins, and the plane was off by 0.5 - 3
    with or without the weights; the benchmark's learned cells ran with them.)

    >>> Mt = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, -0.6]])
    >>> w = np.array([[[0.5, -1.0], [1.5, 0.25]]]); s = np.einsum("ja,gah->gjh", Mt, w)
    >>> s[0, 2] = s[0, 2, ::-1]                       # pair 3's two heads swapped
    >>> bool(np.abs(linear_start(Mt, s) - w).max() < 1e-12)
    True
    """
    G, J, H = s.shape
    p = Mt.shape[1]
    weight = np.ones_like(s) if weight is None else weight
    out = np.empty((G, p, H))
    for g in range(G):
        keep = list(range(J))
        while True:
            wg = np.empty((p, H))
            for h in range(H):
                sw = weight[g, keep, h]
                wg[:, h] = np.linalg.lstsq(Mt[keep] * sw[:, None], s[g, keep, h] * sw, rcond=None)[
                    0
                ]
            miss = (np.abs(Mt[keep] @ wg - s[g, keep]) * weight[g, keep]).max(axis=1)
            worst = int(np.argmax(miss))
            if miss[worst] <= tol or len(keep) <= p + 1:
                break
            keep.pop(worst)
        out[g] = wg
    return out


#: Planes tried per head by :func:`consensus_start`: every p-subset of the pairs while
#: there are at most this many, else this many seeded random ones.
CONSENSUS_SUBSETS = 512
# A pair is on a consensus plane when its weighted miss is within this factor of the
# plane's score (at least the p + (J - p) // 2 pairs the score counts).
_INLIER_FACTOR = 10.0


def consensus_start(
    Mt: np.ndarray, s: np.ndarray, weight: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """w (G, p, H) from free scores ``s`` (G, J, H) by consensus, head by head: each plane
    through p pairs (:data:`CONSENSUS_SUBSETS` of them) is scored by the
    ``p + (J - p) // 2``-th smallest weighted miss over all J pairs, and the pairs the best
    one meets within :data:`_INLIER_FACTOR` times that miss are fitted by least squares.

    :func:`linear_start` leaves out the worst pair one at a time, but with few redundant
    pairs (J - p = 3 at d = 8, H = 8) a least-squares plane through a wrong-basin pair
    spreads its miss over the others, and a good pair goes first. A plane through p good
    pairs alone does not bend. Measured (the float benchmark's random float64 boxes d = 8,
    H = 8 seeds 1, 4 and d = 16, H = 8 seeds 1, 5: the eight u-groups that stalled, each
    meeting its answers at 2 - 4 x its rounding floor at the true heads): from the greedy
    start all eight stayed at 4e11 - 2e13 x the floor, from this one 7 of 8 reached 1 - 2 x
    it (the eighth has only p good pairs in some heads: no consensus to find).
    Per head, because a wrong basin is usually two or three heads of a pair (a swap), not
    all of them. ``weight``: as in :func:`linear_start`.

    >>> Mt = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, -0.6], [0.3, 0.9]])
    >>> w = np.array([[[0.5, -1.0], [1.5, 0.25]]]); s = np.einsum("ja,gah->gjh", Mt, w)
    >>> s[0, 0] += [0.4, -0.3]                       # one pair in a wrong basin
    >>> got = consensus_start(Mt, s, np.ones_like(s), np.random.default_rng(0))
    >>> bool(np.abs(got - w).max() < 1e-12)
    True
    """
    G, J, H = s.shape
    p = Mt.shape[1]
    if math.comb(J, p) <= CONSENSUS_SUBSETS:
        subsets = np.array(list(itertools.combinations(range(J), p)))
    else:
        subsets = np.array([rng.choice(J, p, replace=False) for _ in range(CONSENSUS_SUBSETS)])
    with np.errstate(all="ignore"):
        solve = np.linalg.pinv(Mt[subsets])  # (n, p, p): the subsets' planes, once for all groups
    extra = (J - p) // 2
    rank = p + extra - 1  # the scored miss: a plane must meet half the pairs beyond its own
    out = np.empty((G, p, H))
    for g in range(G):
        x = solve @ s[g][subsets]  # (n, p, H): one plane per subset and head
        miss = np.abs(np.einsum("ja,nah->njh", Mt, x) - s[g][None]) * weight[g][None]
        miss = np.where(np.isfinite(miss), miss, np.inf)
        score = np.sort(miss, axis=1)[:, rank, :]  # (n, H)
        best = np.argmin(score, axis=0)
        for h in range(H):
            near = miss[best[h], :, h] <= _INLIER_FACTOR * score[best[h], h]
            inliers = np.flatnonzero(near)
            sw = weight[g, inliers, h]
            out[g, :, h] = np.linalg.lstsq(Mt[inliers] * sw[:, None], s[g, inliers, h] * sw)[0]
    return out


def score_weights(lt: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """How much each score of a group is seen (G, J, H): ``|r_h| |sigmoid'(s_jh + log t)|``
    over the samples, relative to the group's answers' scale (its largest residue)."""
    sig = _sigmoid(s[:, :, None, :] + lt[None, None, :, None])
    seen = np.sqrt(((sig * (1.0 - sig)) ** 2).sum(axis=2))
    scale = np.maximum(np.abs(r).max(axis=1), 1e-300)
    return seen * (np.abs(r) / scale[:, None])[:, None, :]

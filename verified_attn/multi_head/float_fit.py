"""Pooled float fits of the canonical multi-head design: u-groups, link matching, conditioning.

>>> import numpy as np
>>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0]))
>>> r = np.array([[1.0, -2.0]]); s = np.array([[[0.3, -0.4], [1.1, 0.2]]])  # 1 group, 2 pairs
>>> Y = group_model(lt, r, s)
>>> fit = fit_groups(lt, Y, r + 0.05, s + 0.05)
>>> bool(np.abs(fit.r - r).max() < 1e-12), bool(np.abs(fit.s - s).max() < 1e-12)
(True, True)

For a fixed probe direction u_k every pair (u_k, b_j) has the same residues
``r_h = u_k^T v_h`` (v_h does not depend on b), so the pairs of one *u-group* are fitted
jointly: unknowns H shared residues and H scores per pair, answers ``Y[j, t] = F(t) - F(0)
= sum_h r_h sigmoid(s_jh + log t)``. The head identity across j is then fixed by the shared
residue, and each residue is determined by all of the group's answers instead of one
pair's 2H + 1. Levenberg-Marquardt on the normal equations, with the scores of each pair
eliminated first (a Schur complement onto the H residues), vectorised over all groups: the
cost is linear in the number of pairs.

Why pooling is better conditioned: two heads with scores ``m +- delta/2`` in one pair and
*unknown* residues are separated only at second order (the residue difference and the
score difference both move F along ``sigmoid'``), so one pair alone loses ``1/delta^2``;
with the residues fixed by the other pairs of the group it loses ``1/delta``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GroupFit",
    "fit_groups",
    "group_model",
    "inverse_grams",
    "link_noise",
    "link_orders",
    "row_sensitivities",
    "sigma_min_groups",
]

_LM_STEPS = 200
# A score moves at most this far per step (a trust region in log t: the sigmoids have width
# ~1, and a head with a tiny residue has a nearly free score that would run away).
_MAX_SCORE_STEP = 0.5


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def group_model(lt: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``sum_h r[g, h] sigmoid(s[g, j, h] + lt[t])`` as an array (G, J, T)."""
    sig = _sigmoid(s[:, :, None, :] + lt[None, None, :, None])  # (G, J, T, H)
    return (sig @ r[:, None, :, None])[..., 0]


@dataclass
class GroupFit:
    """Fitted residues r (G, H), scores s (G, J, H) and residual norms per group (G,)."""

    r: np.ndarray
    s: np.ndarray
    residual: np.ndarray


def _parts(
    lt: np.ndarray, Y: np.ndarray, r: np.ndarray, s: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sig = _sigmoid(s[:, :, None, :] + lt[None, None, :, None])  # (G, J, T, H)
    R = (sig @ r[:, None, :, None])[..., 0] - Y
    Js = sig * (1.0 - sig) * r[:, None, None, :]  # dF/ds
    return R, Js, sig  # sig = dF/dr


def _normal(
    R: np.ndarray, Js: np.ndarray, Jr: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # Batched matrix products (BLAS), not einsum: this is the decoder's inner loop.
    JsT, JrT = Js.swapaxes(-1, -2), Jr.swapaxes(-1, -2)
    A = JsT @ Js
    C = JsT @ Jr
    D = (JrT @ Jr).sum(axis=1)
    gs = (JsT @ R[..., None])[..., 0]
    gr = (JrT @ R[..., None])[..., 0].sum(axis=1)
    return A, C, D, gs, gr


def _solve(
    A: np.ndarray, C: np.ndarray, D: np.ndarray, gs: np.ndarray, gr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Solve [[A, C], [C^T, D]] [ds; dr] = -[gs; gr] with A block diagonal per pair."""
    H = A.shape[-1]
    eye = np.eye(H)
    # A tiny ridge keeps a singular block (a head with residue 0 has no score) solvable.
    A = A + 1e-300 * eye
    try:
        Ai_C = np.linalg.solve(A, C)  # (G, J, H, H)
        Ai_g = np.linalg.solve(A, gs[..., None])[..., 0]  # (G, J, H)
    except np.linalg.LinAlgError:  # a saturated start: every sigmoid 0 or 1 in some pair
        Ai = np.linalg.pinv(A)
        Ai_C, Ai_g = Ai @ C, (Ai @ gs[..., None])[..., 0]
    CT = C.swapaxes(-1, -2)
    S = D - (CT @ Ai_C).sum(axis=1)
    rhs = -(gr - (CT @ Ai_g[..., None])[..., 0].sum(axis=1))
    try:
        dr = np.linalg.solve(S, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        dr = np.stack(
            [np.linalg.lstsq(Sg, bg, rcond=None)[0] for Sg, bg in zip(S, rhs, strict=True)]
        )
    ds = -Ai_g - (Ai_C @ dr[:, None, :, None])[..., 0]
    return ds, dr


def fit_groups(
    lt: np.ndarray,
    Y: np.ndarray,
    r0: np.ndarray,
    s0: np.ndarray,
    *,
    steps: int = _LM_STEPS,
    floor: np.ndarray | float = 0.0,
) -> GroupFit:
    """Levenberg-Marquardt (Marquardt's diagonal scaling) on every group at once.

    ``Y`` (G, J, T): the answers minus F(0) of their pair; ``lt`` (T,): log t of the samples;
    starts ``r0`` (G, H), ``s0`` (G, J, H). Each group keeps its own damping and never
    accepts a step that raises its residual, so the result is never worse than the start.
    A group stops when its damping runs away or its residual is at ``floor`` (per group)
    and no longer falls by 0.1 % a step.
    """
    r, s = r0.astype(np.float64).copy(), s0.astype(np.float64).copy()
    G, H = r.shape
    eye = np.eye(H)
    floor_g = np.broadcast_to(np.asarray(floor, dtype=np.float64), (G,))
    R, Js, Jr = _parts(lt, Y, r, s)
    norm = np.sqrt(np.einsum("gjt,gjt->g", R, R))
    mu = np.full(G, 1e-2)
    # Only the groups still moving are computed (a stopped group costs nothing).
    act = np.flatnonzero(norm > 0)
    for _ in range(steps):
        if not len(act):
            break
        A, C, D, gs, gr = _normal(R[act], Js[act], Jr[act])
        m = mu[act]
        dA = np.diagonal(A, axis1=-2, axis2=-1)
        dD = np.diagonal(D, axis1=-2, axis2=-1)
        A = A + (m[:, None, None] * (dA + 1e-30))[..., None] * eye
        D = D + (m[:, None] * (dD + 1e-30))[..., None] * eye
        with np.errstate(all="ignore"):
            ds, dr = _solve(A, C, D, gs, gr)
        ds = np.where(np.isfinite(ds), np.clip(ds, -_MAX_SCORE_STEP, _MAX_SCORE_STEP), 0.0)
        dr = np.where(np.isfinite(dr), dr, 0.0)
        ts = np.clip(s[act] + ds, -40.0, 40.0)
        tr = r[act] + dr
        tR, tJs, tJr = _parts(lt, Y[act], tr, ts)
        tnorm = np.sqrt(np.einsum("gjt,gjt->g", tR, tR))
        old = norm[act]
        better = np.isfinite(tnorm) & (tnorm < old)
        small = better & (old - tnorm <= 1e-3 * old) & (tnorm <= floor_g[act])
        i = act[better]
        s[i], r[i], R[i], Js[i], Jr[i], norm[i] = (
            ts[better],
            tr[better],
            tR[better],
            tJs[better],
            tJr[better],
            tnorm[better],
        )
        mu[act] = np.where(better, np.maximum(m / 10.0, 1e-16), m * 10.0)
        act = act[~small & (mu[act] < 1e10) & (norm[act] > 0)]
    return GroupFit(r=r, s=s, residual=norm)


def sigma_min_groups(lt: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The smallest singular value of each group's Jacobian in (r, s) (G,): the conditioning
    figure of the group's first-order error ``|dY| / sigma_min``.

    Dense SVD of the (J T) x (H + J H) Jacobian when it is small; otherwise inverse power
    iteration through the Schur complement (40 steps, seeded), an estimate from below of
    ``1 / sigma_min`` that converges to it.
    """
    G, J, H = s.shape
    T = len(lt)
    _, Js, Jr = _parts(lt, np.zeros((G, J, T)), r, s)
    if J * T * (H + J * H) <= 400_000:
        out = np.empty(G)
        for g in range(G):
            out[g] = np.linalg.svd(_dense_jacobian(Jr[g], Js[g]), compute_uv=False)[-1]
        return out
    A, C, D, _, _ = _normal(np.zeros((G, J, T)), Js, Jr)
    rng = np.random.default_rng(0)
    xs, xr = rng.standard_normal((G, J, H)), rng.standard_normal((G, H))
    lam = np.zeros(G)
    for _ in range(40):
        nrm = np.sqrt(np.einsum("gja,gja->g", xs, xs) + np.einsum("ga,ga->g", xr, xr))
        xs, xr = xs / nrm[:, None, None], xr / nrm[:, None]
        with np.errstate(all="ignore"):
            ys, yr = _solve(A, C, D, -xs, -xr)
        lam = np.einsum("gja,gja->g", xs, ys) + np.einsum("ga,ga->g", xr, yr)
        xs, xr = ys, yr
    with np.errstate(all="ignore"):
        return np.where(np.isfinite(lam) & (lam > 0), 1.0 / np.sqrt(np.abs(lam)), 0.0)


def row_sensitivities(
    lt: np.ndarray, r: np.ndarray, s: np.ndarray, Minv: np.ndarray | None, Mt: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How far one unit of answer noise can move each head parameter a u-group fixes.

    For group g the least-squares fit moves by ``J_g^+ dY_g`` to first order; a linear
    functional ``l`` of its parameters moves by at most ``|l^T J_g^+| |dY_g|``, with
    ``|l^T J_g^+|^2 = l^T (J_g^T J_g)^-1 l`` (attained by dY_g along that row). Returned:
    ``w`` (G, p, H), the norm for entry ``a`` of ``[W_h | c_h]^T u_g`` (square design:
    ``sum_j Minv[j, a] s[g, j, h]``; redundant design, ``Mt`` given: the fit's own
    ``w[g, a, h]``); ``res`` (G, H), for the residue ``r[g, h]``; ``total`` (G,), for
    ``sum_h r[g, h]``. A rank-deficient group gets inf. Exactly one of ``Minv`` (J, p) and
    ``Mt`` (J, p, the redundant design's probe rows) is given.

    >>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0]))
    >>> r = np.array([[1.0, -2.0]]); s = np.array([[[0.3, -0.4]]])
    >>> w, res, total = row_sensitivities(lt, r, s, np.eye(1), None)
    >>> _, Js, Jr = _parts(lt, np.zeros((1, 1, 5)), r, s)
    >>> J = _dense_jacobian(Jr[0], Js[0])  # the group's Jacobian in (r, s)
    >>> bool(np.isclose(res[0, 0], np.linalg.norm(np.linalg.pinv(J)[0])))
    True
    """
    G, J, H = s.shape
    P, ok = inverse_grams(lt, r, s, Minv, Mt)
    p = (P.shape[1] - H) // H  # the probe matrix's width (square: J = p)
    Prr = P[:, :H, :H]
    res = np.sqrt(np.maximum(np.einsum("ghh->gh", Prr), 0.0))
    total = np.sqrt(np.maximum(Prr.sum(axis=(1, 2)), 0.0))
    if Minv is None:
        Pw = P[:, H:, H:].reshape(G, p, H, p, H)
        w_out = np.sqrt(np.maximum(np.einsum("gahah->gah", Pw), 0.0))
    else:
        Ps = P[:, H:, H:].reshape(G, J, H, J, H)
        Ph = np.einsum("gjhkh->ghjk", Ps)  # (G, H, J, J): head h's scores across the pairs
        w_out = np.sqrt(np.maximum(np.einsum("ja,ghjk,ka->gah", Minv, Ph, Minv), 0.0))
    bad = ~ok
    w_out[bad], res[bad], total[bad] = math.inf, math.inf, math.inf
    return w_out, res, total


def inverse_grams(
    lt: np.ndarray, r: np.ndarray, s: np.ndarray, Minv: np.ndarray | None, Mt: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each u-group's ``(J_g^T J_g)^-1`` and whether J_g has full column rank.

    The Jacobian is in (r, s) for the square design (``Minv`` given; columns: the H residues,
    then the scores pair-major, ``j * H + h``) or in (r, w) for the redundant one (``Mt``
    given, :func:`linear_jacobian`'s columns). By the SVD ``J = W S V^T`` (not the normal
    equations, which square the conditioning): ``(J^T J)^-1 = V S^-2 V^T``; a group with
    ``sigma_min <= (rows) x eps x sigma_max`` counts as rank deficient (its rows are 0 and
    ``ok`` is False). A linear functional ``l`` of group g's fit moves by at most
    ``sqrt(l^T P_g l) |dY_g|`` under an answer change ``dY_g``, to first order.
    """
    G, J, _ = s.shape
    T = len(lt)
    if (Minv is None) == (Mt is None):  # pragma: no cover - a caller's error
        raise ValueError("inverse_grams needs exactly one of Minv and Mt")
    if Mt is not None:
        w = np.einsum("aj,gjh->gah", np.linalg.pinv(Mt), s)
        Jfull = linear_jacobian(lt, Mt, r, w)
    else:
        _, Js, Jr = _parts(lt, np.zeros((G, J, T)), r, s)
        Jfull = np.stack([_dense_jacobian(Jr[g], Js[g]) for g in range(G)])
    _, sv, Vt = np.linalg.svd(Jfull, full_matrices=False)
    ok = (sv.shape[1] == Jfull.shape[2]) & (
        sv[:, -1] > Jfull.shape[1] * np.finfo(np.float64).eps * sv[:, 0]
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        inv2 = np.where(ok[:, None], 1.0 / np.where(sv > 0, sv, 1.0) ** 2, 0.0)
    return (Vt.swapaxes(1, 2) * inv2[:, None, :]) @ Vt, ok


def _dense_jacobian(Jr: np.ndarray, Js: np.ndarray) -> np.ndarray:
    """One group's (J T) x (H + J H) Jacobian in (r, s) from its blocks (J, T, H)."""
    J, T, H = Js.shape
    full = np.zeros((J * T, H + J * H))
    for j in range(J):
        full[j * T : (j + 1) * T, :H] = Jr[j]
        full[j * T : (j + 1) * T, H + j * H : H + (j + 1) * H] = Js[j]
    return full


def link_noise(
    lt: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    k: int,
    p: np.ndarray,
    noise: np.ndarray,
) -> float:
    """First-order bound on the miss of the TRUE head order's prediction of the halved link
    ``((u_1 + u_k) / 2, b_1)`` caused by the noise of groups 1 and k (without the link's own).

    A change dY_g of group g's answers moves its least-squares (r_g, s_g) by ``J_g^+ dY_g``
    and the link prediction of order ``p`` by ``L_g J_g^+ dY_g`` (``L_g``: the prediction's
    Jacobian in group g's parameters), at most ``|L_g J_g^+| |dY_g|``; ``noise[g]`` is
    ``|dY_g|`` (the group's residual and rounding floor). ``r`` (G, H), ``s`` (G, J, H): the
    fitted groups; ``p``: group k's order against group 1.

    >>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0]))
    >>> r = np.array([[1.0, -2.0], [0.5, 1.5]]); s = np.array([[[0.3, -0.4]], [[1.1, 0.2]]])
    >>> b = link_noise(lt, r, s, 1, np.array([0, 1]), np.array([1e-8, 2e-8]))
    >>> bool(1e-7 < b < 1e-5), bool(link_noise(lt, r, s, 1, np.array([0, 1]), np.zeros(2)) == 0)
    (True, True)
    """
    H, J = r.shape[1], s.shape[1]
    R = (r[0] + r[k][p]) / 2
    sig = _sigmoid((s[0, 0] + s[k, 0][p])[None, :] / 2 + lt[:, None])  # (T, H)
    dr, ds = sig / 2, R[None, :] * sig * (1.0 - sig) / 2  # the link in r_h, s_0h of a group
    bound = 0.0
    for g, cols in ((0, np.arange(H)), (k, p)):
        # The link's head h is group g's head cols[h] (group 1: h itself; group k: p[h]).
        _, Js, Jr = _parts(lt, np.zeros((1, J, len(lt))), r[g][None], s[g][None])
        L = np.zeros((len(lt), H + J * H))
        L[:, cols], L[:, H + cols] = dr, ds
        gain = np.linalg.norm(L @ np.linalg.pinv(_dense_jacobian(Jr[0], Js[0])), 2)
        bound += float(gain) * float(noise[g])
    return bound


def link_orders(
    lt: np.ndarray,
    y: np.ndarray,
    r1: np.ndarray,
    s1: np.ndarray,
    rk: np.ndarray,
    sk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Every head order p of group k, ranked by how well it predicts a halved link.

    The link ``((u_1 + u_k) / 2, b)`` has residues ``(r1_h + rk_p(h)) / 2`` and scores
    ``(s1_h + sk_p(h)) / 2`` (both linear in u), so each order predicts the link's answers
    ``y`` (minus F(0)) outright, with no fit. Returns the orders (P, H) and their residual
    norms (P,), best first. Memory: H! x T per chunk of 5040 orders.

    >>> lt = np.log(np.array([0.5, 1.0, 2.0, 4.0]))
    >>> r1, rk = np.array([1.0, 2.0]), np.array([-1.0, 3.0])
    >>> s1, sk = np.array([0.1, 0.9]), np.array([-0.5, 0.4])
    >>> y = group_model(lt, ((r1 + rk[::-1]) / 2)[None], ((s1 + sk[::-1]) / 2)[None, None])[0, 0]
    >>> orders, miss = link_orders(lt, y, r1, s1, rk, sk)
    >>> orders[0].tolist(), bool(miss[0] < 1e-15 < miss[1])
    ([1, 0], True)
    """
    H = len(r1)
    R = (r1[:, None] + rk[None, :]) / 2  # (h, h')
    sig = _sigmoid((s1[:, None] + sk[None, :])[:, :, None] / 2 + lt[None, None, :])
    term = R[:, :, None] * sig  # (h, h', T)
    perms = np.array(list(itertools.permutations(range(H))), dtype=np.intp)
    miss = np.empty(len(perms))
    rows = np.arange(H)
    for lo in range(0, len(perms), 5040):
        P = perms[lo : lo + 5040]
        pred = term[rows[None, :], P].sum(axis=1)  # (p, T)
        miss[lo : lo + 5040] = np.sqrt(((pred - y[None, :]) ** 2).sum(axis=1))
    order = np.argsort(miss, kind="stable")
    return perms[order], miss[order]


def heads_named(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int]:
    """The first two positions where two head orders differ (the heads that cannot be told
    apart), 0-based.

    >>> heads_named((0, 1, 2), (0, 2, 1))
    (1, 2)
    """
    diff = [h for h in range(len(a)) if a[h] != b[h]]
    return (diff[0], diff[1]) if len(diff) >= 2 else (diff[0], diff[0])


def closest_gap(s: np.ndarray) -> float:
    """The smallest distance between two scores of one pair, over all pairs (inf if H = 1).

    >>> closest_gap(np.array([[[0.0, 0.5, 2.0]]]))
    0.5
    """
    if s.shape[-1] < 2:
        return math.inf
    srt = np.sort(s, axis=-1)
    return float(np.diff(srt, axis=-1).min())


def fit_scores(
    lt: np.ndarray,
    Y: np.ndarray,
    r: np.ndarray,
    s0: np.ndarray,
    *,
    steps: int = 60,
    prune: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores alone with the residues fixed, from many starts: ``Y`` (P, T), ``r`` (P, H),
    ``s0`` (P, S, H); returns the best scores (P, H) and their residual norms (P,).

    Levenberg-Marquardt per (pair, start), batched; used to repair a pair whose pooled
    fit sits in a local minimum (two heads' scores swapped), from every transposition.
    ``prune=(n, keep)``: after n steps only each pair's ``keep`` best starts go on (the
    cost of many starts is in their first steps, a slow basin in its last ones).

    >>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0]))
    >>> r = np.array([[1.0, 3.0]]); s = np.array([[0.5, -1.0]])
    >>> Y = group_model(lt, r, s[:, None])[:, 0]
    >>> got, miss = fit_scores(lt, Y, r, np.array([[[-1.0, 0.5], [0.4, -0.9]]]))
    >>> bool(np.abs(got - s).max() < 1e-12)
    True
    """
    P, S, H = s0.shape
    N = P * S
    s = s0.reshape(N, H).astype(np.float64).copy()
    rr = np.repeat(r, S, axis=0)  # (N, H)
    yy = np.repeat(Y, S, axis=0)  # (N, T)
    eye = np.eye(H)

    def parts(sv: np.ndarray, rv: np.ndarray, yv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sig = _sigmoid(sv[:, None, :] + lt[None, :, None])  # (n, T, H)
        return (sig @ rv[:, :, None])[..., 0] - yv, sig * (1.0 - sig) * rv[:, None, :]

    R, J = parts(s, rr, yy)
    norm = np.sqrt((R**2).sum(axis=-1))
    mu = np.full(N, 1e-3)
    # Only the starts still moving are computed: most stop long before ``steps``.
    act = np.arange(N)
    for step in range(steps):
        if prune is not None and step == prune[0] and S > prune[1]:
            rank = np.argsort(np.argsort(norm.reshape(P, S), axis=1), axis=1).ravel()
            act = act[rank[act] < prune[1]]
        if not len(act):
            break
        Ja, Ra, m = J[act], R[act], mu[act]
        JT = Ja.swapaxes(-1, -2)
        A = JT @ Ja
        g = (JT @ Ra[..., None])[..., 0]
        A = A + (m[:, None] * (np.diagonal(A, axis1=-2, axis2=-1) + 1e-30))[..., None] * eye
        with np.errstate(all="ignore"):
            try:
                ds = -np.linalg.solve(A, g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                ds = -(np.linalg.pinv(A) @ g[..., None])[..., 0]
        ds = np.where(np.isfinite(ds), np.clip(ds, -2.0, 2.0), 0.0)
        ts = np.clip(s[act] + ds, -40.0, 40.0)
        tR, tJ = parts(ts, rr[act], yy[act])
        tnorm = np.sqrt((tR**2).sum(axis=-1))
        better = np.isfinite(tnorm) & (tnorm < norm[act])
        i = act[better]
        s[i], R[i], J[i], norm[i] = ts[better], tR[better], tJ[better], tnorm[better]
        mu[act] = np.where(better, np.maximum(m / 10.0, 1e-16), np.minimum(m * 10.0, 1e20))
        act = act[mu[act] <= 1e10]
    norm = norm.reshape(P, S)
    best = norm.argmin(axis=1)
    return s.reshape(P, S, H)[np.arange(P), best], norm[np.arange(P), best]


def transposition_starts(s: np.ndarray) -> np.ndarray:
    """``s`` (P, H) and every copy with two heads' scores swapped: (P, 1 + H(H-1)/2, H).

    >>> transposition_starts(np.array([[1.0, 2.0, 3.0]]))[0].tolist()
    [[1.0, 2.0, 3.0], [2.0, 1.0, 3.0], [3.0, 2.0, 1.0], [1.0, 3.0, 2.0]]
    """
    H = s.shape[-1]
    out = [s]
    for a, b in itertools.combinations(range(H), 2):
        t = s.copy()
        t[:, [a, b]] = t[:, [b, a]]
        out.append(t)
    return np.stack(out, axis=1)


def moved_starts(s: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``s`` (P, H) with one head's score moved to each value of ``grid``:
    (P, H len(grid), H). Repairs a score left far off (a head whose residue is small
    at this u pulls its score only weakly, and a local fit can leave it anywhere).

    >>> moved_starts(np.array([[1.0, 2.0]]), np.array([0.0]))[0].tolist()
    [[0.0, 2.0], [1.0, 0.0]]
    """
    H = s.shape[-1]
    out = []
    for h in range(H):
        for g in grid:
            t = s.copy()
            t[:, h] = g
            out.append(t)
    return np.stack(out, axis=1)


def polish_groups(
    lt: np.ndarray, Y: np.ndarray, r: np.ndarray, s: np.ndarray, *, steps: int = 12
) -> GroupFit:
    """Gauss-Newton on each group by orthogonal elimination (not the normal equations).

    Per pair, a QR of its (column-scaled) score Jacobian eliminates its scores; the
    residues' step is the least-squares solution of the stacked projected rows, then each
    pair's score step by back substitution. Orthogonal throughout, so the conditioning is
    not squared as in :func:`fit_groups`: this finishes a fit that the damped normal
    equations leave short of the rounding floor. A step that does not lower a group's
    residual is halved (up to 4 times), else the group keeps its iterate.

    >>> lt = np.log(np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0]))
    >>> r = np.array([[1.0, -2.0]]); s = np.array([[[0.3, -0.4], [1.1, 0.2]]])
    >>> fit = polish_groups(lt, group_model(lt, r, s), r + 1e-4, s - 1e-4)
    >>> bool(np.abs(fit.s - s).max() < 1e-12)
    True
    """
    G, H = s.shape[0], s.shape[2]
    r, s = r.copy(), s.copy()
    R, Js, Jr = _parts(lt, Y, r, s)
    norm = np.sqrt(np.einsum("gjt,gjt->g", R, R))
    for _ in range(steps):
        cn = np.linalg.norm(Js, axis=2, keepdims=True)
        cn = np.where(cn > 0, cn, 1.0)
        Q, Rm = np.linalg.qr(Js / cn, mode="complete")  # (G, J, T, T), (G, J, T, H)
        QtJr = np.einsum("gjts,gjta->gjsa", Q, Jr)
        QtR = np.einsum("gjts,gjt->gjs", Q, R)
        A = QtJr[:, :, H:, :].reshape(G, -1, H)
        b = -QtR[:, :, H:].reshape(G, -1)
        dr = np.stack([np.linalg.lstsq(A[g], b[g], rcond=None)[0] for g in range(G)])
        rhs = -(QtR[:, :, :H] + np.einsum("gjsa,ga->gjs", QtJr[:, :, :H, :], dr))
        with np.errstate(all="ignore"):
            try:
                ds = np.linalg.solve(Rm[:, :, :H, :], rhs[..., None])[..., 0]
            except np.linalg.LinAlgError:
                ds = np.einsum("gjab,gjb->gja", np.linalg.pinv(Rm[:, :, :H, :]), rhs)
        ds = np.where(np.isfinite(ds), ds / cn[:, :, 0, :], 0.0)
        ds = np.clip(ds, -_MAX_SCORE_STEP, _MAX_SCORE_STEP)
        dr = np.where(np.isfinite(dr), dr, 0.0)
        moved = np.zeros(G, dtype=bool)
        for frac in (1.0, 0.5, 0.25, 0.125, 0.0625):
            tr, ts = r + frac * dr, np.clip(s + frac * ds, -40.0, 40.0)
            tR, tJs, tJr = _parts(lt, Y, tr, ts)
            tnorm = np.sqrt(np.einsum("gjt,gjt->g", tR, tR))
            ok = ~moved & np.isfinite(tnorm) & (tnorm < norm)
            r = np.where(ok[:, None], tr, r)
            s = np.where(ok[:, None, None], ts, s)
            R = np.where(ok[:, None, None], tR, R)
            Js = np.where(ok[:, None, None, None], tJs, Js)
            Jr = np.where(ok[:, None, None, None], tJr, Jr)
            norm = np.where(ok, tnorm, norm)
            moved |= ok
            if moved.all():
                break
        if not moved.any():
            break
    return GroupFit(r=r, s=s, residual=norm)


# Redundant probe columns (more b's than d, or d + 1 affine): each head's scores in a u-group
# are affine in b, ``s_jh = m_j^T w_h`` with ``m_j = b_j`` (affine ``[b_j; 1]``) and
# ``w_h = W_h^T u_k`` (affine ``[W_h^T u_k; c_h^T u_k]``), so the group is fitted in (r, w):
# H + p H unknowns for all of its J > p pairs. A pair whose own scores nearly coincide
# (``delta`` apart: a flat direction of the free fit, sigma_min ~ delta) is pinned by the
# others through w. Measured (nn.MultiheadAttention E = 16, H = 8, 4 of the independent
# check's modules, fits started 1e-3 from the truth): the free fit's sigma_min 1e-10 .. 1e-5
# and 10 of 16 groups stuck; with 8 redundant columns sigma_min 1e-4 .. 5e-3, every group at
# its floor, w to 1e-11.


def linear_jacobian(lt: np.ndarray, Mt: np.ndarray, r: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each group's dense Jacobian (G, J T, H + p H) in (r, w) of the fit ``s = Mt w``.

    ``Mt`` (J, p): the probe columns, one row per pair (or (J, p, H): a plane per head);
    ``r`` (G, H); ``w`` (G, p, H). Columns: the H residues, then w row-major (``a * H + h``)."""
    G, p, H = w.shape
    J, T = Mt.shape[0], len(lt)
    m = "ja" if Mt.ndim == 2 else "jah"
    s = np.einsum(f"{m},gah->gjh", Mt, w)
    _, Js, Jr = _parts(lt, np.zeros((G, J, T)), r, s)
    Jw = np.einsum(f"{m},gjth->gjtah", Mt, Js).reshape(G, J * T, p * H)
    return np.concatenate([Jr.reshape(G, J * T, H), Jw], axis=2)

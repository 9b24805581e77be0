"""Pole fits of one pair's answers (varpro on the ratio grid), matching poles across pairs,
and the small assignment helpers the decoding shares.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn.errors import PrecisionExhausted
from verified_attn.multi_head.pipeline.design import (
    _LINK_EXCLUDE,
    _LM_ITERATIONS,
    _MATCH_MARGIN,
    _PAIR_FIT,
    _RESTARTS,
)
from verified_attn.multi_head.sequence_fit import (
    pack_parameters,
    unpack_parameters,
)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _float_poles(t: np.ndarray, F: np.ndarray, m: int) -> list[tuple[float, float]]:
    """(score, residue) per head from the float samples F(t) (t = 0 first).

    A linearised rational fit in the Moebius variable (Chebyshev basis, the null vector of
    the column-scaled system by SVD) gives the poles; a variable-projection Gauss-Newton on
    the exact model ``F(t) = c + sum_h r_h sigmoid(s_h + log t)`` polishes them. No
    refusal here: a bad pair shows up in the matching, the joint fit's residual and
    conditioning, and the fresh queries.
    """
    from numpy.polynomial import chebyshev as C

    w = (t - 1.0) / (t + 1.0)
    V = C.chebvander(w, m)
    A = np.hstack([V, -F[:, None] * V])
    sc = np.linalg.norm(A, axis=0)
    sc[sc == 0] = 1.0
    _, _, vt = np.linalg.svd(A / sc)
    q = (vt[-1] / sc)[m + 1 :]
    if not np.all(np.isfinite(q)) or not np.any(q):
        raise PrecisionExhausted("the float interpolation system of a pair has no finite solution")
    while len(q) > 1 and abs(q[-1]) <= 1e-14 * np.abs(q).max():
        q = q[:-1]
    roots = C.chebroots(q) if len(q) > 1 else np.array([])
    s = []
    for z in roots:
        wr = float(z.real)
        lam = abs((wr - 1.0) / (wr + 1.0)) if wr != -1.0 else 1e-12
        s.append(math.log(min(max(lam, 1e-12), 1e12)))
    while len(s) < m:  # a pole lost at infinity: spread a guess over the window
        s.append(float(len(s)) - m / 2)
    s_arr = np.array(s[:m])
    with np.errstate(divide="ignore"):
        lt = np.log(t)

    def linear(sv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sig = np.where(
            np.isfinite(lt)[:, None],
            _sigmoid(sv[None, :] + np.where(np.isfinite(lt), lt, 0.0)[:, None]),
            0.0,
        )
        Bm = np.hstack([sig, np.ones((len(t), 1))])
        lin = np.linalg.lstsq(Bm, F, rcond=None)[0]
        return sig, lin, Bm @ lin - F

    scale = max(float(np.linalg.norm(F)), 1e-300)
    best = _varpro(linear, s_arr, m)
    # A pair whose fit misses its own samples is restarted (seeded, within the samples:
    # no queries): spread starts over the window, then random ones.
    rng = np.random.default_rng(m)
    for attempt in range(_RESTARTS):
        if best[0] <= _PAIR_FIT * scale:
            break
        start = np.linspace(-3.0, 3.0, m) if attempt == 0 else rng.uniform(-4.0, 4.0, m)
        trial = _varpro(linear, start, m)
        if trial[0] < best[0]:
            best = trial
    _, s_arr, lin = best
    return [(float(s_arr[h]), float(lin[h])) for h in range(m)]


def _varpro(linear: Any, s_arr: np.ndarray, m: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Variable projection Gauss-Newton on the scores (the residues and c linear)."""
    sig, lin, res = linear(s_arr)
    best = (float(np.linalg.norm(res)), s_arr, lin)
    stalls = 0
    for _ in range(30):
        J = sig * (1.0 - sig) * lin[None, :m]
        Bm = np.hstack([sig, np.ones((len(sig), 1))])
        Q, _ = np.linalg.qr(Bm)
        Jp = J - Q @ (Q.T @ J)
        step = np.linalg.lstsq(Jp, -res, rcond=None)[0]
        step = np.clip(step, -2.0, 2.0)
        s_arr = np.clip(s_arr + step, -30.0, 30.0)
        sig, lin, res = linear(s_arr)
        norm = float(np.linalg.norm(res))
        stalled = not norm < 0.5 * best[0]
        if np.isfinite(norm) and norm < best[0]:
            best = (norm, s_arr, lin)
        if stalled and (stalls := stalls + 1) >= 3:
            break
    return best


def _ranked(errors: dict[tuple[int, ...], float]) -> list[tuple[int, ...]]:
    """The orders indistinguishable from the best one (within _MATCH_MARGIN of its error)."""
    best = min(errors.values())
    return [p for p, e in sorted(errors.items(), key=lambda x: x[1]) if e <= _MATCH_MARGIN * best]


def link_decided(miss: np.ndarray, predicted: float) -> bool:
    """Does a halved link fix its u-group's head order? ``miss``: the orders' misses, best
    first; ``predicted``: the first-order bound on the true order's miss (its u-groups'
    noise carried to the link, :func:`~.float_fit.link_noise`, and the link's own).

    The noise is the larger of that bound and the best order's own miss (a miss beyond
    the bound shows errors at least that large); the order is decided iff the runner-up
    misses by more than _LINK_EXCLUDE x the noise. A bare ratio of the two misses does
    not see the noise: it calls two orders that both miss within the noise decided, and
    refuses a float32 link whose runner-up misses by 4 x the best (measured misses 2e-3
    and 8e-3, E = 8, H = 4) when the noise allows 1e-4.

    >>> link_decided(np.array([1e-12, 1e-3]), 1e-11), link_decided(np.array([2e-3, 8e-3]), 1e-4)
    (True, True)
    >>> link_decided(np.array([1e-12, 1e-9]), 1e-9)  # both within the noise: undecided
    False
    """
    noise = max(float(predicted), float(miss[0]))
    return bool(miss[1] > _LINK_EXCLUDE * noise)


def _refine(
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], float, np.ndarray, float, float, np.ndarray]:
    """Levenberg-Marquardt on all learning answers at once, from the per-pair decoding.

    Each pair alone is a square (2H + 1)-point fit whose poles are ill-conditioned when two
    scores are close or a residue u^T v_h is small; together the answers overdetermine the
    H (d^2 + 2d) + 1 parameters (``F = beta + sum_h b^T v_h + u^T v_h sigmoid(u^T (W_h b +
    c_h) + log k)``, and ``F(0) = beta + sum_h b^T v_h``), so the joint least-squares fit is
    far better conditioned. Returns the iterate with the smallest residual (never worse
    than the start), its residuals, the smallest singular value of the Jacobian there
    (0 if it is rank deficient; the conditioning figure) and the largest row norm of its
    pseudo-inverse (inf if rank deficient; what the parameter error estimate multiplies),
    and ``S^-1 V^T`` of its SVD (``|g^T J^+| = |S^-1 V^T g|``: how far a functional ``g`` of
    the parameters moves per unit of answer change; empty if rank deficient).
    """
    u, b, logk, y = rows  # (n, d), (n, d), (n,) log t, -inf for F(0), (n,)
    d, H = u.shape[1], len(heads)
    has_k = np.isfinite(logk)
    lk = np.where(has_k, logk, 0.0)

    def residual_and_jacobian(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hs, bt = unpack_parameters(theta, H, d, affine)
        F = np.full(len(y), bt)
        cols = []
        for h in hs:
            W, v = h[0], h[1]
            z = np.einsum("ni,ij,nj->n", u, W, b) + lk
            if affine:
                z = z + u @ h[2]
            sig = np.where(has_k, 0.5 * (1.0 + np.tanh(0.5 * z)), 0.0)  # no overflow
            ds = sig * (1.0 - sig)
            uv = u @ v
            F += b @ v + uv * sig
            g = uv * ds  # dF/dz
            cols.append((g[:, None, None] * u[:, :, None] * b[:, None, :]).reshape(len(y), -1))
            cols.append(b + sig[:, None] * u)
            if affine:
                cols.append(g[:, None] * u)
        if affine:
            cols.append(np.ones((len(y), 1)))
        return F - y, np.hstack(cols)

    theta = pack_parameters(heads, beta, affine)
    res, J = residual_and_jacobian(theta)
    best, best_norm = theta, float(np.linalg.norm(res))
    mu = 1e-3
    for _ in range(_LM_ITERATIONS):
        # Levenberg-Marquardt on the column-scaled Jacobian (Marquardt's scaling).
        scale = np.linalg.norm(J, axis=0)
        scale[scale == 0] = 1.0
        Js = J / scale
        A = np.vstack([Js, math.sqrt(mu) * np.eye(Js.shape[1])])
        rhs = np.concatenate([-res, np.zeros(Js.shape[1])])
        step = np.linalg.lstsq(A, rhs, rcond=None)[0] / scale
        trial = theta + step
        t_res, t_J = residual_and_jacobian(trial)
        norm = float(np.linalg.norm(t_res))
        if np.isfinite(norm) and norm < best_norm:
            theta, res, J = trial, t_res, t_J
            small = best_norm - norm <= 1e-3 * best_norm
            best, best_norm = theta, norm
            mu = max(mu / 10.0, 1e-15)
            if small and np.linalg.norm(step) <= 1e-13 * max(1.0, float(np.abs(theta).max())):
                break
        else:
            mu *= 10.0
            if mu > 1e8:
                break
    hs, bt = unpack_parameters(best, H, d, affine)
    res, J = residual_and_jacobian(best)
    _, sv, Vt = np.linalg.svd(J, full_matrices=False)
    if len(sv) < J.shape[1] or not sv[-1] > 0:
        return hs, bt, res, 0.0, math.inf, np.zeros((0, J.shape[1]))
    # Row i of J^+ = V diag(1/sv) U^T has norm |V[i] / sv|: how far parameter i moves, to
    # first order, per unit of answer change (at most 1 / sigma_min, for every i).
    sensitivity = float(np.sqrt(((Vt / sv[:, None]) ** 2).sum(axis=0)).max())
    return hs, bt, res, float(sv[-1]), sensitivity, Vt / sv[:, None]


def _assign(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A greedy assignment (cheapest entry first): rows, cols. Only a starting point.

    >>> [x.tolist() for x in _assign(np.array([[0.0, 1.0], [0.1, 2.0]]))]
    [[0, 1], [0, 1]]
    """
    n = cost.shape[0]
    rows, cols = np.empty(n, dtype=np.intp), np.empty(n, dtype=np.intp)
    used_r, used_c = np.zeros(n, bool), np.zeros(n, bool)
    for flat in np.argsort(cost, axis=None, kind="stable"):
        a, b = divmod(int(flat), n)
        if not used_r[a] and not used_c[b]:
            used_r[a] = used_c[b] = True
            rows[used_r.sum() - 1], cols[used_r.sum() - 1] = a, b
    order = np.argsort(rows)
    return rows[order], cols[order]


def _clusters(H: int, close: list[tuple[int, int]]) -> list[int]:
    """Connected components of the relation ``close`` on range(H): a label per head.

    >>> _clusters(4, [(0, 2), (2, 3)])
    [0, 1, 0, 0]
    """
    label = list(range(H))
    for a, b in close:
        la, lb = label[a], label[b]
        label = [la if x == lb else x for x in label]
    return label

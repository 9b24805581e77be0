"""Low-rank Gauss-Newton for the skeleton learner: ``[W_h | c_h] = P_h Q_h^T`` (d x p and
J x p), v_h and beta fitted to every learning answer of the skeleton design (the rank check
pair left out: it stays a check), matrix-free with ``scipy.sparse.linalg.lsqr``; and the
joint fit's first-order parameter error estimate from its Jacobian.

Every learning query is ``[b + u] * k + [b] * m`` (F(0): u = 0), whose answer is
``m_b^T [sum_h v_h; beta] + sum_h (u^T v_h) sigmoid(u^T P_h Q_h^T m_b + log(k/m))`` with
``m_b = [b; 1]`` (affine) or b: the Jacobian's rows are closed forms.

>>> x = _Rows(np.zeros((1, 1)), np.ones((1, 1)), np.zeros(1), np.array([2.0]), False)
>>> float(x.model(_Theta([np.ones((1, 1))], [np.ones((1, 1))], [np.array([2.0])], 0.0))[0])
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import LinearOperator, lsqr

from verified_attn.multi_head.pipeline.design import float_probe_matrix

__all__ = ["design_rows", "heads_estimate", "low_rank_estimate", "refine_low_rank"]

_STEPS = 12  # Gauss-Newton steps at most
_LSQR_ITER = 400
_DENSE_STEPS = 2  # Gauss-Newton steps through the dense pseudo-inverse after the lsqr ones
_DENSE_LIMIT = 40_000_000  # Jacobian entries the estimate's dense SVD may take (320 MB)


@dataclass
class _Theta:
    P: list[np.ndarray]  # (d, p) each
    Q: list[np.ndarray]  # (J, p) each
    v: list[np.ndarray]  # (d,) each
    beta: float
    # J^+ at this point once computed (gauge, (K, U_keep)): the estimate reuses the last
    # dense step's SVD when that step was not taken
    pinv: tuple[int, tuple[np.ndarray, np.ndarray] | None] | None = None

    def flat(self) -> np.ndarray:
        return np.concatenate(
            [x.ravel() for x in self.P]
            + [x.ravel() for x in self.Q]
            + self.v
            + [np.array([self.beta])]
        )

    def moved(self, x: np.ndarray) -> _Theta:
        out, i = [], 0
        for group in (self.P, self.Q, self.v):
            got = []
            for a in group:
                got.append(a + x[i : i + a.size].reshape(a.shape))
                i += a.size
            out.append(got)
        return _Theta(out[0], out[1], out[2], self.beta + float(x[i]))


@dataclass
class _Rows:
    """The answers' designs: row n's u is ``Uu[iu[n]]``, its m_b ``Mu[im[n]]``, its log t
    ``lt[n]`` and answer ``y[n]``. The design has about 2d distinct u and J distinct m_b for
    N = (pairs) x T rows, so every product goes through the distinct rows and the score
    table ``Uu A Mu^T`` (gathered at (iu, im)): O(N H) per Jacobian product instead of
    O(N H d p), and no (N, d) array. ``iu``, ``im`` default to one row each."""

    Uu: np.ndarray
    Mu: np.ndarray
    lt: np.ndarray
    y: np.ndarray
    affine: bool
    iu: np.ndarray | None = None
    im: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.y)
        self.iu = np.arange(n) if self.iu is None else np.asarray(self.iu, dtype=np.intp)
        self.im = np.arange(n) if self.im is None else np.asarray(self.im, dtype=np.intp)

    @property
    def U(self) -> np.ndarray:
        """Each row's u (N, d), gathered (the dense Jacobian only)."""
        return self.Uu[self.iu]

    @property
    def M(self) -> np.ndarray:
        """Each row's m_b (N, J), gathered (the dense Jacobian only)."""
        return self.Mu[self.im]

    def _at(self, table: np.ndarray) -> np.ndarray:
        """Entries (iu[n], im[n]) of a (.., nu, nm) table."""
        return table[..., self.iu, self.im]

    def _scatter(self, w: np.ndarray) -> np.ndarray:
        """The (.., nu, nm) table summing w (.., N) at (iu[n], im[n])."""
        nu, nm = len(self.Uu), len(self.Mu)
        flat = np.asarray(self.iu) * nm + np.asarray(self.im)
        lead = w.shape[:-1]
        w2 = w.reshape(-1, w.shape[-1])
        out = np.stack([np.bincount(flat, weights=x, minlength=nu * nm) for x in w2])
        return out.reshape(*lead, nu, nm)

    def parts(self, th: _Theta) -> tuple[np.ndarray, ...]:
        """a (H, nu, p) and b (H, nm, p) on the distinct rows, r (H, N), sigmoid, its
        derivative (H, N)."""
        a = np.stack([self.Uu @ P for P in th.P])
        b = np.stack([self.Mu @ Q for Q in th.Q])
        r = np.stack([self.Uu @ v for v in th.v])[:, self.iu]
        z = self._at(a @ b.transpose(0, 2, 1)) + self.lt[None, :]
        sig = 0.5 * (1.0 + np.tanh(0.5 * z))
        return a, b, r, sig, sig * (1.0 - sig)

    def model(self, th: _Theta) -> np.ndarray:
        _, _, r, sig, _ = self.parts(th)
        d = self.Uu.shape[1]
        lin = (self.Mu[:, :d] @ sum(th.v))[self.im]
        return lin + (th.beta if self.affine else 0.0) + (r * sig).sum(0)

    def dense(self, th: _Theta) -> np.ndarray:
        """The Jacobian of :meth:`operator` as a dense (N, n) array."""
        a, b, r, sig, ds = self.parts(th)
        a, b = a[:, self.iu], b[:, self.im]
        H, N = r.shape
        w = r * ds
        U, M = self.U, self.M
        d = U.shape[1]
        cols = [
            (w[h][:, None, None] * U[:, :, None] * b[h][:, None, :]).reshape(N, -1)
            for h in range(H)
        ]
        cols += [
            (w[h][:, None, None] * M[:, :, None] * a[h][:, None, :]).reshape(N, -1)
            for h in range(H)
        ]
        cols += [M[:, :d] + U * sig[h][:, None] for h in range(H)]
        cols.append(np.full((N, 1), 1.0 if self.affine else 0.0))
        return np.hstack(cols)

    def operator(self, th: _Theta) -> LinearOperator:
        """The Jacobian in (P, Q, v, beta) as a LinearOperator (beta fixed when not affine)."""
        a, b, r, sig, ds = self.parts(th)
        H, N = r.shape
        Uu, Mu = self.Uu, self.Mu
        d, J, p = Uu.shape[1], Mu.shape[1], a.shape[2]
        w = r * ds  # (H, N)
        Bd = Mu[:, :d]
        sizes = [H * d * p, H * J * p, H * d, 1]
        n = sum(sizes)
        i0, i1, i2 = sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2]

        def mv(x: np.ndarray) -> np.ndarray:
            x = np.ravel(x)
            dP = x[:i0].reshape(H, d, p)
            dQ = x[i0:i1].reshape(H, J, p)
            dv = x[i1:i2].reshape(H, d)
            # d(scores) on the distinct rows: Uu (dP Q^T + P dQ^T) Mu^T = (Uu dP) b^T + a (Mu dQ)^T
            dS = (Uu @ dP) @ b.transpose(0, 2, 1) + a @ (Mu @ dQ).transpose(0, 2, 1)
            out = (Bd @ dv.sum(0))[self.im] + np.einsum("hn,hn->n", sig, (Uu @ dv.T).T[:, self.iu])
            out += np.einsum("hn,hn->n", w, self._at(dS))
            return out + (x[-1] if self.affine else 0.0)

        def rmv(y: np.ndarray) -> np.ndarray:
            y = np.ravel(y)
            G = self._scatter(w * y[None, :])  # (H, nu, nm)
            dP = Uu.T @ (G @ b)  # (H, d, p)
            dQ = Mu.T @ (G.transpose(0, 2, 1) @ a)  # (H, J, p)
            gu = self._scatter(np.vstack([sig * y[None, :], y[None, :]]))  # (H + 1, nu, nm)
            dv = (Bd.T @ gu[H].sum(0))[None, :] + (Uu.T @ gu[:H].sum(2).T).T
            db = np.array([y.sum() if self.affine else 0.0])
            return np.concatenate([dP.ravel(), dQ.ravel(), dv.ravel(), db])

        return LinearOperator((N, n), matvec=mv, rmatvec=rmv, dtype=np.float64)


def _start(heads: list[tuple[np.ndarray, ...]], p: int, affine: bool) -> list[np.ndarray]:
    """Balanced rank-p factors of each ``[W_h | c_h]``."""
    out = []
    for hd in heads:
        Wc = np.column_stack([hd[0], hd[2]]) if affine else hd[0]
        L, sv, R = np.linalg.svd(Wc)
        root = np.sqrt(sv[:p])
        out.append((L[:, :p] * root, R[:p].T * root))
    return out  # type: ignore[return-value]


def _to_heads(th: _Theta, affine: bool) -> list[tuple[np.ndarray, ...]]:
    heads: list[tuple[np.ndarray, ...]] = []
    for P, Q, v in zip(th.P, th.Q, th.v, strict=True):
        Wc = P @ Q.T
        d = P.shape[0]
        heads.append((Wc[:, :d], v, Wc[:, d]) if affine else (Wc[:, :d], v))
    return heads


def _too_large(rows: _Rows, th: _Theta) -> bool:
    """Whether the Jacobian has more entries than a dense SVD may take."""
    H, (d, p), J = len(th.P), th.P[0].shape, th.Q[0].shape[0]
    return len(rows.y) * (H * ((d + J) * p + d) + 1) > _DENSE_LIMIT


def _pinv(rows: _Rows, th: _Theta, gauge: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``J^+`` as ``(K, U_keep)`` (``J^+ = K U_keep^T``) without the ``gauge`` smallest
    directions (``P G, Q G^-T`` leave W unchanged: H p^2 of them), beta's column dropped when
    not affine; None when the Jacobian is too large for a dense SVD or rank deficient."""
    if _too_large(rows, th):
        return None
    if th.pinv is None or th.pinv[0] != gauge:
        th.pinv = (gauge, _svd_pinv(rows, th, gauge))
    return th.pinv[1]


def _svd_pinv(rows: _Rows, th: _Theta, gauge: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_pinv` computed (a dense SVD of the Jacobian)."""
    Jd = rows.dense(th)
    if not rows.affine:
        Jd = Jd[:, :-1]
    Ul, sv, Vt = np.linalg.svd(Jd, full_matrices=False)
    keep = len(sv) - gauge
    if keep <= 0 or not sv[keep - 1] > 0:
        return None
    K = Vt[:keep].T / sv[:keep]
    if not rows.affine:
        K = np.vstack([K, np.zeros((1, keep))])  # beta stays
    return K, Ul[:, :keep]


def refine_low_rank(
    rows: _Rows, heads: list[tuple[np.ndarray, ...]], beta: float, p: int
) -> tuple[list[tuple[np.ndarray, ...]], float, np.ndarray, _Theta]:
    """Gauss-Newton from the skeleton's heads (lsqr steps, then, where the dense Jacobian
    fits, steps through its pseudo-inverse: lsqr stalls on an ill-conditioned Jacobian, at
    E = 16, H = 8 at a residual 1300x its part outside J's range); each step kept only if it
    lowers the residual norm. Returns the heads, beta, the residuals and the factors."""
    facs = _start(heads, p, rows.affine)
    th = _Theta([f[0] for f in facs], [f[1] for f in facs], [hd[1].copy() for hd in heads], beta)
    res = rows.model(th) - rows.y
    state = (th, res, float(np.linalg.norm(res)))
    for _ in range(_STEPS):
        state, done = _step(rows, state, _lsqr_step(rows, *state[:2]))
        if done:
            break
    for _ in range(_DENSE_STEPS):
        pinv = _pinv(rows, state[0], len(heads) * p * p)
        if pinv is None:
            break
        state, done = _step(rows, state, -(pinv[0] @ (pinv[1].T @ state[1])))
        if done:
            break
    th, res = state[0], state[1]
    return _to_heads(th, rows.affine), th.beta, res, th


def _lsqr_step(rows: _Rows, th: _Theta, res: np.ndarray) -> np.ndarray:
    """A Gauss-Newton step by lsqr, matrix-free."""
    return lsqr(rows.operator(th), -res, atol=1e-16, btol=1e-16, iter_lim=_LSQR_ITER)[0]


def _step(
    rows: _Rows, state: tuple[_Theta, np.ndarray, float], step: np.ndarray
) -> tuple[tuple[_Theta, np.ndarray, float], bool]:
    """The step taken if it lowers the residual norm; done when it does not, or when it
    lowers it by less than half."""
    th, _, norm = state
    trial = th.moved(step)
    got = rows.model(trial) - rows.y
    new = float(np.linalg.norm(got))
    if not new < norm:
        return state, True
    return (trial, got, new), new > 0.5 * norm


def low_rank_estimate(
    rows: _Rows, th: _Theta, residuals: np.ndarray, unit: float, gauge: int
) -> float | None:
    """The joint fit's first-order error of one parameter (W_h, c_h, v_h, beta entries),
    relative to max(1, largest parameter); None when the Jacobian is too large for a dense
    SVD, inf when it is rank deficient past its ``gauge`` directions.

    The answers are ``y = f(theta*) + e`` (e: the box's rounding); to first order the fit
    theta is off by ``J^+ (r - e)``, r = y - f(theta) its residuals. ``J^+ r`` is known (the
    Gauss-Newton step still to go): its own entries count, signed. e is not: only its part
    outside J's range shows, as r's (``r_perp = (I - J J^+) r``), so |e| is taken as
    ``(|r_perp|^2 + |unit y|^2)^(1/2)`` and each parameter's share as its worst case, that
    norm times the row norm of ``L J^+`` (L: (P, Q, v, beta) to the parameters). Counting r
    whole as noise instead (the row norm times |r|) multiplies a stalled fit's residual by
    the worst row: at E = 16, H = 8 that stated 1.6e-6 for heads 1.4e-9 off.
    """
    if _too_large(rows, th):
        return None
    pinv = _pinv(rows, th, gauge)
    if pinv is None:
        return math.inf
    K, Ul = pinv
    z = Ul.T @ residuals
    r_perp = residuals - Ul @ z
    noise = math.sqrt(float(r_perp @ r_perp) + float(np.sum((unit * rows.y) ** 2)))
    H, (d, p), J = len(th.P), th.P[0].shape, th.Q[0].shape[0]
    worst = 0.0
    for h in range(H):
        iP = h * d * p
        iQ = H * d * p + h * J * p
        dP = K[iP : iP + d * p].reshape(d, p, -1)
        dQ = K[iQ : iQ + J * p].reshape(J, p, -1)
        dW = np.einsum("apk,bp->abk", dP, th.Q[h]) + np.einsum("ap,bpk->abk", th.P[h], dQ)
        worst = max(worst, _worst_entry(dW.reshape(d * J, -1), z, noise))
    worst = max(worst, _worst_entry(K[H * (d + J) * p :], z, noise))
    heads = _to_heads(th, rows.affine)
    size = max(1.0, abs(th.beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    return worst / size


def _worst_entry(LK: np.ndarray, z: np.ndarray, noise: float) -> float:
    """The largest ``|(L J^+ r)_a| + noise |row a of L J^+|`` (rows of LK, J^+ r = K z)."""
    return float((np.abs(LK @ z) + noise * np.sqrt((LK**2).sum(-1))).max())


def design_rows(
    U: np.ndarray,
    columns: np.ndarray,
    affine: bool,
    pairs: list[tuple[int, int]],
    t: np.ndarray,
    answers: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> _Rows:
    """The refinement's rows, as (u, m_b, log t, answer): F(0) at the first ``len(f0)``
    columns, the u-groups' ``pairs`` (k, j) and the links ``(u_1 + u_k) / 2`` at b_1, each
    at every ratio t; ``answers`` = (F(0), the pairs' (n, T), the links' (d - 1, T)). The
    learner's fit and the certificate checker's recomputed estimate both take these."""
    f0, grid, links = answers
    M = float_probe_matrix(columns, affine).T  # row j is m_{b_j}
    d, T, n0 = U.shape[0], len(t), len(f0)
    # distinct u: 0 (F(0)), the rows of U, the links' (u_1 + u_k) / 2
    links_u = np.array([(U[0] + U[k]) / 2 for k in range(1, d)]).reshape(-1, d)
    Uu = np.vstack([np.zeros((1, d)), U, links_u])
    iu = [1 + k for k, _ in pairs] + [d + k for k in range(1, d)]
    im = [j for _, j in pairs] + [0] * (d - 1)
    ans = np.concatenate([np.asarray(grid).reshape(-1, T), np.asarray(links).reshape(-1, T)])
    return _Rows(
        Uu,
        M,
        np.concatenate([np.zeros(n0), np.tile(np.log(t), len(iu))]),
        np.concatenate([f0, ans.ravel()]),
        affine,
        np.concatenate([np.zeros(n0, dtype=np.intp), np.repeat(np.array(iu, dtype=np.intp), T)]),
        np.concatenate([np.arange(n0), np.repeat(np.array(im, dtype=np.intp), T)]),
    )


def heads_estimate(
    rows: _Rows, heads: list[tuple[np.ndarray, ...]], beta: float, p: int, unit: float
) -> float | None:
    """:func:`low_rank_estimate` at given heads (balanced rank-p factors of each
    ``[W_h | c_h]``), their residuals against ``rows``: what the certificate checker
    recomputes from the stored answers and the claimed heads.

    >>> W = np.array([[1.0, 0.0], [0.0, 0.0]])
    >>> head = (W, np.array([1.0, 0.5]))
    >>> U, t = np.array([[1.0, 0.0], [0.5, 1.0]]), np.array([0.5, 2.0])
    >>> x = design_rows(U, np.eye(2), False, [(0, 0), (0, 1), (1, 0)], t, (np.zeros(2), np.zeros((3, 2)), np.zeros((1, 2))))
    >>> x.y = x.model(_Theta([W[:, :1]], [W[:1].T], [head[1]], 0.0))
    >>> bool(heads_estimate(x, [head], 0.0, 1, 2.0**-53) < 1e-12)
    True
    """
    facs = _start(heads, p, rows.affine)
    th = _Theta([f[0] for f in facs], [f[1] for f in facs], [hd[1].copy() for hd in heads], beta)
    return low_rank_estimate(rows, th, rows.y - rows.model(th), unit, len(heads) * p * p)

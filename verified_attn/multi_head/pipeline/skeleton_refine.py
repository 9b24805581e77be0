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

__all__ = ["low_rank_estimate", "refine_low_rank"]

_STEPS = 12  # Gauss-Newton steps at most
_LSQR_ITER = 400
_DENSE_LIMIT = 40_000_000  # Jacobian entries the estimate's dense SVD may take (320 MB)


@dataclass
class _Theta:
    P: list[np.ndarray]  # (d, p) each
    Q: list[np.ndarray]  # (J, p) each
    v: list[np.ndarray]  # (d,) each
    beta: float

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
    """The answers' designs: u (N, d), m_b (N, J), log t (N,), answers (N,)."""

    U: np.ndarray
    M: np.ndarray
    lt: np.ndarray
    y: np.ndarray
    affine: bool

    def parts(self, th: _Theta) -> tuple[np.ndarray, ...]:
        """a (H, N, p), b (H, N, p), r (H, N), sigmoid, its derivative (H, N)."""
        a = np.stack([self.U @ P for P in th.P])
        b = np.stack([self.M @ Q for Q in th.Q])
        r = np.stack([self.U @ v for v in th.v])
        z = np.einsum("hnp,hnp->hn", a, b) + self.lt[None, :]
        sig = 0.5 * (1.0 + np.tanh(0.5 * z))
        return a, b, r, sig, sig * (1.0 - sig)

    def model(self, th: _Theta) -> np.ndarray:
        _, _, r, sig, _ = self.parts(th)
        d = self.U.shape[1]
        return self.M[:, :d] @ sum(th.v) + (th.beta if self.affine else 0.0) + (r * sig).sum(0)

    def dense(self, th: _Theta) -> np.ndarray:
        """The Jacobian of :meth:`operator` as a dense (N, n) array."""
        a, b, r, sig, ds = self.parts(th)
        H, N = r.shape
        w = r * ds
        d = self.U.shape[1]
        cols = [
            (w[h][:, None, None] * self.U[:, :, None] * b[h][:, None, :]).reshape(N, -1)
            for h in range(H)
        ]
        cols += [
            (w[h][:, None, None] * self.M[:, :, None] * a[h][:, None, :]).reshape(N, -1)
            for h in range(H)
        ]
        cols += [self.M[:, :d] + self.U * sig[h][:, None] for h in range(H)]
        cols.append(np.full((N, 1), 1.0 if self.affine else 0.0))
        return np.hstack(cols)

    def operator(self, th: _Theta) -> LinearOperator:
        """The Jacobian in (P, Q, v, beta) as a LinearOperator (beta fixed when not affine)."""
        a, b, r, sig, ds = self.parts(th)
        H, N = r.shape
        d, J, p = self.U.shape[1], self.M.shape[1], a.shape[2]
        w = r * ds  # (H, N)
        Bd = self.M[:, :d]
        sizes = [H * d * p, H * J * p, H * d, 1]
        n = sum(sizes)

        def mv(x: np.ndarray) -> np.ndarray:
            x = np.ravel(x)
            i0, i1, i2 = sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2]
            dP = x[:i0].reshape(H, d, p)
            dQ = x[i0:i1].reshape(H, J, p)
            dv = x[i1:i2].reshape(H, d)
            out = Bd @ dv.sum(0) + np.einsum("hn,hn->n", sig, (self.U @ dv.T).T)
            out += np.einsum("hn,hnp,hnp->n", w, np.einsum("nd,hdp->hnp", self.U, dP), b)
            out += np.einsum("hn,hnp,hnp->n", w, np.einsum("nj,hjp->hnp", self.M, dQ), a)
            return out + (x[-1] if self.affine else 0.0)

        def rmv(y: np.ndarray) -> np.ndarray:
            y = np.ravel(y)
            wy = w * y[None, :]
            dP = np.einsum("nd,hnp->hdp", self.U, wy[:, :, None] * b)
            dQ = np.einsum("nj,hnp->hjp", self.M, wy[:, :, None] * a)
            dv = (Bd.T @ y)[None, :] + (self.U.T @ (sig * y[None, :]).T).T
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


def refine_low_rank(
    rows: _Rows, heads: list[tuple[np.ndarray, ...]], beta: float, p: int
) -> tuple[list[tuple[np.ndarray, ...]], float, np.ndarray, _Theta]:
    """Gauss-Newton from the skeleton's heads; each step kept only if it lowers the residual
    norm. Returns the heads, beta, the residuals and the factors."""
    facs = _start(heads, p, rows.affine)
    th = _Theta([f[0] for f in facs], [f[1] for f in facs], [hd[1].copy() for hd in heads], beta)
    res = rows.model(th) - rows.y
    norm = float(np.linalg.norm(res))
    for _ in range(_STEPS):
        step = lsqr(rows.operator(th), -res, atol=1e-16, btol=1e-16, iter_lim=_LSQR_ITER)[0]
        trial = th.moved(step)
        got = rows.model(trial) - rows.y
        new = float(np.linalg.norm(got))
        if not new < norm:
            break
        done = new > 0.5 * norm
        th, res, norm = trial, got, new
        if done:
            break
    return _to_heads(th, rows.affine), th.beta, res, th


def low_rank_estimate(
    rows: _Rows, th: _Theta, residuals: np.ndarray, unit: float, gauge: int
) -> float | None:
    """The joint fit's first-order error of one parameter (W_h, c_h, v_h, beta entries),
    relative to max(1, largest parameter): the answers' noise (residuals and rounding) times
    the largest row norm of ``L J^+``, L the map from (P, Q, v, beta) to the parameters, J^+
    the pseudo-inverse without the ``gauge`` directions (``P G, Q G^-T`` leave W unchanged:
    H p^2 of them). None when the Jacobian is too large for a dense SVD."""
    N = len(rows.y)
    H, (d, p), J = len(th.P), th.P[0].shape, th.Q[0].shape[0]
    if N * (H * ((d + J) * p + d) + 1) > _DENSE_LIMIT:
        return None
    Jd = rows.dense(th)
    if not rows.affine:
        Jd = Jd[:, :-1]
    _, sv, Vt = np.linalg.svd(Jd, full_matrices=False)
    keep = len(sv) - gauge
    if keep <= 0 or not sv[keep - 1] > 0:
        return math.inf
    K = Vt[:keep].T / sv[:keep]  # J^+ = K U^T: row norms of L K
    worst = 0.0
    for h in range(H):
        iP = h * d * p
        iQ = H * d * p + h * J * p
        dP = K[iP : iP + d * p].reshape(d, p, keep)
        dQ = K[iQ : iQ + J * p].reshape(J, p, keep)
        dW = np.einsum("apk,bp->abk", dP, th.Q[h]) + np.einsum("ap,bpk->abk", th.P[h], dQ)
        worst = max(worst, float(np.sqrt((dW**2).sum(-1)).max()))
    i1 = H * (d + J) * p
    worst = max(worst, float(np.sqrt((K[i1:] ** 2).sum(-1)).max()))
    noise = math.sqrt(float(residuals @ residuals) + float(np.sum((unit * rows.y) ** 2)))
    heads = _to_heads(th, rows.affine)
    size = max(1.0, abs(th.beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    return noise * worst / size

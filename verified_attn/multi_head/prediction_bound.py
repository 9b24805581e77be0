"""First-order bounds on a float multi-head result's prediction error, at no query.

>>> import numpy as np
>>> from verified_attn.multi_head.prediction_bound import output_gradients
>>> W, v = np.array([[0.5, 0.0], [0.0, -1.0]]), np.array([1.0, 2.0])
>>> X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
>>> gW, gv, gc = output_gradients([(W, v)], X, affine=False)[0]
>>> gW.shape, gv.shape, gc is None
((2, 2), (2,), True)

A float decoding's heads are off by what the answers' noise moves its fits by, and the
verification sees that only on the fresh sequences it asks. The parameter error estimate
bounds each parameter; a prediction combines all of them, and can amplify them (at
``nn.MultiheadAttention`` E = 16, H = 4 in float32 a result with parameters to 2.1e-4 gave
predictions off by 2.0e-4 relative on sequences it had not asked, against its rtol 1e-4,
while its own fresh sequences met the rule). So the prediction at a sequence X is bounded
as its own linear functional of the fits: ``y(X)`` depends on the heads, the heads on the
u-groups' fits (``[W_h | c_h] = U^-1 X_h``, ``v_h = U^-1 r_h``, ``beta = F(0)_1 - b_1^T
sum_h v_h``), and group k's fit moves by ``J_k^+ dY_k``; so ``|dy(X)| <= sum_k |g_k^T J_k^+|
|dY_k|`` with ``g_k`` the gradient of ``y(X)`` in group k's fit (attained, each ``dY_k``
along its row: the worst case of the same noise model as the parameter estimate). The
joint polish of small boxes has one Jacobian: ``|dy(X)| <= |g^T J^+| |dY|``.

That worst case lines every group's rounding up along one row of its pseudo-inverse; a
box's rounding of distinct queries is not so aligned. Spread evenly and independently over
a group's n answers (``|dY_k| / sqrt(n)`` each, the probabilistic model of rounding
errors), the prediction error has standard deviation ``(sum_k |g_k^T J_k^+|^2 |dY_k|^2 /
n)^(1/2)``. Measured at float32 ``nn.MultiheadAttention`` (E = 8, 16, H = 2, 4, 22 modules):
the worst case was 15x to 60x the largest error actually seen on 16 fresh sequences, the
standard deviation 1.1x to 50x; the one result then off by more than its rtol (2.0e-4,
E = 16, H = 4, module seed 4) had a standard deviation 2.2x what the rule allows, the
returned ones at most 0.97x. The learner returns a result only if ``PREDICTION_SIGMAS``
standard deviations fit within what the rule allows at each of ``PREDICTION_SEQUENCES``
sequences, and reports the worst case beside it. Both need no query.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse.linalg import LinearOperator

from verified_attn.multi_head.float_fit import inverse_grams
from verified_attn.prediction_rule import PREDICTION_SEQUENCES, PREDICTION_SIGMAS

__all__ = [
    "PREDICTION_SEQUENCES",
    "PREDICTION_SIGMAS",
    "group_gradients",
    "groups_prediction_bound",
    "joint_prediction_bound",
    "output_gradients",
    "parameter_gradient",
]

#: Sequences the first-order prediction bound is evaluated on (the verification's fresh

Head = tuple[np.ndarray, ...]


def output_gradients(
    heads: Sequence[Head], X: np.ndarray, affine: bool
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Per head, the gradient of ``y(X) = beta + sum_h sum_i p_hi v_h^T x_i`` in (W_h, v_h, c_h).

    ``p_h = softmax(s_h)``, ``s_hi = x_i^T (W_h x_N + c_h)``; with ``a_hi = p_hi (v_h^T x_i
    - y_h)`` (``y_h = sum_i p_hi v_h^T x_i``): ``dy/dW_h = (sum_i a_hi x_i) x_N^T``,
    ``dy/dc_h = sum_i a_hi x_i``, ``dy/dv_h = sum_i p_hi x_i`` (``dy/dbeta = 1``). ``c`` is
    None for a bias-free head.
    """
    X = np.asarray(X, dtype=np.float64)
    q = X[-1]
    out = []
    for hd in heads:
        W, v = hd[0], hd[1]
        shift = W @ q + (hd[2] if affine else 0.0)
        z = X @ shift
        p = np.exp(z - z.max())
        p /= p.sum()
        vals = X @ v
        a = p * (vals - p @ vals)
        xa = X.T @ a
        out.append((np.outer(xa, q), X.T @ p, xa if affine else None))
    return out


def parameter_gradient(heads: Sequence[Head], X: np.ndarray, affine: bool) -> np.ndarray:
    """The gradient of ``y(X)`` in the joint polish's parameter vector (per head W row-major,
    v, then c if affine; beta last if affine)."""
    parts: list[np.ndarray] = []
    for gW, gv, gc in output_gradients(heads, X, affine):
        parts += [gW.ravel(), gv] + ([gc] if gc is not None else [])
    if affine:
        parts.append(np.ones(1))
    return np.concatenate(parts)


def joint_prediction_bound(
    heads: Sequence[Head],
    sequences: Sequence[np.ndarray],
    affine: bool,
    rows: np.ndarray | LinearOperator,
    noise: float,
    answers: int,
) -> np.ndarray:
    """Per sequence (rows), the worst case ``|g^T J^+| |dY|`` and the standard deviation
    ``|g^T J^+| |dY| / n^(1/2)`` (columns) for the joint fit of n answers: ``rows`` is
    ``S^-1 V^T`` of the Jacobian's SVD (so ``|g^T J^+| = |rows g|``; or an operator with
    ``|rows g| >= |g^T J^+|``, a bound), ``noise`` ``|dY|``."""
    worst = np.array(
        [
            float(np.linalg.norm(rows @ parameter_gradient(heads, X, affine))) * noise
            for X in sequences
        ]
    )
    return np.column_stack([worst, worst / np.sqrt(answers)])


def groups_prediction_bound(
    heads: Sequence[Head],
    sequences: Sequence[np.ndarray],
    affine: bool,
    *,
    U: np.ndarray,
    B: np.ndarray,
    M: np.ndarray,
    lt: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    noise: np.ndarray,
    f0_noise: float,
) -> np.ndarray:
    """Per sequence (rows), the worst case ``sum_k |g_k^T J_k^+| |dY_k|`` and the standard
    deviation ``(sum_k |g_k^T J_k^+|^2 |dY_k|^2 / n)^(1/2)`` (columns), each + ``f0_noise``
    (beta's own F(0)_1 rounding); n is a group's number of answers.

    ``M`` (p, J) is the probe matrix (``[B^T; 1]`` affine, redundant columns if wide), ``r``
    (G, H) and ``s`` (G, J, H) the groups' residues and scores at the heads, ``noise`` (G,)
    each group's ``|dY_k|``. A rank-deficient group makes the bound inf.
    """
    wide = M.shape[1] > M.shape[0]
    if wide:
        P, ok = inverse_grams(lt, r, s, None, M.T)
    else:
        P, ok = inverse_grams(lt, r, s, np.linalg.inv(M), None)
    if not ok.all():
        return np.full((len(sequences), 2), np.inf)
    n = s.shape[1] * len(lt)  # answers per group
    out = []
    for X in sequences:
        g = group_gradients(heads, X, affine, U=U, B=B, M=M)
        rows = np.sqrt(np.maximum(np.einsum("gi,gij,gj->g", g, P, g), 0.0))
        terms = rows * noise
        out.append((float(terms.sum()) + f0_noise, float(np.sqrt(terms @ terms / n)) + f0_noise))
    return np.array(out)


def group_gradients(
    heads: Sequence[Head],
    X: np.ndarray,
    affine: bool,
    *,
    U: np.ndarray,
    B: np.ndarray,
    M: np.ndarray,
) -> np.ndarray:
    """The gradient of ``y(X)`` in each u-group's fit, (G, H + n H): the H residues ``r_kh``
    first, then the scores ``s_kjh`` pair-major (square ``M``) or the plane ``w_kah``
    row-major (wide ``M``, redundant columns), the columns of the groups' Jacobians.

    The heads are ``[W_h | c_h] = U^-1 X_h`` (row k of ``X_h``: ``[W_h | c_h]^T u_k``, the
    fit's ``w_k`` or ``M^-T s_k``), ``v_h = U^-1 r_h`` and ``beta = F(0)_1 - b_1^T sum_h
    v_h`` (affine), so the chain rule through :func:`output_gradients` gives each entry.
    """
    G = U.shape[0]
    wide = M.shape[1] > M.shape[0]
    Uinv = np.linalg.inv(U)  # (d, G): entry a of a head row from group k
    beta_r = Uinv.T @ B[0] if affine else np.zeros(G)  # dbeta / dr_kh
    grads = output_gradients(heads, X, affine)
    gWc = np.stack(
        [np.column_stack([gW, gc]) if gc is not None else gW for gW, _, gc in grads]
    )  # (H, d, p)
    gv = np.stack([g[1] for g in grads])  # (H, d)
    gx = np.einsum("ak,hab->kbh", Uinv, gWc)  # (G, p, H): in x_kbh
    gr = (Uinv.T @ gv.T) - beta_r[:, None]  # (G, H): in r_kh
    # Square design: x_kbh = sum_j Minv[j, b] s_kjh.
    gfit = gx if wide else np.einsum("jb,kbh->kjh", np.linalg.inv(M), gx)
    return np.concatenate([gr, gfit.reshape(G, -1)], axis=1)

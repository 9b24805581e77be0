"""The paper's Thm 5.1 algorithm: rank-one projections and nuclear-norm minimisation.

>>> import numpy as np
>>> from verified_attn.low_rank.nuclear import nuclear_norm_admm, rop_probes
>>> rng = np.random.default_rng(0)
>>> W = np.outer(rng.standard_normal(8), rng.standard_normal(8))          # rank 1
>>> a, b = rop_probes(8, 48, seed=1)
>>> t = np.einsum("ki,ij,kj->k", a, W, b)                                 # <a_k b_k^T, W>
>>> X, info = nuclear_norm_admm(a, b, t, tol=1e-9)
>>> bool(np.linalg.norm(X - W) / np.linalg.norm(W) < 1e-6), info["converged"]
(True, True)

Measurements: the query [a_k + b_k; b_k] gives ``t_k = logit((f - b_k^T v)/(a_k^T v))
= a_k^T W b_k = <a_k b_k^T, W>`` (THEORY §4). Recovery: ``min ||X||_* s.t.
<a_k b_k^T, X> = t_k`` (Cai & Zhang 2015: m >= C r (2d) suffices w.h.p.; the benchmark
measures C).

Solver: ADMM (Boyd et al. 2011, §3) on ``min ||X||_* + I{A(Z) = t}`` s.t. X = Z, scaled
form: ``X <- SVT_{1/rho}(Z - Y)``, ``Z <- proj_{A(Z)=t}(X + Y)`` (exact projection via a
Cholesky factor of A A^T), ``Y <- Y + X - Z``; rho adapted by residual balancing
(factor 2 when one residual exceeds 10 times the other). **Stopping rule:** stop when
``||X - Z||_F <= tol * max(||X||_F, ||Z||_F)`` and ``rho ||Z - Z_prev||_F <= tol *
rho ||Y||_F``, or after ``max_iter`` iterations (then ``converged`` is False). The returned
matrix is Z, which satisfies the measurements exactly up to rounding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn._legacy import Recovery, split_counts, verify_on_fresh_queries
from verified_attn.errors import InvalidArgument, ModelClassMismatch, NotIdentifiable
from verified_attn.low_rank.probes import Prober
from verified_attn.oracle import Oracle
from verified_attn.probing import candidate_model

__all__ = ["DEFAULT_OVERSAMPLING", "learn_nuclear", "nuclear_norm_admm", "rop_probes"]

THEOREM = "thm-5.1"
DEFAULT_OVERSAMPLING = 4.0  # m = ceil(C * r * 2d): the largest 95% point measured (d = 64, r = 1)
_GRID = 2.0**-20  # probes rounded to this dyadic grid: a + b is then exact in float64


def rop_probes(d: int, m: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """m seeded Gaussian pairs (a_k, b_k), each entry rounded to a multiple of 2^-20.

    >>> a, b = rop_probes(3, 2, seed=0)
    >>> a.shape, bool(np.all(a / 2.0**-20 == np.round(a / 2.0**-20)))
    ((2, 3), True)
    """
    rng = np.random.default_rng(seed)
    a = np.round(rng.standard_normal((m, d)) / _GRID) * _GRID
    b = np.round(rng.standard_normal((m, d)) / _GRID) * _GRID
    return a, b


def _svt(M: np.ndarray, tau: float) -> tuple[np.ndarray, float]:
    P, s, Vt = np.linalg.svd(M, full_matrices=False)
    s = np.maximum(s - tau, 0.0)
    return (P * s) @ Vt, float(s.sum())


def nuclear_norm_admm(
    a: np.ndarray,
    b: np.ndarray,
    t: np.ndarray,
    *,
    tol: float = 1e-9,
    max_iter: int = 5000,
) -> tuple[np.ndarray, dict[str, Any]]:
    """argmin ||X||_* subject to a_k^T X b_k = t_k, by ADMM with the module's stopping rule."""
    m, d = a.shape
    A = np.einsum("ki,kj->kij", a, b).reshape(m, d * d)
    # Orthonormal basis Q of the row space of A (QR of A^T): the projection onto
    # {A(Z) = t} is Z - Q Q^T (z - z0), z0 the least-norm solution; O(m d^2) per step.
    Qm, Rm = np.linalg.qr(A.T)
    diag = np.abs(np.diag(Rm))
    if diag.size == 0 or diag.min() <= 1e-12 * diag.max():
        raise NotIdentifiable(
            "the rank-one measurement operator is rank-deficient (m > d^2 or degenerate "
            "probes): the affine constraint set cannot be projected onto"
        )
    z0 = Qm @ np.linalg.solve(Rm.T, t)

    def project(X: np.ndarray) -> np.ndarray:
        x = X.ravel() - z0
        return (x - Qm @ (Qm.T @ x) + z0).reshape(d, d)

    Z = project(np.zeros((d, d)))  # least-norm solution of the constraints
    top = float(np.linalg.norm(Z, 2)) or 1.0
    rho = 1.0 / top
    Y = np.zeros((d, d))
    X = Z
    it = 0
    converged = False
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        X, _ = _svt(Z - Y, 1.0 / rho)
        Z_prev = Z
        Z = project(X + Y)
        Y = Y + X - Z
        r_pri = float(np.linalg.norm(X - Z))
        r_dual = rho * float(np.linalg.norm(Z - Z_prev))
        if r_pri <= tol * max(np.linalg.norm(X), np.linalg.norm(Z), 1e-300) and (
            r_dual <= tol * max(rho * float(np.linalg.norm(Y)), 1e-300)
        ):
            converged = True
            break
        if r_pri > 10 * r_dual:
            rho *= 2.0
            Y /= 2.0
        elif r_dual > 10 * r_pri:
            rho /= 2.0
            Y *= 2.0
    return Z, {"iterations": it, "converged": converged, "rho": rho}


def _polish(a: np.ndarray, b: np.ndarray, t: np.ndarray, X: np.ndarray, r: int) -> np.ndarray:
    """Refine a rank-r estimate by alternating least squares on the measurements (ours).

    W = L R^T; with R fixed, t_k = a_k^T L (R^T b_k) is linear in L (and symmetrically).
    Six sweeps take an ADMM solution at ~1e-6 to rounding level when the support is right.
    """
    P, s, Vt = np.linalg.svd(X)
    L = P[:, :r] * s[:r]
    R = Vt[:r].T
    m, d = a.shape
    for _ in range(6):
        M = np.einsum("ki,kj->kij", a, b @ R).reshape(m, d * r)
        L = np.linalg.lstsq(M, t, rcond=None)[0].reshape(d, r)
        M = np.einsum("ki,kj->kji", a @ L, b).reshape(m, d * r)
        R = np.linalg.lstsq(M, t, rcond=None)[0].reshape(d, r)
    return L @ R.T


def learn_nuclear(
    oracle: Oracle,
    rank: int | None,
    *,
    measurements: int | None,
    verify: int,
    seed: int,
    tol: float,
    max_iter: int,
) -> Recovery:
    """``learn_low_rank(..., method="nuclear")``: float oracles only (the solver is float)."""
    d = oracle.d
    if oracle.arithmetic.name != "float":
        raise InvalidArgument(
            "method='nuclear' needs a float oracle (arithmetic='float'): the convex solver "
            f"is only as exact as float64; got arithmetic={oracle.arithmetic.name!r}"
        )
    if measurements is None:
        if rank is None:
            raise InvalidArgument("method='nuclear' needs rank= or measurements=")
        measurements = min(d * d, math.ceil(DEFAULT_OVERSAMPLING * rank * 2 * d))
    if isinstance(measurements, bool) or not isinstance(measurements, int):
        raise InvalidArgument(f"measurements must be an int, got {measurements!r}")
    if not 1 <= measurements <= d * d:
        raise InvalidArgument(f"measurements must be in 1..d^2 = {d * d}, got {measurements}")
    if not (isinstance(tol, float) and 0 < tol < 1):
        raise InvalidArgument(f"tol must be a float in (0, 1), got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise InvalidArgument(f"max_iter must be an int >= 1, got {max_iter!r}")
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent
    prober = Prober.start(oracle)
    v = prober.v
    a, b = rop_probes(d, measurements, seed=seed)
    # The probe divides by a_k^T v: flip nothing, but redraw a_k (seeded) where it is tiny.
    vnorm = float(np.linalg.norm(v))
    rng = np.random.default_rng(seed + 7919)
    for k in range(measurements):
        while abs(a[k] @ v) < vnorm / 16:
            a[k] = np.round(rng.standard_normal(d) / _GRID) * _GRID
    t = np.asarray(prober.measure(a, b, "rop"), dtype=np.float64)
    X, info = nuclear_norm_admm(a, b, t, tol=tol, max_iter=max_iter)
    notes = [
        f"ADMM: {info['iterations']} iterations, converged={info['converged']} (tol {tol})",
    ]
    if rank is not None and measurements >= 2 * d * rank:
        X = _polish(a, b, t, X, rank)
        notes.append(f"polished by alternating least squares at rank {rank}")
    params = {"W": X, "v": np.asarray(v, dtype=np.float64)}
    candidate = candidate_model(params, False, False)
    try:
        with oracle.phase("verify"):
            _, ver_err = verify_on_fresh_queries(
                oracle, oracle.arithmetic, candidate, params, False, verify, seed + 1
            )
    except ModelClassMismatch as exc:
        raise NotIdentifiable(
            f"nuclear-norm recovery from m = {measurements} rank-one measurements does not "
            f"reproduce the oracle on fresh queries ({exc}); m is too small for this W, or "
            "rank W is larger than assumed: increase measurements or use method='skeleton'"
        ) from exc
    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    r = rank if rank is not None else int(np.linalg.matrix_rank(X, tol=1e-6 * np.abs(X).max()))
    return Recovery(
        theorem=THEOREM,
        parameters={"W": X, "v": params["v"]},
        arithmetic="float",
        precision=None,
        exact=False,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=d + measurements,
        parameter_count=2 * d * r - r * r + d,
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        rounds=2,
        verification_error=ver_err,
        notes=notes,
        certificate_data=None,
    )

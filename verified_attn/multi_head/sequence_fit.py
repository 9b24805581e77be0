"""The sequence polish: every canonical parameter fitted at once to answers on general sequences.

>>> import numpy as np
>>> from verified_attn.multi_head.sequence_fit import compress, fit_sequences, model_values
>>> rng = np.random.default_rng(0)
>>> heads = [(rng.normal(0, 0.5, (2, 2)), rng.normal(0, 1, 2)) for _ in range(2)]
>>> seqs = polish_sequences(2, 40, seed=0)
>>> rows = compress(seqs, model_values(heads, 0.0, compress(seqs, [0.0] * 40), False))
>>> fit = fit_sequences([(W + 0.01, v - 0.01) for W, v in heads], 0.0, rows, affine=False)
>>> max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(fit.heads, heads)) < 1e-10
True

The u-group decoding (:mod:`.canonical_float`) reads each head's scores off two-token
sequences ``[b + u]^k [b]^m``: every answer sees one score difference per head, and H
sigmoids in ``log(k / m)`` are told apart only as far as their poles are. In float32 that
leaves four-head ``nn.MultiheadAttention`` modules at E = 8 with first-order parameter errors
of 3e-3 to 0.3. A sequence of n distinct random tokens shows each head a whole softmax over
n scores, so the answers' Jacobian in all ``H (d^2 + 2d) + 1`` parameters is far better
conditioned: measured at the true heads of float32 modules (E = 8, 16, H = 2, 4), with twice
as many random sequences of lengths 2-16 as parameters, tokens of norm ``2.42 d^(1/4)``, the
worst case of one parameter under the answers' rounding was 1e-6 to 6e-6 relative.
So a float32 box's decoded heads are the *start* of a Levenberg-Marquardt fit on every
answer, the design's and those of :data:`POLISH_PER_PARAMETER` x (parameters) random
sequences (:func:`polish_sequences`, phase ``polish``), and the result's figures are this
fit's: the per-parameter worst case ``|row_i J^+| |dY|`` and, for a prediction, ``|g^T J^+|
|dY|`` (``J^+`` from the normal equations' inverse: ``|row_i J^+|^2 = (J^T J)^-1_ii``).

Each sequence is kept as its distinct tokens with their multiplicities (a two-token probe
of length 257 is two rows), which is exact: the softmax over repeated tokens is the softmax
over the distinct ones with ``log(count)`` added to their scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "POLISH_PER_PARAMETER",
    "POLISH_TOKEN_NORM",
    "SequenceFit",
    "SequenceRows",
    "compress",
    "cost_noise",
    "covariance_rows",
    "evaluation_floor",
    "fit_sequences",
    "group_figures",
    "group_max",
    "model_values",
    "normal_equations",
    "pack_parameters",
    "polish_sequences",
    "unpack_parameters",
]

#: Random polish sequences per canonical parameter (measured at the truth, float32 modules:
#: with as many sequences as parameters the worst parameter moved by up to 8e-4 relative
#: under the answers' rounding, with twice as many by at most 6e-6).
POLISH_PER_PARAMETER = 2
#: The polish tokens' norm, in units of ``d^(1/4)`` (the design's u rows'; measured: half
#: of it 4-10x worse, 1.5 x of it no better).
POLISH_TOKEN_NORM = 2.42
#: Lengths of the polish sequences, in turn (a length-1 sequence shows no score).
POLISH_LENGTHS: tuple[int, ...] = tuple(range(2, 17))
_GRID = 64  # entries are multiples of 1/64: exact dyadic floats, exact rationals
_LM_ITERATIONS = 50
_CHUNK = 1 << 22  # Jacobian entries held at once

Head = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class SequenceRows:
    """Answers on sequences, each sequence as its distinct tokens (zero-padded to L).

    ``tokens`` (n, L, d); ``log_counts`` (n, L): the log multiplicity of each token, -inf
    for padding; ``queries`` (n, d): each sequence's last token; ``answers`` (n,).
    """

    tokens: np.ndarray
    log_counts: np.ndarray
    queries: np.ndarray
    answers: np.ndarray

    def __len__(self) -> int:
        return len(self.answers)

    def take(self, sl: slice) -> SequenceRows:
        return SequenceRows(
            self.tokens[sl], self.log_counts[sl], self.queries[sl], self.answers[sl]
        )


@dataclass(frozen=True)
class SequenceFit:
    """The polished heads, beta (0 bias-free) and the residuals (model minus answers)."""

    heads: list[Head]
    beta: float
    residuals: np.ndarray


def polish_sequences(
    d: int, count: int, seed: int, *, norm: float = POLISH_TOKEN_NORM, stream: int = 0x706F
) -> list[np.ndarray]:
    """``count`` seeded random sequences for the polish, lengths 2..16 in turn.

    Entries are Gaussian with the token norm ``norm d^(1/4)`` on average, rounded to
    multiples of 1/64 (exact dyadic floats). The generator ``default_rng([seed, stream])``
    is not the verification's (:func:`~verified_attn.verification.fresh_sequences`), so the
    fresh sequences stay unasked; another ``stream`` gives other sequences (the refinement's).

    >>> [X.shape for X in polish_sequences(3, 3, seed=1)]
    [(2, 3), (3, 3), (4, 3)]
    """
    rng = np.random.default_rng([seed, stream])
    sd = norm * d**0.25 / math.sqrt(d)
    out = []
    for i in range(count):
        n = POLISH_LENGTHS[i % len(POLISH_LENGTHS)]
        out.append(np.round(rng.normal(0.0, sd, (n, d)) * _GRID) / _GRID)
    return out


def compress(sequences: Sequence[np.ndarray], answers: Sequence[float]) -> SequenceRows:
    """Each sequence as its distinct tokens and their multiplicities (the last token is the
    query), padded to the longest.

    >>> rows = compress([np.array([[1.0], [1.0], [2.0]])], [0.5])
    >>> rows.tokens[0, :, 0].tolist(), np.exp(rows.log_counts[0]).tolist()
    ([1.0, 2.0], [2.0, 1.0])
    """
    uniq = []
    for X in sequences:
        X = np.asarray(X, dtype=np.float64)
        u, counts = np.unique(X, axis=0, return_counts=True)
        uniq.append((u, counts, X[-1]))
    n = len(uniq)
    d = uniq[0][0].shape[1] if n else 0
    L = max((len(u) for u, _, _ in uniq), default=1)
    tokens = np.zeros((n, L, d))
    logc = np.full((n, L), -np.inf)
    queries = np.zeros((n, d))
    for i, (u, counts, q) in enumerate(uniq):
        tokens[i, : len(u)] = u
        logc[i, : len(u)] = np.log(counts)
        queries[i] = q
    return SequenceRows(tokens, logc, queries, np.asarray(answers, dtype=np.float64))


def unpack_parameters(theta: np.ndarray, H: int, d: int, affine: bool) -> tuple[list[Head], float]:
    """The heads and beta (0 bias-free) of a parameter vector (:func:`pack_parameters`)."""
    out: list[Head] = []
    pos = 0
    for _ in range(H):
        W = theta[pos : pos + d * d].reshape(d, d)
        v = theta[pos + d * d : pos + d * d + d]
        pos += d * d + d
        if affine:
            out.append((W, v, theta[pos : pos + d]))
            pos += d
        else:
            out.append((W, v))
    return out, (float(theta[pos]) if affine else 0.0)


def pack_parameters(heads: Sequence[Head], beta: float, affine: bool) -> np.ndarray:
    """Per head W row-major, v, then c if affine; beta last if affine (the order of
    :func:`~.prediction_bound.parameter_gradient`)."""
    parts = [np.concatenate([np.ravel(h[0]), *h[1:]]) for h in heads]
    return np.concatenate([*parts, [beta] if affine else []])


def group_figures(per: np.ndarray, H: int, d: int, affine: bool) -> dict[str, Any]:
    """The largest of per-parameter figures ``per`` (:func:`pack_parameters` order) by
    group: per head its W rows, its value and (affine) its score bias c, and beta.

    >>> g = group_figures(np.arange(7.0), 1, 2, False)
    >>> g, group_max(g)
    ({'W': [3.0], 'v': [5.0]}, 5.0)
    """
    step = d * d + d + (d if affine else 0)
    out: dict[str, Any] = {"W": [], "v": []}
    if affine:
        out["c"] = []
    for h in range(H):
        base = h * step
        out["W"].append(float(per[base : base + d * d].max()))
        out["v"].append(float(per[base + d * d : base + d * d + d].max()))
        if affine:
            out["c"].append(float(per[base + d * d + d : base + step].max()))
    if affine:
        out["beta"] = float(per[H * step])
    return out


def group_max(groups: dict[str, Any]) -> float:
    """The largest figure of :func:`group_figures`' groups (every parameter's bound)."""
    return max(float(x) for v in groups.values() for x in (v if isinstance(v, list) else [v]))


def _head_terms(
    head: Head, rows: SequenceRows, affine: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's outputs (n,), softmax weights p (n, L) and ``sum_i p_i (v^T x_i - y) x_i``
    (n, d)."""
    W, v = head[0], head[1]
    shift = rows.queries @ W.T  # W x_N per row
    if affine:
        shift = shift + head[2]
    z = np.einsum("nld,nd->nl", rows.tokens, shift) + rows.log_counts
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    vals = rows.tokens @ v
    y = np.einsum("nl,nl->n", p, vals)
    a = p * (vals - y[:, None])
    return y, p, np.einsum("nl,nld->nd", a, rows.tokens)


def model_values(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool
) -> np.ndarray:
    """The heads' answers on ``rows`` (n,)."""
    out = np.full(len(rows), beta if affine else 0.0)
    for hd in heads:
        out += _head_terms(hd, rows, affine)[0]
    return out


def _jacobian(
    heads: Sequence[Head], rows: SequenceRows, affine: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Model values (n,) and their Jacobian (n, P) in the packed parameters."""
    n, d = len(rows), rows.queries.shape[1]
    F = np.full(n, 0.0)
    cols = []
    for hd in heads:
        y, p, xa = _head_terms(hd, rows, affine)
        F += y
        cols.append((xa[:, :, None] * rows.queries[:, None, :]).reshape(n, d * d))
        cols.append(np.einsum("nl,nld->nd", p, rows.tokens))
        if affine:
            cols.append(xa)
    return F, np.hstack(cols + ([np.ones((n, 1))] if affine else []))


def normal_equations(
    heads: Sequence[Head], beta: float, rows: SequenceRows, affine: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Residuals (model minus answers), ``J^T J`` and ``J^T r`` at the heads, in chunks of
    rows (the Jacobian itself is never held whole)."""
    P = len(pack_parameters(heads, beta, affine))
    step = max(1, _CHUNK // max(P, 1))
    A = np.zeros((P, P))
    g = np.zeros(P)
    res = np.empty(len(rows))
    for lo in range(0, len(rows), step):
        part = rows.take(slice(lo, lo + step))
        F, J = _jacobian(heads, part, affine)
        r = F + (beta if affine else 0.0) - part.answers
        res[lo : lo + len(r)] = r
        A += J.T @ J
        g += J.T @ r
    return res, A, g


def covariance_rows(A: np.ndarray) -> tuple[np.ndarray, float, float]:
    """From ``J^T J``: ``Lambda^-1/2 V^T`` (so ``|rows g| = |g^T J^+|``), the Jacobian's
    smallest singular value and the largest ``|row_i J^+|``; empty, 0 and inf if
    ``J^T J`` is singular to working precision."""
    lam, V = np.linalg.eigh(A)
    if not lam[0] > lam[-1] * 1e-15 * A.shape[0]:
        return np.zeros((0, A.shape[0])), 0.0, math.inf
    rows = V.T  # scaled in place: no other P x P copy
    rows /= np.sqrt(lam)[:, None]
    sensitivity = float(np.sqrt(np.einsum("ij,ij->j", rows, rows)).max())
    return rows, float(np.sqrt(lam[0])), sensitivity


#: The float64 evaluation's unit roundoff: the model values' own rounding, per answer
#: ``_EVAL_UNIT |y|`` (whatever the box's precision: its rounding is in the residuals).
_EVAL_UNIT = 2.0**-53
#: A decrease of the cost below this many times its rounding noise is not a better fit.
_NOISE_FACTOR = 2.0


def evaluation_floor(answers: np.ndarray) -> float:
    """``sum (u |y|)^2``: the cost a fit at the exact parameters reaches when its model
    values are rounded in float64 (unit roundoff u = 2^-53).

    >>> evaluation_floor(np.array([1.0, -2.0])) == 5 * 2.0**-106
    True
    """
    return float(np.sum((_EVAL_UNIT * np.asarray(answers, dtype=np.float64)) ** 2))


def cost_noise(cost: float, floor: float) -> float:
    """The rounding noise of a cost ``|r|^2`` whose residuals carry float64 rounding of
    ``floor`` (:func:`evaluation_floor`): a perturbation e of r moves it by ``2 r.e`` to first
    order, at most ``2 |r| |e|``; :data:`_NOISE_FACTOR` of that. A Levenberg-Marquardt step
    whose decrease, measured or predicted, is below it stops the fit (measured: at
    d = 16, H = 8 the fit reaches its floor in 3 steps and spent 45 more on noise).

    >>> cost_noise(1e-24, 1e-26) == 2 * 2 * (1e-24 * 1e-26) ** 0.5
    True
    """
    return _NOISE_FACTOR * 2.0 * math.sqrt(cost * floor)


def fit_sequences(
    heads: Sequence[Head], beta: float, rows: SequenceRows, *, affine: bool
) -> SequenceFit:
    """Levenberg-Marquardt (Marquardt's diagonal scaling, normal equations) on every answer
    in ``rows`` from the given heads; the iterate with the smallest residual is kept (never
    worse than the start). Its figures are :func:`covariance_rows` of
    :func:`normal_equations` there."""
    H, d = len(heads), rows.queries.shape[1]
    theta = pack_parameters(heads, beta, affine)
    res, A, g = normal_equations(*unpack_parameters(theta, H, d, affine), rows, affine)
    cost = float(res @ res)
    floor = evaluation_floor(rows.answers)
    mu = 1e-3
    for _ in range(_LM_ITERATIONS):
        D = np.diag(A).copy()
        D[D <= 0] = 1.0
        damped = A.copy()  # A + mu diag(D), one P x P copy (P up to 2400, sequence_blocks: 46 MB)
        damped[np.diag_indices_from(damped)] += mu * D
        try:
            step = np.linalg.solve(damped, -g)
        except np.linalg.LinAlgError:
            mu *= 10.0
            continue
        finally:
            del damped
        # Below the cost's own rounding noise a decrease, measured or predicted by the
        # linear model, is no evidence of a better fit: the iterate is at its floor.
        noise = cost_noise(cost, floor)
        trial = theta + step
        hs, bt = unpack_parameters(trial, H, d, affine)
        t_res = model_values(hs, bt, rows, affine) - rows.answers
        t_cost = float(t_res @ t_res)
        if math.isfinite(t_cost) and t_cost < cost:
            small = cost - t_cost <= max(1e-6 * cost, noise)
            theta, cost = trial, t_cost
            res, A, g = normal_equations(hs, bt, rows, affine)
            mu = max(mu / 10.0, 1e-12)
            if small:
                break
        else:
            predicted = -float(2.0 * (g @ step) + step @ (A @ step))
            mu *= 10.0
            if mu > 1e10 or predicted <= noise:
                break
    hs, bt = unpack_parameters(theta, H, d, affine)
    return SequenceFit([tuple(np.array(x) for x in h) for h in hs], bt, res)

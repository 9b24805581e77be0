"""The values of known heads on one cell of g, by linear least squares (float64).

>>> import numpy as np
>>> from verified_attn.transformer.multi_head_float_cells import FloatCell
>>> cell = FloatCell((True,), np.array([1.0, 0.0]), 4.0, np.array([1.0, 1.0]))
>>> heads = [(np.eye(2), np.zeros(2)), (-np.eye(2), np.ones(2))]
>>> r = probe_radius(cell, heads)          # score spread at most SPREAD, inside the cell
>>> r, value_queries(2, 2)
(0.5, 8)

Once one cell of g has given the heads' scores ``(W_h, c_h)`` (the float
``learn_multi_head`` there), another cell S needs only their values
``v_h^S``: on S the Transformer is ``T(X) = T([c]) + sum_h v_h^S . (X^T alpha_h(X) - c)``
for tokens near a point c of S, with every ``alpha_h`` known. So T is *linear* in the
unknowns, and ``value_queries(d, H) = 2 H d`` random sequences (``LENGTH`` tokens
``c + r Y``, |Y| <= 1) fix them by least squares. Its conditioning falls like the heads'
score differences on the probes, i.e. like r (not like their (2H - 1)-th power, as a pole
decoding's does): thin cells, whose scores are all nearly equal, are still solved.

The radius r is scale-aware: at most half the cell's margin (the probes stay in the cell)
and small enough that every head's score spread over the probes is at most ``SPREAD``
(no softmax saturates, which would merge the heads' columns). The fit is accepted only if
it reproduces every answer by the float rule at the box's rtol on the cell's answers
``(T(X) - T([c])) / r`` (a head missing from the known ones shows here: the caller then
runs the full learner on the cell); its values' absolute error estimate is the pseudo
inverse's largest row sum times the larger of the residual and the answers' rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from verified_attn.agreement import agree
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.errors import ModelClassMismatch
from verified_attn.transformer.multi_head_float_cells import FloatCell

__all__ = ["LENGTH", "SPREAD", "fit_values", "head_errors", "probe_radius", "unscale", "value_queries"]

#: Tokens per probe sequence (two or three heads' weights per sequence differ at first order
#: in the score differences; longer sequences average them away).
LENGTH = 3
#: The largest score spread |s_hi - s_hj| allowed over one probe sequence's tokens.
SPREAD = 2.0


def value_queries(d: int, H: int) -> int:
    """Probe sequences per cell: 2 H d (H d unknowns, each answer's residual checked)."""
    return 2 * H * d


Scores = list[tuple[np.ndarray, np.ndarray]]  # (W_h, c_h) per head


def probe_radius(cell: FloatCell, heads: Scores) -> float:
    """The largest power of two r <= margin / 2 with every score spread over tokens within
    r of the center at most SPREAD: ``2 r |W_h c + c_h| + 4 r^2 |W_h|`` (2-norms)."""
    r = cell.margin / 2
    for W, c in heads:
        q = float(np.linalg.norm(W @ cell.center + c))
        w = float(np.linalg.norm(W, 2))
        # 2 r q + 4 r^2 w <= SPREAD, the positive root of the quadratic.
        root = SPREAD / (q + math.sqrt(q * q + 4 * w * SPREAD)) if q or w else math.inf
        r = min(r, root)
    return 2.0 ** math.floor(math.log2(r))


def _columns(X: np.ndarray, heads: Scores, c: np.ndarray, r: float) -> np.ndarray:
    """Per sequence, the heads' weighted token means less c over r, side by side."""
    cols = []
    for W, b in heads:
        s = np.einsum("bnd,bd->bn", X, X[:, -1] @ W.T + b)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        alpha = w / w.sum(axis=1, keepdims=True)
        cols.append((np.einsum("bn,bnd->bd", alpha, X) - c) / r)
    return np.concatenate(cols, axis=1)


def fit_values(
    ask: Callable[[np.ndarray], np.ndarray],
    cell: FloatCell,
    heads: Scores,
    r: float,
    arith: FloatArithmetic,
    seed: int,
) -> tuple[np.ndarray, float] | None:
    """(values v_h^S as rows, their absolute error estimate), or None if the fit misses
    an answer (the known heads are not all of this cell's). ``ask(Ys)``: the answers
    ``(T(c + r Y) - T([c])) / r``, asked of the box; ``r`` from :func:`probe_radius`."""
    d, H = cell.center.shape[0], len(heads)
    rng = np.random.default_rng(seed + 15485863)
    Y = rng.normal(size=(value_queries(d, H), LENGTH, d))
    Y /= np.linalg.norm(Y, axis=2).max()  # every token within r of the center
    F = np.asarray(ask(Y), dtype=np.float64)
    M = _columns(cell.center[None, None, :] + r * Y, heads, cell.center, r)
    v, *_ = np.linalg.lstsq(M, F, rcond=None)
    pred = M @ v
    if not all(agree(arith, f, p)[0] for f, p in zip(F, pred, strict=True)):
        return None
    unit = float(arith.unit_roundoff or 2.0**-53)
    noise = max(float(np.abs(F - pred).max()), unit * max(1.0, float(np.abs(F).max())))
    err = float(np.abs(np.linalg.pinv(M)).sum(axis=1).max()) * noise
    return v.reshape(H, d), err


def unscale(rec: Any, cell: FloatCell, t: float) -> tuple[list[Any], float, dict[str, Any]]:
    """Inner heads (t^2 W_h, v_h, t (W_h c + c_h)) to (W_h, c_h, v_h, e_Wc, e_v) with
    absolute first-order errors, the largest e_Wc, and the inner record (t, the inner
    scale, the inner group figures) the certificate states. Each head's errors come from
    the inner learner's figures per parameter group (``parameter_error_estimate_groups``; without
    them every group has the one estimate): W_h's through 1/t^2, c_h's through 1/t plus
    W_h's carried through the centre, v_h's as is (:func:`head_errors`). The inner beta
    must vanish (a multi-head function has no output bias) beyond its own group's error."""
    heads = rec.parameters["heads"]
    beta = abs(float(rec.parameters.get("beta") or 0.0))
    inner_scale = max(
        [1.0, beta] + [float(np.abs(np.concatenate([np.ravel(x) for x in h])).max()) for h in heads]
    )
    estimate = float(rec.parameter_error_estimate or 0.0)
    groups = rec.parameter_error_estimate_groups or {
        "W": [estimate] * len(heads),
        "v": [estimate] * len(heads),
        "c": [estimate] * len(heads),
        "beta": estimate,
    }
    err_beta = float(groups["beta"]) * inner_scale  # absolute, inner
    if beta > 8 * max(err_beta, 1e-12):
        raise ModelClassMismatch(
            f"the answers less g on cell {cell.pattern} have the output bias {beta:.3g} "
            "(a multi-head function has none)"
        )
    errors = head_errors(groups, inner_scale, t, cell.center)
    out: list[Any] = []
    for (W_in, v, c_in), (e_wc, e_v) in zip(heads, errors, strict=True):
        W = np.asarray(W_in, dtype=np.float64) / t**2
        c = np.ravel(np.asarray(c_in, dtype=np.float64)) / t - W @ cell.center
        out.append((W, c, np.ravel(np.asarray(v, dtype=np.float64)), e_wc, e_v))
    record = {"t": t, "scale": inner_scale, "groups": groups}
    return out, max(e for e, _ in errors), record


def head_errors(
    groups: dict[str, Any], scale: float, t: float, center: np.ndarray
) -> list[tuple[float, float]]:
    """Per head the absolute errors (e_Wc, e_v) of the unscaled (W_h, c_h) and v_h from the
    inner group figures (relative to the inner ``scale``): W_h = W_in / t^2 errs by its
    group's ``e_W scale / t^2``; c_h = c_in / t - W_h c by ``e_c scale / t`` plus that times
    ``|c|_1``; e_Wc is ``e_W (1 + |c|_1) + e_c``, e_v the value group's.

    >>> head_errors({"W": [1e-12], "v": [1e-9], "c": [1e-12]}, 2.0, 0.5, np.array([1.0, -1.0]))
    [(2.8e-11, 2e-09)]
    """
    spread = 1 + float(np.abs(center).sum())
    out = []
    for e_w, e_v, e_c in zip(groups["W"], groups["v"], groups["c"], strict=True):
        wc = float(e_w) * scale / t**2 * spread + float(e_c) * scale / t
        out.append((wc, float(e_v) * scale))
    return out

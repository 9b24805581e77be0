"""First-order bound on a float single-head result's predictions, at no query.

>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.exact_recovery.float_bound import head_gradients
>>> W, v = np.array([[0.5, 0.0], [0.0, -1.0]]), np.array([1.0, 2.0])
>>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
>>> xa, q, gv = head_gradients(W, v, None, X)      # dy/dW = outer(xa, q), dy/dv = gv
>>> xa.shape, q.tolist(), gv.shape
((2,), [0.0, 1.0], (2,))

A float decoding's W, v (and c, beta) carry the answers' rounding, amplified by the ratio
``y = (F - v_j - beta) / (t u_k^T v)``, the logit and ``U^-T``; the learner's fresh
sequences see the resulting prediction error only where they are asked. So the prediction
at a sequence X is bounded as a linear functional of the answers: ``dy(X) = sum_i g_i
da_i`` with ``g_i`` the derivative of ``y(X)`` in answer i, by the chain rule through the
decoding (:func:`answer_gradients`: every W entry also depends on v's answers through
``u_k^T v`` and on beta's, every c entry too). Each answer's rounding is modelled as
independent, its standard deviation one ulp (``2 * unit_roundoff``) of the magnitudes the
box computes for it (:func:`answer_noise`): ``|beta|``, the values ``sum_i p_i |v|
|x_i|``, and a score's ``|x_i| |W x_N + c|`` carried to the answer by ``p_1 p_2 |v^T (x_1
- x_2)|``, each magnitude as Cauchy-Schwarz allows (the box forms them as dot products whose own sizes the
learner cannot see). The prediction error then has standard deviation ``(sum_i g_i^2
sigma_i^2)^(1/2)``; the worst case, every rounding aligned, is ``sum_i |g_i| sigma_i``.

Measured on ``nn.MultiheadAttention`` with one head in float32 (E = 4 to 32, biases and
readout N(0, 1), 24 modules): the actual answer errors against the float64 module were 0.1
to 0.8 times this model's sigma in RMS, per module (one unit roundoff of the same
magnitudes would be 0.2 to 1.6; ``unit_roundoff * |answer|`` alone underestimates a refined
probe's rounding up to 500 times: its large scale t enters the box's scores and values, not
the answer). The learner returns a float result only if :data:`PREDICTION_SIGMAS`
standard deviations fit within what the agreement rule allows at
each of :data:`PREDICTION_SEQUENCES` sequences of its verification's generator (the
multi-head learner's figures); otherwise :class:`~verified_attn.errors.PrecisionExhausted`
names the rtol at which twice the bound fits. On those 24 modules at rtol 1e-4 every
result whose actual prediction error exceeded the rule's allowance was refused (5), every
returned one was within 0.36 of it (11), and 8 within it were refused (0.17 to 0.69).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.design import SingleHeadDesign
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.models import SingleHeadAttention
from verified_attn.prediction_rule import PREDICTION_SEQUENCES, PREDICTION_SIGMAS, rule_ratios
from verified_attn.verification import bias_allowance, float_floor, fresh_sequences

__all__ = [
    "PREDICTION_SEQUENCES",
    "PREDICTION_SIGMAS",
    "DecodedHead",
    "Probes",
    "answer_gradients",
    "answer_noise",
    "head_gradients",
    "parameter_bounds",
    "parameter_error_estimate",
    "precision_or_mismatch",
    "prediction_bounds",
    "require_prediction_bound",
]

#: Sequences the bound is evaluated on (the verification's first, then more of the same


@dataclass(frozen=True)
class Probes:
    """The design and answers in float64: ``b`` beta's answer (0 if not affine), ``a[i]``
    the answer to [e_i], ``F[k, j]`` to [z e_j + (t / z) u_k; z e_j] (z the design's
    anchor), ``G[k]`` to [t0 u_k; 0]; ``p`` is ``U^T v``, ``Y`` and ``Y0`` the probes'
    ratios."""

    U: np.ndarray
    t: np.ndarray
    z: float
    t0: np.ndarray | None
    b: float
    a: np.ndarray
    F: np.ndarray
    G: np.ndarray | None
    p: np.ndarray
    Y: np.ndarray
    Y0: np.ndarray | None

    @classmethod
    def of(cls, design: SingleHeadDesign, answers: dict[str, Any]) -> Probes:
        U = design.U_float
        t = np.array(design.scales_float())
        b = float(answers["beta"]) if design.affine else 0.0
        a = np.array([float(x) for x in answers["v"]])
        F = np.array([[float(x) for x in row] for row in answers["W"]])
        p = U.T @ (a - b)
        z = float(design.anchor)
        Y = (F - z * a[None, :]) / (t / z * p[:, None])
        t0 = G = Y0 = None
        if design.affine:
            assert design.c_scales is not None
            t0 = np.array([float(s) for s in design.c_scales])
            G = np.array([float(x) for x in answers["c"]])
            Y0 = (G - b) / (t0 * p)
        return cls(U, t, z, t0, b, a, F, G, p, Y, Y0)


def head_gradients(
    W: np.ndarray, v: np.ndarray, c: np.ndarray | None, X: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xa, q, gv)``: ``dy/dW = outer(xa, q)``, ``dy/dc = xa``, ``dy/dv = gv`` for
    ``y(X) = beta + sum_i p_i v^T x_i``, ``p = softmax(X (W x_N + c))`` (``dy/dbeta = 1``).

    With ``a_i = p_i (v^T x_i - sum_l p_l v^T x_l)``: ``xa = sum_i a_i x_i``, ``q = x_N``,
    ``gv = sum_i p_i x_i`` (the multi-head learner's ``output_gradients`` for one head).
    """
    X = np.asarray(X, dtype=np.float64)
    q = X[-1]
    z = X @ (W @ q + (0.0 if c is None else c))
    w = np.exp(z - z.max())
    w /= w.sum()
    vals = X @ v
    return X.T @ (w * (vals - w @ vals)), q, X.T @ w


def answer_gradients(
    pr: Probes, Uinv: np.ndarray, xa: np.ndarray, q: np.ndarray, gv: np.ndarray, gbeta: float
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray | None]:
    """``(g_b, g_a, g_F, g_G)``: the derivative of a prediction in each answer, from its
    derivative in the parameters (``dy/dW = outer(xa, q)``, ``dy/dc = xa`` if affine,
    ``dy/dv = gv``, ``dy/dbeta = gbeta``), by the chain rule through the decoding:

    ``W = U^-T (M - m0 1^T)``, ``c = U^-T m0``, ``M = logit(Y) / t``, ``m0 = logit(Y0) / t0``,
    ``Y = (F - z a_j) / ((t / z) p_k)``, ``Y0 = (G - b) / (t0 p_k)``, ``p = U^T v``,
    ``v = a - b`` (z = 1 if affine).
    """
    affine = pr.G is not None
    gN = np.outer(Uinv @ xa, q)  # dy/dM, (k, j)
    gY = gN / (pr.t * pr.Y * (1 - pr.Y))
    gF = gY / (pr.t / pr.z * pr.p[:, None])
    gp = -(gY * pr.Y).sum(axis=1) / pr.p
    gG = None
    gb = gbeta
    if affine:
        assert pr.t0 is not None and pr.Y0 is not None
        gm0 = Uinv @ xa - gN.sum(axis=1)
        gY0 = gm0 / (pr.t0 * pr.Y0 * (1 - pr.Y0))
        gG = gY0 / (pr.t0 * pr.p)
        gp = gp - gY0 * pr.Y0 / pr.p
        gb -= float(gG.sum())
    gvt = gv + pr.U @ gp  # dy/dv through v itself and through p = U^T v
    ga = gvt - pr.z * gF.sum(axis=0)
    if affine:
        gb -= float(gvt.sum())
    return gb, ga, gF, gG


def answer_noise(
    unit: float, pr: Probes, params: dict[str, Any]
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray | None]:
    """Each answer's rounding, ``(s_b, s_a, s_F, s_G)``: one ulp (``2 unit``) of the
    magnitudes the box computes for it, at the decoded head (see the module docstring).

    A probe [x_1; x_2] sums ``|beta|``, the values ``(y |x_1| + (1 - y) |x_2|) |v|`` and the
    scores' ``y (1 - y) |v^T (x_1 - x_2)| (|x_1| + |x_2|) |W x_2 + c|``, with y its ratio.
    """
    W = np.asarray(params["W"], dtype=np.float64)
    d = W.shape[0]
    c = np.asarray(params["c"], dtype=np.float64).reshape(-1) if pr.G is not None else 0.0
    beta, nv = abs(pr.b), float(np.linalg.norm(np.asarray(params["v"], dtype=np.float64)))
    colq = np.linalg.norm(W + np.reshape(c, (-1, 1)) * np.ones((1, d)), axis=0)  # |W e_j + c|
    nu = np.linalg.norm(pr.U, axis=0)  # |u_k|
    # |z e_j + T u_k|^2 = T^2 |u_k|^2 + 2 z T U[j, k] + z^2, with T = t / z; |x_2| = z
    z, T = pr.z, pr.t / pr.z
    n1 = np.sqrt(np.maximum((T * nu[:, None]) ** 2 + 2 * z * T * pr.U.T + z * z, 0.0))
    Y = np.clip(pr.Y, 0.0, 1.0)
    s_F = (
        beta
        + nv * (Y * n1 + (1 - Y) * z)
        + Y * (1 - Y) * np.abs(T * pr.p[:, None]) * (n1 + z) * z * colq[None, :]
    )
    s_G = None
    if pr.G is not None:
        assert pr.t0 is not None and pr.Y0 is not None
        Y0 = np.clip(pr.Y0, 0.0, 1.0)
        x1 = pr.t0 * nu
        s_G = (
            beta
            + nv * Y0 * x1
            + Y0 * (1 - Y0) * np.abs(pr.t0 * pr.p) * x1 * float(np.linalg.norm(c))
        )
        s_G = 2 * unit * s_G
    ulp = 2 * unit
    return ulp * beta, ulp * (beta + nv) * np.ones(d), ulp * s_F, None if s_G is None else s_G


def prediction_bounds(
    unit: float,
    design: SingleHeadDesign,
    answers: dict[str, Any],
    params: dict[str, Any],
    sequences: Sequence[np.ndarray],
) -> np.ndarray:
    """Per sequence (rows), the worst case ``sum_i |g_i| sigma_i`` and the standard
    deviation ``(sum_i g_i^2 sigma_i^2)^(1/2)`` (columns) of the prediction error."""
    pr = Probes.of(design, answers)
    Uinv = np.linalg.inv(pr.U)
    W = np.asarray(params["W"], dtype=np.float64)
    v = np.asarray(params["v"], dtype=np.float64).reshape(-1)
    c = np.asarray(params["c"], dtype=np.float64).reshape(-1) if design.affine else None
    noise = answer_noise(unit, pr, params)
    out = []
    for X in sequences:
        xa, q, gv = head_gradients(W, v, c, X)
        grads = answer_gradients(pr, Uinv, xa, q, gv, 1.0 if design.affine else 0.0)
        terms = [
            np.abs(np.asarray(g, dtype=np.float64)) * s
            for g, s in zip(grads, noise, strict=True)
            if g is not None and s is not None
        ]
        out.append(
            (
                float(sum(float(x.sum()) for x in terms)),
                float(np.sqrt(sum(float((x * x).sum()) for x in terms))),
            )
        )
    return np.array(out)


def parameter_bounds(
    unit: float, design: SingleHeadDesign, answers: dict[str, Any], params: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Entry-wise first-order worst case of each parameter's error (``W``, ``v``, and
    ``c``, ``beta`` if affine): every answer's rounding (:func:`answer_noise`) aligned
    against it, carried through the decoding by absolute values at each step,
    ``|dv| = s_a + s_b``, ``|dp| = |U|^T |dv|``, ``|dY| = (s_F + z |dv_j|) / |(t / z) p_k|
    + |Y| |dp_k| / |p_k|`` (z the anchor), ``|dM| = |dY| / (t Y (1 - Y))``, ``|dW| <= |U^-T| |dM|`` (O(d^3)),
    plus the decoding's own float rounding (a few ulps of each ratio and logit, and of the
    product with ``U^-T``, whose rows have ``n`` nonzeros: ``n`` ulps of ``|U^-T| |M|``).
    """
    pr = Probes.of(design, answers)
    s_b, s_a, s_F, s_G = answer_noise(unit, pr, params)
    dv = s_a + s_b
    dp = np.abs(pr.U).T @ dv
    ap = np.abs(pr.p)

    def logit_error(Y: np.ndarray, t: np.ndarray, dY: np.ndarray) -> np.ndarray:
        Yc = np.clip(Y, np.finfo(np.float64).tiny, 1 - unit)
        own = unit * (np.abs(np.log(Yc)) + np.abs(np.log1p(-Yc)))
        return (dY + 4 * unit * Yc) / (t * Yc * (1 - Yc)) + own / t

    dY = (s_F + pr.z * dv[None, :]) / (pr.t / pr.z * ap[:, None])
    dY = dY + np.abs(pr.Y) * (dp / ap)[:, None]
    dM = logit_error(pr.Y, pr.t, dY)
    M = np.abs(np.log(np.clip(pr.Y, 1e-300, 1.0)) - np.log1p(-np.clip(pr.Y, 0.0, 1 - unit)))
    M = M / pr.t
    out: dict[str, np.ndarray] = {"v": dv}
    dm0 = m0 = None
    if pr.G is not None:
        assert pr.t0 is not None and pr.Y0 is not None and s_G is not None
        dY0 = (s_G + s_b) / (pr.t0 * ap) + np.abs(pr.Y0) * dp / ap
        dm0 = logit_error(pr.Y0, pr.t0, dY0)
        Y0 = np.clip(pr.Y0, 1e-300, 1 - unit)
        m0 = np.abs(np.log(Y0) - np.log1p(-Y0)) / pr.t0
        dM, M = dM + dm0[:, None], M + m0[:, None]
        out["beta"] = np.array([s_b])
    inv_t = np.abs(np.linalg.inv(pr.U).T)
    n = float(np.count_nonzero(inv_t, axis=1).max(initial=1))
    out["W"] = inv_t @ (dM + n * 2 * unit * M)
    if dm0 is not None and m0 is not None:
        out["c"] = inv_t @ (dm0 + n * 2 * unit * m0)
    return out


def parameter_error_estimate(
    unit: float, design: SingleHeadDesign, answers: dict[str, Any], params: dict[str, Any]
) -> float:
    """The largest entry of :func:`parameter_bounds` over ``max(1, |beta|, largest entry)``
    of ``params`` (the learners' convention; :func:`verified_attn.precision.
    stated_relative_error` turns it into the figure relative to the largest entry)."""
    bounds = parameter_bounds(unit, design, answers, params)
    worst = max(float(np.max(b, initial=0.0)) for b in bounds.values())
    largest = max(
        float(np.max(np.abs(np.asarray(params[k], dtype=np.float64)), initial=0.0))
        for k in ("W", "v", "c", "beta")
        if k in params and params[k] is not None
    )
    return worst / max(1.0, largest)


class DecodedHead(NamedTuple):
    """A decoded single head with what it was decoded from: the oracle's arithmetic, the
    design, the answers by phase and the parameters (W, v, and c, beta if affine)."""

    arith: Arithmetic
    design: SingleHeadDesign
    answers: dict[str, Any]
    params: dict[str, Any]


def require_prediction_bound(
    head: DecodedHead, *, seed: int, lengths: Sequence[int]
) -> tuple[float, float]:
    """``(ratio, worst case)``: the largest :data:`PREDICTION_SIGMAS` standard deviations of
    the prediction error, and the largest worst case, over what the agreement rule allows,
    on :data:`PREDICTION_SEQUENCES` sequences ``fresh_sequences(d, ., seed, lengths)``.

    A float result's only (exact and certified ones: ``(0, 0)``). Raises
    :class:`PrecisionExhausted` if the ratio is over 1, naming the sequence, the
    figures and the smallest rtol at which twice the bound fits (a result learned at that
    rtol is not at the edge of the rule).
    """
    arith, design, answers, params = head
    if arith.name != "float":  # exact and certified results carry no rounding to bound
        return 0.0, 0.0
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    sequences = fresh_sequences(design.d, PREDICTION_SEQUENCES, seed=seed, lengths=lengths)
    bounds = prediction_bounds(unit, design, answers, params, sequences)
    beta = float(params["beta"]) if design.affine else 0.0
    model = SingleHeadAttention(
        np.asarray(params["W"], dtype=np.float64),
        np.asarray(params["v"], dtype=np.float64).reshape(-1),
        **(
            {"c": np.asarray(params["c"], dtype=np.float64).reshape(-1), "beta": beta}
            if design.affine
            else {}
        ),
    )
    preds = np.array([float(model.evaluate_batch(X[None])[0]) for X in sequences])
    allowed, ratios, worst_case, worst = rule_ratios(arith, preds, beta, bounds)
    ratio = float(ratios[worst])
    if not ratio <= 1.0:
        # The rtol to declare: where twice the bound fits, so that a result learned at it
        # is not at the edge of the 2-sigma rule (measured: at the edge, off by 1.13 x).
        margins = 2 * PREDICTION_SIGMAS * bounds[:, 1]
        sizes = np.maximum(np.abs(preds - beta), max(float_floor(list(preds), beta), 1e-300))
        needed = float(np.max((margins - (allowed - arith.rtol * sizes)) / sizes))
        raise PrecisionExhausted(
            f"learn_single_head: the decoded head's predictions are too uncertain for rtol "
            f"{arith.rtol:g} at unit roundoff {unit:.3g}: at the sequence of length "
            f"{sequences[worst].shape[0]} (no. {worst + 1} of the {len(sequences)} the "
            f"first-order bound is evaluated on, none asked) {PREDICTION_SIGMAS:g} standard "
            f"deviations of the prediction error under the answers' rounding are "
            f"{PREDICTION_SIGMAS * bounds[worst, 1]:.2e}, {ratio:.3g} x what the agreement "
            f"rule allows there ({allowed[worst]:.2e}; prediction {preds[worst]:.6g}); "
            f"twice that fits at rtol {_round_up(needed):.2g}: declare that (e.g. attention_oracle(..., "
            f"rtol=), Oracle.from_callable(..., rtol=)) to learn it at that tolerance"
        )
    return ratio, worst_case


def precision_or_mismatch(
    head: DecodedHead, mismatch: ModelClassMismatch, *, seed: int, lengths: Sequence[int]
) -> None:
    """Raise :class:`PrecisionExhausted` (from ``mismatch``) where a float verification's
    refutation is explained by the answers' rounding; return otherwise (the caller
    re-raises the mismatch: exact and certified results, and gaps past the bound).

    Explained: the gap ``|answer - prediction|`` at the refuting sequence is within the
    first-order worst case of the prediction error there (:func:`prediction_bounds`) plus
    the rule's allowance for rounding on the bias, so a head of the class whose answers
    are this coarse could give it. The error then names the rtol
    :func:`require_prediction_bound` names (or, where its 2 sigma fit on its sequences,
    the rtol at which twice this gap fits).
    """
    arith, design, answers, params = head
    X = None if mismatch.query is None else np.asarray(mismatch.query, dtype=np.float64)
    if arith.name != "float" or X is None or X.ndim != 2 or X.shape[1] != design.d:
        return
    try:
        observed, expected = float(mismatch.observed), float(mismatch.expected)
    except (TypeError, ValueError):
        return
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    worst = float(prediction_bounds(unit, design, answers, params, [X])[0, 0])
    beta = float(params["beta"]) if design.affine else 0.0
    gap = abs(observed - expected)
    if not gap <= worst + bias_allowance(arith, beta):
        return
    cause = (
        f"the verification refuted the decoded head on a fresh sequence of length "
        f"{X.shape[0]} by {gap:.3g}, within the first-order worst case {worst:.3g} of its "
        f"prediction error under the answers' rounding: a precision limit, not evidence "
        f"against the model class"
    )
    try:
        require_prediction_bound(head, seed=seed, lengths=lengths)
    except PrecisionExhausted as exc:
        rest = str(exc).removeprefix("learn_single_head: ")
        raise PrecisionExhausted(f"learn_single_head: {cause}; {rest}") from mismatch
    size = max(abs(observed - beta), 1e-300)
    raise PrecisionExhausted(
        f"learn_single_head: {cause}; twice that gap fits at rtol "
        f"{_round_up(2 * gap / size):.2g}: declare that (e.g. attention_oracle(..., rtol=), "
        f"Oracle.from_callable(..., rtol=)) to learn it at that tolerance"
    ) from mismatch


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits (so the rtol named is never below it).

    >>> _round_up(0.0001712), _round_up(0.0017)
    (0.00018, 0.0017)
    """
    if not (x > 0 and np.isfinite(x)):
        return x
    scale = 10.0 ** (np.floor(np.log10(x)) - 1)
    return float(np.round(np.ceil(x / scale * (1 - 1e-12)) * scale, 15))

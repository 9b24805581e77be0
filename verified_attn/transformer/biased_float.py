"""Learn a one-layer Transformer whose FFN has biases from a float oracle.

>>> import verified_attn as va
>>> from verified_attn.models import OneLayerTransformer
>>> T = OneLayerTransformer([[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1],
...                         a=[1, -2], b=3)
>>> rec = learn_biased_transformer_float(va.Oracle(T, "float"))
>>> rec.exact, rec.verified, rec.attention_queries          # d^2 + d + 1 = 7
(False, True, 7)
>>> bool(abs(rec.W - np.array([[1, -1], [0, 2]])).max() < 1e-9)
True
>>> rec.certificate()
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: a float biased Transformer result carries no certificate: ...

The method is that of :mod:`verified_attn.transformer.biased_learner` (g first, then W
from d^2 two-token queries ``[b_j + t u_k; b_j]`` inside one open cell of g), with three
float-specific steps:

1. *The cell, with a margin.* Of 256 seeded dyadic points y with a nonzero learned
   gradient, the one farthest from every learned hyperplane is taken; with that distance
   r, the probe scale t is the largest power of two (at most 1/4) with
   ``t (1 + sqrt 2) <= r / 2``, so every base token ``b_j = y + t e_j`` and probe
   ``b_j + t u_k`` (``|u_k| <= sqrt 2``) stays at least r / 2 from every learned
   hyperplane. ``r / 2`` must exceed :data:`MARGIN` ``(1 + |y|)``: far above float
   rounding and the float FFN learner's tolerance (1e-8) on hyperplanes, so a rounding
   error cannot move a query across a kink; a thinner cell is refused
   (:class:`~verified_attn.errors.PrecisionExhausted`).
2. *The cell's affine map, measured.* ``g(y)`` and ``g(b_j)`` (d + 1 length-1 queries,
   phase ``attention-cell``) give the numerator and denominator of
   ``alpha_1 = (T - g(b_j)) / (g(b_j + t u_k) - g(b_j))`` directly from the box
   (``g(b_j + t u_k) - g(b_j) = sum_i u_ki (g(b_i) - g(y))`` on the cell), so W's error
   is first order in the box's own rounding, not in the learned FFN's. The measured
   gradient must agree with the learned network's on the cell to :data:`CELL_RTOL`;
   else (a hyperplane the float FFN learner missed, or a box outside the class) the FFN
   is learned again on new lines, up to :data:`FFN_ATTEMPTS` FFNs in all, then
   :class:`~verified_attn.errors.ModelClassMismatch`.
3. *An error estimate.* Each answer is taken to carry ``BIAS_ULPS`` units of the box's
   unit roundoff of the largest value involved; pushed through alpha, the logit and
   ``W = U^{-1} M B^{-1}`` (rows of U the u_k) to first order (elementwise absolute
   values), the estimate relative to ``max(1, max |W|)`` must be at most the box's
   ``parameter_rtol``, else :class:`~verified_attn.errors.PrecisionExhausted`. The
   estimate is in ``notes``.

The count is ``d^2 + d + 1`` attention queries plus the float FFN learner's (plus d + 1
and an FFN per refuted FFN), against ``d^2 + (m' + 1)(d + 1)`` parameters; the learned
Transformer is verified on fresh sequences of every length with the float rule of
:mod:`verified_attn.verification`, its answers compared whole (beta = 0 in the rule, as
the float FFN learner does: the canonical constant is itself learned, to about 1e-12,
not read off one answer, so the rule's bias allowance would not cover its error). The
``transformer-biased`` certificate kind stores and re-checks exact rationals only (its
FFN part is an exact ``relu-ffn-biased`` certificate), so a float result carries no
certificate and ``certificate()`` says so.
"""

from __future__ import annotations

import math
from typing import Any, Unpack

import numpy as np

from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.learner_options import CheckOptions, learner_options
from verified_attn.models import OneLayerTransformer
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import TransformerRecovery
from verified_attn.transformer.relu_biased import FLOAT_TOL, BiasedReluNetwork
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
from verified_attn.validation import check_oracle
from verified_attn.verification import BIAS_ULPS, verify_if_asked

__all__ = ["CELL_RTOL", "FFN_ATTEMPTS", "MARGIN", "RESOLUTION", "learn_biased_transformer_float"]

#: Least distance (relative to 1 + |y|) every design point keeps from every learned hyperplane.
MARGIN = 1e-6
#: Relative agreement asked of the measured and the learned gradient on the design's cell.
CELL_RTOL = 1e-6
#: FFNs learned (on new lines) when the design's cell refutes the one before.
FFN_ATTEMPTS = 2
#: Largest probe scale t (as in the exact design).
MAX_SCALE = 0.25
#: The float FFN learner decides equal pieces to FLOAT_TOL relative: a box must round
#: at least this many times finer (float64 boxes do; float32 ones, at 2^-24, do not).
RESOLUTION = 2.0**10


class _CellMismatch(ModelClassMismatch):
    """The box disagrees with the learned g on the design's cell (a retry may help)."""


def _cell_map(net: BiasedReluNetwork, y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(G, beta, distance of y to the nearest learned hyperplane) on y's cell (float)."""
    G = np.array(net.linear, dtype=np.float64)
    beta = float(net.constant)
    dist = math.inf
    for (n, c), gamma in net.neurons:
        nv = np.array(n, dtype=np.float64)
        z = float(nv @ y) + float(c)
        dist = min(dist, abs(z) / float(np.linalg.norm(nv)))
        if z > 0:
            G = G + float(gamma) * nv
            beta += float(gamma) * float(c)
    return G, beta, dist


def _design(net: BiasedReluNetwork, d: int, seed: int) -> dict[str, Any]:
    """y, t, the base tokens and directions of the float design (see the module doc)."""
    rng = np.random.default_rng(seed + 15485863)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(256):
        y = rng.integers(-64, 65, d) / 16.0  # dyadic: exact float64 queries
        G, _, dist = _cell_map(net, y)
        if np.abs(G).max() > 1e-12 * max(1.0, float(np.abs(G).max())) and (
            best is None or dist > best[0]
        ):
            best = (dist, y, G)
    if best is None:
        raise NotIdentifiable(
            "g has no sampled cell with a nonzero gradient (g is constant): no answer depends "
            "on the attention weights, so W is not identifiable"
        )
    dist, y, G = best
    margin = MARGIN * (1.0 + float(np.abs(y).max()))
    if dist / 2 <= margin:
        raise PrecisionExhausted(
            f"the widest sampled cell of g is {dist:.3g} across at y = {y.tolist()}: the "
            f"design's margin {dist / 2:.3g} is not above {margin:.3g} (MARGIN x (1 + |y|)), "
            "so float rounding could carry a query across a kink"
        )
    t = 2.0 ** math.floor(math.log2(min(MAX_SCALE, dist / (2 * (1 + math.sqrt(2))))))
    p = int(np.argmax(np.abs(G)))
    U = np.eye(d)
    for k in range(d):  # G^T u_k >= |G_p| / 4 in size, as in the exact design
        if k != p and 4 * abs(G[k]) < abs(G[p]):
            U[k, p] = 1.0
    base = y[None, :] + t * np.eye(d)  # row j: b_j
    return {"y": y, "t": t, "U": U, "base": base, "G": G, "margin": dist / 2}


def _attention(oracle: Oracle, net: BiasedReluNetwork, seed: int) -> tuple[np.ndarray, float]:
    """W from the cell's d + 1 and the d^2 two-token answers; its relative error estimate."""
    arith = oracle.arithmetic
    d = oracle.d
    des = _design(net, d, seed)
    y, t, U, base = des["y"], des["t"], des["U"], des["base"]
    with oracle.phase("attention-cell"):
        cell = np.array(oracle.query_many([y[None, :]] + [b[None, :] for b in base]), float)
    g_y, g_b = cell[0], cell[1:]
    G_meas = (g_b - g_y) / t
    scale = max(float(np.abs(des["G"]).max()), 1e-300)
    if float(np.abs(G_meas - des["G"]).max()) > CELL_RTOL * scale + _rounding(arith, cell) / t:
        raise _CellMismatch(
            f"the box disagrees with the learned g on the design's cell: the gradient "
            f"measured on the cell of {y.tolist()} is {G_meas.tolist()}, the learned FFN's "
            f"{des['G'].tolist()}: the box is not a one-layer Transformer with a biased ReLU "
            "FFN, or the float FFN learner missed a hyperplane near this cell (its length-1 "
            "verification did not see it); try another seed, or learn in exact or certified "
            "arithmetic",
            query=y[None, :],
            observed=G_meas,
            expected=des["G"],
        )
    queries = [np.stack([base[j] + t * U[k], base[j]]) for k in range(d) for j in range(d)]
    with oracle.phase("attention-direct"):
        Y = np.array(oracle.query_many(queries), dtype=np.float64).reshape(d, d)
    D = U @ (g_b - g_y)  # D_k = t G^T u_k, measured
    alpha = (Y - g_b[None, :]) / D[:, None]
    bad = np.argwhere(~((alpha > 0) & (alpha < 1)))
    if len(bad):
        k, j = (int(i) for i in bad[0])
        raise ModelClassMismatch(
            f"not a one-layer Transformer with this g: the query {queries[k * d + j].tolist()} "
            f"gives alpha_1 = {alpha[k, j]}, outside (0, 1)",
            query=queries[k * d + j],
            observed=float(Y[k, j]),
        )
    M = np.log(alpha / (1 - alpha)) / t
    Ui, Bi = np.linalg.inv(U), np.linalg.inv(base.T)  # U: rows u_k; B: columns b_j
    W = Ui @ M @ Bi
    # First order: |dY| = |dg| = delta; alpha moves by delta (1 + 2 alpha) / |D|.
    delta = _rounding(arith, np.concatenate([Y.ravel(), cell]))
    d_alpha = delta * (1 + 2 * alpha) / np.abs(D)[:, None]
    d_M = d_alpha / (alpha * (1 - alpha)) / t
    err = np.abs(Ui) @ d_M @ np.abs(Bi)
    return W, float(err.max()) / max(1.0, float(np.abs(W).max()))


def _learn_ffn(oracle: Oracle, verify: int, seed: int) -> Any:
    """The float FFN stage on length-1 queries (a smooth box is refused by the line
    search: :class:`ModelClassMismatch`, "not piecewise linear")."""
    return learn_biased_relu_ffn(oracle, verify=verify, seed=seed, lengths=(1,))


def _stages(oracle: Oracle, verify: int, seed: int) -> tuple[list[Any], np.ndarray, float, list]:
    """The FFN, then W in a cell; an FFN the cell refutes (a hyperplane it missed) is
    learned again on new lines, up to :data:`FFN_ATTEMPTS` times, every query counted."""
    ffns: list[Any] = []
    reasons: list[str] = []
    last: _CellMismatch | None = None
    for attempt in range(FFN_ATTEMPTS):
        ffns.append(_learn_ffn(oracle, verify, seed + 7919 * attempt))
        try:
            with oracle.arithmetic.context():
                W, estimate = _attention(oracle, ffns[-1].network, seed)
        except _CellMismatch as exc:
            reasons.append(str(exc))
            last = exc
            continue
        return ffns, W, estimate, reasons
    raise ModelClassMismatch(
        f"{FFN_ATTEMPTS} learned FFNs were each refuted on the design's cell: "
        + "; ".join(reasons),
        query=None if last is None else last.query,
        observed=None if last is None else last.observed,
        expected=None if last is None else last.expected,
    )


def _rounding(arith: Any, values: np.ndarray) -> float:
    """BIAS_ULPS units of the box's unit roundoff of the largest answer."""
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    return BIAS_ULPS * 2 * unit * max(1.0, float(np.abs(values).max()))


def _no_certificate() -> dict[str, Any]:
    raise CertificateError(
        "a float biased Transformer result carries no certificate: the transformer-biased "
        "certificate kind stores and re-checks exact rationals only (its FFN part is an exact "
        "relu-ffn-biased certificate); learn in 'exact' or 'certified' arithmetic for one"
    )


def learn_biased_transformer_float(
    oracle: Oracle,
    **options: Unpack[CheckOptions],
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N) + a) + b`` from a float box.

    Phases ``ffn``, ``ffn-verify`` (the float FFN learner on length-1 queries),
    ``attention-cell`` (d + 1), ``attention-direct`` (d^2), ``verify``. Parameters are
    float64 arrays ``W``, ``A``, ``w_o``, ``a`` and the float ``b`` of the canonical FFN;
    ``bound`` is d^2 + d + 1 plus the FFN's derived count (per FFN learned: d + 1 and
    the FFN's count more for each FFN the design's cell refuted).

    Raises :class:`NotIdentifiable` if g is constant, :class:`PrecisionExhausted` if the
    box rounds coarser than the float FFN learner resolves (unit roundoff above
    ``FLOAT_TOL / RESOLUTION``, e.g. float32), no cell is wide enough or W's error
    estimate exceeds the box's ``parameter_rtol``,
    :class:`ModelClassMismatch` if the oracle is no such Transformer (the FFN stage, the
    cell's measured gradient, alpha_1 outside (0, 1) or the fresh sequences refute it).
    """
    check_oracle(oracle)
    verify, seed, lengths, _, progress = learner_options(
        "learn_biased_transformer_float", options, CheckOptions
    )
    arith = oracle.arithmetic
    if arith.name != "float":
        raise InvalidArgument(
            "learn_biased_transformer_float needs a float oracle; for exact or certified ones "
            "use learn_biased_transformer (va.learn_transformer picks it)"
        )
    d = oracle.d
    prtol = float(getattr(arith, "parameter_rtol", None) or arith.rtol or 0.0)
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    if unit * RESOLUTION > FLOAT_TOL:
        raise PrecisionExhausted(
            f"the float biased FFN learner decides equal pieces to {FLOAT_TOL:g} relative; "
            f"a box with unit roundoff {unit:.3g} (float32: 2^-24) cannot resolve that "
            f"(it needs at most {FLOAT_TOL / RESOLUTION:.3g}): run the module in float64"
        )
    with reporting(oracle, progress, "learn_biased_transformer"), oracle.run() as run:
        ffns, W, estimate, reasons = _stages(oracle, verify, seed)
        ffn = ffns[-1]
        net: BiasedReluNetwork = ffn.network
        if not estimate <= prtol:
            raise PrecisionExhausted(
                f"W's first-order error estimate {estimate:.3g} (relative to max(1, max |W|)) "
                f"exceeds the box's parameter_rtol {prtol:g}: the two-token answers are too "
                "close to the cell's values (a thin cell or a saturated softmax)"
            )
        g = net.model()
        model = OneLayerTransformer(W, np.eye(d), g.A, g.w_o, a=g.a, b=g.b)
        checked = verify_if_asked(
            oracle, model, count=verify, seed=seed, lengths=lengths, what="the learned Transformer"
        )
    attention = d * d + (d + 1) * len(ffns)
    params = dict(ffn.parameters)
    params["W"] = W
    return TransformerRecovery.from_run(
        run.counts,
        theorem="transformer/biased-direct",
        parameters=params,
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=False,
        bound=attention + sum(f.bound for f in ffns),
        parameter_count=d * d + net.parameter_count,
        seed=seed,
        verification=checked,
        assumptions=list(ffn.assumptions),
        notes=[
            *ffn.notes,
            *(
                f"FFN {i + 1} refuted on the design's cell, learned again: {r}"
                for i, r in enumerate(reasons)
            ),
            f"W's first-order error estimate {estimate:.3g} <= {prtol:g}",
        ],
        certificate_data=_no_certificate,
        method="biased-direct",
        attention_queries=sum(
            run.counts.by_phase.get(p, 0) for p in ("attention-cell", "attention-direct")
        ),
        ffn_queries=sum(f.queries for f in ffns),
        attention_bound=attention,
        network=net,
    )

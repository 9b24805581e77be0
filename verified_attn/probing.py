"""Probe measurements shared by every learner: logits, saturation, rescaling, rational
reconstruction, and verification of a recovered head on fresh queries.

>>> from verified_attn.probing import verification_queries
>>> [X.shape for X in verification_queries(3, 4, seed=0)]
[(1, 3), (2, 3), (3, 3), (4, 3)]

A two-token probe [b + t u; b] measures t u^T (W b + c) through a logit; these helpers turn
answers into such measurements in any arithmetic and back into a verified model. They know
nothing of a particular theorem's design (that is each room's own ``learner.py``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import (
    Arithmetic,
    _OutsideUnitInterval,
    arb_bounds,
    fraction_from_arb,
    reconstruct_rational,
)
from verified_attn.errors import (
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import SingleHeadAttention, attention_output
from verified_attn.oracle import Oracle

RESCALE_FACTOR = Fraction(1, 16)
MAX_RESCALES = 12  # t down to 16^-12 = 2^-48: beyond that the probe is lost in rounding
FLOAT_SATURATION = 1e-6  # min(y, 1 - y) below this: logit too ill-conditioned in float64
BIAS_ULPS = 1024  # rounding allowed on the bias part of a float answer, in ulps of |beta|


def measured_array(arith: Arithmetic, values: Any) -> np.ndarray:
    if arith.name == "float":
        return np.asarray(values, dtype=np.float64)
    arr = np.empty(np.shape(values), dtype=object)
    flat = list(np.asarray(values, dtype=object).ravel())
    for i, x in enumerate(flat):
        arr.flat[i] = x
    return arr


def logits(arith: Arithmetic, y: np.ndarray) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Elementwise logit; also the indices where it failed (outside (0,1) or undecided)."""
    if arith.name == "float":
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.log(y) - np.log1p(-y)
        bad = ~((y > 0) & (y < 1))
        return out, [tuple(ix) for ix in np.argwhere(bad)]
    out = np.empty(y.shape, dtype=object)
    bad = []
    for ix in np.ndindex(y.shape):
        try:
            out[ix] = arith.logit(y[ix])
        except _OutsideUnitInterval:
            bad.append(ix)
            out[ix] = None
    return out, bad


def raise_bad_probe(arith: Arithmetic, y: Any, query: Any, answer: Any) -> None:
    if arith.name == "certified" and not ((y <= 0) or (y >= 1)):
        raise PrecisionExhausted(
            f"at {arith.precision} bits the probe ratio {y} cannot be shown to lie in (0, 1); "
            "raise the oracle's precision"
        )
    raise ModelClassMismatch(
        f"not a single attention head: on the query {np.asarray(query).tolist()} the answer "
        f"{answer} gives alpha_1 = {y}, which a softmax weight strictly between 0 and 1 "
        "cannot be",
        query=query,
        observed=answer,
        expected="alpha_1 in (0, 1)",
    )


def require_nonzero_v(arith: Arithmetic, v: np.ndarray) -> None:
    signs = [arith.sign(x) for x in v]
    if all(s == 0 for s in signs):
        raise NotIdentifiable(
            "v = 0: every answer f(X) is then 0 (or beta) whatever W is, so W is not "
            "identifiable from any queries"
        )
    if all(s in (0, None) for s in signs):
        raise PrecisionExhausted(
            "every coordinate of v is indistinguishable from 0 at this precision; "
            "W cannot be probed until one is certified nonzero"
        )


def saturated(
    arith: Arithmetic, Y: np.ndarray, scales: np.ndarray | None = None
) -> list[tuple[int, ...]]:
    """Probes to re-ask at a smaller scale; ``scales`` holds each probe's t (certified)."""
    if arith.name == "float":
        y = np.asarray(Y, dtype=np.float64)
        sat = np.minimum(y, 1 - y) < FLOAT_SATURATION
        # Far outside (0, 1) is not saturation but a wrong model class: leave it to decode.
        sat &= (y > -0.5) & (y < 1.5)
        return [tuple(ix) for ix in np.argwhere(sat)]
    assert arith.precision is not None
    out = []
    for ix in np.ndindex(Y.shape):
        y = Y[ix]
        if (y > 0) and (y < 1):
            # Decided, but near 0 or 1 the logit magnifies the ball's radius by about
            # 1 / (y (1 - y)). Re-ask if the decoded entry logit / t would then be too wide
            # to reconstruct at the default denominator bound 2^(precision / 4) (seen at
            # 64 bits with W ~ 50), and shrinking the score can help (y near 0 or 1).
            mid = fraction_from_arb(y.mid())
            if min(mid, 1 - mid) < Fraction(1, 16):
                t = Fraction(1) if scales is None else scales[ix]
                rad = fraction_from_arb((y / (1 - y)).log().rad()) / t
                if rad * 2 ** (arith.precision // 2 + 2) > 1:
                    out.append(ix)
        elif not ((y <= 0) or (y >= 1)):
            out.append(ix)  # undecided: the ball straddles 0 or 1
    return out


def finalize(
    arith: Arithmetic, params: dict[str, Any], denominator_bound: int | None
) -> tuple[bool, dict[str, Any] | None, dict[str, Any]]:
    """(exact?, enclosures, params): certified balls reconstructed to rationals if unique."""
    if arith.name == "exact":
        for name, val in params.items():
            for x in flat(val):
                if not sympy.sympify(x).is_Rational:
                    # A single head with rational parameters has rational logits.
                    raise ModelClassMismatch(
                        f"not a single attention head with rational parameters: the decoded "
                        f"{name} has the entry {x}, which is not rational",
                        observed=x,
                        expected="a rational number",
                    )
        return True, None, params
    if arith.name == "float":
        return False, None, params
    assert arith.precision is not None
    D = denominator_bound if denominator_bound is not None else 2 ** (arith.precision // 4)
    out: dict[str, Any] = {}
    exact = True
    for name, val in params.items():
        arr = np.asarray(val, dtype=object)
        rec = np.empty(arr.shape, dtype=object)
        for ix in np.ndindex(arr.shape):
            lo, hi = arb_bounds(arr[ix])
            q = reconstruct_rational(lo, hi, D)
            if q is None:
                exact = False
                break
            rec[ix] = sympy.Rational(q.numerator, q.denominator)
        if not exact:
            break
        out[name] = rec
    return exact, params, (out if exact else params)


def flat(val: Any) -> list[Any]:
    return list(np.asarray(val, dtype=object).ravel())


def candidate_model(
    params: dict[str, Any], exact: bool, affine: bool
) -> SingleHeadAttention | None:
    """The recovered model as a rational SingleHeadAttention (None for ball parameters)."""
    if not exact and not all(isinstance(x, float | np.floating) for x in flat(params["v"])):
        return None
    kwargs = {}
    if affine:
        kwargs = {"c": flat(params["c"]), "beta": scalar(params["beta"])}
    W = np.asarray(params["W"], dtype=object if exact else np.float64)
    return SingleHeadAttention(W, flat(params["v"]), **kwargs)


def scalar(x: Any) -> Any:
    return np.asarray(x, dtype=object).item() if isinstance(x, np.ndarray) else x


def public_params(
    params: dict[str, Any], exact: bool, arith: Arithmetic, affine: bool
) -> dict[str, Any]:
    """Exact: SymPy matrices (v, c as d x 1 columns); balls and floats: numpy arrays."""
    out: dict[str, Any] = {}
    for name, val in params.items():
        if exact:
            if name == "beta":
                out[name] = sympy.sympify(scalar(val))
            else:
                arr = np.asarray(val, dtype=object)
                out[name] = sympy.Matrix(arr.tolist() if arr.ndim == 2 else [[x] for x in arr])
        elif arith.name == "float":
            out[name] = float(val) if name == "beta" else np.asarray(val, dtype=np.float64)
        else:
            out[name] = scalar(val) if name == "beta" else np.asarray(val, dtype=object)
    return out


def verification_queries(d: int, count: int, seed: int) -> list[np.ndarray]:
    """Fresh random queries of lengths 1..4 with entries in {+-1/2, +-1}.

    The first entry of the last token is +-1/2, so none equals a learning query (whose
    last token is 0 or some e_j).
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = 1 + i % 4
        X = rng.choice(np.array([-1.0, -0.5, 0.5, 1.0]), size=(n, d))
        X[-1, 0] = rng.choice(np.array([-0.5, 0.5]))
        out.append(X)
    return out


def verify_on_fresh_queries(
    oracle: Oracle,
    arith: Arithmetic,
    candidate: SingleHeadAttention | None,
    params: dict[str, Any],
    exact: bool,
    count: int,
    seed: int,
) -> tuple[list[tuple[np.ndarray, Any]], float | None]:
    queries = verification_queries(oracle.d, count, seed)
    answers = oracle.query_many(queries)
    log = list(zip(queries, answers, strict=True))
    worst = 0.0
    for X, observed in log:
        expected = predict(arith, candidate, params, X)
        ok, gap = answers_agree(arith, params, X, observed, expected)
        if not ok:
            raise ModelClassMismatch(
                f"the oracle is not the recovered single head: on the fresh query "
                f"{X.tolist()} it answered {observed}, the recovered model gives {expected}",
                query=X,
                observed=observed,
                expected=expected,
            )
        worst = max(worst, gap)
    return log, (worst if arith.name == "float" else None)


def answers_agree(
    arith: Arithmetic, params: dict[str, Any], X: Any, observed: Any, expected: Any
) -> tuple[bool, float]:
    """Whether an answer agrees with the recovered model's prediction, and the relative gap.

    Exact: ==; certified: the balls overlap; float: relative to :func:`answer_scale`. The
    learner's verification and the certificate checker both decide with this one function.
    """
    scale = answer_scale(arith, params, X)
    a, b = observed, expected
    if arith.name == "float" and "beta" in params:
        # The output bias is common to both sides; comparing with it removed keeps a large
        # beta from swallowing the head's part of the answer in the relative test.
        # (Float mode only: subtracting a float from a SymPy number would make it a Float.)
        bias = float(params["beta"])
        a, b = observed - bias, expected - bias
    ok = arith.agree(a, b, scale=scale)
    gap = abs(a - b) / max(scale, abs(a), 1e-300) if arith.name == "float" else 0.0
    return ok, gap


def predict(
    arith: Arithmetic, candidate: SingleHeadAttention | None, params: dict[str, Any], X: Any
) -> Any:
    if candidate is not None:
        if arith.name == "float":
            return float(candidate.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
        from verified_attn.models import as_rational_sequence

        return candidate._evaluate_rational(as_rational_sequence(X, candidate.d), arith)
    # Certified balls that did not reconstruct: evaluate the definition in ball arithmetic.

    rows = [[flint.arb(float(x)) for x in row] for row in np.asarray(X, dtype=np.float64)]
    W = np.asarray(params["W"], dtype=object).tolist()
    v = flat(params["v"])
    c = flat(params["c"]) if "c" in params else None
    beta = scalar(params["beta"]) if "beta" in params else flint.arb(0)
    return attention_output(rows, W, v, c, beta, exp=lambda s: s.exp())


def answer_scale(arith: Arithmetic, params: dict[str, Any], X: Any) -> float:
    """The float comparison scale: a bound on |f(X) - beta| plus room for beta's rounding.

    ``sum |v_i| max |x|`` bounds the head's part of the answer. The bias enters only
    through the rounding it causes (a few ulps of |beta| in a float64 answer): including
    |beta| itself, as an earlier version did, let a two-head oracle with beta = 1e7 pass
    verification at rtol 1e-6.
    """
    if arith.name != "float":
        return 1.0
    v = np.asarray(params["v"], dtype=np.float64)
    beta = abs(float(params.get("beta", 0.0)))
    rtol = getattr(arith, "rtol", 1e-6)
    head = float(np.abs(v).sum() * np.abs(np.asarray(X, dtype=np.float64)).max())
    return head + beta * BIAS_ULPS * np.finfo(np.float64).eps / rtol


def apply_exact(arith: Arithmetic, matrix: flint.fmpq_mat, M: np.ndarray) -> np.ndarray:
    if arith.name == "float":
        return arith.apply(matrix, M)
    if arith.name == "certified":
        out = arith.apply(matrix, flint.arb_mat(M.tolist()))
        return np.array(
            [[out[i, j] for j in range(out.ncols())] for i in range(out.nrows())], dtype=object
        )
    out = arith.apply(matrix, sympy.Matrix(M.tolist()))
    return np.array(out.tolist(), dtype=object)

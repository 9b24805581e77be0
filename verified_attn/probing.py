"""Probe measurements shared by every learner: logits, saturation, rescaling, rational
reconstruction, and the learned head as a model.

>>> import numpy as np
>>> from verified_attn.arithmetic import get_arithmetic
>>> from verified_attn.probing import logits
>>> L, bad = logits(get_arithmetic("float"), np.array([0.5, 1.5]))
>>> [tuple(int(i) for i in ix) for ix in bad]      # 1.5 is outside (0, 1)
[(1,)]

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
    OutsideUnitInterval,
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
        return out, [tuple(int(i) for i in ix) for ix in np.argwhere(bad)]
    out = np.empty(y.shape, dtype=object)
    bad = []
    for ix in np.ndindex(y.shape):
        try:
            out[ix] = arith.logit(y[ix])
        except OutsideUnitInterval:
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
        return [tuple(int(i) for i in ix) for ix in np.argwhere(sat)]
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


def ball_predictor(params: dict[str, Any]) -> Any:
    """Predictions of a head whose parameters are certified balls, in ball arithmetic."""

    def predict(X: Any) -> Any:
        rows = [[flint.arb(float(x)) for x in row] for row in np.asarray(X, dtype=np.float64)]
        W = np.asarray(params["W"], dtype=object).tolist()
        v = flat(params["v"])
        c = flat(params["c"]) if "c" in params else None
        beta = scalar(params["beta"]) if "beta" in params else flint.arb(0)
        return attention_output(rows, W, v, c, beta, exp=lambda s: s.exp())

    return predict


def verify_reconstruction(
    oracle: Oracle,
    params: dict[str, Any],
    balls: dict[str, Any] | None,
    exact: bool,
    affine: bool,
    *,
    count: int,
    seed: int,
    lengths: Any,
    what: str = "the recovered single head",
) -> tuple[Any, bool, dict[str, Any], str | None]:
    """Verify a single-head result; a refuted rational reconstruction falls back to balls.

    Returns ``(verification or None, exact, params, note)``. In certified mode an exact
    (reconstructed) candidate is checked at
    :data:`verified_attn.verification.HIGH_PRECISION_FACTOR` times the
    learning precision where the oracle allows it: a truth within 2^-(k p) of the candidate
    is the only thing that can still slip through. If the candidate is refuted there, the
    result is the certified balls (``exact=False``), checked against the same answers (no
    further queries); ``note`` says so. If those disagree too, the oracle is not a single head and
    :class:`~verified_attn.errors.ModelClassMismatch` propagates.
    """
    from verified_attn import verification
    from verified_attn.verification import ask_fresh, check_record, verify_model

    if not count:
        return None, exact, params, None
    arith = oracle.arithmetic
    bias = params.get("beta", 0.0) if arith.name == "float" else 0.0
    if arith.name == "certified" and exact and balls is not None:
        assert arith.precision is not None
        high = arith.precision * verification.HIGH_PRECISION_FACTOR
        record = ask_fresh(oracle, count=count, seed=seed, lengths=lengths, precision=high)
        try:
            return (
                check_record(record, candidate_model(params, True, affine), what=what),
                True,
                params,
                None,
            )
        except ModelClassMismatch as exc:
            length = np.shape(exc.query)[0] if exc.query is not None else "?"
            note = (
                "the rationals reconstructed from the balls were refuted on a fresh sequence "
                f"of length {length} asked at {record.precision or arith.precision} bits; "
                "the result is the certified balls, not exact"
            )
        # The same answers (balls that contain the truth) checked against the balls.
        return check_record(record, ball_predictor(balls), what=what), False, balls, note
    candidate = candidate_model(params, exact, affine)
    model = candidate if candidate is not None else ball_predictor(params)
    checked = verify_model(
        oracle, model, count=count, seed=seed, lengths=lengths, bias=bias, what=what
    )
    return checked, exact, params, None


def reconstruction_assumptions(
    arith: Arithmetic, exact: bool, denominator_bound: int | None
) -> list[str]:
    """What an exact answer reconstructed from certified balls rests on (else nothing)."""
    if arith.name != "certified" or not exact:
        return []
    assert arith.precision is not None
    D = denominator_bound if denominator_bound is not None else 2 ** (arith.precision // 4)
    return [
        f"every parameter entry is a rational with denominator <= {D} (the denominator "
        f"bound): each ball at {arith.precision} bits holds exactly one such rational, which "
        "is returned; without this assumption the result is the balls (rec.enclosures)"
    ]


def learned_single_head(params: dict[str, Any], exact: bool, affine: bool) -> Any:
    """The learned head as a SingleHeadAttention: exact if exact, float midpoints else."""
    from verified_attn.recovery import as_float

    p = params if exact else {k: as_float(v) for k, v in params.items()}
    kwargs = {"c": p["c"], "beta": p["beta"]} if affine else {}
    return SingleHeadAttention(p["W"], p["v"], **kwargs)


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

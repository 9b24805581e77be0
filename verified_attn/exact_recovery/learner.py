"""Theorem 4.1: learn a single attention head from exactly d^2 + d queries.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [0, 5])     # note v_1 = 0
>>> rec = va.learn_single_head(va.Oracle(model, arithmetic="exact"))
>>> rec.W == model.W and rec.v == model.v
True
>>> rec.queries, rec.bound
(6, 6)

The algorithm (THEORY §3): length-1 queries [e_i] give v; then, for a rational invertible
design U = [u_1..u_d] with u_k^T v != 0, the length-2 query [e_j + t u_k; e_j] has
``alpha_1 = sigmoid(t u_k^T W e_j)`` and ``f = v_j + alpha_1 t u_k^T v``, so
``u_k^T W e_j = logit((f - v_j) / (t u_k^T v)) / t``. Stacking gives ``U^T W = M``.

Every query is an exact dyadic rational (exactly representable in float64), and U^{-1} is
computed exactly; the answers are the only inexact numbers, so the same code runs in exact,
certified and float arithmetic. The affine model adds the query [0] (beta) and d queries
[t u_k; 0] (c): d^2 + 2d + 1 in all.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
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
    to_fraction,
)
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
    QueryBudgetExceeded,
)
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle
from verified_attn.recovery import Recovery

__all__ = ["SingleHeadDesign", "decode_single_head", "learn_single_head", "query_bound"]

THEOREM = "thm-4.1"
_RESCALE_FACTOR = Fraction(1, 16)
_MAX_RESCALES = 12  # t down to 16^-12 = 2^-48: beyond that the probe is lost in rounding
_FLOAT_SATURATION = 1e-6  # min(y, 1 - y) below this: logit too ill-conditioned in float64
_BIAS_ULPS = 1024  # rounding allowed on the bias part of a float answer, in ulps of |beta|


def query_bound(d: int, *, affine: bool = False) -> int:
    """The exact learning-query count: d^2 + d, or d^2 + 2d + 1 for the affine model.

    >>> query_bound(5), query_bound(5, affine=True)
    (30, 36)
    """
    return d * d + (2 * d + 1 if affine else d)


@dataclass
class SingleHeadDesign:
    """The exact rational design: columns ``U[:, k] = u_k`` and probe scales.

    ``scales[k][j]`` is the t of the query [e_j + t u_k; e_j]; ``c_scales[k]`` that of
    [t u_k; 0] (affine only). All are exact rationals.
    """

    d: int
    affine: bool
    U: list[list[Fraction]]  # U[i][k]: row i, column k
    scales: list[list[Fraction]]
    c_scales: list[Fraction] | None = None

    @functools.cached_property
    def U_float(self) -> np.ndarray:
        """U in float64 (exact: the default design has entries 0 and 1)."""
        return np.array([[float(q) for q in row] for row in self.U], dtype=np.float64)

    @property
    def U_flint(self) -> flint.fmpq_mat:
        d = self.d
        return flint.fmpq_mat(
            d, d, [flint.fmpq(q.numerator, q.denominator) for row in self.U for q in row]
        )

    def column(self, k: int) -> list[Fraction]:
        return [self.U[i][k] for i in range(self.d)]

    def w_query(self, j: int, k: int) -> np.ndarray:
        """[e_j + t u_k; e_j] as an exact (dyadic) float array, or an object array."""
        return self._pair(k, self.scales[k][j], j)

    def w_queries(self, k: int) -> np.ndarray | list[np.ndarray]:
        """All d probes for design column k, j = 0..d-1 (one (d, 2, d) array if dyadic)."""
        if not self._dyadic(k):
            return [self.w_query(j, k) for j in range(self.d)]
        u = np.array([float(q) for q in self.column(k)])
        t = np.array([float(q) for q in self.scales[k]])
        eye = np.eye(self.d)
        return np.stack([t[:, None] * u[None, :] + eye, eye], axis=1)

    def c_query(self, k: int) -> np.ndarray:
        assert self.c_scales is not None
        return self._pair(k, self.c_scales[k], None)

    def _dyadic(self, k: int) -> bool:
        # Small-integer u_k and power-of-two scales: every probe entry is an exact float64,
        # so float arrays carry the exact rational queries (checked, not assumed).
        return all(q.denominator == 1 and -(2**20) < q < 2**20 for q in self.column(k)) and all(
            _is_power_of_two(t) for t in self.scales[k]
        )

    def _pair(self, k: int, t: Fraction, j: int | None) -> np.ndarray:
        top = [t * u for u in self.column(k)]
        bottom = [Fraction(0)] * self.d
        if j is not None:
            top[j] += 1
            bottom[j] = Fraction(1)
        return _exact_array([top, bottom])


def _is_power_of_two(t: Fraction) -> bool:
    n, m = t.numerator, t.denominator
    return n > 0 and (n & (n - 1)) == 0 and (m & (m - 1)) == 0 and n < 2**20 and m < 2**900


def _exact_array(rows: list[list[Fraction]]) -> np.ndarray:
    """A float64 array when every entry is exactly a float (dyadic), else Fractions."""
    flat = [q for row in rows for q in row]
    if all(Fraction(float(q)) == q for q in flat):
        return np.array([[float(q) for q in row] for row in rows], dtype=np.float64)
    return np.array(rows, dtype=object)


def _unit(d: int, i: int | None) -> np.ndarray:
    x = np.zeros((1, d))
    if i is not None:
        x[0, i] = 1.0
    return x


# ---------------------------------------------------------------------------------------
# Decoding: answers -> parameters. Pure; shared by the learner and certificate checks.
# ---------------------------------------------------------------------------------------


def _as_array(arith: Arithmetic, values: Any) -> np.ndarray:
    if arith.name == "float":
        return np.asarray(values, dtype=np.float64)
    arr = np.empty(np.shape(values), dtype=object)
    flat = list(np.asarray(values, dtype=object).ravel())
    for i, x in enumerate(flat):
        arr.flat[i] = x
    return arr


def _uv(arith: Arithmetic, design: SingleHeadDesign, v: np.ndarray) -> np.ndarray:
    """u_k^T v for every k, from the exact U and the measured v."""
    d = design.d
    if arith.name == "float":
        return design.U_float.T @ np.asarray(v, dtype=np.float64)
    out = np.empty(d, dtype=object)
    for k in range(d):
        col = design.column(k)
        acc: Any = arith.rational(Fraction(0))
        for i in range(d):
            if col[i]:
                acc = acc + arith.rational(col[i]) * v[i]
        out[k] = acc
    return out


def _logits(arith: Arithmetic, y: np.ndarray) -> tuple[np.ndarray, list[tuple[int, ...]]]:
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


def _probe_ratios(
    arith: Arithmetic,
    design: SingleHeadDesign,
    answers: dict[str, Any],
) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
    """v (and beta) from the length-1 answers, and y = alpha_1 for every length-2 probe.

    Returns ``(base, Y, Y0)`` with Y[k, j] for the W probes and Y0[k] for the c probes.
    """
    d = design.d
    beta = answers["beta"] if design.affine else arith.rational(Fraction(0))
    v = _as_array(arith, [answers["v"][i] - beta for i in range(d)])
    uv = _uv(arith, design, v)
    F = _as_array(arith, answers["W"])  # F[k][j]
    t = _as_array(arith, [[arith.rational(s) for s in row] for row in design.scales])
    Y = (F - v[None, :] - beta) / (t * uv[:, None])
    Y0 = None
    if design.affine:
        assert design.c_scales is not None
        t0 = _as_array(arith, [arith.rational(s) for s in design.c_scales])
        Y0 = (_as_array(arith, answers["c"]) - beta) / (t0 * uv)
    return {"v": v, "beta": beta, "uv": uv}, Y, Y0


def decode_single_head(
    arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> dict[str, Any]:
    """Parameters from the answers, in ``arith`` (call inside ``arith.context()``).

    Raises :class:`ModelClassMismatch` (with the probe) if a probe's ratio is not in (0, 1),
    and :class:`PrecisionExhausted` if certified arithmetic cannot decide that it is.
    """
    base, Y, Y0 = _probe_ratios(arith, design, answers)
    d = design.d
    L, bad = _logits(arith, Y)
    if bad:
        k, j = bad[0]
        _raise_bad_probe(arith, Y[k, j], design.w_query(j, k), answers["W"][k][j])
    for k, j in _irrational(arith, L):
        _raise_irrational_logit(L[k, j], design.w_query(j, k), answers["W"][k][j])
    t = _as_array(arith, [[arith.rational(s) for s in row] for row in design.scales])
    M = L / t  # M[k, j] = u_k^T (W e_j + c)
    params: dict[str, Any] = {"v": base["v"]}
    if design.affine:
        assert Y0 is not None and design.c_scales is not None
        L0, bad0 = _logits(arith, Y0)
        if bad0:
            (k,) = bad0[0]
            _raise_bad_probe(arith, Y0[k], design.c_query(k), answers["c"][k])
        for (k,) in _irrational(arith, L0):
            _raise_irrational_logit(L0[k], design.c_query(k), answers["c"][k])
        t0 = _as_array(arith, [arith.rational(s) for s in design.c_scales])
        m0 = L0 / t0
        M = M - m0[:, None]
        params["beta"] = base["beta"]
    inv_t = design.U_flint.transpose().inv()
    params["W"] = _apply(arith, inv_t, M)
    if design.affine:
        params["c"] = _apply(arith, inv_t, m0.reshape(d, 1))[:, 0]
    return params


def _apply(arith: Arithmetic, matrix: flint.fmpq_mat, M: np.ndarray) -> np.ndarray:
    if arith.name == "float":
        return arith.apply(matrix, M)
    if arith.name == "certified":
        out = arith.apply(matrix, flint.arb_mat(M.tolist()))
        return np.array(
            [[out[i, j] for j in range(out.ncols())] for i in range(out.nrows())], dtype=object
        )
    out = arith.apply(matrix, sympy.Matrix(M.tolist()))
    return np.array(out.tolist(), dtype=object)


def _irrational(arith: Arithmetic, L: np.ndarray) -> list[tuple[int, ...]]:
    """Exact mode: the probes whose logit is not rational (a head has rational scores)."""
    if arith.name != "exact":
        return []
    return [ix for ix in np.ndindex(L.shape) if not sympy.sympify(L[ix]).is_Rational]


def _raise_irrational_logit(logit: Any, query: Any, answer: Any) -> None:
    # Checked here, per probe, so that the error carries the query and its answer.
    raise ModelClassMismatch(
        f"not a single attention head with rational parameters: on the query "
        f"{np.asarray(query).tolist()} the answer {answer} gives the score difference "
        f"{logit}, which is not rational (a head with rational W, c has rational scores)",
        query=query,
        observed=answer,
        expected="an answer v_j + sigmoid(s) u_k^T v with s rational",
    )


def _raise_bad_probe(arith: Arithmetic, y: Any, query: Any, answer: Any) -> None:
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


# ---------------------------------------------------------------------------------------
# The design: choose U so that every u_k^T v is far from zero.
# ---------------------------------------------------------------------------------------


def _default_design(arith: Arithmetic, v: np.ndarray, d: int, affine: bool) -> SingleHeadDesign:
    """u_k = e_k where |v_k| >= |v_p| / 4, else e_k + e_p, with p = argmax |v_i|.

    Then |u_k^T v| >= |v_p| * 3/4 or >= |v_p| / 4 for every k, and U = I + e_p s^T is
    invertible with det 1. Zero coordinates of v are handled by the mixing.
    """
    mags = [arith.magnitude(x) for x in v]
    p = int(np.argmax(mags))
    U = [[Fraction(int(i == k)) for k in range(d)] for i in range(d)]
    for k in range(d):
        if k != p and 4 * mags[k] < mags[p]:
            U[p][k] = Fraction(1)
    ones = [[Fraction(1)] * d for _ in range(d)]
    return SingleHeadDesign(d, affine, U, ones, [Fraction(1)] * d if affine else None)


def _user_design(design: Any, d: int, affine: bool) -> SingleHeadDesign:
    try:
        arr = np.asarray(design, dtype=object)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"design must be a d x d rational matrix, got {design!r}") from exc
    if arr.shape != (d, d):
        raise InvalidArgument(f"design must have shape ({d}, {d}); got shape {arr.shape}")
    U = [[to_fraction(x, name="entry of design") for x in row] for row in arr.tolist()]
    flat = flint.fmpq_mat(d, d, [flint.fmpq(q.numerator, q.denominator) for r in U for q in r])
    if flat.rank() < d:
        raise InvalidArgument(f"design must be invertible; it has rank {flat.rank()} < d = {d}")
    ones = [[Fraction(1)] * d for _ in range(d)]
    return SingleHeadDesign(d, affine, U, ones, [Fraction(1)] * d if affine else None)


def _check_design(arith: Arithmetic, design: SingleHeadDesign, v: np.ndarray) -> None:
    uv = _uv(arith, design, v)
    for k in range(design.d):
        s = arith.sign(uv[k])
        if s is None:
            raise PrecisionExhausted(
                f"cannot decide whether u_{k}^T v = {uv[k]} is zero at this precision"
            )
        if s == 0:
            raise NotIdentifiable(
                f"the design has u_{k}^T v = 0 (column {k}): the probe [b + u_{k}; b] then "
                "returns b^T v whatever W is, so row k of U^T W is not identifiable from it; "
                "choose a design with every u_k^T v != 0"
            )


# ---------------------------------------------------------------------------------------
# The learner.
# ---------------------------------------------------------------------------------------


def learn_single_head(
    oracle: Oracle,
    *,
    affine: bool | None = None,
    design: Any = None,
    verify: int = 8,
    seed: int = 0,
    denominator_bound: int | None = None,
) -> Recovery:
    """Recover (W, v) — and (c, beta) for the affine model — from black-box queries.

    ``affine``: None takes the class the oracle declares (``oracle.model_class``), else the
    paper's model. ``design``: an invertible rational d x d matrix U to use instead of the
    default (each u_k^T v must be nonzero). ``verify``: fresh random queries the learner did
    not use, checked against the recovered model (0 disables). ``denominator_bound``:
    certified mode reconstructs each entry as the unique rational with denominator at most
    this (default 2^(precision/4)) inside its ball, then verifies.

    Raises :class:`NotIdentifiable` if v = 0, :class:`ModelClassMismatch` if the oracle is
    not a single head, :class:`QueryBudgetExceeded` (before any query) if the budget is too
    small, :class:`PrecisionExhausted` if certified arithmetic cannot decide a needed sign.
    """
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    if affine is None:
        affine = oracle.model_class == "single-head-affine"
    if not isinstance(affine, bool):
        raise InvalidArgument(f"affine must be True, False or None, got {affine!r}")
    if isinstance(verify, bool) or not isinstance(verify, int) or verify < 0:
        raise InvalidArgument(f"verify must be an int >= 0, got {verify!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    arith = oracle.arithmetic
    if denominator_bound is not None and (
        isinstance(denominator_bound, bool)
        or not isinstance(denominator_bound, int)
        or denominator_bound < 1
    ):
        raise InvalidArgument(f"denominator_bound must be an int >= 1, got {denominator_bound!r}")
    d = oracle.d
    bound = query_bound(d, affine=affine)
    if oracle.remaining is not None and oracle.remaining < bound + verify:
        raise QueryBudgetExceeded(
            f"learn_single_head needs {bound} learning + {verify} verification queries at d = "
            f"{d}; the oracle has {oracle.remaining} left",
            budget=oracle.budget or 0,
            used=oracle.queries,
            requested=bound + verify,
        )
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent

    with arith.context():
        answers: dict[str, Any] = {}
        if affine:
            with oracle.phase("beta"):
                answers["beta"] = oracle.query(_unit(d, None))
        with oracle.phase("v"):
            answers["v"] = oracle.query_many([_unit(d, i) for i in range(d)])
        beta0 = answers["beta"] if affine else arith.rational(Fraction(0))
        v = _as_array(arith, [a - beta0 for a in answers["v"]])
        _require_nonzero_v(arith, v)
        the_design = (
            _default_design(arith, v, d, affine)
            if design is None
            else _user_design(design, d, affine)
        )
        _check_design(arith, the_design, v)

        with oracle.phase("W"):
            answers["W"] = [oracle.query_many(the_design.w_queries(k)) for k in range(d)]
            if affine:
                answers["c"] = oracle.query_many([the_design.c_query(k) for k in range(d)])
        if arith.name != "exact":
            _rescale_saturated(oracle, arith, the_design, answers)
        params = decode_single_head(arith, the_design, answers)
        exact, enclosures, params = _finalize(arith, params, denominator_bound)
        candidate = _candidate_model(params, exact, affine)
        with oracle.phase("verify"):
            ver_log, ver_err = _verify(oracle, arith, candidate, params, exact, verify, seed)

    after = oracle.queries_by_phase
    by_phase = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    verification = by_phase.get("verify", 0)
    learning = sum(n for k, n in by_phase.items() if k != "verify")
    notes = []
    if by_phase.get("rescale"):
        notes.append(
            f"{by_phase['rescale']} probes saturated the softmax and were re-asked at a smaller "
            "scale; these extra queries are counted in 'queries'"
        )
    if arith.name == "certified" and not exact:
        notes.append("some entries did not reconstruct to a unique rational; W, v are balls")
    out_params = _public_params(params, exact, arith, affine)
    # Built on request: serialising every answer costs seconds at d = 512.
    certificate = functools.partial(
        _certificate_data,
        arith,
        the_design,
        answers,
        out_params,
        exact,
        ver_log,
        seed,
        learning,
        verification,
        by_phase,
        bound,
    )
    return Recovery(
        theorem=THEOREM,
        parameters=out_params,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=exact,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=bound,
        parameter_count=bound,
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        rounds=2 + (1 if by_phase.get("rescale") else 0),
        enclosures=enclosures,
        verification_error=ver_err,
        notes=notes,
        certificate_data=certificate,
    )


def _require_nonzero_v(arith: Arithmetic, v: np.ndarray) -> None:
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


def _rescale_saturated(
    oracle: Oracle, arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> None:
    """Re-ask probes whose softmax saturated, at 1/16 of the scale, until they do not.

    In float mode a ratio y within 1e-6 of 0 or 1 makes the logit ill-conditioned; in
    certified mode a ball that cannot be shown inside (0, 1) is undecided. Shrinking t
    shrinks the score difference t u_k^T W e_j. Each re-ask is a counted query.
    """
    for _ in range(_MAX_RESCALES):
        _, Y, Y0 = _probe_ratios(arith, design, answers)
        todo = _saturated(arith, Y, np.array(design.scales, dtype=object))
        todo0 = (
            _saturated(arith, Y0, np.array(design.c_scales, dtype=object)) if Y0 is not None else []
        )
        if not todo and not todo0:
            return
        for k, j in todo:
            design.scales[k][j] *= _RESCALE_FACTOR
        for (k,) in todo0:
            assert design.c_scales is not None
            design.c_scales[k] *= _RESCALE_FACTOR
        with oracle.phase("rescale"):
            new = oracle.query_many(
                [design.w_query(j, k) for k, j in todo] + [design.c_query(k) for (k,) in todo0]
            )
        for (k, j), a in zip(todo, new[: len(todo)], strict=True):
            answers["W"][k][j] = a
        for (k,), a in zip(todo0, new[len(todo) :], strict=True):
            answers["c"][k] = a


def _saturated(
    arith: Arithmetic, Y: np.ndarray, scales: np.ndarray | None = None
) -> list[tuple[int, ...]]:
    """Probes to re-ask at a smaller scale; ``scales`` holds each probe's t (certified)."""
    if arith.name == "float":
        y = np.asarray(Y, dtype=np.float64)
        sat = np.minimum(y, 1 - y) < _FLOAT_SATURATION
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


def _finalize(
    arith: Arithmetic, params: dict[str, Any], denominator_bound: int | None
) -> tuple[bool, dict[str, Any] | None, dict[str, Any]]:
    """(exact?, enclosures, params): certified balls reconstructed to rationals if unique."""
    if arith.name == "exact":
        for name, val in params.items():
            for x in _flat(val):
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


def _flat(val: Any) -> list[Any]:
    return list(np.asarray(val, dtype=object).ravel())


def _candidate_model(
    params: dict[str, Any], exact: bool, affine: bool
) -> SingleHeadAttention | None:
    """The recovered model as a rational SingleHeadAttention (None for ball parameters)."""
    if not exact and not all(isinstance(x, float | np.floating) for x in _flat(params["v"])):
        return None
    kwargs = {}
    if affine:
        kwargs = {"c": _flat(params["c"]), "beta": _scalar(params["beta"])}
    W = np.asarray(params["W"], dtype=object if exact else np.float64)
    return SingleHeadAttention(W, _flat(params["v"]), **kwargs)


def _scalar(x: Any) -> Any:
    return np.asarray(x, dtype=object).item() if isinstance(x, np.ndarray) else x


def _public_params(
    params: dict[str, Any], exact: bool, arith: Arithmetic, affine: bool
) -> dict[str, Any]:
    """Exact: SymPy matrices (v, c as d x 1 columns); balls and floats: numpy arrays."""
    out: dict[str, Any] = {}
    for name, val in params.items():
        if exact:
            if name == "beta":
                out[name] = sympy.sympify(_scalar(val))
            else:
                arr = np.asarray(val, dtype=object)
                out[name] = sympy.Matrix(arr.tolist() if arr.ndim == 2 else [[x] for x in arr])
        elif arith.name == "float":
            out[name] = float(val) if name == "beta" else np.asarray(val, dtype=np.float64)
        else:
            out[name] = _scalar(val) if name == "beta" else np.asarray(val, dtype=object)
    return out


# ---------------------------------------------------------------------------------------
# Verification on fresh queries.
# ---------------------------------------------------------------------------------------


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


def _verify(
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
        expected = _predict(arith, candidate, params, X)
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

    Exact: ==; certified: the balls overlap; float: relative to :func:`_answer_scale`. The
    learner's verification and the certificate checker both decide with this one function.
    """
    scale = _answer_scale(arith, params, X)
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


def _predict(
    arith: Arithmetic, candidate: SingleHeadAttention | None, params: dict[str, Any], X: Any
) -> Any:
    if candidate is not None:
        if arith.name == "float":
            return float(candidate.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
        from verified_attn.models import as_rational_sequence

        return candidate._evaluate_rational(as_rational_sequence(X, candidate.d), arith)
    # Certified balls that did not reconstruct: evaluate the definition in ball arithmetic.
    from verified_attn.models import attention_output

    rows = [[flint.arb(float(x)) for x in row] for row in np.asarray(X, dtype=np.float64)]
    W = np.asarray(params["W"], dtype=object).tolist()
    v = _flat(params["v"])
    c = _flat(params["c"]) if "c" in params else None
    beta = _scalar(params["beta"]) if "beta" in params else flint.arb(0)
    return attention_output(rows, W, v, c, beta, exp=lambda s: s.exp())


def _answer_scale(arith: Arithmetic, params: dict[str, Any], X: Any) -> float:
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
    return head + beta * _BIAS_ULPS * np.finfo(np.float64).eps / rtol


# ---------------------------------------------------------------------------------------
# Certificate data.
# ---------------------------------------------------------------------------------------


def _certificate_data(
    arith: Arithmetic,
    design: SingleHeadDesign,
    answers: dict[str, Any],
    params: dict[str, Any],
    exact: bool,
    ver_log: list[tuple[np.ndarray, Any]],
    seed: int,
    learning: int,
    verification: int,
    by_phase: dict[str, int],
    bound: int,
) -> dict[str, Any]:
    """Everything needed to re-check the recovery without the oracle, as exact JSON.

    The design (U and every probe scale) is stored as exact rationals; every answer,
    parameter and verification answer with :func:`verified_attn.serialize.dump_number`
    (rationals "p/q", floats bit-exact hex, balls as exact dyadic midpoint and radius).
    Shapes are normalised whatever the arithmetic: ``W`` is a d x d nested list, ``v`` and
    ``c`` flat lists of length d, ``beta`` one number. The checker is
    :mod:`verified_attn.exact_recovery.certificate`.

    Certified balls that did not reconstruct are stored widened just enough to contain the
    balls a checker re-decodes from the *stored* answers: flint rounds a reloaded radius up
    (by one unit in its 30-bit radius), so the re-decoded balls are a hair wider than the
    learner's. The union of both still contains the truth, and lets the checker demand
    containment exactly, with no tolerance.
    """
    from verified_attn.serialize import dump_number, dump_rational, load_number

    if arith.name == "certified" and not exact:
        with arith.context():
            reloaded = {
                "v": [load_number(dump_number(a)) for a in answers["v"]],
                "W": [[load_number(dump_number(a)) for a in row] for row in answers["W"]],
            }
            if design.affine:
                reloaded["beta"] = load_number(dump_number(answers["beta"]))
                reloaded["c"] = [load_number(dump_number(a)) for a in answers["c"]]
            again = decode_single_head(arith, design, reloaded)
            params = {
                name: np.array(
                    [
                        flint.arb(x).union(y)
                        for x, y in zip(
                            np.asarray(val, dtype=object).reshape(-1),
                            np.asarray(again[name], dtype=object).reshape(-1),
                            strict=True,
                        )
                    ],
                    dtype=object,
                ).reshape(np.shape(np.asarray(val, dtype=object)))
                for name, val in params.items()
            }

    def dump_param(name: str, val: Any) -> Any:
        if isinstance(val, sympy.MatrixBase):
            val = val.tolist()
        arr = np.asarray(val, dtype=object)
        if name == "beta":
            return dump_number(arr.reshape(-1)[0] if arr.ndim else arr.item())
        if name == "W":
            return [[dump_number(x) for x in row] for row in arr.reshape(design.d, design.d)]
        return [dump_number(x) for x in arr.reshape(-1)]  # v, c: columns become flat lists

    return {
        "format": "verified-attn-certificate/1",
        "theorem": THEOREM,
        "d": design.d,
        "affine": design.affine,
        "arithmetic": arith.name,
        "precision": arith.precision,
        "seed": seed,
        "design": {
            "U": [[dump_rational(q) for q in row] for row in design.U],
            "scales": [[dump_rational(q) for q in row] for row in design.scales],
            "c_scales": None
            if design.c_scales is None
            else [dump_rational(q) for q in design.c_scales],
        },
        "answers": {
            "beta": dump_number(answers["beta"]) if design.affine else None,
            "v": [dump_number(a) for a in answers["v"]],
            "W": [[dump_number(a) for a in row] for row in answers["W"]],
            "c": [dump_number(a) for a in answers["c"]] if design.affine else None,
        },
        "result": {
            "exact": exact,
            "parameters": {k: dump_param(k, p) for k, p in params.items()},
        },
        "verification": [
            {
                "sequence": [[dump_rational(Fraction(float(x))) for x in row] for row in X],
                "answer": dump_number(a),
            }
            for X, a in ver_log
        ],
        "queries": {
            "learning": learning,
            "verification": verification,
            "by_phase": dict(by_phase),
            "bound": bound,
        },
    }

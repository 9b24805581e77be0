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
    to_fraction,
)
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.oracle import Oracle
from verified_attn.probing import (
    MAX_RESCALES,
    RESCALE_FACTOR,
    apply_exact,
    candidate_model,
    finalize,
    logits,
    measured_array,
    public_params,
    raise_bad_probe,
    require_nonzero_v,
    saturated,
    verify_on_fresh_queries,
)
from verified_attn.recovery import Recovery, split_counts

__all__ = ["SingleHeadDesign", "decode_single_head", "learn_single_head", "query_bound"]

THEOREM = "thm-4.1"


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
    v = measured_array(arith, [answers["v"][i] - beta for i in range(d)])
    uv = _uv(arith, design, v)
    F = measured_array(arith, answers["W"])  # F[k][j]
    t = measured_array(arith, [[arith.rational(s) for s in row] for row in design.scales])
    Y = (F - v[None, :] - beta) / (t * uv[:, None])
    Y0 = None
    if design.affine:
        assert design.c_scales is not None
        t0 = measured_array(arith, [arith.rational(s) for s in design.c_scales])
        Y0 = (measured_array(arith, answers["c"]) - beta) / (t0 * uv)
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
    L, bad = logits(arith, Y)
    if bad:
        k, j = bad[0]
        raise_bad_probe(arith, Y[k, j], design.w_query(j, k), answers["W"][k][j])
    for k, j in _irrational(arith, L):
        _raise_irrational_logit(L[k, j], design.w_query(j, k), answers["W"][k][j])
    t = measured_array(arith, [[arith.rational(s) for s in row] for row in design.scales])
    M = L / t  # M[k, j] = u_k^T (W e_j + c)
    params: dict[str, Any] = {"v": base["v"]}
    if design.affine:
        assert Y0 is not None and design.c_scales is not None
        L0, bad0 = logits(arith, Y0)
        if bad0:
            (k,) = bad0[0]
            raise_bad_probe(arith, Y0[k], design.c_query(k), answers["c"][k])
        for (k,) in _irrational(arith, L0):
            _raise_irrational_logit(L0[k], design.c_query(k), answers["c"][k])
        t0 = measured_array(arith, [arith.rational(s) for s in design.c_scales])
        m0 = L0 / t0
        M = M - m0[:, None]
        params["beta"] = base["beta"]
    inv_t = design.U_flint.transpose().inv()
    params["W"] = apply_exact(arith, inv_t, M)
    if design.affine:
        params["c"] = apply_exact(arith, inv_t, m0.reshape(d, 1))[:, 0]
    return params


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
    oracle.require_remaining(bound, verify, f"learn_single_head at d = {d}")
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
        v = measured_array(arith, [a - beta0 for a in answers["v"]])
        require_nonzero_v(arith, v)
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
        exact, enclosures, params = finalize(arith, params, denominator_bound)
        candidate = candidate_model(params, exact, affine)
        with oracle.phase("verify"):
            ver_log, ver_err = verify_on_fresh_queries(
                oracle, arith, candidate, params, exact, verify, seed
            )

    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    notes = []
    if by_phase.get("rescale"):
        notes.append(
            f"{by_phase['rescale']} probes saturated the softmax and were re-asked at a smaller "
            "scale; these extra queries are counted in 'queries'"
        )
    if arith.name == "certified" and not exact:
        notes.append("some entries did not reconstruct to a unique rational; W, v are balls")
    out_params = public_params(params, exact, arith, affine)
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


def _rescale_saturated(
    oracle: Oracle, arith: Arithmetic, design: SingleHeadDesign, answers: dict[str, Any]
) -> None:
    """Re-ask probes whose softmax saturated, at 1/16 of the scale, until they do not.

    In float mode a ratio y within 1e-6 of 0 or 1 makes the logit ill-conditioned; in
    certified mode a ball that cannot be shown inside (0, 1) is undecided. Shrinking t
    shrinks the score difference t u_k^T W e_j. Each re-ask is a counted query.
    """
    for _ in range(MAX_RESCALES):
        _, Y, Y0 = _probe_ratios(arith, design, answers)
        todo = saturated(arith, Y, np.array(design.scales, dtype=object))
        todo0 = (
            saturated(arith, Y0, np.array(design.c_scales, dtype=object)) if Y0 is not None else []
        )
        if not todo and not todo0:
            return
        for k, j in todo:
            design.scales[k][j] *= RESCALE_FACTOR
        for (k,) in todo0:
            assert design.c_scales is not None
            design.c_scales[k] *= RESCALE_FACTOR
        with oracle.phase("rescale"):
            new = oracle.query_many(
                [design.w_query(j, k) for k, j in todo] + [design.c_query(k) for (k,) in todo0]
            )
        for (k, j), a in zip(todo, new[: len(todo)], strict=True):
            answers["W"][k][j] = a
        for (k,), a in zip(todo0, new[len(todo) :], strict=True):
            answers["c"][k] = a


# ---------------------------------------------------------------------------------------
# Verification on fresh queries.
# ---------------------------------------------------------------------------------------


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

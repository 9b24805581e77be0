"""Theorem 4.1's information limit: d^2 + d queries are needed, the Jacobian has full rank.

>>> parameter_count(1).holds
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import flint
import sympy

from verified_attn.arithmetic import to_fraction
from verified_attn.checks import SymbolicCheck
from verified_attn.errors import InvalidArgument
from verified_attn.exact_recovery.learner import query_bound
from verified_attn.exact_recovery.symbolic_base import (
    Namespace,
    check_bool,
    check_d,
    model_answer,
    model_symbols,
    probe_queries,
    rational_matrix,
    rational_vector,
)

__all__ = ["arb_value", "parameter_count"]


def arb_value(expr: Any) -> flint.arb:
    """A certified ball for a closed-form real number built from rationals, +, *, ^n, exp.

    Call inside a precision context (``CertifiedArithmetic(p).context()``).

    >>> ball = arb_value(2 * sympy.exp(sympy.Rational(1, 2)))
    >>> ball.contains(flint.fmpq(3297, 1000)), ball.contains(flint.fmpq(3298, 1000))
    (False, False)
    >>> ball > flint.fmpq(3297, 1000) and ball < flint.fmpq(3298, 1000)    # 2 e^(1/2) = 3.2974...
    True
    """
    expr = sympy.sympify(expr)
    if expr.is_Rational:
        return flint.arb(flint.fmpq(int(expr.p), int(expr.q)))
    if expr is sympy.E:
        return flint.arb(1).exp()
    if isinstance(expr, sympy.Add):
        out = flint.arb(0)
        for term in expr.args:
            out += arb_value(term)
        return out
    if isinstance(expr, sympy.Mul):
        out = flint.arb(1)
        for term in expr.args:
            out *= arb_value(term)
        return out
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        n = int(expr.exp)
        base = arb_value(expr.base)
        return base**n if n >= 0 else 1 / base ** (-n)
    if isinstance(expr, sympy.exp):
        return arb_value(expr.args[0]).exp()
    raise InvalidArgument(f"cannot evaluate {expr} in ball arithmetic (not a closed form)")


def _random_point(ns: Namespace, seed: int) -> dict[sympy.Symbol, sympy.Rational]:
    rng = random.Random(seed)
    point = {}
    for s in ns["params"]:
        num = rng.choice([n for n in range(-5, 6) if n != 0])  # nonzero: v has no zeros
        point[s] = sympy.Rational(num, rng.randint(1, 4))
    return point


def parameter_count(
    d: int = 3,
    affine: bool = False,
    *,
    design: Any = None,
    queries: Sequence[Any] | None = None,
    point: dict[str, Any] | None = None,
    seed: int = 0,
    precision: int = 128,
) -> SymbolicCheck:
    """The query count equals the parameter count, and the answers pin the parameters down.

    The learner's count (d^2 + d, affine d^2 + 2d + 1) is compared with the number of free
    parameter symbols of the model. Then the Jacobian of the map parameters -> answers
    (the raw answers f(X_q), not the decoded numbers) is computed from the model at a
    random rational point (``seed``) and its determinant enclosed in a ball: a ball that
    excludes 0 *proves* full rank. A full-rank square Jacobian makes the answer map a local
    diffeomorphism, so these queries identify the parameters near the point; with fewer
    queries than parameters no continuous map can be injective on an open set (invariance
    of domain), so no smooth decoding can do with fewer — the information limit.

    ``queries`` (default: the learner's probes for ``design``, default U = I) and ``point``
    (a dict with keys "W", "v", and for the affine model "c", "beta") may be replaced to see
    the check fail: one query dropped, or a design with u_k^T v = 0 at the point.

    >>> parameter_count(2).holds
    True
    >>> parameter_count(2, queries=probe_queries(2, False)[:-1]).holds
    False
    """
    d = check_d(d, high=8)
    affine = check_bool(affine, "affine")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    ns = model_symbols(d, affine)
    params = ns["params"]
    n = len(params)
    count = query_bound(d, affine=affine)
    qs = probe_queries(d, affine, design) if queries is None else list(queries)
    at = _random_point(ns, seed) if point is None else _point(ns, point)
    rows = []
    for X in qs:
        f = model_answer(ns, X)
        rows.append([sympy.diff(f, p).xreplace(at) for p in params])
    from verified_attn.arithmetic import CertifiedArithmetic

    det_ball = None
    full = False
    with CertifiedArithmetic(precision).context():
        if len(rows) == n:
            J = flint.arb_mat([[arb_value(x) for x in r] for r in rows])
            det_ball = J.det()
            full = not det_ball.contains(0)
    holds = count == n and len(qs) == count and full
    why = []
    if count != n:
        why.append(f"the learner's count {count} differs from the parameter count {n}")
    if len(qs) != n:
        why.append(f"{len(qs)} queries for {n} parameters: the Jacobian is not square")
    elif not full:
        why.append("the Jacobian's determinant ball contains 0: full rank is not shown")
    return SymbolicCheck(
        "thm-4.1/information-limit",
        "the query count d^2 + d (affine d^2 + 2d + 1) equals the number of parameters, and "
        "the Jacobian of parameters -> answers has full rank: no smooth decoding can use "
        "fewer queries",
        holds,
        detail=f"d = {d}, affine = {affine}: {n} parameters, learner count {count}, "
        f"{len(qs)} queries; det J in {det_ball}" + ("; " + "; ".join(why) if why else ""),
        data={
            "d": d,
            "affine": affine,
            "parameters": n,
            "count": count,
            "queries": len(qs),
            "det": det_ball,
        },
    )


def _point(ns: Namespace, point: dict[str, Any]) -> dict[sympy.Symbol, sympy.Rational]:
    if not isinstance(point, dict):
        raise InvalidArgument(f"point must be a dict with keys W, v (c, beta), got {point!r}")
    d = ns["d"]
    names = ["W", "v", "c", "beta"] if ns["affine"] else ["W", "v"]
    missing = [k for k in names if k not in point]
    if missing:
        raise InvalidArgument(f"point is missing {missing}; it needs the keys {names}")
    out: dict[sympy.Symbol, sympy.Rational] = {}
    W = rational_matrix(point["W"], d, "point['W']")
    out.update({ns["W"][i, j]: W[i, j] for i in range(d) for j in range(d)})
    v = rational_vector(point["v"], d, "point['v']")
    out.update({ns["v"][i]: v[i] for i in range(d)})
    if ns["affine"]:
        c = rational_vector(point["c"], d, "point['c']")
        out.update({ns["c"][i]: c[i] for i in range(d)})
        q = to_fraction(point["beta"], name="point['beta']")
        out[ns["beta"]] = sympy.Rational(q.numerator, q.denominator)
    return out

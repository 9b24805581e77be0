"""The pieces Theorem 4.1's derivations share: the model's symbols, its answer, the zero test.

>>> ns = model_symbols(1)
>>> model_answer(ns, [[1]])
v0

:func:`model_answer` evaluates :func:`verified_attn.models.attention_output` (the one
definition of the model) on SymPy symbols; :func:`is_zero` decides a difference exactly
(see :mod:`verified_attn.exact_recovery.symbolic`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from verified_attn import validation
from verified_attn.arithmetic import to_fraction
from verified_attn.errors import InvalidArgument
from verified_attn.models import attention_output

__all__ = [
    "check_bool",
    "check_d",
    "exp_ratio",
    "is_zero",
    "model_answer",
    "model_symbols",
    "normal_exp",
    "probe_namespace",
    "probe_queries",
    "rational_matrix",
    "rational_vector",
    "sym_dot",
    "symbol_vector",
]

Namespace = dict[str, Any]


def check_d(d: Any, *, name: str = "d", low: int = 1, high: int = 64) -> int:
    """The dimension of a symbolic check: an int in ``low..high`` (symbolic work grows fast)."""
    return int(validation.check_int(d, name, low=low, high=high))


def check_bool(x: Any, name: str) -> bool:
    """True or False (:func:`verified_attn.validation.check_bool`)."""
    return bool(validation.check_bool(x, name))


def symbol_vector(prefix: str, d: int, **assumptions: bool) -> sympy.Matrix:
    return sympy.Matrix([sympy.Symbol(f"{prefix}{i}", **assumptions) for i in range(d)])


def model_symbols(d: int, affine: bool = False) -> Namespace:
    """Real symbols for the parameters: ``W`` (d x d), ``v``, ``c`` (d x 1), ``beta``.

    For the paper's model ``c`` is the zero vector and ``beta`` is 0, so one derivation
    covers both models. ``params`` lists the free parameter symbols, W column by column
    (vec(W)), then c, v, beta.

    >>> ns = model_symbols(2, affine=True)
    >>> len(ns["params"]), ns["beta"]
    (9, beta)
    """
    d = check_d(d)
    affine = check_bool(affine, "affine")
    W = sympy.Matrix(d, d, lambda i, j: sympy.Symbol(f"W{i}{j}", real=True))
    v = symbol_vector("v", d, real=True)
    c = symbol_vector("c", d, real=True) if affine else sympy.zeros(d, 1)
    beta = sympy.Symbol("beta", real=True) if affine else sympy.Integer(0)
    params = [W[i, j] for j in range(d) for i in range(d)]
    if affine:
        params += [*c, *v, beta]
    else:
        params += list(v)
    return {"d": d, "affine": affine, "W": W, "v": v, "c": c, "beta": beta, "params": params}


def model_answer(
    ns: Namespace, rows: Sequence[Any], opaque: dict[Any, Any] | None = None
) -> sympy.Expr:
    """The model's answer on ``rows``, straight from :func:`attention_output`.

    With ``opaque`` (a dict), each ``exp(s)`` is a fresh positive symbol E_n instead, and
    ``opaque[E_n] = s``: cancelling in E_1, E_2 is much faster than in exp(...), and any
    identity of rational functions in independent E's stays true after E_n -> exp(s_n).
    """
    W = ns["W"]
    exp: Any = sympy.exp
    if opaque is not None:

        def exp(s: sympy.Expr) -> sympy.Symbol:
            e = sympy.Symbol(f"E{len(opaque)}", positive=True)
            opaque[e] = s
            return e

    return attention_output(
        [list(r) for r in rows],
        W.tolist(),
        list(ns["v"]),
        list(ns["c"]) if ns["affine"] else None,
        ns["beta"],
        exp=exp,
    )


def sym_dot(x: Any, y: Any) -> sympy.Expr:
    return sympy.expand(sum(xi * yi for xi, yi in zip(list(x), list(y), strict=True)))


def normal_exp(expr: sympy.Expr) -> sympy.Expr:
    return expr.replace(
        lambda e: isinstance(e, sympy.exp), lambda e: sympy.exp(sympy.expand(e.args[0]))
    )


def is_zero(expr: Any) -> bool:
    """Exact zero test for rational functions of polynomials and exps of polynomials.

    >>> x, y = sympy.symbols("x y", real=True)
    >>> is_zero(sympy.exp(x + y) - sympy.exp(x) * sympy.exp(y))
    True
    >>> is_zero(1 / (1 + sympy.exp(-x)) - sympy.exp(x) / (1 + sympy.exp(x)))
    True
    >>> is_zero(1 / (1 + sympy.exp(x)) - sympy.exp(x) / (1 + sympy.exp(x)))
    False
    """
    num, _ = sympy.fraction(sympy.together(sympy.sympify(expr)))
    num = sympy.expand(normal_exp(sympy.expand(num)))
    num = sympy.powsimp(num, combine="exp")
    return sympy.expand(normal_exp(num)) == 0


def exp_ratio(y: sympy.Expr, opaque: dict[Any, Any] | None = None) -> sympy.Expr:
    """y / (1 - y) brought to one exponential where it is one (cancel, merge exps).

    ``opaque`` maps the stand-in symbols of :func:`_f` back to their exponents.
    """
    ratio = sympy.cancel(sympy.together(y / (1 - y)))
    if opaque:
        ratio = ratio.xreplace({e: sympy.exp(x) for e, x in opaque.items()})
    return normal_exp(sympy.powsimp(ratio, combine="exp"))


def probe_namespace(d: int, affine: bool) -> Namespace:
    ns = model_symbols(d, affine)
    b = symbol_vector("b", d, real=True)
    u = symbol_vector("u", d, real=True)
    t = sympy.Symbol("t", positive=True)
    ns.update(b=b, u=u, t=t, a=b + t * u)
    return ns


def rational_matrix(design: Any, d: int, name: str = "design") -> sympy.Matrix:
    if isinstance(design, sympy.MatrixBase):
        rows = design.tolist()
    else:
        try:
            rows = [list(r) for r in design]
        except TypeError as exc:
            raise InvalidArgument(f"{name} must be a {d} x {d} matrix, got {design!r}") from exc
    if len(rows) != d or any(len(r) != d for r in rows):
        raise InvalidArgument(f"{name} must be a {d} x {d} matrix; got {len(rows)} rows")
    out = []
    for r in rows:
        row = []
        for x in r:
            if isinstance(x, sympy.Basic) and not x.is_number:
                row.append(x)  # a symbol: a fully symbolic design
            else:
                q = to_fraction(x, name=f"entry of {name}")
                row.append(sympy.Rational(q.numerator, q.denominator))
        out.append(row)
    return sympy.Matrix(out)


def rational_vector(v: Any, d: int, name: str = "v") -> sympy.Matrix:
    try:
        entries = list(v)
    except TypeError as exc:
        raise InvalidArgument(f"{name} must be a vector of length {d}, got {v!r}") from exc
    if len(entries) != d:
        raise InvalidArgument(f"{name} must have length d = {d}; got length {len(entries)}")
    out = []
    for x in entries:
        q = to_fraction(x, name=f"entry of {name}")
        out.append(sympy.Rational(q.numerator, q.denominator))
    return sympy.Matrix(out)


def probe_queries(d: int, affine: bool, design: Any = None) -> list[list[list[Any]]]:
    """The learner's queries for design U (default I), scale t = 1, in the learner's order.

    [0] (affine only), [e_i] for each i, [e_j + u_k; e_j] for each k, j, then [u_k; 0]
    (affine only). Each query is a list of rows of exact rationals.

    >>> [len(q) for q in probe_queries(1, True)]       # [0], [e_1], [e_1 + u_1; e_1], [u_1; 0]
    [1, 1, 2, 2]
    """
    d = check_d(d)
    U = sympy.eye(d) if design is None else rational_matrix(design, d)
    zero = [sympy.Integer(0)] * d

    def e(j: int) -> list[Any]:
        return [sympy.Integer(int(i == j)) for i in range(d)]

    out: list[list[list[Any]]] = []
    if affine:
        out.append([zero])
    out += [[e(i)] for i in range(d)]
    for k in range(d):
        for j in range(d):
            out.append([[e(j)[i] + U[i, k] for i in range(d)], e(j)])
    if affine:
        out += [[[U[i, k] for i in range(d)], zero] for k in range(d)]
    return out

"""Theorem 4.1 derived in SymPy from the model definition, step by step.

>>> from verified_attn.exact_recovery.symbolic import logit_identity
>>> check = logit_identity(2, affine=True)
>>> check.holds, check.name
(True, 'thm-4.1/logit-identity')

Every check evaluates :func:`verified_attn.models.attention_output` (the one definition of
the model) on SymPy symbols or exact rationals; nothing here restates the softmax by hand.
Each returns a :class:`~verified_attn.checks.SymbolicCheck` whose ``holds`` is decided
exactly (no floating point). The checks accept the pieces a reader may want to vary (the
claimed formula, the design matrix, the queries, the parameter point), so a deliberately
wrong variant can be shown to fail.

Zero tests. The expressions here are rational functions of polynomials and exponentials of
polynomials. :func:`is_zero` brings the numerator to a normal form: expand, merge each
product of exponentials into one ``exp`` (``powsimp``), expand every exponent. Exponentials
of distinct polynomials are linearly independent over the polynomials, so the normal form
is 0 exactly when the expression is; a nonzero normal form is a genuine counterexample.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

import flint
import sympy

from verified_attn.checks import SymbolicCheck
from verified_attn.errors import InvalidArgument
from verified_attn.exact_recovery.information import arb_value, parameter_count
from verified_attn.exact_recovery.learner import query_bound
from verified_attn.exact_recovery.symbolic_base import (
    Namespace,
    is_zero,
    model_symbols,
    probe_queries,
)
from verified_attn.exact_recovery.symbolic_base import check_d as _check_d
from verified_attn.exact_recovery.symbolic_base import exp_ratio as _exp_ratio
from verified_attn.exact_recovery.symbolic_base import model_answer as _f
from verified_attn.exact_recovery.symbolic_base import probe_namespace as _probe_namespace
from verified_attn.exact_recovery.symbolic_base import rational_matrix as _rational_matrix
from verified_attn.exact_recovery.symbolic_base import rational_vector as _rational_vector
from verified_attn.exact_recovery.symbolic_base import sym_dot as _dot
from verified_attn.exact_recovery.symbolic_base import symbol_vector as _vec

__all__ = [
    "affine_variant",
    "all_checks",
    "arb_value",
    "is_zero",
    "length_one_formula",
    "length_one_identity",
    "linear_system",
    "logit_decode",
    "logit_identity",
    "model_symbols",
    "parameter_count",
    "probe_queries",
    "sigmoid_formula",
    "sigmoid_reduction",
]


# ---------------------------------------------------------------------------------------
# Building blocks.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Step 1: length one.
# ---------------------------------------------------------------------------------------


def length_one_formula(ns: Namespace) -> sympy.Expr:
    """The claimed answer on a length-1 query [x]: x^T v + beta."""
    return _dot(ns["x"], ns["v"]) + ns["beta"]


def length_one_identity(
    d: int = 3,
    affine: bool = False,
    *,
    claimed: Callable[[Namespace], sympy.Expr] = length_one_formula,
) -> SymbolicCheck:
    """f([x]) = x^T v (+ beta): a softmax over one position is 1, whatever W (and c) are.

    >>> length_one_identity(2).holds
    True
    >>> length_one_identity(2, affine=True, claimed=lambda ns: (ns["x"].T * ns["v"])[0]).holds
    False
    """
    ns = model_symbols(d, affine)
    ns["x"] = _vec("x", ns["d"], real=True)
    f = _f(ns, [ns["x"]])
    holds = is_zero(f - claimed(ns))
    # And the answer does not depend on W or c: their derivatives vanish identically.
    scores = [*list(ns["W"]), *(list(ns["c"]) if affine else [])]
    free_of_scores = all(is_zero(sympy.diff(f, s)) for s in scores)
    return SymbolicCheck(
        "thm-4.1/length-one",
        "f([x]) = x^T v + beta for every x: a softmax over one position is 1, so length-1 "
        "queries [e_i] read v_i (+ beta) and carry no information about W, c",
        holds and free_of_scores,
        detail=f"d = {ns['d']}, affine = {affine}: f([x]) - claimed simplifies to "
        f"{'0' if holds else 'a nonzero expression'}; df/dW = 0: {free_of_scores}",
        data={"d": ns["d"], "affine": affine, "f": f},
    )


# ---------------------------------------------------------------------------------------
# Step 2: two tokens reduce softmax to a sigmoid.
# ---------------------------------------------------------------------------------------


def sigmoid_formula(ns: Namespace) -> sympy.Expr:
    """The claimed answer on [a; b]: b^T v + sigmoid((a - b)^T (W b + c)) (a - b)^T v + beta."""
    a, b = ns["a"], ns["b"]
    z = _dot(a - b, ns["W"] * b + ns["c"])
    return _dot(b, ns["v"]) + _dot(a - b, ns["v"]) / (1 + sympy.exp(-z)) + ns["beta"]


def sigmoid_reduction(
    d: int = 3,
    affine: bool = False,
    *,
    claimed: Callable[[Namespace], sympy.Expr] = sigmoid_formula,
) -> SymbolicCheck:
    """On [a; b], alpha_1 = sigmoid(s_1 - s_2), s_1 - s_2 = (a - b)^T (W b + c).

    Hence f = b^T v + alpha_1 (a - b)^T v (+ beta). ``claimed(ns)`` is the formula compared
    with the model (``ns`` holds the symbols a, b, W, c, v, beta).

    >>> sigmoid_reduction(2).holds
    True
    >>> swap = lambda ns: sigmoid_formula({**ns, "a": ns["b"], "b": ns["a"]})
    >>> sigmoid_reduction(2, claimed=swap).holds
    False
    """
    d = _check_d(d)
    ns = model_symbols(d, affine)
    a, b = _vec("a", d, real=True), _vec("b", d, real=True)
    ns.update(a=a, b=b)
    f = _f(ns, [a, b])
    holds = is_zero(f - claimed(ns))
    return SymbolicCheck(
        "thm-4.1/sigmoid-reduction",
        "on a length-2 query [a; b]: f = b^T v + sigmoid((a - b)^T (W b + c)) (a - b)^T v "
        "+ beta (softmax over two scores is a sigmoid of their difference)",
        holds,
        detail=f"d = {d}, affine = {affine}: f - claimed "
        f"{'simplifies to 0' if holds else 'is not identically 0'}",
        data={"d": d, "affine": affine},
    )


# ---------------------------------------------------------------------------------------
# Step 3: the logit undoes the sigmoid; the measurement is bilinear in W.
# ---------------------------------------------------------------------------------------


def logit_decode(ns: Namespace, f: sympy.Expr) -> sympy.Expr:
    """The learner's ratio y = (f - b^T v - beta) / (t u^T v) for the probe [b + t u; b]."""
    return (f - _dot(ns["b"], ns["v"]) - ns["beta"]) / (ns["t"] * _dot(ns["u"], ns["v"]))


def logit_identity(
    d: int = 3,
    affine: bool = False,
    *,
    decode: Callable[[Namespace, sympy.Expr], sympy.Expr] = logit_decode,
) -> SymbolicCheck:
    """With a = b + t u: logit((f - b^T v - beta) / (t u^T v)) = t u^T (W b + c).

    Shown symbolically: y/(1 - y) collapses to one exponential, its log minus the right
    side is 0, and the result is linear in W with d/dW_ij = t u_i b_j (a bilinear form
    u^T W b: one linear measurement of W per query).

    >>> logit_identity(2).holds
    True
    >>> no_beta = lambda ns, f: (f - (ns["b"].T * ns["v"])[0]) / (ns["t"] * (ns["u"].T * ns["v"])[0])
    >>> logit_identity(2, affine=True, decode=no_beta).holds
    False
    """
    d = _check_d(d)
    ns = _probe_namespace(d, affine)
    b, u, t, W = ns["b"], ns["u"], ns["t"], ns["W"]
    opaque: dict[Any, Any] = {}
    f = _f(ns, [ns["a"], b], opaque)
    y = decode(ns, f)
    ratio = _exp_ratio(y, opaque)
    L = sympy.log(ratio)  # log(exp(z)) = z for real z: SymPy does it on construction
    target = _dot(t * u, W * b + ns["c"])
    # If y/(1 - y) does not cancel to one exponential, its log is no polynomial: fail fast
    # (expanding such a non-identity can take minutes) rather than run the zero test.
    identity = isinstance(ratio, sympy.exp) and is_zero(L - target)
    bilinear = identity and all(
        is_zero(sympy.diff(L, W[i, j]) - t * u[i] * b[j]) for i in range(d) for j in range(d)
    )
    return SymbolicCheck(
        "thm-4.1/logit-identity",
        "for the probe [b + t u; b]: logit((f - b^T v - beta) / (t u^T v)) = t u^T (W b + c), "
        "a bilinear form in W (d/dW_ij = t u_i b_j)",
        identity and bilinear,
        detail=f"d = {d}, affine = {affine}: logit(y) - t u^T (W b + c) "
        f"{'simplifies to 0' if identity else 'is not identically 0'}; "
        f"d/dW_ij = t u_i b_j: {bilinear}",
        data={"d": d, "affine": affine, "logit": L},
    )


@functools.lru_cache(maxsize=16)
def _measurement(d: int, affine: bool) -> tuple[Namespace, sympy.Expr | None]:
    """The decoded measurement m(u, b) = logit(y) / t, derived once from the model.

    None if y/(1 - y) is not a single exponential (then the model is not one the logit
    turns into a linear measurement, and the checks that stack measurements fail).
    """
    ns = _probe_namespace(d, affine)
    opaque: dict[Any, Any] = {}
    f = _f(ns, [ns["a"], ns["b"]], opaque)
    ratio = _exp_ratio(logit_decode(ns, f), opaque)
    if not isinstance(ratio, sympy.exp):
        return ns, None
    return ns, sympy.expand(sympy.log(ratio) / ns["t"])


_NOT_EXP = (
    "the model's probe ratio y/(1 - y) is not a single exponential, so the logit of a "
    "two-token answer is not a linear measurement of W"
)


# ---------------------------------------------------------------------------------------
# Step 4: stacking the measurements: (I ⊗ U^T) vec(W).
# ---------------------------------------------------------------------------------------


def _random_rational_matrix(d: int, seed: int, *, lo: int = -4, hi: int = 4) -> sympy.Matrix:
    rng = random.Random(seed)
    return sympy.Matrix(d, d, lambda i, j: sympy.Rational(rng.randint(lo, hi), rng.randint(1, 3)))


def _default_design(d: int, seed: int) -> sympy.Matrix:
    """Symbolic U for d <= 2; a seeded random invertible rational U for larger d."""
    if d <= 2:
        return sympy.Matrix(d, d, lambda i, k: sympy.Symbol(f"U{i}{k}", real=True))
    for attempt in range(100):
        U = _random_rational_matrix(d, seed + 7919 * attempt)
        if _flint(U).rank() == d:
            return U
    raise AssertionError("no invertible random design found")  # pragma: no cover


def _flint(M: sympy.Matrix) -> flint.fmpq_mat:
    return flint.fmpq_mat(
        M.rows, M.cols, [flint.fmpq(int(q.p), int(q.q)) for q in (sympy.Rational(x) for x in M)]
    )


def _is_symbolic(M: sympy.Matrix) -> bool:
    return any(not x.is_number for x in M)


_LINEAR_STATEMENT = (
    "the d^2 measurements u_k^T W e_j, stacked column by column, equal (I_d ⊗ U^T) vec(W); "
    "this system has rank d^2 iff U is invertible, and each probe informs about W only "
    "if u_k^T v != 0 (df/dW = (u^T v) alpha_1 alpha_2 t^2 u b^T)"
)


def linear_system(
    d: int = 2,
    *,
    design: Any = None,
    v: Any = None,
    seed: int = 0,
) -> SymbolicCheck:
    """The d^2 measurements u_k^T W e_j, stacked, are (I_d ⊗ U^T) vec(W), full rank iff U is.

    ``design`` is U (columns u_k); by default a symbolic U for d <= 2, else a random
    rational one from ``seed``. ``v`` (default symbolic) is the value vector: every probe
    needs u_k^T v != 0, because the derivative of f with respect to W on [b + t u; b] is
    (u^T v) alpha_1 alpha_2 t^2 u b^T — zero when u^T v = 0, so that answer says nothing
    about W. The check fails (``holds=False``) for a singular U or a design with some
    u_k^T v = 0, and says which.

    >>> linear_system(2).holds
    True
    >>> linear_system(2, design=[[1, 2], [2, 4]]).holds
    False
    >>> linear_system(2, design=[[1, 0], [1, 1]], v=[1, -1]).holds    # u_0^T v = 0
    False
    """
    d = _check_d(d, high=12)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    U = _default_design(d, seed) if design is None else _rational_matrix(design, d)
    symbolic = _is_symbolic(U)

    # The measurement functional m(u, b), derived once from the model (non-affine).
    gen, m = _measurement(d, affine=False)
    if m is None:
        return SymbolicCheck("thm-4.1/linear-system", _LINEAR_STATEMENT, False, _NOT_EXP)
    kron_ok, kron = _kronecker_structure(gen, m, U, d)

    det_U, det_identity, rank = _rank_of(kron, U, d, symbolic)
    full_rank = det_identity and det_U != 0 and rank == d * d

    # u_k^T v != 0 is needed: the W-gradient of the answer is (u^T v) alpha_1 alpha_2 t^2 u b^T.
    # That identity is entrywise, about one probe; it is shown at min(d, 2) (diagonal and
    # off-diagonal entries) to keep the check fast.
    grad_ok = _gradient_identity(min(d, 2))
    uv, zero_cols, blind = _blind_columns(U, v, d)
    holds = kron_ok and full_rank and grad_ok and not zero_cols
    why = []
    if not kron_ok:
        why.append("the stacked measurements are not (I ⊗ U^T) vec(W)")
    if not full_rank:
        why.append(f"U is singular (det U = {det_U}): rank(I ⊗ U^T) = {rank} < d^2 = {d * d}")
    if zero_cols:
        why.append(
            f"u_k^T v = 0 for k = {zero_cols}: on those probes df/dW = 0 "
            f"(checked from the model for k = {blind}), so U^T W is not determined"
        )
    if not grad_ok:
        why.append("the W-gradient is not (u^T v) alpha_1 alpha_2 t^2 u b^T")
    return SymbolicCheck(
        "thm-4.1/linear-system",
        _LINEAR_STATEMENT,
        holds,
        detail=(
            f"d = {d}, {'symbolic' if symbolic else 'rational'} U: Kronecker structure "
            f"{kron_ok}, det(I ⊗ U^T) = det(U)^d {det_identity}, rank {rank}; "
            f"gradient identity {grad_ok}"
        )
        + ("; " + "; ".join(why) if why else ""),
        data={
            "d": d,
            "U": U,
            "rank": rank,
            "det_U": det_U,
            "uv": uv,
            "zero_columns": zero_cols,
            "W_free_columns": blind,
        },
    )


def _kronecker_structure(
    gen: Namespace, m: sympy.Expr, U: sympy.Matrix, d: int
) -> tuple[bool, sympy.Matrix]:
    """Whether the stacked measurements are (I ⊗ U^T) vec(W), and that Kronecker product."""
    W = gen["W"]
    subs_base = {gen["t"]: 1}
    rows = []
    for j in range(d):  # vec(W) stacks columns: block j holds the measurements of column j
        for k in range(d):
            sub = dict(subs_base)
            sub.update({gen["b"][i]: int(i == j) for i in range(d)})
            sub.update({gen["u"][i]: U[i, k] for i in range(d)})
            rows.append(sympy.expand(m.xreplace(sub)))
    vecW = sympy.Matrix([W[i, j] for j in range(d) for i in range(d)])
    meas = sympy.Matrix(rows)
    K = meas.jacobian(vecW)
    kron = sympy.kronecker_product(sympy.eye(d), U.T)
    kron_ok = all(sympy.expand(x) == 0 for x in (K - kron)) and all(
        sympy.expand(x) == 0 for x in (meas - K * vecW)
    )
    return kron_ok, kron


def _rank_of(
    kron: sympy.Matrix, U: sympy.Matrix, d: int, symbolic: bool
) -> tuple[sympy.Expr, bool, int | None]:
    """det U, whether det(I ⊗ U^T) = det(U)^d, and the rank of I ⊗ U^T (None if unknown)."""
    # Full rank iff U invertible: det(I ⊗ U^T) = det(U)^d, shown symbolically, and the
    # exact rank for a rational U.
    det_U = sympy.expand(U.det())
    if symbolic:
        det_identity = sympy.expand(kron.det() - det_U**d) == 0
    else:
        det_identity = _flint(kron).det() == _flint(U).det() ** d
    if symbolic:
        rank = d * d if det_U != 0 else None
    else:
        rank = int(_flint(kron).rank())
    return det_U, det_identity, rank


def _blind_columns(U: sympy.Matrix, v: Any, d: int) -> tuple[list[Any], list[int], list[int]]:
    """u_k^T v per probe, the k with u_k^T v = 0, and those shown from the model to be W-free."""
    pn = _probe_namespace(d, affine=False)
    f = _f(pn, [pn["a"], pn["b"]])
    vv = _vec("v", d, real=True) if v is None else _rational_vector(v, d)
    uv = [sympy.expand((U[:, k].T * vv)[0]) for k in range(d)]
    zero_cols = [k for k in range(d) if uv[k] == 0]
    # For a column with u_k^T v = 0 show directly from the model that f is free of W.
    blind = []
    for k in zero_cols:
        sub = {pn["t"]: 1, **{pn["u"][i]: U[i, k] for i in range(d)}}
        sub.update({pn["v"][i]: vv[i] for i in range(d)})
        fk = f.xreplace(sub)
        if all(is_zero(sympy.diff(fk, x)) for x in pn["W"]):
            blind.append(k)
    return uv, zero_cols, blind


@functools.lru_cache(maxsize=8)
def _gradient_identity(d: int) -> bool:
    """df/dW_ij = (u^T v) alpha_1 alpha_2 t^2 u_i b_j on the probe [b + t u; b], from the model."""
    pn = _probe_namespace(d, affine=False)
    f = _f(pn, [pn["a"], pn["b"]])
    s1 = _dot(pn["a"], pn["W"] * pn["b"])
    s2 = _dot(pn["b"], pn["W"] * pn["b"])
    a1a2 = sympy.exp(s1) * sympy.exp(s2) / (sympy.exp(s1) + sympy.exp(s2)) ** 2
    uv = _dot(pn["u"], pn["v"])
    return all(
        is_zero(sympy.diff(f, pn["W"][i, j]) - uv * a1a2 * pn["t"] ** 2 * pn["u"][i] * pn["b"][j])
        for i in range(d)
        for j in range(d)
    )


# ---------------------------------------------------------------------------------------
# Step 5: the affine extension.
# ---------------------------------------------------------------------------------------


_AFFINE_STATEMENT = (
    "affine extension: [0] gives beta, [e_i] give v_i + beta, [t u_k; 0] give u_k^T c, "
    "[e_j + t u_k; e_j] give u_k^T (W e_j + c); these d^2 + 2d + 1 measurements are a "
    "full-rank linear image of (W, c, v, beta)"
)


def affine_variant(d: int = 2, *, design: Any = None, seed: int = 0) -> SymbolicCheck:
    """The affine model's d^2 + 2d + 1 measurements determine (W, c, v, beta).

    [0] gives beta; [e_i] give v_i + beta; [t u_k; 0] give u_k^T c (after the logit);
    [e_j + t u_k; e_j] give u_k^T (W e_j + c). All from the model; the linear map from
    (vec W, c, v, beta) to these numbers is shown to have full rank d^2 + 2d + 1 (by its
    determinant for a symbolic U, by exact rank for a rational one).

    >>> affine_variant(2).holds
    True
    >>> affine_variant(2, design=[[1, 1], [1, 1]]).holds
    False
    """
    d = _check_d(d, high=8)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    U = _default_design(d, seed) if design is None else _rational_matrix(design, d)
    gen, m = _measurement(d, affine=True)
    if m is None:
        return SymbolicCheck("thm-4.1/affine", _AFFINE_STATEMENT, False, _NOT_EXP)
    ns = model_symbols(d, affine=True)
    # The generic measurement is over gen's parameter symbols; rename them to ns's (same
    # names and assumptions, so they are the same SymPy symbols already).
    W, c, v, beta = ns["W"], ns["c"], ns["v"], ns["beta"]

    def probe(u: Sequence[Any], b: Sequence[Any]) -> sympy.Expr:
        sub = {gen["t"]: 1}
        sub.update({gen["u"][i]: u[i] for i in range(d)})
        sub.update({gen["b"][i]: b[i] for i in range(d)})
        return sympy.expand(m.xreplace(sub))

    zero = [0] * d
    measured: list[sympy.Expr] = [_f(ns, [zero])]
    claimed: list[sympy.Expr] = [beta]
    for i in range(d):
        e_i = [int(r == i) for r in range(d)]
        measured.append(_f(ns, [e_i]))
        claimed.append(v[i] + beta)
    for k in range(d):
        u = [U[i, k] for i in range(d)]
        measured.append(probe(u, zero))
        claimed.append(_dot(u, c))
    for j in range(d):
        e_j = [int(r == j) for r in range(d)]
        for k in range(d):
            u = [U[i, k] for i in range(d)]
            measured.append(probe(u, e_j))
            claimed.append(_dot(u, W[:, j] + c))
    forms_ok = all(is_zero(x - y) for x, y in zip(measured, claimed, strict=True))
    params = sympy.Matrix([*[W[i, j] for j in range(d) for i in range(d)], *c, *v, beta])
    meas = sympy.Matrix([sympy.expand(x) for x in measured])
    J = meas.jacobian(params)
    linear = all(sympy.expand(x) == 0 for x in (meas - J * params))
    n = d * d + 2 * d + 1
    if _is_symbolic(U):
        det_J = sympy.factor(J.det())
        det_U = sympy.expand(U.det())
        rank: int | None = n if det_J != 0 else None
        full = det_J != 0 and sympy.expand(det_J**2 - det_U ** (2 * d + 2)) == 0
    else:
        det_J = None
        rank = int(_flint(J).rank())
        full = rank == n
    holds = forms_ok and linear and full and len(measured) == query_bound(d, affine=True) == n
    return SymbolicCheck(
        "thm-4.1/affine",
        _AFFINE_STATEMENT,
        holds,
        detail=f"d = {d}, {'symbolic' if _is_symbolic(U) else 'rational'} U: "
        f"{len(measured)} measurements for {n} parameters; forms match {forms_ok}; linear "
        f"{linear}; rank {rank}" + (f"; det J = {det_J}" if det_J is not None else ""),
        data={"d": d, "U": U, "rank": rank, "jacobian": J, "measurements": len(measured)},
    )


def all_checks(d: int = 3) -> list[SymbolicCheck]:
    """Every Theorem 4.1 derivation at size d (the symbolic-design ones at min(d, 2)).

    >>> checks = all_checks(1)
    >>> len(checks), all(c.holds for c in checks)
    (12, True)
    """
    d = _check_d(d, high=8)
    small = min(d, 2)
    return [
        length_one_identity(d, affine=False),
        length_one_identity(d, affine=True),
        sigmoid_reduction(d, affine=False),
        sigmoid_reduction(d, affine=True),
        logit_identity(d, affine=False),
        logit_identity(d, affine=True),
        linear_system(small),
        linear_system(d),
        affine_variant(small),
        affine_variant(d),
        parameter_count(d, affine=False),
        parameter_count(d, affine=True),
    ]

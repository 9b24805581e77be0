"""Exact skeleton recovery of a rank-r W from 2dr - r^2 bilinear measurements (ours).

>>> import verified_attn as va
>>> from verified_attn.low_rank import learn_low_rank
>>> from verified_attn.low_rank.skeleton import skeleton_query_bound
>>> K = [[1, 0, 1, 0]]; Q = [[0, 1, -1, 2]]                 # W = K^T Q has rank 1
>>> W = [[K[0][i] * Q[0][j] for j in range(4)] for i in range(4)]
>>> oracle = va.Oracle(va.SingleHeadAttention(W, [1, 2, 0, -1]), "certified")
>>> rec = learn_low_rank(oracle, rank=1)
>>> rec.W == va.SingleHeadAttention(W, [1, 2, 0, -1]).W, rec.queries, rec.verification_queries
(True, 11, 9)
>>> skeleton_query_bound(4, 1, rank_given=True), skeleton_query_bound(4, 1)
(11, 12)

The algorithm (the documentation's theory page, docs/theory.md, section 4: "beyond the
paper") as a nested cross approximation:

* ``Z = U^T W B`` with U the invertible Thm 4.1 design (every u_i^T v != 0) and B a basis
  whose first columns b_1, b_2, ... are generic dyadic vectors; the rest are unit vectors.
* Step k -> k + 1: measure column ``z = U^T W b_{k+1}`` (its entries on the pivot rows S
  are already known: ``U_S^T W`` is known in full), take the pivot s = argmax of the
  residual ``z - Z_C Z_C[S]^{-1} z[S]`` (nonzero iff rank W B_{k+1} = k + 1), then measure
  row ``u_s^T W`` on the unit vectors outside the pivot coordinates. New measurements per
  step: (d - k) + (d - k - 1); over k = 0..r-1 that is exactly 2dr - r^2.
* ``W = C (U_S^T C)^{-1} (U_S^T W)`` with ``C = W B_r = U^{-T} Z_C``.
* Rank test (1 query): u^T W b_{k+1} for a generic u, against the skeleton's prediction.
  The residual is ``u^T (W - What_k) b_{k+1}``; it is 0 if rank W = k (then What_k = W
  exactly) and nonzero with probability one otherwise. With ``rank=None`` each failing
  test is reused as one entry of the next column, so the rank costs exactly one extra query.

Query count (learning, without rescales): with the rank given, exactly ``d + 2dr - r^2``,
the dimension of the set (the one rank test only checks the class, so it is declared a
verification phase on the oracle); with the rank found, ``d + 2dr - r^2 + [r < d]`` (the
test that passes decides the rank, so it is learning).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.design import check_design, default_design
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.low_rank.probes import Prober, dot, rational_vector
from verified_attn.probing import apply_exact, measured_array

__all__ = ["SkeletonResult", "skeleton_query_bound", "skeleton_recover"]

#: The phase of the second rank-0 test (a verification phase; see skeleton_recover).
RANK_CHECK = "rank-check"
_GENERIC_BITS = 12  # generic probe entries are j / 2^12, |j| <= 2^12: dyadic, in [-1, 1]
_EPS = float(np.finfo(np.float64).eps)


def skeleton_query_bound(d: int, rank: int, *, rank_given: bool = False) -> int:
    """Learning queries of the skeleton for a d x d W of rank r.

    d for v and 2dr - r^2 for the cross (the dimension of the rank-r set); with the rank
    to find, one rank test more unless r = d (a full-rank W has nothing left to test).
    With the rank given, that test is verification, not learning.

    >>> skeleton_query_bound(5, 2), skeleton_query_bound(64, 4), skeleton_query_bound(3, 3)
    (22, 561, 12)
    >>> skeleton_query_bound(5, 2, rank_given=True), skeleton_query_bound(64, 4, rank_given=True)
    (21, 560)
    """
    cross = d + 2 * d * rank - rank * rank
    return cross if rank_given else cross + (1 if rank < d else 0)


@dataclass
class SkeletonResult:
    """What the skeleton learned, in the oracle's arithmetic, and how."""

    W: np.ndarray
    v: np.ndarray
    rank: int
    pivots: list[int]
    basis: list[list[float]]  # b_1..b_k: the generic columns of the cross
    U: list[list[Fraction]]  # the Thm 4.1 design whose columns u_i probe the rows
    next_b: list[float] | None = None  # b_{k+1}: the column that showed rank W = k
    tests: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Certified mode: the zero decisions taken on balls that contain 0 without being 0
    #: (what the rank rests on; empty when every decision was a proof).
    assumed_zero: list[str] = field(default_factory=list)


def _draw_generic(rng: np.random.Generator, d: int) -> np.ndarray:
    scale = 2**_GENERIC_BITS
    return rng.integers(-scale, scale + 1, d).astype(np.float64) / scale


def _fmpq_mat(rows: np.ndarray) -> flint.fmpq_mat:
    rows = np.asarray(rows, dtype=np.float64)
    n, m = rows.shape
    ints = _on_grid(rows)
    if ints is not None:  # the usual case: one integer matrix over 2^12, no Fractions
        return flint.fmpq_mat(flint.fmpz_mat(n, m, ints.ravel().tolist())) * flint.fmpq(
            1, 2**_GENERIC_BITS
        )
    vals = []
    for x in rows.ravel().tolist():
        num, den = float(x).as_integer_ratio()
        vals.append(flint.fmpq(num, den))
    return flint.fmpq_mat(n, m, vals)


def _on_grid(x: np.ndarray) -> np.ndarray | None:
    """x * 2^12 as exact int64 if every entry is a multiple of 2^-12 below 2^40, else None."""
    y = np.asarray(x, dtype=np.float64) * 2**_GENERIC_BITS  # exact: a power of two
    if y.size and not (np.abs(y).max() < 2**40 and np.array_equal(y, np.round(y))):
        return None
    return y.astype(np.int64)


class _Coordinates:
    """g = U^{-1} u exactly, as float64 (u a test vector on the 2^-12 grid).

    U^{-1} is integral and u dyadic, so g is on the same grid: it is computed in float
    with a float inverse made once (for the default design from its structure, O(d^2)),
    rounded to the grid, and accepted only if the integer product ``U (2^12 g) == 2^12 u``
    holds exactly (computed in float64, exact below 2^53); otherwise exactly with the
    rational inverse (made only then).
    """

    def __init__(self, U: np.ndarray, design: Any) -> None:
        self.design = design
        self.U_f = np.asarray(U, dtype=np.float64)
        self.inv: np.ndarray | None = None
        if np.array_equal(self.U_f, np.round(self.U_f)) and np.abs(self.U_f).max() <= 1:
            fast = design.solve_float(np.eye(len(U)))  # U^{-T}, exactly (0/1 entries)
            self.inv = fast.T if fast is not None else np.linalg.inv(np.asarray(U, np.float64))

    @functools.cached_property
    def u_inv(self) -> flint.fmpq_mat:
        return self.design.U_inverse_flint()

    def __call__(self, u: np.ndarray) -> np.ndarray:
        u_grid = _on_grid(u)
        if self.inv is not None and u_grid is not None:
            G = np.round((self.inv @ u) * 2**_GENERIC_BITS)
            # U has entries in {-1, 0, 1} and G integer entries: U G in float64 (BLAS) is
            # exact while d * max |G| < 2^53 (every partial sum is an integer below 2^53).
            if len(G) * np.abs(G).max() < 2**53 and np.array_equal(self.U_f @ G, u_grid):
                return G / 2**_GENERIC_BITS + 0.0  # + 0.0: no negative zeros
        return _exact_floats(self.u_inv * _fmpq_mat(u.reshape(-1, 1)))


def _solve(arith: Arithmetic, A: np.ndarray, Bm: np.ndarray) -> np.ndarray:
    """A^{-1} Bm for a small square matrix A of measured numbers."""
    if arith.name == "float":
        return np.linalg.solve(np.asarray(A, np.float64), np.asarray(Bm, np.float64))
    if arith.name == "certified":
        try:
            X = flint.arb_mat(A.tolist()).solve(flint.arb_mat(Bm.tolist()))
        except (ZeroDivisionError, ValueError) as exc:
            raise PrecisionExhausted(
                f"at {arith.precision} bits the pivot block U_S^T C cannot be certified "
                "invertible; raise the oracle's precision"
            ) from exc
        return np.array(
            [[X[i, j] for j in range(X.ncols())] for i in range(X.nrows())], dtype=object
        )
    X = sympy.Matrix(A.tolist()).LUsolve(sympy.Matrix(Bm.tolist()))
    return np.array(X.tolist(), dtype=object)


def _matmul(arith: Arithmetic, A: np.ndarray, Bm: np.ndarray) -> np.ndarray:
    if arith.name == "float":
        return np.asarray(A, np.float64) @ np.asarray(Bm, np.float64)
    if arith.name == "certified":
        X = flint.arb_mat(A.tolist()) * flint.arb_mat(Bm.tolist())
        return np.array(
            [[X[i, j] for j in range(X.ncols())] for i in range(X.nrows())], dtype=object
        )
    out = np.empty((A.shape[0], Bm.shape[1]), dtype=object)
    for i in range(A.shape[0]):
        for j in range(Bm.shape[1]):
            out[i, j] = sum((A[i, t] * Bm[t, j] for t in range(A.shape[1])), sympy.Integer(0))
    return out


def _zero(arith: Arithmetic, d: int) -> np.ndarray:
    return measured_array(arith, [arith.rational(Fraction(0))] * d)


class _Decider:
    """Zero / nonzero decisions for measured numbers, per arithmetic.

    exact: decided exactly. certified: nonzero only if the ball excludes 0 (a proof);
    a ball containing 0 counts as zero only as an assumption, recorded in ``assumed``
    (the learner states it and verifies at a raised precision). float:
    |x| <= rank_tol * scale counts as zero.
    """

    def __init__(self, arith: Arithmetic, rank_tol: float) -> None:
        self.arith = arith
        self.rank_tol = rank_tol
        self.assumed: list[str] = []

    def nonzero(self, x: Any, scale: float, what: str = "a residual") -> bool:
        if self.arith.name == "float":
            return abs(float(x)) > self.rank_tol * scale
        s = self.arith.sign(x)
        if s is None:
            self.assumed.append(f"{what} {x} (a ball containing 0) is 0")
        return s not in (0, None)


def skeleton_recover(
    prober: Prober,
    rank: int | None,
    *,
    seed: int,
    rank_tol: float,
) -> SkeletonResult:
    """Run the nested cross; ``rank=None`` finds the rank adaptively. Call in context."""
    arith = prober.arith
    oracle = prober.oracle
    d = oracle.d
    v = prober.v
    adaptive = rank is None
    rng = np.random.default_rng(seed)
    decide = _Decider(arith, rank_tol)
    design = default_design(arith, v, d, False)
    check_design(arith, design, v)
    U = design.U_float  # columns u_i (0/1 entries, exact)
    # g = U^{-1} u expresses u^T W b in z coordinates (U^{-1} exact, made only if needed)
    coordinates = _Coordinates(U, design)
    # The probe vectors that recur, named once: the design columns u_i and the unit e_j.
    ids = {"U": prober.intern(U.T), "e": prober.intern(np.eye(d))}
    v_mag = max(arith.magnitude(x) for x in v)

    basis: list[np.ndarray] = []  # generic columns b_1..b_k
    S: list[int] = []  # pivot rows
    Zc: list[np.ndarray] = []  # columns z^(j) = U^T W b_j (length d, arith numbers)
    R = np.empty((0, d), dtype=np.float64 if arith.name == "float" else object)
    tests: list[dict[str, Any]] = []
    notes: list[str] = []
    k = 0
    b = None
    while k < d:
        b = _draw_basis_vector(rng, basis, d)
        b_ar = rational_vector(arith, b)
        zS = _matmul(arith, R, b_ar.reshape(d, 1))[:, 0] if k else measured_array(arith, [])
        zhat = _predict_column(arith, Zc, S, zS, d)
        reuse: tuple[Any, np.ndarray] | None = None
        if adaptive or k == rank:
            u = _draw_test_vector(rng, arith, v, v_mag, d)
            # With the rank given, the test only checks the class (rank W <= r): it is
            # verification. With the rank to find, its answer decides the rank: learning.
            t = prober.measure(u[None, :], b[None, :], "rank", verification=not adaptive)[0]
            g = coordinates(u)
            pred = dot(arith, g, zhat)
            rho = t - pred
            scale = _residual_scale(arith, t, g, zhat, v_mag)
            test = {"k": k, "u": u.tolist(), "b": b.tolist(), "measured": t}
            test.update(predicted=pred, residual=rho)
            tests.append(test)
            zero = not decide.nonzero(rho, scale, f"the rank-{k} test's residual")
            if zero and adaptive and k == 0:
                # "W = 0" from one sample: checked on a second test vector (see there).
                u2 = _draw_test_vector(rng, arith, v, v_mag, d)
                zero = _rank_zero_check(prober, (coordinates, decide), u2, b, pred, tests, notes)
            if zero:
                test["passed"] = True
                break
            test["passed"] = False
            if k == rank:
                raise _rank_exceeded(rank, u, b, t, pred, rho)
            reuse = (t, g)
        z = _measure_column(prober, ids, S, zS, b, reuse, d)
        e, s, col_scale = _largest_residual(arith, z, zhat, S, v_mag)
        if not decide.nonzero(e[s], col_scale, f"the largest residual of column b_{k + 1}"):
            notes.append(_rank_below_given(reuse, k, rank, d))
            break
        basis.append(b)
        S.append(s)
        Zc.append(z)
        R = _append_row(prober, arith, ids, basis, Zc, R, s, d)
        k += 1
        b = None
    W = _assemble(arith, Zc, S, R, d, design)
    basis_lists, U_lists = [bj.tolist() for bj in basis], [list(row) for row in design.U]
    last_b = None if b is None else b.tolist()
    return SkeletonResult(W, v, k, S, basis_lists, U_lists, last_b, tests, notes, decide.assumed)


def _residual_scale(arith: Arithmetic, t: Any, g: np.ndarray, zhat: Any, v_mag: float) -> float:
    """The scale the rank test's residual u^T W b - prediction is judged against."""
    noise = 1e4 * _EPS * (1 + float(np.abs(g).sum()))
    return max(
        arith.magnitude(t),
        float(np.abs(g) @ _magnitudes(arith, zhat)),
        noise * v_mag,
    )


def _rank_zero_check(
    prober: Prober,
    judges: tuple[Any, _Decider],
    u2: np.ndarray,
    b: np.ndarray,
    pred: Any,
    tests: list[dict[str, Any]],
    notes: list[str],
) -> bool:
    """Whether W b = 0 holds on a second test vector u2 (a verification query).

    "W = 0" from one bilinear sample: u^T W b = 0 also when u lies in W's left null space
    (on the 2^-12 grid that has probability about 2^-13 per line at small d). A second
    test vector on the same b checks the claim; it is verification (the learning count
    stays d + 1). If it is nonzero, W b != 0 and the first test's answer, a true
    measurement of u^T W b, is reused as one entry of the column b_1, as a failing test is.
    """
    coordinates, decide = judges
    arith, k = prober.arith, 0
    v_mag = max(arith.magnitude(x) for x in prober.v)
    t2 = prober.measure(u2[None, :], b[None, :], RANK_CHECK, verification=True)[0]
    g2 = coordinates(u2)
    noise2 = 1e4 * _EPS * (1 + float(np.abs(g2).sum()))
    check = {"k": k, "u": u2.tolist(), "b": b.tolist(), "measured": t2,
             "predicted": pred, "residual": t2 - pred, "phase": RANK_CHECK}
    tests.append(check)
    zero = not decide.nonzero(
        t2 - pred, max(arith.magnitude(t2), noise2 * v_mag),
        f"the rank-{k} check's residual",
    )
    check["passed"] = zero
    if not zero:
        notes.append(
            "the rank-0 test's u lay in W's left null space (u^T W b = 0); the "
            "check with a second test vector showed W b != 0"
        )
    return zero


def _rank_exceeded(
    rank: int, u: np.ndarray, b: np.ndarray, t: Any, pred: Any, rho: Any
) -> ModelClassMismatch:
    """The error of a rank test that refutes rank W <= rank, with its query."""
    return ModelClassMismatch(
        f"the oracle's W has rank > {rank}: for u = {u.tolist()[:4]}..., b = "
        f"{b.tolist()[:4]}... the query [b + u; b] gives u^T W b = {t}, while the "
        f"rank-{rank} skeleton (exact for every W of rank <= {rank}) predicts "
        f"{pred}; the residual {rho} is nonzero, so rank W > {rank}",
        query=np.stack([b + u, b]),
        observed=t,
        expected=pred,
    )


def _largest_residual(
    arith: Arithmetic, z: Any, zhat: Any, S: list[int], v_mag: float
) -> tuple[Any, int, float]:
    """The new column's residual, its largest entry off the pivots, and its scale."""
    d = len(z)
    e = z - zhat
    e_mag = _magnitudes(arith, e)
    e_mag[S] = 0.0
    s = int(np.argmax(e_mag))
    col_scale = max(float(_magnitudes(arith, z).max()), 1e4 * _EPS * v_mag * (1 + d))
    return e, s, col_scale


def _rank_below_given(reuse: Any, k: int, rank: int | None, d: int) -> str:
    """The note of a generic column the skeleton explains: rank W = k < the given rank.

    The whole new column is explained by the skeleton (a stronger rank certificate than one
    test query); with a failed rank test to reuse, no entry shown nonzero is a precision
    failure instead.
    """
    if reuse is not None:
        raise PrecisionExhausted(
            "the rank test's residual is certainly nonzero but no entry of the new "
            "column's residual can be shown nonzero at this precision"
        )
    return (
        f"rank found {k} < the given rank {rank}: the generic column b_{k + 1} adds "
        f"nothing ({d - k} queries spent on it certify rank {k})"
    )


def _exact_floats(m: flint.fmpq_mat) -> np.ndarray:
    """The entries of an exact matrix as float64, checked to be exact (dyadic, small)."""
    out = []
    for q in m.entries():
        f = Fraction(int(q.p), int(q.q))
        if Fraction(float(f)) != f:  # pragma: no cover - U^{-1} is integral, u dyadic
            raise PrecisionExhausted(f"design coefficient {f} is not exactly a float64")
        out.append(float(f))
    return np.array(out)


def _magnitudes(arith: Arithmetic, x: np.ndarray) -> np.ndarray:
    """|x_i| (float mode) or the arithmetic's magnitudes, as a float64 array."""
    if arith.name == "float":
        return np.abs(np.asarray(x, dtype=np.float64))
    return np.array([arith.magnitude(xi) for xi in x], dtype=np.float64)


def _draw_basis_vector(rng: np.random.Generator, basis: list[np.ndarray], d: int) -> np.ndarray:
    """A generic b_{k+1} whose leading (k+1) x (k+1) block with b_1..b_k is invertible.

    [b_1..b_{k+1}, e_{k+2}..e_d] is then a basis (checked exactly; redrawn, at no query
    cost, in the unlikely case it is not).
    """
    k = len(basis)
    for _ in range(100):
        b = _draw_generic(rng, d)
        if k + 1 > d:
            return b
        block = np.array([bj[: k + 1] for bj in [*basis, b]]).T
        if _fmpq_mat(block).rank() == k + 1:
            return b
    raise NotIdentifiable("could not draw a generic basis vector in 100 tries")  # pragma: no cover


def _draw_test_vector(
    rng: np.random.Generator, arith: Arithmetic, v: np.ndarray, v_mag: float, d: int
) -> np.ndarray:
    """A generic u with |u^T v| not small (the probe divides by u^T v); no queries."""
    best, best_mag = None, -1.0
    for _ in range(64):
        u = _draw_generic(rng, d)
        mag = arith.magnitude(dot(arith, u, v))
        if arith.sign(dot(arith, u, v)) not in (0, None) and mag > best_mag:
            best, best_mag = u, mag
        if best_mag >= v_mag / 8:
            break
    if best is None:  # pragma: no cover - v != 0 is checked before
        raise NotIdentifiable("no test vector with u^T v != 0 found")
    return best


def _predict_column(
    arith: Arithmetic, Zc: list[np.ndarray], S: list[int], zS: np.ndarray, d: int
) -> np.ndarray:
    """Z_C Z_C[S]^{-1} z[S]: the column the rank-k skeleton predicts."""
    if not Zc:
        return _zero(arith, d)
    Zmat = _columns(Zc)
    coef = _solve(arith, Zmat[S, :], np.asarray(zS).reshape(-1, 1))
    return _matmul(arith, Zmat, coef)[:, 0]


def _measure_column(
    prober: Prober,
    ids: dict[str, np.ndarray],
    S: list[int],
    zS: np.ndarray,
    b: np.ndarray,
    reuse: tuple[Any, np.ndarray] | None,
    d: int,
) -> np.ndarray:
    """z = U^T W b: entries on S known, one entry from the reused test, the rest measured."""
    arith = prober.arith
    pivots = set(S)
    free = [i for i in range(d) if i not in pivots]
    skip = None
    if reuse is not None:
        _, g = reuse
        mag = np.abs(np.asarray(g, dtype=np.float64))
        mag[S] = 0.0
        if mag.max() > 0:
            skip = int(np.argmax(mag))  # the first free row of largest |g_i|, as before
    todo = [i for i in free if i != skip]
    # The design columns u_i are interned once (by the caller); b is new for each column.
    vals = prober.measure_ids(ids["U"][todo], prober.intern(b[None, :])[0], "C")
    z = _zero(arith, d)
    z[todo] = vals
    if S:
        z[S] = zS
    if skip is not None:
        assert reuse is not None
        t, g = reuse
        rest = dot(arith, np.where(np.arange(d) == skip, 0.0, g), z)
        z[skip] = (t - rest) / arith.rational(Fraction(float(g[skip])))
    return z


def _append_row(
    prober: Prober,
    arith: Arithmetic,
    ids: dict[str, np.ndarray],
    basis: list[np.ndarray],
    Zc: list[np.ndarray],
    R: np.ndarray,
    s: int,
    d: int,
) -> np.ndarray:
    """The full row w = u_s^T W, from u_s^T W e_j (j > k, measured) and u_s^T W b_j = z_s^(j).

    With P = {1..k+1} the pivot coordinates: w[P] A + w[P^c] G = z_s, where
    ``A = B[P, :]`` (invertible by the choice of b's) and ``G = B[P^c, :]``.
    """
    k1 = len(basis)
    rest = list(range(k1, d))
    measured = prober.measure_ids(ids["U"][s], ids["e"][k1:], "R")  # u_s; e_j, j > k
    Bmat = np.array(basis).T  # d x (k+1)
    if arith.name == "float":
        # w[P] A = z_s - w[P^c] G, solved in float (A = B[P, :] is generic and well
        # conditioned; the entries are measured floats, so an exact inverse buys nothing).
        zs_f = np.array([float(z[s]) for z in Zc])
        w_rest_f = np.asarray(measured, dtype=np.float64)
        rhs_f = zs_f - w_rest_f @ Bmat[k1:] if rest else zs_f
        row_f = np.empty(d)
        row_f[:k1] = np.linalg.solve(Bmat[:k1, :].T, rhs_f)
        row_f[k1:] = w_rest_f
        return np.vstack([R, row_f[None, :]]) if R.size else row_f[None, :]
    zs = measured_array(arith, [z[s] for z in Zc]).reshape(1, k1)
    w_rest = measured_array(arith, list(measured)).reshape(1, len(rest))
    if rest:
        G = measured_array(arith, [rational_vector(arith, Bmat[i]) for i in rest]).reshape(
            len(rest), k1
        )
        rhs = zs - _matmul(arith, w_rest, G)
    else:
        rhs = zs
    A_inv = _fmpq_mat(Bmat[:k1, :]).inv()  # exact (k+1) x (k+1) inverse
    w_P = apply_exact(arith, A_inv.transpose(), rhs.T).T  # rhs A^{-1} = (A^{-T} rhs^T)^T
    row = _zero(arith, d)
    for j in range(k1):
        row[j] = w_P[0, j]
    for j, x in zip(rest, w_rest[0], strict=True):
        row[j] = x
    return np.vstack([R, row.reshape(1, d)]) if R.size else row.reshape(1, d)


def _columns(Zc: list[np.ndarray]) -> np.ndarray:
    """The columns z^(j) as one d x k array (float64, or object for balls/rationals)."""
    if Zc[0].dtype != object:
        return np.column_stack(Zc)
    out = np.empty((len(Zc[0]), len(Zc)), dtype=object)
    for j, z in enumerate(Zc):
        out[:, j] = z
    return out


def _assemble(
    arith: Arithmetic,
    Zc: list[np.ndarray],
    S: list[int],
    R: np.ndarray,
    d: int,
    design: Any,
) -> np.ndarray:
    """W = C (U_S^T C)^{-1} (U_S^T W) with C = U^{-T} Z_C (and W = 0 at rank 0)."""
    if not Zc:
        return (
            np.array([[arith.rational(Fraction(0))] * d for _ in range(d)], dtype=object)
            if (arith.name != "float")
            else np.zeros((d, d))
        )
    Zmat = _columns(Zc)
    fast = design.solve_float(Zmat) if arith.name == "float" else None
    C = fast if fast is not None else apply_exact(arith, design.U_inverse_flint().transpose(), Zmat)
    X = _solve(arith, Zmat[S, :], R)
    return _matmul(arith, C, X)

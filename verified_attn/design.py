"""The single-head probe design every room uses: which queries Theorem 4.1's learner asks.

>>> from fractions import Fraction
>>> from verified_attn.arithmetic import get_arithmetic
>>> from verified_attn.design import default_design
>>> arith = get_arithmetic("exact")
>>> design = default_design(arith, [Fraction(1), Fraction(0), Fraction(8)], 3, affine=False)
>>> design.U          # u_k = e_k, or e_k + e_p (p = argmax |v_i|) where |v_k| < |v_p| / 4
[[Fraction(1, 1), Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1), Fraction(0, 1)], [Fraction(1, 1), Fraction(1, 1), Fraction(1, 1)]]
>>> design.w_query(0, 1).tolist()     # [e_j + t u_k; e_j] for j = 0, k = 1, t = 1
[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]

Length-1 queries [e_i] measure v. For a rational invertible design U = [u_1..u_d] with
every u_k^T v != 0, the length-2 probe [e_j + t u_k; e_j] has softmax weight
``alpha_1 = sigmoid(t u_k^T W e_j)`` and answer ``f = v_j + alpha_1 t u_k^T v``, so each
answer gives one entry of U^T W. The affine model adds [0] (beta) and [t u_k; 0] (c).
Every query is an exact dyadic rational where the design allows (so float64 arrays carry
the exact queries). The theory is in the documentation's theory page (docs/theory.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic, to_fraction
from verified_attn.errors import InvalidArgument, NotIdentifiable, PrecisionExhausted

__all__ = [
    "SingleHeadDesign",
    "check_design",
    "default_design",
    "design_queries",
    "exact_array",
    "is_power_of_two",
    "label_probe_scales",
    "largest_dyadic_scale",
    "noisy_design",
    "paper_noisy_queries",
    "unit_query",
    "user_design",
    "uv",
]


@dataclass
class SingleHeadDesign:
    """The exact rational design: columns ``U[:, k] = u_k`` and probe scales.

    ``scales[k][j]`` is the t of the query [a e_j + (t / a) u_k; a e_j], whose score
    difference is ``t u_k^T W e_j`` whatever the anchor a; ``c_scales[k]`` is the t of
    [t u_k; 0] (affine only). ``anchor`` (a power of two, 1 unless set) shrinks the
    reference token's value ``a v_j`` against the probe's ``(t / a) u_k^T v``: a float box
    rounds an answer to its magnitude, and ``v_j`` enters the decoded entry unscaled, so
    the float learner anchors at 1/8 (see ``FLOAT_ANCHOR`` in the single-head learner).
    All are exact rationals. Change a scale only through :meth:`set_scale` /
    :meth:`set_c_scale`: the design caches float views of them.
    """

    d: int
    affine: bool
    U: list[list[Fraction]]  # U[i][k]: row i, column k
    scales: list[list[Fraction]]
    c_scales: list[Fraction] | None = None
    anchor: Fraction = Fraction(1)

    def __post_init__(self) -> None:
        # Float views, built lazily (or given by the constructors below, which know them):
        # _t[k, j] = float(scales[k][j]) and whether it is a power of two; _u_int[k]: column
        # k has small-integer entries (so the probes are exact float64 arrays).
        self._t: np.ndarray | None = None
        self._t_pow2: np.ndarray | None = None
        self._u_int: np.ndarray | None = None
        # The default design's structure U = I + e_p s^T (s_p = 0), if it is one: then
        # U^{-T} M = M - s (e_p^T M) exactly, with no d x d rational inverse.
        self._mix: tuple[int, np.ndarray] | None = None

    @functools.cached_property
    def U_float(self) -> np.ndarray:
        """U in float64 (exact: the default design has entries 0 and 1)."""
        return np.array([[float(q) for q in row] for row in self.U], dtype=np.float64)

    @property
    def U_flint(self) -> flint.fmpq_mat:
        d = self.d
        if self._mix is not None:  # the default design: 0/1 integers, built in one pass
            ints = self.U_float.astype(np.int64).ravel().tolist()
            return flint.fmpq_mat(flint.fmpz_mat(d, d, ints))
        return flint.fmpq_mat(
            d, d, [flint.fmpq(q.numerator, q.denominator) for row in self.U for q in row]
        )

    def U_inverse_flint(self) -> flint.fmpq_mat:
        """``U^{-1}``, exact: ``I - e_p s^T`` for the default design (no elimination), else inv()."""
        if self._mix is None:
            return self.U_flint.inv()
        p, s = self._mix
        inv = np.eye(self.d, dtype=np.int64)
        inv[p, :] -= s.astype(np.int64)
        return flint.fmpq_mat(flint.fmpz_mat(self.d, self.d, inv.ravel().tolist()))

    def solve_float(self, M: np.ndarray) -> np.ndarray | None:
        """``U^{-T} M`` in float64 for the default design's structure (None for other designs).

        With ``U = I + e_p s^T`` and s_p = 0, ``U^{-T} = I - s e_p^T``, so each entry is one
        float subtraction ``M[k] - s_k M[p]`` (s_k in {0, 1}): the rounding of the dense
        product with the exact inverse, at O(d^2) cost instead of a d x d rational matrix.
        """
        if self._mix is None:
            return None
        p, s = self._mix
        M = np.asarray(M, dtype=np.float64)
        return M - s[:, None] * M[p][None, :]

    def column(self, k: int) -> list[Fraction]:
        return [self.U[i][k] for i in range(self.d)]

    def set_scale(self, k: int, j: int, t: Fraction) -> None:
        """Set the t of the W probe (k, j), its score scale (keeps the float views in step)."""
        self.scales[k][j] = t
        if self._t is not None and self._t_pow2 is not None:
            self._t[k, j] = float(t)
            self._t_pow2[k, j] = is_power_of_two(t)

    def set_c_scale(self, k: int, t: Fraction) -> None:
        assert self.c_scales is not None
        self.c_scales[k] = t

    def scales_float(self) -> np.ndarray:
        """The W probe scales as a (d, d) float64 array (read-only view; k, j indexed)."""
        self._scale_views()
        assert self._t is not None
        view = self._t.view()
        view.flags.writeable = False
        return view

    def _scale_views(self) -> None:
        if self._t is None or self._t_pow2 is None:
            self._t = np.array([[float(t) for t in row] for row in self.scales], dtype=np.float64)
            self._t_pow2 = np.array(
                [[is_power_of_two(t) for t in row] for row in self.scales], dtype=bool
            )

    def w_query(self, j: int, k: int) -> np.ndarray:
        """[a e_j + (t / a) u_k; a e_j] as an exact (dyadic) float array, or an object array."""
        return self._pair(k, self.scales[k][j], j)

    def w_queries(self, k: int) -> np.ndarray | list[np.ndarray]:
        """All d probes for design column k, j = 0..d-1 (one (d, 2, d) array if dyadic)."""
        if not self._dyadic(k):
            return [self.w_query(j, k) for j in range(self.d)]
        assert self._t is not None
        u = self.U_float[:, k]
        a = float(self.anchor)  # a power of two: t / a and a are exact
        out = np.zeros((self.d, 2, self.d))
        np.multiply(self._t[k][:, None] / a, u[None, :], out=out[:, 0, :])
        idx = np.arange(self.d)
        out[idx, 0, idx] += a
        out[idx, 1, idx] = a
        return out

    def c_query(self, k: int) -> np.ndarray:
        assert self.c_scales is not None
        return self._pair(k, self.c_scales[k], None)

    def _dyadic(self, k: int) -> bool:
        # Small-integer u_k and power-of-two scales: every probe entry is an exact float64,
        # so float arrays carry the exact rational queries (checked, not assumed).
        if self._u_int is None:
            self._u_int = np.array(
                [
                    all(q.denominator == 1 and -(2**20) < q < 2**20 for q in self.column(c))
                    for c in range(self.d)
                ],
                dtype=bool,
            )
        self._scale_views()
        assert self._t_pow2 is not None
        anchored = self.anchor == 1 or is_power_of_two(self.anchor)
        return bool(self._u_int[k]) and bool(self._t_pow2[k].all()) and anchored

    def _pair(self, k: int, t: Fraction, j: int | None) -> np.ndarray:
        a = self.anchor if j is not None else Fraction(1)
        top = [t / a * u for u in self.column(k)]
        bottom = [Fraction(0)] * self.d
        if j is not None:
            top[j] += a
            bottom[j] = a
        return exact_array([top, bottom])


_ZERO = Fraction(0)
_ONE = Fraction(1)


def _unit_scale_design(
    d: int, affine: bool, U: list[list[Fraction]], U_float: np.ndarray | None, u_int: Any
) -> SingleHeadDesign:
    """A design with every probe scale 1, its float views given (no d^2 Fraction work)."""
    design = SingleHeadDesign(
        d, affine, U, [[_ONE] * d for _ in range(d)], [_ONE] * d if affine else None
    )
    design._t = np.ones((d, d))
    design._t_pow2 = np.ones((d, d), dtype=bool)
    if u_int is not None:
        design._u_int = np.asarray(u_int, dtype=bool)
    if U_float is not None:
        design.__dict__["U_float"] = U_float  # the cached_property's slot
    return design


def is_power_of_two(t: Fraction) -> bool:
    n, m = t.numerator, t.denominator
    return n > 0 and (n & (n - 1)) == 0 and (m & (m - 1)) == 0 and n < 2**20 and m < 2**900


def largest_dyadic_scale(x: Fraction) -> Fraction:
    """The largest power of two b with b^2 x <= 1 (x > 0), exactly: the noisy design's probe
    scale for x = ||u_k||_2^2 w_bound^2.

    >>> largest_dyadic_scale(Fraction(9)), largest_dyadic_scale(Fraction(1, 16))
    (Fraction(1, 4), Fraction(4, 1))
    """
    # Start near the answer from the bit lengths (so a huge or tiny x costs no loop).
    k = (x.denominator.bit_length() - x.numerator.bit_length()) // 2
    b = Fraction(2) ** k
    while b * b * x > 1:
        b /= 2
    while 4 * b * b * x <= 1:
        b *= 2
    return b


def noisy_design(v_hat: list[Fraction], name: str) -> list[list[Fraction]]:
    """The noisy learner's design U (``U[i][k]``, columns u_k) from the estimates v_hat:
    u_k = e_k ("paper"), or, for "norm", e_k + e_p (p = argmax |v_hat_i|) where
    |v_hat_k| < |v_hat_p| / 4.

    >>> noisy_design([Fraction(1), Fraction(8)], "norm")
    [[Fraction(1, 1), Fraction(0, 1)], [Fraction(1, 1), Fraction(1, 1)]]
    """
    d = len(v_hat)
    U = [[Fraction(int(i == k)) for k in range(d)] for i in range(d)]
    if name == "norm":
        p = max(range(d), key=lambda i: abs(v_hat[i]))
        for k in range(d):
            if k != p and 4 * abs(v_hat[k]) < abs(v_hat[p]):
                U[p][k] = Fraction(1)
    return U


def paper_noisy_queries(d: int, a: Fraction, b: Fraction) -> list[list[list[Fraction]]]:
    """The paper's d^2 + d noisy-design queries, exactly: [e_i], then [b e_i + a e_j; a e_j].

    >>> paper_noisy_queries(1, Fraction(1, 2), Fraction(1))
    [[[Fraction(1, 1)]], [[Fraction(3, 2)], [Fraction(1, 2)]]]
    """
    out = [[[Fraction(int(t == i)) for t in range(d)]] for i in range(d)]
    for i in range(d):
        for j in range(d):
            top = [b * int(t == i) + a * int(t == j) for t in range(d)]
            out.append([top, [a * int(t == j) for t in range(d)]])
    return out


def label_probe_scales(
    ri: tuple[Fraction, Fraction], rj: tuple[Fraction, Fraction], wbar: Fraction
) -> tuple[Fraction, Fraction]:
    """The label design's token weight a and bisection range [0, B] for W_ij, from intervals
    holding the ratios r_i, r_j (v_i / |v_p|) and the bound w_bound on ||W||_F.

    |a| is the largest power of two with 8 a^2 w_bound |r_j| <= |r_i| (so the label flips
    inside [0, B]), its sign makes a r_j and r_i opposite; B is the power of two with
    B |a| w_bound <= 1 < 2 B |a| w_bound.

    >>> label_probe_scales((Fraction(1), Fraction(1)), (Fraction(1), Fraction(1)), Fraction(1))
    (Fraction(-1, 4), Fraction(4, 1))
    """
    ri_lo = min(abs(ri[0]), abs(ri[1]))
    rj_hi = max(abs(rj[0]), abs(rj[1]))
    a = Fraction(1)
    while 8 * a * a * wbar * rj_hi > ri_lo:
        a /= 2
    if (ri[0] > 0) == (rj[0] > 0):
        a = -a
    B = Fraction(1)
    while B * abs(a) * wbar > 1:
        B /= 2
    while 2 * B * abs(a) * wbar <= 1:
        B *= 2
    return a, B


def exact_array(rows: list[list[Fraction]]) -> np.ndarray:
    """A float64 array when every entry is exactly a float (dyadic), else Fractions."""
    flat = [q for row in rows for q in row]
    if all(Fraction(float(q)) == q for q in flat):
        return np.array([[float(q) for q in row] for row in rows], dtype=np.float64)
    return np.array(rows, dtype=object)


def design_queries(U: list[list[Fraction]], d: int) -> list[tuple[Any, list[list[Fraction]]]]:
    """The d^2 + d queries of a design U, each with what it measures, as exact rationals.

    ``("v", i)``: the length-1 query [e_i]; ``("W", k, j)``: the probe [e_j + u_k; e_j] at
    scale 1.

    >>> U = [[Fraction(1), Fraction(0)], [Fraction(1), Fraction(1)]]
    >>> queries = design_queries(U, 2)
    >>> queries[0][0], queries[3]
    (('v', 0), (('W', 0, 1), [[Fraction(1, 1), Fraction(2, 1)], [Fraction(0, 1), Fraction(1, 1)]]))
    """
    out: list[tuple[Any, list[list[Fraction]]]] = []
    for i in range(d):
        out.append((("v", i), [[Fraction(int(t == i)) for t in range(d)]]))
    for k in range(d):
        for j in range(d):
            e = [Fraction(int(t == j)) for t in range(d)]
            out.append((("W", k, j), [[e[t] + U[t][k] for t in range(d)], e]))
    return out


def unit_query(d: int, i: int | None) -> np.ndarray:
    """The length-1 query [e_i] (or [0] for i = None) as a (1, d) float array."""
    x = np.zeros((1, d))
    if i is not None:
        x[0, i] = 1.0
    return x


def uv(arith: Arithmetic, design: SingleHeadDesign, v: Any) -> np.ndarray:
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


def default_design(arith: Arithmetic, v: Any, d: int, affine: bool) -> SingleHeadDesign:
    """u_k = e_k where |v_k| >= |v_p| / 4, else e_k + e_p, with p = argmax |v_i|.

    Then |u_k^T v| >= |v_p| * 3/4 or >= |v_p| / 4 for every k, and U = I + e_p s^T is
    invertible with det 1. Zero coordinates of v are handled by the mixing.
    """
    mags = [arith.magnitude(x) for x in v]
    p = int(np.argmax(mags))
    # U[i][k] (shared, immutable Fraction objects: d^2 references, not d^2 Fractions).
    U = [[_ZERO] * d for _ in range(d)]
    U_float = np.eye(d)
    mix = np.zeros(d)
    for k in range(d):
        U[k][k] = _ONE
        if k != p and 4 * mags[k] < mags[p]:
            U[p][k] = _ONE
            U_float[p, k] = 1.0
            mix[k] = 1.0
    design = _unit_scale_design(d, affine, U, U_float, np.ones(d, dtype=bool))
    design._mix = (p, mix)
    return design


def user_design(design: Any, d: int, affine: bool) -> SingleHeadDesign:
    """A user's invertible rational d x d matrix U as a design (unit probe scales)."""
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
    return _unit_scale_design(d, affine, U, None, None)


def check_design(arith: Arithmetic, design: SingleHeadDesign, v: np.ndarray) -> None:
    """NotIdentifiable if some u_k^T v = 0; PrecisionExhausted if that is undecided."""
    products = uv(arith, design, v)
    for k in range(design.d):
        s = arith.sign(products[k])
        if s is None:
            raise PrecisionExhausted(
                f"cannot decide whether u_{k}^T v = {products[k]} is zero at this precision"
            )
        if s == 0:
            raise NotIdentifiable(
                f"the design has u_{k}^T v = 0 (column {k}): the probe [b + u_{k}; b] then "
                "returns b^T v whatever W is, so row k of U^T W is not identifiable from it; "
                "choose a design with every u_k^T v != 0"
            )

"""The local dimension of the set of multi-head parameters with one map (Prop 7.1).

>>> from verified_attn.models import MultiHeadAttention
>>> m = MultiHeadAttention([([[1, 0], [0, 1]], [0, 0])])          # a dead head
>>> local_dimension(m).dimension                                   # W is free: d^2
4

The query map sends the parameters ``theta = (W_h, v_h)_h`` to the outputs on a fixed set
of generic rational sequences. Its Jacobian has the closed form

    df/dv_h[j]    = sum_i alpha_hi x_i[j]
    df/dW_h[j, k] = sum_i alpha_hi (p_hi - f_h) x_i[j] x_N[k],   p_hi = x_i^T v_h,

and ``#params - rank`` is the local dimension of the fibre. The rank is bracketed from both
sides and only reported when the brackets meet:

* **lower bound, exact:** every score is rational, so with ``z = e^{1/L}`` (L a common
  denominator) the Jacobian is a matrix of rational functions of z. As z is transcendental,
  its rank there is the rank over Q(z), which is at least the rank at any rational z0 > 0:
  computed exactly with flint. **Certified** mode instead takes the true z in ``arb`` balls
  and certifies a nonzero r x r minor.
* **upper bound:** exact null vectors of the symmetries (Prop 7.1): for a group of k heads
  with equal W, (k - 1) d directions that move v between them; if the group's v's sum to
  zero, d^2 more that move its common W. These are null for every X because the
  columns they combine are the same function of X (linearity in v, :mod:`.symbolic`).
  Where two heads share W there are also d *collision* directions per pair,
  ``W_a += v_b w^T, W_b -= v_a w^T``, null to first order only: such a point is a
  critical point of the parameter-to-map function, the Jacobian's kernel (2d for two
  heads) is larger than the fibre (d), and :class:`LocalDimension` reports both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import scipy.linalg

from verified_attn.arithmetic import DEFAULT_PRECISION
from verified_attn.errors import InvalidArgument, PrecisionExhausted
from verified_attn.models import MultiHeadAttention, as_rational_sequence
from verified_attn.multi_head.symbolic import head_key, head_matrices, random_rational_sequence

__all__ = [
    "LocalDimension",
    "generic_sequences",
    "jacobian",
    "local_dimension",
    "symmetry_null_vectors",
]


@dataclass(frozen=True)
class LocalDimension:
    """Rank of the query map's Jacobian (bracketed) next to the fibre's dimension.

    ``kernel_dimension = #params - rank``; ``fibre_dimension`` is the dimension of the
    set of parameters with the same map near this point (the span of the symmetry
    tangents, exact). They agree at smooth points; where heads collide (equal W) the
    Jacobian has extra first-order null directions and ``critical`` is True.
    """

    parameter_count: int
    rank_lower: int
    rank_upper: int
    fibre_dimension: int
    sequences: int
    method: str
    families: list[str]

    @property
    def rank(self) -> int | None:
        """The rank when the brackets meet, else None."""
        return self.rank_lower if self.rank_lower == self.rank_upper else None

    @property
    def kernel_dimension(self) -> int | None:
        """#params - rank (None unless the rank is pinned down)."""
        return None if self.rank is None else self.parameter_count - self.rank

    @property
    def critical(self) -> bool | None:
        """True where the Jacobian's kernel is larger than the fibre (a singular point)."""
        k = self.kernel_dimension
        return None if k is None else k > self.fibre_dimension

    @property
    def dimension(self) -> int | None:
        """The fibre dimension, reported once the rank is pinned down (else None).

        At a smooth point it equals #params - rank; at a critical point the Jacobian
        alone over-counts it, and the exact symmetry span gives the fibre.
        """
        return None if self.rank is None else self.fibre_dimension


_EXACT_LIMIT = 1 << 12


def generic_sequences(d: int, count: int, seed: int) -> list[flint.fmpq_mat]:
    """``count`` random rational sequences of lengths 2..4 (seeded).

    >>> [s.nrows() for s in generic_sequences(2, 4, 0)]
    [2, 3, 4, 2]
    """
    rng = np.random.default_rng(seed)
    return [as_rational_sequence(random_rational_sequence(d, 2 + i % 3, rng)) for i in range(count)]


def _rows(model: MultiHeadAttention, X: flint.fmpq_mat, weights_of: Any, zero: Any) -> list[Any]:
    """One Jacobian row: d(f(X))/d(theta), theta = (W_h row-major, v_h) per head."""
    n, d = X.nrows(), model.d
    last = flint.fmpq_mat(d, 1, [X[n - 1, k] for k in range(d)])
    row: list[Any] = []
    for m in model.head_models:
        W, v, _ = head_matrices(m)
        scores = X * (W * last)
        values = X * v
        alpha = weights_of([scores[i, 0] for i in range(n)])
        p = [values[i, 0] for i in range(n)]
        f_h = sum((a * pi for a, pi in zip(alpha, p, strict=True)), zero)
        c = [a * (pi - f_h) for a, pi in zip(alpha, p, strict=True)]
        for j in range(d):
            cj = sum((c[i] * X[i, j] for i in range(n)), zero)
            row.extend(cj * X[n - 1, k] for k in range(d))
        for j in range(d):
            row.append(sum((alpha[i] * X[i, j] for i in range(n)), zero))
    return row


def _common_denominator(model: MultiHeadAttention, seqs: list[flint.fmpq_mat]) -> int:
    L = 1
    for X in seqs:
        n = X.nrows()
        last = flint.fmpq_mat(model.d, 1, [X[n - 1, k] for k in range(model.d)])
        for m in model.head_models:
            s = X * (head_matrices(m)[0] * last)
            for i in range(n):
                L = math.lcm(L, int(s[i, 0].q))
    return L


def jacobian(
    model: MultiHeadAttention,
    seqs: list[flint.fmpq_mat],
    *,
    z0: Fraction | None = None,
    precision: int = DEFAULT_PRECISION,
) -> flint.fmpq_mat | flint.arb_mat:
    """The Jacobian at ``e^{s}`` replaced by ``z0^{L s}`` (exact, fmpq) or at the truth (arb).

    >>> m = MultiHeadAttention([([[1]], [2])])
    >>> J = jacobian(m, generic_sequences(1, 2, 0), z0=Fraction(2))
    >>> (J.nrows(), J.ncols())
    (2, 2)
    """
    if z0 is not None:
        L = _common_denominator(model, seqs)
        if L > _EXACT_LIMIT:
            # z0^(L s) would have astronomically many digits (parameters from floats give
            # L ~ 2^100): the specialisation is exact but not computable; arb is.
            raise InvalidArgument(
                f"arithmetic='exact' needs scores with a small common denominator (here L = "
                f"{L} > {_EXACT_LIMIT}); use arithmetic='certified'"
            )
        z = flint.fmpq(z0.numerator, z0.denominator)

        def weights(scores: list[flint.fmpq]) -> list[flint.fmpq]:
            e = [int(s * L) for s in scores]
            low = min(e)
            w = [z ** (x - low) for x in e]
            total = sum(w, flint.fmpq(0))
            return [x / total for x in w]

        rows = [_rows(model, X, weights, flint.fmpq(0)) for X in seqs]
        return flint.fmpq_mat(rows)

    def arb_weights(scores: list[flint.fmpq]) -> list[flint.arb]:
        top = max(scores)
        w = [flint.arb(s - top).exp() for s in scores]
        total = sum(w, flint.arb(0))
        return [x / total for x in w]

    old = flint.ctx.prec
    flint.ctx.prec = precision
    try:
        rows = [_rows(model, X, arb_weights, flint.arb(0)) for X in seqs]
        return flint.arb_mat(rows)
    finally:
        flint.ctx.prec = old


def symmetry_null_vectors(
    model: MultiHeadAttention,
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[str]]:
    """Exact null vectors of the Jacobian: (fibre tangents, collision directions, notes).

    Fibre tangents move along the set of parameters with the same map: v between heads that
    share W, and the common W of a group whose v's sum to 0 (a dead head is a group of
    one). Collision directions exist where two heads share W: ``W_a += v_b w^T``,
    ``W_b -= v_a w^T`` changes f only at second order, because
    ``sum_i alpha_i [(p_ai - f_a) p_bi - (p_bi - f_b) p_ai] = f_a f_b - f_b f_a = 0``.

    >>> fib, col, notes = symmetry_null_vectors(MultiHeadAttention([([[1]], [1]), ([[1]], [2])]))
    >>> [[int(x) for x in vec] for vec in fib], [[int(x) for x in vec] for vec in col]
    ([[0, 1, 0, -1]], [[2, 0, -1, 0]])
    """
    d, P = model.d, model.d * model.d + model.d
    zero = Fraction(0)
    groups: dict[tuple[Fraction, ...], list[int]] = {}
    for h, (W, _) in enumerate(model.heads):
        groups.setdefault(head_key(W), []).append(h)
    vs = [[Fraction(int(x.p), int(x.q)) for x in v] for _, v in model.heads]
    fibre: list[list[Fraction]] = []
    collide: list[list[Fraction]] = []
    notes: list[str] = []
    for members in groups.values():
        names = ", ".join(str(h + 1) for h in members)
        first = members[0]
        for other in members[1:]:
            for j in range(d):
                vec = [zero] * (P * model.H)
                vec[first * P + d * d + j] = Fraction(1)
                vec[other * P + d * d + j] = Fraction(-1)
                fibre.append(vec)
        if len(members) > 1:
            notes.append(f"heads {names} share W: v moves between them")
        vsum = [sum((vs[h][j] for h in members), zero) for j in range(d)]
        if all(x == 0 for x in vsum):
            for jk in range(d * d):
                vec = [zero] * (P * model.H)
                for h in members:
                    vec[h * P + jk] = Fraction(1)
                fibre.append(vec)
            what = "a dead head" if len(members) == 1 else "cancelling heads"
            notes.append(f"head(s) {names}: {what} (v sums to 0): their common W is free")
        for ia, a in enumerate(members):
            for b in members[ia + 1 :]:
                for k in range(d):  # w = e_k
                    vec = [zero] * (P * model.H)
                    for j in range(d):
                        vec[a * P + j * d + k] = vs[b][j]
                        vec[b * P + j * d + k] = -vs[a][j]
                    if any(x != 0 for x in vec):
                        collide.append(vec)
        if len(members) > 1:
            notes.append(f"heads {names} collide: first-order-only directions (W_a += v_b w^T)")
    return fibre, collide, notes


def local_dimension(
    model: MultiHeadAttention,
    *,
    arithmetic: str = "exact",
    sequences: int | None = None,
    seed: int = 0,
    precision: int = DEFAULT_PRECISION,
) -> LocalDimension:
    """Bracket the Jacobian rank of the query map; ``dimension`` when the brackets meet.

    >>> m = MultiHeadAttention([([[1, 2], [0, 1]], [1, -1]), ([[1, 2], [0, 1]], [0, 3])])
    >>> r = local_dimension(m)
    >>> r.parameter_count, r.rank, r.kernel_dimension, r.dimension, r.critical
    (12, 8, 4, 2, True)
    """
    if not isinstance(model, MultiHeadAttention):
        raise InvalidArgument(f"model must be a MultiHeadAttention, got {type(model).__name__}")
    if model.affine:
        # The Jacobian rows here differentiate the bias-free heads only.
        raise InvalidArgument(
            "model must not be affine: local_dimension covers the bias-free model (no c_h, beta)"
        )
    if arithmetic not in ("exact", "certified"):
        raise InvalidArgument(f"arithmetic must be 'exact' or 'certified', got {arithmetic!r}")
    params = model.parameter_count
    if sequences is None:
        sequences = params + 4
    if isinstance(sequences, bool) or not isinstance(sequences, int) or sequences < 1:
        raise InvalidArgument(f"sequences must be an int >= 1, got {sequences!r}")
    seqs = generic_sequences(model.d, sequences, seed)
    fibre, collide, families = symmetry_null_vectors(model)
    fibre_dim = _rank(fibre)
    upper = min(params - _rank(fibre + collide), sequences)
    if arithmetic == "exact":
        rng = np.random.default_rng(seed)
        z0 = Fraction(int(rng.integers(2, 6)), 1) + Fraction(1, int(rng.integers(2, 5)))
        J = jacobian(model, seqs, z0=z0)
        lower = J.rank()  # type: ignore[union-attr]  # with z0, jacobian returns an fmpq_mat
        method = f"exact rank at z0 = {z0} (lower bound), symmetry null vectors (upper bound)"
    else:
        J = jacobian(model, seqs, precision=precision)
        lower = _certified_rank_lower(J, upper, precision)  # type: ignore[arg-type]  # no z0: arb_mat
        method = f"certified nonzero minor in arb at {precision} bits; symmetry null vectors"
    return LocalDimension(params, lower, upper, fibre_dim, sequences, method, families)


def _rank(vectors: list[list[Fraction]]) -> int:
    if not vectors:
        return 0
    return flint.fmpq_mat(
        [[flint.fmpq(q.numerator, q.denominator) for q in v] for v in vectors]
    ).rank()


def _certified_rank_lower(J: flint.arb_mat, target: int, precision: int) -> int:
    """The largest r <= target with an r x r minor certified nonzero (pivots from floats).

    The pivots come from QR with column pivoting of the float midpoints (columns), then of
    the chosen columns' rows: the leading r x r block is then as well conditioned as such
    a choice makes it. (A greedy rank test per added column, used before, took a nearly
    dependent row at W = [[0, 0], [-2, -2]] and certified only r = 1 of 8.)
    """
    mid = np.array([[float(J[i, j].mid()) for j in range(J.ncols())] for i in range(J.nrows())])
    if not mid.size:
        return 0
    col_perm = [int(j) for j in scipy.linalg.qr(mid, pivoting=True, mode="r")[1]]
    old = flint.ctx.prec
    flint.ctx.prec = precision
    try:
        for r in range(min(target, *mid.shape), 0, -1):
            cols = col_perm[:r]
            rows = scipy.linalg.qr(mid[:, cols].T, pivoting=True, mode="r")[1][:r]
            sub = flint.arb_mat([[J[int(i), j] for j in sorted(cols)] for i in sorted(rows)])
            det = sub.det()
            if not det.contains(0):
                return r
    finally:
        flint.ctx.prec = old
    if target > 0:
        raise PrecisionExhausted("no nonzero minor could be certified; raise the precision")
    return 0

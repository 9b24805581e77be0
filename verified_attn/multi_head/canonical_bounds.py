"""The canonical design and its query counts, shared by the exact, certified and float
multi-head learners and the certificate checker (a leaf module: it imports no learner).

>>> canonical_query_bound(2, 2), follow_up_query_bound(2, 2)
(22, 29)
"""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np

from verified_attn.arithmetic import fmpq_matrix

THEOREM = "prop-7.1"
METHOD = "canonical"
#: Working precision (bits) of the exact-mode decoding (its answers enclosed in balls).
EXACT_MODE_PRECISION = 256

#: The score magnitude the learning answers' precision is sized for: |u^T W_h b| <= S0 at
#: the design's pairs (entries of u, b below 1/d: heads with |W_ij| <= S0/2, the links
#: u_0 + u_k doubling), the bound Sm of the exported Coq file's identification step.
SCORE_MAGNITUDE = 4

Pair = tuple[list[Fraction], int]  # (u, index of the probe b)


def canonical_query_bound(d: int, H: int, *, affine: bool = False) -> int:
    """Our count without ties: ``d + 2H (d^2 + d - 1)`` (H the number of heads, or the
    upper bound); affine: ``d + 1 + 2H (d^2 + 2d - 1)`` (one extra probe b_0).

    >>> canonical_query_bound(3, 2), canonical_query_bound(3, 2, affine=True)
    (47, 60)
    """
    if affine:
        return d + 1 + 2 * H * (d * d + 2 * d - 1)
    return d + 2 * H * (d * d + d - 1)


def canonical_query_limit(d: int, H: int, *, affine: bool = False) -> int:
    """Our worst case: ``d + 2H (d^2 + d - 1)`` plus one tie link per grid pair with
    ``j > 1`` (``d (d - 1)``, only possible for H >= 2); never above the follow-up's count.

    ``4Hd^2 - 2H + 1 - limit = (d - 1)(2Hd - d - 1) >= 0`` (H >= 2; for H = 1 the slack is
    larger still), with equality exactly at d = 1.

    Affine: one tie link per pair (u_k, b_j) with j > 1 among d + 1 probes b (``d^2``).

    >>> canonical_query_limit(3, 2), follow_up_query_bound(3, 2)
    (53, 69)
    >>> canonical_query_limit(3, 2, affine=True)
    69
    """
    ties = d * d if affine else d * (d - 1)
    return canonical_query_bound(d, H, affine=affine) + (ties if H >= 2 else 0)


def follow_up_query_bound(d: int, H: int) -> int:
    """The follow-up's count ``4Hd^2 - 2H + 1``.

    >>> follow_up_query_bound(3, 2)
    69
    """
    return 4 * H * d * d - 2 * H + 1


def basis(d: int, rng: np.random.Generator, den: int) -> list[list[Fraction]]:
    """d random vectors (rows) with nonzero entries in {-1023..1023}/den forming a basis.

    Many distinct small numerators make a coincidence (u^T v_h = 0, or two heads with one
    score u^T W_h b) unlikely; small entries keep the scores O(1) so no pole runs to 0.
    """
    while True:
        rows = [
            [
                Fraction(int(x) * int(s), den)
                for x, s in zip(rng.integers(1, 1024, d), rng.choice([-1, 1], d), strict=True)
            ]
            for _ in range(d)
        ]
        m = flint.fmpq_mat([[flint.fmpq(q.numerator, q.denominator) for q in r] for r in rows])
        if m.rank() == d:
            return rows


def canonical_design(
    d: int, seed: int, affine: bool
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[tuple[list[Fraction], int]]]:
    """Bases U, B; the probes b (B, and one more generic b_0 last if affine, affinely
    independent of B); pairs (u, index of b)."""
    rng = np.random.default_rng(seed)
    U = basis(d, rng, 1024 * d)  # |u^T W b| <= max |W_ij|: scores O(1) at every d
    cols = basis(d, rng, 1024 * d)
    if affine:
        # Not b_0 = 0: there the scores are u^T c_h, equal for heads sharing c (often 0),
        # and their poles would merge. A generic b_0 keeps every head's score distinct.
        while True:
            b0 = basis(d, rng, 1024 * d)[0]
            if lifted_probes([*cols, b0]).rank() == d + 1:
                break
        cols = [*cols, b0]
    pairs = [(U[k], j) for k in range(d) for j in range(len(cols))]
    pairs += [([a + c for a, c in zip(U[0], U[k], strict=True)], 0) for k in range(1, d)]
    return U, cols, pairs


def probe_sequence(u: list[Fraction], b: list[Fraction], k: int) -> list[list[Fraction]]:
    a = [x + y for x, y in zip(b, u, strict=True)]
    return [a] * k + [b]


def lifted_probes(cols: list[list[Fraction]]) -> flint.fmpq_mat:
    """The (d + 1) x n matrix with columns ``[b_j; 1]`` (affine probes)."""
    d = len(cols[0])
    return fmpq_matrix([[b[i] for b in cols] for i in range(d)] + [[Fraction(1)] * len(cols)])


def probe_matrix(cols: list[list[Fraction]], affine: bool) -> flint.fmpq_mat:
    """M with ``S_h = U^T [W_h | c_h] M``: columns b_j, lifted to ``[b_j; 1]`` if affine."""
    return lifted_probes(cols) if affine else fmpq_matrix(cols).transpose()


def parameter_count(d: int, H: int, affine: bool) -> int:
    """H (d^2 + d), or H (d^2 + 2d) + 1 affine: the numbers of the canonical heads."""
    return H * (d * d + (2 * d if affine else d)) + (1 if affine else 0)


def close_bound(H0: int, Sm: int, D: int) -> int:
    """``CertMultiHeadBound.kz``: A (1 + 2 A^2 3^Sm D^2)^(2 H0) with A = 2 H0 + 3^Sm, an
    integer above the constant K of ``kprobe_masses_close`` (e^Sm <= 3^Sm).

    >>> close_bound(1, 1, 4) == 5 * (1 + 2 * 5 * 5 * 3 * 16) ** 2
    True
    """
    A = 2 * H0 + 3**Sm
    return A * (1 + 2 * A * A * 3**Sm * D * D) ** (2 * H0)


def answer_precision(H0: int, D: int, prec: int, Sm: int = SCORE_MAGNITUDE) -> int:
    """Bits at which the certified learner asks its learning queries: at least ``prec``, and
    enough that intervals of width 2^-(bits - 16) pass the Coq check ``check_close``
    (``close_bound(H0, Sm, D) * 2 eps * D^(2 H0) < 1``) for scores in [-Sm, Sm].

    The balls of a certified oracle at P bits are about 2^-(P - 5) wide on these answers
    (sums of H0 terms of size O(1)); 16 bits of margin cover that and eps's rounding up
    to a power of two.

    >>> answer_precision(2, 2**64, 256), answer_precision(2, 2**22, 384)
    (873, 384)
    """
    need = (close_bound(H0, Sm, D) * 2 * D ** (2 * H0)).bit_length()
    return max(prec, need + 16)

"""The exact and certified re-decoding of a canonical multi-head certificate.

>>> import verified_attn as va
>>> from verified_attn.certificates.multi_head import verify
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> data = va.learn_multi_head(va.Oracle(model, "certified"), heads=2).certificate()
>>> verify(data).summary[2]
'decoding: 2 canonical heads re-decoded from the 22 stored learning answers == the claimed heads'

Steps 3 to 5 of :mod:`~verified_attn.certificates.multi_head`: every pair's samples
interpolated again, poles and residues reconstructed as rationals, heads labelled across
pairs (tie links included), the heads solved exactly and compared with the claim.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import flint

from verified_attn.arithmetic import (
    Arithmetic,
    ball_rational,
    fmpq_matrix,
)
from verified_attn.certificates import kernel
from verified_attn.certificates.multi_head_parts import (
    MAX_WORKING_PRECISION,
    Decoded,
    design_pairs,
    read_design,
    read_samples,
    to_fraction,
)
from verified_attn.errors import (
    CertificateError,
    VerifiedAttnError,
)
from verified_attn.rational_interpolation import interpolate, poles, to_arb

__all__ = ["compare_exact", "redecode"]


def redecode(
    data: dict[str, Any],
    head: kernel.Header,
    affine: bool,
    heads_given: bool,
    H0: int,
    ncols: int,
    npairs: int,
    ties: list[dict[str, Any]],
) -> tuple[list[tuple[list[Fraction], list[Fraction], list[Fraction]]], Fraction | None]:
    d, arith = head.d, head.arith
    prec = kernel.as_int(kernel.get(data, "working_precision"), "working_precision", low=32)
    if prec > MAX_WORKING_PRECISION:
        raise CertificateError(
            f"working_precision must be an int in 32..{MAX_WORKING_PRECISION}, got {prec}"
        )
    if arith.name == "certified" and prec != arith.precision:
        raise CertificateError(f"working_precision {prec} is not the precision {arith.precision}")
    D = kernel.as_int(kernel.get(data, "denominator_bound"), "denominator_bound", low=1)
    if D.bit_length() > prec:
        raise CertificateError(f"denominator_bound has more than {prec} bits")
    U, B = read_design(data, head, ncols)
    if fmpq_matrix(U).rank() != d:
        raise CertificateError("design.U is singular")
    M = _probe_matrix(B, affine)
    if M.rank() != M.nrows():
        raise CertificateError("design.B: the probes (lifted if affine) are not a basis")
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        with arith.context():
            F0, F = read_samples(data, arith, ncols, npairs, 2 * H0)
            f0 = [to_arb(a) for a in F0]
            pairs = design_pairs(U, ncols)
            samples = [
                [f0[j], *(to_arb(a) for a in row)] for (_, j), row in zip(pairs, F, strict=True)
            ]
            m = H0 if heads_given else _degree(samples, H0)
            decoded = [_pair_poles(s, m, D, p) for p, s in enumerate(samples)]
            labelled = _label(decoded, U, B, f0, ties, arith, m)
            heads = _solve(labelled, U, B, affine, m)
            beta = None
            if affine:
                total = [sum((hd[1][i] for hd in heads), Fraction(0)) for i in range(d)]
                known = sum((x * y for x, y in zip(B[0], total, strict=True)), Fraction(0))
                beta = _unique(f0[0] - _ball(known), D, "the output bias beta")
    finally:
        flint.ctx.prec = old
    return _canonicalise(heads), beta


def _pair_poles(samples: list[flint.arb], m: int, D: int, p: int) -> Decoded:
    """Pair p's (score, residue) rationals; a failure names the stored answers."""
    try:
        found = poles(samples, m)
    except VerifiedAttnError as exc:
        raise CertificateError(f"answers.F[{p}] (with its F(0)): {exc}") from exc
    return _rationals(found, D, f"answers.F[{p}]")


def _probe_matrix(B: list[list[Fraction]], affine: bool) -> flint.fmpq_mat:
    d = len(B[0])
    rows = [[b[i] for b in B] for i in range(d)]
    if affine:
        rows.append([Fraction(1)] * len(B))
    return fmpq_matrix(rows)


def _degree(samples: list[list[flint.arb]], H0: int) -> int:
    for m in range(H0, 0, -1):
        if all(interpolate(s, m) is not None for s in samples):
            return m
    raise CertificateError("no degree m >= 1 is certified nonsingular at every pair")


def _ball(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def _unique(x: flint.arb, D: int, what: str) -> Fraction:
    return ball_rational(
        x,
        D,
        lambda: CertificateError(
            f"{what} ({x}) holds no unique rational with denominator <= {D}: the stored "
            "answers do not determine it under the stated assumption"
        ),
    )


def _rationals(found: list[tuple[flint.arb, flint.arb]], D: int, where: str) -> Decoded:
    return [
        (_unique(s, D, f"{where}: a score"), _unique(r, D, f"{where}: a residue")) for s, r in found
    ]


def _label(
    decoded: list[Decoded],
    U: list[list[Fraction]],
    B: list[list[Fraction]],
    f0: list[flint.arb],
    ties: list[dict[str, Any]],
    arith: Arithmetic,
    m: int,
) -> dict[tuple[int, int], Decoded]:
    """(score, residue) of head h at (u_k, b_j), heads in the order of (u_1, b_1)."""
    d, ncols = len(U), len(B)
    grid = {(k, j): decoded[k * ncols + j] for k in range(d) for j in range(ncols)}
    orders = list(itertools.permutations(range(m)))
    out = {(0, 0): grid[(0, 0)]}
    for k in range(1, d):
        link = sorted(decoded[d * ncols + k - 1])
        fits = [
            p
            for p in orders
            if sorted(
                (
                    grid[(0, 0)][h][0] + grid[(k, 0)][p[h]][0],
                    grid[(0, 0)][h][1] + grid[(k, 0)][p[h]][1],
                )
                for h in range(m)
            )
            == link
        ]
        if len(fits) != 1:
            raise CertificateError(
                f"the link (u_1 + u_{k + 1}, b_1) fits {len(fits)} head orders, not exactly one"
            )
        out[(k, 0)] = [grid[(k, 0)][fits[0][h]] for h in range(m)]
    stored = {(t["k"], t["j"]): t for t in ties}
    for k in range(d):
        base = out[(k, 0)]
        for j in range(1, ncols):
            here = grid[(k, j)]
            fits = [p for p in orders if all(here[p[h]][1] == base[h][1] for h in range(m))]
            if not fits:
                raise CertificateError(
                    f"the residues at (u_{k + 1}, b_{j + 1}) differ from those at (u_{k + 1}, b_1)"
                )
            tie = stored.pop((k, j), None)
            if len(fits) > 1:
                if tie is None:
                    raise CertificateError(
                        f"heads tie at (u_{k + 1}, b_{j + 1}) but no tie answer is stored"
                    )
                fits = _tie_orders(fits, base, here, f0, j, tie, arith)
            elif tie is not None:
                raise CertificateError(
                    f"a tie answer is stored for (u_{k + 1}, b_{j + 1}), where no heads tie"
                )
            out[(k, j)] = [here[fits[0][h]] for h in range(m)]
    return out


def _tie_orders(
    fits: list[tuple[int, ...]],
    base: Decoded,
    here: Decoded,
    f0: list[flint.arb],
    j: int,
    tie: dict[str, Any],
    arith: Arithmetic,
) -> list[tuple[int, ...]]:
    """The orders whose F(1) at (u_k, (b_1 + b_j)/2) meets the stored answer: exactly one.

    The scores are affine in b, so there they are the means; F(0) there is the mean of
    F(0) at b_1 and b_j.
    """
    measured = to_arb(kernel.number(tie["answer"], tie["path"], arith))
    meets = []
    for p in fits:
        predicted = (f0[0] + f0[j]) / 2
        for h in range(len(base)):
            lam = (_ball(base[h][0] + here[p[h]][0]) / 2).exp()
            predicted += _ball(base[h][1]) * lam / (1 + lam)
        if predicted.overlaps(measured):
            meets.append(p)
    if len(meets) != 1:
        raise CertificateError(
            f"{tie['path']}: the tie answer fits {len(meets)} head orders, not exactly one"
        )
    return meets


def _solve(
    labelled: dict[tuple[int, int], Decoded],
    U: list[list[Fraction]],
    B: list[list[Fraction]],
    affine: bool,
    m: int,
) -> list[tuple[list[Fraction], list[Fraction], list[Fraction]]]:
    """``[W_h | c_h] = U^{-T} S_h M^{-1}`` and ``v_h = U^{-T} r_h`` (U's rows are u_k)."""
    d, ncols = len(U), len(B)
    U_inv = fmpq_matrix(U).inv()
    M_inv = _probe_matrix(B, affine).inv()
    out = []
    for h in range(m):
        S = fmpq_matrix([[labelled[(k, j)][h][0] for j in range(ncols)] for k in range(d)])
        r = fmpq_matrix([[labelled[(k, 0)][h][1]] for k in range(d)])
        Wc = U_inv * S * M_inv
        v = U_inv * r
        W = [to_fraction(Wc[i, j]) for i in range(d) for j in range(d)]
        c = [to_fraction(Wc[i, d]) if affine else Fraction(0) for i in range(d)]
        out.append((W, [to_fraction(v[i, 0]) for i in range(d)], c))
    return out


def _canonicalise(
    heads: list[tuple[list[Fraction], list[Fraction], list[Fraction]]],
) -> list[tuple[list[Fraction], list[Fraction], list[Fraction]]]:
    """Merge heads with equal (W, c) (summing v), drop zero v, sort by (W, c, v)."""
    sums: dict[tuple[tuple[Fraction, ...], tuple[Fraction, ...]], list[Fraction]] = {}
    for W, v, c in heads:
        acc = sums.setdefault((tuple(W), tuple(c)), [Fraction(0)] * len(v))
        for i, x in enumerate(v):
            acc[i] += x
    live = sorted((W, c, tuple(v)) for (W, c), v in sums.items() if any(v))
    return [(list(W), list(v), list(c)) for W, c, v in live]


def compare_exact(
    claimed: list[tuple[list[Any], list[Any], list[Any]]],
    beta: Any,
    decoded: list[tuple[list[Fraction], list[Fraction], list[Fraction]]],
    decoded_beta: Fraction | None,
    affine: bool,
) -> None:
    if len(claimed) != len(decoded):
        raise CertificateError(
            f"result.heads claims {len(claimed)} heads, the stored answers give {len(decoded)}"
        )
    for h, (mine, theirs) in enumerate(zip(claimed, decoded, strict=True)):
        for name, a, b in zip("Wvc", mine, theirs, strict=True):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                if x != y:
                    raise CertificateError(
                        f"result.heads[{h}].{name} entry {i}: claimed {x}, the stored answers "
                        f"give {y}"
                    )
    if affine and beta != decoded_beta:
        raise CertificateError(
            f"result.beta: claimed {beta}, the stored answers give {decoded_beta}"
        )

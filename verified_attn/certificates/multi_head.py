"""Re-check a multi-head certificate (canonical or orthogonal method) from its answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.multi_head import verify
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> data = va.learn_multi_head(va.Oracle(model, "certified"), heads=2).certificate()
>>> print(verify(data).summary[2])
decoding: 2 canonical heads re-decoded from the 22 stored learning answers == the claimed heads
>>> data["answers"]["F"][0][0]["arb"][0] = "1/3"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: ...

What is re-checked, with the core arithmetic only (never the learners' modules):

``method: "canonical"``, exact or certified arithmetic (a *re-decoding*):

1. header and counts (:mod:`~verified_attn.certificates.kernel`): F(0) at the d (affine
   d + 1) probes, 2 H0 samples F(k) at each of the d (d or d + 1) + d - 1 pairs, one query
   per stored tie link; the learning count is their sum and the bound the worst case
   ``d + 2 H0 (d^2 + d - 1) + d (d - 1)`` (affine ``d + 1 + 2 H0 (d^2 + 2d - 1) + d^2``);
2. the design: U invertible and the probes b_j (lifted to [b_j; 1] if affine) a basis;
3. every pair's samples are interpolated again, the poles and residues isolated in balls
   (:mod:`verified_attn.rational_interpolation`, core mathematics shared with the learner),
   each reconstructed as the unique rational with denominator <= D in its ball (the stated
   assumption); with only ``max_heads`` given, the degree is re-found the same way (the
   largest m certified nonsingular at every pair);
4. heads are labelled across pairs (written out here): the link (u_1 + u_k, b_1) must fix
   exactly one order at (u_k, b_1) (scores and residues add), residues fix the order at
   (u_k, b_j) unless heads tie, and exactly the tied (u_k, b_j) have a stored tie answer
   which exactly one residue-respecting order's prediction meets;
5. ``[W_h | c_h] = U^{-T} S_h M^{-1}``, ``v_h = U^{-T} r_h`` and beta are solved exactly,
   heads with equal (W, c) merged, zero ones dropped, sorted; the result must be ``==``
   the claimed heads and beta.

``method: "canonical"``, float arithmetic: the float fit (least squares, Gauss-Newton) is
not cheaply reproducible, so the checker does **not** re-decode: it rebuilds every learning
query from the stored float design and checks that the claimed heads reproduce every
stored learning answer under the one agreement rule
(:func:`verified_attn.verification.agree`) at the stored rtol.

``method: "orthogonal"``: the bases are full rank and pairwise orthogonal; each live
subspace's restricted head carries its own single-head certificate, re-checked by
:mod:`verified_attn.certificates.single_head` (which re-decodes it); its claimed (W', v')
is lifted here (``W = L W' L^T``, ``v = L v'``, ``L = B (B^T B)^{-1}``) and compared
with the claimed head (exact ``==``; float to :data:`FLOAT_RTOL`); a dead subspace's r
answers must be zero. The counts are the restricted ones summed under ``head<h>/``.

Finally (every method) the verification answers are re-checked against the claimed model.
Sizes are bounded (:data:`MAX_D`, :data:`MAX_HEADS`, :data:`MAX_FLOAT_HEADS`,
:data:`MAX_WORKING_PRECISION`) before any work, so a hostile file is refused fast.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
    FloatArithmetic,
    arb_bounds,
    fmpq_matrix,
    reconstruct_rational,
)
from verified_attn.certificates import CertificateCheck
from verified_attn.certificates.kernel import (
    Header,
    as_bool,
    as_int,
    as_list,
    as_matrix,
    check_counts,
    check_verification,
    get,
    number,
    numbers,
    parse_header,
    rational,
)
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    PrecisionExhausted,
    VerifiedAttnError,
)
from verified_attn.models import MultiHeadAttention, as_rational_sequence
from verified_attn.multi_head.canonical_float import (
    CONDITIONING_GROUPS,
    float_query_limit,
    float_ratios,
    heads_error_estimate,
    joint_polish,
    max_length,
    polish_count,
    polish_figures,
    precision_polish_count,
    prediction_check,
    probe_columns,
)
from verified_attn.multi_head.float_pilot import pilot_rounds
from verified_attn.multi_head.prediction_bound import PREDICTION_SEQUENCES, PREDICTION_SIGMAS
from verified_attn.multi_head.sequence_fit import SequenceRows, compress, polish_sequences
from verified_attn.rational_interpolation import interpolate, poles, to_arb
from verified_attn.validation import check_lengths, check_seed
from verified_attn.verification import agree, float_floor

__all__ = [
    "FLOAT_RTOL",
    "MAX_D",
    "MAX_FLOAT_HEADS",
    "MAX_HEADS",
    "MAX_WORKING_PRECISION",
    "verify",
]

#: Largest d a multi-head certificate may name (the canonical design has ~d^2 pairs).
MAX_D = 32
#: Largest number of heads of an exact or certified certificate (its re-decoding
#: enumerates orders of heads: H! per link).
MAX_HEADS = 6
#: Largest number of heads of a float certificate (its answers are re-checked against the
#: claimed heads; nothing is enumerated), the float learner's range.
MAX_FLOAT_HEADS = 8
#: Largest working precision (bits) of the ball re-decoding.
MAX_WORKING_PRECISION = 8192
#: Relative agreement required between claimed and re-lifted float heads (orthogonal).
FLOAT_RTOL = 1e-12

Decoded = list[tuple[Fraction, Fraction]]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``multi-head`` certificate dict; CertificateError naming what fails."""
    if not isinstance(data, dict):
        raise CertificateError(f"a certificate is a JSON object, got {type(data).__name__}")
    method = get(data, "method")
    try:
        if method == "canonical":
            return _canonical(data)
        if method == "orthogonal":
            return _orthogonal(data)
    except VerifiedAttnError as exc:
        if isinstance(exc, CertificateError):
            raise
        raise CertificateError(f"multi-head certificate: {exc}") from exc
    raise CertificateError(f"method must be 'canonical' or 'orthogonal', got {method!r:.80}")


# ---------------------------------------------------------------------------------------
# The canonical method.
# ---------------------------------------------------------------------------------------


def _limit(d: int, H0: int, affine: bool) -> int:
    """The learner's worst case, ties included (the bound it is held to)."""
    if affine:
        return d + 1 + 2 * H0 * (d * d + 2 * d - 1) + (d * d if H0 >= 2 else 0)
    return d + 2 * H0 * (d * d + d - 1) + (d * (d - 1) if H0 >= 2 else 0)


def _canonical(data: dict[str, Any]) -> CertificateCheck:
    head = parse_header(data, "multi-head", max_d=MAX_D)
    d, arith = head.d, head.arith
    affine = as_bool(get(data, "affine"), "affine")
    heads_given = as_bool(get(data, "heads_given"), "heads_given")
    H0 = as_int(
        get(data, "H0"), "H0", low=1, high=MAX_FLOAT_HEADS if arith.name == "float" else MAX_HEADS
    )
    exact = as_bool(get(data, "result.exact"), "result.exact")
    if exact != (arith.name != "float"):
        raise CertificateError(f"result.exact is {exact} in {arith.name} arithmetic")
    if arith.name == "float" and not heads_given:
        raise CertificateError("a float canonical certificate must have heads_given true")
    # The float design's columns follow from the sizes (redundant ones from six heads on).
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    # (and from two heads on for a coarse box, float32: its recorded unit roundoff)
    ncols = (
        probe_columns(d, H0, affine, unit=unit)
        if arith.name == "float"
        else d + (1 if affine else 0)
    )
    npairs = d * ncols + d - 1
    ties = _ties(data, d, ncols)
    if ties and ncols > d + (1 if affine else 0):
        # The redundant design fixes each head's order by the plane s = M^T w: no tie link.
        raise CertificateError(
            f"answers.ties has {len(ties)} entries; the float design with redundant probe "
            "columns asks no tie links"
        )
    if arith.name == "float":
        # The float path's own design: per pair 2 H0 grid ratios plus the redundant ones;
        # the d pilot pairs (u_k, b_k) in the pilot phase, with the pilot's discarded rounds.
        extra = _float_redundancy(H0)
        per_pair = 2 * H0 + extra
        rounds = 1 + _float_pilot(data, arith, d, H0, affine, per_pair)
        phases = {
            "F(0)": ncols,
            "pilot": rounds * d * per_pair,
            "F(t)": (npairs - d) * 2 * H0,
        }
        if extra:
            phases["redundancy"] = (npairs - d) * extra
        conditioning = _float_conditioning(data, arith, d, ncols, per_pair)
        if conditioning:
            phases["conditioning"] = conditioning
        polish = _float_polish_count(data, d, H0, affine, unit)
        if polish:
            phases["polish"] = polish
    else:
        phases = {"F(0)": ncols, "F(k)": npairs * 2 * H0}
    if ties:
        phases["tie links"] = len(ties)
    learning = sum(phases.values())
    # The float worst case includes the adaptive phases (the learner's own formula).
    bound = (
        float_query_limit(d, H0, affine=affine, unit=unit)
        if arith.name == "float"
        else _limit(d, H0, affine)
    )
    q = check_counts(data, learning=learning, bound=bound, phases=phases)
    if learning > bound:  # the float adaptive phases are held to the worst case
        raise CertificateError(f"{learning} learning queries exceed the bound {bound}")
    extra = set(q["by_phase"]) - {*phases, "verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")
    lines = [
        head.describe() + (" (affine)" if affine else "") + ", method canonical",
        f"queries: {learning} learning (F(0) {ncols}, F(k) {npairs} pairs x {2 * H0}, "
        f"{len(ties)} tie links"
        + (f", {phases['polish']} polish" if "polish" in phases else "")
        + f") <= bound {bound}; {q['verification']} verification",
    ]
    claimed, beta = _claimed_heads(data, head, affine, H0)
    if arith.name == "float":
        lines.append(_float_fit(data, head, affine, H0, ncols, npairs, ties, claimed, beta))
    else:
        decoded, decoded_beta = _redecode(data, head, affine, heads_given, H0, ncols, npairs, ties)
        _compare_exact(claimed, beta, decoded, decoded_beta, affine)
        lines.append(
            f"decoding: {len(decoded)} canonical heads re-decoded from the {learning} stored "
            "learning answers == the claimed heads"
        )
    model = _model(claimed, beta, affine)
    with arith.context():
        lines.append(check_verification(data, head, _predictor(head, model)))
    lines.extend(f"assumption: {a}" for a in head.assumptions)
    return CertificateCheck(ok=True, kind="multi-head", theorem=head.theorem, summary=lines)


def _ties(data: dict[str, Any], d: int, ncols: int) -> list[dict[str, Any]]:
    raw = as_list(get(data, "answers.ties"), "answers.ties")
    if len(raw) > d * (ncols - 1):
        raise CertificateError(f"answers.ties has {len(raw)} entries, at most {d * (ncols - 1)}")
    out, seen = [], set()
    for i, t in enumerate(raw):
        path = f"answers.ties[{i}]"
        k = as_int(get(t, "k"), f"{path}.k", low=0, high=d - 1)
        j = as_int(get(t, "j"), f"{path}.j", low=1, high=ncols - 1)
        if (k, j) in seen:
            raise CertificateError(f"{path}: the pair ({k}, {j}) is listed twice")
        seen.add((k, j))
        out.append({"k": k, "j": j, "answer": get(t, "answer"), "path": f"{path}.answer"})
    return out


def _entries(raw: Any, path: str, head: Header, count: int) -> list[Any]:
    """Claimed numbers: exact rationals in exact/certified mode, floats in float mode."""
    values = as_list(raw, path, count)
    if head.arith.name == "float":
        return numbers(values, path, head.arith, count)
    out = []
    for i, x in enumerate(values):
        if not (isinstance(x, dict) and set(x) == {"rational"}):
            raise CertificateError(f"{path}[{i}]: an exact result stores rationals")
        out.append(rational(x["rational"], f"{path}[{i}]"))
    return out


def _claimed_heads(
    data: dict[str, Any], head: Header, affine: bool, H0: int
) -> tuple[list[tuple[list[Any], list[Any], list[Any]]], Any]:
    """Claimed heads as (W row-major, v, c) flat lists (c zero when stored as null)."""
    d = head.d
    raw = as_list(get(data, "result.heads"), "result.heads")
    if not 1 <= len(raw) <= H0:
        raise CertificateError(f"result.heads has {len(raw)} heads, expected 1..{H0}")
    zero = 0.0 if head.arith.name == "float" else Fraction(0)
    out = []
    for h, entry in enumerate(raw):
        path = f"result.heads[{h}]"
        W = [
            x
            for i, row in enumerate(as_matrix(get(entry, "W"), f"{path}.W", d, d))
            for x in _entries(row, f"{path}.W[{i}]", head, d)
        ]
        v = _entries(get(entry, "v"), f"{path}.v", head, d)
        c_raw = get(entry, "c")
        if c_raw is not None and not affine:
            raise CertificateError(f"{path}.c must be null for the bias-free model")
        c = [zero] * d if c_raw is None else _entries(c_raw, f"{path}.c", head, d)
        out.append((W, v, c))
    beta_raw = get(data, "result.beta")
    if affine == (beta_raw is None):
        raise CertificateError("result.beta must be given exactly for the affine model")
    beta = None
    if beta_raw is not None:
        beta = _entries([beta_raw], "result.beta", head, 1)[0]
    return out, beta


def _model(claimed: list[tuple[list[Any], ...]], beta: Any, affine: bool) -> MultiHeadAttention:
    d = len(claimed[0][1])
    try:
        heads = [
            (
                [W[i * d : (i + 1) * d] for i in range(d)],
                v,
                *([c] if affine else []),
            )
            for W, v, c in claimed
        ]
        return MultiHeadAttention(heads, beta=beta if affine else None)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed heads are not a model: {exc}") from exc


def _predictor(head: Header, model: MultiHeadAttention) -> Any:
    arith = head.arith
    if arith.name == "float":
        return lambda X: float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
    return lambda X: model.evaluate_rational(as_rational_sequence(X, head.d), arith)


def _design(
    data: dict[str, Any], head: Header, ncols: int
) -> tuple[list[list[Any]], list[list[Any]]]:
    d = head.d
    if head.arith.name == "float":
        U = [numbers(r, f"design.U[{k}]", head.arith, d) for k, r in enumerate(_rows(data, "U", d))]
        B = [
            numbers(r, f"design.B[{j}]", head.arith, d)
            for j, r in enumerate(_rows(data, "B", ncols))
        ]
        return U, B
    U = [
        [rational(q, f"design.U[{k}][{i}]") for i, q in enumerate(row)]
        for k, row in enumerate(as_matrix(get(data, "design.U"), "design.U", d, d))
    ]
    B = [
        [rational(q, f"design.B[{j}][{i}]") for i, q in enumerate(row)]
        for j, row in enumerate(as_matrix(get(data, "design.B"), "design.B", ncols, d))
    ]
    return U, B


def _rows(data: dict[str, Any], name: str, n: int) -> list[Any]:
    return as_list(get(data, f"design.{name}"), f"design.{name}", n)


def _pairs(U: list[list[Any]], ncols: int, half: bool = False) -> list[tuple[list[Any], int]]:
    """(u, index of b): the grid (u_k, b_j), then the links (u_1 + u_k, b_1), halved
    ``((u_1 + u_k) / 2, b_1)`` in the float design."""
    d = len(U)
    pairs = [(U[k], j) for k in range(d) for j in range(ncols)]
    pairs += [
        ([(a + b) / 2 if half else a + b for a, b in zip(U[0], U[k], strict=True)], 0)
        for k in range(1, d)
    ]
    return pairs


def _samples(data: dict[str, Any], arith: Arithmetic, ncols: int, npairs: int, n: int) -> Any:
    """F(0) per probe and n samples per pair (2 H0 in exact/certified mode)."""
    F0 = numbers(get(data, "answers.F0"), "answers.F0", arith, ncols)
    F = [
        numbers(row, f"answers.F[{p}]", arith, n)
        for p, row in enumerate(as_list(get(data, "answers.F"), "answers.F", npairs))
    ]
    return F0, F


def _redecode(
    data: dict[str, Any],
    head: Header,
    affine: bool,
    heads_given: bool,
    H0: int,
    ncols: int,
    npairs: int,
    ties: list[dict[str, Any]],
) -> tuple[list[tuple[list[Fraction], list[Fraction], list[Fraction]]], Fraction | None]:
    d, arith = head.d, head.arith
    prec = as_int(get(data, "working_precision"), "working_precision", low=32)
    if prec > MAX_WORKING_PRECISION:
        raise CertificateError(
            f"working_precision must be an int in 32..{MAX_WORKING_PRECISION}, got {prec}"
        )
    if arith.name == "certified" and prec != arith.precision:
        raise CertificateError(f"working_precision {prec} is not the precision {arith.precision}")
    D = as_int(get(data, "denominator_bound"), "denominator_bound", low=1)
    if D.bit_length() > prec:
        raise CertificateError(f"denominator_bound has more than {prec} bits")
    U, B = _design(data, head, ncols)
    if fmpq_matrix(U).rank() != d:
        raise CertificateError("design.U is singular")
    M = _probe_matrix(B, affine)
    if M.rank() != M.nrows():
        raise CertificateError("design.B: the probes (lifted if affine) are not a basis")
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        with arith.context():
            F0, F = _samples(data, arith, ncols, npairs, 2 * H0)
            f0 = [to_arb(a) for a in F0]
            pairs = _pairs(U, ncols)
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
    lo, hi = arb_bounds(x)
    q = reconstruct_rational(lo, hi, D)
    if q is None:
        raise CertificateError(
            f"{what} ({x}) holds no unique rational with denominator <= {D}: the stored "
            "answers do not determine it under the stated assumption"
        )
    return q


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
    measured = to_arb(number(tie["answer"], tie["path"], arith))
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
        W = [_frac(Wc[i, j]) for i in range(d) for j in range(d)]
        c = [_frac(Wc[i, d]) if affine else Fraction(0) for i in range(d)]
        out.append((W, [_frac(v[i, 0]) for i in range(d)], c))
    return out


def _frac(q: flint.fmpq) -> Fraction:
    return Fraction(int(q.p), int(q.q))


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


def _compare_exact(
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


def _float_fit(
    data: dict[str, Any],
    head: Header,
    affine: bool,
    H0: int,
    ncols: int,
    npairs: int,
    ties: list[dict[str, Any]],
    claimed: list[tuple[list[Any], ...]],
    beta: Any,
) -> str:
    """Every learning query rebuilt from the float design; the claim must reproduce them."""
    arith = head.arith
    U, B = _design(data, head, ncols)
    Ua, Ba = np.array(U, dtype=np.float64), np.array(B, dtype=np.float64)
    ratios = _float_ratios(data, H0, float(getattr(arith, "unit_roundoff", 2.0**-53)))
    F0, F = _samples(data, arith, ncols, npairs, len(ratios))
    pairs = _pairs(list(Ua), ncols, half=True)
    observed = [*F0, *(a for row in F for a in row)]
    observed += [number(t["answer"], t["path"], arith) for t in ties]
    # The sequence polish's random sequences: regenerated from the seed.
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    polish = _float_polish_count(data, Ua.shape[0], H0, affine, unit)
    if polish:
        observed += numbers(get(data, "answers.polish"), "answers.polish", arith, polish)
        seed = as_int(get(data, "seed"), "seed", low=0)

    def rebuilt() -> Iterator[np.ndarray]:
        # Every learning query, built as it is read (at nn.MultiheadAttention E = 64, H = 4
        # they are 3.9 GB of float64 together).
        yield from (Ba[j][None, :] for j in range(ncols))
        for u, j in pairs:
            yield from (_float_sequence(u, Ba[j], k, m) for k, m in ratios)
        yield from (_float_sequence(Ua[t["k"]], (Ba[0] + Ba[t["j"]]) / 2, 1) for t in ties)
        if polish:
            yield from polish_sequences(Ua.shape[0], polish, seed)

    model = _model(claimed, beta, affine)
    bias = float(beta) if affine else 0.0
    floor = float_floor(observed, bias)
    worst = 0.0
    for i, (X, y) in enumerate(zip(rebuilt(), observed, strict=True)):
        expected = float(model.evaluate_batch(X[None])[0])
        ok, gap = agree(arith, y, expected, bias=bias, floor=floor)
        if not ok or not math.isfinite(expected):
            raise CertificateError(
                f"learning answer {i} (a query of length {X.shape[0]}): stored {y}, the claimed "
                f"heads give {expected} (relative gap {gap:.3e} > rtol {arith.rtol:g})"
            )
        worst = max(worst, gap)
    return (
        f"fit (float: not re-decoded; the float fit is not cheaply reproducible): the claimed "
        f"{len(claimed)} heads reproduce all {len(observed)} stored learning answers to rtol "
        f"{arith.rtol:g} (max relative gap {worst:.2e}); "
        + (
            _float_polish(
                data, arith, compress(list(rebuilt()), observed), claimed, bias, affine, polish
            )
            if polish
            else _float_parameter_tolerance(
                data, arith, Ua, Ba, F0, F, ratios, claimed, bias, affine, ncols, H0
            )
            + "; "
            + _float_prediction_bound(
                data, arith, Ua, Ba, F0, F, ratios, claimed, bias, affine, ncols, H0
            )
        )
    )


def _float_polish_count(data: dict[str, Any], d: int, H0: int, affine: bool, unit: float) -> int:
    """How many random sequences the result's sequence polish asked: a coarse box's
    (:func:`~verified_attn.multi_head.canonical_float.polish_count`, always), else the
    precision polish's (:func:`~verified_attn.multi_head.canonical_float.precision_polish_count`)
    or none, as ``answers.polish`` holds (a certificate without the field holds none)."""
    always = polish_count(d, H0, affine, unit=unit)
    if always:
        return always
    raw = get(data, "answers").get("polish", [])
    if not isinstance(raw, list):
        raise CertificateError("answers.polish must be a list")
    allowed = precision_polish_count(d, H0, affine, unit=unit)
    if len(raw) not in (0, allowed):
        raise CertificateError(
            f"answers.polish has {len(raw)} answers; the precision polish asks {allowed} "
            "random sequences or none"
        )
    return len(raw)


def _float_polish(
    data: dict[str, Any],
    arith: Arithmetic,
    rows: SequenceRows,
    claimed: list[tuple[list[Any], ...]],
    beta: float,
    affine: bool,
    polish: int,
) -> str:
    """A polished result (the sequence polish on every answer, ``polish`` of them on random
    sequences: a coarse box's, or a float64 box's precision polish): its parameter error
    estimate and prediction bound are recomputed from every stored answer at the claimed heads
    (:func:`~verified_attn.multi_head.canonical_float.polish_figures`); the stated parameter
    tolerance must cover the estimate, the recomputed prediction bound be within the rule's
    allowance, and each stored figure be at least half the recomputed one."""
    result = get(data, "result")
    stated = _stated_parameter_rtol(result, arith)
    if result.get("parameter_error_estimate_kind") != "sequences":
        raise CertificateError(
            "result.parameter_error_estimate_kind must be 'sequences' for a box the sequence "
            f"polish takes, got {result.get('parameter_error_estimate_kind')!r}"
        )
    told = float(
        number(get(result, "parameter_error_estimate"), "result.parameter_error_estimate", arith)
    )
    seed, lengths, told_ratio = _stated_prediction_bound(get(result, "prediction_bound"), arith)
    heads = _claimed_arrays(claimed, rows.queries.shape[1], affine)
    # The recomputation holds the claim to the tolerance it states, not to the header's.
    held = FloatArithmetic(arith.rtol, getattr(arith, "unit_roundoff", 2.0**-53), stated)
    try:
        estimate, (ratio, worst), sigma_min = polish_figures(
            held, heads, beta, affine, rows, seed, lengths
        )
    except PrecisionExhausted as exc:
        raise CertificateError(f"the claimed heads' polish figures (recomputed): {exc}") from exc
    if not estimate / 2 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is not between half the recomputed "
            f"{estimate:.3e} and the stated parameter tolerance {stated:g}"
        )
    if not ratio / 2 <= told_ratio:
        raise CertificateError(
            f"result.prediction_bound.ratio {told_ratio:.3e} is under half the recomputed "
            f"{ratio:.3e}"
        )
    return (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e} of "
        f"the sequence polish on all {len(rows)} answers, {polish} on random sequences, "
        f"smallest singular value {sigma_min:.2e}, recomputed); prediction bound "
        f"{ratio:.3g} x the rule's allowance ({PREDICTION_SIGMAS:g} standard deviations; "
        f"worst case {worst:.3g} x) on {PREDICTION_SEQUENCES} sequences, recomputed"
    )


def _float_prediction_bound(
    data: dict[str, Any],
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    F0: list[Any],
    F: list[list[Any]],
    ratios: list[tuple[int, int]],
    claimed: list[tuple[list[Any], ...]],
    beta: float,
    affine: bool,
    ncols: int,
    H0: int,
) -> str:
    """result.prediction_bound: the learner's first-order bound on the predictions
    (docs/multi_head.md, The prediction bound). Of kind "u-groups" it is recomputed from the
    stored grid answers and the claimed heads on the same sequences
    (:func:`~verified_attn.multi_head.canonical_float.prediction_check`): the recomputed
    figure must be within what the rule allows and the stored one at least half of it. Of
    kind "joint" it is not recomputed, so it must not be stated. A certificate without the
    field states no bound, and the summary says so."""
    raw = get(data, "result").get("prediction_bound")
    d = U.shape[0]
    joint = joint_polish(d, H0, affine, len(F0) + len(F) * len(ratios))
    if raw is None:
        return "prediction bound: not stated" + (" (a joint fit's is not recomputed)" * joint)
    if joint:  # not recomputed here, so no certificate may state it
        raise CertificateError("result.prediction_bound: a joint fit's is not recomputable")
    seed, lengths, told = _stated_prediction_bound(raw, arith)
    heads, t, answers = _float_grid(claimed, F, ratios, d, ncols, affine)
    try:
        ratio, worst = prediction_check(
            arith,
            U,
            B,
            np.array(F0, dtype=np.float64),
            answers,
            t,
            heads,
            beta,
            affine,
            seed,
            lengths,
        )
    except PrecisionExhausted as exc:
        raise CertificateError(f"the claimed heads' prediction bound (recomputed): {exc}") from exc
    if not ratio / 2 <= told:
        raise CertificateError(
            f"result.prediction_bound.ratio {told:.3e} is under half the recomputed {ratio:.3e}"
        )
    return (
        f"prediction bound {ratio:.3g} x the rule's allowance ({PREDICTION_SIGMAS:g} standard "
        f"deviations; worst case {worst:.3g} x) on {PREDICTION_SEQUENCES} sequences, "
        "recomputed from the answers and the heads"
    )


def _stated_prediction_bound(raw: Any, arith: Arithmetic) -> tuple[int, list[int], float]:
    """result.prediction_bound as stated: over ``PREDICTION_SEQUENCES`` sequences at
    ``PREDICTION_SIGMAS`` standard deviations, its seed, lengths and ratio (in [0, 1])."""
    if not isinstance(raw, dict):
        raise CertificateError("result.prediction_bound must be a mapping")
    count = raw.get("sequences")
    if (
        count != PREDICTION_SEQUENCES
        or float(number(raw.get("sigmas"), "result.prediction_bound.sigmas", arith))
        != PREDICTION_SIGMAS
    ):
        raise CertificateError(
            f"result.prediction_bound must be over {PREDICTION_SEQUENCES} sequences at "
            f"{PREDICTION_SIGMAS:g} standard deviations, got {count!r} and {raw.get('sigmas')!r}"
        )
    try:
        seed = check_seed(raw.get("seed"))
        lengths = list(check_lengths(raw.get("lengths")))
    except InvalidArgument as exc:
        raise CertificateError(f"result.prediction_bound: {exc}") from exc
    told = float(number(raw.get("ratio"), "result.prediction_bound.ratio", arith))
    if not 0 <= told <= 1:
        raise CertificateError(f"result.prediction_bound.ratio {told!r} is not in [0, 1]")
    return seed, lengths, told


def _stated_parameter_rtol(result: dict[str, Any], arith: Arithmetic) -> float:
    """result.parameter_rtol, the tolerance stated for the float parameters, in [rtol, 1)
    (a certificate without it states rtol)."""
    rtol = float(arith.rtol or 0.0)  # always set in float mode (the header's rtol)
    raw = result.get("parameter_rtol")
    stated = rtol if raw is None else float(number(raw, "result.parameter_rtol", arith))
    if not rtol <= stated < 1:
        raise CertificateError(
            f"result.parameter_rtol must be in [rtol, 1) = [{rtol:g}, 1), got {stated!r}"
        )
    return stated


def _claimed_arrays(
    claimed: list[tuple[list[Any], ...]], d: int, affine: bool
) -> list[tuple[np.ndarray, ...]]:
    """The claimed heads as float64 arrays (W, v, and c if affine)."""
    return [
        (np.array(W, dtype=np.float64).reshape(d, d), np.array(v, dtype=np.float64))
        + ((np.array(c, dtype=np.float64),) if affine else ())
        for W, v, c in claimed
    ]


def _float_grid(
    claimed: list[tuple[list[Any], ...]],
    F: list[list[Any]],
    ratios: list[tuple[int, int]],
    d: int,
    ncols: int,
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], np.ndarray, np.ndarray]:
    """The claimed heads as float64 arrays, the ratio grid t and the grid answers (the
    first d x ncols rows of F): what the float figures are recomputed from."""
    t = np.array([k / m for k, m in ratios])
    return _claimed_arrays(claimed, d, affine), t, np.array(F, dtype=np.float64)[: d * ncols]


def _float_parameter_tolerance(
    data: dict[str, Any],
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    F0: list[Any],
    F: list[list[Any]],
    ratios: list[tuple[int, int]],
    claimed: list[tuple[list[Any], ...]],
    beta: float,
    affine: bool,
    ncols: int,
    H0: int,
) -> str:
    """result.parameter_rtol, the tolerance stated for the float parameters (in [rtol, 1);
    a certificate without it states rtol), must cover the stored first-order estimate
    (result.parameter_error_estimate). Of kind "u-groups" (and without a kind), the
    estimate is recomputed from the stored grid answers and the claimed heads
    (:func:`~verified_attn.multi_head.canonical_float.heads_error_estimate`): the stated
    tolerance must cover it and the stored figure be at least half of it. Of kind
    "joint" (the learner's dense polish of small boxes, on every answer) it is not
    recomputed, and the summary says so; the kind follows from the sizes
    (:func:`~verified_attn.multi_head.canonical_float.joint_polish`), so a file cannot
    choose the unchecked one."""
    result = get(data, "result")
    stated = _stated_parameter_rtol(result, arith)
    raw_est = result.get("parameter_error_estimate")
    told = (
        None
        if raw_est is None
        else float(number(raw_est, "result.parameter_error_estimate", arith))
    )
    if told is not None and not 0 <= told <= stated:
        raise CertificateError(
            f"result.parameter_error_estimate {told!r} exceeds the stated parameter "
            f"tolerance {stated:g}"
        )
    # Which figure the learner gave is fixed by the sizes (joint_polish), not by the file.
    d = U.shape[0]
    kind = "joint" if joint_polish(d, H0, affine, len(F0) + len(F) * len(ratios)) else "u-groups"
    if result.get("parameter_error_estimate_kind", kind) != kind:
        raise CertificateError(
            f"result.parameter_error_estimate_kind must be {kind!r} at these sizes, got "
            f"{result.get('parameter_error_estimate_kind')!r}"
        )
    if kind == "joint":
        if told is None:
            raise CertificateError("a joint parameter error estimate must be stored")
        return (
            f"parameters stated to {stated:g} relative (first-order estimate {told:.2e} of "
            "the joint fit, stored, not recomputed)"
        )
    heads, t, answers = _float_grid(claimed, F, ratios, d, ncols, affine)
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    estimate = heads_error_estimate(
        U, B, np.array(F0, dtype=np.float64), answers, t, heads, beta, unit, affine
    )
    if not estimate <= stated:
        raise CertificateError(
            f"the claimed heads' first-order parameter error estimate {estimate:.3e} "
            f"(recomputed from the stored answers) exceeds the stated parameter tolerance "
            f"{stated:g}"
        )
    if told is not None and not estimate / 2 <= told:
        raise CertificateError(
            f"result.parameter_error_estimate {told:.3e} is under half the recomputed "
            f"{estimate:.3e}"
        )
    return (
        f"parameters stated to {stated:g} relative (first-order estimate {estimate:.2e}, "
        "recomputed from the answers and the heads)"
    )


def _float_rounds(
    data: dict[str, Any],
    arith: Arithmetic,
    field: str,
    limit: int,
    size: str,
    rows: Any,
    per_pair: int,
) -> list[Any]:
    """The float design's adaptive rounds at ``field``: at most ``limit`` records, each
    with a positive ``size`` (a scale or factor) and ``rows(record, path)`` rows of
    ``per_pair`` answers (kept for the record; the learning count includes them)."""
    raw = get(data, field)
    if not isinstance(raw, list) or len(raw) > limit:
        raise CertificateError(f"{field} must list at most {limit} rounds")
    for i, row in enumerate(raw):
        path = f"{field}[{i}]"
        if not number(get(row, size), f"{path}.{size}", arith) > 0:
            raise CertificateError(f"{path}.{size} must be positive")
        for r, ans in enumerate(as_list(get(row, "answers"), f"{path}.answers", rows(row, path))):
            numbers(ans, f"{path}.answers[{r}]", arith, per_pair)
    return raw


def _float_pilot(
    data: dict[str, Any],
    arith: Arithmetic,
    d: int,
    H0: int,
    affine: bool,
    per_pair: int,
) -> int:
    """design.pilot: the float pilot's discarded rounds (scale, answers of its d pairs), at
    most ``pilot_rounds - 1``; their number. design.u_scale: the kept scale, positive."""
    limit = pilot_rounds(d, H0, affine, unit=float(getattr(arith, "unit_roundoff", 2.0**-53))) - 1
    raw = _float_rounds(data, arith, "design.pilot", limit, "scale", lambda *_: d, per_pair)
    if not number(get(data, "design.u_scale"), "design.u_scale", arith) > 0:
        raise CertificateError("design.u_scale must be positive")
    return len(raw)


def _float_conditioning(
    data: dict[str, Any],
    arith: Arithmetic,
    d: int,
    ncols: int,
    per_pair: int,
) -> int:
    """design.conditioning: the float conditioning rounds (u-group k, factor, the replaced
    answers: its ncols pairs, then the halved links through u_k), at most
    ``CONDITIONING_GROUPS`` (their total is held to the bound); the queries they asked."""

    def rows(row: Any, path: str) -> int:
        k = as_int(get(row, "k"), f"{path}.k", low=0, high=d - 1)
        return ncols + (d - 1 if k == 0 else 1)

    raw = _float_rounds(
        data, arith, "design.conditioning", CONDITIONING_GROUPS, "factor", rows, per_pair
    )
    return sum(rows(row, "") * per_pair for row in raw)


def _float_sequence(u: np.ndarray, b: np.ndarray, k: int, m: int = 1) -> np.ndarray:
    return np.vstack([np.tile(b + u, (k, 1)), np.tile(b, (m, 1))])


def _float_redundancy(H0: int) -> int:
    """Redundant samples per pair of the float design beyond 2 H0 (1 if H0 >= 2)."""
    return 1 if H0 >= 2 else 0


def _float_ratios(data: dict[str, Any], H0: int, unit: float) -> list[tuple[int, int]]:
    """design.ratios: the float design's ratios for H0 heads, as :func:`float_ratios` gives
    them (2 H0 grid ratios in its window, then the redundant ones): a certificate that
    names other ratios (a longer query, a ratio outside the window) is not this design's."""
    n = 2 * H0 + _float_redundancy(H0)
    rows = as_list(get(data, "design.ratios"), "design.ratios", n)
    out = []
    for i, row in enumerate(rows):
        pair = as_list(row, f"design.ratios[{i}]", 2)
        k = as_int(pair[0], f"design.ratios[{i}][0]", low=1)
        m = as_int(pair[1], f"design.ratios[{i}][1]", low=1)
        out.append((k, m))
    if len({Fraction(k, m) for k, m in out}) != n:
        raise CertificateError(f"design.ratios repeats a ratio: {out}")
    want = float_ratios(H0, unit=unit)
    if out != want:
        raise CertificateError(
            f"design.ratios {out} are not the float design's ratios for H0 = {H0}: {want} "
            f"(log2 t evenly spaced in the window, k + m <= {max_length(H0, unit=unit)})"
        )
    return out


# ---------------------------------------------------------------------------------------
# The orthogonal method.
# ---------------------------------------------------------------------------------------


def _orthogonal(data: dict[str, Any]) -> CertificateCheck:
    from verified_attn.certificates.single_head import verify as verify_single_head

    head = parse_header(data, "multi-head", max_d=MAX_D)
    d, arith = head.d, head.arith
    if as_bool(get(data, "affine"), "affine"):
        raise CertificateError("affine must be false for the orthogonal method")
    exact = as_bool(get(data, "result.exact"), "result.exact")
    if exact != (arith.name != "float"):
        raise CertificateError(f"result.exact is {exact} in {arith.name} arithmetic")
    subspaces = as_list(get(data, "subspaces"), "subspaces")
    if not 1 <= len(subspaces) <= d:
        raise CertificateError(f"subspaces has {len(subspaces)} entries, expected 1..{d}")
    bases = [_basis(s, f"subspaces[{h}]", d) for h, s in enumerate(subspaces)]
    for g in range(len(bases)):
        for h in range(g + 1, len(bases)):
            if any(q != 0 for q in (bases[g].transpose() * bases[h]).entries()):
                raise CertificateError(f"subspaces[{g}] and subspaces[{h}] are not orthogonal")
    ranks = [B.ncols() for B in bases]
    if sum(ranks) > d:
        raise CertificateError(f"the subspaces' ranks {ranks} add up to more than d = {d}")
    phases: dict[str, int] = {}
    inner_verification = []
    lifted = []
    lines = [head.describe() + ", method orthogonal", ""]
    for h, (entry, B) in enumerate(zip(subspaces, bases, strict=True)):
        path = f"subspaces[{h}]"
        sub = get(entry, "certificate")
        dead = get(entry, "dead_answers")
        if (sub is None) == (dead is None):
            raise CertificateError(f"{path}: give exactly one of certificate or dead_answers")
        if sub is None:
            with arith.context():
                values = numbers(dead, f"{path}.dead_answers", arith, B.ncols())
                if any(arith.sign(x) != 0 for x in values):
                    raise CertificateError(f"{path}.dead_answers: not all zero (v != 0)")
            phases[f"head{h + 1}/v"] = B.ncols()
            lines.append(f"subspace {h + 1}: dead (its {B.ncols()} v answers are zero)")
            continue
        if not isinstance(sub, dict):
            raise CertificateError(f"{path}.certificate must be a JSON object")
        for key in ("arithmetic", "precision", "rtol"):
            if sub.get(key) != data.get(key):
                raise CertificateError(f"{path}.certificate.{key} differs from the certificate's")
        if sub.get("d") != B.ncols() or sub.get("affine") is not False:
            raise CertificateError(f"{path}.certificate must be a bias-free head of d = r_h")
        try:
            inner = verify_single_head(sub)
        except CertificateError as exc:
            raise CertificateError(f"{path}.certificate: {exc}") from exc
        lines.append(f"subspace {h + 1} (rank {B.ncols()}): " + "; ".join(inner.summary[2:4]))
        for name, n in get(sub, "queries.by_phase").items():
            phases[f"head{h + 1}/{name}"] = n
        if get(sub, "queries.verification"):
            inner_verification.append(f"head{h + 1}/verify")
        lifted.append(_lift(B, sub, head, path))
    if not lifted:
        raise CertificateError("every subspace is dead: there is no head to certify")
    learning = sum(n for name, n in phases.items() if not name.endswith("/verify"))
    bound = sum(r * r + r for r in ranks)
    q = check_counts(
        data,
        learning=learning,
        phases=phases,
        bound=bound,
        verification_phases=("verify", *inner_verification),
    )
    extra = set(q["by_phase"]) - {*phases, "verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")
    lines[1] = (
        f"queries: {learning} learning (bound sum_h (r_h^2 + r_h) = {bound}, ranks {ranks}); "
        f"{q['verification']} verification"
    )
    claimed, _ = _claimed_heads(data, head, False, len(bases))
    _compare_lifted(claimed, lifted, arith)
    lines.append(
        f"lifting: the {len(lifted)} re-checked restricted heads lift to the claimed heads"
    )
    model = _model(claimed, None, False)
    outer = q["by_phase"].get("verify", 0)
    with arith.context():
        lines.append(
            check_verification(data, head, _predictor(head, model), expected_queries=outer)
        )
    lines.extend(f"assumption: {a}" for a in head.assumptions)
    return CertificateCheck(ok=True, kind="multi-head", theorem=head.theorem, summary=lines)


def _basis(entry: Any, path: str, d: int) -> flint.fmpq_mat:
    rows = as_list(get(entry, "basis"), f"{path}.basis", d)
    r = len(as_list(rows[0], f"{path}.basis[0]"))
    if not 1 <= r <= d:
        raise CertificateError(f"{path}.basis must have 1..{d} columns, got {r}")
    B = [
        [rational(q, f"{path}.basis[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(as_matrix(rows, f"{path}.basis", d, r))
    ]
    Bq = fmpq_matrix(B)
    if Bq.rank() != r:
        raise CertificateError(f"{path}.basis does not have independent columns")
    return Bq


def _lift(B: flint.fmpq_mat, sub: dict[str, Any], head: Header, path: str) -> tuple[Any, Any]:
    """The sub-certificate's claimed (W', v') lifted to Q^d: W = L W' L^T, v = L v'."""
    r = B.ncols()
    params = get(sub, "result.parameters")
    L = B * (B.transpose() * B).inv()
    arith = head.arith
    where = f"{path}.certificate.result.parameters"
    rows = as_list(get(params, "W"), f"{where}.W", r)
    Wr = [_entries(row, f"{where}.W[{i}]", head, r) for i, row in enumerate(rows)]
    vr = _entries(get(params, "v"), f"{where}.v", head, r)
    if arith.name != "float":
        Wq = fmpq_matrix(Wr)
        vq = fmpq_matrix([[x] for x in vr])
        W = L * Wq * L.transpose()
        v = L * vq
        d = B.nrows()
        return [_frac(W[i, j]) for i in range(d) for j in range(d)], [
            _frac(v[i, 0]) for i in range(d)
        ]
    Lf = np.array([[float(int(q.p)) / float(int(q.q)) for q in row] for row in L.table()])
    Wf = Lf @ np.array(Wr, dtype=np.float64) @ Lf.T
    vf = Lf @ np.array(vr, dtype=np.float64)
    return Wf.ravel().tolist(), vf.tolist()


def _compare_lifted(
    claimed: list[tuple[list[Any], ...]], lifted: list[tuple[Any, Any]], arith: Arithmetic
) -> None:
    if len(claimed) != len(lifted):
        raise CertificateError(
            f"result.heads claims {len(claimed)} heads, the live subspaces give {len(lifted)}"
        )
    for h, ((W, v, _), (W2, v2)) in enumerate(zip(claimed, lifted, strict=True)):
        for name, a, b in (("W", W, W2), ("v", v, v2)):
            scale = max([1.0, *(abs(float(x)) for x in b)])
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                bad = x != y if arith.name != "float" else abs(x - y) > FLOAT_RTOL * scale
                if bad:
                    raise CertificateError(
                        f"result.heads[{h}].{name} entry {i}: claimed {x}, the re-checked "
                        f"restricted head lifts to {y}"
                    )

"""Canonical multi-head recovery without subspaces (in the style of arXiv 2608.03294).

>>> import verified_attn as va
>>> from verified_attn.models import MultiHeadAttention
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> rec = learn_multi_head(va.Oracle(model, "certified"), heads=2)
>>> rec.parameters["heads"] == canonical_form(model).heads
True
>>> rec.queries, canonical_query_bound(2, 2), follow_up_query_bound(2, 2)
(22, 22, 29)

For tokens a = b + u and b, the query ``X_k = [a, ..., a (k copies), b]`` gives each head the
scores ``a^T W_h b`` (k times) and ``b^T W_h b``, so

    F(k) = sum_h [ b^T v_h + u^T v_h * k lam_h / (1 + k lam_h) ],  lam_h = exp(u^T W_h b),

a rational function of k of degree H with poles ``-1/lam_h`` and residues
``-u^T v_h / lam_h``. ``F(0)`` is the length-1 query [b]; k = 1..2H give 2H + 1 samples
that fix ``F = P/Q`` (Q(0) = 1) by one linear system. The roots of Q give each canonical
head's score ``u^T W_h b = log lam_h``, the residues its ``u^T v_h``.

Design (ours): bases ``u_1..u_d`` and ``b_1..b_d`` (random small rationals); pairs
``(u_k, b_j)`` for all k, j, plus the links ``(u_1 + u_k, b_1)``, k = 2..d. Heads are
matched across j for fixed u_k by their residue ``u_k^T v_h`` (it does not depend on b),
and across k through the links, where score and residue must be the sums of those at
``u_1`` and ``u_k``. Then ``U^T W_h B`` and ``U^T v_h`` are known exactly and solved
for. Queries: ``d + 2H (d^2 + d - 1)``, against the follow-up's ``4Hd^2 - 2H + 1`` and
the parameter count ``H (d^2 + d)``; longest query ``2H + 1``. Heads with equal v tie in
the residue labelling; each tie costs one query (F(1) at ``(u_k, (b_1 + b_j)/2)``, which
every candidate order predicts exactly), at most ``d (d - 1)``, so the worst case
``canonical_query_limit`` stays within the follow-up's count.

Affine heads (score bias c_h, output bias beta): one more generic probe b_0 makes the
scores' affine dependence on b solvable (``d + 1 + 2H (d^2 + 2d - 1)`` queries, at most
``d^2`` tie links); beta is F(0) at b_1 minus ``b_1^T sum_h v_h``.

Certified arithmetic: the linear system and the roots are solved in arb, the scores and
residues reconstructed as rationals (denominator bound), then verified on fresh queries.
Exact arithmetic: the exact answers are enclosed in arb and the same steps run; the final
check compares exact values. If only an upper bound ``max_heads`` is known, the degree is
found as the largest m <= max_heads whose system is *certified* nonsingular: above the true
degree the system is exactly singular, so arb can never certify it.

Float arithmetic (e.g. a PyTorch module, ``heads=`` only): the same design scaled to
entries of size ~1, each pair decoded in float64 (linear solve, numpy roots), heads matched
by the nearest residues and link sums (an order wins only if all others miss by 10x more;
else a tie link, or NotIdentifiable), then refined by Gauss-Newton on all learning answers
at once (overdetermined, far better conditioned than one pair). Same query counts; the
result is returned only if the fresh queries agree to the oracle's rtol.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn._legacy import Recovery, split_counts
from verified_attn.arithmetic import arb_bounds, reconstruct_rational
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import MultiHeadAttention, as_rational_sequence
from verified_attn.multi_head.canonical import canonical_form
from verified_attn.multi_head.symbolic import fresh_sequences
from verified_attn.oracle import Oracle

__all__ = [
    "canonical_query_bound",
    "canonical_query_limit",
    "follow_up_query_bound",
    "learn_multi_head",
]

THEOREM = "follow-up/canonical"

Pair = tuple[list[Fraction], list[Fraction]]  # (u, b)


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


def _int(x: Any, name: str, low: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer) or int(x) < low:
        raise InvalidArgument(f"{name} must be an int >= {low}, got {x!r}")
    return int(x)


def _basis(d: int, rng: np.random.Generator, den: int) -> list[list[Fraction]]:
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


def _design(
    d: int, seed: int, affine: bool
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[tuple[list[Fraction], int]]]:
    """Bases U, B; the probes b (B, and one more generic b_0 last if affine, affinely
    independent of B); pairs (u, index of b)."""
    rng = np.random.default_rng(seed)
    U = _basis(d, rng, 1024 * d)  # |u^T W b| <= max |W_ij|: scores O(1) at every d
    cols = _basis(d, rng, 1024 * d)
    if affine:
        # Not b_0 = 0: there the scores are u^T c_h, equal for heads sharing c (often 0),
        # and their poles would merge. A generic b_0 keeps every head's score distinct.
        while True:
            b0 = _basis(d, rng, 1024 * d)[0]
            if _lifted([*cols, b0]).rank() == d + 1:
                break
        cols = [*cols, b0]
    pairs = [(U[k], j) for k in range(d) for j in range(len(cols))]
    pairs += [([a + c for a, c in zip(U[0], U[k], strict=True)], 0) for k in range(1, d)]
    return U, cols, pairs


def _sequence(u: list[Fraction], b: list[Fraction], k: int) -> list[list[Fraction]]:
    a = [x + y for x, y in zip(b, u, strict=True)]
    return [a] * k + [b]


def _to_arb(x: Any) -> flint.arb:
    """An exact-mode answer (SymPy closed form of rationals and exp) enclosed in a ball."""
    if isinstance(x, flint.arb):
        return x
    x = sympy.sympify(x)
    if x.is_Rational:
        return flint.arb(flint.fmpq(int(x.p), int(x.q)))
    if x == sympy.E:
        return flint.arb(1).exp()
    if isinstance(x, sympy.exp):
        return _to_arb(x.args[0]).exp()
    if x.is_Add:
        return sum((_to_arb(a) for a in x.args), flint.arb(0))
    if x.is_Mul:
        out = flint.arb(1)
        for a in x.args:
            out *= _to_arb(a)
        return out
    if x.is_Pow and x.exp.is_Integer:
        base = _to_arb(x.base)
        n = int(x.exp)
        return base**n if n >= 0 else 1 / base ** (-n)
    if x.is_Pow and x.base == sympy.E:
        return _to_arb(x.exp).exp()
    raise ModelClassMismatch(
        f"the exact oracle answered {x}, which is not a closed form in rationals and exp",
        observed=x,
        expected="a sum of rational multiples of exponentials",
    )


def _interpolate(F: list[flint.arb], m: int) -> tuple[flint.arb_mat, flint.arb_mat] | None:
    """P (deg <= m), Q (deg <= m, Q(0) = 1) with F(k) Q(k) = P(k) at k = 0..2m; None if
    the system cannot be certified nonsingular."""
    rows, rhs = [], []
    for k in range(2 * m + 1):
        kk = flint.arb(k)
        row = [kk**i for i in range(m + 1)] + [-F[k] * kk**i for i in range(1, m + 1)]
        rows.append(row)
        rhs.append([F[k]])
    try:
        sol = flint.arb_mat(rows).solve(flint.arb_mat(rhs))
    except ZeroDivisionError:
        return None
    P = [sol[i, 0] for i in range(m + 1)]
    Q = [flint.arb(1)] + [sol[m + 1 + i, 0] for i in range(m)]
    return P, Q


def _poles(F: list[flint.arb], m: int, prec: int) -> list[tuple[flint.arb, flint.arb]]:
    """(score u^T W b, residue u^T v) per head, as balls, from the samples F(0..2m)."""
    pq = _interpolate(F, m)
    if pq is None:
        raise PrecisionExhausted(
            "the interpolation system of a pair could not be certified nonsingular: two heads "
            "share a score there, a residue u^T v_h is 0 (H too large), or the precision is "
            "too low; rerun with another seed or a higher precision"
        )
    P, Q = pq
    Qa, Pa = flint.arb_poly(Q), flint.arb_poly(P)
    dQ = Qa.derivative()
    try:
        # Isolate, refined to 2^-40 (well within reach of 256-bit data); interval Newton
        # below takes the boxes to the accuracy the data allow.
        boxes = flint.acb_poly([flint.acb(c) for c in Q]).roots(tol=flint.arb(2) ** -40)
    except ValueError as exc:
        raise PrecisionExhausted(
            f"the poles of F could not be isolated ({exc}); two heads may share a score here"
        ) from exc
    out = []
    for box in boxes:
        if not box.imag.contains(0):
            raise ModelClassMismatch(
                f"F(k) has a non-real pole {box}: not a sum of softmax heads",
                observed=box,
                expected="a pole -1/lambda with lambda > 0",
            )
        root = _newton(Qa, dQ, box.real)
        if not root < 0:
            raise ModelClassMismatch(
                f"F(k) has a pole at {root}, not certified negative: not a sum of softmax heads",
                observed=root,
                expected="a pole -1/lambda with lambda > 0",
            )
        lam = -1 / root
        residue = Pa(root) / dQ(root)
        out.append((lam.log(), -lam * residue))
    return out


def _newton(Q: flint.arb_poly, dQ: flint.arb_poly, X: flint.arb) -> flint.arb:
    """Interval Newton refinement of a simple real root isolated in X (stays an enclosure:
    N(X) = m - Q(m)/Q'(X) contains every root in X, so X & N(X) does too)."""
    for _ in range(64):
        mid = flint.arb(X.mid())
        slope = dQ(X)
        if slope.contains(0) or not slope.is_finite():
            raise PrecisionExhausted(
                f"the pole isolated in {X} could not be refined: Q' may vanish"
            )
        step = Q(mid) / slope
        N = mid - step
        if not N.overlaps(X):
            raise PrecisionExhausted(f"interval Newton lost the pole isolated in {X}")
        new = N.intersection(X)
        if not new.rad() < X.rad():
            return new
        X = new
    return X


def _rational(x: flint.arb, D: int, what: str) -> Fraction:
    lo, hi = arb_bounds(x)
    q = reconstruct_rational(lo, hi, D)
    if q is None:
        raise PrecisionExhausted(
            f"{what} ({x}) did not reconstruct to a unique rational with denominator <= {D}; "
            "raise the precision or give a denominator_bound"
        )
    return q


def learn_multi_head(
    oracle: Oracle,
    *,
    heads: int | None = None,
    max_heads: int | None = None,
    verify: int = 8,
    seed: int = 0,
    denominator_bound: int | None = None,
    affine: bool | None = None,
) -> Recovery:
    """Recover the canonical form of a multi-head oracle (exact, certified or float).

    Give ``heads`` (the number of canonical heads) or ``max_heads`` (an upper bound H0; the
    queries are then counted with H0). The result's ``parameters["heads"]`` is the canonical
    form, equal (``==``) to ``canonical_form(model).heads`` for rational ground truth.
    ``affine`` (default: what the oracle declares) learns score biases c_h and the output
    bias beta too (``parameters["beta"]``): one more generic probe b_0 makes the scores'
    affine dependence on b solvable, and beta = F(0) at b_1 minus ``b_1^T sum_h v_h``.

    Float oracles (e.g. a PyTorch module) are decoded in float64 with the same queries and
    accepted only if the fresh verification queries agree to the oracle's ``rtol``; the heads
    are then float arrays (``parameters["heads"]``, canonical order) and only ``heads=``
    is accepted (finding the degree needs a certified decision).

    >>> import verified_attn as va
    >>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [1]), "float"), heads=1)
    >>> rec.queries, rec.exact, rec.verified, rec.verification_error < 1e-12
    (3, False, True, True)
    >>> learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [1]), "float"), max_heads=1)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: max_heads needs arithmetic 'exact' or 'certified'; a float oracle needs heads=
    """
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    arith = oracle.arithmetic
    if (heads is None) == (max_heads is None):
        raise InvalidArgument("give exactly one of heads= (known H) or max_heads= (an upper bound)")
    if arith.name == "float" and heads is None:
        # The degree test needs a certified singularity decision; a float rank is a guess.
        raise InvalidArgument(
            "max_heads needs arithmetic 'exact' or 'certified'; a float oracle needs heads="
        )
    H0 = _int(
        heads if heads is not None else max_heads, "heads" if heads is not None else "max_heads", 1
    )
    verify = _int(verify, "verify", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    if denominator_bound is not None:
        denominator_bound = _int(denominator_bound, "denominator_bound", 1)
    declared = oracle.model_class in ("multi-head-affine", "single-head-affine")
    if affine is None:
        affine = declared
    elif not isinstance(affine, bool):
        raise InvalidArgument(f"affine must be True, False or None, got {affine!r}")
    elif declared and not affine:
        raise InvalidArgument(
            f"affine=False, but the oracle declares model class {oracle.model_class!r} "
            "(score or output biases): pass affine=True or leave it None"
        )
    d = oracle.d
    # The worst case, ties included: never exceeded, so a budget is checked against it.
    bound = canonical_query_limit(d, H0, affine=affine)
    oracle.require_remaining(bound, verify, "learn_multi_head")
    if arith.name == "float":
        return _learn_float(oracle, H0, verify, seed, affine, bound)
    prec = arith.precision if arith.precision is not None else 256
    D = denominator_bound if denominator_bound is not None else 2 ** (prec // 4)
    U, B, pairs = _design(d, seed, affine)
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent

    old_prec = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        with oracle.phase("F(0)"):
            f0 = [_to_arb(a) for a in oracle.query_many([[b] for b in B])]
        samples: list[list[flint.arb]] = []
        with oracle.phase("F(k)"):
            for u, j in pairs:
                ans = oracle.query_many([_sequence(u, B[j], k) for k in range(1, 2 * H0 + 1)])
                samples.append([f0[j], *(_to_arb(a) for a in ans)])
        H = _degree(samples, H0) if heads is None else H0
        decoded = [_decode(F, H, prec, D) for F in samples]

        def tie_links(needed: list[tuple[int, int]]) -> list[tuple[flint.arb, flint.arb]]:
            """F(1) at (u_k, (b_1 + b_j)/2) for each tie, in one round; with its F(0) =
            ((b_1 + b_j)/2)^T sum v + beta, known without a query (affine in b)."""
            seqs = []
            for k, j in needed:
                b = [(x + y) / 2 for x, y in zip(B[0], B[j], strict=True)]
                seqs.append(_sequence(U[k], b, 1))
            with oracle.phase("tie links"):
                ans = oracle.query_many(seqs)
            return [
                ((f0[0] + f0[j]) / 2, _to_arb(a)) for (_, j), a in zip(needed, ans, strict=True)
            ]

        canon = _assemble(decoded, U, B, d, H, tie_links, affine)
        beta = None
        if affine:
            # F(0) at b_1 is b_1^T sum_h v_h + beta, and sum_h v_h is now known exactly.
            total_v = [sum((head[1][i] for head in canon), Fraction(0)) for i in range(d)]
            known = sum((x * y for x, y in zip(B[0], total_v, strict=True)), Fraction(0))
            beta = _rational(f0[0] - _arb(known), D, "the output bias beta")
    finally:
        flint.ctx.prec = old_prec
    candidate = MultiHeadAttention(canon, beta=beta)
    with oracle.phase("verify"):
        _verify(oracle, candidate, verify, seed)
    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    form = canonical_form(candidate)
    per_head = "(d^2 + 2d)" if affine else "(d^2 + d)"
    params = H0 * (d * d + (2 * d if affine else d)) + (1 if affine else 0)
    notes = [
        f"{learning} learning queries ({by_phase.get('tie links', 0)} tie links): ours "
        f"{canonical_query_bound(d, H0, affine=affine)} plus at most "
        f"{bound - canonical_query_bound(d, H0, affine=affine)} tie links, <= {bound}; "
        f"follow-up 4Hd^2 - 2H + 1 = {follow_up_query_bound(d, H0)} (bias-free model); "
        f"parameters {per_head}H{' + 1' if affine else ''} = {params}",
        f"{H} canonical heads found" + (f" (upper bound {H0})" if heads is None else ""),
    ]
    return Recovery(
        theorem=THEOREM,
        parameters={"heads": form.heads, "beta": candidate.beta}
        if affine
        else {"heads": form.heads},
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=bound,
        parameter_count=H * (d * d + (2 * d if affine else d)) + (1 if affine else 0),
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=2 * H0 + 1,  # the learning queries' longest: [a]*2H0 + [b]
        rounds=1 + (1 if by_phase.get("tie links") else 0),  # tie links: one adaptive round
        notes=notes,
    )


def _decode(F: list[flint.arb], H: int, prec: int, D: int) -> list[tuple[Fraction, Fraction]]:
    return [
        (_rational(s, D, "a score u^T W b"), _rational(r, D, "a residue u^T v"))
        for s, r in _poles(F, H, prec)
    ]


def _degree(samples: list[list[flint.arb]], H0: int) -> int:
    """The largest m <= H0 whose system is certified nonsingular for every pair."""
    for m in range(H0, 0, -1):
        if all(_interpolate(F, m) is not None for F in samples):
            return m
    raise NotIdentifiable("no pair gives a certified rational function of degree >= 1: f is 0")


def _match(
    base: list[tuple[Fraction, Fraction]],
    other: list[tuple[Fraction, Fraction]],
    link: list[tuple[Fraction, Fraction]],
    combine: Any,
    what: str,
) -> tuple[int, ...]:
    """The unique permutation p with ``{combine(base[h], other[p[h]])} == link``."""
    target = sorted(link)
    H = len(base)
    found = []
    for perm in itertools.permutations(range(H)):
        got = [combine(base[h], other[perm[h]]) for h in range(H)]
        if None not in got and sorted(got) == target:
            found.append(perm)
    if len(found) != 1:
        raise NotIdentifiable(
            f"the link {what} is consistent with {len(found)} head orders, not exactly one; "
            "rerun with another seed"
        )
    return found[0]


def _assemble(
    decoded: list[list[tuple[Fraction, Fraction]]],
    U: list[list[Fraction]],
    cols: list[list[Fraction]],
    d: int,
    H: int,
    tie_links: Any,
    affine: bool,
) -> list[tuple[Any, ...]]:
    """Match poles to heads across pairs; solve for ``W_h``, ``v_h`` (and ``c_h``).

    Heads are labelled by their order at (u_1, b_1). The link (u_1 + u_k, b_1) carries
    them to (u_k, b_1): score and residue add (both linear in u). At (u_k, b_j) the residue
    u_k^T v_h labels them when the residues are distinct (distinct v_h, generic u). Heads
    with equal v tie; then one query, F(1) at (u_k, (b_1 + b_j)/2), decides among the orders
    that respect the residues: each predicts ``F(1) = F(0) + sum_h r_h sigmoid((s_h(k, 1)
    + s_h(k, j))/2)`` exactly (scores are affine in b), and exactly one prediction may meet
    the measured ball. So a tie costs 1 query, not a new rational function's 2H.

    Scores are ``S_h[k, j] = u_k^T (W_h b_j + c_h)``, so ``[U^T W_h | U^T c_h] M = S_h``
    with M the probes lifted to ``[b_j; 1]`` (invertible: affinely independent probes).
    """
    ncols = len(cols)
    grid = {(k, j): decoded[k * ncols + j] for k in range(d) for j in range(ncols)}
    links = {k: decoded[d * ncols + k - 1] for k in range(1, d)}
    # labelled[k][j][h] = (score, residue) of head h at (u_k, b_j)
    labelled: dict[tuple[int, int], list[tuple[Fraction, Fraction]]] = {(0, 0): grid[(0, 0)]}
    for k in range(1, d):
        perm = _match(
            grid[(0, 0)],
            grid[(k, 0)],
            links[k],
            lambda x, y: (x[0] + y[0], x[1] + y[1]),
            f"(u_1 + u_{k + 1}, b_1)",
        )
        labelled[(k, 0)] = [grid[(k, 0)][perm[h]] for h in range(H)]
    ties: list[tuple[int, int]] = []
    for k in range(d):
        residues = [r for _, r in labelled[(k, 0)]]
        for j in range(1, ncols):
            here = grid[(k, j)]
            if sorted(r for _, r in here) != sorted(residues):
                raise ModelClassMismatch(
                    f"the residues u^T v_h at (u_{k + 1}, b_{j + 1}) differ from those at "
                    f"(u_{k + 1}, b_1): not a sum of {H} softmax heads",
                    observed=sorted(r for _, r in here),
                    expected=sorted(residues),
                )
            if len(set(residues)) == H:
                by_r = {r: (s, r) for s, r in here}
                labelled[(k, j)] = [by_r[r] for r in residues]
            else:
                ties.append((k, j))
    if ties:
        for (k, j), (f0, measured) in zip(ties, tie_links(ties), strict=True):
            perm = _resolve_tie(labelled[(k, 0)], grid[(k, j)], f0, measured, k, j)
            labelled[(k, j)] = [grid[(k, j)][perm[h]] for h in range(H)]
    Ut_inv = _fmpq_mat(U).inv()  # rows u_k: this is U^T
    M_inv = (_lifted(cols) if affine else _fmpq_mat(cols).transpose()).inv()
    out: list[tuple[Any, ...]] = []
    for h in range(H):
        S = flint.fmpq_mat(d, ncols)
        r = flint.fmpq_mat(d, 1)
        for k in range(d):
            r[k, 0] = _q(labelled[(k, 0)][h][1])
            for j in range(ncols):
                S[k, j] = _q(labelled[(k, j)][h][0])
        Wc = _fractions(Ut_inv * S * M_inv)  # [W_h | c_h]
        head: tuple[Any, ...] = (
            [row[:d] for row in Wc],
            [row[0] for row in _fractions(Ut_inv * r)],
        )
        if affine:
            head = (*head, [row[d] for row in Wc])
        out.append(head)
    return out


def _q(x: Fraction) -> flint.fmpq:
    return flint.fmpq(x.numerator, x.denominator)


def _fmpq_mat(rows: list[list[Fraction]]) -> flint.fmpq_mat:
    return flint.fmpq_mat([[_q(x) for x in row] for row in rows])


def _lifted(cols: list[list[Fraction]]) -> flint.fmpq_mat:
    """The (d + 1) x n matrix with columns ``[b_j; 1]``."""
    return _fmpq_mat(
        [[b[i] for b in cols] for i in range(len(cols[0]))] + [[Fraction(1)] * len(cols)]
    )


def _fractions(m: flint.fmpq_mat) -> list[list[Fraction]]:
    return [
        [Fraction(int(m[i, j].p), int(m[i, j].q)) for j in range(m.ncols())]
        for i in range(m.nrows())
    ]


def _verify(oracle: Oracle, candidate: MultiHeadAttention, count: int, seed: int) -> None:
    arith = oracle.arithmetic
    queries = fresh_sequences(oracle.d, count, seed + 104729)
    answers = oracle.query_many(queries)
    for X, observed in zip(queries, answers, strict=True):
        with arith.context():
            expected = candidate._evaluate_rational(as_rational_sequence(X, oracle.d), arith)
        if not arith.agree(observed, expected):
            raise ModelClassMismatch(
                f"the oracle is not the recovered canonical heads: on the fresh query "
                f"{X.tolist()} it answered {observed}, the recovered model gives {expected}",
                query=X,
                observed=observed,
                expected=expected,
            )


def _arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def _resolve_tie(
    base: list[tuple[Fraction, Fraction]],
    here: list[tuple[Fraction, Fraction]],
    f0: flint.arb,
    measured: flint.arb,
    k: int,
    j: int,
) -> tuple[int, ...]:
    """The unique head order at (u_k, b_j) whose predicted F(1) at (u_k, (b_1 + b_j)/2) meets
    the measured ball (both balls contain the true value for the true order)."""
    H = len(base)
    found = []
    for perm in itertools.permutations(range(H)):
        if any(here[perm[h]][1] != base[h][1] for h in range(H)):
            continue  # residues u_k^T v_h do not depend on b: only tied heads may swap
        predicted = f0
        for h in range(H):
            lam = (_arb(base[h][0] + here[perm[h]][0]) / 2).exp()
            predicted += _arb(base[h][1]) * lam / (1 + lam)
        if predicted.overlaps(measured):
            found.append(perm)
    if len(found) != 1:
        raise NotIdentifiable(
            f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2) is consistent with {len(found)} head "
            "orders, not exactly one; rerun with another seed"
        )
    return found[0]


# ---------------------------------------------------------------------------------------
# Float mode: the same design and decoding in float64, matched by nearest values and
# accepted only after the fresh-query verification at the oracle's tolerance.
# ---------------------------------------------------------------------------------------

# Float design scale: the exact design's entries (|x| < 1/d, chosen for exact rationals)
# times d * _FLOAT_SCALE, so the probes have entries of size ~1 and the scores of typical
# (PyTorch-initialised) heads are spread enough that the poles -1/lam_h stay apart.
_FLOAT_SCALE = 2.0
# Matching in float: the order with the smallest mismatch wins only if every other order
# misses by _MATCH_MARGIN times more (noise vs a real gap between heads); otherwise the
# step is ambiguous (a tie link decides, or NotIdentifiable). Soundness comes from the
# fresh-query verification, not from these thresholds.
_MATCH_MARGIN = 10.0


def _float_design(
    d: int, seed: int, affine: bool
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, int]]]:
    U, B, _ = _design(d, seed, affine)
    s = d * _FLOAT_SCALE
    Uf = np.array([[float(x) * s for x in row] for row in U])
    Bf = np.array([[float(x) * s for x in row] for row in B])
    pairs = [(Uf[k], j) for k in range(d) for j in range(len(Bf))]
    pairs += [(Uf[0] + Uf[k], 0) for k in range(1, d)]
    return Uf, Bf, pairs


def _float_sequence(u: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    return np.vstack([np.tile(b + u, (k, 1)), b[None, :]])


def _float_poles(F: np.ndarray, m: int) -> list[tuple[float, float]]:
    """(score, residue) per head from the float samples F(0..2m)."""
    k = np.arange(2 * m + 1, dtype=np.float64)
    A = np.hstack([k[:, None] ** np.arange(m + 1), -F[:, None] * k[:, None] ** np.arange(1, m + 1)])
    try:
        sol = np.linalg.solve(A, F)
    except np.linalg.LinAlgError as exc:
        raise PrecisionExhausted(
            "the float interpolation system of a pair is singular: two heads share a score "
            "there or a residue u^T v_h is 0 (H too large)"
        ) from exc
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    dQ = Q.deriv()
    roots = Q.roots()
    if len(roots) != m:
        raise PrecisionExhausted(
            f"the fitted denominator has degree {len(roots)} < {m}: a head's pole ran to "
            "infinity in float64 (a residue near 0 or H too large)"
        )
    out = []
    for z in roots:
        # In float64 a non-real or positive pole is either noise on nearly merged poles or
        # a map outside the class; the float decoding cannot tell which, so it says both.
        if abs(z.imag) > 1e-8 * abs(z):
            raise PrecisionExhausted(
                f"F(k) has a non-real pole {z} in float64: two poles too close to separate "
                "(or not a sum of softmax heads); rerun with another seed"
            )
        root = float(z.real)
        # One Newton step on the real root polishes what the eigenvalue solver left.
        if dQ(root) != 0:
            root -= Q(root) / dQ(root)
        if not root < 0:
            raise PrecisionExhausted(
                f"F(k) has a pole at {root} >= 0 in float64: a residue u^T v_h too small to "
                "resolve (or not a sum of softmax heads); rerun with another seed"
            )
        lam = -1.0 / root
        out.append((math.log(lam), float(-lam * P(root) / dQ(root))))
    return out


def _ranked(errors: dict[tuple[int, ...], float]) -> list[tuple[int, ...]]:
    """The orders indistinguishable from the best one (within _MATCH_MARGIN of its error)."""
    best = min(errors.values())
    return [p for p, e in sorted(errors.items(), key=lambda x: x[1]) if e <= _MATCH_MARGIN * best]


def _float_match(
    base: list[tuple[float, float]],
    other: list[tuple[float, float]],
    link: list[tuple[float, float]],
    what: str,
) -> tuple[int, ...]:
    """The order p with ``{base[h] + other[p[h]]}`` nearest to ``link`` (scores and
    residues add along the link), if it is clearly nearer than every other order."""
    H = len(base)
    s_scale = max(1.0, *(abs(x[0]) for x in link))
    r_scale = max(abs(x[1]) for x in link) or 1.0  # all residues 0: absolute
    errors = {}
    for perm in itertools.permutations(range(H)):
        got = [(base[h][0] + other[perm[h]][0], base[h][1] + other[perm[h]][1]) for h in range(H)]
        errors[perm] = min(
            max(
                max(
                    abs(got[h][0] - link[o[h]][0]) / s_scale,
                    abs(got[h][1] - link[o[h]][1]) / r_scale,
                )
                for h in range(H)
            )
            for o in itertools.permutations(range(H))
        )
    found = _ranked(errors)
    if len(found) != 1:
        raise NotIdentifiable(
            f"the link {what} is consistent with {len(found)} head orders in float64, not "
            "exactly one; rerun with another seed"
        )
    return found[0]


def _refine(
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], float]:
    """Gauss-Newton on all learning answers at once, started from the per-pair decoding.

    Each pair alone is a square (2H + 1)-point fit whose poles are ill-conditioned when two
    scores are close or a residue u^T v_h is small; together the answers overdetermine the
    H (d^2 + 2d) + 1 parameters (``F = beta + sum_h b^T v_h + u^T v_h sigmoid(u^T (W_h b +
    c_h) + log k)``, and ``F(0) = beta + sum_h b^T v_h``), so the joint least-squares fit is
    far better conditioned. Returns the iterate with the smallest residual (never worse
    than the start); the fresh-query verification still decides.
    """
    u, b, logk, y = rows  # (n, d), (n, d), (n,) with -inf for F(0), (n,)
    d, H = u.shape[1], len(heads)
    has_k = np.isfinite(logk)
    lk = np.where(has_k, logk, 0.0)

    def unpack(theta: np.ndarray) -> tuple[list[tuple[np.ndarray, ...]], float]:
        out, pos = [], 0
        for _ in range(H):
            W = theta[pos : pos + d * d].reshape(d, d)
            v = theta[pos + d * d : pos + d * d + d]
            pos += d * d + d
            if affine:
                out.append((W, v, theta[pos : pos + d]))
                pos += d
            else:
                out.append((W, v))
        return out, (float(theta[pos]) if affine else 0.0)

    def pack(hs: list[tuple[np.ndarray, ...]], bt: float) -> np.ndarray:
        parts = [np.concatenate([h[0].ravel(), *h[1:]]) for h in hs]
        return np.concatenate([*parts, [bt] if affine else []])

    def residual_and_jacobian(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hs, bt = unpack(theta)
        F = np.full(len(y), bt)
        cols = []
        for h in hs:
            W, v = h[0], h[1]
            z = np.einsum("ni,ij,nj->n", u, W, b) + lk
            if affine:
                z = z + u @ h[2]
            sig = np.where(has_k, 0.5 * (1.0 + np.tanh(0.5 * z)), 0.0)  # no overflow
            ds = sig * (1.0 - sig)
            uv = u @ v
            F += b @ v + uv * sig
            g = uv * ds  # dF/dz
            cols.append((g[:, None, None] * u[:, :, None] * b[:, None, :]).reshape(len(y), -1))
            cols.append(b + sig[:, None] * u)
            if affine:
                cols.append(g[:, None] * u)
        if affine:
            cols.append(np.ones((len(y), 1)))
        return F - y, np.hstack(cols)

    theta = pack(heads, beta)
    res, J = residual_and_jacobian(theta)
    best, best_norm = theta, float(np.linalg.norm(res))
    for _ in range(20):
        step = np.linalg.lstsq(J, -res, rcond=None)[0]
        theta = theta + step
        res, J = residual_and_jacobian(theta)
        norm = float(np.linalg.norm(res))
        if not np.isfinite(norm):
            break
        if norm < best_norm:
            best, best_norm = theta, norm
        if np.linalg.norm(step) <= 1e-15 * max(1.0, float(np.linalg.norm(theta))):
            break
    return unpack(best)


def _learn_float(
    oracle: Oracle, H: int, verify: int, seed: int, affine: bool, bound: int
) -> Recovery:
    d = oracle.d
    U, B, pairs = _float_design(d, seed, affine)
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent
    with oracle.phase("F(0)"):
        f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
    with oracle.phase("F(k)"):
        seqs = [_float_sequence(u, B[j], k) for u, j in pairs for k in range(1, 2 * H + 1)]
        ans = np.array(oracle.query_many(seqs), dtype=np.float64).reshape(len(pairs), 2 * H)
    decoded = [
        _float_poles(np.concatenate([[f0[j]], a]), H) for (_, j), a in zip(pairs, ans, strict=True)
    ]
    ncols = len(B)
    grid = {(k, j): decoded[k * ncols + j] for k in range(d) for j in range(ncols)}
    labelled = {(0, 0): grid[(0, 0)]}
    for k in range(1, d):
        perm = _float_match(
            grid[(0, 0)], grid[(k, 0)], decoded[d * ncols + k - 1], f"(u_1 + u_{k + 1}, b_1)"
        )
        labelled[(k, 0)] = [grid[(k, 0)][perm[h]] for h in range(H)]
    ties: list[tuple[int, int, list[tuple[int, ...]]]] = []
    for k in range(d):
        residues = [r for _, r in labelled[(k, 0)]]
        r_scale = max(abs(r) for r in residues) or 1.0
        for j in range(1, ncols):
            here = grid[(k, j)]
            orders = _ranked(
                {
                    perm: max(abs(here[perm[h]][1] - residues[h]) for h in range(H)) / r_scale
                    for perm in itertools.permutations(range(H))
                }
            )
            if len(orders) == 1:
                labelled[(k, j)] = [here[orders[0][h]] for h in range(H)]
            else:
                ties.append((k, j, orders))
    if ties:
        # One F(1) at (u_k, (b_1 + b_j)/2) per tie, as in exact mode; the order whose
        # prediction is nearest must be clearly nearer than the others.
        seqs = [_float_sequence(U[k], (B[0] + B[j]) / 2, 1) for k, j, _ in ties]
        with oracle.phase("tie links"):
            measured = oracle.query_many(seqs)
        for (k, j, orders), y in zip(ties, measured, strict=True):
            base, here = labelled[(k, 0)], grid[(k, j)]
            f_mid = (f0[0] + f0[j]) / 2
            misses = {
                perm: abs(
                    f_mid
                    + sum(
                        base[h][1] / (1 + math.exp(-(base[h][0] + here[perm[h]][0]) / 2))
                        for h in range(H)
                    )
                    - float(y)
                )
                for perm in orders
            }
            ok = _ranked(misses)
            if len(ok) != 1:
                raise NotIdentifiable(
                    f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2) is consistent with {len(ok)} "
                    "head orders in float64, not exactly one; rerun with another seed"
                )
            labelled[(k, j)] = [here[ok[0][h]] for h in range(H)]
    # S_h = U [W_h | c_h] M with M the probes (lifted to [b; 1] if affine).
    M = np.vstack([B.T, np.ones((1, ncols))]) if affine else B.T
    Uinv, Minv = np.linalg.inv(U), np.linalg.inv(M)
    heads: list[tuple[np.ndarray, ...]] = []
    for h in range(H):
        S = np.array([[labelled[(k, j)][h][0] for j in range(ncols)] for k in range(d)])
        r = np.array([labelled[(k, 0)][h][1] for k in range(d)])
        Wc = Uinv @ S @ Minv
        head: tuple[np.ndarray, ...] = (Wc[:, :d], Uinv @ r)
        if affine:
            head = (*head, Wc[:, d])
        heads.append(head)
    beta0 = float(f0[0] - B[0] @ sum(hd[1] for hd in heads)) if affine else 0.0
    # The learning answers as rows (u, b, log k, F): F(0) rows carry log k = -inf.
    us = [np.zeros(d)] * ncols + [u for u, _ in pairs for _ in range(2 * H)]
    bs = [*B] + [B[j] for _, j in pairs for _ in range(2 * H)]
    logk = [-np.inf] * ncols + [math.log(k) for _ in pairs for k in range(1, 2 * H + 1)]
    ys = np.concatenate([f0, ans.ravel()])
    heads, beta_fit = _refine(
        heads, beta0, (np.array(us), np.array(bs), np.array(logk), ys), affine
    )
    heads.sort(key=lambda hd: tuple(hd[0].ravel()))  # the canonical order, by W row-major
    beta = beta_fit if affine else None
    candidate = MultiHeadAttention([tuple(x.tolist() for x in hd) for hd in heads], beta=beta)
    with oracle.phase("verify"):
        error = _verify_float(oracle, candidate, verify, seed)
    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    params: dict[str, Any] = {"heads": heads}
    if affine:
        params["beta"] = beta
    return Recovery(
        theorem=THEOREM,
        parameters=params,
        arithmetic="float",
        precision=None,
        exact=False,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=bound,
        parameter_count=H * (d * d + (2 * d if affine else d)) + (1 if affine else 0),
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=2 * H + 1,
        rounds=1 + (1 if by_phase.get("tie links") else 0),
        verification_error=error,
        notes=[
            f"{learning} learning queries ({by_phase.get('tie links', 0)} tie links), "
            f"<= {bound}; float64 decoding, verified at rtol {oracle.arithmetic.rtol:g}",
            f"{H} canonical heads (float64; not exact)",
        ],
    )


def _verify_float(oracle: Oracle, candidate: MultiHeadAttention, count: int, seed: int) -> float:
    """Fresh queries at the oracle's float tolerance; the largest relative discrepancy."""
    arith = oracle.arithmetic
    queries = fresh_sequences(oracle.d, count, seed + 104729)
    answers = oracle.query_many(queries)
    worst = 0.0
    for X, answer in zip(queries, answers, strict=True):
        observed = float(answer)
        expected = float(candidate.evaluate_batch(X[None])[0])
        worst = max(worst, abs(observed - expected) / max(1.0, abs(observed), abs(expected)))
        if not arith.agree(observed, expected):
            raise ModelClassMismatch(
                f"the oracle is not the recovered canonical heads: on the fresh query "
                f"{X.tolist()} it answered {observed}, the recovered model gives {expected}",
                query=X,
                observed=observed,
                expected=expected,
            )
    return worst

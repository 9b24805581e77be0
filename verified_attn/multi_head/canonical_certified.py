"""The canonical multi-head learner in exact and certified arithmetic (balls, then rationals).

>>> import verified_attn as va
>>> from verified_attn.multi_head.canonical_learner import learn_multi_head
>>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "exact"), heads=1)
>>> rec.heads, rec.exact, rec.method
([(Matrix([[1]]), Matrix([[2]]))], True, 'canonical')

Each pair's samples F(0..2H) are balls (exact answers enclosed at
:data:`~verified_attn.multi_head.canonical_learner.EXACT_MODE_PRECISION` bits); the poles
and residues come from :mod:`verified_attn.rational_interpolation`, each score and residue
is reconstructed as the unique rational with denominator <= D in its ball, heads are
matched across pairs exactly (links; one tie-link query per tie), and the linear systems
are solved exactly. The result is then verified on fresh sequences.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import flint
import sympy

from verified_attn.arithmetic import ball_rational, fmpq_matrix
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.learner_options import LearnerOptions
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical import canonical_form
from verified_attn.multi_head.canonical_bounds import (
    EXACT_MODE_PRECISION,
    METHOD,
    SCORE_MAGNITUDE,
    answer_precision,
    canonical_design,
    canonical_query_bound,
    canonical_query_limit,
    follow_up_query_bound,
    parameter_count,
    probe_matrix,
    probe_sequence,
)
from verified_attn.multi_head.refusals import diagnosed, restated
from verified_attn.multi_head.run_record import RunRecord
from verified_attn.oracle import Oracle
from verified_attn.rational_interpolation import interpolate, poles, to_arb
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.verification import Verification, verify_candidate

__all__ = ["decoding_assumption", "learn_certified", "score_magnitude"]

Decoded = list[tuple[Fraction, Fraction]]  # (score, residue) per head at one pair


def decoding_assumption(precision: int, D: int, Sm: int) -> str:
    """The assumption an exact result of the ball decoding rests on, as the Coq theorem of
    an exported run states it (``CertMultiHeadBound.meets``: denominators at most D and
    scores in [-Sm, Sm] at the design's pairs).

    >>> "[-3, 3]" in decoding_assumption(256, 2**64, 3)
    True
    """
    return (
        f"every score u^T (W_h b + c_h) and residue u^T v_h at the design's pairs is a rational "
        f"with denominator <= {D} (the denominator bound) and every score lies in [-{Sm}, {Sm}] "
        f"(Sm = {Sm}, the smallest natural at least the certified scores' magnitudes): each "
        f"ball at {precision} bits holds exactly one such rational, which is taken"
    )


def score_magnitude(
    heads: Sequence[Sequence[Any]], pairs: Sequence[tuple[list[Fraction], list[Fraction]]]
) -> int:
    """Sm: the smallest natural at least every |u^T (W_h b + c_h)| at the pairs (u, b).

    >>> score_magnitude([([[Fraction(1, 2)]], [1])], [([Fraction(3)], [Fraction(1)])])
    2
    """
    best = sympy.Integer(0)
    for head in heads:
        W = sympy.Matrix(head[0])
        c = sympy.Matrix(head[2]) if len(head) > 2 else sympy.zeros(W.rows, 1)
        for u, b in pairs:
            best = max(best, abs((sympy.Matrix([u]) * (W * sympy.Matrix(b) + c))[0, 0]))
    return int(sympy.ceiling(best))


def learn_certified(
    oracle: Oracle, H0: int, degree_known: bool, opts: LearnerOptions, affine: bool
) -> MultiHeadRecovery:
    """The exact/certified path of :func:`~.canonical_learner.learn_multi_head` (arguments
    already validated there)."""
    verify, seed, lengths, denominator_bound, _ = opts
    arith = oracle.arithmetic
    d = oracle.d
    bound = canonical_query_limit(d, H0, affine=affine)
    prec = arith.precision if arith.precision is not None else EXACT_MODE_PRECISION
    D = denominator_bound if denominator_bound is not None else 2 ** (prec // 4)
    U, B, pairs = canonical_design(d, seed, affine)
    # Answers narrow enough for the Coq file's identification step under D (a higher
    # precision costs no query); a black box or replay answers at its own precision.
    ask = answer_precision(H0, D, prec) if oracle.can_raise_precision else None
    answers: dict[str, Any] = {"ties": [], "precision": ask or prec}
    with oracle.run() as run:
        with flint.ctx.workprec(prec):
            f0, samples = _ask_samples(oracle, B, pairs, H0, answers, ask)
            H = H0 if degree_known else _degree(samples, H0)
            diagnose = functools.partial(too_few_heads, oracle, samples, pairs, B, H, degree_known)
            decoded = diagnosed(lambda: [_decode(F, H, D) for F in samples], diagnose)
            ties = functools.partial(_tie_links, oracle, U, B, f0, answers, ask)
            canon = diagnosed(lambda: assemble(decoded, U, B, d, H, ties, affine), diagnose)
            beta = _beta(canon, B, f0, D) if affine else None
        candidate = MultiHeadAttention(canon, beta=beta)
        checked = _verified(oracle, candidate, verify, seed, lengths, H, H0, prec, D, degree_known)
    Sm = score_magnitude(canonical_form(candidate).heads, [(u, B[j]) for u, j in pairs])
    record = RunRecord(arith, seed, run.counts, bound, checked, _assumptions(H, H0, prec, D, Sm))
    return _result(record, candidate, U, B, answers, H, H0, degree_known, prec, D, affine)


def _ask_samples(
    oracle: Oracle,
    B: list[list[Fraction]],
    pairs: Sequence[tuple[list[Fraction], int]],
    H0: int,
    answers: dict[str, Any],
    ask: int | None,
) -> tuple[list[flint.arb], list[list[flint.arb]]]:
    """Ask F(0) at every probe b_j and F(1..2 H0) at every pair (kept in ``answers``), at
    ``ask`` bits (None: the oracle's); the balls F(0) and, per pair, its samples F(0..2 H0)."""
    with oracle.phase("F(0)"):
        answers["F0"] = oracle.query_many([[b] for b in B], precision=ask)
    f0 = [to_arb(a) for a in answers["F0"]]
    with oracle.phase("F(k)"):
        answers["F"] = [
            oracle.query_many(
                [probe_sequence(u, B[j], k) for k in range(1, 2 * H0 + 1)], precision=ask
            )
            for u, j in pairs
        ]
    samples = [
        [f0[j], *(to_arb(a) for a in row)] for (_, j), row in zip(pairs, answers["F"], strict=True)
    ]
    return f0, samples


def _tie_links(
    oracle: Oracle,
    U: list[list[Fraction]],
    B: list[list[Fraction]],
    f0: list[flint.arb],
    answers: dict[str, Any],
    ask: int | None,
    needed: list[tuple[int, int]],
) -> list[tuple[flint.arb, flint.arb]]:
    """F(1) at (u_k, (b_1 + b_j)/2) for each tie, in one round; with its F(0) =
    ((b_1 + b_j)/2)^T sum v + beta, known without a query (affine in b)."""
    seqs = []
    for k, j in needed:
        b = [(x + y) / 2 for x, y in zip(B[0], B[j], strict=True)]
        seqs.append(probe_sequence(U[k], b, 1))
    with oracle.phase("tie links"):
        ans = oracle.query_many(seqs, precision=ask)
    answers["ties"] = [{"k": k, "j": j, "answer": a} for (k, j), a in zip(needed, ans, strict=True)]
    return [((f0[0] + f0[j]) / 2, to_arb(a)) for (_, j), a in zip(needed, ans, strict=True)]


def _beta(
    canon: list[tuple[Any, ...]], B: list[list[Fraction]], f0: list[flint.arb], D: int
) -> Fraction:
    """The output bias: F(0) at b_1 is b_1^T sum_h v_h + beta, and sum_h v_h is known exactly."""
    d = len(B[0])
    total_v = [sum((head[1][i] for head in canon), Fraction(0)) for i in range(d)]
    known = sum((x * y for x, y in zip(B[0], total_v, strict=True)), Fraction(0))
    return _rational(f0[0] - _arb(known), D, "the output bias beta")


def _verified(
    oracle: Oracle,
    candidate: MultiHeadAttention,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    H: int,
    H0: int,
    prec: int,
    D: int,
    degree_known: bool,
) -> Verification | None:
    """Rationals reconstructed from balls, verified at a raised precision (certified); a
    refusal names what the decoding took for granted (the head count, the denominators)."""
    try:
        checked, refuted = verify_candidate(
            oracle,
            candidate,
            count=verify,
            seed=seed,
            lengths=lengths,
            what="the recovered canonical heads",
        )
    except ModelClassMismatch as exc:
        if H == H0 or "token positions" in str(exc):
            raise
        raise restated(
            exc,
            f"{exc}; {H} heads were found because the systems of degree {H + 1}..{H0} "
            f"could not be shown nonsingular at {prec} bits: either the oracle is not "
            f"a sum of at most {H0} heads, or it has more than {H} heads, one below "
            "the balls' radius (raise the oracle's precision)",
        ) from exc
    if refuted is not None:
        raise PrecisionExhausted(
            f"{refuted}: the scores and residues are not rationals with denominator <= "
            f"{D}"
            + ("" if degree_known else f" or there are more than {H} heads")
            + "; raise the oracle's precision or give a denominator_bound (an enclosure "
            "of canonical heads is not available)"
        )
    return checked


def _assumptions(H: int, H0: int, prec: int, D: int, Sm: int) -> list[str]:
    """What an exact result of the ball decoding rests on (and a head count below H0)."""
    assumptions = [decoding_assumption(prec, D, Sm)]
    if H < H0:
        assumptions.append(
            f"{H} heads: the interpolation systems of degree {H + 1}..{H0} could not be "
            f"shown nonsingular at {prec} bits (a ball containing 0 is taken as a singular "
            "system); a head whose contribution shows only below the balls' radius would "
            "be missed (the verification at a raised precision narrows this)"
        )
    return assumptions


def _result(
    record: RunRecord,
    candidate: MultiHeadAttention,
    U: list[list[Fraction]],
    B: list[list[Fraction]],
    answers: dict[str, Any],
    H: int,
    H0: int,
    degree_known: bool,
    prec: int,
    D: int,
    affine: bool,
) -> MultiHeadRecovery:
    """The recovery of the canonical form of ``candidate``, its notes and certificate."""
    counts, d = record.counts, len(U)
    form = canonical_form(candidate)
    model = MultiHeadAttention(form.heads, beta=candidate.beta if affine else None)
    params: dict[str, Any] = {"heads": form.heads}
    if affine:
        params["beta"] = candidate.beta
    ties = counts.by_phase.get("tie links", 0)
    ours = canonical_query_bound(d, H0, affine=affine)
    per_head = "(d^2 + 2d)" if affine else "(d^2 + d)"
    notes = [
        f"canonical method: {counts.learning} learning queries ({ties} tie links): ours "
        f"{ours} plus at most {record.bound - ours} tie links, <= {record.bound}; follow-up "
        f"4Hd^2 - 2H + 1 = {follow_up_query_bound(d, H0)} (bias-free model); parameters "
        f"{per_head}H{' + 1' if affine else ''} = {parameter_count(d, H0, affine)}",
        f"{H} canonical heads found" + ("" if degree_known else f" (upper bound {H0})"),
    ]
    if answers["precision"] > prec:
        notes.append(
            f"learning queries answered at {answers['precision']} bits (decoded at {prec}): "
            "narrow enough for the exported Coq file's identification step under D for "
            f"scores u^T W_h b in [-{SCORE_MAGNITUDE}, {SCORE_MAGNITUDE}] at the design's pairs"
        )
    fields = {
        "affine": affine,
        "heads_given": degree_known,
        "H0": H0,
        "working_precision": prec,
        "answer_precision": answers["precision"],
        "denominator_bound": D,
        "design": {
            "U": [[dump_rational(q) for q in row] for row in U],
            "B": [[dump_rational(q) for q in row] for row in B],
        },
        "answers": answers,
        "result": {"heads": form.heads, "beta": params.get("beta")},
    }
    return record.recovery(
        method=METHOD,
        parameters=params,
        learned_model=model,
        exact=True,
        parameter_count=parameter_count(d, H, affine),
        rounds=1 + (1 if ties else 0),  # tie links: one adaptive round
        notes=notes,
        certificate_data=functools.partial(_certificate_data, record, d, fields),
    )


def too_few_heads(
    oracle: Oracle,
    samples: list[list[flint.arb]],
    pairs: Sequence[tuple[list[Fraction], int]],
    B: Sequence[list[Fraction]],
    H: int,
    degree_known: bool,
) -> ModelClassMismatch | None:
    """After a decoding failure: does the box have more than ``H`` heads?

    The ``2H + 1`` samples of a pair always fit a degree-``H`` rational function, so they
    cannot show it; one more sample, ``F(2H + 1)`` of the first pair (asked in the phase
    ``"diagnosis"``, counted), can: with at most ``H`` heads it equals the fit's value
    there. A residual ball that excludes 0 proves more poles than ``H``; the error says
    so. None when the residual does not exclude 0 (the failure had another cause).
    """
    fit = interpolate(samples[0], H)
    if fit is None:
        return None
    P, Q = fit
    k = 2 * H + 1
    u, j = pairs[0]
    with oracle.phase("diagnosis"):
        [answer] = oracle.query_many([probe_sequence(u, B[j], k)])
    kk = flint.arb(k)
    predicted = sum((c * kk**i for i, c in enumerate(P)), flint.arb(0)) / sum(
        (c * kk**i for i, c in enumerate(Q)), flint.arb(0)
    )
    residual = to_arb(answer) - predicted
    if residual.contains(0):
        return None
    hint = (
        f"heads={H + 1} or max_heads= a larger bound"
        if degree_known
        else (f"max_heads={H + 1} or more")
    )
    return ModelClassMismatch(
        f"the box has more than {H} heads (the fit with {H} heads leaves residual "
        f"{float(residual.mid()):.3g} at k = {k}, a ball excluding 0; try {hint})"
    )


def _rational(x: flint.arb, D: int, what: str) -> Fraction:
    return ball_rational(
        x,
        D,
        lambda: PrecisionExhausted(
            f"{what} ({x}) did not reconstruct to a unique rational with denominator <= {D}; "
            "raise the precision or give a denominator_bound"
        ),
    )


def _decode(F: list[flint.arb], H: int, D: int) -> Decoded:
    return [
        (_rational(s, D, "a score u^T W b"), _rational(r, D, "a residue u^T v"))
        for s, r in poles(F, H)
    ]


def _degree(samples: list[list[flint.arb]], H0: int) -> int:
    """The largest m <= H0 whose system is certified nonsingular for every pair."""
    for m in range(H0, 0, -1):
        if all(interpolate(F, m) is not None for F in samples):
            return m
    raise NotIdentifiable("no pair gives a certified rational function of degree >= 1: f is 0")


def _match(
    base: Decoded,
    other: Decoded,
    link: Decoded,
    combine: Callable[[Any, Any], Any],
    what: str,
) -> tuple[int, ...]:
    """The unique permutation p with ``{combine(base[h], other[p[h]])} == link``."""
    target = sorted(link)
    H = len(base)

    def fits(perm: tuple[int, ...]) -> bool:
        got = [combine(base[h], other[perm[h]]) for h in range(H)]
        return None not in got and sorted(got) == target

    return _only_order(H, fits, f"the link {what}")


def _only_order(H: int, fits: Callable[[tuple[int, ...]], bool], what: str) -> tuple[int, ...]:
    """The one head order (a permutation of range(H)) that ``fits``; NotIdentifiable naming
    ``what`` when there is none or more than one."""
    found = [perm for perm in itertools.permutations(range(H)) if fits(perm)]
    if len(found) != 1:
        raise NotIdentifiable(
            f"{what} is consistent with {len(found)} head orders, not exactly one; "
            "rerun with another seed"
        )
    return found[0]


def assemble(
    decoded: list[Decoded],
    U: list[list[Fraction]],
    cols: list[list[Fraction]],
    d: int,
    H: int,
    tie_links: Callable[[list[tuple[int, int]]], list[tuple[flint.arb, flint.arb]]],
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
    # labelled[k, j][h] = (score, residue) of head h at (u_k, b_j)
    labelled: dict[tuple[int, int], Decoded] = {(0, 0): grid[(0, 0)]}
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
            perm = resolve_tie(labelled[(k, 0)], grid[(k, j)], f0, measured, k, j)
            labelled[(k, j)] = [grid[(k, j)][perm[h]] for h in range(H)]
    Ut_inv = fmpq_matrix(U).inv()  # rows u_k: this is U^T
    M_inv = probe_matrix(cols, affine).inv()
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


def _fractions(m: flint.fmpq_mat) -> list[list[Fraction]]:
    return [
        [Fraction(int(m[i, j].p), int(m[i, j].q)) for j in range(m.ncols())]
        for i in range(m.nrows())
    ]


def _arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def resolve_tie(
    base: Decoded,
    here: Decoded,
    f0: flint.arb,
    measured: flint.arb,
    k: int,
    j: int,
) -> tuple[int, ...]:
    """The unique head order at (u_k, b_j) whose predicted F(1) at (u_k, (b_1 + b_j)/2) meets
    the measured ball (both balls contain the true value for the true order)."""
    H = len(base)

    def fits(perm: tuple[int, ...]) -> bool:
        if any(here[perm[h]][1] != base[h][1] for h in range(H)):
            return False  # residues u_k^T v_h do not depend on b: only tied heads may swap
        predicted = f0
        for h in range(H):
            lam = (_arb(base[h][0] + here[perm[h]][0]) / 2).exp()
            predicted += _arb(base[h][1]) * lam / (1 + lam)
        return bool(predicted.overlaps(measured))

    return _only_order(H, fits, f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2)")


def dump_heads(heads: Sequence[tuple[Any, ...]], d: int) -> list[dict[str, Any]]:
    """Heads (SymPy matrices or arrays) as certificate entries: W d x d, v and c flat."""

    def flat(x: Any) -> list[Any]:
        if hasattr(x, "tolist"):
            x = x.tolist()
        out: list[Any] = []
        for row in x:
            out.extend(row if isinstance(row, list) else [row])
        return out

    entries = []
    for head in heads:
        W = flat(head[0])
        entries.append(
            {
                "W": [[dump_number(W[i * d + j]) for j in range(d)] for i in range(d)],
                "v": [dump_number(x) for x in flat(head[1])],
                "c": None if len(head) < 3 else [dump_number(x) for x in flat(head[2])],
            }
        )
    return entries


def _certificate_data(record: RunRecord, d: int, fields: dict[str, Any]) -> dict[str, Any]:
    """The canonical certificate: design, every answer exactly, the claimed heads.

    The pairs are implied by U and B (``(u_k, b_j)`` for all k, j, then the links
    ``(u_1 + u_k, b_1)``); the queries of a pair are ``[u + b] * k + [b]``, k = 1..2 H0,
    and F(0) is ``[b_j]``. Checked by :mod:`verified_attn.certificates.multi_head`.
    """
    answers, result = fields["answers"], fields["result"]
    return record.certificate(
        d,
        METHOD,
        {
            **fields,
            "answers": {
                "F0": [dump_number(a) for a in answers["F0"]],
                "F": [[dump_number(a) for a in row] for row in answers["F"]],
                "ties": [
                    {"k": t["k"], "j": t["j"], "answer": dump_number(t["answer"])}
                    for t in answers["ties"]
                ],
            },
            "result": {
                "exact": True,
                "heads": dump_heads(result["heads"], d),
                "beta": None if result["beta"] is None else dump_number(result["beta"]),
            },
        },
    )

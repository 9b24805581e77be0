"""Theorem 5.1: learn a low-rank head, by exact skeleton (ours) or nuclear norm (paper).

>>> import sympy
>>> import verified_attn as va
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]                # rank 1
>>> rec = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(W, [1, 0, 1]), "exact"))
>>> rec.W == sympy.Matrix(W), rec.exact, rec.rank, rec.verified  # rank found and certified
(True, True, 1, True)
>>> rec.queries, rec.bound, rec.verification_queries, rec.queries_by_phase
(9, 9, 8, {'v': 3, 'rank': 2, 'C': 2, 'R': 2, 'verify': 8})
>>> rec = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(W, [1, 0, 1]), "exact"), rank=1)
>>> rec.queries, rec.bound, rec.verification_queries, rec.verification_phases
(8, 8, 9, ('rank', 'verify'))
>>> va.verify_certificate(rec.certificate()).ok
True

``method="skeleton"``: exact recovery from exactly ``d + 2dr - r^2`` learning queries with
the rank given (the rank test is then verification), ``d + 2dr - r^2 + [r < d]`` with the
rank found (:func:`~verified_attn.low_rank.skeleton.skeleton_query_bound`).
``method="nuclear"``: the paper's rank-one projections + nuclear-norm minimisation
(:mod:`verified_attn.low_rank.nuclear`); as exact as the convex solver, so float only.

Both return a :class:`~verified_attn.recovery.LowRankRecovery`: parameters ``W`` (d x d)
and ``v`` (d x 1), ``rank`` (the rank of the learned W), ``rank_given``, ``method``;
``rec.model`` is a :class:`~verified_attn.models.SingleHeadAttention`; ``rec.certificate()``
is checked by :mod:`verified_attn.certificates.low_rank`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np

from verified_attn import validation
from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import RunRecord, union_balls
from verified_attn.errors import InvalidArgument, PrecisionExhausted
from verified_attn.learner_options import CheckOptions, learner_options
from verified_attn.low_rank.probes import Prober, dump_probes, exact_floats
from verified_attn.low_rank.skeleton import SkeletonResult, skeleton_query_bound, skeleton_recover
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.probing import (
    ball_predictor,
    candidate_model,
    finalize,
    learned_single_head,
    public_params,
    reconstruction_assumptions,
)
from verified_attn.progress import reporting
from verified_attn.recovery import LowRankRecovery, enclosures_from_balls
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.verification import (
    Verification,
    check_record,
    verify_candidate,
    verify_if_asked,
)

__all__ = ["learn_low_rank", "parameter_count"]

THEOREM = "thm-5.1"
METHODS = ("skeleton", "nuclear")


def parameter_count(d: int, rank: int) -> int:
    """Degrees of freedom of (W of rank r, v): 2dr - r^2 + d.

    >>> parameter_count(64, 4)
    560
    """
    return 2 * d * rank - rank * rank + d


def learn_low_rank(
    oracle: Oracle,
    *,
    rank: int | None = None,
    method: str = "skeleton",
    denominator_bound: int | None = None,
    rank_tol: float = 1e-8,
    measurements: int | None = None,
    tol: float = 1e-9,
    max_iter: int = 5000,
    **options: Unpack[CheckOptions],
) -> LowRankRecovery:
    """Recover (W, v) of a head whose W has rank <= ``rank`` (found if None).

    Skeleton (default): exact in exact/certified mode (rational W, v come back ``==``);
    raises :class:`~verified_attn.errors.ModelClassMismatch` with the evidence if the
    oracle's W has rank above ``rank``. ``rank_tol`` is the float-mode zero threshold of
    the rank test (relative to the measurement scale). ``denominator_bound``: as in
    :func:`~verified_attn.learn_single_head` (the result records the assumption).

    Nuclear: ``measurements`` (m) rank-one probes, default ``ceil(4 * r * 2d)`` capped at
    d^2; ``tol`` and ``max_iter`` are the ADMM stopping rule
    (:func:`~verified_attn.low_rank.nuclear.nuclear_norm_admm`).

    ``verify`` fresh sequences of the given ``lengths`` (in turn) are checked against the
    result (0: not verified, and the result says so; with the rank given, the one rank
    test still guards the class and is counted as verification). Every argument is checked
    before any query: a bad one raises :class:`~verified_attn.errors.InvalidArgument`.
    ``progress``: a bar or callback over the queries (:mod:`verified_attn.progress`).
    """
    validation.check_oracle(oracle)
    if oracle.model_class == "single-head-affine":
        raise InvalidArgument(
            "oracle declares the affine model class; learn_low_rank handles the paper's "
            "model (no c, beta) only"
        )
    d = oracle.d
    method = validation.check_choice(method, "method", METHODS)
    rank = validation.check_int(rank, "rank", low=1, high=d, allow_none=True)
    arith = oracle.arithmetic
    # The probes and answers: O(d r) numbers (r = 1 when it is found), d^2 for the model.
    validation.require_size(
        f"learn_low_rank at d = {d}",
        numbers=4 * d * (rank or 1) + d * d,
        arithmetic=arith.name,
        precision=arith.precision,
        queries=d + 2 * d * (rank or 1) + 1,
    )
    verify, seed, lengths, _, progress = learner_options("learn_low_rank", options, CheckOptions)
    if method == "nuclear":
        if denominator_bound is not None:
            raise InvalidArgument("denominator_bound applies to method='skeleton' only")
        solver = (measurements, tol, max_iter)
        return _nuclear(oracle, rank, verify, seed, lengths, solver, progress)
    if measurements is not None:
        raise InvalidArgument("measurements applies to method='nuclear' only")
    rank_tol = float(
        validation.check_real(rank_tol, "rank_tol", low=0, high=1, low_open=True, high_open=True)
    )
    denominator_bound = validation.check_denominator_bound(denominator_bound)
    total = _skeleton_budget(oracle, rank, verify)
    with (
        reporting(oracle, progress, "learn_low_rank", total=total),
        oracle.run() as run,
        arith.context(),
    ):
        prober = Prober.start(oracle)
        result = skeleton_recover(prober, rank, seed=seed, rank_tol=rank_tol)
        params = {"W": result.W, "v": result.v}
        exact, enclosures, params = finalize(arith, params, denominator_bound)
        candidate = candidate_model(params, exact, False)
        checked, exact, params, refuted = _verify_skeleton(
            oracle, (result, rank), (params, enclosures, exact, candidate), verify, seed, lengths
        )
    counts = run.counts
    r = result.rank
    notes = _notes(result, rank, refuted, counts, arith.name == "certified" and not exact, d)
    bound = skeleton_query_bound(d, r if rank is None else rank, rank_given=rank is not None)
    assumptions = reconstruction_assumptions(arith, exact, denominator_bound)
    assumptions += _rank_assumptions(result, rank, arith)
    out_params = public_params(params, exact, arith, False)
    record = RunRecord(arith, seed, counts, bound, checked, assumptions)
    certificate = functools.partial(
        _skeleton_certificate, record, (prober, result), out_params, exact, (rank, rank_tol)
    )
    return LowRankRecovery.from_record(
        record,
        theorem=THEOREM,
        parameters=out_params,
        learned_model=learned_single_head(out_params, exact, False),
        exact=exact,
        parameter_count=parameter_count(d, r),
        # v, each rank test, each column and row (and a wasted column); rescales excluded
        rounds=1 + len(result.tests) + 2 * r + (1 if result.notes else 0),
        enclosures=None if enclosures is None else enclosures_from_balls(enclosures),
        notes=notes,
        certificate_data=certificate,
        rank=r,
        rank_given=rank,
        method="skeleton",
    )


# ---------------------------------------------------------------------------------------
# Certificate data (checked by verified_attn.certificates.low_rank).
# ---------------------------------------------------------------------------------------


def _nuclear(
    oracle: Oracle,
    rank: int | None,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    solver: tuple[Any, Any, Any],
    progress: Any,
) -> LowRankRecovery:
    """method="nuclear": the paper's convex program, with its own arguments checked."""
    from verified_attn.low_rank.nuclear import learn_nuclear

    measurements, tol, max_iter = solver
    with reporting(oracle, progress, "learn_low_rank"):
        return learn_nuclear(
            oracle,
            rank,
            measurements=validation.check_int(measurements, "measurements", low=1, allow_none=True),
            verify=verify,
            seed=seed,
            lengths=lengths,
            tol=validation.check_real(tol, "tol", low=0, high=1, low_open=True, high_open=True),
            max_iter=validation.check_int(max_iter, "max_iter", low=1),
        )


def _skeleton_budget(oracle: Oracle, rank: int | None, verify: int) -> int | None:
    """The queries a given rank needs (refused up front if over budget); None when found."""
    if rank is None:
        return None
    learning = skeleton_query_bound(oracle.d, rank, rank_given=True)
    checks = verify + (1 if rank < oracle.d else 0)
    oracle.require_remaining(learning, checks, f"learn_low_rank (rank {rank})")
    return learning + checks


def _verify_skeleton(
    oracle: Oracle,
    found: tuple[SkeletonResult, int | None],
    decoded: tuple[dict[str, Any], Any, bool, Any],
    verify: int,
    seed: int,
    lengths: Sequence[int],
) -> tuple[Verification | None, bool, dict[str, Any], str | None]:
    """Fresh sequences; a reconstruction refuted at the raised precision returns the balls."""
    result, rank = found
    params, enclosures, exact, candidate = decoded
    arith = oracle.arithmetic
    what = "the recovered low-rank head"
    refuted = None
    if exact and arith.name == "certified":
        # Rationals reconstructed from balls: verified at a raised precision.
        checked, refuted = verify_candidate(
            oracle, candidate, count=verify, seed=seed, lengths=lengths, what=what
        )
        # With the rank given, its one test checks the user's class (rank <= r); the
        # balls are certified under that hypothesis. Any other zero taken is ours.
        own = [a for a in result.assumed_zero if rank is None or f"rank-{rank} " not in a]
        if refuted is not None:
            if own:
                raise PrecisionExhausted(
                    f"the rank {result.rank} was decided on a ball containing 0 "
                    f"({own[0]}) at {arith.precision} bits, and {refuted}"
                    ": W has a larger rank or entries not rationals with small "
                    "denominators; raise the oracle's precision"
                )
            assert enclosures is not None and checked is not None
            exact, params = False, enclosures
            checked = check_record(checked, ball_predictor(params), what=what)
    else:
        model = candidate if candidate is not None else ball_predictor(params)
        checked = verify_if_asked(
            oracle, model, count=verify, seed=seed, lengths=lengths, what=what
        )
    return checked, exact, params, refuted


def _notes(
    result: SkeletonResult,
    rank: int | None,
    refuted: str | None,
    counts: QueryCounts,
    balls: bool,
    d: int,
) -> list[str]:
    """The result's notes: rank and pivots, a refuted reconstruction, re-asked probes, balls."""
    r = result.rank
    notes = list(result.notes)
    if refuted is not None:
        notes.append(refuted + "; the result is the certified balls, not exact")
    notes.append(
        f"rank {r} ({'found and certified' if rank is None else f'given {rank}'}); "
        f"pivots {result.pivots}"
        + ("; the rank test is a verification phase" if rank is not None and r < d else "")
    )
    rescales = sum(n for k, n in counts.by_phase.items() if k.endswith("rescale"))
    if rescales:
        notes.append(
            f"{rescales} probes saturated the softmax and were re-asked at a smaller scale "
            "(phases 'rescale', 'rank-rescale'), counted with their phase's kind"
        )
    if balls:
        notes.append("some entries did not reconstruct to a unique rational; W, v are balls")
    return notes


def _rank_assumptions(result: SkeletonResult, rank: int | None, arith: Arithmetic) -> list[str]:
    """The rank decisions taken on balls that contain 0 (certified mode), as an assumption."""
    if not result.assumed_zero:
        return []
    r = result.rank
    return [
        f"rank W {'=' if rank is None else '<='} {r}: "
        + ("decided" if rank is None else "checked")
        + f" on {len(result.assumed_zero)} ball(s) at {arith.precision} bits taken as 0, "
        "which contain 0 but do not prove it ("
        + "; ".join(result.assumed_zero)
        + "); a W whose extra rank shows only below the balls' radius would be missed "
        "(the verification at a raised precision narrows this)"
    ]


def _dump_params(params: dict[str, Any], d: int) -> dict[str, Any]:
    out = {}
    for name, val in params.items():
        if hasattr(val, "tolist") and not isinstance(val, np.ndarray):
            val = val.tolist()  # SymPy matrix
        arr = np.asarray(val, dtype=object)
        if name == "W":
            out[name] = [[dump_number(x) for x in row] for row in arr.reshape(d, d)]
        else:
            out[name] = [dump_number(x) for x in arr.reshape(-1)]
    return out


def _skeleton_certificate(
    run: RunRecord,
    probes: tuple[Prober, SkeletonResult],
    params: dict[str, Any],
    exact: bool,
    ranks: tuple[int | None, float],
) -> dict[str, Any]:
    """The skeleton's certificate: design, every probe and its answer, the result.

    The checker re-solves the cross from the recorded probes with its own linear algebra.
    Certified balls that did not reconstruct are stored as the union of the learner's
    ball and the checker's re-solved one (both contain the truth), so that the checker can
    demand containment exactly.
    """
    (prober, result), (rank_given, rank_tol), arith = probes, ranks, run.arith
    d = prober.oracle.d
    data = run.header("low-rank", THEOREM, d)
    data.update(
        {
            "method": "skeleton",
            "rank": result.rank,
            "rank_given": rank_given,
            "rank_tol": rank_tol if arith.name == "float" else None,
            "design": {
                "U": [[dump_rational(q) for q in row] for row in result.U],
                "basis": [exact_floats(b) for b in result.basis],
                "pivots": list(result.pivots),
                "next_b": None if result.next_b is None else exact_floats(result.next_b),
            },
            "answers": {
                "v": [dump_number(a) for a in prober.v_answers],
                **dump_probes(prober),
            },
            "result": {"exact": exact, "parameters": _dump_params(params, d)},
        }
    )
    if arith.name == "certified" and not exact:
        from verified_attn.certificates.low_rank import redecode

        with arith.context():
            again = redecode(data)
            widened = {name: union_balls(params[name], again[name]) for name in ("W", "v")}
            data["result"]["parameters"] = _dump_params(widened, d)
    return data

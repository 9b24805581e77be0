"""Theorem 5.1: learn a low-rank head, by exact skeleton (ours) or nuclear norm (paper).

>>> import sympy
>>> from verified_attn.low_rank import learn_low_rank
>>> from verified_attn import Oracle, SingleHeadAttention
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]                # rank 1
>>> rec = learn_low_rank(Oracle(SingleHeadAttention(W, [1, 0, 1]), "exact"))
>>> rec.W == sympy.Matrix(W), rec.exact                    # rank found and certified
(True, True)
>>> rec.queries, rec.bound, rec.queries_by_phase
(9, 9, {'v': 3, 'rank': 2, 'C': 2, 'R': 2, 'verify': 8})

``method="skeleton"``: exact recovery from ``d + 2dr - r^2 + [r < d]`` learning queries
(:func:`~verified_attn.low_rank.skeleton.skeleton_query_bound`), rank given or found.
``method="nuclear"``: the paper's rank-one projections + nuclear-norm minimisation
(:mod:`verified_attn.low_rank.nuclear`); as exact as the convex solver, so float only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verified_attn._legacy import Recovery, split_counts, verify_on_fresh_queries
from verified_attn.errors import InvalidArgument
from verified_attn.low_rank.probes import Prober
from verified_attn.low_rank.skeleton import skeleton_query_bound, skeleton_recover
from verified_attn.oracle import Oracle
from verified_attn.probing import candidate_model, finalize, public_params

__all__ = ["learn_low_rank", "parameter_count"]

THEOREM = "thm-5.1"
METHODS = ("skeleton", "nuclear")


def parameter_count(d: int, rank: int) -> int:
    """Degrees of freedom of (W of rank r, v): 2dr - r^2 + d.

    >>> parameter_count(64, 4)
    560
    """
    return 2 * d * rank - rank * rank + d


def _check_args(oracle: Any, rank: Any, method: Any, verify: Any, seed: Any) -> None:
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    if oracle.model_class == "single-head-affine":
        raise InvalidArgument(
            "oracle declares the affine model class; learn_low_rank handles the paper's "
            "model (no c, beta) only"
        )
    if method not in METHODS:
        raise InvalidArgument(f"method must be 'skeleton' or 'nuclear', got {method!r}")
    if rank is not None:
        if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
            raise InvalidArgument(
                f"rank must be an int in 1..d = {oracle.d} or None, got {type(rank).__name__} "
                f"{rank!r}"
            )
        if not 1 <= int(rank) <= oracle.d:
            raise InvalidArgument(f"rank must be in 1..d = {oracle.d}, got {rank}")
    if isinstance(verify, bool) or not isinstance(verify, int) or verify < 0:
        raise InvalidArgument(f"verify must be an int >= 0, got {verify!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")


def learn_low_rank(
    oracle: Oracle,
    rank: int | None = None,
    method: str = "skeleton",
    *,
    verify: int = 8,
    seed: int = 0,
    denominator_bound: int | None = None,
    rank_tol: float = 1e-8,
    measurements: int | None = None,
    tol: float = 1e-9,
    max_iter: int = 5000,
) -> Recovery:
    """Recover (W, v) of a head whose W has rank <= ``rank`` (found if None).

    Skeleton (default): exact in exact/certified mode (rational W, v come back ``==``);
    raises :class:`~verified_attn.errors.ModelClassMismatch` with the evidence if the
    oracle's W has rank above ``rank``. ``rank_tol`` is the float-mode zero threshold of
    the rank test (relative to the measurement scale). ``denominator_bound``: as in
    :func:`~verified_attn.learn_single_head`.

    Nuclear: ``measurements`` (m) rank-one probes, default ``ceil(4 * r * 2d)`` capped at
    d^2; ``tol`` and ``max_iter`` are the ADMM stopping rule
    (:func:`~verified_attn.low_rank.nuclear.nuclear_norm_admm`).
    """
    _check_args(oracle, rank, method, verify, seed)
    rank = None if rank is None else int(rank)
    if method == "nuclear":
        from verified_attn.low_rank.nuclear import learn_nuclear

        return learn_nuclear(
            oracle,
            rank,
            measurements=measurements,
            verify=verify,
            seed=seed,
            tol=tol,
            max_iter=max_iter,
        )
    if measurements is not None:
        raise InvalidArgument("measurements applies to method='nuclear' only")
    if not (isinstance(rank_tol, float) and 0 < rank_tol < 1):
        raise InvalidArgument(f"rank_tol must be a float in (0, 1), got {rank_tol!r}")
    if denominator_bound is not None and (
        isinstance(denominator_bound, bool)
        or not isinstance(denominator_bound, int)
        or denominator_bound < 1
    ):
        raise InvalidArgument(f"denominator_bound must be an int >= 1, got {denominator_bound!r}")
    d = oracle.d
    if rank is not None:
        oracle.require_remaining(
            skeleton_query_bound(d, rank), verify, f"learn_low_rank (rank {rank})"
        )
    arith = oracle.arithmetic
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent
    prober = Prober.start(oracle)
    with arith.context():
        result = skeleton_recover(prober, rank, seed=seed, rank_tol=rank_tol)
        params = {"W": result.W, "v": result.v}
        exact, enclosures, params = finalize(arith, params, denominator_bound)
        candidate = candidate_model(params, exact, False)
        with oracle.phase("verify"):
            _, ver_err = verify_on_fresh_queries(
                oracle, arith, candidate, params, exact, verify, seed + 1
            )
    by_phase = oracle.queries_since(before)
    learning, verification = split_counts(by_phase)
    notes = list(result.notes)
    r = result.rank
    notes.append(
        f"rank {r} ({'found and certified' if rank is None else 'given'}); pivots {result.pivots}"
    )
    if by_phase.get("rescale"):
        notes.append(
            f"{by_phase['rescale']} probes saturated the softmax and were re-asked at a smaller "
            "scale; these extra queries are counted in 'queries'"
        )
    bound = skeleton_query_bound(d, r if rank is None else rank)
    return Recovery(
        theorem=THEOREM,
        parameters=public_params(params, exact, arith, False),
        arithmetic=arith.name,
        precision=arith.precision,
        exact=exact,
        verified=True,
        queries=learning,
        verification_queries=verification,
        queries_by_phase=by_phase,
        bound=bound,
        parameter_count=parameter_count(d, r),
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        # v, each rank test, each column and row (and a wasted column); rescales excluded
        rounds=1 + len(result.tests) + 2 * r + (1 if result.notes else 0),
        enclosures=enclosures,
        verification_error=ver_err,
        notes=notes,
        # No certificate yet: verify_certificate checks thm-4.1 runs only.
        certificate_data=None,
    )

"""The low-rank float learner's end: the heads from the completed scores, their first-order
error estimate, the checks (rank check pair, every learning answer, fresh sequences) and the
result with its certificate data (:mod:`.skeleton` runs the design)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np

from verified_attn.agreement import agree, float_floor
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.pipeline.design import (
    box_precision,
    float_probe_matrix,
    float_sequence,
)
from verified_attn.multi_head.pipeline.low_rank_design import (
    low_rank_query_limit,
    skeleton_pairs,
)
from verified_attn.multi_head.pipeline.skeleton import RANK_FOUND, Skeleton
from verified_attn.multi_head.pipeline.skeleton_blocks import reduced_estimate
from verified_attn.multi_head.pipeline.skeleton_refine import (
    _Rows,
    design_rows,
    low_rank_estimate,
    refine_low_rank,
)
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.verification import verify_model

_CHUNK = 256  # pairs evaluated at once when the learning answers are checked


def plan_low_rank(sk: Skeleton, rank: int | str, verify: int) -> int:
    """The run's query bound, checked against the budget before any query: the skeleton's
    count for a given rank, its worst case (every u-group full) for a found one."""
    if rank == RANK_FOUND:
        bound = low_rank_query_limit(sk.d, sk.H, sk.d, affine=sk.affine, found=True)
    else:
        bound = low_rank_query_limit(sk.d, sk.H, int(rank), affine=sk.affine)
    sk.oracle.require_remaining(bound, verify, "learn_multi_head")
    return bound


def skeleton_heads(sk: Skeleton) -> tuple[list[tuple[np.ndarray, ...]], float]:
    """``[W_h | c_h] = U^-1 S_h M^-1`` from each completed score matrix, ``v_h = U^-1 r_h``,
    and beta = F(0) at b_1 minus ``b_1^T sum_h v_h`` (affine)."""
    d = sk.d
    Uinv = np.linalg.inv(sk.U)
    Minv = np.linalg.inv(float_probe_matrix(sk.B, sk.affine))
    r = np.stack(sk.r)  # (d, H)
    heads: list[tuple[np.ndarray, ...]] = []
    for h in range(sk.H):
        Wc = Uinv @ sk.scores(h) @ Minv
        head: tuple[np.ndarray, ...] = (Wc[:, :d], Uinv @ r[:, h])
        if sk.affine:
            head = (*head, Wc[:, d])
        heads.append(head)
    beta = float(sk.f0[0] - sk.B[0] @ sum(hd[1] for hd in heads)) if sk.affine else 0.0
    heads.sort(key=lambda hd: tuple(hd[0].ravel()))
    return heads, beta


def learning_queries(sk: Skeleton) -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
    """Every learning query with its answers, in blocks of equal length: F(0), then per
    ratio the grid pairs (u-groups, then the rank check pair), then per ratio the links,
    then per ratio the shifted rows' pairs."""
    yield [b[None, :] for b in sk.B], sk.f0
    if len(sk.f0x):
        yield [b[None, :] for b in sk.Bx[: len(sk.f0x)]], sk.f0x
    pairs = sk.grid_pairs()
    if len(sk.check):
        pairs.append(skeleton_pairs(sk.d, sk.p, sk.m, sk.J)[-1])
    answers = np.concatenate([*sk.rows, sk.check.reshape(-1, len(sk.ratios))])
    blocks: list[tuple[list[Any], np.ndarray]] = [(pairs, answers)]
    if sk.d > 1:
        links = [((sk.U[0] + sk.U[k]) / 2, 0) for k in range(1, sk.d)]
        blocks.append((links, np.array(sk.links)))
    if sk.shifts:
        shifted = [(sk.shift_row(k), j) for k in sk.shifts for j in sk.cols[k]]
        blocks.append((shifted, np.concatenate(sk.shifted)))
    for block, ans in blocks:
        for i, (kk, mm) in enumerate(sk.ratios):
            for a in range(0, len(block), _CHUNK):
                part = block[a : a + _CHUNK]
                seqs = [
                    float_sequence(sk.U[k] if isinstance(k, int) else k, sk.column(j), kk, mm)
                    for k, j in part
                ]
                yield seqs, ans[a : a + len(part), i]


def _misses(
    sk: Skeleton, model: MultiHeadAttention, beta: float, blocks: Any
) -> tuple[float, float, float, int] | None:
    """The first learning answer the model misses under the float rule: (answer, model's
    value, gap, length), or None."""
    arith = sk.oracle.arithmetic
    observed = np.concatenate([sk.f0, sk.f0x, np.concatenate(sk.rows).ravel(), sk.check.ravel()])
    shifted = np.concatenate(sk.shifted).ravel() if sk.shifted else np.zeros(0)
    more = [*np.array(sk.links).ravel().tolist(), *shifted.tolist()]
    floor = float_floor([*observed.tolist(), *more], beta)
    for seqs, ans in blocks:
        got = model.evaluate_batch(np.stack(seqs))
        for y, e, X in zip(ans, got, seqs, strict=True):
            ok, gap = agree(arith, float(y), float(e), bias=beta, floor=floor)
            if not ok:
                return float(y), float(e), float(gap), X.shape[0]
    return None


def check_skeleton(sk: Skeleton, model: MultiHeadAttention, beta: float, rank: str) -> None:
    """The rank check pair first (ModelClassMismatch naming the rank: the completion is off
    the skeleton), then every learning answer (PrecisionExhausted)."""
    arith = sk.oracle.arithmetic
    if len(sk.check):
        k, j = skeleton_pairs(sk.d, sk.p, sk.m, sk.J)[-1]
        seqs = [[float_sequence(sk.U[k], sk.B[j], a, b)] for a, b in sk.ratios]
        miss = _misses(sk, model, beta, zip(seqs, sk.check[0][:, None], strict=True))
        if miss is not None:
            raise ModelClassMismatch(
                f"the heads completed from the rank-{sk.p} skeleton ({rank}) miss the rank "
                f"check pair (u_{k + 1}, b_{j + 1}) outside it: answer {miss[0]}, predicted "
                f"{miss[1]} (relative gap {miss[2]:.3e} > rtol {arith.rtol:g}): the heads' "
                f"score matrices have rank above {sk.p}; learn with rank=None (the full "
                "design) or a larger rank"
            )
    miss = _misses(sk, model, beta, learning_queries(sk))
    if miss is not None:
        raise PrecisionExhausted(
            f"the heads completed from the rank-{sk.p} skeleton ({rank}) miss the learning "
            f"answer {miss[0]} on a query of length {miss[3]} (they give {miss[1]}, relative "
            f"gap {miss[2]:.3e} > rtol {arith.rtol:g}): not {sk.H} softmax heads of rank "
            f"<= {sk.p}, or too ill-conditioned for a {box_precision(arith)} box to tell"
        )


def fit_rows(sk: Skeleton) -> _Rows:
    """The refinement's rows: F(0), the u-groups' pairs and the links at every ratio (the
    rank check pair left out), as (u, m_b, log t, answer)."""
    answers = (np.concatenate([sk.f0, sk.f0x]), np.concatenate(sk.rows), np.array(sk.links))
    return design_rows(sk.U, sk.columns(), sk.affine, sk.grid_pairs(), sk.t, answers)


def refined(sk: Skeleton) -> tuple[list[tuple[np.ndarray, ...]], float, float]:
    """The skeleton's heads refined by low-rank Gauss-Newton on every learning answer, with
    the joint fit's estimate: from the dense Jacobian's SVD while it fits, else the same
    figure from the preconditioned Gram matrix of the reduced unknowns
    (:func:`.skeleton_blocks.reduced_estimate`; past its limit, the per-head bound)."""
    heads, beta = skeleton_heads(sk)
    rows = fit_rows(sk)
    got, beta2, res, th = refine_low_rank(rows, heads, beta, sk.p)
    estimate = low_rank_estimate(rows, th, res, sk.unit, sk.H * sk.p * sk.p)
    if estimate is None:
        estimate = reduced_estimate(rows, th, res, sk.unit)
    got.sort(key=lambda hd: tuple(hd[0].ravel()))
    return got, beta2, estimate


def finish(
    sk: Skeleton, run: Any, bound: int, *, verify: int, lengths: Sequence[int]
) -> MultiHeadRecovery:
    """Heads, estimate, checks, fresh verification and the result."""
    arith = sk.oracle.arithmetic
    rank = f"rank {'found' if sk.found else 'given'}"
    heads, beta, estimate = refined(sk)
    prtol = float(cast(float, getattr(arith, "parameter_rtol", arith.rtol)))
    model = MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in heads], beta=beta if sk.affine else None
    )
    check_skeleton(sk, model, beta if sk.affine else 0.0, rank)
    if not estimate <= prtol:
        raise PrecisionExhausted(
            f"the heads completed from the rank-{sk.p} skeleton ({rank}) have a first-order "
            f"parameter error estimate {estimate:.2e} relative > the parameter tolerance "
            f"{prtol:g} of this {box_precision(arith)} box; learn with rank=None (the full "
            "design and its polish)"
        )
    checked = None
    if verify:
        try:
            checked = verify_model(
                sk.oracle,
                model,
                count=verify,
                seed=sk.seed,
                lengths=lengths,
                bias=beta if sk.affine else 0.0,
                what=f"the heads completed from the rank-{sk.p} skeleton ({rank})",
            )
        except ModelClassMismatch as exc:
            raise ModelClassMismatch(
                f"{exc}; the heads may have rank above {sk.p}: learn with rank=None or a "
                "larger rank"
            ) from exc
    from verified_attn.multi_head.pipeline.skeleton_record import low_rank_recovery

    return low_rank_recovery(sk, run.counts, bound, heads, beta, (prtol, estimate), checked)


__all__ = [
    "check_skeleton",
    "finish",
    "learning_queries",
    "plan_low_rank",
    "skeleton_heads",
]

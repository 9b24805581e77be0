"""Stage 2, pilot: rounds that rescale u until the scores sit in the ratio window, and the
conditioning rounds that replace a badly conditioned u-group's row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted
from verified_attn.multi_head.float_pilot import next_scale
from verified_attn.multi_head.pipeline.asking import (
    ask_pairs,
)
from verified_attn.multi_head.pipeline.budget import (
    extra_columns,
    float_ratios,
    pilot_rounds,
)
from verified_attn.multi_head.pipeline.design import (
    _CONDITIONING_ANGLE,
    _CONDITIONING_FACTOR,
    _DOUBLE_UNIT,
    box_precision,
    design_pairs,
    float_design,
    float_probe_matrix,
    float_sequence,
)
from verified_attn.multi_head.pipeline.poles import (
    _float_poles,
)
from verified_attn.multi_head.pipeline.state import FloatState
from verified_attn.oracle import Oracle
from verified_attn.verification import (
    agree,
)


def learning_sequences(
    U: np.ndarray,
    B: np.ndarray,
    H: int,
    ties: Sequence[dict[str, Any]] = (),
    *,
    unit: float = 2.0**-53,
    samples: int | None = None,
) -> Iterator[np.ndarray]:
    """The design's learning queries, one at a time: the F(0) queries [b_j], then per pair
    (u, b_j) the queries of :func:`float_ratios`, then the tie links ``ties`` (their ``k``
    and ``j``). Built as they are read, never all at once (nn.MultiheadAttention E = 64,
    H = 4: 3.9 GB of float64 together). ``samples``: the queries a pair asked, the first
    of :func:`float_ratios` (a coarse box's design under the follow-up's count asks no
    t = 1 sample, the last one); all of them if None.

    >>> [X.shape[0] for X in learning_sequences(np.eye(1), np.eye(1), 1, [{"k": 0, "j": 0}])]
    [1, 65, 65, 2]
    """
    ratios = float_ratios(H, unit=unit)[:samples]
    yield from (B[j][None, :] for j in range(len(B)))
    for u, j in design_pairs(U, len(B)):
        yield from (float_sequence(u, B[j], k, m) for k, m in ratios)
    yield from (float_sequence(U[t["k"]], (B[0] + B[t["j"]]) / 2, 1) for t in ties)


def pilot_pairs(d: int, ncols: int) -> list[int]:
    """The pilot's pairs, as indices into :func:`design_pairs`: ``(u_k, b_k)``, one per
    u-group, so that its scores sample d different u and b (one u-group's scores share
    ``u_1^T c_h``, and misjudge an affine box's spread by up to 2x).

    >>> pilot_pairs(3, 4)
    [0, 5, 10]
    """
    return [k * ncols + k for k in range(d)]


def _pilot(
    oracle: Oracle,
    f0: np.ndarray,
    ratios: Sequence[tuple[int, int]],
    H: int,
    seed: int,
    affine: bool,
    rescale: bool = True,
) -> tuple[float, np.ndarray, list[dict[str, Any]]]:
    """The pilot (phase ``"pilot"``, :mod:`.float_pilot`): the :func:`pilot_pairs`' queries
    at the design scale; while their single-pair scores ask for another u scale (and rounds
    are left), the same queries again at that scale. Returns the kept scale, the kept
    round's answers (``(d, len(ratios))``, those pairs' answers in the design) and the
    discarded rounds (their scale and answers, for the certificate). ``rescale=False``: one
    round, at the design scale."""
    d = oracle.d
    t0 = np.array([0.0] + [k / m for k, m in ratios])
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", _DOUBLE_UNIT))
    rounds = pilot_rounds(d, H, affine, unit=unit) if rescale else 1
    scale, discarded = 1.0, []
    with oracle.phase("pilot"):
        for i in range(rounds):
            _, B, pairs = float_design(
                d, seed, affine, scale, extra_columns(d, H, affine, unit=unit)
            )
            chosen = [pairs[p] for p in pilot_pairs(d, len(B))]
            got = ask_pairs(oracle, chosen, B, ratios)
            if i == rounds - 1:
                break
            scores = [
                [s for s, _ in _float_poles(t0, np.concatenate([[f0[j]], got[n]]), H)]
                for n, (_, j) in enumerate(chosen)
            ]
            new = next_scale(np.array(scores), scale)
            if new is None:
                break
            discarded.append({"scale": scale, "answers": got.tolist()})
            scale = new
    return scale, got, discarded


def _not_reproduced(
    exc: ModelClassMismatch,
    where: str,
    H: int,
    arith: Arithmetic,
    estimate: float,
    figure: str,
    bias: float = 0.0,
) -> PrecisionExhausted:
    """The refusal after the fitted heads miss an answer of the box (learning or fresh).

    The relative gap is the agreement rule's (:func:`verified_attn.agreement.agree`:
    relative to the answer less the bias ``bias``), the rule that failed.

    >>> e = ModelClassMismatch("miss", query=np.zeros((3, 2)), observed=0.02, expected=0.0201)
    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> msg = str(_not_reproduced(e, "a fresh sequence", 2, FloatArithmetic(), 1e-9, "s 1"))
    >>> msg[:60], "(relative gap 5.00e-03 > rtol 1e-06)" in msg
    ('the fitted 2 heads do not reproduce the box on a fresh seque', True)
    """
    query = np.asarray(exc.query) if exc.query is not None else None
    length = f" of length {query.shape[0]}" if query is not None and query.ndim == 2 else ""
    try:
        obs, exp = float(exc.observed), float(exc.expected)
        gap = f"relative gap {agree(arith, obs, exp, bias=bias)[1]:.2e}"
    except (TypeError, ValueError):
        gap = "a gap"
    return PrecisionExhausted(
        f"the fitted {H} heads do not reproduce the box on {where}{length} ({gap} > rtol "
        f"{arith.rtol:g}): the pooled fit converged to wrong heads or is too ill-conditioned "
        f"for a {box_precision(arith)} box (first-order parameter error estimate "
        f"{estimate:.2e}, {figure}); the answers do not show the box is outside the class; "
        "rerun with another seed"
    )


def _condition(
    oracle: Oracle,
    U: np.ndarray,
    B: np.ndarray,
    ans: np.ndarray,
    ratios: Sequence[tuple[int, int]],
    k: int,
    partner: int | None = None,
    factor: float = _CONDITIONING_FACTOR,
) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
    """One conditioning round (phase ``"conditioning"``) for u-group k: its row u_k scaled
    by ``factor`` or, with ``partner`` j, turned by ``_CONDITIONING_ANGLE``
    toward u_j at the same norm (``cos a u_k + sin a u_j |u_k| / |u_j|``, rescaled to
    |u_k|); its pairs and the halved links through it asked again. Returns the new U, the
    answers with those rows replaced, and the replaced rows."""
    d, ncols = U.shape[0], len(B)
    U = U.copy()
    if partner is None:
        U[k] = U[k] * factor
    else:
        norm = float(np.linalg.norm(U[k]))
        toward = U[partner] * (norm / float(np.linalg.norm(U[partner])))
        turned = math.cos(_CONDITIONING_ANGLE) * U[k] + math.sin(_CONDITIONING_ANGLE) * toward
        U[k] = turned * (norm / float(np.linalg.norm(turned)))
    pairs = design_pairs(U, ncols)
    rows = [k * ncols + j for j in range(ncols)]
    rows += [d * ncols + i - 1 for i in range(1, d) if k in (0, i)]  # the links through u_k
    with oracle.phase("conditioning"):
        got = ask_pairs(oracle, [pairs[i] for i in rows], B, ratios)
    old = ans[rows].tolist()
    ans = ans.copy()
    ans[rows] = got
    return U, ans, old


def conditioning_partners(
    d: int, again: Sequence[int], replaced: Sequence[dict[str, Any]]
) -> list[int | None]:
    """The rows the u-groups ``again`` are turned toward in a conditioning round of the
    redundant design (:func:`_condition`), from the rows never asked again (not in
    ``again``, no earlier round's ``k``), the lowest first: U stays invertible (a turned row
    is its own plus a multiple of a row that stays). A group's partner is one no other group
    of the round and no earlier round of this group has had, while there is one; else any
    row it has not had; else None (the group is scaled instead).

    >>> conditioning_partners(6, [1, 4], []), conditioning_partners(4, [0, 1, 2], [{"k": 3}])
    ([0, 2], [None, None, None])
    >>> conditioning_partners(4, [1], [{"k": 1, "partner": 0}])
    [2]
    """
    asked = set(again) | {int(r["k"]) for r in replaced}
    free = [i for i in range(d) if i not in asked]
    taken: set[int] = set()
    out: list[int | None] = []
    for k in again:
        had = {int(r["partner"]) for r in replaced if r["k"] == k and r.get("partner") is not None}
        fresh = [i for i in free if i not in had and i not in taken]
        other = [i for i in free if i not in had]
        j = fresh[0] if fresh else (other[0] if other else None)
        if j is not None:
            taken.add(j)
        out.append(j)
    return out


def pilot_stage(st: FloatState) -> None:
    """Stage 2b, the pilot: the u scale from the pilot pairs' own answers, then the design at
    that scale (its pairs, the probe matrix)."""
    st.scale, st.kept, st.discarded = _pilot(
        st.oracle, st.f0, st.ratios, st.H, st.seed, st.affine, st.options.pilot
    )
    if st.discarded:
        st.options.mark("pilot")
    st.U, st.B, st.pairs = float_design(st.d, st.seed, st.affine, st.scale, st.wide)
    st.Mt = float_probe_matrix(st.B, st.affine).T
    st.piloted = pilot_pairs(st.d, len(st.B))

"""Stage 7, conditioning: the u-groups a decoding leaves failing asked again at a
better-conditioned u (their row scaled, or turned toward a partner row), refitted,
restarted and decoded again, while the adaptive share of the query bound allows.
A coarse box's design under the follow-up's count asks a group that misses its answers
again with its row halved, from the polish's queries (:func:`_follow_up_conditioning`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn.multi_head.canonical_bounds import parameter_count
from verified_attn.multi_head.pipeline.budget import (
    _follow_up_polish,
    base_query_limit,
    conditioning_cost,
    within_follow_up,
)
from verified_attn.multi_head.pipeline.decode import decode_stage
from verified_attn.multi_head.pipeline.design import (
    _CONDITIONING_ANGLE,
    _CONDITIONING_FACTOR,
    CONDITIONING_GROUPS,
    CONDITIONING_ROUNDS,
)
from verified_attn.multi_head.pipeline.fits import _refit_groups
from verified_attn.multi_head.pipeline.pilot import _condition, conditioning_partners
from verified_attn.multi_head.pipeline.repairs import restart_stage
from verified_attn.multi_head.pipeline.rules import _GROUP_FIT
from verified_attn.multi_head.pipeline.state import FloatState

__all__ = [
    "FOLLOW_UP_CONDITIONING_POLISH",
    "FOLLOW_UP_FACTOR",
    "conditioning_stage",
    "follow_up_again",
    "follow_up_conditioning_room",
]

#: A coarse box's design under the follow-up's count asks a u-group that misses its answers
#: again (:func:`follow_up_again`) only while the polish keeps at least this many sequences per
#: canonical parameter: the round's queries are the polish's (the run stays under the count).
FOLLOW_UP_CONDITIONING_POLISH = 1.0


def follow_up_conditioning_room(d: int, H: int, affine: bool) -> int:
    """The conditioning queries the design under the follow-up's count may take from its
    polish: what keeps :data:`FOLLOW_UP_CONDITIONING_POLISH` polish sequences per parameter.

    >>> follow_up_conditioning_room(16, 4, True), follow_up_conditioning_room(8, 4, True)
    (237, 0)
    """
    P = parameter_count(d, H, affine)
    return max(0, _follow_up_polish(d, H, affine) - math.ceil(FOLLOW_UP_CONDITIONING_POLISH * P))


#: The factor a u-group's row is scaled by when the design under the follow-up's count asks
#: it again. Measured (nn.MultiheadAttention in float32, E = 16, H = 4, the float
#: benchmark's module seed 2, pilot scale 4): u_13 missed its answers by 1.6e5 x its
#: rounding floor, two of its heads' scores at -9.2 to -1.8 (their sigmoids under the ratio
#: window hardly move); asked again at 1/2 it fits at 1.6 x the floor, at 2^-1/2 at 7.2e3 x,
#: turned toward u_1 (the redundant design's usual round) at 9.0e4 x; and the same run with
#: u_13's scores exact is learned (2^-20.2), while restarts of u_13 from the exact heads' planes
#: (no query) stay at 1.6e5 x.
FOLLOW_UP_FACTOR = 0.5


def follow_up_again(res: np.ndarray, floor: np.ndarray, costs: list[int], room: int) -> list[int]:
    """The u-groups the design under the follow-up's count asks again: those that miss
    their answers (over ``_GROUP_FIT`` x their rounding floor ``floor``), the worst first,
    while their ``costs`` (queries, per group) fit in ``room``; sorted.

    >>> follow_up_again(np.array([1.0, 2e5, 3e5, 5.0]), np.ones(4), [152, 152, 152, 152], 237)
    [2]
    >>> follow_up_again(np.array([1.0, 2e5]), np.ones(2), [152, 152], 100)
    []
    """
    again: list[int] = []
    spent = 0
    for k in np.argsort(-(res / floor), kind="stable"):
        if not res[k] > _GROUP_FIT * floor[k]:
            break
        if spent + costs[k] <= room and len(again) < CONDITIONING_GROUPS:
            again.append(int(k))
            spent += costs[k]
    return sorted(again)


def _follow_up_conditioning(st: FloatState) -> None:
    """The design under the follow-up's count (:func:`~.budget.within_follow_up`): one round
    that asks the groups :func:`follow_up_again` names with their rows scaled by
    :data:`FOLLOW_UP_FACTOR`, its queries taken from the polish (``budget.polish_after``);
    then refitted, restarted and decoded again. A group left missing starts the polish as
    before (:func:`~.decode.decode_stage`)."""
    if st.fits is None:
        return
    d, H, affine, unit = st.d, st.H, st.affine, st.unit
    costs = [conditioning_cost(d, H, affine, k, unit=unit) for k in range(d)]
    again = follow_up_again(
        st.fits[2], st.fits[3], costs, follow_up_conditioning_room(d, H, affine)
    )
    if not again:
        return
    st.options.mark("conditioning")
    for k in again:
        st.U, st.ans, old = _condition(
            st.oracle, st.U, st.B, st.ans, st.ratios, k, factor=FOLLOW_UP_FACTOR
        )
        st.replaced.append({"k": k, "answers": old, "factor": FOLLOW_UP_FACTOR})
    st.fits = _refit_groups(
        st.f0, st.ans, st.t, H, unit, st.fits, again, Mt=st.Mt, options=st.options
    )
    restart_stage(st)
    decode_stage(st)


def conditioning_stage(st: FloatState) -> None:
    """Up to :data:`CONDITIONING_ROUNDS` rounds. Every failing group of a decoding is asked
    again in one round (each its own record and cost), or none: a group left as it is keeps
    its fit (it depends on its own answers only), so the decoding would fail again on it.
    Rows with tie links cannot be asked again (the links were asked at the old u_k)."""
    if not st.options.conditioning:
        return
    d, H, affine, unit = st.d, st.H, st.affine, st.unit
    if within_follow_up(d, H, affine, unit=unit):
        _follow_up_conditioning(st)
        return
    # The adaptive phases' share of the bound (float_query_limit), less the pilot's.
    room = (
        st.bound
        - base_query_limit(d, H, affine=affine, unit=unit)
        - len(st.discarded) * d * len(st.ratios)
    )
    for _ in range(CONDITIONING_ROUNDS):
        dec = st.decoded
        if dec.estimate is not None or not dec.bad:
            break
        again = sorted(set(dec.bad))
        cost = sum(conditioning_cost(d, H, affine, k, unit=unit) for k in again)
        if (
            cost > room
            or len(st.replaced) + len(again) > CONDITIONING_GROUPS
            or any(k in again for k, _ in st.asked_ties)
        ):
            break
        room -= cost
        st.options.mark("conditioning")
        # The redundant design turns each group's row toward one that stays; the square
        # design scales it.
        partners = conditioning_partners(d, again, st.replaced) if st.wide else [None] * len(again)
        for k, j in zip(again, partners, strict=True):
            st.U, st.ans, old = _condition(st.oracle, st.U, st.B, st.ans, st.ratios, k, j)
            record: dict[str, Any] = {"k": k, "answers": old}
            if j is None:
                record["factor"] = _CONDITIONING_FACTOR
            else:
                record.update(factor=1.0, partner=j, angle=_CONDITIONING_ANGLE)
            st.replaced.append(record)
        assert st.fits is not None
        st.fits = _refit_groups(
            st.f0, st.ans, st.t, H, unit, st.fits, again, Mt=st.Mt, options=st.options
        )
        restart_stage(st)
        decode_stage(st)

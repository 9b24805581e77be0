"""Stage 7, conditioning: the u-groups a decoding leaves failing asked again at a
better-conditioned u (their row scaled, or turned toward a partner row), refitted,
restarted and decoded again, while the adaptive share of the query bound allows.
"""

from __future__ import annotations

from typing import Any

from verified_attn.multi_head.pipeline.budget import base_query_limit, conditioning_cost
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
from verified_attn.multi_head.pipeline.state import FloatState

__all__ = ["conditioning_stage"]


def conditioning_stage(st: FloatState) -> None:
    """Up to :data:`CONDITIONING_ROUNDS` rounds. Every failing group of a decoding is asked
    again in one round (each its own record and cost), or none: a group left as it is keeps
    its fit (it depends on its own answers only), so the decoding would fail again on it.
    Rows with tie links cannot be asked again (the links were asked at the old u_k)."""
    if not st.options.conditioning:
        return
    d, H, affine, unit = st.d, st.H, st.affine, st.unit
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

"""The learning queries before the refinement, for the tests that pin an earlier stage's
count: the refinement (pipeline/refine.py) then asks what the follow-up's count leaves."""

from __future__ import annotations

from typing import Any

from verified_attn.multi_head.pipeline.refine import refine_count


def before_refine(rec: Any, d: int, H: int, affine: bool = False) -> int:
    """The learning queries before the refinement, once its count is checked to be the
    rule's (:func:`refine_count` of them, or none with the stage off)."""
    asked = int(rec.queries - rec.queries_by_phase.get("refinement", 0))
    assert rec.queries_by_phase.get("refinement", 0) in (
        0,
        refine_count(d, H, affine, asked, rec.bound, unit=2.0**-53),
    )
    return asked

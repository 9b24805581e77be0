"""A fixture for the tests that pin a float32 box's decoding figures (u-groups, joint).

Below ``pipeline.budget.POLISH_PARAMETERS`` a float32 box takes the sequence polish
(tests/multi_head/test_sequence_polish_s11.py); these tests check the figures a float32 box
past it keeps (e.g. E = 32, H = 4), on smaller boxes: import ``no_polish`` (autouse).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def no_polish() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("verified_attn.multi_head.pipeline.budget.POLISH_PARAMETERS", 0)
        # ... and the float64 precision polish, which has its own limit (a float32 box
        # made not coarse, the wrong variants', would take it).
        mp.setattr("verified_attn.multi_head.pipeline.budget.PRECISION_POLISH_PARAMETERS", 0)
        yield

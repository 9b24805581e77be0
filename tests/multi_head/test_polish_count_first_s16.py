"""When the precision polish is asked (pipeline.budget.polish_wanted): above PRECISION_TARGET
while the run stays under the follow-up's count, past that count only above
PRECISION_REQUIRED (or when the decoded heads were refused), never past the run's bound.

Each rule is checked against a deliberately wrong variant that decides otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
from refine_pin import before_refine
from test_float_extraction_s3 import _box, _model

import verified_attn as va
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.pipeline.budget import PRECISION_TARGET, polish_wanted

# nn.MultiheadAttention E = 16, H = 8: 289 polish sequences, bound 13,064, follow-up 8177.
COUNT, BOUND, FOLLOW_UP = 289, 13_064, 8_177


def _old_rule(estimate: float | None, count: int, asked: int, bound: int) -> bool:
    # The wrong variant (the rule before): above the target whenever the bound holds it.
    return (estimate is None or estimate > PRECISION_TARGET) and 0 < count <= bound - asked


@pytest.mark.parametrize(
    ("estimate", "asked", "wanted"),
    [
        (5e-12, FOLLOW_UP - COUNT - 1, True),  # lands at follow-up - 1: still fewer
        (5e-12, FOLLOW_UP - COUNT, False),  # would land on the follow-up's count: not asked
        (9e-11, 9_000, False),  # past the count already, within what is required
        (2e-10, 9_000, True),  # above what is required: precision before the count
        (None, 9_000, True),  # the decoded heads were refused: the polish is their chance
        (5e-13, 7_000, False),  # within the target: nothing to gain
        (2e-10, BOUND - COUNT + 1, False),  # past the run's bound: never
        (None, BOUND - COUNT, True),  # exactly at the bound: allowed
    ],
)
def test_the_rule(estimate: float | None, asked: int, wanted: bool) -> None:
    assert polish_wanted(estimate, COUNT, asked, BOUND, FOLLOW_UP) is wanted


def test_the_old_rule_polishes_past_the_count_for_precision_it_does_not_need() -> None:
    # The wrong variant decides otherwise on the case the rule is for.
    assert _old_rule(9e-11, COUNT, 9_000, BOUND)
    assert not polish_wanted(9e-11, COUNT, 9_000, BOUND, FOLLOW_UP)
    # A zero count (no precision polish for this size) is never asked.
    assert not polish_wanted(None, 0, 0, BOUND, FOLLOW_UP)


def test_the_learner_asks_the_rule_with_its_own_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    # d = 8, H = 1, seed 13 (the precision polish's box): decoded estimate 5.9e-9 after 166
    # learning queries, 9 polish sequences, follow-up 255.
    calls: list[tuple[Any, ...]] = []
    real = polish_wanted

    def spy(*args: Any) -> bool:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr("verified_attn.multi_head.pipeline.polish.polish_wanted", spy)
    model = _model(_box(8, 1, 13))
    rec = learn_multi_head(va.Oracle(model, "float"), heads=1, seed=13)
    ((estimate, count, asked, bound, follow_up),) = calls
    assert 1e-10 < estimate < 1e-8 and count == 9 and asked == 166
    assert bound == rec.bound and follow_up == follow_up_query_bound(8, 1) == 255
    assert rec.queries_by_phase["polish"] == 9
    # The rule's answer governs: told no, the learner keeps the decoded heads (9 queries
    # fewer), which the refinement then takes on with the room left: its figure is the
    # refined fit's, within the parameter tolerance.
    monkeypatch.setattr("verified_attn.multi_head.pipeline.polish.polish_wanted", lambda *a: False)
    kept = learn_multi_head(va.Oracle(model, "float"), heads=1, seed=13)
    assert "polish" not in kept.queries_by_phase
    assert before_refine(kept, 8, 1) == before_refine(rec, 8, 1) - 9
    assert kept.queries_by_phase["refinement"] == rec.queries_by_phase["refinement"] + 9
    assert kept.parameter_error_estimate <= kept.parameter_rtol
    assert kept.certificate()["result"]["parameter_error_estimate_kind"] == "refinement"
    va.verify_certificate(kept.certificate())

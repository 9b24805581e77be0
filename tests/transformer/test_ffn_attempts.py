"""The FFN learners' retries (transformer.common.first_success): a refuted plane or line is
retried, its queries stay in the count and the bound, its reason in the notes; after the
last attempt the refusal lists every reason.

The golden figures were measured before the retry loop was shared and must not move (the
bias-free ones are those of its current count: grid 1, the second segment reusing the first's
last cone).
"""

from __future__ import annotations

from typing import Any

import pytest

import verified_attn as va
import verified_attn.transformer.relu as relu
import verified_attn.transformer.relu_biased_learner as relu_biased_learner
from verified_attn.errors import ModelClassMismatch
from verified_attn.models import ReluFFN

BIASED = ReluFFN([[1, -1]], [2, 1], a=[1, 0], b=-1)
PLAIN = ReluFFN([[1, -1], [0, 1]], [1, 2])


def _refute_first(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """The first fresh-sequence check refutes its network (a planted refutation)."""
    real = module.verify_network
    calls: list[int] = []

    def refute_first(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise kw["retry"]("planted refutation")
        return real(*args, **kw)

    monkeypatch.setattr(module, "verify_network", refute_first)


def test_a_refuted_line_is_retried_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    once = relu_biased_learner.learn_biased_relu_ffn(va.Oracle(BIASED, "exact"))
    assert (once.attempts, once.bound, once.queries) == (1, 10, 10)
    _refute_first(monkeypatch, relu_biased_learner)
    rec = relu_biased_learner.learn_biased_relu_ffn(va.Oracle(BIASED, "exact"))
    assert rec.attempts == 2
    assert rec.notes == ["line 1 failed: planted refutation"]
    # Both lines' searches: the refuted one's queries are in the count and the bound.
    assert (rec.bound, rec.queries) == (22, 22)
    assert rec.queries_by_phase == {"ffn": 22, "ffn-verify": 8}


def test_a_refuted_plane_is_retried_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    once = relu.learn_relu_ffn(va.Oracle(PLAIN, "exact"))
    assert (once.attempts, once.bound, once.queries) == (1, 972, 10)
    _refute_first(monkeypatch, relu)
    rec = relu.learn_relu_ffn(va.Oracle(PLAIN, "exact"))
    assert rec.attempts == 2
    assert rec.notes[0] == "attempt 1 failed: planted refutation"
    assert rec.notes[1].startswith("2 random planes were used")
    # 10 queries on the refuted plane, 14 on the second (grid 2): both in the count, and
    # the bound has one term per attempt.
    assert (rec.bound, rec.queries) == (1948, 24)
    assert relu.ffn_query_count(2, **rec.line_counts) == 14


@pytest.mark.parametrize(
    ("learner", "refusal"),
    [
        (relu.learn_relu_ffn, "no bias-free ReLU network fits the oracle after 2 attempts ("),
        (
            relu_biased_learner.learn_biased_relu_ffn,
            "no one-hidden-layer ReLU network with biases fits the oracle after 2 lines (",
        ),
    ],
)
def test_the_refusal_lists_every_attempt(learner: Any, refusal: str) -> None:
    head = va.Oracle(va.SingleHeadAttention([[1, 0], [2, -1]], [1, 3]), "exact")
    with pytest.raises(ModelClassMismatch) as info:
        learner(head, attempts=2, verify=2)
    text = str(info.value)
    assert text.startswith(refusal) and text.endswith(")")
    # One reason per attempt, joined by "; ": the two fresh sequences that refuted them.
    assert text.count("the oracle is not the learned ReLU network") == 2
    assert "[[-1.0, -0.875], [-2.0, -1.75]]" in text and "[[1.875, -1.875], [1.875, 1.375]]" in text

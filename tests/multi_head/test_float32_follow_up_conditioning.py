"""The float32 design under the follow-up's count asks a u-group that misses its answers again.

A coarse box's design under ``4Hd^2 - 2H + 1`` (:func:`~.budget.within_follow_up`) has no
adaptive room; a u-group whose fit misses its answers (over ``_GROUP_FIT`` x its rounding
floor) is asked once more with its row halved, the round's queries taken from the polish
(``budget.polish_after``) while the polish keeps one sequence per canonical parameter. The
run stays one query under the follow-up's count; the certificate's checker derives the
polish count from the stored conditioning rounds. Each rule is also run as a wrong variant
that fails.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.multi_head.canonical_bounds import follow_up_query_bound, parameter_count
from verified_attn.multi_head.pipeline import conditioning
from verified_attn.multi_head.pipeline.budget import conditioning_cost, polish_after, polish_count
from verified_attn.multi_head.pipeline.conditioning import (
    FOLLOW_UP_CONDITIONING_POLISH,
    FOLLOW_UP_FACTOR,
    follow_up_again,
    follow_up_conditioning_room,
)
from verified_attn.multi_head.pipeline.design import random_float_box
from verified_attn.multi_head.pipeline.rules import _GROUP_FIT
from verified_attn.precision import relative_parameter_error

F32 = 2.0**-24


def rounded_box(
    d: int, H: int, seed: int, *, rtol: float, parameter_rtol: float
) -> tuple[va.Oracle, Any]:
    """The float benchmark's random box (d, H, seed) answered in float64 rounded to float32,
    declared as such: the same answers on every CPU, unlike a float32 module's."""
    model = random_float_box(d, H, seed)

    def batch(Xs: np.ndarray) -> np.ndarray:
        return np.float32(model.evaluate_batch(np.asarray(Xs))).astype(np.float64)

    box = va.Oracle.from_callable(
        lambda X: float(batch(np.asarray(X)[None])[0]),
        d=d,
        batch_fn=batch,
        rtol=rtol,
        unit_roundoff=2.0**-24,
        parameter_rtol=parameter_rtol,
        model_class="multi-head",
    )
    return box, model


@pytest.mark.parametrize(("d", "H"), [(8, 2), (8, 4), (12, 3), (16, 2), (16, 4)])
def test_a_conditioning_round_keeps_the_run_under_the_count(d: int, H: int) -> None:
    P = parameter_count(d, H, True)
    room = follow_up_conditioning_room(d, H, True)
    costs = [conditioning_cost(d, H, True, k, unit=F32) for k in range(d)]
    res = np.full(d, 2.0 * _GROUP_FIT)  # every group misses: the room decides
    again = follow_up_again(res, np.ones(d), costs, room)
    spent = sum(costs[k] for k in again)
    # The round's queries come out of the polish: the total is unchanged, and the polish
    # keeps a sequence per parameter.
    assert spent <= room
    assert polish_after(d, H, True, spent, unit=F32) + spent == polish_count(d, H, True, unit=F32)
    assert (
        spent == 0 or polish_after(d, H, True, spent, unit=F32) >= FOLLOW_UP_CONDITIONING_POLISH * P
    )
    # E = 8 has no room (its polish is under a sequence per parameter already).
    assert (room == 0) == (d == 8)
    # The wrong variant: asking every missing group regardless of the room leaves the
    # polish under a sequence per parameter.
    assert polish_after(d, H, True, sum(costs), unit=F32) < FOLLOW_UP_CONDITIONING_POLISH * P


def test_only_groups_that_miss_their_answers_are_asked_again() -> None:
    floor = np.array([1.0, 2.0, 1.0, 1.0])
    res = np.array([_GROUP_FIT, 3 * _GROUP_FIT, 1.0, 5 * _GROUP_FIT])  # u_1 at the gate
    assert follow_up_again(res, floor, [152] * 4, 1000) == [1, 3]
    # The room takes the worst group first (u_4 at 5e5 x, then u_2 at 1.5e5 x).
    assert follow_up_again(res, floor, [152] * 4, 200) == [3]
    # The wrong variant: ranked by the residual alone (not over the floor), the room would
    # go to u_2 (3e5, but 1.5e5 x its floor of 2) before u_4 (5e5 x): not what is asked.
    assert follow_up_again(res, floor, [152] * 4, 200) != [int(np.argmax(res[:3]))]
    assert follow_up_again(res, 100 * floor, [152] * 4, 1000) == []
    # The design's other float32 designs are not touched: five heads keep their polish.
    assert polish_after(8, 5, True, 304, unit=F32) == polish_count(8, 5, True, unit=F32)


def test_a_group_over_a_lowered_gate_is_asked_again_on_a_fixed_box(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random d = 8, H = 4 heads (seed 0) answered in float64 rounded to float32: a box whose
    answers are the same on every CPU. Its u-groups fit within the gate, so the gate is
    lowered to 1e-6 x the rounding floor: the worst group (u_4) is asked again with its row
    halved, its 80 queries taken from the polish (375 -> 295), the run still one query under
    the follow-up's count. (nn.MultiheadAttention(16, 4) module seed 2 of the float
    benchmark took this round at the real gate on one machine; whether a float32 module does
    follows its last bits, which differ between CPUs' kernels.)"""
    monkeypatch.setattr(conditioning, "_GROUP_FIT", 1e-6)
    box, model = rounded_box(8, 4, 0, rtol=1e-3, parameter_rtol=1e-3)
    rec = va.learn_multi_head(box, heads=4, seed=0)
    cost = conditioning_cost(8, 4, False, 3, unit=F32)
    polish = polish_after(8, 4, False, cost, unit=F32)
    phases = {"F(0)": 9, "pilot": 64, "F(t)": 568, "conditioning": cost, "polish": polish}
    assert (cost, polish) == (80, 295)  # golden
    assert rec.queries_by_phase == {**phases, "verify": 8}
    assert sum(phases.values()) == rec.queries == follow_up_query_bound(8, 4) - 1
    truth = [(np.asarray(W, dtype=float), np.asarray(v, dtype=float)) for W, v in model.heads]
    got = [(np.asarray(W), np.asarray(v)) for W, v in rec.parameters["heads"]]
    # the stated estimate covers the true error (measured 2.2e-8 against 6.1e-7)
    error = relative_parameter_error(got, truth)
    assert error <= rec.parameter_error_estimate <= rec.parameter_rtol == 1e-3
    data = rec.certificate()
    rounds = data["design"]["conditioning"]
    assert [(c["k"], va.serialize.load_number(c["factor"])) for c in rounds] == [
        (3, FOLLOW_UP_FACTOR)
    ]
    assert va.verify_certificate(data).ok
    # The wrong variant: the conditioning round left out of the record, the polish count the
    # checker derives is the full 375, and the 295 stored answers do not match it.
    bad = copy.deepcopy(data)
    bad["design"]["conditioning"] = []
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)

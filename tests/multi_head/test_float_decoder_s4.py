"""The float multi-head decoder (issue 12, s4): local minima repaired, second solutions seen.

Boxes from failures measured on main before this branch: u-group fits stuck in local minima
(a group at 160 x its rounding floor with score errors 1e-2, whose first-order estimate
passed the gate and only the fresh queries caught), crowded pairs no scores-only repair
reached, and a genuine second solution (two scores 4.8e-5 apart in one pair) that the
first-order estimate cannot see and one tie link decides.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from refine_pin import before_refine

import verified_attn as va
from verified_attn.errors import (
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical import canonical_form
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.float_fit import GroupFit, group_model
from verified_attn.multi_head.pipeline.budget import (
    float_query_bound,
    float_ratios,
    precision_polish_count,
)
from verified_attn.multi_head.pipeline.decode import _resolve_twins, _swap_alternatives
from verified_attn.multi_head.pipeline.design import float_design, float_sequence, random_float_box
from verified_attn.multi_head.pipeline.fits import _group_fits
from verified_attn.multi_head.pipeline.poles import _sigmoid
from verified_attn.multi_head.pipeline.rules import _CONVERGED

REFUSALS = (ModelClassMismatch, NotIdentifiable, PrecisionExhausted)
UNIT = 2.0**-53


def _box(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    # The independent check's instances (W ~ N(0, 1/d), v ~ N(0, 1), not rounded).
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]


def _model(heads: list[tuple[np.ndarray, np.ndarray]]) -> MultiHeadAttention:
    return MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])


def _heads_of(model: MultiHeadAttention) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (np.array(W.tolist(), dtype=float), np.array(v.tolist(), dtype=float).ravel())
        for W, v in model.heads
    ]


def _error(rec: va.Recovery, model: MultiHeadAttention) -> float:
    """Largest canonical entry error (best head order by assignment), relative to max(1, |x|)."""
    from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]

    truth = [
        np.concatenate([np.array(m.tolist(), dtype=float).ravel() for m in h])
        for h in canonical_form(model).heads
    ]
    got = [
        np.concatenate([np.ravel(np.asarray(x, float)) for x in h]) for h in rec.parameters["heads"]
    ]
    cost = np.array([[float(np.abs(g - t).max()) for t in truth] for g in got])
    a, b = linear_sum_assignment(cost)
    return float(cost[a, b].max()) / max(1.0, max(float(np.abs(t).max()) for t in truth))


def _estimate(rec: va.Recovery) -> float:
    found = re.search(r"parameter error estimate ([0-9.e+-]+) relative", " ".join(rec.notes))
    assert found is not None, rec.notes
    return float(found.group(1))


def _answers(
    model: MultiHeadAttention, d: int, H: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The design and the grid answers of the float learner, asked directly."""
    U, B, pairs = float_design(d, seed, False)
    oracle = va.Oracle(model, "float")
    ratios = float_ratios(H)
    f0 = np.array(oracle.query_many(B[:, None, :]), dtype=float)
    seqs = [float_sequence(u, B[j], k, m) for u, j in pairs for k, m in ratios]
    ans = np.array(oracle.query_many(seqs), dtype=float).reshape(len(pairs), len(ratios))
    return U, B, f0, ans, np.array([k / m for k, m in ratios])


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.parametrize(
    ("H", "seed", "main"),
    [
        # On main: u-group u_3 stuck at 160 x its floor (score error 1.2e-2), its estimate
        # within rtol, refused only by the fresh queries (ModelClassMismatch).
        (4, 5, "a local minimum the estimate could not see"),
        # On main: u-group u_4 misses its answers by 1.7e-8 (a pair with scores 1.87 - 2.70
        # crowded, which the scores-only repairs with the group's biased residues never left).
        (5, 0, "a crowded pair"),
        # On main and before the residue sources grew to every pair at d = 8: u-group u_3
        # fitted from its three best-conditioned pairs' residues (off by 0.2: three scores
        # of one pair beyond the ratio window) misses its answers by 1e-2.
        (5, 11, "every pair a residue source"),
    ],
)
def test_local_minima_of_main_are_learned(H: int, seed: int, main: str) -> None:
    d = 8
    heads = _box(d, H, 5000 + seed)
    model = _model(heads)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=H, seed=seed)
    # Within the stated estimate; and <= 1e-9: (4, 5) has a group whose Jacobian's smallest
    # singular value is 1.4e-7 (a residue of 0.02 between two scores 6e-3 apart), measured
    # 2.1e-10 (a fit started at the truth does no better; 4.4e-10 on the fresh queries).
    assert _error(rec, model) <= min(_estimate(rec), 1e-9), main
    assert rec.verification_error is not None and rec.verification_error <= 1e-9
    # And the decoder's groups themselves: every one at the rounding floor, at the truth.
    U, B, f0, ans, t = _answers(model, d, H, seed)
    _, s, res, floor = _group_fits(f0, ans, t, H, d, UNIT)
    assert (res <= _CONVERGED * floor).all()
    true_s = np.array([[[U[k] @ W @ B[j] for W, _ in heads] for j in range(d)] for k in range(d)])
    for k in range(d):
        # the group's head order is its own: compare sorted scores of each pair
        assert np.abs(np.sort(s[k], axis=-1) - np.sort(true_s[k], axis=-1)).max() <= 1e-7


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_second_solution_is_decided_by_one_tie_link(monkeypatch: pytest.MonkeyPatch) -> None:
    # random_float_box(8, 6, 1): in one pair two true scores are 4.8e-5 apart. With the two
    # swapped the u-group's fit meets its answers as well (1.4 x the floor against 1.6 x),
    # 6.7e-5 away: the grid cannot tell the heads apart in float64 (on main: refused, the
    # estimate 2.3e-6). One tie link (u_k, (b_1 + b_j)/2) sees the swap at first order.
    # The square design (with redundant columns there is no second solution to decide:
    # test_float_wide_s6 learns this box without a tie link).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.REDUNDANT_FROM_HEADS", 9)
    model = random_float_box(8, 6, 1)
    heads = _heads_of(model)
    U, B, _ = float_design(8, 1, False)
    true_s = np.array([[[U[k] @ W @ B[j] for W, _ in heads] for j in range(8)] for k in range(8)])
    assert np.diff(np.sort(true_s, axis=-1), axis=-1).min() < 1e-4  # the premise
    rec = learn_multi_head(va.Oracle(model, "float"), heads=6, seed=1)
    # The one extra query, in its own phase, within the float path's worst case.
    assert rec.queries_by_phase["tie links"] == 1
    # Learning queries: the design, the link and the precision polish (ceil(432 / 8)).
    polish = precision_polish_count(8, 6, False)
    assert before_refine(rec, 8, 6) == float_query_bound(8, 6) + 1 + polish
    assert _error(rec, model) <= min(_estimate(rec), 1e-10)
    # The tie link's answer is in the certificate, which re-checks without the oracle.
    assert va.verify_certificate(rec.certificate()).ok


def test_resolve_twins_asks_and_decides() -> None:
    # One group, a twin whose second solution predicts the tie link differently: the link's
    # answer picks one, an answer halfway decides nothing (the twin stays, for the refusal).
    lt = np.log(np.array([k / m for k, m in float_ratios(2)]))
    r = np.array([[1.0, 2.0]])
    s = np.array([[[0.1, 0.5], [0.3, 0.30005]]])
    alt = GroupFit(r[0].copy(), s[0].copy(), np.array([1e-15]))
    alt.s[1] = [0.30005, 0.3]
    f0 = np.array([0.2, -0.1])
    res = np.array([1e-15])
    twins = [(0, 1, 0, 1, 5e-5, 5e-5)]

    def predict(rr: np.ndarray, ss: np.ndarray) -> float:
        return float((f0[0] + f0[1]) / 2 + rr @ _sigmoid((ss[0] + ss[1]) / 2))

    asked: list[list[tuple[int, int]]] = []

    def answer_with(y: float) -> Any:
        def ask(kj: list[tuple[int, int]]) -> list[float]:
            asked.append(kj)
            return [y]

        return ask

    y_alt = predict(alt.r, alt.s)
    r1, s1, res1 = r.copy(), s.copy(), res.copy()
    left = _resolve_twins(twins, [alt], r1, s1, res1, lt, f0, UNIT, answer_with(y_alt))
    assert left == [] and asked == [[(0, 1)]] and np.array_equal(s1[0], alt.s)
    y_mid = (y_alt + predict(r[0], s[0])) / 2
    r2, s2, res2 = r.copy(), s.copy(), res.copy()
    left = _resolve_twins(twins, [alt], r2, s2, res2, lt, f0, UNIT, answer_with(y_mid))
    assert left == twins and np.array_equal(s2, s)


def test_swap_alternatives_sees_what_the_first_order_estimate_cannot() -> None:
    # One synthetic group: pair 0 has two scores 4e-5 apart; answers exact to rounding.
    rng = np.random.default_rng(3)
    J, H = 6, 3
    lt = np.log(np.array([k / m for k, m in float_ratios(H)]))
    r = np.array([[1.3, 0.8, -1.1]])
    s = rng.uniform(-3.0, 3.0, (1, J, H))
    s[0, 0, 1] = s[0, 0, 0] + 4e-5
    Y = group_model(lt, r, s)
    floor = np.array([UNIT * float(np.linalg.norm(Y))])
    res = np.array([float(np.linalg.norm(group_model(lt, r, s) - Y))]) + floor
    _, _, _, spread, twins, _ = _swap_alternatives(lt, Y, r, s, res, floor)
    assert [(k, j, a, b) for k, j, a, b, _, _ in twins] == [(0, 0, 0, 1)]
    # The second solution is far beyond the first-order error (floor / sigma_min ~ 1e-10).
    assert spread[0] > 1e-6
    # Scores far apart: no second solution, nothing reported.
    s[0, 0, 1] = s[0, 0, 0] + 0.7
    Y = group_model(lt, r, s)
    _, _, _, spread, twins, _ = _swap_alternatives(lt, Y, r, s, res, floor)
    assert twins == [] and spread[0] == 0.0


def test_a_group_stuck_above_the_others_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The gate: a group at 200 x the others' residual level is a local minimum, refused
    # before any estimate (the estimate assumes a fit at the noise level).
    real = _group_fits

    def stuck(*args: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        r, s, res, floor = real(*args, **kwargs)
        res = res.copy()
        res[1] = 200.0 * float(np.median(res / floor)) * floor[1]
        return r, s, res, floor

    monkeypatch.setattr("verified_attn.multi_head.pipeline.decode._group_fits", stuck)
    monkeypatch.setattr("verified_attn.multi_head.pipeline.fits._group_fits", stuck)
    model = _model(_box(3, 2, 17))
    with pytest.raises(PrecisionExhausted, match="local minimum of the fit"):
        learn_multi_head(va.Oracle(model, "float"), heads=2, seed=0)


def test_a_fresh_miss_is_not_called_out_of_class(monkeypatch: pytest.MonkeyPatch) -> None:
    # A candidate that reproduces every learning answer but misses a fresh one shows the fit
    # wrong, not the box out of class: PrecisionExhausted (and the head-count diagnosis,
    # which finds this box's 2 heads, adds nothing).
    def miss(*args: Any, **kwargs: Any) -> None:
        raise ModelClassMismatch("the oracle is not the recovered canonical heads (simulated)")

    monkeypatch.setattr("verified_attn.multi_head.pipeline.verify.verify_model", miss)
    model = _model(_box(3, 2, 17))
    with pytest.raises(PrecisionExhausted, match="do not reproduce the box on a fresh sequence"):
        learn_multi_head(va.Oracle(model, "float"), heads=2, seed=0)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.parametrize(("H", "seed"), [(3, 0), (4, 2), (5, 3), (6, 0)])
def test_estimate_bounds_the_true_error(H: int, seed: int) -> None:
    # Measured (d = 8, H = 2-6, seeds 0-9): the true error is 3x - 100x below the estimate.
    model = random_float_box(8, H, seed)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=H, seed=seed)
    est = _estimate(rec)
    assert rec.verification is not None
    assert _error(rec, model) <= est <= rec.verification.rtol


@settings(max_examples=8, deadline=None)
@given(d=st.integers(2, 4), H=st.integers(1, 4), seed=st.integers(0, 10**4))
def test_property_random_boxes_never_a_wrong_answer(d: int, H: int, seed: int) -> None:
    # Whatever is returned is within the rtol it states, in parameters and on fresh
    # sequences of lengths 1-16 (the learner's verification lengths are not used here).
    model = random_float_box(d, H, seed)
    try:
        rec = learn_multi_head(va.Oracle(model, "float"), heads=H, seed=seed)
    except REFUSALS:
        return
    assert rec.verification is not None
    rtol = rec.verification.rtol
    assert _error(rec, model) <= rtol
    rng = np.random.default_rng(seed + 1)
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, (n, d))
        want = float(model.evaluate_batch(X[None])[0])
        got = float(rec.model.evaluate_batch(X[None])[0])
        assert abs(got - want) <= rtol * max(1.0, abs(want))

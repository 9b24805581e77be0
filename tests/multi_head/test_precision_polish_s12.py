"""The precision polish: a float64 result whose decoded estimate is above PRECISION_TARGET
is refitted on every answer and ceil(P / 8) random sequences, within the adaptive room.

Each test that checks a rule or a figure also runs a deliberately wrong variant that fails.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from refine_pin import before_refine
from test_float_extraction_s3 import _box, _error, _model

import verified_attn as va
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.errors import CertificateError, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_bounds import parameter_count
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.pipeline.budget import (
    PRECISION_POLISH_PARAMETERS,
    PRECISION_TARGET,
    polish_count,
    precision_polish_count,
)
from verified_attn.serialize import dump_number, load_number
from verified_attn.verification import fresh_sequences

F32 = 2.0**-24


def _learned_box(d: int, H: int, seed: int) -> tuple[MultiHeadAttention, list[Any]]:
    # The float benchmark's random boxes: W ~ N(0, 1/d), v ~ N(0, 1), default_rng(seed).
    heads = _box(d, H, seed)
    return _model(heads), heads


@pytest.mark.parametrize(
    ("d", "H", "affine", "count"),
    [(8, 1, False, 9), (8, 6, False, 54), (8, 4, True, 41), (16, 8, True, 289), (2, 2, False, 2)],
)
def test_golden_precision_polish_counts(d: int, H: int, affine: bool, count: int) -> None:
    assert precision_polish_count(d, H, affine) == count
    # A coarse box is always polished (polish_count), never by this rule.
    assert precision_polish_count(d, H, affine, unit=F32) == 0
    assert (polish_count(d, H, affine, unit=F32) > 0) == (H >= 2)


def test_no_precision_polish_past_the_precision_polish_parameters() -> None:
    # Up to d = 32 with eight heads (nn.MultiheadAttention E = 32, H = 8: 8705 parameters,
    # ceil(8705 / 8) sequences); E = 64, H = 4 (16,897) is past it.
    assert parameter_count(32, 8, True) == 8705 <= PRECISION_POLISH_PARAMETERS
    assert precision_polish_count(32, 8, True) == 1089
    assert precision_polish_count(32, 6, False) == 792
    assert parameter_count(64, 4, True) == 16897 > PRECISION_POLISH_PARAMETERS
    assert precision_polish_count(64, 4, True) == 0
    # The coarse polish keeps its own limit: float32 E = 32, H = 4 is past it.
    assert polish_count(32, 4, True, unit=F32) == 0 < polish_count(16, 8, True, unit=F32)


@pytest.fixture(scope="module")
def polished() -> tuple[Any, list[tuple[np.ndarray, ...]]]:
    # d = 8, H = 1, seed 13: the pilot rescales u by 2.8, and the decoded heads' estimate
    # (5.9e-9) is above the target: the polish asks 9 sequences.
    model, truth = _learned_box(8, 1, 13)
    return learn_multi_head(va.Oracle(model, "float"), heads=1, seed=13), truth


def test_a_box_above_the_target_is_polished_to_its_heads(polished: Any) -> None:
    rec, truth = polished
    # golden: 8 F(0), 32 pilot (one round discarded), 126, 9; then the refinement's 79
    assert before_refine(rec, 8, 1) == 175 and rec.queries == 254
    assert rec.queries_by_phase["polish"] == 9
    assert "9 polish" in rec.notes[0]
    assert "9 of them on random sequences" in rec.notes[1]
    assert rec.parameter_error_estimate <= PRECISION_TARGET
    assert _error(rec, truth) <= 1e-12


def test_without_the_precision_polish_the_same_box_is_off_by_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wrong variant: a target (and a requirement) no estimate exceeds. The decoded
    # heads stand, 1e-9 off.
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.PRECISION_TARGET", float("inf"))
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.PRECISION_REQUIRED", float("inf"))
    # ... and no refinement (its own sequences would refit the heads).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.refine.refine_count", lambda *a, **k: 0)
    model, truth = _learned_box(8, 1, 13)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=1, seed=13)
    assert "polish" not in rec.queries_by_phase and rec.queries == 166
    assert _error(rec, truth) > 1e-10
    assert rec.parameter_error_estimate > 1e-12


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_a_box_under_the_target_asks_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    model, truth = _learned_box(8, 2, 0)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=2, seed=0)
    assert before_refine(rec, 8, 2) == 363 and "polish" not in rec.queries_by_phase
    assert rec.parameter_error_estimate <= PRECISION_TARGET
    assert _error(rec, truth) <= 1e-13
    # The wrong variant: target 0, every result polished (18 more queries).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.PRECISION_TARGET", 0.0)
    again = learn_multi_head(va.Oracle(model, "float"), heads=2, seed=0)
    assert before_refine(again, 8, 2) == 363 + 18 and again.queries_by_phase["polish"] == 18


def test_the_polish_stays_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A polish larger than what the run has left under its bound is not asked: the decoded
    # heads stand with their own figures, and the count stays within the stated bound.
    monkeypatch.setattr(
        "verified_attn.multi_head.pipeline.polish.precision_polish_count", lambda *a, **k: 10**6
    )
    model, _ = _learned_box(8, 1, 13)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=1, seed=13)
    assert "polish" not in rec.queries_by_phase and before_refine(rec, 8, 1) == 166
    assert rec.queries <= rec.bound
    # Refined (88 sequences): the refined fit's figure, recomputed by the checker.
    assert rec.certificate()["result"]["parameter_error_estimate_kind"] == "refinement"


def test_the_polish_learns_a_box_its_decoding_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Held to a parameter tolerance of 1e-9, the decoded heads (estimate 5.9e-9) are refused;
    # the polish, which is asked before the refusal, brings them within it.
    model, truth = _learned_box(8, 1, 13)
    arith = FloatArithmetic(1e-9, 2.0**-53)
    rec = learn_multi_head(va.Oracle(model, arith), heads=1, seed=13)
    assert rec.parameter_rtol == 1e-9 and rec.queries_by_phase["polish"] == 9
    assert _error(rec, truth) <= 1e-12
    # The wrong variant: no polish (its count 0), the decoded heads' refusal stands.
    monkeypatch.setattr(
        "verified_attn.multi_head.pipeline.polish.precision_polish_count", lambda *a, **k: 0
    )
    with pytest.raises(PrecisionExhausted, match="parameter tolerance 1e-09"):
        learn_multi_head(va.Oracle(model, arith), heads=1, seed=13)


def test_the_polished_predictions_hold_on_fresh_sequences(polished: Any) -> None:
    rec, truth = polished
    model = MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in truth])
    worst = 0.0
    for X in fresh_sequences(8, 32, seed=4242, lengths=list(range(1, 17))):
        y = float(model.evaluate_batch(X[None])[0])
        got = float(rec.model.evaluate_batch(X[None])[0])
        worst = max(worst, abs(got - y) / max(1.0, abs(y)))
    assert worst <= 1e-11


def test_the_polished_certificate_rechecks_and_tampering_is_rejected(polished: Any) -> None:
    rec = polished[0]
    data = rec.certificate()
    # Refined after the polish: the refined fit's parameter figure on every answer.
    assert data["result"]["parameter_error_estimate_kind"] == "refinement"
    assert len(data["answers"]["polish"]) == 9
    summary = " ".join(va.verify_certificate(data).summary)
    assert "9 polish" in summary
    # 159 answers and the refinement's 79
    assert "refinement on all 238 answers, recomputed" in summary
    # A count the rule does not give: rejected.
    bad = copy.deepcopy(data)
    bad["answers"]["polish"] = bad["answers"]["polish"][:-1]
    with pytest.raises(CertificateError, match="asks 9 random sequences or none"):
        va.verify_certificate(bad)
    # The polish answers dropped: the stated kind no longer fits the sizes.
    bad = copy.deepcopy(data)
    bad["answers"]["polish"] = []
    bad["queries"]["by_phase"].pop("polish")
    # (and the refinement's, whose count follows from the queries before it)
    del bad["answers"]["refinement"]
    bad["queries"]["by_phase"].pop("refinement")
    bad["queries"]["learning"] -= 9 + 79
    with pytest.raises(CertificateError, match="must be 'joint'"):
        va.verify_certificate(bad)
    # A polish answer moved: the claimed heads no longer reproduce it.
    bad = copy.deepcopy(data)
    bad["answers"]["polish"][3] = dump_number(load_number(bad["answers"]["polish"][3]) + 1e-3)
    with pytest.raises(CertificateError, match="learning answer"):
        va.verify_certificate(bad)


def test_an_unpolished_certificate_given_polish_answers_is_rejected() -> None:
    model, _ = _learned_box(8, 2, 0)
    data = learn_multi_head(va.Oracle(model, "float"), heads=2, seed=0).certificate()
    assert "polish" not in data["answers"]
    va.verify_certificate(data)
    bad = copy.deepcopy(data)
    bad["answers"]["polish"] = [dump_number(0.0)] * 18
    bad["queries"]["by_phase"]["polish"] = 18
    bad["queries"]["learning"] += 18
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
